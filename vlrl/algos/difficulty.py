"""UniVG-R1's difficulty-aware weighting: a group's policy term times phi(mIoU).

AMAP-ML/UniVG-R1 at 44868ea, src/open-r1-multimodal/src/open_r1/trainer/grpo_trainer.py
(`miou_adjust`): mIoU is the mean of the first reward function (the IoU, unweighted) over the
rows a process scored, which its released run (per-device batch = G) makes one prompt's group;
the clipped policy term, not the KL, is multiplied by phi before the KL is added. Hard groups
(low mIoU) weigh more. Its modes (`miou_adjust_math`): exp e^(1 - m) (the released run),
power (1.05 - m)^w, log -ln(0.02 + m) (negative above m = 0.98: it flips that group's objective).
"""

from __future__ import annotations

import torch


def difficulty_weights(mean_accuracy: torch.Tensor, mode: str, power: float = 1.0) -> torch.Tensor:
    """phi of each group's mean accuracy (its mIoU), same shape."""
    if mode == "exp":
        return torch.exp(1 - mean_accuracy)
    if mode == "power":
        return (1.05 - mean_accuracy) ** power
    if mode == "log":
        return -torch.log(0.02 + mean_accuracy)
    raise ValueError(f"unknown difficulty weighting {mode!r}")
