"""`vlrl train | sft | eval | score | data | tasks | config | plot | plan | export | tiny-model`: the command line."""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import re
import signal
import sys
import textwrap
import traceback
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from vlrl.config import (
    MODEL_PATH_MISSING,
    Config,
    ConfigError,
    MixtureEntry,
    Restored,
    TrainerConfig,
    dump_config,
    load_config,
    read_config_file,
)
from vlrl.data.records import RecordError
from vlrl.trainer.stops import Diverged, Terminated, Unwritable, exit_status, terminated_as_interrupt

console = Console(soft_wrap=True)  # messages name files and keys: never break them mid-word


def _add_config_args(
    parser: argparse.ArgumentParser, example: str = "trainer.lr=1e-5 rollout.num_generations=4"
) -> None:
    parser.add_argument("--config", help="YAML config file (see configs/)")
    parser.add_argument("overrides", nargs="*", help=f"dotted overrides, e.g. {example}")


# vlrl.models.tiny.SHAPES' names, which --shape takes (that module imports torch: not at startup)
SHAPE_NAMES = (
    "qwen2.5-vl-3b",
    "qwen2.5-vl-7b",
    "qwen2-vl-2b",
    "qwen3-vl-8b",
    "qwen3-vl-30b-a3b",
    "qwen3.5-27b",
    "qwen3.5-35b-a3b",
)

# The config sections each training loop reads; a key of the other loop does nothing there.
LOOP_SECTIONS = {
    "train": ("model", "data", "task", "mixture", "rollout", "algo", "trainer", "eval"),
    "sft": ("model", "data", "task", "mixture", "sft"),
}
TRAIN_EPILOG = (
    "Keys that apply: model.*, data.*, task.*, mixture, rollout.*, algo.*, trainer.* and eval.* "
    "(eval.every: held-out evaluation during training). sft.* is vlrl sft's: set here, it only draws a warning."
)
SFT_EPILOG = (
    "Keys that apply: model.*, data.*, task.*, mixture and sft.*, which holds the same fields as trainer.* "
    "(sft.steps, sft.lr, sft.prompts_per_step, sft.output_dir, sft.save_every, sft.report_to, ...). "
    "trainer.*, rollout.*, algo.* and eval.* are vlrl train's: set here, they draw a warning (rollout.* and eval.* "
    "are recorded in config.yaml, for vlrl eval of the checkpoints)."
)


def _warn_other_loop(command: str, overrides: list[str]) -> None:
    """`vlrl sft trainer.steps=50` used to run sft.steps in silence: name the key that applies."""
    other = "sft" if command == "train" else "train"
    for text in overrides:
        key = text.partition("=")[0].strip()
        section, _, rest = key.partition(".")
        if section in LOOP_SECTIONS[command] or section not in LOOP_SECTIONS[other]:
            continue
        twin = {"sft": "trainer", "trainer": "sft"}.get(section)
        shared = rest.partition(".")[0] in {f.name for f in dataclasses.fields(TrainerConfig)}  # sft.turn_end is not
        hint = f"; {twin}.{rest} is the key that applies here" if twin and rest and shared else ""
        if command == "sft" and section in ("rollout", "eval"):  # history.USED_SECTIONS["sft"]
            hint = "; it is recorded in config.yaml, for `vlrl eval` of the run's checkpoints"
        console.print(
            f"[yellow]warning:[/yellow] {escape(key)} is read by vlrl {other}, not by vlrl {command}: "
            f"it has no effect on training{hint}",
            highlight=False,
        )


def _config(args: argparse.Namespace, **preset) -> Config:
    return load_config(args.config, args.overrides, {k: v for k, v in preset.items() if v is not None})


def _main_process() -> bool:
    """Process 0 of a torchrun launch, or the only process: the one that prints."""
    return int(os.environ.get("RANK", "0")) == 0


def _quiet_transformers() -> None:
    """vlrl shows its own progress; keep the output readable. (Imported only by the commands
    that load a model: `vlrl tasks list` stays fast without torch.)"""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def _print_run(result) -> int:
    """After a stop signal (every process says where it stopped), the exit status 128 + its
    number (stops.py); the run's files, printed by process 0 only under torchrun."""
    if result.stopped_by:
        console.print(
            f"stopped by {signal.Signals(result.stopped_by).name} after step {result.steps_done}; "
            f"{result.resume_hint} from the checkpoint"
        )
    status = exit_status(result.stopped_by) if result.stopped_by else 0
    if not result.main:
        return status
    console.print(f"run directory: {result.run_dir}")
    console.print(f"metrics:       {result.metrics}")
    console.print(f"checkpoint:    {result.checkpoint}")
    return status


def cmd_train(args: argparse.Namespace) -> int:
    _warn_other_loop("train", args.overrides)
    cfg = _config(args, **{"task.name": args.task})  # a mistyped key is said before torch loads (~7 s)
    from vlrl.trainer.rl import train
    from vlrl.trainer.run import removed_if_unused

    _quiet_transformers()
    with removed_if_unused(Path(cfg.trainer.output_dir)):
        return _print_run(train(cfg, console))


def cmd_sft(args: argparse.Namespace) -> int:
    _warn_other_loop("sft", args.overrides)
    cfg = _config(args, **{"task.name": args.task})  # a mistyped key is said before torch loads
    from vlrl.trainer.run import removed_if_unused
    from vlrl.trainer.sft import train_sft

    _quiet_transformers()
    with removed_if_unused(Path(cfg.sft.output_dir)):
        return _print_run(train_sft(cfg, console))


