"""Advantages from the rewards of each prompt's group of G completions.

All estimators take rewards (groups, G) and return advantages of the same shape.
"""

from __future__ import annotations

import torch

from vlrl.config import AlgoConfig


def grpo(rewards: torch.Tensor, std_eps: float = 1e-4, std_scope: str = "group") -> torch.Tensor:
    """(r - mean_g) / (std + eps), std unbiased as TRL computes it: of the group, or of the whole batch
    (TRL's scale_rewards="batch")."""
    centered = rewards - rewards.mean(dim=1, keepdim=True)
    std = rewards.std(dim=1, keepdim=True) if std_scope == "group" else rewards.std()
    return centered / (std + std_eps)


def without_spread(rewards: torch.Tensor) -> torch.Tensor:
    """Per group (the last dimension): are its rewards all equal, DAPO's dynamic-sampling filter
    (np.std over Python floats, exactly 0 then). Not a float32 std of 0: torch's of eight 0.7s is
    6.4e-8, and such a group would pass for one that teaches something."""
    return rewards.amax(dim=-1) == rewards.amin(dim=-1)


def dr_grpo(rewards: torch.Tensor) -> torch.Tensor:
    """Dr.GRPO: r - mean_g, no division by the std (which favours too-easy and too-hard prompts)."""
    return rewards - rewards.mean(dim=1, keepdim=True)


def rloo(rewards: torch.Tensor) -> torch.Tensor:
    """REINFORCE leave-one-out: r_i minus the mean of the other G - 1 rewards = G/(G-1) (r_i - mean)."""
    g = rewards.shape[1]
    return (rewards - rewards.mean(dim=1, keepdim=True)) * g / (g - 1)


def sign(correct: torch.Tensor) -> torch.Tensor:
    """+1 for a correct completion, -1 otherwise: the REINFORCE of "The Surprising Effectiveness of
    Negative Reinforcement in LLM Reasoning" (with positive_weight 0.1 it is their W-REINFORCE)."""
    return correct.float() * 2 - 1


def reinforce_baseline(rewards: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """OpenRLHF's reinforce_baseline (LMM-R1 @f917f18, openrlhf/trainer/ppo_utils/
    experience_maker.py): the group mean taken off, then whitened over every completion token of
    the batch: shifted by the token-weighted mean and divided by the token-weighted (biased) std,
    floored at 1e-4 (its rsqrt of the variance clamped at 1e-8). So a long completion weighs more
    in both, and a group of equal rewards still gets the shift. Its KL, folded into each token's
    return there, is the loss's term here (algo.beta), so every token of a row shares its value."""
    centered = dr_grpo(rewards)
    weights = lengths.to(centered.dtype)
    total = weights.sum().clamp(min=1.0)
    mean = (weights * centered).sum() / total
    variance = (weights * (centered - mean) ** 2).sum() / total
    return (centered - mean) * variance.clamp(min=1e-8).rsqrt()


CLIP_FILTER_MAX = 3.0  # MM-EUREKA's --clip_filter_like_weight_clip_eps default


def cpgd(rewards: torch.Tensor, weighting: str, std_eps: float) -> torch.Tensor:
    """CPGD's A = w (R - mean_g) with w = 1 (equal), 1 / (std_g + eps) (std), or clip_filter.

    clip_filter is CPGD's "clip-filter-like" weight (MM-EUREKA fe4a536,
    openrlhf/trainer/ppo_utils/experience_maker.py: clip_filter_like_weight_func, applied to
    reinforce_baseline's centered rewards): the batch rescaled by (groups / groups with any
    spread), at most CLIP_FILTER_MAX, so that groups that teach nothing do not dilute the
    update, as if they had been filtered out (DAPO-style) without resampling.
    """
    centered = dr_grpo(rewards)
    if weighting == "equal":
        return centered
    if weighting == "std":
        return centered / (rewards.std(dim=1, keepdim=True) + std_eps)
    informative = (rewards.std(dim=1) > 0).float().sum()
    if not informative:  # the public weight is 1 then; every centered reward is 0 anyway
        return centered
    return centered * (rewards.shape[0] / informative).clamp(max=CLIP_FILTER_MAX)


def advantages(
    rewards: torch.Tensor, correct: torch.Tensor, cfg: AlgoConfig, lengths: torch.Tensor | None = None
) -> torch.Tensor:
    """(groups, G) advantages; `lengths` (groups, G), the completions' tokens, for reinforce_baseline."""
    if cfg.advantage == "grpo":
        adv = grpo(rewards, cfg.std_eps, cfg.advantage_std)
    elif cfg.advantage == "dr_grpo":
        adv = dr_grpo(rewards)
    elif cfg.advantage == "rloo":
        adv = rloo(rewards)
    elif cfg.advantage == "sign":
        adv = sign(correct)
    elif cfg.advantage == "cpgd":
        adv = cpgd(rewards, cfg.cpgd_weighting, cfg.std_eps)
    elif cfg.advantage == "reinforce_baseline":
        if lengths is None:
            raise ValueError("reinforce_baseline weighs tokens: give the completions' lengths")
        adv = reinforce_baseline(rewards, lengths)
    else:
        raise ValueError(f"unknown advantage estimator {cfg.advantage!r}")
    if cfg.positive_weight != 1.0 or cfg.negative_weight != 1.0:
        adv = torch.where(adv > 0, adv * cfg.positive_weight, adv * cfg.negative_weight)
    return adv
