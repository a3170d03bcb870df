"""Advantage estimators, losses beyond TRL's, KL estimators and reward shaping, on hand-computed numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from vlrl.algos.advantages import advantages, cpgd, dr_grpo, grpo, rloo, sign
from vlrl.algos.losses import (
    KL_ESTIMATORS,
    clipped_surrogate,
    cpgd_loss,
    high_entropy_mask,
    kl_k1,
    kl_k2,
    kl_k3,
    kl_k3_clamped,
    kl_low_var,
    policy_loss,
)
from vlrl.algos.shaping import (
    length_bonus,
    overlong_penalty,
    temporal_bonus,
    trust_bonus,
)
from vlrl.config import AlgoConfig, ConfigError, LengthControlConfig, ReplayConfig, TrustConfig, load_config

REWARDS = torch.tensor([[1.0, 0.0, 0.0, 1.0], [3.0, 1.0, 1.0, 1.0], [0.5, 0.5, 0.5, 0.5]])


def test_dr_grpo_and_rloo_center_without_dividing_by_the_std():
    torch.testing.assert_close(dr_grpo(REWARDS)[1], torch.tensor([1.5, -0.5, -0.5, -0.5]))
    # RLOO: r_i - mean of the other three: 3 - 1 = 2, 1 - 5/3 = -2/3
    torch.testing.assert_close(rloo(REWARDS)[1], torch.tensor([2.0, -2 / 3, -2 / 3, -2 / 3]))


def test_batch_std_scaling_divides_by_the_std_of_all_rewards():
    batch_std = REWARDS.std()
    torch.testing.assert_close(grpo(REWARDS, 1e-4, "batch"), dr_grpo(REWARDS) / (batch_std + 1e-4))


def test_sign_advantage_and_w_reinforce_weights():
    correct = torch.tensor([[True, False, True]])
    assert sign(correct).tolist() == [[1.0, -1.0, 1.0]]
    cfg = AlgoConfig(advantage="sign", positive_weight=0.1)
    rewards = torch.tensor([[1.0, 0.0, 1.0]])
    assert advantages(rewards, correct, cfg).tolist()[0] == pytest.approx([0.1, -1.0, 0.1])
    cfg = AlgoConfig(advantage="dr_grpo", negative_weight=0.0)  # positive-sample reinforcement only
    assert advantages(rewards, correct, cfg).tolist()[0] == pytest.approx([1 / 3, 0.0, 1 / 3])


def test_cpgd_weightings():
    torch.testing.assert_close(cpgd(REWARDS, "equal", 1e-4), dr_grpo(REWARDS))
    torch.testing.assert_close(cpgd(REWARDS, "std", 1e-4), grpo(REWARDS))
    # Two of three groups have spread: 3 groups / 2 informative ones = 1.5.
    torch.testing.assert_close(cpgd(REWARDS, "clip_filter", 1e-4), dr_grpo(REWARDS) * 1.5)
    # One of five: 5 / 1, capped at 3 (MM-EUREKA's clip_filter_like_weight_clip_eps); none: 1
    sparse = torch.cat([REWARDS[:1], torch.full((4, 4), 0.5)])
    torch.testing.assert_close(cpgd(sparse, "clip_filter", 1e-4), dr_grpo(sparse) * 3.0)
    torch.testing.assert_close(cpgd(REWARDS[2:], "clip_filter", 1e-4), dr_grpo(REWARDS[2:]))


def test_dual_clip_caps_the_loss_of_a_negative_advantage():
    logp = torch.log(torch.tensor([[5.0, 1.5]]))
    old = torch.zeros(1, 2)
    mask = torch.ones(1, 2)
    plain = clipped_surrogate(logp, old, torch.tensor([-1.0]), mask, 0.2, 0.2).per_token
    assert plain.tolist()[0] == pytest.approx([5.0, 1.5])  # -min(r A, clip(r) A) = -min(-r, -1.2) = r
    dual = clipped_surrogate(logp, old, torch.tensor([-1.0]), mask, 0.2, 0.2, dual_clip=3.0).per_token
    assert dual.tolist()[0] == pytest.approx([3.0, 1.5])
    positive = clipped_surrogate(logp, old, torch.tensor([1.0]), mask, 0.2, 0.2, dual_clip=3.0).per_token
    assert positive.tolist()[0] == pytest.approx([-1.2, -1.2])  # positive advantages are untouched


def test_sequence_level_ratio_is_the_mean_token_log_ratio():
    logp = torch.tensor([[-1.0, -2.0, -9.0]], requires_grad=True)
    old = torch.tensor([[-1.1, -2.1, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    terms = clipped_surrogate(logp, old, torch.tensor([2.0]), mask, 0.2, 0.2, ratio_level="sequence")
    assert terms.per_token.shape == (1, 1)
    assert terms.per_token.item() == pytest.approx(-2.0 * math.exp(0.1))
    terms.per_token.sum().backward()
    # d/dlogp_t of -A exp(mean log ratio) = -A r / n_tokens on real tokens, 0 on padding.
    assert logp.grad.tolist()[0] == pytest.approx([-math.exp(0.1), -math.exp(0.1), 0.0])


def test_cpgd_loss_clips_the_log_ratio_and_adds_a_capped_drift():
    logp = torch.tensor([[math.log(0.5), math.log(0.2)]], requires_grad=True)
    old = torch.tensor([[math.log(0.25), math.log(0.2)]])  # ratios 2 and 1
    terms = cpgd_loss(logp, old, torch.tensor([1.0]), 0.2, 0.2, drift_coef=0.1, drift_clip=0.5)
    # token 0: ln r = ln 2 clipped to ln 1.2 (A > 0, min picks the clipped); drift min(2 - 1, 0.5) = 0.5
    # token 1: ln r = 0; drift 0
    expected = [-math.log(1.2) + 0.1 * 0.5 * math.log(0.5), 0.0]
    assert terms.per_token.tolist()[0] == pytest.approx(expected)
    terms.per_token.sum().backward()
    # Gradient: clipped token has none from the surrogate, only the drift (0.1 x 0.5); the other is -A.
    assert logp.grad.tolist()[0] == pytest.approx([0.05, -1.0])
    assert terms.high_clipped.tolist() == [[True, False]]


def test_kl_estimators():
    logp, ref = torch.tensor([-1.0]), torch.tensor([-1.5])
    assert kl_k1(logp, ref).item() == pytest.approx(0.5)
    assert kl_k2(logp, ref).item() == pytest.approx(0.125)
    assert kl_k3(logp, ref).item() == pytest.approx(math.exp(-0.5) + 0.5 - 1)
    assert kl_low_var(torch.tensor([0.0]), torch.tensor([20.0])).item() == 10.0  # k3 would be e^20 - 21
    # far from the reference (ref - logp = 95: exp overflows float32): verl's value and gradient, 10 and 0
    far = torch.tensor([-100.0], requires_grad=True)
    value = kl_low_var(far, torch.tensor([-5.0]))
    value.backward()
    assert value.item() == 10.0 and far.grad.item() == 0.0
    # Video-R1's: the log-ratio clamped to [-10, 10], then k3 (e^10 - 11 at 12 nats, no gradient)
    for gap, expected in [(12.0, math.exp(10) - 11), (-15.0, math.exp(-10) + 9), (-0.5, math.exp(-0.5) - 0.5)]:
        logp = torch.tensor([0.0], requires_grad=True)
        value = kl_k3_clamped(logp, torch.tensor([gap]))
        value.backward()
        assert value.item() == pytest.approx(expected, rel=1e-6)
        assert logp.grad.item() == (0.0 if abs(gap) > 10 else pytest.approx(1 - math.exp(gap)))


def test_overlong_penalty_ramps_over_the_buffer():
    lengths = torch.tensor([50, 80, 90, 100])
    assert overlong_penalty(lengths, max_length=100, buffer=20).tolist() == pytest.approx([0.0, 0.0, -0.5, -1.0])
    assert overlong_penalty(lengths, max_length=100, buffer=0).tolist() == [0.0] * 4


def sophiavl_r1_thinking_term(process_scores, answer_scores, steps, T):
    """The thinking part of `score = answer_score + discount_factor * process_score` in
    SophiaVL-R1's CustomRewardManager.__call__ (n > 0), transcribed from kxfan2002/SophiaVL-R1 at
    a818494 (verl/workers/reward/custom.py); the judge call becomes the given process score."""
    answer_score = np.array(answer_scores)
    if (answer_score >= 0.9).all() or (answer_score <= 0.1).all():
        return np.zeros_like(answer_score)
    process_score = np.array([p if a >= 0.2 else 0 for p, a in zip(process_scores, answer_scores, strict=False)])
    correct_mask = answer_score >= 0.5
    incorrect_mask = ~correct_mask
    correct_avg = process_score[correct_mask].mean() if correct_mask.any() else 0
    incorrect_avg = process_score[incorrect_mask].mean() if incorrect_mask.any() else 0
    discount_factor = math.exp(-steps / T) * 0.3
    if correct_avg < incorrect_avg:
        if not correct_mask.any():
            discount_factor *= 1
        else:
            discount_factor *= np.exp(correct_avg - incorrect_avg)
    return discount_factor * process_score


def trust(variant, thinking, outcome, step, threshold=0.5):
    thinking, outcome = torch.tensor(thinking, dtype=torch.float64), torch.tensor(outcome, dtype=torch.float64)
    return trust_bonus(thinking, outcome, outcome >= threshold, TrustConfig(variant=variant), step).tolist()


def test_trust_variants_on_hand_computed_groups():
    # 0/1 outcomes: the code rewards only the right answer's thinking (wrong ones are below 0.2);
    # the paper rewards every answer's thinking (mu_c 0.8 >= mu_w 0.4: trusted). T: 12000 / 1000.
    thinking, outcome = [0.8, 0.6, 0.2, 0.4], [1.0, 0.0, 0.0, 0.0]
    assert trust("code", thinking, outcome, 100) == pytest.approx([0.3 * math.exp(-100 / 12000) * 0.8, 0, 0, 0])
    assert trust("paper", thinking, outcome, 100) == pytest.approx([0.3 * math.exp(-0.1) * t for t in thinking])
    # Untrusted: code process [0.2, 0.9, 0, 0.4], mu_c 0.3 < mu_w 0.45 -> weight 0.3 e^-0.15;
    # paper mu_c 0.3 < mu_w 0.8 -> gamma e^-0.5 on every thinking reward.
    thinking, outcome = [0.2, 0.9, 0.7, 0.4], [1.0, 0.3, 0.0, 1.0]
    code = [0.3 * math.exp(-0.15) * p for p in (0.2, 0.9, 0.0, 0.4)]
    assert trust("code", thinking, outcome, 0) == pytest.approx(code)
    assert trust("paper", thinking, outcome, 0) == pytest.approx([0.3 * math.exp(-0.5) * t for t in thinking])
    # No answer correct but outcomes spread: the code still rewards those >= 0.2 (weight 0.3); the paper skips.
    thinking, outcome = [0.5, 0.5, 0.5, 0.5], [0.3, 0.4, 0.05, 0.2]
    assert trust("code", thinking, outcome, 0) == pytest.approx([0.15, 0.15, 0.0, 0.15])
    assert trust("paper", thinking, outcome, 0) == [0.0] * 4
    # Skipped groups: every outcome >= 0.9, or every one <= 0.1 (bounds included).
    for outcome in ([0.9, 1.0, 1.0, 0.95], [0.0, 0.1, 0.05, 0.0]):
        assert trust("code", [0.5] * 4, outcome, 0) == [0.0] * 4
    assert trust("code", [0.5] * 4, [0.9, 0.89, 1.0, 1.0], 0) != [0.0] * 4


def test_trust_code_variant_equals_sophiavl_r1s_reward_manager():
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        thinking = torch.rand(6, generator=g, dtype=torch.float64)
        outcome = torch.randint(0, 11, (6,), generator=g).double() / 10  # 0, 0.1, ..., 1: every threshold hit
        step = int(torch.randint(0, 2000, (1,), generator=g))
        ours = trust_bonus(thinking, outcome, outcome >= 0.5, TrustConfig(), step)
        expected = sophiavl_r1_thinking_term(thinking.tolist(), outcome.tolist(), step, 12000)  # its run's T
        np.testing.assert_allclose(ours.numpy(), expected, rtol=1e-12, atol=1e-15)


def test_trust_decay_steps_follow_the_variant_unless_given():
    assert TrustConfig().decay_steps == 12000.0 and TrustConfig(variant="paper").decay_steps == 1000.0
    assert TrustConfig(variant="paper", decay_steps=500.0).decay_steps == 500.0
    cfg = load_config(None, ["algo.trust.variant=paper"])
    assert cfg.algo.trust.decay_steps == 1000.0


@pytest.mark.parametrize("variant", ["code", "paper"])
def test_the_trust_bonus_is_alpha_times_exp_of_minus_step_over_decay_steps(variant):
    """algo.trust.alpha and decay_steps reach both variants: the bonus at step 50 with alpha 0.6
    and T = 100 is 0.6 exp(-0.5) times the bonus with alpha 1 and no decay."""
    thinking = torch.tensor([0.9, 0.2, 0.5, 0.7], dtype=torch.float64)
    outcome = torch.tensor([1.0, 0.0, 1.0, 0.3], dtype=torch.float64)

    def bonus(alpha, decay_steps, step):
        cfg = TrustConfig(variant=variant, alpha=alpha, decay_steps=decay_steps)
        return trust_bonus(thinking, outcome, outcome >= 0.5, cfg, step).tolist()

    undecayed = bonus(1.0, 1e15, 50)
    assert any(b > 0 for b in undecayed)
    assert bonus(0.6, 100.0, 50) == pytest.approx([0.6 * math.exp(-0.5) * b for b in undecayed])


def test_temporal_bonus_goes_to_correct_ordered_completions_when_order_helped():
    ordered = torch.tensor([1.0, 1.0, 0.0, 0.0])
    correct = ordered > 0.1
    assert temporal_bonus(ordered, torch.tensor([1.0, 0.0]), correct, 0.3, 0.8).tolist() == pytest.approx(
        [0.3, 0.3, 0, 0]
    )
    # 0.5 < 0.8 x 1.0: shuffled frames did as well, no bonus
    assert temporal_bonus(ordered, torch.tensor([1.0, 1.0]), correct, 0.3, 0.8).tolist() == [0.0] * 4
    # mu decides: 0.5 >= 0.4 x 1.0 helps, 0.5 < 0.6 x 1.0 does not
    assert temporal_bonus(ordered, torch.tensor([1.0, 1.0]), correct, 0.3, 0.4).tolist() == pytest.approx(
        [0.3, 0.3, 0, 0]
    )
    assert temporal_bonus(ordered, torch.tensor([1.0, 1.0]), correct, 0.3, 0.6).tolist() == [0.0] * 4


def test_temporal_bonus_compares_mean_accuracies_as_video_r1s_code_does():
    """Partial rewards (ROUGE, regression): Video-R1 compares the mean rewards, not the
    fractions over the threshold; 2 of 4 ordered are "correct", their mean is 0.3."""
    ordered = torch.tensor([0.5, 0.7, 0.0, 0.0])
    correct = ordered > 0.1
    shuffled = torch.tensor([0.15, 0.15])  # all "correct" (fractions: 0.5 < 0.8 x 1), mean 0.15 (0.3 >= 0.8 x 0.15)
    assert temporal_bonus(ordered, shuffled, correct, 0.3, 0.8).tolist() == pytest.approx([0.3, 0.3, 0, 0])
    assert temporal_bonus(ordered, torch.tensor([0.4, 0.4]), correct, 0.3, 0.8).tolist() == [0.0] * 4  # 0.3 < 0.32


def test_length_bonus_rewards_correct_completions_of_moderate_length_when_two_are_correct():
    lengths = torch.tensor([319, 320, 512, 513, 400])
    correct = torch.tensor([True, True, True, True, False])
    assert length_bonus(lengths, correct, 320, 512, 0.2).tolist() == pytest.approx([0, 0.2, 0.2, 0, 0])
    # A single correct completion gets nothing (Video-R1: more than one must be correct).
    alone = torch.tensor([False, True, False, False, False])
    assert length_bonus(lengths, alone, 320, 512, 0.2).tolist() == [0.0] * 5


def test_high_entropy_mask_keeps_the_top_fraction_of_real_tokens():
    entropy = torch.tensor([[0.1, 0.9, 0.5, 5.0], [0.3, 0.7, 0.2, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    selected = high_entropy_mask(entropy, mask, fraction=0.25)
    # 7 real tokens; the 0.75 quantile of [0, .1, .2, .3, .5, .7, .9] is 0.6: .7 and .9 are kept, padding never
    assert selected.tolist() == [[False, True, False, False], [False, True, False, False]]


# -- every option reaches the math: the dispatchers the trainer calls, on hand-computed numbers ---
def test_each_advantage_estimator_and_its_options_are_dispatched():
    correct = REWARDS > 0.5
    row = lambda cfg: advantages(REWARDS, correct, cfg)[1].tolist()  # noqa: E731  rewards [3, 1, 1, 1]
    # grpo: (r - 1.5) / (std + eps), std of [3, 1, 1, 1] = 1; eps 1 makes the eps visible.
    assert row(AlgoConfig(advantage="grpo", std_eps=1.0)) == pytest.approx([0.75, -0.25, -0.25, -0.25])
    batch_std = float(REWARDS.std())
    assert row(AlgoConfig(advantage="grpo", advantage_std="batch", std_eps=0.0)) == pytest.approx(
        [1.5 / batch_std, -0.5 / batch_std, -0.5 / batch_std, -0.5 / batch_std]
    )
    assert row(AlgoConfig(advantage="dr_grpo")) == pytest.approx([1.5, -0.5, -0.5, -0.5])
    assert row(AlgoConfig(advantage="rloo")) == pytest.approx([2.0, -2 / 3, -2 / 3, -2 / 3])
    assert row(AlgoConfig(advantage="sign")) == [1.0, 1.0, 1.0, 1.0]
    assert row(AlgoConfig(advantage="cpgd", cpgd_weighting="equal")) == pytest.approx([1.5, -0.5, -0.5, -0.5])
    assert row(AlgoConfig(advantage="cpgd", cpgd_weighting="std", std_eps=1.0)) == pytest.approx(
        [0.75, -0.25, -0.25, -0.25]
    )
    assert row(AlgoConfig(advantage="cpgd", cpgd_weighting="clip_filter")) == pytest.approx([2.25, -0.75, -0.75, -0.75])
    assert row(AlgoConfig(advantage="dr_grpo", positive_weight=0.5, negative_weight=2.0)) == pytest.approx(
        [0.75, -1, -1, -1]
    )


def test_each_policy_loss_option_is_dispatched():
    logp = torch.log(torch.tensor([[5.0, 1.25, 0.5]]))
    old, mask = torch.zeros(1, 3), torch.ones(1, 3)
    loss = lambda adv, **kw: policy_loss(logp, old, torch.tensor([adv]), mask, AlgoConfig(**kw)).per_token.tolist()[0]  # noqa: E731
    # A > 0: -min(r, clip(r)); clip at 1.2, or at 1.28 with clip-higher; below at 0.8 (epsilon 0.2) or 0.6.
    assert loss(1.0) == pytest.approx([-1.2, -1.2, -0.5])
    assert loss(1.0, epsilon_high=0.28) == pytest.approx([-1.28, -1.25, -0.5])
    assert loss(-1.0, epsilon=0.4) == pytest.approx([5.0, 1.25, 0.6])  # A < 0: max(r, clip(r))
    assert loss(-1.0, dual_clip=3.0) == pytest.approx([3.0, 1.25, 0.8])  # capped at -c A
    sequence = policy_loss(logp, old, torch.tensor([1.0]), mask, AlgoConfig(ratio_level="sequence")).per_token
    r = (5.0 * 1.25 * 0.5) ** (1 / 3)  # exp of the mean log ratio: 1.46, clipped to 1.2
    assert sequence.shape == (1, 1) and sequence.item() == pytest.approx(-min(r, 1.2))
    capped = loss(1.0, loss="cpgd", drift_coef=0.1, drift_clip=1.0)  # the drift min(r - 1, c): 4 capped at 1
    assert capped[0] == pytest.approx(-math.log(1.2) + 0.1 * 1.0 * math.log(5.0))
    cpgd = loss(1.0, loss="cpgd", drift_coef=0.1, drift_clip=2.0)
    # -min(ln r, clip(ln r, ln .8, ln 1.2)) + 0.1 min(r - 1, 2) ln pi
    expected = [
        -math.log(1.2) + 0.1 * 2.0 * math.log(5.0),
        -math.log(1.2) + 0.1 * 0.25 * math.log(1.25),
        -math.log(0.5) + 0.1 * -0.5 * math.log(0.5),
    ]
    assert cpgd == pytest.approx(expected)


def test_each_kl_estimator_is_dispatched_by_name():
    logp, ref = torch.tensor([-1.0]), torch.tensor([-1.5])
    values = {name: fn(logp, ref).item() for name, fn in KL_ESTIMATORS.items()}
    k3 = math.exp(-0.5) + 0.5 - 1
    assert values == pytest.approx(
        {"k1": 0.5, "k2": 0.125, "k3": k3, "low_var": k3, "k3_clamped": k3, "abs": 0.5, "k1+": 0.5, "low_var+": k3}
    )
    far = {name: fn(torch.tensor([0.0]), torch.tensor([12.0])).item() for name, fn in KL_ESTIMATORS.items()}
    assert far == pytest.approx(
        {"k1": -12, "k2": 72, "k3": math.exp(12) - 13, "low_var": 10, "k3_clamped": math.exp(10) - 11,
         "abs": 12, "k1+": -12, "low_var+": 10}
    )  # fmt: skip


def test_cpgd_clips_the_log_ratio_below_at_epsilon_and_above_at_epsilon_high():
    """CPGD with clip-higher (epsilon 0.2, epsilon_high 0.28), no drift, ratios 0.5 and 1.5:
    -min(ln r A, clip(ln r, ln 0.8, ln 1.28) A) per token; a token counts as clipped only on the
    side its advantage clips (below with A < 0, above with A > 0)."""
    logp = torch.log(torch.tensor([[0.5, 1.5], [0.5, 1.5]]))
    cfg = AlgoConfig(loss="cpgd", epsilon=0.2, epsilon_high=0.28, drift_coef=0.0)
    terms = policy_loss(logp, torch.zeros(2, 2), torch.tensor([-1.0, 1.0]), torch.ones(2, 2), cfg)
    expected = [[math.log(0.8), math.log(1.5)], [-math.log(0.5), -math.log(1.28)]]
    torch.testing.assert_close(terms.per_token, torch.tensor(expected))
    assert terms.low_clipped.tolist() == [[True, False], [False, False]]
    assert terms.high_clipped.tolist() == [[False, False], [False, True]]


def test_the_papers_trust_bonus_skips_a_group_whose_answers_are_all_correct():
    """SophiaVL-R1's paper: a group all right (or all wrong) has nothing to trust the thinking
    reward against, and gets none (not the NaN of an empty mean of wrong answers)."""
    thinking = torch.tensor([0.8, 0.6, 0.2, 0.4], dtype=torch.float64)
    outcome = torch.ones(4, dtype=torch.float64)
    assert trust_bonus(thinking, outcome, outcome >= 0.5, TrustConfig(variant="paper"), 0).tolist() == [0.0] * 4


def test_temporal_bonus_is_given_when_order_helped_exactly_mu_times():
    """Video-R1: the bonus when mean accuracy(ordered) >= mu x mean accuracy(shuffled), equality
    included: 0.5 >= 1.0 x 0.5."""
    ordered = torch.tensor([1.0, 0.0, 1.0, 0.0])
    bonus = temporal_bonus(ordered, torch.tensor([0.5, 0.5]), ordered > 0.1, 0.3, 1.0)
    assert bonus.tolist() == pytest.approx([0.3, 0.0, 0.3, 0.0])


def test_length_bonus_is_given_when_exactly_two_completions_are_correct():
    lengths = torch.tensor([400, 400, 400, 400])
    correct = torch.tensor([True, False, True, False])
    assert length_bonus(lengths, correct, 320, 512, 0.2).tolist() == pytest.approx([0.2, 0.0, 0.2, 0.0])


def test_trust_warns_when_its_outcome_is_a_total_that_a_format_reward_moves():
    """SophiaVL-R1's thresholds read a format-gated [0, 1] accuracy; refcoco's total (format 1 + iou
    1) gives a well-formatted wrong answer 1.0, which passes for right: named, unless
    algo.accuracy_reward says which reward is the accuracy or the task has one reward."""
    from vlrl.tasking.registry import make_task, trust_outcome_warnings

    def warnings(*overrides):
        cfg = load_config(None, ["task.name=refcoco", *overrides])
        return trust_outcome_warnings(cfg, [make_task(cfg.task)])

    [line] = warnings("algo.trust.scorer=my_judge:score")
    assert "task refcoco's weighted total (format: 1, iou: 1)" in line and "algo.accuracy_reward" in line
    assert warnings("algo.trust.scorer=my_judge:score", "algo.accuracy_reward=iou") == []
    assert warnings("algo.trust.scorer=my_judge:score", "task.rewards.format=0") == []
    assert warnings() == []  # no Trust-GRPO


def test_reinforce_baseline_whitens_the_centred_rewards_over_the_batchs_tokens_as_openrlhf_does():
    """LMM-R1's OpenRLHF (experience_maker.py @f917f18): groups [[1.5, 0], [0, 0]] of 1, 3, 2 and
    2 tokens, centred [0.75, -0.75, 0, 0]; token-weighted mean -0.1875 and biased variance
    1.96875 / 8; its code gave [1.890, -1.134, 0.378, 0.378] (the audit's run of it)."""
    from vlrl.algos.advantages import reinforce_baseline

    rewards, lengths = torch.tensor([[1.5, 0.0], [0.0, 0.0]]), torch.tensor([[1, 3], [2, 2]])
    deviations = torch.tensor([[0.9375, -0.5625], [0.1875, 0.1875]])
    want = deviations / math.sqrt(1.96875 / 8)
    torch.testing.assert_close(reinforce_baseline(rewards, lengths), want)
    assert want.flatten().tolist() == pytest.approx([1.890, -1.134, 0.378, 0.378], abs=1e-3)
    cfg = AlgoConfig(advantage="reinforce_baseline")
    torch.testing.assert_close(advantages(rewards, torch.zeros(2, 2, dtype=torch.bool), cfg, lengths), want)
    with pytest.raises(ValueError, match="lengths"):
        advantages(rewards, torch.zeros(2, 2, dtype=torch.bool), cfg)


def openrlhf_returns(centred: torch.Tensor, kl: torch.Tensor, mask: torch.Tensor, beta: float) -> torch.Tensor:
    """OpenRLHF @ LMM-R1 f917f18, transcribed: compute_reward (the reward on the last action
    token, -beta * kl on every one) then get_cumulative_returns (gamma 1), token by token."""
    eos = mask.size(1) - 1 - mask.long().fliplr().argmax(dim=1, keepdim=True)
    reward = torch.zeros_like(kl).scatter_(1, eos, centred.unsqueeze(1)) - beta * kl
    reward = mask * reward
    returns, running = torch.zeros_like(reward), torch.zeros(reward.size(0))
    for t in reversed(range(reward.size(1))):
        running = reward[:, t] + running
        returns[:, t] = running
    return returns


@pytest.mark.parametrize("estimator", ["reinforce_baseline", "dr_grpo"])
def test_the_kl_in_each_tokens_return_is_openrlhfs_before_its_whitening(estimator):
    """algo.kl_in=returns against OpenRLHF's code (transcribed above and below): the group mean
    taken off, the k1 KL times beta from each token on taken off each token's return, then for
    reinforce_baseline the whitening over every action token of the rollout (dr_grpo: none)."""
    gen = torch.Generator().manual_seed(3)
    rewards = torch.rand(3, 4, generator=gen).round(decimals=1)
    lengths = torch.randint(1, 7, (3, 4), generator=gen)
    mask = (torch.arange(7) < lengths[..., None]).float()
    kl = torch.randn(3, 4, 7, generator=gen).abs()  # past a completion's end too: both leave it out
    beta = 0.3
    centred = (rewards - rewards.mean(-1, keepdim=True)).flatten()
    want = openrlhf_returns(centred, kl.flatten(0, 1), mask.flatten(0, 1), beta)
    if estimator == "reinforce_baseline":
        m = mask.flatten(0, 1)
        mean = (want * m).sum() / m.sum()
        rstd = (((want - mean) ** 2 * m).sum() / m.sum()).clamp(min=1e-8).rsqrt()
        want = (want - mean) * rstd * m  # outside the mask OpenRLHF keeps values the loss masks
    cfg = AlgoConfig(advantage=estimator, beta=beta, kl_in="returns")
    got = advantages(rewards, torch.zeros(3, 4, dtype=torch.bool), cfg, lengths, beta * kl)
    assert got.shape == (3, 4, 7)
    torch.testing.assert_close(got.flatten(0, 1), want)
    without = advantages(rewards, torch.zeros(3, 4, dtype=torch.bool), AlgoConfig(advantage=estimator), lengths)
    assert not torch.allclose(got[..., 0], without)  # the KL moved them
    with pytest.raises(ValueError, match="penalty"):
        advantages(rewards, torch.zeros(3, 4, dtype=torch.bool), cfg, lengths)


def test_the_kl_in_the_reward_is_verls_summed_token_penalty_before_grpos_normalisation():
    """algo.kl_in=reward as verl's apply_kl_penalty then compute_grpo_outcome_advantage
    (token_level_rewards = scores - beta * kl, summed over the response; (s - mean) / (std + 1e-6))."""
    gen = torch.Generator().manual_seed(5)
    rewards = torch.rand(2, 5, generator=gen)
    lengths = torch.randint(1, 6, (2, 5), generator=gen)
    kl = torch.randn(2, 5, 6, generator=gen) * (torch.arange(6) < lengths[..., None])
    beta = 0.1
    scores = rewards - beta * kl.sum(-1)
    want = (scores - scores.mean(-1, keepdim=True)) / (scores.std(-1, keepdim=True) + 1e-6)
    cfg = AlgoConfig(advantage="grpo", std_eps=1e-6, beta=beta, kl_in="reward")
    torch.testing.assert_close(advantages(rewards, torch.zeros(2, 5, dtype=torch.bool), cfg, lengths, beta * kl), want)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"kl_in": "reward", "beta": 0.0}, "beta is 0"),
        ({"kl_in": "reward", "advantage": "sign"}, "sign reads only correctness"),
        ({"kl_in": "returns", "replay": ReplayConfig(mode="ssr")}, "one advantage a row"),
        ({"advantage": "optimal_token_baseline", "replay": ReplayConfig(mode="ssr")}, "one advantage a row"),
        ({"advantage": "optimal_token_baseline", "kl_in": "reward", "beta": 0.1}, "takes the KL per token"),
        ({"kl_in": "reward", "kl_bias_correction": True}, "one or the other"),
        ({"loss": "cispo"}, "epsilon_high, which is unset"),
        ({"loss": "sapo", "dual_clip": 3.0}, "bounds its own way"),
        ({"off_policy_mask": 0.0}, "off_policy_mask must be > 0"),
        ({"router_aux_loss_coef": -0.001}, "router_aux_loss_coef must be >= 0"),
        ({"loss": "vespo", "ratio_level": "sequence"}, "takes each token.s ratio its own way"),
        ({"loss": "gmpo", "dual_clip": 3.0}, "bounds its own way"),
        ({"kl_target": 0.1}, "kl_target steers the coefficient of the KL in the reward"),
        ({"entropy_target": 0.2, "entropy_coef_min": 2.0}, "entropy_coef_min <= entropy_coef_max"),
        ({"ref_sync_every": 4, "beta": 0.0}, "moves the KL reference, and algo.beta is 0"),
        (
            {"advantage": "remax", "length_control": LengthControlConfig(enabled=True)},
            "remax scores its greedy baseline",
        ),
        ({"ref_sync_every": 4, "ref_sync_alpha": 0.0}, "ref_sync_alpha in \\(0, 1\\]"),
    ],
)
def test_an_option_that_could_not_act_is_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        AlgoConfig(**overrides).validate("algo")


