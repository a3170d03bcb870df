"""The update against a reference computed by hand: each optimizer step's gradient equals the
gradient of the GRPO loss written out here (the ratio to the old log-probs the options choose,
the clipped surrogate, beta times the KL estimator, the token weights) at the parameters that
step started from. A KL estimator fixed to one, old log-probs taken as the current ones once
the policy moved within a step (the ratio stays 1 and nothing is clipped), or
algo.old_logprobs=recompute ignored: each makes a test here fail."""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tests.fixtures.shifted_engine import SHIFT
from tests.rollout.test_rollout_seam import make_trainer
from vlrl.trainer.batch import RolloutBatch, rows_logprobs
from vlrl.trainer.update import add_mismatch, update_stats

FIXTURES = Path(__file__).parent.parent / "fixtures"
SHARED_SHIFTED = f"{FIXTURES / 'shifted_engine.py'}:SharedShiftedEngine"
SHIFTED = f"{FIXTURES / 'shifted_engine.py'}:ShiftedEngine"
CANNED = f"{Path(__file__).parents[2] / 'docs' / 'examples' / 'canned_engine.py'}:CannedEngine"
EPSILON = 0.2  # algo.epsilon's default: the trust region is [0.8, 1.2]


# The KL estimators by name, as volcengine/verl's kl_penalty (verl/trainer/ppo/core_algos.py)
# defines k1 ("kl"), k2 ("mse") and low_var_kl, and TRL's GRPOTrainer its k3 (unclamped), after
# Schulman, "Approximating KL divergence" (2020); d = log pi_ref - log pi.
def k3(logp, ref):
    d = ref - logp
    return torch.exp(d) - d - 1


KL_BY_HAND = {
    "k1": lambda logp, ref: logp - ref,
    "k2": lambda logp, ref: 0.5 * (logp - ref) ** 2,
    "k3": k3,
    "low_var": lambda logp, ref: torch.clamp(k3(logp, ref.clamp(logp - 20, logp + 20)), -10, 10),
    "k3_clamped": lambda logp, ref: k3(logp, ref.clamp(logp - 10, logp + 10)),
}


def rollout(trainer):
    """Two prompts' groups, sampled by the trainer's engine, and advantages far from 0."""
    task, samples = trainer.sources[0].task, trainer.sources[0].train.samples[:2]
    torch.manual_seed(0)
    groups, _ = trainer.generate_groups([(task, s) for s in samples], step=1)
    batch = RolloutBatch.from_groups(groups, trainer.run.pad_id)
    return batch, torch.linspace(-1.0, 1.0, len(batch.prompt_index))


def recorded_update(trainer, batch, advantages):
    """trainer.update, and each optimizer step's (rows it trained, parameters it started from, gradient)."""
    run, steps, trained = trainer.run, [], []
    step, accumulate = run.optimizer_step, trainer.updater.accumulate

    def accumulating(batch, rows, *args, **kwargs):
        trained.append(list(rows))
        return accumulate(batch, rows, *args, **kwargs)

    def recording(finite):
        named = list(run.model.named_parameters())
        steps.append((trained[-1], {n: p.detach().clone() for n, p in named}, {n: p.grad.clone() for n, p in named}))
        return step(finite)

    trainer.updater.accumulate = accumulating
    run.optimizer_step = recording
    stats, _ = trainer.update(batch, advantages)
    return stats, steps


def scored_at(trainer, batch, rows, params=None, grad=False):
    """(len(rows), width) log-probs and entropies of the rows' completions under the policy,
    with `params` loaded (None: as it is), and the width."""
    run = trainer.run
    if params is not None:
        with torch.no_grad():
            for n, p in run.model.named_parameters():
                p.copy_(params[n])
    with torch.set_grad_enabled(grad):
        return rows_logprobs(run.model, batch, rows, trainer.cfg.rollout.temperature, run.pad_id, run.device, True)


def logprobs_at(trainer, batch, rows, params=None, grad=False):
    """(len(rows), width) log-probs of the rows' completions under the policy, and the width."""
    stats, width = scored_at(trainer, batch, rows, params, grad)
    return stats.logp, width


