"""For every loss that TRL's GRPOTrainer also has, vlrl's loss and gradient equal the loss TRL
computes from the same log-probs, rewards and masks (TRL's own `_compute_loss`, run on them)."""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
from trl import GRPOTrainer

from vlrl.algos.advantages import grpo
from vlrl.algos.losses import KL_ESTIMATORS, policy_loss, token_weights
from vlrl.config import AlgoConfig

MAX_COMPLETION_LENGTH = 12


class IdentityAccelerator:
    num_processes = 1
    sync_gradients = True

    def gather(self, x):
        return x

    gather_for_metrics = gather

    def reduce(self, x, reduction="sum"):
        return x


def trl_loss(logp, old_logp, ref_logp, advantages, mask, loss_type, beta, epsilon_low, epsilon_high, level):
    """Run TRL's GRPOTrainer._compute_loss on given tensors, with the model forward replaced by them."""
    rows, width = logp.shape
    fake = SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *args, **kwargs: (logp, torch.zeros_like(logp), None),
        aux_loss_enabled=False,
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        importance_sampling_level=level,
        beta=beta,
        args=SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=1),
        loss_type=loss_type,
        epsilon_low=epsilon_low,
        epsilon_high=epsilon_high,
        use_vllm=False,
        vllm_importance_sampling_correction=False,
        model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1,
        max_completion_length=MAX_COMPLETION_LENGTH,
        accelerator=IdentityAccelerator(),
        _entropy_bonus_enabled=False,
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
    )
    inputs = {
        "prompt_ids": torch.zeros(rows, 1, dtype=torch.long),
        "prompt_mask": torch.ones(rows, 1, dtype=torch.long),
        "completion_ids": torch.zeros(rows, width, dtype=torch.long),
        "completion_mask": mask,
        "advantages": advantages,
        "old_per_token_logps": old_logp,
        "num_items_in_batch": mask.sum(),
    }
    if beta != 0.0:
        inputs["ref_per_token_logps"] = ref_logp
    return GRPOTrainer._compute_loss(fake, None, inputs)


AGGREGATION = {"grpo": "seq_mean_token_mean", "bnpo": "token_mean", "dapo": "token_mean", "dr_grpo": "seq_mean_token_sum_norm"}


def vlrl_loss(logp, old_logp, ref_logp, advantages, mask, loss_type, beta, epsilon_low, epsilon_high, level):
    cfg = AlgoConfig(epsilon=epsilon_low, epsilon_high=epsilon_high, ratio_level=level, beta=beta)
    per_token = policy_loss(logp, old_logp, advantages, mask, cfg).per_token
    if beta != 0.0:
        per_token = per_token + beta * KL_ESTIMATORS["k3"](logp, ref_logp)
    return (per_token * token_weights(mask, AGGREGATION[loss_type], MAX_COMPLETION_LENGTH)).sum()


CASES = [
    # loss_type, beta, epsilon_high, importance-sampling level
    ("grpo", 0.0, 0.2, "token"),
    ("grpo", 0.04, 0.2, "token"),
    ("grpo", 0.04, 0.28, "token"),
    ("dr_grpo", 0.0, 0.2, "token"),
    ("dr_grpo", 0.04, 0.28, "token"),
    ("bnpo", 0.0, 0.28, "token"),
    ("dapo", 0.0, 0.28, "token"),
    ("dapo", 0.04, 0.28, "token"),
    ("grpo", 0.0, 0.2, "sequence"),
    ("dapo", 0.04, 0.28, "sequence"),
]


@pytest.mark.parametrize("loss_type,beta,epsilon_high,level", CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_loss_and_gradient_equal_trl(loss_type, beta, epsilon_high, level, seed):
    g = torch.Generator().manual_seed(seed)
    rows, width = 8, MAX_COMPLETION_LENGTH
    rewards = torch.rand(2, 4, generator=g).round()
    advantages = grpo(rewards).view(-1)
    base = -torch.rand(rows, width, generator=g) * 3
    old_logp = base + 0.3 * torch.randn(rows, width, generator=g)  # ratios well outside [0.8, 1.28] too
    ref_logp = base + 0.2 * torch.randn(rows, width, generator=g)
    lengths = torch.randint(1, width + 1, (rows,), generator=g)
    mask = (torch.arange(width)[None, :] < lengths[:, None]).float()

    ours_logp = base.clone().requires_grad_(True)
    theirs_logp = base.clone().requires_grad_(True)
    ours = vlrl_loss(ours_logp, old_logp, ref_logp, advantages, mask, loss_type, beta, 0.2, epsilon_high, level)
    theirs = trl_loss(theirs_logp, old_logp, ref_logp, advantages, mask, loss_type, beta, 0.2, epsilon_high, level)
    ours.backward()
    theirs.backward()
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(ours_logp.grad * mask, theirs_logp.grad * mask, rtol=1e-5, atol=1e-7)


def test_advantages_equal_trl_group_normalisation():
    rewards = torch.tensor([[1.0, 0.0, 0.5, 0.25], [2.0, 2.0, 2.0, 2.0], [0.0, 1.0, 1.0, 1.0]])
    # TRL: mean and std (unbiased) per group, advantages = (r - mean) / (std + 1e-4)
    mean = rewards.mean(dim=1).repeat_interleave(4)
    std = rewards.std(dim=1).repeat_interleave(4)
    expected = (rewards.view(-1) - mean) / (std + 1e-4)
    torch.testing.assert_close(grpo(rewards).view(-1), expected)