def test_gdpo_normalises_each_reward_in_its_group_then_their_sum_over_the_batch_as_trl():
    """algo.advantage=gdpo against TRL 1.16's multi_objective_aggregation="normalize_then_sum"
    (grpo_trainer.py, transcribed: per reward function mean and nanstd over the group, + 1e-4,
    the weighted sum, then mean and nanstd over the batch, + 1e-4)."""
    from vlrl.algos.advantages import decoupled_sum

    g = torch.Generator().manual_seed(2)
    per_func = torch.rand(3, 4, 2, generator=g).round(decimals=1)  # 3 groups of 4, two rewards
    per_func[1, :, 0] = 1.0  # a reward without spread in a group: 0 there, not NaN
    weights = torch.tensor([1.0, 0.5])
    mean_k = per_func.mean(dim=1, keepdim=True)
    std_k = ((per_func - mean_k) ** 2).sum(dim=1, keepdim=True).div(3).sqrt()  # nanstd: Bessel's correction
    summed = ((per_func - mean_k) / (std_k + 1e-4) * weights).sum(dim=2)
    want = (summed - summed.mean()) / (((summed - summed.mean()) ** 2).sum().div(11).sqrt() + 1e-4)
    decoupled = torch.stack([decoupled_sum(per_func[i], weights) for i in range(3)])
    torch.testing.assert_close(decoupled, summed)
    got = advantages(decoupled, torch.zeros(3, 4, dtype=torch.bool), AlgoConfig(advantage="gdpo"))
    torch.testing.assert_close(got, want)
    total = (per_func * weights).sum(dim=2)  # the summed reward's GRPO is another thing
    assert not torch.allclose(got, advantages(total, torch.zeros(3, 4, dtype=torch.bool), AlgoConfig()))


