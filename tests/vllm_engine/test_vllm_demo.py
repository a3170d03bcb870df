"""The demo through vLLM still learns: cold-start SFT, then GRPO with every rollout and
evaluation on the colocated vLLM engine (make test-slow)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vlrl.app.demo import main

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "demo" / "refcoco_vllm.yaml"


@pytest.mark.slow
def test_the_refcoco_demo_through_vllm_improves_the_held_out_metrics(tmp_path):
    out = tmp_path / "demo"
    data = [f"data.train={tmp_path / 'train.json'}", f"data.eval={tmp_path / 'val.json'}", "data.synthetic=true"]
    assert main(["--config", str(CONFIG), "--seed", "0", "--out", str(out), *data]) == 0
    summary = json.loads((out / "demo_summary.json").read_text())
    before, after = summary["before"], summary["after"]
    # Seed 0 went 0.305 -> 0.664 (acc@0.5) and 0.431 -> 0.553 (mean IoU) on one machine
    # (2026-11-23), and 0.070 -> 0.156 and 0.191 -> 0.337 on an AVX-512 one (2026-11-30, 0ca145d),
    # where the cold start localizes worse (the code of 2026-11-29, whose test passed where it
    # ran, stayed at acc@0.5 0 through RL step 200 there): the CPU's kernels move these numbers
    # as far as a seed does (docs/demo.md). Each bound sits below both machines' gains. With the
    # 5000-step cold start (2026-11-30, the AVX-512 machine): 0.320 -> 0.906 and 0.447 -> 0.640.
    assert after["acc@0.5"] - before["acc@0.5"] > 0.05
    assert after["mean_iou"] - before["mean_iou"] > 0.07
    assert after["format_rate"] >= 0.95
