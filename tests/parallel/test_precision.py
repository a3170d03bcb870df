"""bf16 policies train through fp32 master weights: small updates accumulate instead of rounding away."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from tests.trainer.test_sft import sft_overrides
from vlrl.config import load_config
from vlrl.trainer.checkpoint import load_trainer_state
from vlrl.trainer.sft import train_sft


def layer_weights(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The language model's layer matrices, every one with a gradient in every step, by their
    name below `layers.` (saved files and the model in memory prefix them differently)."""
    return {
        n.split("layers.", 1)[1]: t for n, t in state.items() if "layers." in n and "visual" not in n and t.dim() == 2
    }


def bf16_sft(run_dir, data, **extra):
    """A short bf16 SFT run. The vision tower stays frozen: the tests look at the language model's
    layers (`layer_weights`), and the patch embedding's conv3d backward in bfloat16 takes over a
    second a step on the CPU (80% of these tests' time, 2026-11-28)."""
    options = {"model.dtype": "bfloat16", "model.freeze_vision": True, "sft.lr": 1e-6, "sft.steps": 2,
               "sft.save_every": 2, **extra}  # fmt: skip
    return train_sft(load_config(None, sft_overrides(run_dir, data, **options)))


def moved_fraction(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> float:
    moved = sum(int((after[n].float() != before[n].float()).sum()) for n in before)
    return moved / sum(t.numel() for t in before.values())


def test_masters_take_the_small_steps_that_bf16_weights_round_away(tmp_path, rec_data, tiny_qwen25):
    start = layer_weights(load_file(tiny_qwen25 / "model.safetensors"))
    start_bf16 = {n: t.to(torch.bfloat16) for n, t in start.items()}

    plain = bf16_sft(tmp_path / "plain", rec_data, **{"sft.master_weights": False})
    plain_after = layer_weights(load_file(plain.checkpoint / "model.safetensors"))
    assert moved_fraction(start_bf16, plain_after) < 0.2  # most of AdamW's 1e-6 steps rounded away
    assert load_trainer_state(plain.checkpoint)["master_weights"] == {}  # no fp32 copy was kept

    mixed = bf16_sft(tmp_path / "mixed", rec_data)
    masters = layer_weights(load_trainer_state(mixed.checkpoint)["master_weights"])
    assert masters.keys() == start.keys()
    assert all(m.dtype == torch.float32 for m in masters.values())
    assert moved_fraction(start_bf16, masters) > 0.95  # every weight took its steps, in fp32
    saved = layer_weights(load_file(mixed.checkpoint / "model.safetensors"))
    assert all(torch.equal(saved[n], masters[n].to(torch.bfloat16)) for n in saved)  # the model is the rounded masters


def test_a_bf16_run_resumes_from_its_masters(tmp_path, rec_data, tiny_qwen25):
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    bf16_sft(straight, rec_data, **{"sft.steps": 4})
    bf16_sft(resumed, rec_data)
    bf16_sft(resumed, rec_data, **{"sft.steps": 4})
    a, b = (load_trainer_state(run / "checkpoints" / "step-0000004")["master_weights"] for run in (straight, resumed))
    assert all(torch.equal(a[name], b[name]) for name in a)


def test_only_low_precision_weights_get_fp32_masters_and_a_resume_sets_the_model_from_them():
    from vlrl.parallel.precision import MasterWeights

    low = torch.nn.Parameter(torch.tensor([1.0, 2.0], dtype=torch.bfloat16))
    full = torch.nn.Parameter(torch.tensor([3.0]))
    weights = MasterWeights([("low", low), ("full", full)])
    assert [name for name, _, _ in weights.copies] == ["low"] and weights.masters[1] is full
    saved = {"low": torch.tensor([1.0001, 2.5])}
    weights.load_state_dict(saved)
    assert torch.equal(weights.masters[0], saved["low"]) and torch.equal(low, saved["low"].to(torch.bfloat16))
    with pytest.raises(ValueError, match="fp32 master weights for 2 parameters, this run keeps 1"):
        weights.load_state_dict({"low": saved["low"], "full": torch.tensor([3.0])})
