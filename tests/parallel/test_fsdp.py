"""FSDP2 (trainer.parallel=fsdp2) on 2 and 4 gloo CPU processes equals one replicated process.

Each launch runs several scenarios in one torchrun (tests/fixtures/fsdp_worker.py): process
start-up is most of the cost here. Tolerances: the processes reduce gradients in another order
than one process sums them, in float32, so values agree to ~1e-6 relative, not bitwise; the
bounds below are 10x what was measured (weights: 3.8e-6 absolute on 4 processes).
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.parallel.test_distributed import torchrun_command, torchrun_env
from tests.parallel.test_precision import layer_weights, moved_fraction
from vlrl.config import ModelConfig
from vlrl.models.loading import pretrained

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "tests" / "fixtures" / "fsdp_worker.py"
WEIGHT_ATOL = 4e-5
RELATIVE = 2e-5


def load_worker():
    spec = importlib.util.spec_from_file_location("fsdp_worker", WORKER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def launch(processes: int, out: Path, data: Path, *scenarios: str) -> list[dict]:
    """torchrun of the worker on `processes` CPU processes; each process's results."""
    out.mkdir(parents=True, exist_ok=True)
    env = torchrun_env(out)
    # Its own session: a deadlock (what FSDP2 does when processes run unequal forwards) fails
    # the test after the timeout, and the hung workers are killed with the launcher.
    launcher = subprocess.Popen(
        [*torchrun_command(processes), str(WORKER), str(out), str(data), *scenarios],
        cwd=out,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _, err = launcher.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.communicate()
        raise AssertionError(
            f"the {processes} processes did not finish in 240 s (a collective left unpaired?)"
        ) from None
    assert launcher.returncode == 0, err[-4000:]
    return [torch.load(out / f"results.{rank}.pt", weights_only=True) for rank in range(processes)]


FAMILIES = ("qwen3_vl", "qwen3_5", "qwen3_5_moe")  # beside Qwen2.5-VL, trained on two processes


@pytest.fixture(scope="module")
def reference(tmp_path_factory, rec_data, tiny_qwen25) -> dict[str, dict]:
    """The same runs on one process, replicated (today's trainer)."""
    worker = load_worker()
    out = tmp_path_factory.mktemp("reference")
    return {
        "rl": worker.rl(out / "rl", str(rec_data), "replicated")[0],
        "rl, step 3": worker.rl(out / "rl", str(rec_data), "replicated", **{"trainer.steps": 3})[0],
        "lora": worker.rl(out / "lora", str(rec_data), "replicated", **{"model.lora.r": 4})[0],
        "rl-ref-sync": worker.rl(out / "rl-ref-sync", str(rec_data), "replicated", **worker.RL_RUNS["rl-ref-sync"])[0],
        "sft": worker.sft(out / "sft", str(rec_data), "replicated"),
        **{
            family: worker.rl(out / family, str(rec_data), "replicated", **worker.RL_RUNS[family])[0]
            for family in FAMILIES
        },
    }


SAME_AS = {
    "rl": "rl",
    "rl-torch-2.11": "rl",
    "rl-chunks": "rl",
    "rl-recompute": "rl",
    "rl-ref-sync": "rl-ref-sync",
    "lora": "lora",
    "lora-offload": "lora",
    "sft": "sft",
} | {f: f for f in FAMILIES}


def assert_same_run(sharded: dict, one: dict) -> None:
    """Logged loss and grad norm of every step, and the final full weights (LoRA merged)."""
    assert len(sharded["rows"]) == len(one["rows"]) == 2
    for row, expected in zip(sharded["rows"], one["rows"], strict=True):
        assert row["loss"] == pytest.approx(expected["loss"], rel=RELATIVE, abs=1e-7)
        assert row["grad_norm"] == pytest.approx(expected["grad_norm"], rel=RELATIVE)
        assert row["grad_norm"] > 0
    assert sharded["weights"].keys() == one["weights"].keys()
    for name, tensor in one["weights"].items():
        torch.testing.assert_close(sharded["weights"][name], tensor, rtol=0, atol=WEIGHT_ATOL, msg=name)


@pytest.mark.slow  # over 20 s on an idle 2-core machine (56 s): `make test-slow`
def test_fsdp2_on_two_processes_trains_resumes_and_samples_like_one_process(tmp_path, rec_data, tiny_qwen25, reference):
    # With gradient checkpointing, with the weights and AdamW's state offloaded to the CPU, with
    # the update's output layer scored in checkpointed chunks of 8 tokens: the same numbers as
    # one replicated process without any of them.
    # On torch 2.11's FSDP2 too (no set_reduce_scatter_unused_params: vlrl/parallel/fsdp2.py).
    scenarios = (
        "rl-recompute",
        "rl-torch-2.11",
        "rl-chunks",
        "lora-offload",
        "sft",
        "precision",
        "rl-hf",
        "resume",
        "generate",
        "rl-ref-sync",
        "resume-ref-sync",
        *FAMILIES,
    )
    ranks = launch(2, tmp_path, rec_data, *scenarios)
    first = ranks[0]
    for scenario in ("rl-recompute", "rl-torch-2.11", "rl-chunks", "lora-offload", "sft", "rl-ref-sync", *FAMILIES):
        assert_same_run(first[scenario], reference[SAME_AS[scenario]])
    assert first["lora-offload"]["offloaded"] and not first["rl-recompute"]["offloaded"]
    # LoRA's full weights are the base plus B A: PEFT's own merge of the adapter the run saved
    checkpoint = tmp_path / "lora-offload" / "checkpoints" / "step-0000002"
    model_cfg = ModelConfig(path=str(tiny_qwen25), dtype="float32")
    merged, base = (dict(pretrained(model_cfg, str(path)).named_parameters()) for path in (checkpoint, tiny_qwen25))
    adapted = [n for n in merged if "q_proj.weight" in n and "visual" not in n]
    assert adapted and all(not torch.equal(merged[n], base[n]) for n in adapted)  # the adapter moved them
    for name, tensor in first["lora-offload"]["weights"].items():
        torch.testing.assert_close(tensor, merged[name].detach(), rtol=0, atol=1e-6, msg=name)
    # The rollout engine received the full weights (LoRA merged), as from one process.
    for scenario in ("rl-recompute", "lora-offload"):
        pushed, expected = first[scenario]["pushed"], reference[SAME_AS[scenario]]["pushed"]
        assert pushed.keys() == expected.keys() and len(pushed) == len(first[scenario]["weights"])
        assert all(pushed[n] == pytest.approx(expected[n], rel=1e-4, abs=1e-4) for n in expected)
    # Process 1's prompts took fewer micro-batches: it ran idle passes, forward-only (reference
    # log-probs) and with a backward (the update), so that every forward had a partner.
    assert True in ranks[1]["idle"]["passes"] and False in ranks[1]["idle"]["passes"]
    # Sampling with the policy (each process its own prompts, its own generator), stopped after
    # step 1 and resumed: the same metrics and weights as the uninterrupted run.
    resumed = first["resume"]
    assert resumed["rows"] == first["rl-hf"]["rows"]
    assert all(torch.equal(resumed["weights"][n], t) for n, t in first["rl-hf"]["weights"].items())
    # The reference mixed toward the policy on each process's shards (step 2's KL to it is half
    # its loss), saved and loaded shard by shard: resumed after step 1, the same step 2.
    assert first["resume-ref-sync"]["rows"] == first["rl-ref-sync"]["rows"]
    # Sampling with the sharded policy, 24 decoding steps on process 0 and 3 on process 1: no
    # deadlock, and the tokens a plain copy of the weights samples with the same generator.
    for rank in ranks:
        assert rank["generate"]["sharded"] == rank["generate"]["plain"]
    assert max(len(ids) for group in ranks[0]["generate"]["sharded"] for ids in group) > 3

    # A bf16 model trains through fp32 shards (FSDP2's mixed precision): AdamW's 1e-6 steps,
    # which bf16 weights would round away (tests/parallel/test_precision.py), move nearly every weight;
    # the checkpoint's model is those weights rounded.
    masters, saved = (layer_weights(first["precision"][key]) for key in ("masters", "saved"))
    assert masters.keys() == saved.keys() and all(m.dtype == torch.float32 for m in masters.values())
    start = {n: t.to(torch.bfloat16) for n, t in layer_weights(load_file(tiny_qwen25 / "model.safetensors")).items()}
    assert moved_fraction(start, masters) > 0.95
    assert all(torch.equal(saved[n], masters[n].to(torch.bfloat16)) for n in saved)

    # The two processes' checkpoint of step 2 resumes on one process (DCP reshards the weights
    # and AdamW's state): step 3 is the step one process takes after its own two.
    worker = load_worker()
    try:
        options = {**worker.RL_RUNS["rl-recompute"], "trainer.steps": 3}
        third = worker.rl(tmp_path / "rl-recompute", str(rec_data), "fsdp2", **options)[0]
    finally:
        torch.distributed.destroy_process_group()  # the one-process group FSDP2 made in this process
    expected = reference["rl, step 3"]
    assert third["rows"][:2] == first["rl-recompute"]["rows"]
    assert third["rows"][2] == pytest.approx(expected["rows"][2], rel=RELATIVE)
    for name, tensor in expected["weights"].items():
        torch.testing.assert_close(third["weights"][name], tensor, rtol=0, atol=WEIGHT_ATOL, msg=name)


@pytest.mark.slow  # over 20 s on an idle 2-core machine
def test_fsdp2_on_four_processes_equals_one_process(tmp_path, rec_data, reference):
    ranks = launch(4, tmp_path, rec_data, "rl", "lora")
    for scenario in ("rl", "lora"):
        assert_same_run(ranks[0][scenario], reference[scenario])
    assert any(rank["idle"]["passes"] for rank in ranks)
