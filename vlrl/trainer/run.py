"""What RL and SFT runs share: run directory, model and optimizer, resume, checkpoints, logs."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import shutil
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.markup import escape

from vlrl.config import Config, ConfigError, ModelConfig, TrainerConfig, dump_config, first_line
from vlrl.data.stream import MixtureStream
from vlrl.models.checkpoints import KEPT_BASE
from vlrl.models.loading import checkpoint_path, load_model, load_processor
from vlrl.models.prompting import UnusableSample
from vlrl.parallel import make_strategy
from vlrl.parallel.distributed import Processes
from vlrl.tasking.sources import Source
from vlrl.trainer.budget import TokenBudget
from vlrl.trainer.checkpoint import (
    STEP_DIR,
    CheckpointError,
    checkpoint_step,
    is_checkpoint,
    keep_base,
    list_checkpoints,
    load_process_rng,
    load_trainer_state,
    prune,
    restore_rng,
    rng_state,
    set_aside_after,
    write_checkpoint,
)
from vlrl.trainer.history import (
    HISTORY_FILE,
    check_command,
    data_changes,
    data_fingerprints,
    file_changes,
    model_fingerprint,
    recorded_config,
    resume_changes,
    same_model,
    split_fingerprints,
)
from vlrl.trainer.logs import RunLog
from vlrl.trainer.stops import Diverged, StopSignals, Unwritable, os_failure
from vlrl.trainer.trackers import JsonlLog, TrackedRun, check_trackers, drop_steps_after

UNUSABLE_LOG = "skipped_samples.jsonl"  # samples whose media failed to decode during a step
REWARD_FAILURES_LOG = "reward_failures.jsonl"  # each step's rewards that raised or gave no number, and why
SAME_COMMAND = "run the same command again to resume"  # how a stopped run goes on, as a rule


@dataclass
class RunResult:
    run_dir: Path
    metrics: Path
    checkpoint: Path | None
    steps_done: int
    stopped_by: int = 0  # the signal that stopped the run early (stops.py); 0: it ran to the end
    main: bool = True  # process 0 (under torchrun the others return the same run)
    resume_hint: str = SAME_COMMAND  # how to go on after a stop (`resume_hint`)


def schedule_length(t: TrainerConfig, optimizer_steps_per_step: int = 1) -> int:
    """How many positions the lr schedule has: t.steps, or with t.lr_schedule_per
    "optimizer_step" (transformers' Trainer, OpenRLHF) t.steps x the optimizer steps of each."""
    return t.steps * (optimizer_steps_per_step if t.lr_schedule_per == "optimizer_step" else 1)


def lr_factor(position: int, t: TrainerConfig, optimizer_steps_per_step: int = 1) -> float:
    """Multiplier of t.lr at `position` (0-based) of the schedule (`schedule_length`), whose unit
    is a step, every optimizer step of it alike (as verl and EasyR1 step their scheduler once
    per update), or an optimizer step. Warmup rises from 0 (the first position's lr is 0), as
    transformers', verl's and EasyR1's schedulers do; then the schedule."""
    if position < t.warmup_steps:
        return position / t.warmup_steps
    length = schedule_length(t, optimizer_steps_per_step)
    progress = (position - t.warmup_steps) / max(1, length - t.warmup_steps)
    if t.lr_schedule == "linear":
        decay = max(0.0, 1.0 - progress)
    elif t.lr_schedule == "cosine":
        decay = 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    else:
        return 1.0
    floor = t.lr_min_ratio  # to it, not to 0: transformers' cosine_with_min_lr (min_lr_rate)
    return floor + (1.0 - floor) * decay


def schedule_note(t: TrainerConfig, section: str, optimizer_steps_per_step: int = 1) -> str | None:
    """What a run shortened to its warmup or below should hear: its lr never reaches t.lr (the
    schedule is kept as configured, as transformers' and verl's are, since a short trial run of a
    long recipe is the usual cause)."""
    length = schedule_length(t, optimizer_steps_per_step)
    if t.warmup_steps < length:
        return None
    if t.lr_schedule_per == "step":
        counted, last = f"{section}.steps ({t.steps})", "step"
    else:
        counted, last = f"the run's {length} optimizer steps ({section}.steps x {optimizer_steps_per_step})", "update"
    return (
        f"{section}.warmup_steps ({t.warmup_steps}) is not less than {counted}: the learning rate reaches "
        f"only {lr_factor(length - 1, t, optimizer_steps_per_step):.3g} x {section}.lr at the last {last}"
    )


SCHEDULE_KEYS = ("steps", "lr_schedule", "warmup_steps", "lr_min_ratio", "lr_schedule_per")  # what lr_factor reads


def resumed_schedule_note(
    t: TrainerConfig, section: str, changes: dict[str, dict], step: int, optimizer_steps_per_step: int = 1
) -> str | None:
    """What a resume at `step` whose `changes` (resume_changes') hold the run's steps should
    hear: the lr schedule spans the new total, so the lr it resumes with is not the one the
    checkpoint's settings gave (as transformers' Trainer, which builds its scheduler over the new
    total)."""
    if f"{section}.steps" not in changes:
        return None
    old = {key: changes[f"{section}.{key}"]["from"] for key in SCHEDULE_KEYS if f"{section}.{key}" in changes}
    factors = [
        lr_factor(step * (per if s.lr_schedule_per == "optimizer_step" else 1), s, per)
        for s, per in ((dataclasses.replace(t, **old), optimizer_steps_per_step), (t, optimizer_steps_per_step))
    ]
    if math.isclose(*factors):
        return None
    return (
        f"{section}.steps changed from {old['steps']} to {t.steps}: the {t.lr_schedule} lr schedule now spans the new "
        f"total, so step {step + 1} trains at {factors[1]:.3g} x {section}.lr, where the checkpoint's schedule was at "
        f"{factors[0]:.3g} x"
    )


def resume_checkpoint(t: TrainerConfig, section: str) -> Path | None:
    """The checkpoint a run goes on from. A given one that is not the run folder's own, where the
    folder has checkpoints of its own (a run started from another's checkpoint, rerun after a
    stop; or a timeline a rewind set aside), is not mixed into that folder's timeline: the run
    goes on from its own latest (`foreign_resume` says so)."""
    checkpoints = Path(t.output_dir) / "checkpoints"
    if t.resume == "":
        if list_checkpoints(checkpoints):
            raise ConfigError(
                f"config: {section}.output_dir {t.output_dir} already holds checkpoints; "
                f"set {section}.resume=auto to continue that run, or choose another output_dir"
            )
        return None
    own = list_checkpoints(checkpoints)
    if t.resume == "auto":
        return own[-1] if own else None
    if own and foreign_resume(t):  # also when the other run has pruned it since
        return own[-1]
    if not Path(t.resume).exists():  # a typo must not read as a finished run, or a run started afresh
        have = f"{checkpoints} holds {', '.join(p.name for p in own)}" if own else f"{checkpoints} holds none"
        raise ConfigError(f"config: {section}.resume {t.resume} does not exist ({have})")
    return Path(t.resume)


def resume_hint(t: TrainerConfig, section: str) -> str:
    """How to go on after a stop: the same command, unless it names a checkpoint of its own folder
    to resume from (a rewind), which would rewind again and set aside the steps trained since."""
    if t.resume in ("", "auto") or foreign_resume(t):
        return SAME_COMMAND
    return (
        f"run the command again with {section}.resume=auto to resume ({section}.resume={t.resume} would rewind again)"
    )


def foreign_resume(t: TrainerConfig) -> bool:
    """Whether trainer.resume names a checkpoint outside the run folder's own checkpoints."""
    if t.resume in ("", "auto"):
        return False
    return Path(t.resume).resolve().parent != (Path(t.output_dir) / "checkpoints").resolve()


def base_model_path(model: ModelConfig, t: TrainerConfig, section: str) -> str:
    """The directory a run reads its base model from: model.path's; for a resumed run whose
    model.path is gone (a checkpoint its own run pruned since), the base it kept in RUN/base
    (`checkpoint.keep_base`), model.path then pointed at it: called before the run's data is
    read, whose frame and prompts follow the model's family. Fails early, naming model.path,
    when there is neither."""
    try:
        return checkpoint_path(model)
    except ConfigError:
        kept = Path(t.output_dir) / KEPT_BASE
        if kept.is_dir() and resume_checkpoint(t, section) is not None:
            model.path = str(kept)
            return model.path
        raise


def finished_run(t: TrainerConfig, section: str, console: Console) -> RunResult | None:
    """The run in t.output_dir when it already took its t.steps: rerunning its command says so
    and stops before any data or model loads (None: there is a step to train)."""
    checkpoint = resume_checkpoint(t, section)
    match = STEP_DIR.match(checkpoint.name) if checkpoint is not None else None
    if match is None or int(match.group(1)) < t.steps:
        return None
    check_command(json.loads(load_trainer_state(checkpoint)["config"]), section, checkpoint)  # not "finished"
    step = int(match.group(1))
    main = int(os.environ.get("RANK", "0")) == 0
    if main:
        own = checkpoint.parent.resolve() == (Path(t.output_dir) / "checkpoints").resolve()
        if own and list_checkpoints(checkpoint.parent)[-1] == checkpoint:
            prune(checkpoint.parent, t.keep_last)  # a kill between its last save and that save's pruning
        whose = f"{escape(t.output_dir)} already finished: its checkpoint" if own else "the checkpoint to resume from,"
        console.print(
            f"{whose} {escape(str(checkpoint))} is step {step} of {section}.steps={t.steps}, so there is nothing to "
            f"train; raise {section}.steps to go on" + (f", or choose another {section}.output_dir" if own else ""),
            highlight=False,
        )
    run_dir = Path(t.output_dir)
    return RunResult(run_dir, run_dir / "metrics.jsonl", checkpoint, step, main=main)


@contextlib.contextmanager
def removed_if_unused(run_dir: Path) -> Iterator[None]:
    """A command that fails before it wrote results leaves no directory behind: one that it
    created and that holds no metrics and no checkpoint is removed (by process 0), and so are
    the folders made for it that nothing else went into (`vlrl eval`'s default runs/eval/...).
    Training logs metrics from its first step; evaluation writes its results at the end."""
    created = [path for path in (run_dir, *run_dir.parents) if not path.exists()]  # the run's folder first
    try:
        yield
    except BaseException:
        metrics = run_dir / "metrics.jsonl"
        logged = (metrics.is_file() and metrics.stat().st_size > 0) or list_checkpoints(run_dir / "checkpoints")
        if created and not logged and int(os.environ.get("RANK", "0")) == 0:
            shutil.rmtree(run_dir, ignore_errors=True)
            for parent in created[1:]:
                with contextlib.suppress(OSError):  # not empty (or gone): kept
                    parent.rmdir()
        raise


class Run:
    """A training run in `t.output_dir`: the policy, its optimizer and schedule, the data stream
    over the run's tasks, the sampling generator and the logs, restored from the latest
    checkpoint when resuming. With several processes (distributed.py) process 0 owns the run
    directory; each process draws `t.prompts_per_step / processes` of every step's prompts.
    How the model is spread over the processes is the strategy's (vlrl/parallel/)."""

    def __init__(
        self,
        cfg: Config,
        t: TrainerConfig,
        section: str,
        sources: list[Source],
        console: Console,
        optimizer_steps_per_step: int = 1,
    ):
        self.t = t
        self.console = console
        self.procs = Processes.from_env()
        if t.prompts_per_step % self.procs.world:
            raise ConfigError(
                f"config: {section}.prompts_per_step ({t.prompts_per_step}) must divide evenly among "
                f"the {self.procs.world} training processes"
            )
        self.dir = Path(t.output_dir)
        self.resume_hint = resume_hint(t, section)
        if (note := schedule_note(t, section, optimizer_steps_per_step)) and self.procs.main:
            console.print(f"[yellow]note:[/yellow] {note}", highlight=False)
        resume_from = resume_checkpoint(t, section)
        check_trackers(t.report_to, section)  # a missing tracker package stops the run before the model loads
        state = load_trainer_state(resume_from) if resume_from else None  # refuses what is not data
        config = recorded_config(cfg, section)
        saved = json.loads(state["config"]) if state else {}
        given = saved.get("model", {}).get("path") if cfg.model.path == str(self.dir / KEPT_BASE) else None
        if given:  # model.path gone, its kept base read instead (base_model_path): the same setting
            config["model"]["path"] = given
        changes = resume_changes(config, saved, section, resume_from) if state else {}
        if state and self.procs.main:
            if note := resumed_schedule_note(t, section, changes, int(state["step"]), optimizer_steps_per_step):
                console.print(f"[yellow]note:[/yellow] {escape(note)}", highlight=False)
        # The files of the config's reward functions: a resumed run scores as its steps so far did.
        self.reward_files = data_fingerprints(
            sorted({r.file for s in sources for r in s.task.config_rewards.values() if r.file})
        )
        changed = file_changes(self.reward_files, state.get("reward_files", [])) if state else {}
        if changed:
            path, change = next(iter(changed.items()))
            raise ConfigError(
                f"config: the reward function file {path} changed since the checkpoint {resume_from} was saved "
                f"(sha256 {change['from'][:12]}... -> {change['to'][:12]}...): a resumed run must score as its earlier "
                f"steps did; restore the file, or start a new run in another {section}.output_dir"
            )
        with self.procs.main_first():  # a folder process 0 cannot make stops every process
            try:
                self.dir.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise ConfigError(
                    f"config: {section}.output_dir {self.dir} cannot be created: {err.strerror or err}"
                ) from err

        torch.manual_seed(t.seed)
        self.device = self.procs.device()
        self.base_path = self._base(cfg.model, resume_from is not None, section, given)
        self.base_model = model_fingerprint(self.base_path)
        if state and not same_model(state.get("base_model", {}), self.base_model):  # older checkpoints: none kept
            raise ConfigError(
                f"config: the model at model.path {cfg.model.path} ({self.base_path}) is not the one {resume_from} "
                "was trained from (its config or its weights differ): the processor, the reference model and "
                f"LoRA's base come from it; put that model back, or start a new run in another {section}.output_dir"
            )
        self.processor = load_processor(cfg.model, self.base_path)
        self.pad_id: int = self.processor.tokenizer.pad_token_id  # pads prompts and completions in training forwards
        self.lean_forward = cfg.model.lean_forward  # the update's completion forwards through the lean step
        self.strategy = make_strategy(t, section, self.procs)
        # Dropout stays off: the first ratio of an update is exactly 1, and rollouts match updates.
        self.model = self.strategy.wrap(self._policy(cfg.model, resume_from).eval())
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.budget = TokenBudget.of_run(t, section, self.procs, self.strategy, console)
        self.optimizer = self.strategy.build_optimizer(t.lr, t.weight_decay)
        self._apply_betas()
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda position: lr_factor(position, t, optimizer_steps_per_step)
        )
        self.stream = MixtureStream([len(s.train.samples) for s in sources], [s.weight for s in sources], t.seed)
        self.generator = torch.Generator(device=self.device).manual_seed(t.seed)
        self.step = 0
        self.optimizer_steps = 0  # over the run, skipped ones included (as the Trainer's global_step)
        self.consecutive_nonfinite = 0
        self.skipped_updates = 0
        self.checkpoint = resume_from
        self.config = config
        self.data = split_fingerprints([(s.train.path, s.task.split) for s in sources])
        data_changed = {}
        if state:
            try:
                self.strategy.load(resume_from, state)
                self.scheduler.load_state_dict(state["scheduler"])
                self.stream.load_state_dict(state["stream"])
            except ValueError as err:
                raise ConfigError(f"cannot resume from {resume_from}: {err}") from err
            self._apply_schedule()  # the config's lr and weight decay, not the checkpoint's
            restore_rng(state["rng"], self.generator)
            self.step = state["step"]
            # a checkpoint from before the count: as many a step as the options give
            self.optimizer_steps = state.get("optimizer_steps", self.step * optimizer_steps_per_step)
            self.consecutive_nonfinite = state["consecutive_nonfinite"]
            self.skipped_updates = state["skipped_updates"]
            data_changed = data_changes(self.data, state["data"])
            if self.procs.main:
                console.print(f"resumed from {resume_from} (step {self.step})")
                if foreign_resume(t) and resume_from != Path(t.resume):
                    console.print(
                        f"[yellow]note:[/yellow] {section}.resume {escape(t.resume)} is not a checkpoint of the run in "
                        f"{escape(t.output_dir)}, which has its own: it goes on from its latest (as the same command "
                        f"does after a stop). To go on from {escape(t.resume)} instead, give it a folder of its own: "
                        f"{section}.output_dir=NEW",
                        highlight=False,
                        soft_wrap=True,
                    )
        with self.procs.together():  # a process's own file refused stops every process
            if not self.procs.main:  # its own samples: a seed apart from process 0's
                own = load_process_rng(resume_from, self.procs.rank) if resume_from else None
                if own is not None:
                    restore_rng(own, self.generator)
                else:  # a new run, or a checkpoint written by fewer processes: moved on by the step
                    self.generator.manual_seed(t.seed + 1_000_003 * self.procs.rank + self.step)
        self.metrics_path = self.dir / "metrics.jsonl"
        self.unusable: JsonlLog | None = None
        self.reward_failures: JsonlLog | None = None
        self.rewards_said: set[str] = set()  # rewards whose failing was said on the console
        try:
            with self.procs.together():  # process 0 cuts the logs back; a full disk stops every process
                if self.procs.main:
                    self._record_start(sources, changes, data_changed)
        except OSError as err:
            raise Unwritable(
                f"{os_failure(err)}: the run's logs in {self.dir} cannot be written at its start; make "
                f"room, then {self.resume_hint}"
            ) from err
        if self.procs.main:
            self.unusable = JsonlLog(self.dir / UNUSABLE_LOG)
            self.reward_failures = JsonlLog(self.dir / REWARD_FAILURES_LOG)
        # metrics.jsonl, samples.jsonl and the trackers (written by process 0), and the progress; a
        # tracker that does not start stops every process, and the others see process 0's run
        # directory, not a half-made one
        with self.procs.together():
            self.logs = RunLog(TrackedRun(self.dir, section, self.config, self.step), t, console, self.procs.main)
        self.stop_signals = StopSignals(self.dir / "checkpoints")
        self.stopped_by = 0
        # This process's own states that a checkpoint keeps (name -> its state, as tensors and
        # plain values): the RL loop's replay buffer
        self.process_parts: dict[str, Callable[[], dict[str, Any]]] = {}

    def _apply_betas(self) -> None:
        """trainer.adam_betas into the optimizer's groups (a plugin strategy's optimizer without
        betas, SGD say, is left as it is)."""
        for group in self.optimizer.param_groups:
            if "betas" in group:
                group["betas"] = tuple(self.t.adam_betas)

    def _apply_schedule(self) -> None:
        """Loading the optimizer and scheduler states brings back the checkpoint's learning rate,
        weight decay and betas; a resumed run uses the config's, from the step it resumes at."""
        self._apply_betas()
        groups = self.optimizer.param_groups
        for group in groups:
            group["initial_lr"], group["weight_decay"] = self.t.lr, self.t.weight_decay
            group["lr"] = self.t.lr * self.scheduler.lr_lambdas[0](self.scheduler.last_epoch)
        self.scheduler.base_lrs = [self.t.lr] * len(groups)
        self.scheduler._last_lr = [group["lr"] for group in groups]

    def _record_start(self, sources: list[Source], changes: dict[str, dict], data_changed: dict[str, dict]) -> None:
        """Process 0: the logs cut back to the resumed step (torn lines dropped and reported), what
        changed since the checkpoint warned about and recorded, the config in effect written."""
        logs = ("samples.jsonl", UNUSABLE_LOG, REWARD_FAILURES_LOG, HISTORY_FILE)
        for path in (self.metrics_path, *(self.dir / name for name in logs)):
            for report in drop_steps_after(path, self.step):
                self.console.print(f"[yellow]repaired[/yellow] {escape(report)}", highlight=False)
        if moved := set_aside_after(self.dir, self.step):
            self.console.print(
                f"[yellow]rewound to step {self.step}:[/yellow] the run's later checkpoints "
                f"({', '.join(p.name for p in moved)}) moved to {escape(str(moved[0].parent))}, kept but never resumed "
                "from; the logs after it were cut back",
                highlight=False,
            )
        for key, change in changes.items():
            self.console.print(
                f"[yellow]changed from step {self.step + 1}:[/yellow] {key}: {escape(repr(change['from']))} -> "
                f"{escape(repr(change['to']))} (recorded in {HISTORY_FILE})",
                highlight=False,
            )
        for path in data_changed:
            self.console.print(
                f"[yellow]warning:[/yellow] the training data {escape(path)} changed since the checkpoint of step "
                f"{self.step} was saved; the run goes on with the new contents (recorded in {HISTORY_FILE})",
                highlight=False,
            )
        if changes or data_changed:
            with open(self.dir / HISTORY_FILE, "a", encoding="utf-8") as handle:
                entry = {"step": self.step + 1, "changes": changes, "data_changed": data_changed}
                handle.write(json.dumps(entry) + "\n")
        header = (
            f"# the settings in effect from step {self.step + 1}; earlier values: {HISTORY_FILE}\n" if self.step else ""
        )
        (self.dir / "config.yaml").write_text(header + dump_config(self.config))
        errors = [err for source in sources for err in source.train.errors]
        if errors:
            (self.dir / "skipped_records.txt").write_text("".join(f"{err}\n" for err in errors))

    def _base(self, model: ModelConfig, resuming: bool, section: str, gone: str | None) -> str:
        """The run's base model directory. A new run from another run's checkpoint keeps that
        checkpoint's files in RUN/base and reads them there (model.path is set to it, so that the
        policy, the reference, the engine and a LoRA adapter's recorded base all name it), so
        pruning or deleting that run never stops this one resuming or being evaluated. `gone`:
        the model.path a resumed run found gone (it reads RUN/base, base_model_path)."""
        path = base_model_path(model, self.t, section)
        kept = self.dir / KEPT_BASE
        own = Path(path).resolve() == kept.resolve()  # model.path is this run's RUN/base itself
        if not resuming and not own:
            with self.procs.main_first():
                if self.procs.main and is_checkpoint(Path(path)):
                    if why := keep_base(Path(path), kept):
                        self.console.print(
                            f"[yellow]note:[/yellow] model.path {escape(model.path)} is a checkpoint of another run, "
                            f"which may prune it (keep_last); it could not be linked into {escape(str(kept))} "
                            f"({escape(why)}): keep it while this run resumes or is evaluated",
                            highlight=False,
                            soft_wrap=True,
                        )
                elif self.procs.main:
                    shutil.rmtree(kept, ignore_errors=True)  # an earlier start's, from another model
            if kept.is_dir():
                path = model.path = str(kept)
        if gone and self.procs.main:
            self.console.print(
                f"model.path {escape(gone)} is gone; the run reads the base it kept, {escape(path)}",
                highlight=False,
                soft_wrap=True,
            )
        return path

    def load(self, model: ModelConfig, path: str | None) -> torch.nn.Module:
        """A model (`path`; None: model.path) as this run's strategy wraps it: on its load device,
        copied out of the checkpoint file unless wrapping copies it (`Strategy.copies_weights`)."""
        return load_model(model, path, self.strategy.load_device, own_memory=not self.strategy.copies_weights)

    def _policy(self, model: ModelConfig, checkpoint: Path | None) -> torch.nn.Module:
        """The policy, from the checkpoint resumed (None: model.path); a checkpoint whose model
        files are gone or damaged (its trainer state read) is a CheckpointError naming it."""
        try:
            return self.load(model, str(checkpoint) if checkpoint else None)
        except (OSError, ValueError) as err:
            if checkpoint is None:
                raise
            raise CheckpointError(
                f"{checkpoint} has its trainer state but its model does not load ({first_line(err)}); resume from an "
                "earlier checkpoint with trainer.resume=PATH, or move this one away"
            ) from err

    def take(self, n: int) -> list[tuple[int, int]]:
        """This process's share of the next n prompts, (source, index) each; every process
        advances the stream by n, so the streams stay in step."""
        return self.procs.share(self.stream.take(n))

    def report_unusable(self, step: int, skipped: list[UnusableSample]) -> int:
        """The samples left out of this step because their media failed to decode, on any process:
        printed and logged (skipped_samples.jsonl) by process 0; returns how many. Every process
        calls it once a step (it gathers across processes)."""
        everyone = self.procs.gather([(err.source, err.message) for err in skipped])
        with self.writing_logs(step):
            for source, reason in everyone if self.procs.main else []:
                self.console.print(
                    f"[yellow]skipped sample[/yellow] {escape(source)}: {escape(reason)}", highlight=False
                )
                self.unusable.write({"step": step, "source": source, "reason": reason})  # type: ignore[union-attr]
        return len(everyone)

    def report_reward_failures(self, step: int, completions: int, failed: dict[str, tuple[int, str]]) -> None:
        """The rewards that raised or gave no finite number at step `step`, on any process (`failed`:
        name -> (values replaced by 0, the first one's reason), of this process's `completions`):
        one line each in reward_failures.jsonl, and said on the console the first time a reward
        fails in the run (a reward of yours that always raises would otherwise train silently at 0).
        Every process calls it once a step (it gathers across processes)."""
        totals: dict[str, list] = {}
        everyone = self.procs.gather([(completions, failed)])
        for _, part in everyone:
            for name, (n, reason) in part.items():
                totals.setdefault(name, [0, reason])[0] += n
        scored = sum(count for count, _ in everyone)
        with self.writing_logs(step):
            for name, (n, reason) in totals.items() if self.procs.main else []:
                self.reward_failures.write({"step": step, "reward": name, "failures": n, "of": scored, "first": reason})  # type: ignore[union-attr]
                if name not in self.rewards_said:
                    self.rewards_said.add(name)
                    self.console.print(
                        f"[yellow]warning:[/yellow] reward {escape(name)} raised or gave no finite number on {n} of "
                        f"{scored} completions at step {step}; they score 0 on it. The first: {escape(reason)} "
                        f"(every step's: {REWARD_FAILURES_LOG}, and reward_failures/{escape(name)} in metrics.jsonl)",
                        highlight=False,
                        soft_wrap=True,
                    )

    def optimizer_step(self, loss_is_finite: bool) -> tuple[float, bool]:
        """Reduce the gradients across processes, clip, then step unless the loss or the
        gradient is not finite on any process. Returns (grad_norm, applied)."""
        grad_norm = self.strategy.clip_gradients(self.t.max_grad_norm)
        applied = self.procs.all_true(loss_is_finite and math.isfinite(grad_norm))
        if applied:
            self.optimizer.step()
            self.strategy.after_step()
        self.strategy.zero_grad()
        self.optimizer_steps += 1
        if self.t.lr_schedule_per == "optimizer_step":  # skipped or not, as DeepSpeed's bf16 engine and the Trainer
            self._advance_schedule()
        return grad_norm, applied

    def _advance_schedule(self) -> None:
        with warnings.catch_warnings():  # a first update skipped as non-finite is said by the run, not by torch
            warnings.filterwarnings("ignore", r"Detected call of `lr_scheduler\.step\(\)` before", UserWarning)
            self.scheduler.step()

    def check_sampled(self, step: int, logprobs: torch.Tensor | None, mask: torch.Tensor) -> None:
        """Stop the run (every process) if step `step`'s samples have a non-finite log-prob under the
        policy that drew them (`logprobs`, None: the engine gave none): its weights diverged in the
        update before (finite loss and gradient, too large a step), and every later rollout would
        sample noise. The checkpoint of the step before holds those weights; an earlier one does not."""
        finite = logprobs is None or bool(torch.isfinite(logprobs[mask.bool()]).all())
        if self.procs.all_true(finite):
            return
        if step == 1:
            raise Diverged(
                "stopped at step 1: the model at model.path gives non-finite log-probs on its own samples, before "
                "any update (its weights, or a model.dtype too narrow for them)"
            )
        kept = list_checkpoints(self.dir / "checkpoints")
        earlier = [c for c in kept if checkpoint_step(c) < step - 1]
        bad = kept and checkpoint_step(kept[-1]) == step - 1
        holds = f" The checkpoint {kept[-1]} holds those weights." if bad else ""
        resume = (
            f"resume from {earlier[-1]} with a lower learning rate: trainer.resume={earlier[-1]} trainer.lr=..."
            if earlier
            else "no earlier checkpoint is kept: start again with a lower trainer.lr"
        )
        raise Diverged(
            f"stopped at step {step}: the policy gives non-finite log-probs on its own samples, so its weights "
            f"diverged in the update of step {step - 1} (its loss and gradient were finite: too large a step)."
            f"{holds} Nothing of step {step} was trained; {resume}"
        )

    @contextlib.contextmanager
    def closed_on_error(self) -> Iterator[None]:
        """The logs and trackers closed if the block raises, whatever it raises, the tracked run
        shown as failed: every line logged is kept (TensorBoard holds events until it is closed,
        and a process of several ends without the interpreter's cleanup)."""
        try:
            yield
        except BaseException:
            with contextlib.suppress(Exception):  # the error that ended the run is the one to say
                self.close(failed=True)
            raise

    @contextlib.contextmanager
    def running(self, label: str, fields: Sequence[str]) -> Iterator[None]:
        """Around the training loop: stop signals caught (the step ends, is checkpointed, and the
        loop with it), progress shown with `fields`, the logs and trackers closed on an error."""
        with self.closed_on_error(), self.stop_signals, self.logs.showing_progress(label, fields):
            yield

    def log_step(self, metrics: dict[str, Any], samples: list[dict] | None = None) -> None:
        """The step's metrics.jsonl line (samples.jsonl, trackers, progress): every process calls it.
        Once the update ran out of memory, the token budget it went on with (trainer/budget.py)."""
        if self.budget.tokens != self.t.token_budget:
            metrics = {**metrics, "token_budget": self.budget.tokens}
        with self.writing_logs(int(metrics["step"])):
            self.logs.log(metrics, samples or ())

    @contextlib.contextmanager
    def writing_logs(self, step: int) -> Iterator[None]:
        """Around writing the run's logs (process 0 writes; every process enters): a write that
        fails (a full disk) stops the run at once on every process, in one line naming the file
        and the checkpoint a rerun resumes from, not a traceback on one and a hang on the others."""
        try:
            with self.procs.together():
                yield
        except OSError as err:
            resume = f"{self.checkpoint} is intact" if self.checkpoint else "no checkpoint was written yet"
            raise Unwritable(
                f"stopped at step {step}: {os_failure(err)} (the run's logs cannot be written); step {step} "
                f"is not checkpointed and {resume}: make room, then {self.resume_hint}"
            ) from err

    def end_step(self, step: int, skipped: int) -> bool:
        """Count skipped optimizer steps, stop after too many steps in a row had one, checkpoint
        on schedule. Returns True when a stop signal came (on any process): the step is then
        checkpointed and the loop ends (the last step ends it anyway: no stop is reported)."""
        self.step = step
        if self.t.lr_schedule_per == "step":
            self._advance_schedule()
        self.skipped_updates += skipped
        self.consecutive_nonfinite = self.consecutive_nonfinite + 1 if skipped else 0
        if self.consecutive_nonfinite >= self.t.max_consecutive_nonfinite:
            raise Diverged(
                f"stopped at step {step}: {self.consecutive_nonfinite} steps in a row skipped an update for a non-finite loss "
                f"or gradient (max_consecutive_nonfinite={self.t.max_consecutive_nonfinite}); no NaN weights were "
                f"written; last good checkpoint: {self.checkpoint}"
            )
        # every process stops after this step; a stop during the last step finds the run finished
        # (all its steps done and checkpointed: nothing to resume, exit 0)
        self.stopped_by = self.procs.max(self.stop_signals.received) if step < self.t.steps else 0
        if step % self.t.save_every == 0 or step == self.t.steps or self.stopped_by:
            self.save(step)
        return bool(self.stopped_by)

    def save(self, step: int) -> None:
        """Checkpoint the run after `step` (every process takes part: checkpoint.py), its logs
        up to that step on the disk first."""
        with self.writing_logs(step):
            self.logs.sync()
        state = {
            "step": step,
            "optimizer_steps": self.optimizer_steps,
            "scheduler": self.scheduler.state_dict(),
            "stream": self.stream.state_dict(),
            "rng": rng_state(self.generator),
            "consecutive_nonfinite": self.consecutive_nonfinite,
            "skipped_updates": self.skipped_updates,
            "config": json.dumps(self.config),
            "data": self.data,
            "reward_files": self.reward_files,
            "base_model": self.base_model,
            **self.strategy.trainer_state(),
        }
        self.checkpoint = write_checkpoint(
            self.dir / "checkpoints",
            step,
            state,
            self.strategy,
            self.processor,
            self.procs,
            self.generator,
            self.t.keep_last,
            {name: state() for name, state in self.process_parts.items()},
        )

    def close(self, failed: bool = False) -> RunResult:
        """The run's logs closed and what it did; `failed`: an error ended it (`running`)."""
        for log in (self.unusable, self.reward_failures):
            if log is not None:
                log.close()
        self.logs.close(failed)
        return RunResult(
            self.dir, self.metrics_path, self.checkpoint, self.step, self.stopped_by, self.procs.main, self.resume_hint
        )
