"""Is the demo slower than it was at another revision? Runs `python -m vlrl.app.demo` (cold-start
SFT, eval, GRPO, eval), shortened, with this checkout's code and with REV's, in alternating
processes on the same config, data and seed, and prints one JSON line.

    python bench/demo_vs_revision.py --against b1e2525 [--rounds 2] [--seed 0]
                                     [--config configs/demo/refcoco.yaml] [key.sub=value ...]

REV's code is checked out with `git worktree add --detach` into a temporary directory, removed
at exit; both sides run from this checkout's root (its configs and data/synthetic/ files), only
the imported `vlrl` differs (checked in each process). The default overrides shorten the demo (sft.steps=200,
trainer.steps=40: the RL phase ends with its held-out eval); give others after the options.
Per side: the median over rounds of the demo's wall seconds, of the RL steps' median
`time_step` (the first step, warm-up, left out) and of the SFT steps' median `time_step`;
and the ratios this checkout / REV (below 1: faster now). Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402

from vlrl.config import load_config  # noqa: E402
from vlrl.tasking.sources import task_sources  # noqa: E402

SHORT = ["sft.steps=200", "trainer.steps=40"]
# The demo's main with `vlrl` imported from the code tree given first (before the working
# directory, which `python -m` would put first, and before an editable install).
IMPORT_FROM = (
    "import runpy, sys; code = sys.argv.pop(1); sys.path.insert(0, code); import vlrl; "
    "assert vlrl.__file__.startswith(code), vlrl.__file__; runpy.run_module('vlrl.app.demo', run_name='__main__')"
)


def median_step(metrics: Path) -> float:
    times = [json.loads(line)["time_step"] for line in metrics.read_text().splitlines()]
    return statistics.median(times[1:] or times)


def run_demo(code: Path, args: argparse.Namespace, out: Path) -> dict[str, float]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, "-c", IMPORT_FROM, str(code), "--config", args.config, "--seed", str(args.seed)]
    command += ["--out", str(out), *SHORT, *args.overrides]
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"the demo with {code}'s code failed")
    summary = json.loads((out / "demo_summary.json").read_text())
    return {
        "demo_s": summary["seconds"],
        "rl_step_s": median_step(out / "rl" / "metrics.jsonl"),
        "sft_step_s": median_step(out / "sft" / "metrics.jsonl"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", required=True, help="a git revision of this repository")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--config", default="configs/demo/refcoco.yaml")
    parser.add_argument("overrides", nargs="*", help="dotted config overrides, after the defaults")
    args = parser.parse_args()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", f"{args.against}^{{commit}}"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    ).stdout.strip()
    # Missing synthetic data is written now, not in the first timed demo.
    task_sources(load_config(args.config, [*SHORT, *args.overrides]), Console(quiet=True))
    results: dict[str, list[dict[str, float]]] = {"now": [], "then": []}
    with tempfile.TemporaryDirectory() as tmp:
        then = Path(tmp) / "then"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(then), commit], cwd=ROOT, check=True)
        try:
            for round_ in range(args.rounds):
                for side, code in (("now", ROOT), ("then", then)):
                    results[side].append(run_demo(code, args, Path(tmp) / f"{side}-{round_}"))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(then)], cwd=ROOT, check=True)
    medians = {side: {k: statistics.median(r[k] for r in rows) for k in rows[0]} for side, rows in results.items()}
    print(
        json.dumps(
            {
                "benchmark": "demo_vs_revision",
                "config": args.config,
                "against": commit,
                "overrides": [*SHORT, *args.overrides],
                "rounds": args.rounds,
                "now": {k: round(v, 4) for k, v in medians["now"].items()},
                "then": {k: round(v, 4) for k, v in medians["then"].items()},
                "ratio_now_over_then": {k: round(medians["now"][k] / medians["then"][k], 4) for k in medians["now"]},
            }
        )
    )


if __name__ == "__main__":
    main()