def frame_note(cfg: Config) -> str:
    """Which coordinate frame completions are read in, and why: a wrong frame scores every box wrong."""
    from vlrl.models.families import model_family
    from vlrl.models.loading import frame_kind

    m = cfg.model
    kind = frame_kind(m)
    family = model_family(m)
    what = {
        "absolute": (
            f"pixels of the image smart-resized to model.min_pixels..max_pixels = {m.min_pixels}..{m.max_pixels} "
            f"in multiples of {family.factor} ({family.label})"
        ),
        "norm1000": "0-1000 normalized coordinates (Qwen2-VL, Qwen3-VL, Qwen3.5)",
        "original": "pixels of the original image",
    }[kind]
    if m.coord_frame != "auto":
        why = f"model.coord_frame={kind}"
    elif m.family != "auto":
        why = f"model.coord_frame=auto, the frame of model.family={m.family}"
    elif m.path:
        why = f"model.coord_frame=auto, from model.path {m.path} ({family.label})"
    else:
        why = "model.coord_frame=auto and no model.path: Qwen2.5-VL's frame"
    return f"coordinates read in the {kind} frame: {what}; {why} (set model.coord_frame=absolute, norm1000 or original)"


def _print_first(notes: list[str], label: str, rest: str, shown: int = 10) -> None:
    """The first `shown` of `notes`, each after `label`, then how many more there were."""
    for note in notes[:shown]:
        console.print(f"[yellow]{label}[/yellow] {escape(note)}", highlight=False)
    if len(notes) > shown:
        console.print(f"[yellow]... {len(notes) - shown} more {rest}[/yellow]")


def writable(text: str, flag: str, folder: bool = False) -> Path:
    """Where a command writes (a file, or a `folder`), checked before its work: a ConfigError
    naming `flag` when it is the other kind, or lies under a file or a folder it cannot write."""
    path = Path(text)
    if path.exists() and path.is_dir() != folder:
        kind = "folder" if folder else "file"
        raise ConfigError(f"{flag} {path} is {'a file' if folder else 'a folder'}; give the {kind} to write")
    nearest = next(p for p in path.parents if p.exists())
    if not nearest.is_dir() or not os.access(nearest, os.W_OK):
        raise ConfigError(f"{flag} {path} cannot be written: {nearest} is not a folder this user may write in")
    return path