def hand_step(trainer, batch, advantages, rows, params, old, ref=None):
    """The GRPO loss of `rows` written out, at `params`: per token -min(r A, clip(r, 0.8, 1.2) A)
    with r = exp(log pi - old), minus algo.entropy_coef times the step's entropy (verl's and
    EasyR1's pg_loss - entropy_coeff x entropy, aggregated alike), plus beta KL(pi, ref); tokens
    weighed as algo.aggregation says. Its gradient, the ratios, how many tokens were clipped
    below and above, and the summed KL."""
    algo, model = trainer.cfg.algo, trainer.run.model
    model.zero_grad()
    stats, width = scored_at(trainer, batch, rows, params, grad=True)
    logp = stats.logp
    mask = batch.completion_mask[rows, :width]
    a = advantages[rows][:, None] if advantages.dim() == 1 else advantages[rows, :width]  # per row or token
    ratio = torch.exp(logp - old[rows, :width])
    per_token = -torch.minimum(ratio * a, ratio.clamp(1 - EPSILON, 1 + EPSILON) * a)
    per_token = per_token - algo.entropy_coef * stats.entropy
    kl = torch.zeros(())
    if ref is not None:
        kl_tokens = KL_BY_HAND[algo.kl_estimator](logp, ref[rows, :width])
        per_token = per_token + algo.beta * kl_tokens
        kl = (kl_tokens.detach() * mask).sum()
    k = algo.micro_batch_rows  # EasyR1's micro-batches: consecutive rows, each its own token mean
    micro = [mask[i : i + k] / mask[i : i + k].sum() for i in range(0, len(rows), k)]
    weights = {  # TRL's loss types: bnpo / dapo, grpo, dr_grpo; EasyR1's
        "token_mean": mask / mask.sum(),
        "seq_mean_token_mean": mask / mask.sum(dim=1, keepdim=True) / len(rows),
        "seq_mean_token_sum_norm": mask / (len(rows) * trainer.cfg.rollout.max_new_tokens),
        "seq_mean_token_sum": mask / len(rows),
        "micro_token_mean": torch.cat(micro) / len(micro),
    }[algo.aggregation]
    (per_token * weights).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    real = mask.bool()
    low = int(((ratio < 1 - EPSILON) & (a < 0) & real).sum())
    high = int(((ratio > 1 + EPSILON) & (a > 0) & real).sum())
    return grads, ratio.detach()[real], (low, high), float(kl)


def assert_same_gradient(got, expected):
    assert got.keys() == expected.keys()
    for name, grad in expected.items():
        torch.testing.assert_close(got[name], grad, rtol=1e-4, atol=1e-7, msg=name)


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3", "low_var", "k3_clamped"])
def test_each_kl_estimator_enters_the_loss_and_its_gradient(estimator, tmp_path, rec_data, tiny_qwen25, monkeypatch):
    """algo.kl_estimator through a training step: the logged KL and the step's gradient are the
    hand-written estimator's, for a reference 4 nats below to 4 above the policy (k3 up to
    e^4 - 5 = 49.6: low_var clamps it at 10, with no gradient there; k1's gradient is 1 even
    where pi = ref, k2's and k3's 0)."""
    trainer = make_trainer(tmp_path, rec_data, engine="hf", **{"algo.beta": 0.5, "algo.kl_estimator": estimator})
    batch, advantages = rollout(trainer)
    every = list(range(len(batch.prompt_index)))
    current, width = logprobs_at(trainer, batch, every)
    offsets = torch.linspace(-4.0, 4.0, current.numel()).view_as(current)
    ref = torch.zeros_like(batch.completion_mask)
    ref[:, :width] = current + offsets  # the reference's log-probs, by hand
    monkeypatch.setattr(trainer.updater, "reference_logprobs", lambda b: ref)
    stats, steps = recorded_update(trainer, batch, advantages)
    ((rows, params, grads),) = steps
    expected, ratio, _, kl = hand_step(trainer, batch, advantages, rows, params, current, ref)
    torch.testing.assert_close(ratio, torch.ones_like(ratio), atol=1e-5, rtol=0)  # one pass: the ratio is 1
    assert_same_gradient(grads, expected)
    assert stats["kl"] == pytest.approx(kl / float(batch.completion_mask.sum()), rel=1e-5)
    real = batch.completion_mask[:, :width].bool()
    assert float(k3(current, ref[:, :width])[real].max()) > 10  # low_var's clamp is reached


