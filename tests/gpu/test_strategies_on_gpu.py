"""Every parallelism strategy x full fine-tuning / LoRA x gradient checkpointing on and off trains
two RL steps on one GPU at the mid-size shape in bf16, and each equals the replicated run
without checkpointing (the reference of its kind).

The completions come from the scripted engine (the same whatever the weights or device), so
every run sees the same data and the comparison is of the update alone.

Tolerances. Every configuration runs the same bf16 kernels on the same bf16 weights (FSDP2's
fp32 shards cast to bf16 for compute equal the replicated run's fp32 masters rounded to bf16)
and steps fp32 weights with AdamW, so they differ only where the order of a reduction differs
(FSDP2's fp32 reduce-scatter of bf16 gradients against the replicated cast, recomputed
activations, AdamW on the CPU under offload): a few bf16 roundings of 2**-8 relative each in
the logged loss and gradient norm, hence 2%; a weight update (lr 1e-4, two AdamW steps) within
5% of the reference's norm. A strategy that skipped its update, applied it twice or lost the
KL term is off by 100%.
"""

from __future__ import annotations

import pytest

from data_prep.refcoco import write_synthetic_rec
from tests.gpu.runs import relative_difference, rl_run

pytestmark = pytest.mark.gpu

STRATEGIES = {
    "replicated": {},
    "fsdp2": {"trainer.parallel": "fsdp2"},
    "fsdp2 + cpu_offload": {"trainer.parallel": "fsdp2", "trainer.fsdp.cpu_offload": True},
}
KINDS = {"full": {}, "lora": {"model.lora.r": 16}}
LOSS_RELATIVE = 2e-2
UPDATE_RELATIVE = 5e-2


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_synthetic_rec(tmp_path_factory.mktemp("rec") / "train.json", size=16, seed=0)


@pytest.fixture(scope="module")
def references(mid_model, data, tmp_path_factory):
    return {
        kind: rl_run(mid_model, data, tmp_path_factory.mktemp(f"ref-{kind}"), **options)
        for kind, options in KINDS.items()
    }


@pytest.mark.parametrize("checkpointing", [False, True], ids=["no-checkpointing", "checkpointing"])
@pytest.mark.parametrize("strategy", list(STRATEGIES))
@pytest.mark.parametrize("kind", list(KINDS))
def test_every_strategy_trains_as_the_replicated_run(
    kind, strategy, checkpointing, mid_model, data, references, tmp_path
):
    reference = references[kind]
    if strategy == "replicated" and not checkpointing:
        got = reference
    else:
        options = {**KINDS[kind], **STRATEGIES[strategy], "trainer.gradient_checkpointing": checkpointing}
        got = rl_run(mid_model, data, tmp_path, **options)
    assert len(got.rows) == 2 and all(row["skipped_updates"] == 0 for row in got.rows)
    for row, expected in zip(got.rows, reference.rows, strict=True):
        assert row["loss"] == pytest.approx(expected["loss"], rel=LOSS_RELATIVE, abs=1e-5)
        assert row["grad_norm"] == pytest.approx(expected["grad_norm"], rel=LOSS_RELATIVE)
        assert row["kl"] == pytest.approx(expected["kl"], rel=LOSS_RELATIVE, abs=1e-7)
    assert reference.rows[1]["kl"] > 0  # the second step moved away from the reference model
    update = reference.update()
    assert sum(float(u.abs().sum()) for u in update.values()) > 0
    assert relative_difference(got.update(), update) <= UPDATE_RELATIVE


def test_adapter_dropout_on_the_gpu_leaves_its_generator_where_it_was_while_the_weights_stay_on_the_cpu(device):
    """FSDP2's CPU offload keeps the weights on the CPU while forwards run on the GPU: the masks are
    drawn from the GPU's generator, which `adapters_dropping_out` must set back as the CPU's."""
    import torch
    from peft import LoraConfig, get_peft_model

    from vlrl.models.lora import adapters_dropping_out

    model = get_peft_model(
        torch.nn.Sequential(torch.nn.Linear(8, 8)), LoraConfig(r=4, lora_dropout=0.5, target_modules=["0"])
    ).eval()
    dropout = next(m for m in model.modules() if isinstance(m, torch.nn.Dropout))
    x = torch.ones(64, device=device)
    state = torch.cuda.get_rng_state() if device.type == "cuda" else torch.get_rng_state()
    with adapters_dropping_out(model, seed=3):
        masked = dropout(x)
    after = torch.cuda.get_rng_state() if device.type == "cuda" else torch.get_rng_state()
    assert 0 < int((masked == 0).sum()) < 64  # the masks were drawn on this device
    assert torch.equal(after, state)
