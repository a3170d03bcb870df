"""Whole runs on a GPU against the same runs on the CPU (float32, TF32 off: the same numbers up to
float32 rounding), and a resumed run against an uninterrupted one: SFT, RL of every model
family, `vlrl eval`, resume after a stop."""

from __future__ import annotations

import json

import pytest
import torch

from data_prep.refcoco import write_synthetic_rec
from tests.gpu.runs import on_cpu, relative_difference, rl_run, rows, sft_run
from tests.gpu.test_engine_on_gpu import greedy_equals_generate
from vlrl.cli import main
from vlrl.models.families import family_names, tiny_builds
from vlrl.models.tiny import tiny_checkpoint

pytestmark = pytest.mark.gpu

# float32 on two devices: kernels sum in other orders (~1e-6 relative per op), a few steps of
# AdamW at lr 1e-4 keep updates equal to well under 1e-3 of their size.
RELATIVE = 1e-3


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_synthetic_rec(tmp_path_factory.mktemp("rec") / "train.json", size=16, seed=2)


def assert_same_rows(got: list[dict], expected: list[dict], keys: tuple[str, ...]) -> None:
    assert len(got) == len(expected) > 0
    for row, reference in zip(got, expected, strict=True):
        for key in keys:
            assert row[key] == pytest.approx(reference[key], rel=RELATIVE, abs=1e-6), key


def test_sft_on_the_gpu_equals_sft_on_the_cpu(device, data, tmp_path):
    model = tiny_checkpoint()
    gpu = sft_run(model, data, tmp_path / "gpu")
    with on_cpu():
        cpu = sft_run(model, data, tmp_path / "cpu")
    assert_same_rows(gpu.rows, cpu.rows, ("loss", "grad_norm"))
    assert relative_difference(gpu.end, cpu.end) < RELATIVE


@pytest.mark.parametrize("family", sorted(family_names()))
def test_every_family_trains_two_rl_steps_and_evaluates_as_on_the_cpu(family, device, data, tmp_path):
    """Two RL steps (scripted completions: the same on both devices), then `vlrl eval` of the
    trained checkpoint: greedy answers are transformers' generate's, and the metrics equal the
    CPU's evaluation of the CPU run's checkpoint when the answers agree."""
    model = tiny_checkpoint(tiny_builds()[family])
    options = {"model.dtype": "float32", "model.max_pixels": 12544, "trainer.save_every": 2}
    gpu = rl_run(model, data, tmp_path / "gpu", **options)
    with on_cpu():
        cpu = rl_run(model, data, tmp_path / "cpu", **options)
    assert_same_rows(gpu.rows, cpu.rows, ("loss", "grad_norm", "kl"))
    assert relative_difference(gpu.update(), cpu.update()) < RELATIVE
    checkpoint = tmp_path / "gpu" / "checkpoints" / "step-0000002"
    greedy_equals_generate(checkpoint, data, device, "float32", 24)
    evaluate = ["eval", "--task", f"refcoco={data}", "--limit", "4", "eval.max_new_tokens=24", "--model"]
    assert main([*evaluate, str(checkpoint), "--out", str(tmp_path / "eval-gpu")]) == 0
    with on_cpu():
        assert (
            main(
                [*evaluate, str(tmp_path / "cpu" / "checkpoints" / "step-0000002"), "--out", str(tmp_path / "eval-cpu")]
            )
            == 0
        )
    results = {side: json.loads((tmp_path / f"eval-{side}" / "results.json").read_text()) for side in ("gpu", "cpu")}
    answers = {
        side: [
            json.loads(line)["resps"]
            for line in (tmp_path / f"eval-{side}" / "samples_refcoco.jsonl").read_text().splitlines()
        ]
        for side in ("gpu", "cpu")
    }
    assert len(answers["gpu"]) == 4
    if answers["gpu"] == answers["cpu"]:
        assert results["gpu"]["results"] == results["cpu"]["results"]


def test_a_run_stopped_and_resumed_equals_one_that_was_not(mid_model, device, data, tmp_path):
    """The HF engine samples with the run's generator on the GPU: stopped after step 1 (its
    checkpoint) and resumed, the run logs and trains what the uninterrupted run does."""
    options = {"rollout.engine": "hf", "rollout.max_new_tokens": 32, "trainer.save_every": 1, "trainer.steps": 3}
    whole = rl_run(mid_model, data, tmp_path / "whole", **options)
    rl_run(mid_model, data, tmp_path / "resumed", **{**options, "trainer.steps": 1})
    resumed = rl_run(mid_model, data, tmp_path / "resumed", **{**options, "trainer.resume": "auto"})
    logged = rows(tmp_path / "resumed")
    assert [r["step"] for r in logged] == [1, 2, 3]
    # the same completions (their lengths and rewards), losses up to the backward's atomics
    for row, expected in zip(logged, whole.rows, strict=True):
        assert row["completion_length"] == expected["completion_length"]
        assert row["reward"] == expected["reward"]
    assert_same_rows(logged, whole.rows, ("loss", "grad_norm"))
    assert relative_difference(resumed.end, whole.end) < 1e-5


def test_the_cuda_peak_is_logged(mid_model, device, data, tmp_path):
    outcome = rl_run(mid_model, data, tmp_path, **{"trainer.steps": 1})
    if device.type == "cuda":
        assert outcome.rows[0]["gpu_peak_gb"] == pytest.approx(outcome.peak_bytes / 2**30, rel=0.05)
    else:
        assert "gpu_peak_gb" not in outcome.rows[0]
    assert torch.isfinite(torch.tensor(outcome.rows[0]["loss"]))