@pytest.mark.parametrize(
    "aggregation",
    ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm", "seq_mean_token_sum", "micro_token_mean"],
)
def test_each_aggregation_weighs_the_tokens_as_its_loss_type(aggregation, tmp_path, rec_data, tiny_qwen25):
    """algo.aggregation on completions of 1 to 10 tokens (canned answers): each token weighs
    1 / the batch's tokens (token_mean), 1 / (its completion's tokens x completions)
    (seq_mean_token_mean), 1 / (completions x max_new_tokens) (seq_mean_token_sum_norm),
    1 / completions (seq_mean_token_sum), or 1 / (its micro-batch's tokens x micro-batches), micro-batches of 3 consecutive rows of the
    step's 8, the last of 2 (micro_token_mean)."""
    answers = ["no", "left of it", "one two three four five six", "<answer>[1, 2, 3, 4]</answer>"]
    options = {
        "algo.aggregation": aggregation,
        "algo.micro_batch_rows": 3,
        "rollout.canned.answers": json.dumps(answers),
    }
    trainer = make_trainer(tmp_path, rec_data, engine=CANNED, **options)
    batch, advantages = rollout(trainer)
    assert len(set(batch.lengths())) >= 3
    _, ((rows, params, grads),) = recorded_update(trainer, batch, advantages)
    assert len(rows) == 8
    current, _ = logprobs_at(trainer, batch, rows, params)
    assert_same_gradient(grads, hand_step(trainer, batch, advantages, rows, params, current)[0])


def test_advantages_per_token_weigh_each_tokens_term_by_its_own(tmp_path, rec_data, tiny_qwen25):
    """Advantages per token (algo.kl_in=returns, OpenRLHF's returns) on completions of 1 to 10
    tokens: the step's gradient is the hand-written loss's with each token's own advantage."""
    answers = ["no", "left of it", "one two three four five six", "<answer>[1, 2, 3, 4]</answer>"]
    trainer = make_trainer(tmp_path, rec_data, engine=CANNED, **{"rollout.canned.answers": json.dumps(answers)})
    batch, _ = rollout(trainer)
    assert len(set(batch.lengths())) >= 3
    width = batch.completion_mask.shape[1]
    advantages = torch.linspace(-1.0, 1.0, len(batch.prompt_index) * width).view(-1, width).flip(1)
    advantages = advantages * batch.completion_mask
    _, ((rows, params, grads),) = recorded_update(trainer, batch, advantages)
    current, _ = logprobs_at(trainer, batch, rows, params)
    assert_same_gradient(grads, hand_step(trainer, batch, advantages, rows, params, current)[0])


@pytest.mark.parametrize("threshold, drops", [(0.05, True), (0.5, False)])
def test_the_off_policy_mask_drops_negative_completions_by_the_engines_log_probs(
    threshold, drops, tmp_path, rec_data, tiny_qwen25
):
    """algo.off_policy_mask with an engine whose log-probs are SHIFT (0.1) above the policy's
    (and of its distribution without banned tokens): every completion's mean log-ratio of the
    sampler to the policy is between 0.1 and 0.5, so 0.05 drops the policy term of each
    completion with a negative advantage and 0.5 none. The trainer's own old log-probs (the
    policy itself, one pass) would drop none."""
    options = {"algo.off_policy_mask": threshold, "algo.rollout_correction.enabled": False}
    trainer = make_trainer(tmp_path, rec_data, engine=SHIFTED, **options)
    batch, advantages = rollout(trainer)
    _, ((rows, params, grads),) = recorded_update(trainer, batch, advantages)
    current, width = logprobs_at(trainer, batch, rows, params)
    mask = batch.completion_mask[rows, :width]
    gaps = ((batch.rollout_logprobs[rows, :width] - current) * mask).sum(1) / mask.sum(1)
    assert float(gaps.min()) > 0.1 - 1e-4 and float(gaps.max()) < 0.5
    kept = advantages.clamp(min=0) if drops else advantages
    assert_same_gradient(grads, hand_step(trainer, batch, kept, rows, params, current)[0])


