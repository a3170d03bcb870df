"""Advantages from the rewards of each prompt's group of completions."""

from __future__ import annotations

import torch


def grpo(rewards: torch.Tensor, std_eps: float = 1e-4) -> torch.Tensor:
    """(r - mean_g) / (std_g + eps) per group; rewards are (groups, G), std unbiased as in TRL."""
    mean = rewards.mean(dim=1, keepdim=True)
    std = rewards.std(dim=1, keepdim=True)
    return (rewards - mean) / (std + std_eps)


ADVANTAGES = {"grpo": grpo}
