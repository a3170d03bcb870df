"""The demo configuration (configs/demo/refcoco.yaml) on 1, 2 and 4 gloo CPU processes with
each parallelism strategy: seconds per step, and each process's largest total of parameters,
gradients and optimizer state. FSDP2's goal: each process's share within 10% of 1/N of the
replicated strategy's (every process holds all of it there).

    python bench/parallel_cpu.py [--processes 1 2 4] [--strategies replicated fsdp2] [--steps 3]

Prints one JSON object. Step times need a quiet machine: with other work on the cores they say
little (the byte counts do not depend on it).
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
PROBE = ROOT / "bench" / "parallel_probe.py"
DEMO = ROOT / "configs" / "demo" / "refcoco.yaml"


def measure(processes: int, config: Path | str, overrides: list[str], workdir: Path) -> list[dict]:
    """bench/parallel_probe.py under torchrun on `processes` CPU processes; each one's report."""
    out = workdir / "probe.json"
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    # TMPDIR: the launcher's torchelastic_* log folders go with the workdir
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path, "CUDA_VISIBLE_DEVICES": "", "TMPDIR": str(workdir)}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes)]
    done = subprocess.run(
        [*command, str(PROBE), str(out), str(config), *overrides], cwd=workdir, env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"{processes} processes failed:\n{done.stderr[-3000:]}")
    return [json.loads(Path(f"{out}.{rank}").read_text()) for rank in range(processes)]


def demo_overrides(workdir: Path, strategy: str, steps: int) -> list[str]:
    data = workdir / "data"
    return [
        f"data.train={data / 'train.json'}", f"data.eval={data / 'val.json'}", "data.synthetic=true", "data.synthetic_train_size=64",
        "eval.every=0", f"trainer.steps={steps}", f"trainer.output_dir={workdir / 'run'}", "trainer.resume=",
        "trainer.progress=false", f"trainer.parallel={strategy}",
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--strategies", nargs="+", default=["replicated", "fsdp2"])
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args(argv)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for strategy in args.strategies:
            for processes in args.processes:
                workdir = Path(tmp) / f"{strategy}-{processes}"
                workdir.mkdir()
                ranks = measure(processes, DEMO, demo_overrides(workdir, strategy, args.steps), workdir)
                steps = [statistics.median(r["step_seconds"][1:] or r["step_seconds"]) for r in ranks]
                runs.append(
                    {
                        "strategy": strategy,
                        "processes": processes,
                        "median_step_s": round(max(steps), 3),  # the slowest process sets the pace
                        "state_bytes_per_process": [r["state_peak"] for r in ranks],
                    }
                )
    replicated = {r["processes"]: max(r["state_bytes_per_process"]) for r in runs if r["strategy"] == "replicated"}
    base = replicated.get(1) or next(iter(replicated.values()), None)
    for run in runs:
        if run["strategy"] == "fsdp2" and base:
            share = max(run["state_bytes_per_process"]) / base
            run["share_of_replicated"] = round(share, 4)
            run["within_10pct_of_1_over_n"] = abs(share * run["processes"] - 1) <= 0.10
    print(
        json.dumps(
            {"benchmark": "parallel_cpu", "config": str(DEMO.relative_to(ROOT)), "steps": args.steps, "runs": runs}
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