@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean_token_mean"])
def test_the_entropy_bonus_is_subtracted_from_the_loss_as_verl_and_easyr1_do(
    aggregation, tmp_path, rec_data, tiny_qwen25
):
    """algo.entropy_coef (verl's and EasyR1's entropy_coeff): the step's gradient is that of the
    hand-written loss minus 0.5 x each token's entropy under the temperature-scaled policy,
    weighed as the policy loss; without the term the gradient is another one."""
    options = {"algo.entropy_coef": 0.5, "algo.aggregation": aggregation, "rollout.temperature": 0.7}
    trainer = make_trainer(tmp_path, rec_data, engine="hf", **options)
    batch, advantages = rollout(trainer)
    _, ((rows, params, grads),) = recorded_update(trainer, batch, advantages)
    current, _ = logprobs_at(trainer, batch, rows, params)
    assert_same_gradient(grads, hand_step(trainer, batch, advantages, rows, params, current)[0])
    trainer.cfg.algo.entropy_coef = 0.0
    without = hand_step(trainer, batch, advantages, rows, params, current)[0]
    assert any(not torch.allclose(grads[n], without[n], rtol=1e-3, atol=1e-6) for n in grads)


def test_a_mixture_of_experts_load_balancing_loss_is_each_micro_batchs_averaged_over_the_step(tmp_path, rec_data):
    """algo.router_aux_loss_coef: the step's gradient is the hand-written loss's plus 0.5 x the
    mean, over the micro-batches trainer.token_budget makes, of each one's load-balancing loss
    (TRL's, per forward: tests/algos/test_trl_equivalence.py), and router_aux_loss logged is
    that mean; a dense model refuses the option."""
    from vlrl.config import ConfigError
    from vlrl.models.routing import RouterLogits

    options = {"model.path": "tiny:qwen3_vl_moe", "algo.router_aux_loss_coef": 0.5, "trainer.token_budget": 250}
    trainer = make_trainer(tmp_path / "moe", rec_data, engine="hf", **options)
    batch, advantages = rollout(trainer)
    stats, ((rows, params, grads),) = recorded_update(trainer, batch, advantages)
    current, _ = logprobs_at(trainer, batch, rows, params)
    expected = hand_step(trainer, batch, advantages, rows, params, current)[0]
    run, planned = trainer.run, trainer.updater.plan(batch, rows)
    assert len(planned) >= 2
    run.model.zero_grad()
    router, balance = RouterLogits(run.model), []
    for positions in planned:
        micro = [rows[i] for i in positions]
        rows_logprobs(run.model, batch, micro, trainer.cfg.rollout.temperature, run.pad_id, run.device, router=router)
        balance.append(router.loss())
    aux = torch.stack(balance)
    (0.5 * aux.mean()).backward()
    balancing = {n: p.grad for n, p in run.model.named_parameters() if p.grad is not None}  # none past the last router
    assert_same_gradient(grads, {n: g + balancing.get(n, 0) for n, g in expected.items()})
    assert stats["router_aux_loss"] == pytest.approx(float(aux.detach().mean()), rel=1e-5)
    with pytest.raises(
        ConfigError, match="algo.router_aux_loss_coef is 0.5, but Qwen2_5_VLForConditionalGeneration is not"
    ):
        make_trainer(tmp_path / "dense", rec_data, engine="hf", **{"algo.router_aux_loss_coef": 0.5})


