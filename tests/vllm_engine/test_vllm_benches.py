"""The vLLM benchmarks run their whole path on CPU, so they do not rot between sessions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # two vLLM engines and the HF one in a subprocess: 36-82 s in make test (2026-12-02)
def test_rollout_engines_bench_times_engine_standalone_and_hf_side_by_side(tiny_vllm_path):
    command = [sys.executable, str(ROOT / "bench" / "rollout_engines.py"), "--prompts", "2", "--generations", "2",
               "--tokens", "4", "--rounds", "1"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    engines = report["engines"]
    assert set(engines) == {"vllm_engine", "vllm_standalone", "hf"}
    assert all(e["tokens_per_s"] > 0 and 0 < e["tokens"][0] <= 2 * 2 * 4 for e in engines.values())
    # the same seeds and settings: the engine and plain vLLM sample the same tokens
    assert engines["vllm_engine"]["tokens"] == engines["vllm_standalone"]["tokens"]
    assert report["ratio_engine_vs_standalone"] == round(
        engines["vllm_engine"]["tokens_per_s"] / engines["vllm_standalone"]["tokens_per_s"], 3
    )
