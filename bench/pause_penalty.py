"""How much slower code runs after a pause: why the step bench measures a turn's second step.

On the 2-core machines this project runs on, code runs slower the longer since it last ran,
whether its process slept or ran other code meanwhile (docs/performance.md). The step bench
(step_vs_trl.py) has its two trainers take turns, so each step it measured used to follow the
other process's turn; it now measures the second step of a turn, which follows the process's own
step as a run's steps do. This measures the effect itself, in one process:

- a pure-Python workload (json and re, a few milliseconds) run after each pause, the pause
  slept (`time.sleep`) or spun (a Python loop reading the clock): the median per pause;
- with `--trainer vlrl` or `--trainer trl`, the step bench's own trainer run (its `run_vlrl` or
  `run_trl`, the tiny model on CPU) with that pause slept before every step: the median step
  per pause, its first two steps left out.

Prints one JSON line. Run it alone on the machine: another job's work is a pause's work.

    python bench/pause_penalty.py [--pauses 0 0.1 0.3 0.6] [--repeats 25]
    python bench/pause_penalty.py --trainer vlrl --pauses 0 0.6 --steps 10
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
import time
from pathlib import Path


def workload() -> int:
    """A few milliseconds of ordinary Python: dicts, strings, json and a regular expression."""
    rows = {str(i): json.dumps({"a": i, "b": [i, i + 1]}) for i in range(3000)}
    return len(re.findall(r"\d+", "".join(list(rows.values())[:500])))


def pause(seconds: float, how: str) -> None:
    if how == "sleep":
        time.sleep(seconds)
        return
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def workload_ms(seconds: float, how: str, repeats: int) -> float:
    """The workload's median time (ms) when each run follows a pause of `seconds`."""
    times = []
    for _ in range(repeats):
        pause(seconds, how)
        start = time.perf_counter()
        workload()
        times.append(time.perf_counter() - start)
    return round(statistics.median(times) * 1000, 2)


class PausedTurns:
    """The step bench's `Turns` for one process alone: a turn begins after a pause."""

    def __init__(self, seconds: float):
        self.seconds = seconds

    def wait(self) -> None:
        time.sleep(self.seconds)

    def give_back(self) -> None:
        pass


def trainer_step_s(trainer: str, seconds: float, steps: int) -> float:
    """The median step (s) of the step bench's `trainer` with `seconds` slept before each step."""
    import step_vs_trl as bench

    from tasks.refcoco import RefCOCO

    args = bench.build_parser().parse_args([])  # the step bench's settings: CPU, the tiny model
    model_path, max_pixels = bench.tiny_model()
    s = bench.settings(args, str(model_path), max_pixels)
    run = bench.run_vlrl if trainer == "vlrl" else bench.run_trl
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "train.json"
        RefCOCO().synthesize(data, 64, args.seed)
        times, _ = run(s, data, steps, Path(tmp) / "run", PausedTurns(seconds))
    return round(statistics.median(times[2:]), 4)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pauses", type=float, nargs="+", default=[0.0, 0.1, 0.3, 0.6], help="seconds")
    parser.add_argument("--repeats", type=int, default=25, help="workload runs per pause and kind")
    parser.add_argument("--trainer", choices=["vlrl", "trl"], help="time the step bench's trainer instead")
    parser.add_argument("--steps", type=int, default=10, help="trainer steps per pause (the first two left out)")
    args = parser.parse_args(argv)
    if args.trainer and args.steps < 3:
        parser.error("--steps must be at least 3: the first two steps are left out")
    report: dict = {"benchmark": "pause_penalty", "pauses_s": args.pauses}
    if args.trainer:
        report["trainer"] = args.trainer
        report["median_step_s"] = {str(p): trainer_step_s(args.trainer, p, args.steps) for p in args.pauses}
    else:
        report["workload_ms"] = {
            str(p): {how: workload_ms(p, how, args.repeats) for how in ("sleep", "spin")} for p in args.pauses
        }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
