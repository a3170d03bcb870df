"""UniVG-R1's difficulty-aware weighting (algo.difficulty) in the update: each group's policy term,
and not its KL, times e^(1 - mean of the named reward component), checked against the loss
computed by hand from the completions' texts."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from rich.console import Console

from tests.trainer.test_train import tiny_overrides
from vlrl.config import ConfigError, load_config
from vlrl.trainer.batch import RolloutBatch
from vlrl.trainer.rl import RLTrainer


def overrides(run_dir: Path, data: Path, **extra) -> list[str]:
    values = {"trainer.prompts_per_step": 3, "trainer.max_grad_norm": 1e9, "algo.beta": 0.0, **extra}
    return tiny_overrides(run_dir, data, **values)


@pytest.fixture(scope="module")
def trainer_and_batch(tmp_path_factory, rec_data, tiny_qwen25):
    run_dir = tmp_path_factory.mktemp("difficulty")
    cfg = load_config(None, overrides(run_dir, rec_data, **{"algo.beta": 0.04}))
    trainer = RLTrainer(cfg, Console(quiet=True))
    with torch.no_grad():  # let the policy drift from the reference so that the KL is not 0
        for p in trainer.run.model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    task, samples = trainer.sources[0].task, trainer.sources[0].train.samples[:3]
    groups, _ = trainer.generate_groups([(task, s) for s in samples], step=1)
    batch = RolloutBatch.from_groups(groups, trainer.run.pad_id)
    advantages = torch.randn(len(batch.prompt_index), generator=torch.Generator().manual_seed(1))
    return trainer, batch, advantages


def one_update(trainer: RLTrainer, batch: RolloutBatch, advantages: torch.Tensor, weighting: str, beta: float):
    """The update's loss and parameter change (SGD, lr 1) from the same starting weights."""
    model = trainer.run.model
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer.cfg.algo.difficulty.weighting = weighting
    trainer.cfg.algo.difficulty.reward = "brevity"
    trainer.cfg.algo.beta = beta
    trainer.run.optimizer = torch.optim.SGD(trainer.run.strategy.parameters, lr=1.0)
    trainer.run.scheduler = torch.optim.lr_scheduler.LambdaLR(trainer.run.optimizer, lambda s: 1.0)
    stats, skipped = trainer.update(batch, advantages)
    assert skipped == 0
    delta = {n: start[n] - p.detach() for n, p in model.named_parameters()}
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(start[n])
    return stats, delta


def mean_brevity(batch: RolloutBatch) -> list[float]:
    """Each group's mean brevity reward (its "mIoU"), computed from the texts themselves."""
    return [sum(max(0.0, 1 - len(c.text) / 200) for c in g.completions) / len(g.completions) for g in batch.groups]


def hand_weights(batch: RolloutBatch) -> torch.Tensor:
    """e^(1 - mIoU) per row."""
    out = []
    for group, mean in zip(batch.groups, mean_brevity(batch), strict=True):
        out += [math.exp(1 - mean)] * len(group.completions)
    return torch.tensor(out)


@pytest.mark.parametrize(
    "weighting, power, phi",
    [
        ("exp", 1.0, lambda m: math.exp(1 - m)),
        ("power", 2.0, lambda m: (1.05 - m) ** 2),
        ("log", 1.0, lambda m: -math.log(0.02 + m)),
    ],
)
def test_each_weighting_gives_each_group_phi_of_its_mean_reward(trainer_and_batch, weighting, power, phi):
    """algo.difficulty.weighting, .power and .reward reach the update's group weights: phi (UniVG-R1's
    miou_adjust_math) of the mean of the named component over each group's completions."""
    trainer, batch, _ = trainer_and_batch
    difficulty = trainer.cfg.algo.difficulty
    difficulty.weighting, difficulty.reward, difficulty.power = weighting, "brevity", power
    means = mean_brevity(batch)
    assert len(set(means)) > 1
    assert trainer.difficulty(batch).tolist() == pytest.approx([phi(m) for m in means], rel=1e-5)


def test_the_weight_multiplies_each_groups_policy_term_and_not_the_kl(trainer_and_batch):
    trainer, batch, advantages = trainer_and_batch
    weights = hand_weights(batch)
    assert len(set(weights.tolist())) > 1  # the groups differ in difficulty
    rows = len(advantages)
    # One pass, the policy unmoved: every ratio is 1, so each row's policy loss is -A (mean over its tokens).
    plain, plain_delta = one_update(trainer, batch, advantages, "none", beta=0.0)
    weighted, weighted_delta = one_update(trainer, batch, advantages, "exp", beta=0.0)
    assert plain["loss"] == pytest.approx(float(-advantages.sum()) / rows, rel=1e-5)
    assert weighted["loss"] == pytest.approx(float(-(advantages * weights).sum()) / rows, rel=1e-5)
    assert weighted["difficulty_weight"] == pytest.approx(float(weights.view(len(batch.groups), -1)[:, 0].mean()))
    assert "difficulty_weight" not in plain
    # With w > 0 the weighted clipped term is the plain one with the advantages scaled by w.
    _, scaled_delta = one_update(trainer, batch, advantages * weights, "none", beta=0.0)
    changed = 0
    for name, value in weighted_delta.items():
        torch.testing.assert_close(value, scaled_delta[name], rtol=1e-4, atol=1e-7, msg=name)
        changed += not torch.allclose(value, plain_delta[name], rtol=1e-3, atol=1e-6)
    assert changed  # turning it off changes the update
    # The KL is not weighted: with beta > 0 the two losses still differ by the policy terms alone.
    plain_kl, _ = one_update(trainer, batch, advantages, "none", beta=0.04)
    weighted_kl, _ = one_update(trainer, batch, advantages, "exp", beta=0.04)
    assert plain_kl["kl"] > 0
    expected = float(-(advantages * (weights - 1)).sum()) / rows
    assert weighted_kl["loss"] - plain_kl["loss"] == pytest.approx(expected, rel=1e-4, abs=1e-6)


def test_the_difficulty_reward_must_be_named_and_be_the_tasks(tmp_path, rec_data, tiny_qwen25):
    with pytest.raises(ConfigError, match=r"algo.difficulty.weighting=exp needs algo.difficulty.reward"):
        load_config(None, overrides(tmp_path, rec_data, **{"algo.difficulty.weighting": "exp"}))
    cfg = load_config(
        None, overrides(tmp_path, rec_data, **{"algo.difficulty.weighting": "exp", "algo.difficulty.reward": "acc"})
    )
    with pytest.raises(ConfigError, match=r"algo.difficulty.reward 'acc' is not one of task 'brief_grounding'"):
        RLTrainer(cfg, Console(quiet=True))