def test_the_adaptive_entropy_bonus_applies_the_controllers_coefficient_and_follows_each_steps_entropy(
    tmp_path, rec_data, tiny_qwen25
):
    """algo.entropy_target (Skywork-OR1's control, TRL's use_adaptive_entropy), two optimizer
    steps: the first takes no bonus (no entropy measured yet), the second the coefficient moved
    by the delta after the first (its entropy below the target of 100: up, 0.2 -> 0.5); each
    step's gradient is the hand-written loss's at that coefficient, and after the second the
    controller holds that step's trained tokens' mean entropy."""
    options = {
        "algo.entropy_coef": 0.2, "algo.entropy_target": 100.0, "algo.entropy_coef_delta": 0.3,
        "algo.entropy_coef_max": 0.6, "algo.mini_batches": 2,
    }  # fmt: skip
    trainer = make_trainer(tmp_path, rec_data, engine="hf", **options)
    batch, advantages = rollout(trainer)
    stats, steps = recorded_update(trainer, batch, advantages)
    algo = trainer.cfg.algo
    entropies = []
    for (rows, params, grads), coef in zip(steps, (0.0, 0.5), strict=True):
        algo.entropy_coef = coef  # what hand_step subtracts
        old = batch.rollout_logprobs
        assert_same_gradient(grads, hand_step(trainer, batch, advantages, rows, params, old)[0])
        stats_at, width = scored_at(trainer, batch, rows, params)
        mask = batch.completion_mask[rows, :width]
        entropies.append(float((stats_at.entropy * mask).sum() / mask.sum()))
    control = trainer.updater.entropy_control
    assert (control.coef, control.last) == (pytest.approx(0.6), pytest.approx(entropies[1], rel=1e-5))
    assert stats["entropy_coef"] == pytest.approx(0.25)  # the mean of the two steps' 0 and 0.5


@pytest.mark.parametrize(
    "options",
    [{"algo.num_iterations": 2}, {"algo.mini_batches": 2}, {"algo.num_iterations": 2, "rollout.temperature": 0.7}],
    ids=["num_iterations", "mini_batches", "temperature"],
)
def test_once_the_policy_moved_the_ratio_compares_with_the_rollouts_log_probs(options, tmp_path, rec_data, tiny_qwen25):
    """Two optimizer steps per rollout (two passes, or two mini-batches): the second step's
    ratio is pi(second step's parameters) / pi(the rollout's), far from 1 at lr 1e-2, and
    clips; its gradient is the hand-written loss's with those old log-probs, and the logged
    clip fractions count the tokens clipped by hand. Taking the old log-probs as the current
    ones (ratio 1, nothing clipped) fails here. The first step's ratio is 1: the engine sampled
    with these parameters, at rollout.temperature, and the update scores at it too."""
    trainer = make_trainer(tmp_path, rec_data, engine="hf", **options)
    batch, advantages = rollout(trainer)
    assert batch.rollout_logprobs is not None  # the HF engine samples with the policy: its log-probs are the trainer's
    stats, steps = recorded_update(trainer, batch, advantages)
    assert len(steps) == 2
    clipped, tokens = [0, 0], 0
    for k, (rows, params, grads) in enumerate(steps):
        expected, ratio, (low, high), _ = hand_step(trainer, batch, advantages, rows, params, batch.rollout_logprobs)
        assert_same_gradient(grads, expected)
        clipped, tokens = [clipped[0] + low, clipped[1] + high], tokens + ratio.numel()
        if k == 0:
            torch.testing.assert_close(ratio, torch.ones_like(ratio), atol=1e-4, rtol=0)
        if k == 1:
            assert float((ratio - 1).abs().max()) > 2 * EPSILON and low + high > 0
    assert (stats["clip_low_frac"], stats["clip_high_frac"]) == pytest.approx(
        (clipped[0] / tokens, clipped[1] / tokens)
    )


