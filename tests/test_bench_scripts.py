"""The GPU benchmark scripts run their whole path on the tiny model on CPU, so they do not rot between GPU sessions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_recipe_benchmark_reports_its_timings(tiny_qwen25):
    command = [
        sys.executable, str(ROOT / "bench" / "recipe_on_gpu.py"), "--shape", "tiny", "--device", "cpu", "--steps", "2",
        "trainer.prompts_per_step=2", "rollout.num_generations=2", "rollout.max_new_tokens=8", "model.max_pixels=12544",
    ]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["steps_measured"] == 1 and report["prompts_per_step"] == 2 and report["max_new_tokens"] == 8
    assert report["median_step_s"] >= report["median_rollout_s"] > 0
    assert 0 < report["completion_tokens_per_step"] <= 2 * 2 * 8
