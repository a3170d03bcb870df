"""What RL and SFT runs share: run directory, model and optimizer, resume, checkpoints, logs."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml
from rich.console import Console

from vlrl.config import Config, ConfigError, TrainerConfig, to_dict
from vlrl.datasets import Source
from vlrl.modeling import checkpoint_path, load_model, load_processor
from vlrl.trainer.checkpoint import list_checkpoints, load_trainer_state, restore_rng, rng_state, save_checkpoint
from vlrl.trainer.distributed import Processes
from vlrl.trainer.loader import MixtureStream
from vlrl.trainer.logs import RunLog
from vlrl.trainer.precision import MasterWeights
from vlrl.trainer.trackers import TrackedRun, check_trackers


@dataclass
class RunResult:
    run_dir: Path
    metrics: Path
    checkpoint: Path | None
    steps_done: int


def lr_factor(step: int, t: TrainerConfig) -> float:
    """Multiplier of t.lr at optimizer step `step` (0-based): warmup, then the schedule."""
    if step < t.warmup_steps:
        return (step + 1) / t.warmup_steps
    progress = (step - t.warmup_steps) / max(1, t.steps - t.warmup_steps)
    if t.lr_schedule == "linear":
        return max(0.0, 1.0 - progress)
    if t.lr_schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
    return 1.0


def resume_checkpoint(t: TrainerConfig, section: str) -> Path | None:
    checkpoints = Path(t.output_dir) / "checkpoints"
    if t.resume == "":
        if list_checkpoints(checkpoints):
            raise ConfigError(
                f"config: {section}.output_dir {t.output_dir} already holds checkpoints; "
                f"set {section}.resume=auto to continue that run, or choose another output_dir"
            )
        return None
    if t.resume == "auto":
        found = list_checkpoints(checkpoints)
        return found[-1] if found else None
    path = Path(t.resume)
    load_trainer_state(path)  # fails early, naming the path, if it is not a complete checkpoint
    return path


class Run:
    """A training run in `t.output_dir`: the policy, its optimizer and schedule, the data stream
    over the run's tasks, the sampling generator and the logs, restored from the latest
    checkpoint when resuming. With several processes (distributed.py) process 0 owns the run
    directory; each process draws `t.prompts_per_step / processes` of every step's prompts."""

    def __init__(self, cfg: Config, t: TrainerConfig, section: str, sources: list[Source], console: Console):
        self.t = t
        self.console = console
        self.procs = Processes.from_env()
        if t.prompts_per_step % self.procs.world:
            raise ConfigError(
                f"config: {section}.prompts_per_step ({t.prompts_per_step}) must divide evenly among "
                f"the {self.procs.world} training processes"
            )
        self.dir = Path(t.output_dir)
        resume_from = resume_checkpoint(t, section)
        check_trackers(t.report_to, section)  # a missing tracker package stops the run before the model loads
        if self.procs.main:
            self.dir.mkdir(parents=True, exist_ok=True)
            (self.dir / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
            errors = [err for source in sources for err in source.train.errors]
            if errors:
                (self.dir / "skipped_records.txt").write_text("".join(f"{err}\n" for err in errors))
        self.procs.barrier()  # the others see process 0's run directory, not a half-made one

        torch.manual_seed(t.seed)
        self.device = self.procs.device()
        self.base_path = checkpoint_path(cfg.model)
        self.processor = load_processor(cfg.model, self.base_path)
        self.pad_id: int = self.processor.tokenizer.pad_token_id  # pads prompts and completions in training forwards
        # Dropout stays off: the first ratio of an update is exactly 1, and rollouts match updates.
        self.model = load_model(cfg.model, str(resume_from) if resume_from else None, self.device).eval()
        trainable = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]
        self.params = [p for _, p in trainable]
        self.weights = MasterWeights(trainable, t.master_weights)  # what the optimizer steps
        self.optimizer = torch.optim.AdamW(self.weights.masters, lr=t.lr, weight_decay=t.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: lr_factor(s, t))
        self.stream = MixtureStream([len(s.train.samples) for s in sources], [s.weight for s in sources], t.seed)
        self.generator = torch.Generator(device=self.device).manual_seed(t.seed)
        self.step = 0
        self.consecutive_nonfinite = 0
        self.skipped_updates = 0
        self.checkpoint = resume_from
        if resume_from:
            state = load_trainer_state(resume_from)
            self.weights.load_state_dict(state["master_weights"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.scheduler.load_state_dict(state["scheduler"])
            self.stream.load_state_dict(state["stream"])
            restore_rng(state["rng"], self.generator)
            self.step = state["step"]
            self.consecutive_nonfinite = state["consecutive_nonfinite"]
            self.skipped_updates = state["skipped_updates"]
            console.print(f"resumed from {resume_from} (step {self.step})")
        if not self.procs.main:  # its own samples: a seed apart from process 0's, moved on by the step
            self.generator.manual_seed(t.seed + 1_000_003 * self.procs.rank + self.step)
        self.metrics_path = self.dir / "metrics.jsonl"
        self.logs = RunLog(TrackedRun(self.dir, section, to_dict(cfg), self.step), t, console, self.procs.main)

    def take(self, n: int) -> list[tuple[int, int]]:
        """This process's share of the next n prompts, (source, index) each; every process
        advances the stream by n, so the streams stay in step."""
        return self.procs.share(self.stream.take(n))

    def optimizer_step(self, loss_is_finite: bool) -> tuple[float, bool]:
        """Average the gradients across processes, clip, then step unless the loss or the
        gradient is not finite on any process. Returns (grad_norm, applied)."""
        self.weights.gradients_to_masters()
        self.procs.average_gradients(self.weights.masters)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.weights.masters, self.t.max_grad_norm))
        applied = self.procs.all_true(loss_is_finite and math.isfinite(grad_norm))
        if applied:
            self.optimizer.step()
            self.scheduler.step()  # the schedule counts optimizer steps taken
            self.weights.masters_to_model()
        self.weights.zero_grad()
        return grad_norm, applied

    def end_step(self, step: int, skipped: int) -> None:
        """Count skipped optimizer steps, stop after too many steps in a row had one, checkpoint on schedule."""
        self.step = step
        self.skipped_updates += skipped
        self.consecutive_nonfinite = self.consecutive_nonfinite + 1 if skipped else 0
        if self.consecutive_nonfinite >= self.t.max_consecutive_nonfinite:
            self.close()
            raise RuntimeError(
                f"stopped at step {step}: {self.consecutive_nonfinite} consecutive updates had a non-finite loss or "
                f"gradient (max_consecutive_nonfinite={self.t.max_consecutive_nonfinite}); no NaN weights were "
                f"written; last good checkpoint: {self.checkpoint}"
            )
        if step % self.t.save_every == 0 or step == self.t.steps:
            state = {
                "step": step,
                "optimizer": self.optimizer.state_dict(),
                "master_weights": self.weights.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "stream": self.stream.state_dict(),
                "rng": rng_state(self.generator),
                "consecutive_nonfinite": self.consecutive_nonfinite,
                "skipped_updates": self.skipped_updates,
            }
            if self.procs.main:
                self.checkpoint = save_checkpoint(
                    self.dir / "checkpoints", step, self.model, self.processor, state, self.t.keep_last
                )
            self.procs.barrier()
            if not self.procs.main:
                self.checkpoint = list_checkpoints(self.dir / "checkpoints")[-1]

    def close(self) -> RunResult:
        self.logs.close()
        return RunResult(self.dir, self.metrics_path, self.checkpoint, self.step)