@pytest.mark.parametrize("shuffle", ["none", "once", "every_pass"])
def test_mini_batches_take_whole_groups_in_order_or_rows_shuffled_once_or_every_pass(
    shuffle, tmp_path, rec_data, tiny_qwen25
):
    """Two passes of two optimizer steps: none trains the first group, then the second, each
    pass (verl's split); once splits the rows in one shuffled order for both passes (TRL's),
    every_pass in a new one each pass (OpenRLHF's), drawn from (trainer.seed, step, pass). Every
    pass trains every row once, and each step's gradient is the hand-written loss's over its rows."""
    options = {"algo.num_iterations": 2, "algo.mini_batches": 2, "algo.mini_batch_shuffle": shuffle}
    trainer = make_trainer(tmp_path, rec_data, engine="hf", **options)
    batch, advantages = rollout(trainer)
    _, steps = recorded_update(trainer, batch, advantages)
    rows = [r for r, _, _ in steps]
    n = len(batch.prompt_index)
    assert len(rows) == 4 and sorted(rows[0] + rows[1]) == list(range(n)) == sorted(rows[2] + rows[3])
    groups = [batch.group_rows(0), batch.group_rows(1)]
    seed = trainer.cfg.trainer.seed
    drawn = [
        [c.tolist() for c in np.array_split(np.random.default_rng([seed, 1, p]).permutation(n), 2)] for p in (0, 1)
    ]
    expected = {"none": groups * 2, "once": drawn[0] * 2, "every_pass": drawn[0] + drawn[1]}[shuffle]
    assert rows == expected
    if shuffle != "none":
        assert rows[:2] != groups and any(len({int(batch.prompt_index[r]) for r in part}) > 1 for part in rows)
    for step_rows, params, grads in steps:
        expected_grad, *_ = hand_step(trainer, batch, advantages, step_rows, params, batch.rollout_logprobs)
        assert_same_gradient(grads, expected_grad)


@pytest.mark.parametrize(
    "old_logprobs, temperature, low_precision",
    [("rollout", 1.0, False), ("recompute", 1.0, False), ("recompute", 0.7, False), ("auto", 1.0, False),
     ("auto", 1.0, True), ("rollout", 1.0, True)],
)  # fmt: skip
def test_recompute_takes_the_trainers_log_probs_for_an_engine_that_shares_the_policy(
    old_logprobs, temperature, low_precision, tmp_path, rec_data, tiny_qwen25
):
    """An engine that samples with the policy but reports its log-probs SHIFT too high (of the
    distribution it draws from, as vLLM):
    algo.old_logprobs=rollout compares with what it reported, algo.old_logprobs=recompute with a
    trainer forward made before the first update, at rollout.temperature (then the engine's
    mismatch is measured); auto (the default) as rollout for a float32 policy and as recompute
    for a bfloat16 or float16 one (here the float32 tiny model's updater told it is one)."""
    options = {"algo.num_iterations": 2, "algo.old_logprobs": old_logprobs, "rollout.temperature": temperature}
    trainer = make_trainer(tmp_path, rec_data, engine=SHARED_SHIFTED, **options)
    assert trainer.engine.shares_policy and not trainer.updater.low_precision
    trainer.updater.low_precision = low_precision
    if old_logprobs == "auto":
        old_logprobs = "recompute" if low_precision else "rollout"
    batch, advantages = rollout(trainer)
    every = list(range(len(batch.prompt_index)))
    before, width = logprobs_at(trainer, batch, every)
    real = batch.completion_mask[:, :width].bool()
    gap = (batch.rollout_logprobs[:, :width] - before)[real]
    assert float(gap.min()) >= SHIFT - 1e-4  # the engine's differ from the trainer's: the choice matters
    trainers = torch.zeros_like(batch.completion_mask)
    trainers[:, :width] = before
    old = trainers if old_logprobs == "recompute" else batch.rollout_logprobs
    stats, steps = recorded_update(trainer, batch, advantages)
    for rows, params, grads in steps:
        assert_same_gradient(grads, hand_step(trainer, batch, advantages, rows, params, old)[0])
    assert ("rollout/logp_diff" in stats) == (old_logprobs == "recompute")
    if old_logprobs == "recompute":
        assert stats["rollout/logp_diff"] == pytest.approx(float(gap.abs().mean()), rel=1e-4)


def test_the_updater_knows_a_bfloat16_policy_from_a_float32_one(tmp_path, rec_data, tiny_qwen25):
    """What algo.old_logprobs=auto goes by: the dtype the policy computes in."""
    for dtype, low in (("bfloat16", True), ("float32", False)):
        trainer = make_trainer(tmp_path / dtype, rec_data, engine=SHARED_SHIFTED, **{"model.dtype": dtype})
        assert trainer.updater.low_precision is low and not trainer.updater.foreign