def verl_by_group(
    scores: torch.Tensor, lengths: torch.Tensor, estimator: str, norm_adv_by_std_in_grpo: bool = True
) -> torch.Tensor:
    """verl at b178a3c (verl/trainer/ppo/core_algos.py), transcribed with its per-index loops:
    compute_opo_outcome_advantage, compute_gpg_outcome_advantage (f_norm 1),
    compute_grpo_passk_outcome_advantage (norm_adv_by_std_in_grpo, epsilon 1e-6)."""
    groups, g = scores.shape
    flat, index, length = scores.flatten().clone(), [i // g for i in range(groups * g)], lengths.flatten()
    out = torch.zeros_like(flat)
    if estimator == "gpg":
        alpha = flat.numel() / torch.count_nonzero(flat).clamp(min=1)
    for idx in range(groups):
        members = [i for i in range(len(flat)) if index[i] == idx]
        r = flat[members]
        if estimator == "opo":
            baseline = (length[members] * r).sum() / length[members].sum()
            out[members] = r - baseline
        elif estimator == "gpg":
            out[members] = alpha * (r - r.mean()) / 1.0
        else:
            topk, topk_idx = torch.topk(r, 2)
            out[members[topk_idx[0].item()]] = topk[0] - topk[1]
            if norm_adv_by_std_in_grpo:
                out[members[topk_idx[0].item()]] /= torch.std(r) + 1e-6
    return out.view(groups, g)


def test_pass_at_k_without_the_std_is_verls_without_norm_adv_by_std_and_grpo_without_it_dr_grpo():
    g = torch.Generator().manual_seed(5)
    rewards = (torch.rand(4, 5, generator=g) * 4).round() / 4
    none = torch.zeros(4, 5, dtype=torch.bool)
    got = advantages(rewards, none, AlgoConfig(advantage="passk", advantage_std="none"))
    torch.testing.assert_close(got, verl_by_group(rewards, torch.ones(4, 5), "passk", norm_adv_by_std_in_grpo=False))
    assert not torch.allclose(got, advantages(rewards, none, AlgoConfig(advantage="passk", std_eps=1e-6)))
    grpo_none = advantages(rewards, none, AlgoConfig(advantage="grpo", advantage_std="none"))
    torch.testing.assert_close(grpo_none, dr_grpo(rewards))  # TRL's scale_rewards="none"
    with pytest.raises(ConfigError, match="advantage_std=batch is not read by advantage 'passk'"):
        AlgoConfig(advantage="passk", advantage_std="batch").validate("algo")
    with pytest.raises(ConfigError, match="advantage_std=none is not read by advantage 'rloo'"):
        AlgoConfig(advantage="rloo", advantage_std="none").validate("algo")


@pytest.mark.parametrize("estimator", ["opo", "gpg", "passk"])
def test_verls_group_estimators_opo_gpg_and_pass_at_k(estimator):
    g = torch.Generator().manual_seed(4)
    rewards = (torch.rand(4, 5, generator=g) * 2).round() / 2  # ties and zeros: passk takes the first best
    rewards[3] = 0.0  # a group without reward: gpg's alpha counts it, passk gives 0
    lengths = torch.randint(1, 30, (4, 5), generator=g)
    cfg = AlgoConfig(advantage=estimator, std_eps=1e-6)
    got = advantages(rewards, torch.zeros(4, 5, dtype=torch.bool), cfg, lengths)
    torch.testing.assert_close(got, verl_by_group(rewards, lengths, estimator))
    assert not torch.allclose(got, dr_grpo(rewards))


def test_reinforce_plus_plus_whitens_the_returns_without_a_baseline_as_openrlhfs_reinforce():
    """OpenRLHF's `reinforce` (REINFORCE++) at LMM-R1 @f917f18: no group baseline; the returns
    (compute_reward + get_cumulative_returns, transcribed in openrlhf_returns) whitened over every
    action token; without a KL, each completion's reward whitened with its tokens as weights."""
    g = torch.Generator().manual_seed(6)
    rewards = torch.rand(2, 4, generator=g).round(decimals=1)
    lengths = torch.randint(1, 7, (2, 4), generator=g)
    mask = (torch.arange(6) < lengths[..., None]).float()
    kl = torch.randn(2, 4, 6, generator=g).abs()
    returns = openrlhf_returns(rewards.flatten(), 0.2 * kl.flatten(0, 1), mask.flatten(0, 1), 1.0)
    m = mask.flatten(0, 1)
    mean = (returns * m).sum() / m.sum()
    want = (returns - mean) * (((returns - mean) ** 2 * m).sum() / m.sum()).clamp(min=1e-8).rsqrt() * m
    cfg = AlgoConfig(advantage="reinforce_plus_plus", kl_in="returns", beta=0.2)
    got = advantages(rewards, torch.zeros(2, 4, dtype=torch.bool), cfg, lengths, 0.2 * kl)
    torch.testing.assert_close(got.flatten(0, 1), want)
    plain = advantages(
        rewards, torch.zeros(2, 4, dtype=torch.bool), AlgoConfig(advantage="reinforce_plus_plus"), lengths
    )
    tokens = lengths.float()
    centred = rewards - (tokens * rewards).sum() / tokens.sum()
    torch.testing.assert_close(plain, centred / ((tokens * centred**2).sum() / tokens.sum()).sqrt())


def test_remax_is_each_reward_less_its_prompts_greedy_reward_as_verl_computes_it():
    """algo.advantage=remax against verl's compute_remax_outcome_advantage (verl/trainer/ppo/
    core_algos.py at b178a3c, transcribed): the returns (the outcome reward sits on the
    response's last token) less the baseline on every token. EasyR1's (b44b311) multiplies a
    (batch,) difference by the (batch, tokens) mask without unsqueezing it, which broadcasts
    only when the two sizes agree; its intent is this."""
    g = torch.Generator().manual_seed(3)
    rewards = torch.rand(3, 4, generator=g)
    baseline = torch.rand(3, generator=g)
    lengths = torch.randint(1, 6, (3, 4), generator=g)
    response_mask = (torch.arange(6) < lengths[..., None]).float().flatten(0, 1)  # (12, 6)
    token_level_rewards = torch.zeros(12, 6)
    token_level_rewards[torch.arange(12), lengths.flatten() - 1] = rewards.flatten()
    reward_baselines = baseline.repeat_interleave(4)
    returns = (token_level_rewards * response_mask).flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])
    theirs = returns - reward_baselines.unsqueeze(-1) * response_mask
    ours = advantages(rewards, torch.zeros(3, 4, dtype=torch.bool), AlgoConfig(advantage="remax"), baseline=baseline)
    torch.testing.assert_close(ours.flatten()[:, None] * response_mask, theirs)


