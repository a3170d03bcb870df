"""Reward shaping applied by the trainer on top of a task's rewards, per group of completions."""

from __future__ import annotations

import math

import torch

from vlrl.config import TrustConfig


def overlong_penalty(lengths: torch.Tensor, max_length: int, buffer: int, penalty: float = 1.0) -> torch.Tensor:
    """DAPO's soft overlong punishment: 0 up to L_max - L_cache, then linear down to -penalty at L_max."""
    if buffer <= 0:
        return torch.zeros_like(lengths, dtype=torch.float32)
    start = max_length - buffer
    ramp = (start - lengths.float()) / buffer * penalty
    return torch.where(lengths.float() <= start, torch.zeros_like(ramp), ramp.clamp(min=-penalty))


def trust_bonus_paper(
    thinking: torch.Tensor, correct: torch.Tensor, alpha: float, step: int, decay_steps: float
) -> torch.Tensor:
    """Trust-GRPO as the SophiaVL-R1 paper writes it, for one group: gamma * alpha * exp(-step / T) * R^t.

    gamma = 1 when the thinking reward is on average at least as high on correct completions
    as on wrong ones, exp(mu_c - mu_w) otherwise; a group that is all right or all wrong gets
    no thinking reward (nothing to trust it against).
    """
    if bool(correct.all()) or not bool(correct.any()):
        return torch.zeros_like(thinking)
    mu_correct = thinking[correct].mean()
    mu_wrong = thinking[~correct].mean()
    gamma = 1.0 if mu_correct >= mu_wrong else float(torch.exp(mu_correct - mu_wrong))
    return gamma * alpha * math.exp(-step / decay_steps) * thinking


# SophiaVL-R1's released reward manager (kxfan2002/SophiaVL-R1 at a818494,
# verl/workers/reward/custom.py, CustomRewardManager.__call__ with n > 0): its fixed thresholds.
CODE_SKIP_ABOVE, CODE_SKIP_BELOW = 0.9, 0.1  # every outcome >= 0.9, or every one <= 0.1: no thinking reward
CODE_MIN_OUTCOME = 0.2  # an answer whose outcome is below this gets no thinking reward
CODE_CORRECT = 0.5  # outcome at which an answer counts as correct for the trust comparison


def trust_bonus_code(
    thinking: torch.Tensor, outcome: torch.Tensor, alpha: float, step: int, decay_steps: float
) -> torch.Tensor:
    """Trust-GRPO as SophiaVL-R1's released code computes it, for one group, from the outcome
    (accuracy) rewards: thinking rewards of answers below outcome 0.2 count as 0 (also in the
    means); the weight alpha * exp(-step / T) is multiplied by exp(mu_c - mu_w) when the correct
    answers' (outcome >= 0.5) mean thinking reward is below the others' and some answer is
    correct; a group whose outcomes are all >= 0.9 or all <= 0.1 gets nothing."""
    if bool((outcome >= CODE_SKIP_ABOVE).all()) or bool((outcome <= CODE_SKIP_BELOW).all()):
        return torch.zeros_like(thinking)
    process = torch.where(outcome >= CODE_MIN_OUTCOME, thinking, torch.zeros_like(thinking))
    correct = outcome >= CODE_CORRECT
    mu_correct = float(process[correct].mean()) if bool(correct.any()) else 0.0
    mu_wrong = float(process[~correct].mean()) if bool((~correct).any()) else 0.0
    weight = alpha * math.exp(-step / decay_steps)
    if mu_correct < mu_wrong and bool(correct.any()):
        weight *= math.exp(mu_correct - mu_wrong)
    return weight * process


def trust_bonus(
    thinking: torch.Tensor, outcome: torch.Tensor, correct: torch.Tensor, trust: TrustConfig, step: int
) -> torch.Tensor:
    """Trust-GRPO's thinking reward for one group, by `trust.variant` (code or paper)."""
    if trust.variant == "code":
        return trust_bonus_code(thinking, outcome, trust.alpha, step, trust.decay_steps)
    return trust_bonus_paper(thinking, correct, trust.alpha, step, trust.decay_steps)


def temporal_bonus(
    accuracy_ordered: torch.Tensor,
    accuracy_shuffled: torch.Tensor,
    correct_ordered: torch.Tensor,
    alpha: float,
    mu: float,
) -> torch.Tensor:
    """T-GRPO (Video-R1) for one prompt: alpha on each correct completion of the ordered input
    when mean accuracy(ordered) >= mu * mean accuracy(shuffled), i.e. when order helped.

    Video-R1's code compares the mean accuracy rewards (the paper: the fractions correct; the
    same for 0/1 rewards) and rewards completions whose accuracy is over 0.1.
    """
    if accuracy_ordered.float().mean() >= mu * accuracy_shuffled.float().mean():
        return alpha * correct_ordered.float()
    return torch.zeros_like(correct_ordered, dtype=torch.float32)


def length_bonus(lengths: torch.Tensor, correct: torch.Tensor, low: int, high: int, bonus: float) -> torch.Tensor:
    """Video-R1's length control for one group: when more than one completion is correct, each
    correct one of low to high tokens (end of sequence included) gets `bonus`."""
    if int(correct.sum()) <= 1:
        return torch.zeros_like(lengths, dtype=torch.float32)
    return bonus * (correct & (lengths >= low) & (lengths <= high)).float()