def test_top_entropy_selection_keeps_the_rollouts_old_log_probs_and_none_are_taken_as_the_current_ones(
    tmp_path, rec_data, tiny_qwen25
):
    """With algo.top_entropy_fraction and an engine that samples with the policy but gives no
    entropies, the trainer forward that gives them leaves the old log-probs as the options say:
    the engine's once the policy moves (not the current ones: ratio 1), the trainer's own when
    the engine gives none, in the same forward (one, counted)."""
    options = {"algo.num_iterations": 2, "algo.top_entropy_fraction": 0.5}
    trainer = make_trainer(tmp_path, rec_data, engine=SHARED_SHIFTED, **options)
    batch, _ = rollout(trainer)
    every = list(range(len(batch.prompt_index)))
    before, width = logprobs_at(trainer, batch, every)
    updater, forwards = trainer.updater, []
    counted = updater.logprobs_no_grad
    updater.logprobs_no_grad = lambda *a, **k: forwards.append(1) or counted(*a, **k)
    old = updater.old_logprobs(batch)
    assert old.logp is batch.rollout_logprobs and not old.trainers and old.entropy is not None
    none_given = dataclasses.replace(batch, rollout_logprobs=None)
    for moves in (None, True):
        old = updater.old_logprobs(none_given, moves=moves)
        assert old.trainers and old.entropy is not None
        torch.testing.assert_close(old.logp[:, :width], before, rtol=0, atol=1e-6)
    assert len(forwards) == 3


def test_update_stats_are_means_per_optimizer_step_and_per_trained_token():
    """The logged statistics from the update's sums, by hand: loss and grad_norm per optimizer
    step, clip fractions, KL and importance weight per trained token, the engine's mismatch per
    measured token (its largest difference as it is), the entropy over the batch's real tokens,
    the share of the trained forwards' tokens that were padding."""
    sums = {"loss": 3.0, "grad_norm": 5.0, "optimizer_steps": 2.0, "clip_low": 1.0, "clip_high": 3.0, "tokens": 10.0,
            "kl": 2.0, "is_weight": 8.0, "mismatch_tokens": 4.0, "mismatch_abs": 2.0, "mismatch_max": 0.75,
            "mismatch_kl": 1.0, "computed_tokens": 40.0, "unpadded_tokens": 30.0}  # fmt: skip
    batch = SimpleNamespace(completion_mask=torch.tensor([[1.0, 1.0], [1.0, 0.0]]))
    entropy = torch.tensor([[1.0, 2.0], [3.0, 9.0]])  # 9 on padding: left out
    stats = update_stats(sums, True, True, entropy, batch)
    assert stats == pytest.approx(
        {
            "loss": 1.5,
            "grad_norm": 2.5,
            "clip_low_frac": 0.1,
            "clip_high_frac": 0.3,
            "optimizer_steps": 2.0,
            "kl": 0.2,
            "rollout/logp_diff": 0.5,
            "rollout/logp_diff_max": 0.75,
            "rollout/kl": 0.25,
            "rollout/is_weight": 0.8,
            "entropy": 2.0,
            "update_padding": 0.25,
        }
    )


def test_the_largest_mismatch_is_the_largest_of_the_micro_batches_and_the_rest_add_up():
    sums = defaultdict(float)
    add_mismatch(sums, {"mismatch_abs": 1.0, "mismatch_max": 0.5, "mismatch_kl": 0.125, "mismatch_tokens": 2.0})
    add_mismatch(sums, {"mismatch_abs": 0.5, "mismatch_max": 0.25, "mismatch_kl": 0.25, "mismatch_tokens": 3.0})
    assert dict(sums) == {"mismatch_abs": 1.5, "mismatch_max": 0.5, "mismatch_kl": 0.375, "mismatch_tokens": 5.0}