def verl_optimal_token_baseline(token_level_rewards, response_mask, index, old_log_probs, sum_pi_squared, is_weights):
    """verl at b178a3c (verl/trainer/ppo/core_algos.py: compute_optimal_token_baseline_advantage,
    handle_zero_tail False as compute_advantage calls it, epsilon 1e-8), transcribed."""
    from collections import defaultdict

    batch_size, _ = token_level_rewards.shape
    returns = (token_level_rewards * response_mask).flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])
    pi_t = torch.exp(old_log_probs)
    w_per_timestep = 1 - 2 * pi_t + sum_pi_squared
    if is_weights is not None:
        w_per_timestep = w_per_timestep * (is_weights**2)
    w_cumulative = (w_per_timestep * response_mask).cumsum(dim=-1)
    prompt_groups = defaultdict(list)
    for i in range(batch_size):
        prompt_groups[index[i]].append(i)
    baselines = torch.zeros_like(returns)
    for _, trajectory_indices in prompt_groups.items():
        if len(trajectory_indices) == 1:
            continue
        traj_idx = torch.tensor(trajectory_indices)
        returns_group, w_cumulative_group, mask_group = (
            returns[traj_idx],
            w_cumulative[traj_idx],
            response_mask[traj_idx],
        )
        numerator = (returns_group * w_cumulative_group * mask_group).sum(dim=0)
        denominator = (w_cumulative_group * mask_group).sum(dim=0) + 1e-8
        baselines[traj_idx] = (numerator / denominator).unsqueeze(0).expand(len(trajectory_indices), -1)
    return (returns - baselines) * response_mask


