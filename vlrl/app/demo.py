"""`make demo`: does RL improve the model here? Cold-start SFT, eval, GRPO, eval — on the tiny
local model and synthetic data, on a laptop CPU.

    python -m vlrl.app.demo [--config configs/demo/refcoco.yaml] [--seed 0] [--out runs/demo/refcoco-seed0]

Prints a before/after table of the held-out metrics and the path of a PNG of the RL curves;
writes demo_summary.json ({"task", "before", "after", "seconds", ...}) in the run directory
and prints its path last.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from vlrl.app.plots import plot_panels, read_metrics
from vlrl.config import Config, ConfigError, load_config
from vlrl.eval.harness import run_eval
from vlrl.trainer.rl import train
from vlrl.trainer.sft import train_sft

DEFAULT_CONFIG = "configs/demo/refcoco.yaml"


def headline(metrics: dict[str, float], names: list[str]) -> dict[str, float]:
    return {name: metrics[name] for name in names if name in metrics} if names else dict(metrics)


def reward_components(rows: list[dict]) -> list[str]:
    """The reward components a run logged (reward/<name>), in first-seen order."""
    return list(dict.fromkeys(key.split("/", 1)[1] for row in rows for key in row if key.startswith("reward/")))


def run_demo(config: str, seed: int, out: Path, console: Console, overrides: list[str] = ()) -> Path:
    start = time.perf_counter()
    if out.exists():
        shutil.rmtree(out)  # a demo always starts from scratch: its numbers are a fresh run's
    common = [
        f"trainer.seed={seed}",
        f"sft.seed={seed}",
        f"sft.output_dir={out / 'sft'}",
        f"trainer.output_dir={out / 'rl'}",
        "sft.resume=",
        "trainer.resume=",
        *overrides,
    ]

    def phase(*extra: str) -> Config:
        return load_config(config, [*common, *extra])

    cfg = phase()
    task = cfg.task.name
    console.rule(f"[bold]1/4 cold start: SFT on the task's targets ({cfg.sft.steps} steps)")
    sft = train_sft(cfg, console)
    console.rule("[bold]2/4 evaluate the SFT start on the held-out split")
    before = run_eval(phase(f"model.path={sft.checkpoint}"), [task], "eval", out / "eval_before", console, False)[
        0
    ].metrics
    console.rule(f"[bold]3/4 GRPO from the SFT start ({cfg.trainer.steps} steps)")
    rl = train(phase(f"model.path={sft.checkpoint}"), console)
    console.rule("[bold]4/4 evaluate the RL result on the held-out split")
    after = run_eval(phase(f"model.path={rl.checkpoint}"), [task], "eval", out / "eval_after", console, False)[
        0
    ].metrics

    names = cfg.eval.headline
    table = Table(title=f"{task}: held-out {cfg.data.eval} (greedy), seed {seed}")
    for column in ("metric", "SFT start", "after RL", "change"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    for name, value in headline(before, names).items():
        table.add_row(name, f"{value:.4f}", f"{after[name]:.4f}", f"{after[name] - value:+.4f}")
    console.print(table)
    # The held-out curve starts at the SFT start (step 0).
    rows = [{"step": 0, **{f"eval/{k}": v for k, v in before.items()}}, *read_metrics(rl.metrics)]
    components = [f"reward/{name}" for name in reward_components(rows)]
    panels = {
        f"{task}: training reward (sampled)": ["reward", *components],
        f"{task}: held-out (greedy)": [f"eval/{name}" for name in (names or after)],
    }
    curves = plot_panels(rows, panels, out / "rl_curves.png", smooth=20)
    console.print(f"curves: {curves}")
    seconds = time.perf_counter() - start
    summary = {
        "task": task,
        "seed": seed,
        "before": headline(before, names),
        "after": headline(after, names),
        "seconds": round(seconds, 1),
        # the kernels torch picked: another instruction set rounds otherwise, and over a demo's thousands of steps
        # that moves a seed's numbers as far as another seed (docs/demo.md)
        "cpu": torch.backends.cpu.get_cpu_capability(),
        "sft_checkpoint": str(sft.checkpoint),
        "rl_checkpoint": str(rl.checkpoint),
        "curves": str(curves),
    }
    path = out / "demo_summary.json"
    path.write_text(json.dumps(summary, indent=1) + "\n")
    console.print(f"finished in {seconds:.0f} s")
    console.print(f"run directory: {out}", markup=False, highlight=False)
    console.print(f"metrics:       {rl.metrics}", markup=False, highlight=False)
    console.print(f"checkpoint:    {rl.checkpoint}", markup=False, highlight=False)
    console.print(str(path), markup=False, highlight=False)
    return path


def default_config() -> str:
    """configs/demo/refcoco.yaml of the working directory, else of the checkout vlrl runs from
    (an editable install's): the demo runs from any folder, writing its data and runs there."""
    checkout = Path(__file__).resolve().parents[2] / DEFAULT_CONFIG
    return str(checkout) if not Path(DEFAULT_CONFIG).exists() and checkout.exists() else DEFAULT_CONFIG


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vlrl.app.demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", default=default_config())
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="run directory (default: runs/demo/<task>-seed<seed>)")
    parser.add_argument("overrides", nargs="*", help="dotted config overrides, e.g. trainer.steps=100")
    args = parser.parse_args(argv)
    console = Console(soft_wrap=True)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    try:
        task = load_config(args.config, args.overrides).task.name
        run_demo(args.config, args.seed, Path(args.out or f"runs/demo/{task}-seed{args.seed}"), console, args.overrides)
    except ConfigError as err:
        console.print(f"[red]error:[/red] {escape(str(err))}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