def test_model_lean_forward_takes_the_update_through_the_lean_step_or_never_and_changes_no_value(
    tmp_path, rec_data, tiny_qwen25, monkeypatch
):
    """model.lean_forward: the reference's and the policy's forwards of the completions run
    through the lean step (models/decode_step.py), or never; the step's loss and KL are the same
    bits either way, its gradient the same to float rounding (tests/models/test_decode_step.py)."""
    from vlrl.models.decode_step import DecodeStep

    calls = []
    hidden = DecodeStep.hidden
    monkeypatch.setattr(DecodeStep, "hidden", lambda self, ids, *a: calls.append(ids.shape) or hidden(self, ids, *a))
    updates = {}
    for lean in (True, False):
        options = {"algo.beta": 0.04, "model.lean_forward": lean, "rollout.hf.lean_step": False}
        trainer = make_trainer(tmp_path / str(lean), rec_data, engine="hf", **options)
        batch, advantages = rollout(trainer)
        calls.clear()
        updates[lean] = recorded_update(trainer, batch, advantages)
        assert len(calls) == (2 if lean else 0)  # the reference's forward and the policy's, one micro-batch each
    (lean_stats, ((_, _, lean_grads),)), (stats, ((_, _, grads),)) = updates[True], updates[False]
    assert lean_stats["loss"] == stats["loss"] and lean_stats["kl"] == stats["kl"]
    assert_same_gradient(lean_grads, grads)


@pytest.mark.parametrize("engine", ["hf", SHIFTED])
def test_optimal_token_baseline_takes_pi_and_its_squares_from_the_sampling_policy_as_verl(
    engine, tmp_path, rec_data, tiny_qwen25
):
    """algo.advantage=optimal_token_baseline: a step's advantages are verl's OTB (transcribed in
    tests/algos/test_algos.py) of its rewards, with each token's probability and sum of squared
    probabilities from the full temperature-scaled logits of the policy that sampled, and with an
    engine that is not the trainer (log-probs SHIFT and more too high, unequally by row), its
    sequence importance weights squared into the energy (verl's rollout_is_weights)."""
    from tests.algos.test_algos import verl_optimal_token_baseline
    from vlrl.algos.losses import rollout_importance_weights
    from vlrl.models.batch import collate
    from vlrl.models.policy import completion_logits

    options = {"algo.advantage": "optimal_token_baseline", "rollout.temperature": 0.7}
    trainer = make_trainer(tmp_path, rec_data, engine=engine, **options)
    batch, _ = rollout(trainer)
    mask = batch.completion_mask
    if engine == SHIFTED:  # rows reported apart by another shift each: weights that differ within a group
        batch.rollout_logprobs = batch.rollout_logprobs + torch.linspace(0, 0.05, len(mask))[:, None] * mask
    advantages, sampled, _ = trainer.step_advantages(batch.groups, batch)
    with torch.no_grad():
        prompts = collate([g.prompt for g in batch.groups], trainer.run.pad_id)
        scaled = completion_logits(trainer.run.model, prompts, batch.prompt_index, batch.completion_ids, mask) / 0.7
    logp = torch.log_softmax(scaled, -1).gather(-1, batch.completion_ids[..., None]).squeeze(-1) * mask
    squares = torch.softmax(scaled, -1).pow(2).sum(-1) * mask
    weights = None
    if engine == SHIFTED:
        allowed = trainer.updater.sampler.apply(scaled)
        expected = torch.log_softmax(allowed, -1).gather(-1, batch.completion_ids[..., None]).squeeze(-1) * mask
        weights = rollout_importance_weights(expected, batch.rollout_logprobs, mask, "sequence_mask", None, 3.0)
        assert float(weights.max()) < 0.95 and float(weights.std()) > 0.01  # exp(-shift x length)
    lengths = mask.sum(1).long()
    rewards = torch.cat([g.reward for g in batch.groups])
    token_rewards = torch.zeros_like(mask).scatter_(1, (lengths - 1)[:, None], rewards[:, None])
    want = verl_optimal_token_baseline(token_rewards, mask, batch.prompt_index.tolist(), logp, squares, weights)
    torch.testing.assert_close(sampled.logp, logp, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(advantages, want, rtol=1e-5, atol=1e-5)
    assert float(want.abs().max()) > 0.05