@pytest.mark.parametrize(("g", "kl_in", "corrected"), [(5, "loss", False), (5, "returns", True), (1, "loss", False)])
def test_the_optimal_token_baseline_weighs_each_tokens_returns_by_the_realized_energy_as_verl(g, kl_in, corrected):
    """algo.advantage=optimal_token_baseline against verl's code (transcribed above), on
    completions of 1 to 9 tokens: the outcome on each one's last token (less beta times the KL on
    every token with kl_in=returns, verl's use_kl_in_reward), rollout importance weights squared
    into the energy, and a group of one keeping its returns."""
    from vlrl.algos.advantages import realized_energy

    gen = torch.Generator().manual_seed(8)
    groups, t = 3, 9
    rewards = torch.rand(groups, g, generator=gen).round(decimals=1)
    lengths = torch.randint(1, t + 1, (groups, g), generator=gen)
    mask = (torch.arange(t) < lengths[..., None]).float()
    logits = torch.randn(groups, g, t, 6, generator=gen) * 2
    logp = torch.log_softmax(logits, -1)[..., 0]  # of the token sampled (id 0)
    squares = torch.softmax(logits, -1).pow(2).sum(-1)
    kl = torch.randn(groups, g, t, generator=gen).abs()
    weights = torch.rand(groups, g, t, generator=gen) * 2 if corrected else None
    eos = (lengths - 1)[..., None]
    scores = torch.zeros(groups, g, t).scatter_(-1, eos, rewards[..., None])
    token_rewards = scores - 0.2 * kl * mask if kl_in == "returns" else scores
    flat = lambda x: None if x is None else x.flatten(0, 1)  # noqa: E731
    index = [i // g for i in range(groups * g)]
    want = verl_optimal_token_baseline(
        flat(token_rewards), flat(mask), index, flat(logp), flat(squares), flat(weights)
    ).view(groups, g, t)
    cfg = AlgoConfig(advantage="optimal_token_baseline", kl_in=kl_in, beta=0.2)
    penalty = 0.2 * kl if kl_in == "returns" else None
    energy = realized_energy(logp, squares, weights)
    got = advantages(rewards, torch.zeros(groups, g, dtype=torch.bool), cfg, lengths, penalty, energy=energy)
    torch.testing.assert_close(got, want)
    if g > 1:  # not the group's mean: the energy weighs it, token by token
        assert not torch.allclose(got, dr_grpo(rewards)[..., None] * mask, atol=1e-3)
        flat_energy = realized_energy(logp, squares.flip(-1), weights)  # another energy, another baseline
        assert not torch.allclose(got, advantages(rewards, rewards > 2, cfg, lengths, penalty, energy=flat_energy))
