"""The update's forwards with `model.lean_forward` against without, in one process: the step
bench's vlrl run (bench/step_vs_trl.py: the tiny checkpoint at the demo config's pixel limit, 4
prompts x 8 completions of up to 48 tokens, beta 0.04, float32 on the CPU), the option switched
every two steps (on, on, off, off, ...) so that both sides see the machine's phases alike (its
speed moves by a third within minutes: separate runs measure the machine more than the change).
The first four steps are warm-up. A step's update is the reference's forward and the policy's
forward and backward (and the optimizer); the rollout is the same code on both sides.

Prints one JSON line: per side the median update and step time over its steps, and the ratio of
the update medians (lean over the model's forward).

    python bench/lean_forward.py [--steps 80] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import step_vs_trl  # noqa: E402

from tasks.refcoco import RefCOCO  # noqa: E402

WARMUP = 4


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    import torch

    times: dict[bool, list[tuple[float, float]]] = {True: [], False: []}

    def switch(trainer, metrics: dict) -> None:
        run = trainer.run
        if metrics["step"] > WARMUP:
            times[run.lean_forward].append((metrics["time_update"], metrics["time_step"]))
        run.lean_forward = (metrics["step"] // 2) % 2 == 0  # the next step's: steps 1-2 on, 3-4 off, 5-6 on, ...

    with tempfile.TemporaryDirectory() as tmp:
        model_path, max_pixels = step_vs_trl.tiny_model()
        bench_args = step_vs_trl.build_parser().parse_args(["--seed", str(args.seed)])  # its CPU settings
        s = step_vs_trl.settings(bench_args, str(model_path), max_pixels)
        data = Path(tmp) / "train.json"
        RefCOCO().synthesize(data, 64, args.seed)
        step_vs_trl.run_vlrl(s, data, args.steps, Path(tmp) / "run", after_step=switch)
    median = {
        lean: {
            part: round(statistics.median(t[i] for t in times[lean]), 4) for i, part in enumerate(("update", "step"))
        }
        for lean in times
    }
    report = {
        "benchmark": "lean_forward",
        "device": "cpu",
        "torch_threads": torch.get_num_threads(),
        "steps_measured": {"lean": len(times[True]), "model": len(times[False])},
        "lean_median_s": median[True],
        "model_median_s": median[False],
        "update_lean_over_model": round(median[True]["update"] / median[False]["update"], 3),
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
