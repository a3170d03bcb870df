"""algo.ref_sync_every / ref_sync_alpha: the KL reference moved toward the policy as TRL's
sync_ref_model moves it, after every n-th optimizer step of the run, and kept in checkpoints."""

from __future__ import annotations

import copy
import shutil

import pytest
import torch

from tests.trainer.test_train_options import run
from vlrl.config import ConfigError, ModelConfig, load_config
from vlrl.models.loading import load_model
from vlrl.trainer.checkpoint import process_file
from vlrl.trainer.reference import mix_into

SYNC = {"algo.beta": 0.5, "algo.ref_sync_alpha": 0.25, "trainer.lr": 1e-2}


def weights(path) -> dict[str, torch.Tensor]:
    model = load_model(ModelConfig(path=str(path), dtype="float32"))
    return {name: p.detach() for name, p in model.named_parameters()}


def test_the_reference_moves_as_trls_sync_ref_model_moves_it():
    """TRL's SyncRefModelCallback._sync_target_model on copies of the same two models; a float32
    policy mixed into a bfloat16 reference (FSDP2's master shards) as its bfloat16 weights would be."""
    from trl.trainer.callbacks import SyncRefModelCallback

    torch.manual_seed(0)
    policy = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    reference = copy.deepcopy(policy)
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(torch.randn_like(p))
    for dtype in (torch.float32, torch.bfloat16):
        ours, theirs = copy.deepcopy(reference).to(dtype), copy.deepcopy(reference).to(dtype)
        mix_into(ours, policy, 0.6)
        SyncRefModelCallback._sync_target_model(copy.deepcopy(policy).to(dtype), theirs, 0.6)
        for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
            assert torch.equal(a, b)
        assert not torch.equal(next(ours.parameters()), next(reference.to(dtype).parameters()))


def test_the_reference_is_mixed_after_every_nth_optimizer_step_and_checkpointed(tmp_path, rec_data, tiny_qwen25):
    """Two optimizer steps a step, a mix every second: after step 1 the reference is 0.25 x the
    policy + 0.75 x the starting model (mixed once, at the step's end; not after its first
    optimizer step), as its checkpoint holds."""
    options = {**SYNC, "algo.mini_batches": 2, "algo.ref_sync_every": 2, "trainer.steps": 1}
    run(tmp_path, rec_data, **options)
    checkpoint = tmp_path / "run" / "checkpoints" / "step-0000001"
    saved = torch.load(process_file(checkpoint, "reference", 0), weights_only=True)
    start, policy = weights(tiny_qwen25), weights(checkpoint)
    assert saved.keys() == start.keys()
    moved = 0
    for name, value in saved.items():
        torch.testing.assert_close(value, start[name].clone().mul_(0.75).add_(policy[name], alpha=0.25))
        moved += not torch.equal(start[name], policy[name])
    assert moved  # the policy moved: the mix is not the starting model


def test_a_resumed_run_goes_on_with_the_moved_reference(tmp_path, rec_data, tiny_qwen25):
    """Two optimizer steps a step, a mix after the 3rd and the 6th: a run resumed after step 2
    takes step 3's KL to the reference the uninterrupted run had (mixed once), not to the
    starting model, and mixes at its 6th optimizer step as that run did (counted over the run)."""
    options = {
        **SYNC, "algo.mini_batches": 2, "algo.ref_sync_every": 3, "trainer.steps": 3, "trainer.save_every": 2,
    }  # fmt: skip
    rows = run(tmp_path, rec_data, **options)
    last = tmp_path / "run" / "checkpoints" / "step-0000003"
    uninterrupted = torch.load(process_file(last, "reference", 0), weights_only=True)
    shutil.rmtree(last)  # the run resumes after step 2
    (tmp_path / "run" / "metrics.jsonl").rename(tmp_path / "uninterrupted.jsonl")
    resumed = run(tmp_path, rec_data, **options)
    assert resumed[-1]["step"] == 3 and rows[2]["kl"] > 0
    assert resumed[-1]["kl"] == pytest.approx(rows[2]["kl"], rel=1e-6)
    again = torch.load(process_file(last, "reference", 0), weights_only=True)
    for name, value in uninterrupted.items():
        torch.testing.assert_close(again[name], value, rtol=0, atol=1e-6)


def test_a_moving_reference_with_lora_is_refused_before_the_model_loads():
    """With LoRA the reference is the policy with its adapters off: nothing of its own to move
    (TRL refuses sync_ref_model with PEFT)."""
    with pytest.raises(ConfigError, match="algo.ref_sync_every moves a reference model of its own"):
        load_config(None, ["model.lora.r=8", "algo.ref_sync_every=4"])


def test_a_process_reads_its_shards_from_its_own_part_and_the_whole_weights_from_process_0s(tmp_path):
    """restore_part(shared=True) as process 1 of two: process 0's part holds the whole weights
    (process 1 writes none of them), process 1's its own shards, which win; a misshapen weight
    is refused naming the part and the weight, before any is written."""
    from contextlib import nullcontext
    from types import SimpleNamespace

    from vlrl.trainer.checkpoint import CheckpointError
    from vlrl.trainer.reference import ReferenceWeights
    from vlrl.trainer.rl import RLTrainer

    model = torch.nn.Linear(3, 2)
    whole = {"weight": torch.ones(2, 3), "bias": torch.full((2,), 2.0)}
    assert ReferenceWeights(model, main=False).state_dict() == {}  # no sharded weight: process 1 writes none
    torch.save(whole, process_file(tmp_path, "reference", 0))
    torch.save({"bias": torch.full((2,), 3.0)}, process_file(tmp_path, "reference", 1))  # as a shard of its own
    procs = SimpleNamespace(rank=1, main=False, together=nullcontext)
    trainer = SimpleNamespace(run=SimpleNamespace(checkpoint=tmp_path, procs=procs, process_parts={}), console=None)
    RLTrainer.restore_part(trainer, "reference", ReferenceWeights(model, main=False), shared=True)
    assert torch.equal(model.weight, whole["weight"]) and torch.equal(model.bias, torch.full((2,), 3.0))
    torch.save({"bias": torch.zeros(5)}, process_file(tmp_path, "reference", 1))
    with pytest.raises(
        CheckpointError, match=r"reference part: the reference's bias should be a tensor of shape \(2,\)"
    ):
        RLTrainer.restore_part(trainer, "reference", ReferenceWeights(model, main=False), shared=True)
    assert torch.equal(model.bias, torch.full((2,), 3.0))
