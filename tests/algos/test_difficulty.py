"""UniVG-R1's difficulty weights phi(mIoU) against the values of its trainer's three formulas
(AMAP-ML/UniVG-R1@44868ea trainer/grpo_trainer.py, miou_adjust_math exp / power / log)."""

from __future__ import annotations

import pytest
import torch

from vlrl.algos.difficulty import difficulty_weights

MIOU = torch.tensor([0.0, 0.2, 0.5, 0.8, 1.0], dtype=torch.float64)


@pytest.mark.parametrize(
    "mode,expected",
    [
        ("exp", [2.718282, 2.225541, 1.648721, 1.221403, 1.0]),  # math.exp(1 - miou): its released run
        ("power", [1.05, 0.85, 0.55, 0.25, 0.05]),  # (1.05 - miou) ** miou_weight, weight 1
        ("log", [3.912023, 1.514128, 0.653926, 0.198451, -0.019803]),  # -math.log(0.02 + miou): < 0 above 0.98
    ],
)
def test_weights_equal_univg_r1s_formulas(mode, expected):
    assert difficulty_weights(MIOU, mode).tolist() == pytest.approx(expected, abs=1e-6)


def test_power_takes_its_exponent_and_unknown_modes_are_refused():
    assert difficulty_weights(MIOU[:2], "power", 2.0).tolist() == pytest.approx([1.05**2, 0.85**2])
    with pytest.raises(ValueError, match="unknown difficulty weighting 'linear'"):
        difficulty_weights(MIOU, "linear")
