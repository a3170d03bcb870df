"""Per-token policy losses, KL estimators and the weights that aggregate tokens into a loss.

The trainer computes `token_weights` once for the whole update batch; each micro-batch then
contributes sum(per_token_loss * weights) to the loss, so splitting a batch into
micro-batches changes nothing in the gradient.
"""

from __future__ import annotations

import torch


def clipped_surrogate(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    epsilon_low: float,
    epsilon_high: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO/GRPO clipped objective as a loss: -min(r A, clip(r, 1-eps_low, 1+eps_high) A).

    logp, old_logp: (R, T); advantages: (R,). Returns the per-token loss and where clipping
    was active (the clipped term was the smaller one).
    """
    ratio = torch.exp(logp - old_logp)
    adv = advantages.unsqueeze(1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high) * adv
    loss = -torch.min(unclipped, clipped)
    return loss, (clipped < unclipped)


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(pi || ref) per token: exp(ref - logp) - (ref - logp) - 1."""
    delta = ref_logp - logp
    return torch.exp(delta) - delta - 1


KL_ESTIMATORS = {"k3": kl_k3}


def token_weights(mask: torch.Tensor, aggregation: str, max_completion_length: int) -> torch.Tensor:
    """Weights w with loss = sum(per_token_loss * w) over the whole batch.

    token_mean: every token of the batch counts the same (DAPO, TRL's bnpo/dapo).
    seq_mean_token_mean: mean over each sequence's tokens, then over sequences (GRPO, TRL's grpo).
    seq_mean_token_sum_norm: token sums divided by sequences x max length (Dr.GRPO).
    """
    mask = mask.float()
    if aggregation == "token_mean":
        return mask / mask.sum().clamp(min=1.0)
    if aggregation == "seq_mean_token_mean":
        return mask / mask.sum(dim=1, keepdim=True).clamp(min=1.0) / mask.shape[0]
    if aggregation == "seq_mean_token_sum_norm":
        return mask / (mask.shape[0] * max_completion_length)
    raise ValueError(f"unknown aggregation {aggregation!r}")
