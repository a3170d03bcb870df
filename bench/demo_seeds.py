"""Is the demo's gain beyond seed noise? Runs `python -m vlrl.app.demo` for several seeds and
compares each headline metric's mean gain (after RL - SFT start) with its spread over seeds.

    python bench/demo_seeds.py [--config configs/demo/refcoco.yaml] [--seeds 0 1 2] [--jobs 1]
                               [--no-run] [key.sub=value ...]

The overrides go to every seed's demo; write them first or after another option than --seeds,
which would take them for seeds. Each seed runs in its own process, in the working directory
(where the demo's synthetic data goes), into runs/demo/<task>-seed<N> there (`--root`;
`--no-run` only reads the demo_summary.json files already there).
`--jobs 2` runs two seeds side by side, one thread each: faster, but then `seconds` is not the demo's time alone. Prints one JSON line: per seed
its before, after, seconds and `cpu`, the kernels torch used ("AVX2", "AVX512": they round
otherwise, so the numbers differ; null in a summary older than that); per metric the gains'
mean, sample standard deviation and their ratio (null when every seed gained the same), and the
after-RL values' standard deviation.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vlrl.app.demo import default_config  # noqa: E402
from vlrl.config import load_config  # noqa: E402


def run_seed(config: str, seed: int, out: Path, overrides: list[str], threads: int | None) -> None:
    # In the working directory, as the demo itself: its relative paths (the config, its data,
    # --root) are the user's; this checkout's vlrl importable from there.
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=path, **({"OMP_NUM_THREADS": str(threads)} if threads else {}))
    command = [
        sys.executable,
        "-m",
        "vlrl.app.demo",
        "--config",
        config,
        "--seed",
        str(seed),
        "--out",
        str(out),
        *overrides,
    ]
    log = out.with_name(out.name + ".log")
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as stream:
        done = subprocess.run(command, env=env, stdout=stream, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise SystemExit(f"seed {seed} failed (exit {done.returncode}); its output is in {log}")


def spread(summaries: list[dict]) -> dict[str, dict[str, float]]:
    """Per metric: mean and sample standard deviation of the gain, their ratio, and the
    standard deviation of the after-RL value."""
    report = {}
    for name in summaries[0]["before"]:
        gains = [s["after"][name] - s["before"][name] for s in summaries]
        mean, std = statistics.mean(gains), statistics.stdev(gains)
        report[name] = {
            "gain_mean": mean,
            "gain_std": std,
            "gain_over_std": abs(mean) / std if std > 0 else None,  # None: every seed moved it alike
            "after_std": statistics.stdev(s["after"][name] for s in summaries),
        }
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=default_config())
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--no-run", action="store_true", help="only read the summaries already written")
    parser.add_argument("--root", default="runs/demo", help="where the seeds' run directories go")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args(argv)
    if len(args.seeds) < 2:
        parser.error("the spread over seeds needs at least 2 seeds")
    task = load_config(args.config, args.overrides).task.name
    outs = {seed: Path(args.root) / f"{task}-seed{seed}" for seed in args.seeds}
    if not args.no_run:
        threads = 1 if args.jobs > 1 else None
        with ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(lambda seed: run_seed(args.config, seed, outs[seed], args.overrides, threads), args.seeds))
    summaries = []
    for seed, out in outs.items():
        path = out / "demo_summary.json"
        if not path.exists():
            raise SystemExit(f"{path}: no demo summary for seed {seed}; run without --no-run")
        summaries.append(json.loads(path.read_text()))
    report = {
        "config": args.config,
        "side_by_side": args.jobs > 1,
        "seeds": [
            {**{k: s[k] for k in ("seed", "before", "after", "seconds")}, "cpu": s.get("cpu")} for s in summaries
        ],
        "metrics": spread(summaries),
    }
    print(json.dumps(report, allow_nan=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