def cmd_score(args: argparse.Namespace) -> int:
    from vlrl.eval.layout import samples_file_task
    from vlrl.tasking.registry import eval_task
    from vlrl.tasking.scoring import score_file
    from vlrl.tasking.sources import columns_for, load_task_split

    if not (args.task or args.config or any(o.startswith(("task.name=", "mixture")) for o in args.overrides)):
        raise ConfigError("name the task whose rewards score the completions: --task NAME (or a --config that sets it)")
    preset: dict[str, Any] = {"task.name": args.task}
    if args.config and args.task and args.task != read_config_file(args.config).get("task", {}).get("name"):
        preset = {"task": {"name": args.task}}  # the config's task options are another task's
    cfg = _config(args, **preset)
    entries = cfg.tasks()
    if not args.task and len(entries) > 1:
        names = ", ".join(entry.name for entry in entries)
        raise ConfigError(f"the config's mixture holds several tasks ({names}): name the one to score with --task")
    # the config's settings of the task (a mixture's entry, or `task`): its rewards and options
    entry = cfg.task_settings(args.task) if args.task else entries[0]
    task = eval_task(entry or MixtureEntry(args.task), "", cfg)  # outputs of any model: no family's class
    writable(args.out, "--out")
    if not Path(args.completions).is_file():  # said before the data is read
        raise ConfigError(f"--completions {args.completions} is not a file: give the model outputs to score")
    if task.states_coordinates:
        console.print(frame_note(cfg), markup=False, highlight=False)
    columns = columns_for(entry.columns, args.data) if entry else {}
    split = load_task_split(task, cfg, "eval", console, require_images=False, path=args.data, columns=columns)
    for flag, read in (("--completions", args.completions), ("data", split.path)):
        if Path(read).is_file() and Path(read).resolve() == Path(args.out).resolve():
            raise ConfigError(f"--out {args.out} is the {flag} file this command reads; give another --out")
    result = score_file(
        task, split.samples, args.completions, args.out, cfg.eval.reasoning_tags, in_order=not split.errors
    )
    _print_first(result.problems, "skipped", "skipped completions")
    _print_first(result.zeroed, "scored 0:", "scored 0")
    _print_first(result.repeated, "repeated:", "ids with several completions (each scored: the metrics average them)")
    _print_first(result.foreign, "another target:", "lines stating another target (each scored)")
    named = samples_file_task(args.completions)
    if named and named != task.name:
        console.print(
            f"[yellow]--completions {escape(args.completions)} is named as the samples of task {escape(named)}; "
            f"scored as {task.name}[/yellow]",
            highlight=False,
        )
    if not result.scored:  # a file of no completions, or of none that name a record: nothing measured
        console.print(f"[red]no completion of {escape(args.completions)} was scored[/red]", highlight=False)
        return 1
    table = Table(title=f"{task.name}: {result.scored} completions scored -> {args.out}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    if task.reward_weights:  # a benchmark has metrics only
        table.add_row("mean reward", f"{result.mean_reward:.4f}")
    for name, value in result.metrics.items():
        table.add_row(name, f"{value:.4f}")
    console.print(table)
    return 0


def run_config(checkpoint: str | None) -> Path | None:
    """RUN/config.yaml when `checkpoint` is RUN/checkpoints/step-N of a vlrl run: the settings
    (image budget, answer length, task variant) the model was trained and evaluated with."""
    if not checkpoint:
        return None
    path = Path(checkpoint)
    saved = path.parent.parent / "config.yaml"
    return saved if path.parent.name == "checkpoints" and saved.is_file() and path.is_dir() else None


def settings_of_checkpoint(checkpoint: str, saved: Path, sections: tuple[str, ...] = ()) -> Restored | None:
    """The settings `checkpoint` of a run was trained with that differ from its RUN/config.yaml
    (`saved`, the latest: the run changed them after that step), as dotted keys (only those under
    `sections`, when given), said on the console. A change that no dotted key restores (a key
    added since, a list of mappings such as rollout.stages) is said and left as config.yaml has it."""
    from vlrl.trainer.checkpoint import STEP_DIR
    from vlrl.trainer.history import HISTORY_FILE, settings_at

    step = STEP_DIR.match(Path(checkpoint).name)
    if step is None:  # RUN/checkpoints/final, a link: no step to compare with
        return None
    then = settings_at(saved.parent, int(step.group(1)))
    then = {key: value for key, value in then.items() if not sections or key.startswith(sections)}
    scalar = (str, int, float, bool)
    restorable = {
        key: value
        for key, value in then.items()
        if "[" not in key
        and not key.endswith(".length")
        and (isinstance(value, scalar) or (isinstance(value, list) and all(isinstance(v, scalar) for v in value)))
    }
    if _main_process() and then:
        history = escape(str(saved.parent / HISTORY_FILE))
        if restorable:
            listed = escape(", ".join(f"{key}={value!r}" for key, value in restorable.items()))
            console.print(
                f"[yellow]note:[/yellow] the run changed settings after {escape(Path(checkpoint).name)} ({history}); "
                f"its own are used: {listed}",
                highlight=False,
            )
        if left := [key for key in then if key not in restorable]:
            console.print(
                f"[yellow]warning:[/yellow] the run also changed {escape(', '.join(left))} after "
                f"{escape(Path(checkpoint).name)} ({history}); config.yaml's are used: give that checkpoint's as "
                "overrides to use them",
                highlight=False,
            )
    return Restored(f"{saved.parent / HISTORY_FILE} at step {int(step.group(1))}", restorable)


def _label(text: str) -> str:
    """A folder-name-safe label: no ':' or '/' (task specs are paths, model ids may hold ':')."""
    return re.sub(r"[^\w.+-]", "_", text)


def default_eval_dir(task_names: list[str], model: str) -> Path:
    """runs/eval/<tasks>-<model>, the model named by its run and step when it is a run's checkpoint."""
    from vlrl.tasking.registry import task_class

    tasks = "+".join(task_class(name).name or name for name in task_names)
    path = Path(model)
    model_label = f"{path.parent.parent.name}-{path.name}" if path.parent.name == "checkpoints" else path.name
    return Path("runs") / "eval" / _label(f"{tasks}-{model_label}")


def run_task_specs(cfg: Config, split: str) -> list[str]:
    """The config's tasks to evaluate when no --task names any: all of them, but on the eval
    split a mixture's entries without an eval file are left out (and said)."""
    entries = cfg.tasks()
    if split not in ("train", "eval") and len(entries) > 1:
        names = ", ".join(entry.name for entry in entries)
        raise ConfigError(
            f"--split {split}: the run's mixture holds several tasks ({names}); name the file's with --task"
        )
    if split != "eval" or not cfg.mixture or all(not entry.eval for entry in entries):
        return [entry.name for entry in entries]  # all, or none with data: the harness says which is missing
    for entry in entries:
        if not entry.eval and _main_process():
            console.print(
                f"[yellow]warning:[/yellow] mixture task {entry.name} has no eval file: not evaluated", soft_wrap=True
            )
    return [entry.name for entry in entries if entry.eval]


def cmd_eval(args: argparse.Namespace) -> None:
    if args.compare:
        from vlrl.eval.compare import compare

        names = ("task", "data", "model", "split", "limit", "batch_size", "backend", "out", "config")
        evaluating = [f"--{name.replace('_', '-')}" for name in names if getattr(args, name) is not None]
        evaluating += ["overrides"] if args.overrides else []
        if evaluating:
            raise ConfigError(
                f"vlrl eval --compare DIR1 DIR2 reads two earlier evaluations and runs none: {', '.join(evaluating)} "
                "would do nothing; drop them, or evaluate first and compare the output folders"
            )

        table, differences = compare(Path(args.compare[0]), Path(args.compare[1]))
        if differences:
            console.print(
                "[yellow]warning:[/yellow] A and B were evaluated with different settings, so their differences are not "
                "the models' alone:",
                highlight=False,
            )
            for line in differences:
                console.print(f"  {escape(line)}", highlight=False)
        console.print(table)
        return
    if args.data and not args.task:
        raise ConfigError("vlrl eval --data needs --task: the task (or benchmark) whose data it is")
    if args.data:  # the data of every task not given its own (name=FILE)
        args.task = [spec if "=" in spec else f"{spec}={args.data}" for spec in args.task]
    names = [spec.partition("=")[0] for spec in args.task or []]
    preset: dict[str, Any] = {
        "task.name": names[0] if names else None,
        "model.path": args.model,
        "eval.limit": args.limit,
        "eval.batch_size": args.batch_size,
        "eval.backend": args.backend,
    }
    config, restored, other_run = args.config, None, None
    if config is None and (saved := run_config(args.model)):
        config = saved
        if _main_process():
            console.print(
                f"config: {saved} (the run that wrote this checkpoint; --config to use another)", highlight=False
            )
        restored = settings_of_checkpoint(args.model, saved)  # a flag given wins over them
        run = read_config_file(saved)
        trained = [entry.get("name") for entry in run.get("mixture") or []] or [run.get("task", {}).get("name")]
        if names and not any(name in trained for name in names):
            # that run's task options and data are its tasks', not these ones'
            preset |= {"task": {"name": preset.pop("task.name")}, "data": {}}
            other_run = f"the run {saved.parent} trained {', '.join(map(str, trained))}"
        elif names:  # the run's tasks keep their settings, the others their defaults (Config.task_settings)
            preset.pop("task.name")
    cfg = load_config(config, args.overrides, {k: v for k, v in preset.items() if v is not None}, restored)
    if not cfg.model.path:
        raise ConfigError(MODEL_PATH_MISSING)
    if other_run and "=" not in args.task[0] and not cfg.data.eval:
        from vlrl.tasking.registry import task_class

        task_class(names[0])  # a misspelled name is said as such first
        raise ConfigError(
            f"vlrl eval: {other_run}, so none of its data files is {names[0]}'s: give them with "
            f"--task {names[0]}=FILE (or --data FILE)"
        )
    specs = args.task or (run_task_specs(cfg, args.split or cfg.eval.split) if config else [])
    if not specs:
        from vlrl.models.loading import checkpoint_path

        checkpoint_path(cfg.model)  # a run directory given as --model: it names the latest checkpoint
        raise ConfigError(
            "vlrl eval needs --task NAME[=DATAFILE] (or --config FILE, or --model RUN/checkpoints/step-N, whose run "
            "names the task), or --compare DIR1 DIR2"
        )
    if cfg.eval.limit:
        cfg.data.limit = cfg.eval.limit
    out = Path(
        args.out or cfg.eval.output_dir or default_eval_dir([s.partition("=")[0] for s in specs], cfg.model.path)
    )
    # torch and the models: imported once the command line and config are read (a mistake in
    # them is said at once, not after ~7 s)
    from vlrl.eval.harness import run_eval
    from vlrl.eval.layout import samples_path
    from vlrl.parallel.distributed import Processes
    from vlrl.trainer.run import removed_if_unused

    _quiet_transformers()
    procs = Processes.from_env()
    with removed_if_unused(out):
        with procs.main_first():  # process 0 makes it (and so removes it if the command fails)
            try:
                out.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                why = "it is a file; give a folder" if out.is_file() else err.strerror or err
                raise ConfigError(f"eval output directory {out} cannot be created: {why}") from err
        results = run_eval(cfg, specs, args.split or cfg.eval.split, out, console)
    if _main_process():  # under torchrun: process 0 wrote them
        console.print(f"results: {out / 'results.json'}")
        for result in results:
            console.print(f"samples: {samples_path(out, result.task)}")


def cmd_config(args: argparse.Namespace) -> None:
    if args.action == "reference":
        from vlrl.app.reference import reference

        if args.path or args.overrides:
            raise ConfigError("vlrl config reference takes no config file or overrides: it lists every key's default")
        console.print(reference(), end="", markup=False, highlight=False)
        return

    from vlrl.config import to_dict

    if not args.path:
        raise ConfigError("vlrl config show needs the YAML config file to show")
    cfg = load_config(args.path, args.overrides)
    check_plugins_and_tasks(cfg)
    console.print(dump_config(to_dict(cfg)), end="", markup=False, highlight=False)


def check_plugins_and_tasks(cfg: Config) -> None:
    """Beyond the config's own keys, what a run refuses before it loads a model: its engines and
    strategies by name with their option sections, its tasks' names, rewards and options, and what
    the algorithm asks of them. Not what depends on files (data, checkpoints), which may not be
    there yet when a config is shown."""
    from vlrl.parallel import configured_strategy
    from vlrl.rollout import configured_engines
    from vlrl.tasking.registry import check_algo_tasks, entry_task

    configured_engines(cfg.rollout, cfg.eval.backend)
    configured_strategy(cfg.trainer, "trainer")
    configured_strategy(cfg.sft, "sft")
    check_algo_tasks(cfg, [entry_task(entry, "", cfg) for entry in cfg.tasks()])


def cmd_plot(args: argparse.Namespace) -> None:
    from vlrl.app.plots import plot_run

    for path in plot_run(args.run_dir):
        console.print(f"wrote {path}")


def cmd_tasks(args: argparse.Namespace) -> None:
    from vlrl.tasking.registry import list_tasks

    rows = list_tasks()
    training = [row for row in rows if not row[1].startswith("benchmark")]
    benchmarks = [(name, description) for name, origin, description in rows if origin.startswith("benchmark")]
    for title, table_rows, columns in (
        ("tasks to train and evaluate on (vlrl train --task NAME)", training, ("name", "origin", "description")),
        ("benchmarks, evaluation only (vlrl eval --task NAME)", benchmarks, ("name", "description")),
    ):
        if not table_rows:
            continue
        table = Table(title=title)
        for i, column in enumerate(columns):  # names are what one copies: never cut
            last = i == len(columns) - 1
            width = max(len(row[i]) for row in table_rows) if not last else None
            table.add_column(column, no_wrap=not last, overflow="fold", min_width=width if i == 0 else None)
        for row in table_rows:
            table.add_row(*row)
        console.print(table)


def cmd_data(args: argparse.Namespace) -> None:
    from vlrl.config import TaskConfig
    from vlrl.tasking.registry import make_task
    from vlrl.tasking.sources import write_synthetic

    if Path(args.out).exists():  # a data file of one's own, say: its images would be left beside new ones
        raise ConfigError(
            f"{args.out} exists: vlrl data synth writes a new data file (its images beside it) and replaces none; "
            "remove it or give another --out"
        )
    task = make_task(TaskConfig(name=args.task))
    write_synthetic(task, args.out, args.size, args.seed)
    console.print(f"wrote {args.size} synthetic {task.name} records to {args.out}")


def cmd_validate(args: argparse.Namespace) -> int:
    from vlrl.data.tables import spec_exists
    from vlrl.progress import progress_bar
    from vlrl.tasking.registry import make_task
    from vlrl.tasking.sources import missing_data
    from vlrl.tasking.validate import validate_split

    cfg = _config(args, **{"task.name": args.task, "data.image_root": args.image_root})
    task = make_task(cfg.task)
    if not spec_exists(args.data):  # said with the task's converter (GUI-R1's parquet: python -m data_prep.gui)
        raise ConfigError(missing_data(task, cfg, args.data, None))
    with progress_bar(console, cfg.trainer.progress and console.is_terminal) as progress:  # no bar in a pipe
        bar = progress.add_task(f"validate {task.name}", total=None, status="")
        report = validate_split(task, args.data, cfg, lambda n: progress.update(bar, advance=n))
    for problem in report.problems:
        console.print(escape(problem), highlight=False)
    console.print(("[red]" if report.problems else "[green]") + escape(report.summary()), highlight=False)
    return 1 if report.problems else 0


def usable_device(name: str, flag: str):
    """`name` as a torch device this machine has, or one error line naming `flag`."""
    import torch

    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise ConfigError(f"{flag} {name!r} is not a device: {err}") from err
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{flag} {name}: this machine has no usable CUDA device; leave {flag} out to use the CPU")
    return device


def cmd_tiny_model(args: argparse.Namespace) -> None:
    import dataclasses

    from vlrl.models.families import tiny_builds
    from vlrl.models.tiny import SHAPES, write_tiny_checkpoint

    _quiet_transformers()
    if args.shape:
        if args.shape not in SHAPES:
            raise ConfigError(f"tiny-model --shape {args.shape!r}: unknown; known shapes: {', '.join(SHAPES)}")
        spec = SHAPES[args.shape]
    else:
        builds = tiny_builds()
        if args.arch not in builds:
            raise ConfigError(f"tiny-model --arch {args.arch!r}: unknown; known: {', '.join(builds)}")
        spec = builds[args.arch]  # what model.path=tiny:NAME loads
    spec = dataclasses.replace(spec, seed=args.seed)
    path = write_tiny_checkpoint(Path(args.out), spec, usable_device(args.device, "tiny-model --device"))
    console.print(f"wrote {args.shape or 'tiny'} {spec.arch} checkpoint (random weights) to {path}")


def cmd_export(args: argparse.Namespace) -> None:
    from vlrl.models.loading import export_full_model

    _quiet_transformers()
    saved = run_config(args.checkpoint)  # a run's checkpoint: the image budget it trained at
    trained = (
        load_config(saved, restored=settings_of_checkpoint(args.checkpoint, saved, ("model.",))).model
        if saved
        else None
    )
    target = writable(args.out, "vlrl export OUT", folder=True)
    if target.is_dir() and any(target.iterdir()):  # a model among other files: which are the model's?
        raise ConfigError(f"vlrl export OUT {target} holds files already; give a new or empty folder")
    out, merged = export_full_model(args.checkpoint, target, trained)
    how = " (LoRA adapters merged into their base)" if merged else ""
    console.print(f"wrote the full model of {args.checkpoint}{how} to {out}", markup=False, highlight=False)


def cmd_plan(args: argparse.Namespace) -> None:
    from vlrl.app.plan import engine_refusal, fits, plans
    from vlrl.models.memory import GB, Workload, model_shape
    from vlrl.rollout import configured_engines

    cfg = _config(args)
    if not args.shape and not cfg.model.path:  # a plan of a real model needs no checkpoint: say so first
        raise ConfigError(
            f"vlrl plan needs a model: --shape NAME plans a real checkpoint's shape without its weights "
            f"({', '.join(SHAPE_NAMES)}); or {MODEL_PATH_MISSING.removeprefix('config: ')}"
        )
    engine, _ = configured_engines(cfg.rollout, cfg.eval.backend)
    shape = model_shape(cfg, args.shape)
    image_tokens = (
        args.image_tokens
        if args.image_tokens is not None
        else min(cfg.model.max_pixels // 784, cfg.trainer.token_budget // 2)
    )
    work = Workload.of(cfg, args.gpus, args.gpu_memory, image_tokens)
    console.print(
        f"{args.shape or cfg.model.path}: {shape.params / 1e9:.2f}B parameters in {shape.dtype_bytes * 8}-bit "
        f"weights (model.dtype={cfg.model.dtype}), {shape.trainable / 1e9:.3f}B trained; "
        f"{args.gpus} GPU(s) of {args.gpu_memory:g} GB; a micro-batch of {work.token_budget} tokens (one prompt with "
        f"{image_tokens} image tokens, --image-tokens), {work.rows} completions in a GPU's largest rollout call, "
        f"engine {cfg.rollout.engine}",
        highlight=False,
    )
    columns = {  # header: term
        "weights": "weights", "masters": "master weights", "grads": "gradients", "AdamW": "optimizer",
        "reference": "reference", "gathered": "gathered units", "activations": "activations",
        "engine": "rollout engine", "peak": "peak",
    }  # fmt: skip
    table = Table(
        title="GB per GPU; peak: the largest of rollout, update and optimizer step; fits: peak <= 95% of the GPU"
    )
    for header in ("strategy", "checkpointing", *columns, "fits"):
        table.add_column(header, justify="left" if header in ("strategy", "checkpointing", "fits") else "right")
    refusal = engine_refusal(shape, work, engine)
    if refusal:
        console.print(f"[red]{escape(refusal)}[/red]", highlight=False)
    for strategy, checkpointing, terms in plans(shape, work, engine):
        verdict = "no (the engine)" if refusal else "yes" if fits(terms, work) else "no"
        if "cpu memory" in terms:
            verdict += f" (+{terms['cpu memory'] / GB:.0f} GB CPU)"
        table.add_row(
            strategy, "on" if checkpointing else "off", *(f"{terms[t] / GB:.1f}" for t in columns.values()), verdict
        )
    Console(width=max(console.width, 150)).print(table)  # wide enough for every column, also in a file


# Each command's help page ends with examples of that command (the README's tour runs them).
EXAMPLES = {
    "train": [
        "vlrl train --config configs/demo/refcoco.yaml trainer.steps=20",
        "vlrl train --config configs/refcoco.yaml model.path=/models/Qwen2.5-VL-3B-Instruct data.image_root=data/coco",
        "vlrl train --config configs/demo/refcoco.yaml task.rewards.my_rewards.py:brevity=0.5",
    ],
    "sft": ["vlrl sft --config configs/demo/refcoco.yaml sft.steps=100 sft.lr=1e-4"],
    "score": [
        "vlrl score --config configs/demo/refcoco.yaml --data data/synthetic/refcoco-demo/val.json "
        "--completions mine.jsonl --out scored.jsonl",
        "vlrl score --task counting --data val.json --completions mine.jsonl --out scored.jsonl "
        "model.coord_frame=norm1000",
    ],
    "eval": [
        "vlrl eval --model runs/demo/refcoco/checkpoints/step-0000020 --limit 32",
        "vlrl eval --task refcoco=data/my_val.json --model /models/Qwen2.5-VL-3B-Instruct eval.max_new_tokens=256",
        "vlrl eval --task refcoco_bbox_rec_val --data /data/RefCOCO --model CKPT --batch-size 16",
        "torchrun --nproc_per_node 8 -m vlrl.cli eval --task refcoco_bbox_rec_val --data /data/RefCOCO --model CKPT",
        "vlrl eval --compare runs/eval/sft runs/eval/rl",
    ],
    "config": ["vlrl config show configs/demo/refcoco.yaml trainer.steps=20", "vlrl config reference"],
    "plot": ["vlrl plot runs/demo/refcoco"],
    "tasks": ["vlrl tasks list"],
    "synth": ["vlrl data synth --task jigsaw --out data/synthetic/jigsaw-mine/train.jsonl --size 64"],
    "validate": [
        "vlrl data validate --task refcoco data/my_rec.json --image-root data/images",
        "vlrl data validate --task gui_action data/gui_r1/android_train.json data.allow_outside_root=true",
    ],
    "plan": ["vlrl plan --config configs/refcoco.yaml --shape qwen2.5-vl-7b --gpus 8 --gpu-memory 80 model.lora.r=64"],
    "export": ["vlrl export runs/demo/refcoco/checkpoints/step-0000020 runs/export/refcoco"],
    "tiny-model": [
        "vlrl tiny-model runs/tiny-qwen3-vl --arch qwen3_vl",
        "vlrl tiny-model runs/big --shape qwen2.5-vl-3b",
    ],
}


def at_least(low: float, kind: type = int, above: bool = False):
    """An argparse type: a `kind` number >= low (> low with `above`), else argparse's usage error."""

    def number(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {'an integer' if kind is int else 'a number'}, got {text!r}"
            ) from None
        if not math.isfinite(value) or value < low or (above and value == low):
            raise argparse.ArgumentTypeError(f"expected a number {'>' if above else '>='} {low:g}, got {text}")
        return value

    return number


def _command(commands, name: str, help: str, epilog: str = "") -> argparse.ArgumentParser:
    """A subcommand whose page says what it does (description), then `epilog`, then its examples."""
    examples = "examples:\n" + "\n".join(f"  {line}" for line in EXAMPLES[name])
    return commands.add_parser(
        name,
        help=help,
        description=help[0].upper() + help[1:] + ".",
        epilog="\n\n".join(filter(None, [textwrap.fill(epilog, 100), examples])),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def build_parser() -> argparse.ArgumentParser:
    import vlrl

    parser = argparse.ArgumentParser(prog="vlrl", description=__doc__)
    parser.add_argument("--version", action="version", version=f"vlrl {vlrl.__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    train = _command(commands, "train", "RL post-training (GRPO family) on a task", TRAIN_EPILOG)
    train.add_argument("--task", help="task name (sets task.name)")
    _add_config_args(train, "trainer.steps=20 trainer.lr=1e-5 rollout.num_generations=4")
    train.set_defaults(func=cmd_train)

    sft_help = "cold-start SFT on the task's ground-truth answers (settings under sft.)"
    sft = _command(commands, "sft", sft_help, SFT_EPILOG)
    sft.add_argument("--task", help="task name (sets task.name)")
    _add_config_args(sft, "sft.steps=200 sft.lr=1e-5")
    sft.set_defaults(func=cmd_sft)

    score = _command(commands, "score", "score given completions against a task's data, no model needed")
    score.add_argument("--task", help="task name (sets task.name)")
    score.add_argument("--data", required=True, help="data file in the task's format")
    score.add_argument("--completions", required=True, help='JSON lines {"id": ..., "completion": "..."}')
    score.add_argument("--out", required=True, help='output JSON lines {"id", "rewards", "reward"}')
    _add_config_args(score, "model.coord_frame=norm1000 task.options.iou_convention=continuous")
    score.set_defaults(func=cmd_score)

    evaluate = _command(
        commands,
        "eval",
        "evaluate a checkpoint on tasks' splits (results.json, samples_<task>.jsonl)",
        "Under torchrun the samples are shared among the processes and process 0 writes one results.json, "
        "the same as one process writes.",
    )
    evaluate.add_argument(
        "--task",
        action="append",
        help="task or benchmark name, or name=DATA; repeat for several tasks (default: the config's task)",
    )
    evaluate.add_argument(
        "--data", help="data of the tasks given without =DATA: a file, or a downloaded dataset (DIR[@split])"
    )
    evaluate.add_argument(
        "--model",
        help="checkpoint to evaluate (sets model.path); a run's RUN/checkpoints/step-N brings RUN/config.yaml as the config",
    )
    evaluate.add_argument("--split", help="eval (data.eval), train (data.train), or a data file")
    evaluate.add_argument("--limit", type=at_least(0), help="first N samples only (0: all)")
    evaluate.add_argument("--batch-size", type=at_least(1), help="prompts per generation batch")
    evaluate.add_argument(
        "--backend", help="generation engine: hf (default), vllm, or module:Class (sets eval.backend)"
    )
    evaluate.add_argument("--out", help="output directory")
    evaluate.add_argument(
        "--compare",
        nargs=2,
        metavar="DIR",
        help="print the metric differences of two eval outputs, and the settings that differ",
    )
    _add_config_args(evaluate, "eval.max_new_tokens=256 model.max_pixels=1003520 eval.batch_size=16")
    evaluate.set_defaults(func=cmd_eval)

    config = _command(
        commands,
        "config",
        "show a config file resolved (its extends merged, overrides applied, defaults filled), "
        "or print the reference of every key (docs/config.md)",
    )
    config.add_argument(
        "action", choices=["show", "reference"], help="show: a config as a run sees it; reference: every key"
    )
    config.add_argument("path", nargs="?", help="YAML config file (show)")
    config.add_argument("overrides", nargs="*", help="dotted overrides, e.g. trainer.steps=20")
    config.set_defaults(func=cmd_config)

    plot = _command(
        commands,
        "plot",
        "draw a run's metrics.jsonl into PNG files, one per concern, in RUN_DIR/plots/",
    )
    plot.add_argument("run_dir", help="a run directory of vlrl train or vlrl sft (it holds metrics.jsonl)")
    plot.set_defaults(func=cmd_plot)

    tasks = _command(commands, "tasks", "list the registered tasks, then the evaluation-only benchmarks")
    tasks.add_argument("action", choices=["list"], nargs="?", default="list", help="list (the only action)")
    tasks.set_defaults(func=cmd_tasks)

    data = commands.add_parser(
        "data", help="data preparation: synthetic data, validation", description="Data preparation."
    )
    data_commands = data.add_subparsers(dest="data_command", required=True)
    synth = _command(data_commands, "synth", "write a task's synthetic dataset in its public format")
    synth.add_argument("--task", required=True, help="the task whose format and generator to use")
    synth.add_argument(
        "--out",
        required=True,
        help="data file to write, .json (a JSON list) or .jsonl (one record per line); images go beside it",
    )
    synth.add_argument("--size", type=at_least(1), default=512, help="records to write (default 512)")
    synth.add_argument("--seed", type=at_least(0), default=0, help="the data's seed (default 0)")
    synth.set_defaults(func=cmd_data)
    validate = _command(data_commands, "validate", "report every problem of a dataset before a run; exit 1 if any")
    validate.add_argument("--task", required=True, help="the task whose format the file is in")
    validate.add_argument("data", help="the data file, in the task's format")
    validate.add_argument("--image-root", help="where the records' relative paths point (sets data.image_root)")
    _add_config_args(validate, "data.max_image_pixels=50000000 data.allow_outside_root=true")
    validate.set_defaults(func=cmd_validate)

    plan = _command(commands, "plan", "per-GPU memory of a run for each parallelism strategy, from the model's config")
    plan.add_argument("--gpus", type=at_least(1), default=1, help="GPUs in the run (default 1)")
    plan.add_argument(
        "--gpu-memory", type=at_least(0, float, above=True), default=80.0, help="GB of memory per GPU (default 80)"
    )
    plan.add_argument(
        "--shape",
        help=f"a real checkpoint's shape instead of model.path: {', '.join(SHAPE_NAMES)}",
    )
    plan.add_argument(
        "--image-tokens",
        type=at_least(0),
        help="image tokens of a prompt (default: model.max_pixels' worth, at most half the token budget)",
    )
    _add_config_args(plan, "trainer.token_budget=4096 model.lora.r=64 rollout.num_generations=16")
    plan.set_defaults(func=cmd_plan)

    export = _command(
        commands,
        "export",
        "a checkpoint as a plain HF model directory (a LoRA checkpoint's adapters merged), for from_pretrained "
        "and other tools",
    )
    export.add_argument("checkpoint", help="a run's checkpoints/step-N (full or LoRA) or any local checkpoint")
    export.add_argument("out", help="the directory to write")
    export.set_defaults(func=cmd_export)

    tiny = _command(commands, "tiny-model", "write a tiny local checkpoint of a model family (tests, demo)")
    tiny.add_argument("out", help="the directory to write")
    tiny.add_argument(
        "--arch",
        default="qwen2_5_vl",
        help="a tiny build, as model.path=tiny:NAME names it: qwen2_5_vl, qwen2_vl, qwen3_vl, qwen3_vl_moe, qwen3_5, "
        "qwen3_5_moe, the -h32 variants of the first two (head size 32, for vLLM's CPU attention), or a registered "
        "family's",
    )
    tiny.add_argument("--seed", type=int, default=0, help="the weights' seed (default 0)")
    tiny.add_argument(
        "--shape",
        help=f"a real checkpoint's shape with random weights, for timing and memory: {', '.join(SHAPE_NAMES)}",
    )
    tiny.add_argument(
        "--device", default="cpu", help="where to draw the weights: cpu (default) or cuda (faster for large shapes)"
    )
    tiny.set_defaults(func=cmd_tiny_model)
    return parser


def parse(argv: list[str] | None) -> argparse.Namespace:
    """Parse, letting key=value overrides stand anywhere (argparse alone drops them after an option)."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    stray = [a for a in extra if a.startswith("-") or "=" not in a or not hasattr(args, "overrides")]
    if stray:
        parser.error(f"unrecognized arguments: {' '.join(stray)}")
    if extra:
        args.overrides = [*args.overrides, *extra]
    return args


def main(argv: list[str] | None = None) -> int:
    if int(os.environ.get("WORLD_SIZE", "1")) == 1:
        # SIGTERM ends it as Ctrl-C does. Not under a launcher: a process blocked in a collective
        # would run no Python handler before the launcher's SIGKILL, so there SIGTERM ends it at once.
        with terminated_as_interrupt():
            return run_command(argv)
    # One of several processes (torchrun): it ends here, whatever happened (distributed.exit_process).
    from vlrl.parallel.distributed import PEER_FAILED, exit_process, peer_gone

    try:
        status = run_command(argv)
    except SystemExit as stop:  # argparse's --help or usage error
        status = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
        if isinstance(stop.code, str):
            print(stop.code, file=sys.stderr)
    except BaseException as err:
        if peer_gone(err):  # a collective broken by another process's end: its error is the one to read
            console.print(f"[red]error:[/red] {PEER_FAILED}", highlight=False)
            status = 2
        else:  # an unexpected error: its traceback, as the interpreter prints it
            traceback.print_exc()
            status = 1
    exit_process(status)


# Errors told in one line whose modules import torch: one of them can only have been raised by a
# command that imported its module, so the check never imports one (4 s before a traceback).
HEAVY_ONE_LINE_ERRORS = (("vlrl.parallel.distributed", "PeerFailed"), ("vlrl.trainer.checkpoint", "CheckpointError"))


def one_line_errors() -> tuple[type[Exception], ...]:
    """The errors a command ends with as one line (status 2), not a traceback."""
    heavy = tuple(getattr(sys.modules[module], name) for module, name in HEAVY_ONE_LINE_ERRORS if module in sys.modules)
    return (ConfigError, RecordError, Diverged, Unwritable, FileNotFoundError, *heavy)


def run_command(argv: list[str] | None) -> int:
    args = parse(argv)
    try:
        return args.func(args) or 0
    except Exception as err:
        if not isinstance(err, one_line_errors()):
            raise
        console.print(f"[red]error:[/red] {escape(str(err))}", highlight=False)
        return 2
    except KeyboardInterrupt as err:  # Ctrl-C or SIGTERM outside a training loop (which stops cleanly by itself)
        terminated = isinstance(err, Terminated)
        console.print("terminated" if terminated else "interrupted")
        return exit_status(signal.SIGTERM if terminated else signal.SIGINT)


if __name__ == "__main__":
    sys.exit(main())
