"""`vlrl train | sft | eval | score | data | tasks | plot | tiny-model`: the command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from vlrl.config import ConfigError, load_config
from vlrl.data import RecordError

console = Console(soft_wrap=True)  # messages name files and keys: never break them mid-word


def _add_config_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="YAML config file (see configs/)")
    parser.add_argument("overrides", nargs="*", help="dotted overrides, e.g. trainer.lr=1e-5 rollout.num_generations=4")


def _config(args: argparse.Namespace, **preset):
    return load_config(args.config, args.overrides, {k: v for k, v in preset.items() if v is not None})


def _print_run(result) -> None:
    console.print(f"run directory: {result.run_dir}")
    console.print(f"metrics:       {result.metrics}")
    console.print(f"checkpoint:    {result.checkpoint}")


def cmd_train(args: argparse.Namespace) -> None:
    from vlrl.trainer.rl import train

    _print_run(train(_config(args, **{"task.name": args.task}), console))


def cmd_sft(args: argparse.Namespace) -> None:
    from vlrl.trainer.sft import train_sft

    _print_run(train_sft(_config(args, **{"task.name": args.task}), console))


def cmd_score(args: argparse.Namespace) -> None:
    from vlrl.datasets import load_task_split
    from vlrl.registry import make_task
    from vlrl.scoring import score_file

    cfg = _config(args, **{"task.name": args.task})
    task = make_task(cfg.task)
    split = load_task_split(task, cfg, "eval", console, require_images=False, path=args.data)
    result = score_file(task, split.samples, args.completions, args.out)
    for problem in result.problems[:10]:
        console.print(f"[yellow]skipped[/yellow] {escape(problem)}", highlight=False)
    if len(result.problems) > 10:
        console.print(f"[yellow]... {len(result.problems) - 10} more skipped completions[/yellow]")
    table = Table(title=f"{task.name}: {result.scored} completions scored -> {args.out}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    if task.reward_weights:  # a benchmark has metrics only
        table.add_row("mean reward", f"{result.mean_reward:.4f}")
    for name, value in result.metrics.items():
        table.add_row(name, f"{value:.4f}")
    console.print(table)


def cmd_eval(args: argparse.Namespace) -> None:
    from vlrl.eval.harness import compare, run_eval
    from vlrl.eval.layout import samples_path

    if args.compare:
        console.print(compare(Path(args.compare[0]), Path(args.compare[1])))
        return
    if not args.task:
        raise ConfigError("vlrl eval needs --task (or --compare DIR1 DIR2)")
    if args.data:  # the data of every task not given its own (name=FILE)
        args.task = [spec if "=" in spec else f"{spec}={args.data}" for spec in args.task]
    preset = {
        "task.name": args.task[0].partition("=")[0],
        "model.path": args.model,
        "eval.limit": args.limit,
        "eval.batch_size": args.batch_size,
        "eval.backend": args.backend,
    }
    cfg = _config(args, **preset)
    if cfg.eval.backend != "hf":
        raise ConfigError("config: eval.backend 'vllm' is not available in this build; use 'hf'")
    if cfg.eval.limit:
        cfg.data.limit = cfg.eval.limit
    names = "+".join(spec.partition("=")[0] for spec in args.task)
    out = Path(args.out or cfg.eval.output_dir or f"runs/eval/{names}-{Path(cfg.model.path).name.replace(':', '_')}")
    results = run_eval(cfg, args.task, args.split or cfg.eval.split, out, console)
    console.print(f"results: {out / 'results.json'}")
    for result in results:
        console.print(f"samples: {samples_path(out, result.task)}")


def cmd_plot(args: argparse.Namespace) -> None:
    from vlrl.plots import plot_run

    for path in plot_run(args.run_dir):
        console.print(f"wrote {path}")


def cmd_tasks(args: argparse.Namespace) -> None:
    from vlrl.registry import list_tasks

    table = Table(title="registered tasks")
    for column in ("name", "origin", "description"):
        table.add_column(column)
    for row in list_tasks():
        table.add_row(*row)
    console.print(table)


def cmd_data(args: argparse.Namespace) -> None:
    from vlrl.config import TaskConfig
    from vlrl.registry import make_task

    task = make_task(TaskConfig(name=args.task))
    task.synthesize(args.out, args.size, args.seed)
    console.print(f"wrote {args.size} synthetic {task.name} records to {args.out}")


def cmd_tiny_model(args: argparse.Namespace) -> None:
    import dataclasses

    from vlrl.testing.tiny import SHAPES, TinySpec, write_tiny_checkpoint

    if args.shape:
        if args.shape not in SHAPES:
            raise ConfigError(f"tiny-model --shape {args.shape!r}: unknown; known shapes: {', '.join(SHAPES)}")
        spec = dataclasses.replace(SHAPES[args.shape], seed=args.seed)
    else:
        spec = TinySpec(arch=args.arch, seed=args.seed)
    path = write_tiny_checkpoint(Path(args.out), spec, args.device)
    console.print(f"wrote {args.shape or 'tiny'} {spec.arch} checkpoint (random weights) to {path}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vlrl", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    train = commands.add_parser("train", help="RL post-training (GRPO family) on a task")
    train.add_argument("--task", help="task name (sets task.name)")
    _add_config_args(train)
    train.set_defaults(func=cmd_train)

    sft = commands.add_parser("sft", help="cold-start SFT on the task's ground-truth answers (settings under sft.)")
    sft.add_argument("--task", help="task name (sets task.name)")
    _add_config_args(sft)
    sft.set_defaults(func=cmd_sft)

    score = commands.add_parser("score", help="score given completions against a task's data, no model needed")
    score.add_argument("--task", help="task name (sets task.name)")
    score.add_argument("--data", required=True, help="data file in the task's format")
    score.add_argument("--completions", required=True, help='JSON lines {"id": ..., "completion": "..."}')
    score.add_argument("--out", required=True, help='output JSON lines {"id", "rewards", "reward"}')
    _add_config_args(score)
    score.set_defaults(func=cmd_score)

    evaluate = commands.add_parser("eval", help="evaluate a checkpoint on tasks' splits (results.json, samples_<task>.jsonl)")
    evaluate.add_argument("--task", action="append", help="task or benchmark name, or name=DATA; repeat for several tasks")
    evaluate.add_argument("--data", help="data of the tasks given without =DATA: a file, or a downloaded dataset (DIR[@split])")
    evaluate.add_argument("--model", help="checkpoint to evaluate (sets model.path)")
    evaluate.add_argument("--split", help="eval (data.eval), train (data.train), or a data file")
    evaluate.add_argument("--limit", type=int, help="first N samples only")
    evaluate.add_argument("--batch-size", type=int, help="prompts per generation batch")
    evaluate.add_argument("--backend", choices=["hf", "vllm"], help="generation engine")
    evaluate.add_argument("--out", help="output directory")
    evaluate.add_argument("--compare", nargs=2, metavar="DIR", help="print the metric differences of two eval outputs")
    _add_config_args(evaluate)
    evaluate.set_defaults(func=cmd_eval)

    plot = commands.add_parser("plot", help="draw a run's metrics into PNG files")
    plot.add_argument("run_dir")
    plot.set_defaults(func=cmd_plot)

    tasks = commands.add_parser("tasks", help="list registered tasks")
    tasks.add_argument("action", choices=["list"], nargs="?", default="list")
    tasks.set_defaults(func=cmd_tasks)

    data = commands.add_parser("data", help="data preparation")
    data_commands = data.add_subparsers(dest="data_command", required=True)
    synth = data_commands.add_parser("synth", help="write a task's synthetic dataset in its public format")
    synth.add_argument("--task", required=True)
    synth.add_argument("--out", required=True, help="data file to write (images go beside it)")
    synth.add_argument("--size", type=int, default=512)
    synth.add_argument("--seed", type=int, default=0)
    synth.set_defaults(func=cmd_data)

    tiny = commands.add_parser("tiny-model", help="write a tiny local Qwen-VL checkpoint (tests, demo)")
    tiny.add_argument("out")
    tiny.add_argument("--arch", choices=["qwen2_5_vl", "qwen2_vl"], default="qwen2_5_vl")
    tiny.add_argument("--seed", type=int, default=0)
    tiny.add_argument("--shape", help="a real checkpoint's shape with random weights, for timing and memory: qwen2.5-vl-3b, qwen2-vl-2b")
    tiny.add_argument("--device", default="cpu", help="where to draw the weights (cuda is faster for large shapes)")
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
    args = parse(argv)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # vlrl shows its own progress; keep the output readable
    try:
        args.func(args)
    except (ConfigError, RecordError, FileNotFoundError) as err:
        console.print(f"[red]error:[/red] {escape(str(err))}", highlight=False)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
