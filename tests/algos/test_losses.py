"""GRPO's loss pieces against hand-computed numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from vlrl.algos.advantages import grpo
from vlrl.algos.losses import (
    KL_ESTIMATORS,
    clipped_surrogate,
    high_entropy_mask,
    kl_k3,
    mismatch,
    rollout_importance_weights,
    token_loss,
    token_weights,
)
from vlrl.config import AlgoConfig
from vlrl.trainer.batch import longest_first, micro_batches, padded_tokens, unpadded_tokens, update_micro_batches


def test_grpo_advantages_normalise_within_each_group():
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.5, 0.5, 0.5, 0.5]])
    adv = grpo(rewards, std_eps=1e-4)
    std = math.sqrt(1 / 3)  # unbiased std of [1, 0, 0, 1]
    expected = 0.5 / (std + 1e-4)
    torch.testing.assert_close(adv[0], torch.tensor([expected, -expected, -expected, expected]))
    assert torch.equal(adv[1], torch.zeros(4))  # a group with no spread teaches nothing


def test_token_weights_for_each_aggregation():
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    torch.testing.assert_close(token_weights(mask, "token_mean", 10), mask / 4)
    torch.testing.assert_close(
        token_weights(mask, "seq_mean_token_mean", 10), torch.tensor([[1 / 6, 1 / 6, 1 / 6], [1 / 2, 0, 0]])
    )
    torch.testing.assert_close(token_weights(mask, "seq_mean_token_sum_norm", 10), mask / 20)


def test_micro_token_mean_is_each_micro_batchs_token_mean_averaged_over_the_micro_batches():
    """EasyR1's masked_mean per micro-batch of rows, over the gradient accumulation steps: rows
    0-1 (4 tokens) and row 2 (2 tokens) in micro-batches of 2, so 1/4/2 and 1/2/2 a token."""
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0], [1.0, 1.0, 0.0]])
    want = torch.tensor([[1 / 8, 1 / 8, 1 / 8], [1 / 8, 0, 0], [1 / 4, 1 / 4, 0]])
    torch.testing.assert_close(token_weights(mask, "micro_token_mean", 10, micro_rows=2), want)
    # data-parallel: divided by the mean number of micro-batches over the processes
    torch.testing.assert_close(token_weights(mask, "micro_token_mean", 10, micro_rows=2, micro_batches=4), want / 2)
    torch.testing.assert_close(token_weights(mask, "micro_token_mean", 10, micro_rows=3), mask / 6)  # one: token_mean


def test_grpo_loss_and_gradient_on_a_hand_computed_example():
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -1.5]], requires_grad=True)
    old = torch.tensor([[-1.5, -2.1], [-0.5, -1.2]])
    ref = torch.tensor([[-1.2, -1.8], [-0.4, -1.0]])
    adv = torch.tensor([1.0, -1.0])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    beta = 0.04

    terms = clipped_surrogate(logp, old, adv, mask, 0.2, 0.2)
    per_token = terms.per_token + beta * kl_k3(logp, ref)
    loss = (per_token * token_weights(mask, "seq_mean_token_mean", 2)).sum()
    loss.backward()

    # Ratios: e^0.5 (clipped to 1.2, A > 0), e^0.1, 1; the masked token does not count.
    r01 = math.exp(0.1)
    k3 = lambda d: math.exp(d) - d - 1  # noqa: E731  (d = ref - logp)
    row0 = (-1.2 + beta * k3(-0.2) + -r01 + beta * k3(0.2)) / 2
    row1 = 1.0 + beta * k3(0.1)
    assert loss.item() == pytest.approx((row0 + row1) / 2, rel=1e-6)
    assert terms.high_clipped.tolist() == [[True, False], [False, False]]
    assert terms.low_clipped.tolist() == [[False, False], [False, True]]  # masked out of every statistic

    # d/dlogp: -A r w on unclipped tokens (0 where clipped), plus beta w (1 - e^(ref - logp)).
    kl_grad = lambda d: beta * (1 - math.exp(d))  # noqa: E731
    expected = [
        [kl_grad(-0.2) / 4, (-r01 + kl_grad(0.2)) / 4],
        [(1.0 + kl_grad(0.1)) / 2, 0.0],
    ]
    torch.testing.assert_close(logp.grad, torch.tensor(expected), rtol=1e-6, atol=1e-7)


def test_clip_higher_uses_separate_bounds():
    logp = torch.log(torch.tensor([[1.25, 0.7]]))
    old = torch.zeros(1, 2)
    mask = torch.ones(1, 2)
    higher = clipped_surrogate(logp, old, torch.tensor([1.0]), mask, 0.2, 0.28).per_token
    assert higher.tolist()[0] == pytest.approx([-1.25, -0.7])  # 1.25 is under 1 + 0.28
    symmetric = clipped_surrogate(logp, old, torch.tensor([1.0]), mask, 0.2, 0.2).per_token
    assert symmetric.tolist()[0] == pytest.approx([-1.2, -0.7])


def test_micro_batches_respect_the_token_budget_and_keep_groups_together():
    prompt_index = [0, 0, 0, 1, 1, 1]
    plan = micro_batches(prompt_index, prompt_lengths=[100, 100], row_lengths=[10] * 6, token_budget=130)
    assert plan == [[0, 1, 2], [3, 4, 5]]  # 100 + 3 x 10 fits; a second prompt would not
    plan = micro_batches(prompt_index, prompt_lengths=[100, 100], row_lengths=[10] * 6, token_budget=1000)
    assert plan == [[0, 1, 2, 3, 4, 5]]
    plan = micro_batches(prompt_index, prompt_lengths=[100, 100], row_lengths=[10] * 6, token_budget=1)
    assert plan == [[i] for i in range(6)]


def _reference_plan(prompt_index, prompt_lengths, row_lengths, token_budget):
    """micro_batches by its definition: a row joins the current micro-batch unless the padded
    size (prompts x longest prompt + rows x longest completion) would then exceed the budget."""
    plan, current = [], []
    for position in range(len(row_lengths)):
        joined = [*current, position]
        prompts = {prompt_index[i] for i in joined}
        cost = len(prompts) * max(prompt_lengths[p] for p in prompts) + len(joined) * max(
            row_lengths[i] for i in joined
        )
        if current and cost > token_budget:
            plan.append(current)
            joined = [position]
        current = joined
    return [*plan, current] if current else plan


def test_micro_batches_pad_to_their_longest_prompt_and_completion():
    # 10 + 2 x 20 = 50 fits; the third row brings prompt 1: 2 x 50 + 3 x 20 = 160; then 50 + 2 x 5
    assert micro_batches([0, 0, 1, 1], [10, 50], [5, 20, 5, 5], token_budget=100) == [[0, 1], [2, 3]]
    # a long completion ends its micro-batch and does not pad the next one: 10 + 3 x 5 = 25
    assert micro_batches([0, 0, 0, 0], [10], [5, 40, 5, 5], token_budget=25) == [[0], [1], [2, 3]]
    # a short prompt after a long one is padded to the long one: 2 x 50 + 2 x 5 = 110
    assert micro_batches([0, 1], [50, 10], [5, 5], token_budget=100) == [[0], [1]]
    # the row joining counts too: 10 + 2 x 20 = 50 does not fit in 45
    assert micro_batches([0, 0], [10], [20, 20], token_budget=45) == [[0], [1]]
    for prompt_index, prompt_lengths, row_lengths, budget in random_batches(0, 4, 9, 60, 40, 250):
        expected = _reference_plan(prompt_index, prompt_lengths, row_lengths, budget)
        assert micro_batches(prompt_index, prompt_lengths, row_lengths, budget) == expected


def random_batches(seed: int, prompts: int, rows: int, prompt_length: int, row_length: int, budget: int):
    """300 draws of (prompt index per row, prompt lengths, completion lengths, token budget),
    each below the bound given (prompt-major rows)."""
    rng = np.random.default_rng(seed)
    for _ in range(300):
        n = int(rng.integers(1, prompts))
        index = sorted(rng.integers(0, n, size=int(rng.integers(1, rows))).tolist())
        lengths = rng.integers(1, prompt_length, size=n).tolist()
        yield index, lengths, rng.integers(1, row_length, size=len(index)).tolist(), int(rng.integers(1, budget))


def test_the_update_packs_rows_longest_first_when_that_computes_fewer_padded_tokens():
    # in order: [0, 1] 10 + 2 x 40 and [2, 3] the same, 180 tokens; longest first: [0, 2]
    # 2 x 10 + 2 x 40 = 100 and [1, 3] 2 x 10 + 2 x 5 = 30, 130 tokens
    index, prompts, rows = [0, 0, 1, 1], [10, 10], [40, 5, 40, 5]
    assert micro_batches(index, prompts, rows, 100) == [[0, 1], [2, 3]]
    assert longest_first(index, prompts, rows, 100) == [[0, 2], [1, 3]]
    assert padded_tokens([[0, 1], [2, 3]], index, prompts, rows) == 180
    assert padded_tokens([[0, 2], [1, 3]], index, prompts, rows) == 130
    # without padding: each prompt once per micro-batch it is in, and every completion
    assert unpadded_tokens([[0, 1], [2, 3]], index, prompts, rows) == 2 * 10 + 90
    assert unpadded_tokens([[0, 2], [1, 3]], index, prompts, rows) == 4 * 10 + 90
    assert update_micro_batches(index, prompts, rows, 100) == [[0, 2], [1, 3]]
    # long prompts, lengths alike: splitting the groups would run each prefix twice
    index, prompts, rows = [0, 0, 1, 1], [50, 50], [6, 5, 6, 5]
    assert update_micro_batches(index, prompts, rows, 70) == micro_batches(index, prompts, rows, 70) == [[0, 1], [2, 3]]
    # a tie keeps the rows' order: here both packings are one micro-batch
    assert update_micro_batches([0, 0], [10], [5, 9], 100) == [[0, 1]]
    # a prompt per row (SFT): the prompt is part of a row's length. In order: [0, 1] and [2, 3],
    # 2 x 100 + 2 x 5 each, 420 tokens; longest first: [0, 2] 210 and [1, 3] 2 x 10 + 2 x 5 = 30
    index, prompts, rows = [0, 1, 2, 3], [100, 10, 100, 10], [5, 5, 5, 5]
    assert longest_first(index, prompts, rows, 220) == [[0, 2], [1, 3]]
    assert padded_tokens(update_micro_batches(index, prompts, rows, 220), index, prompts, rows) == 240


def test_the_updates_packing_is_the_cheaper_of_the_two_and_holds_every_row_once_within_the_budget():
    for index, prompt_lengths, rows, budget in random_batches(1, 5, 12, 60, 80, 400):
        plan = update_micro_batches(index, prompt_lengths, rows, budget)
        costs = [padded_tokens(p, index, prompt_lengths, rows) for p in (micro_batches(index, prompt_lengths, rows, budget),
                 longest_first(index, prompt_lengths, rows, budget))]  # fmt: skip
        assert padded_tokens(plan, index, prompt_lengths, rows) == min(costs)
        assert sorted(i for batch in plan for i in batch) == list(range(len(index)))
        for batch in plan:
            assert len(batch) == 1 or padded_tokens([batch], index, prompt_lengths, rows) <= budget


def test_clip_statistics_count_a_token_only_outside_its_own_bound_and_with_the_advantage_that_clips_it():
    """TRL's is_low_clipped / is_high_clipped: below 1 - eps_low with A < 0, above 1 + eps_high
    with A > 0; a zero advantage is never counted, nor a ratio beyond the bound on the other side."""
    logp = torch.log(torch.tensor([[0.5, 1.25, 1.5]] * 3))
    mask = torch.ones(3, 3)
    terms = clipped_surrogate(logp, torch.zeros(3, 3), torch.tensor([-1.0, 0.0, 1.0]), mask, 0.2, 0.28)
    # 0.5 < 0.8 clips A = -1 only; 1.25 is inside [0.8, 1.28]; 1.5 > 1.28 clips A = +1 only
    assert terms.low_clipped.tolist() == [[True, False, False], [False, False, False], [False, False, False]]
    assert terms.high_clipped.tolist() == [[False, False, False], [False, False, False], [False, False, True]]


def test_a_sequence_level_ratio_of_a_row_with_no_real_tokens_is_one_not_nan():
    """GSPO's mean log-ratio over a row whose tokens are all masked (algo.mask_truncated on a
    truncated completion): 0 / max(0, 1) = 0, ratio 1, the loss -A, finite (a NaN there would
    make the whole step's loss NaN even at weight 0)."""
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -0.7]])
    old = torch.tensor([[-1.0, -2.0], [-3.0, -4.0]])
    mask = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    terms = clipped_surrogate(logp, old, torch.tensor([0.5, 2.0]), mask, 0.2, 0.2, ratio_level="sequence")
    assert terms.per_token.tolist() == [[-0.5], [-2.0]]


def test_an_old_log_prob_far_below_the_new_one_bounds_the_loss_as_verl_does_instead_of_making_the_step_nan():
    """verl's clamp of the log-ratio to [-20, 20] before exp: an engine's old log-prob of -100
    under a new one of -5 (log-ratio 95, past float32's exp) gives a finite loss and no gradient
    on that token, where exp's overflow made every gradient of the batch NaN, that of a token it
    does not touch and its own masked or clipped one included."""
    old = torch.tensor([[-100.0, -1.0], [-100.0, -1.0]])
    for advantages, dual_clip in ((torch.tensor([1.0, -1.0]), None), (torch.tensor([-1.0, -1.0]), 3.0)):
        logp = torch.tensor([[-5.0, -1.2], [-5.0, -0.9]], requires_grad=True)
        mask = torch.tensor([[1.0, 1.0], [0.0, 1.0]])
        out = clipped_surrogate(logp, old, advantages, mask, 0.2, 0.2, dual_clip=dual_clip)
        (out.per_token * mask).sum().backward()
        assert torch.isfinite(logp.grad).all() and logp.grad[:, 0].eq(0).all()
        # the untouched tokens' gradient is -A r with r = e^(logp - old) unclipped: e^-0.2 and e^0.1
        torch.testing.assert_close(logp.grad[:, 1], -advantages * torch.exp(torch.tensor([-0.2, 0.1])))
    # A < 0 without dual clip: the loss stops at verl's e^20 |A| (TRL's grows as e^25 there)
    logp = torch.tensor([[0.0]], requires_grad=True)
    out = clipped_surrogate(logp, torch.tensor([[-25.0]]), torch.tensor([-2.0]), torch.ones(1, 1), 0.2, 0.2)
    torch.testing.assert_close(out.per_token, torch.tensor([[2 * math.exp(20)]]))
    out.per_token.sum().backward()
    assert logp.grad.item() == 0.0 and out.low_clipped.item() is False


def test_gspos_sequence_log_ratio_stops_at_verls_ten():
    logp = torch.tensor([[0.0, 0.0, 0.0]], requires_grad=True)
    old = torch.tensor([[-12.0, -12.0, -30.0]])  # a mean log-ratio of 12 over the two real tokens
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    out = clipped_surrogate(logp, old, torch.tensor([-1.0]), mask, 3e-4, 4e-4, ratio_level="sequence")
    torch.testing.assert_close(out.per_token, torch.tensor([[math.exp(10)]]))
    out.per_token.sum().backward()
    assert torch.equal(logp.grad, torch.zeros(1, 3))
    out = clipped_surrogate(logp.detach(), old + 3, torch.tensor([-1.0]), mask, 3e-4, 4e-4, ratio_level="sequence")
    torch.testing.assert_close(out.per_token, torch.tensor([[math.exp(9)]]))  # below it: the ratio itself


def test_token_weights_of_rows_without_real_tokens_are_zero_not_nan():
    """A row fully masked (algo.mask_truncated) weighs 0 under seq_mean_token_mean while the
    others keep 1 / (tokens x rows); a mini-batch with no real token at all weighs 0 everywhere."""
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    torch.testing.assert_close(
        token_weights(mask, "seq_mean_token_mean", 3), torch.tensor([[0.25, 0.25, 0.0], [0.0, 0.0, 0.0]])
    )
    for aggregation in ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"):
        assert token_weights(torch.zeros(2, 3), aggregation, 3).tolist() == [[0.0] * 3] * 2


def test_token_weights_divide_by_the_given_rows_and_tokens_of_the_whole_batch():
    """Data-parallel training passes the batch's mean numbers of sequences and tokens over the
    processes: a process holding 2 rows and 4 tokens of a batch averaging 4 rows and 10 tokens."""
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    torch.testing.assert_close(token_weights(mask, "token_mean", 5, rows=4, tokens=10.0), mask / 10)
    torch.testing.assert_close(
        token_weights(mask, "seq_mean_token_mean", 5, rows=4, tokens=10.0),
        torch.tensor([[1 / 12, 1 / 12, 1 / 12], [1 / 4, 0.0, 0.0]]),
    )
    torch.testing.assert_close(token_weights(mask, "seq_mean_token_sum_norm", 5, rows=4, tokens=10.0), mask / 20)


def test_high_entropy_selection_keeps_a_token_exactly_at_the_threshold():
    """TRL's entropy_mask = entropies >= quantile(1 - fraction): with five real tokens the
    median is the third one's entropy itself, which is kept (three of five, not two)."""
    entropy = torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.5, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    assert high_entropy_mask(entropy, mask, fraction=0.5).tolist() == [[False, False, True], [True, True, False]]


def test_the_entropy_bonus_acts_on_the_selected_high_entropy_tokens_only_as_trls():
    """TRL 1.16's effective_mask = mask * entropy_mask for its entropy bonus too: with 0.25 of four
    tokens kept, only the highest-entropy one's entropy is in the loss (its gradient -coef there)."""
    entropy = torch.tensor([[0.1, 0.2, 0.3, 2.0]], requires_grad=True)
    mask = torch.ones(1, 4)
    logp = torch.full((1, 4), -1.0)
    cfg = AlgoConfig(aggregation="token_mean", entropy_coef=0.01, top_entropy_fraction=0.25)
    selected = high_entropy_mask(entropy.detach(), mask, cfg.top_entropy_fraction)
    per_token = token_loss(logp, logp, torch.ones(1), mask, cfg, selected=selected, entropy=entropy).per_token
    per_token.sum().backward()
    assert entropy.grad[0].tolist() == pytest.approx([0.0, 0.0, 0.0, -0.01])
    assert per_token[0].tolist() == pytest.approx([0.0, 0.0, 0.0, -1.0 - 0.02])


def test_high_entropy_selection_of_a_batch_without_real_tokens_selects_nothing():
    entropy = torch.tensor([[0.5, 1.0]])
    assert high_entropy_mask(entropy, torch.zeros(1, 2), fraction=0.2).tolist() == [[False, False]]


def test_rollout_importance_weights_carry_no_gradient():
    trainer = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    weights = rollout_importance_weights(trainer, torch.tensor([[-1.5, -1.0]]), torch.ones(1, 2), "token_truncate")
    assert not weights.requires_grad
    torch.testing.assert_close(weights, torch.tensor([[math.exp(0.5), math.exp(-1.0)]]))


def test_masked_importance_weights_keep_a_ratio_on_the_bound():
    """TRL's *_mask modes zero a ratio strictly outside [clip_min, clip_max]: a ratio of exactly 1
    with both bounds 1 is kept."""
    logp = torch.tensor([[-1.0, -2.0]])
    for mode in ("token_mask", "sequence_mask"):
        w = rollout_importance_weights(logp, logp.clone(), torch.ones(1, 2), mode, clip_min=1.0, clip_max=1.0)
        assert bool((w == 1.0).all()), mode


def test_mismatch_counts_real_tokens_only():
    """Padding, where the trainer's and engine's values are arbitrary, adds nothing: sums of
    |diff| and of k3 KL(engine || trainer) = exp(t - e) - (t - e) - 1 over the real tokens,
    the largest real |diff|, and their count."""
    trainer = torch.tensor([[-1.0, -2.0, 5.0], [-0.5, -9.0, -9.0]])
    engine = torch.tensor([[-1.5, -1.0, -5.0], [-0.5, 0.0, 0.0]])
    real = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    got = mismatch(trainer, engine, real)
    k3 = lambda d: math.exp(d) - d - 1  # noqa: E731  d = trainer - engine
    assert got == pytest.approx(
        {"mismatch_abs": 1.5, "mismatch_max": 1.0, "mismatch_kl": k3(0.5) + k3(-1.0), "mismatch_tokens": 3.0}
    )


def test_vespo_folds_the_engine_correction_into_its_sequence_weight_and_does_not_multiply_it_again():
    """VESPO's weight of a sequence with engine-correction weights c is its weight with each
    token's log-ratio raised by log c (TRL folds the token weights into w), and token_loss does
    not multiply the VESPO term by them a second time."""
    from vlrl.algos.losses import token_loss, vespo_loss
    from vlrl.config import AlgoConfig

    g = torch.Generator().manual_seed(0)
    logp = torch.randn(4, 6, generator=g).clamp(max=-0.1)
    old = logp + 0.2 * torch.randn(4, 6, generator=g)
    mask = (torch.arange(6) < torch.tensor([[6], [3], [1], [5]])).float()
    log_c = 0.3 * torch.randn(4, 6, generator=g) * mask
    adv = torch.tensor([1.0, -0.5, 0.25, -2.0])
    k, lam = (2.0, 3.0), (3.0, 2.0)
    folded = vespo_loss(logp, old, adv, mask, k, lam, torch.exp(log_c)).per_token
    torch.testing.assert_close(folded, vespo_loss(logp, old - log_c, adv, mask, k, lam).per_token)
    assert not torch.allclose(folded, vespo_loss(logp, old, adv, mask, k, lam).per_token)
    cfg = AlgoConfig(loss="vespo")
    torch.testing.assert_close(token_loss(logp, old, adv, mask, cfg, is_weights=torch.exp(log_c)).per_token, folded)


def verl_geo_mean(old_log_prob, log_prob, advantages, response_mask, cliprange_low, cliprange_high):
    """verl at b178a3c, compute_policy_loss_geo_mean, transcribed (config read as arguments)."""
    negative_approx_kl = log_prob - old_log_prob
    sgn_advantage = torch.sign(advantages)
    negative_approx_kl_clamp = torch.clamp(negative_approx_kl, -cliprange_low, cliprange_high)
    negative_approx_kl_min = torch.min(sgn_advantage * negative_approx_kl, sgn_advantage * negative_approx_kl_clamp)
    negative_approx_kl_min = sgn_advantage * negative_approx_kl_min
    response_mask_sum = response_mask.sum(dim=-1)
    ratio = torch.exp((negative_approx_kl_min * response_mask).sum(dim=-1) / (response_mask_sum + 1e-8))
    advantage = (advantages * response_mask).sum(dim=-1) / (response_mask_sum + 1e-8)
    return torch.mean(-advantage * ratio)


def verl_kl_cov(old_log_prob, log_prob, advantages, response_mask, kl_cov_ratio, ppo_kl_coef):
    """verl at b178a3c, compute_policy_loss_kl_cov, transcribed, with agg_loss's token-mean."""
    negative_approx_kl = log_prob - old_log_prob
    abs_kl = negative_approx_kl.abs()
    ratio = torch.exp(negative_approx_kl)
    pg_losses1 = -advantages * ratio
    pg_losses_kl = -advantages * ratio + ppo_kl_coef * abs_kl
    pg_losses = pg_losses1
    all_valid = response_mask > 0
    all_valid_idx = torch.nonzero(all_valid.reshape(-1), as_tuple=True)[0]
    all_valid_adv = advantages[all_valid].detach().reshape(-1).cpu()
    all_valid_logp = log_prob[all_valid].detach().reshape(-1).cpu()
    cov_lst_all = (all_valid_adv - all_valid_adv.mean()) * (all_valid_logp - all_valid_logp.mean())
    k_percent_nums = max(1, int(len(cov_lst_all) * kl_cov_ratio))
    large_cov_idxs = torch.topk(cov_lst_all, k_percent_nums, largest=True).indices
    large_cov_idxs = all_valid_idx[large_cov_idxs]
    rows, cols = large_cov_idxs // advantages.shape[1], large_cov_idxs % advantages.shape[1]
    pg_losses[rows, cols] = pg_losses_kl[rows, cols]
    return (pg_losses * response_mask).sum() / response_mask.sum()


def verl_clip_cov(old_log_prob, log_prob, advantages, response_mask, cliprange, clip_cov_ratio, lb, ub):
    """verl at b178a3c, compute_policy_loss_clip_cov, transcribed, with agg_loss's token-mean."""
    negative_approx_kl = log_prob - old_log_prob
    ratio = torch.exp(negative_approx_kl)
    pg_losses1 = -advantages * ratio
    corr = torch.ones_like(advantages)
    pg_losses2 = -advantages * torch.clamp(ratio, 1 - cliprange, 1 + cliprange)
    clip_by_origin = (pg_losses2 > pg_losses1) & (response_mask > 0)
    masked_mean = lambda x: (x * response_mask).sum() / response_mask.sum()  # noqa: E731
    cov_all = (advantages - masked_mean(advantages)) * (log_prob - masked_mean(log_prob.detach()))
    cov_all[response_mask == 0] = -torch.inf
    cov_all[clip_by_origin] = -torch.inf
    clip_num = max(int(clip_cov_ratio * response_mask.sum().item()), 1)
    top_k_idx = (cov_all < ub) & (cov_all > lb) & (response_mask > 0)
    top_k_idx = torch.nonzero(top_k_idx)
    if len(top_k_idx) > 0:
        perm = torch.randperm(len(top_k_idx))
        top_k_idx = top_k_idx[perm[: min(clip_num, len(top_k_idx))]]
    else:
        top_k_idx = torch.empty((0, 2), dtype=torch.long)
    corr[top_k_idx[:, 0], top_k_idx[:, 1]] = 0
    pg_losses = torch.maximum(pg_losses1, pg_losses2) * corr
    return (pg_losses * response_mask).sum() / response_mask.sum()


def verl_cispo(old_log_prob, log_prob, advantages, response_mask, clip_ratio_low, clip_ratio_high):
    """verl at b178a3c, compute_policy_loss_cispo, transcribed, with agg_loss's token-mean."""
    negative_approx_kl = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(negative_approx_kl)
    clipped_ratio = torch.clamp(ratio, 1 - clip_ratio_low, 1 + clip_ratio_high)
    pg_losses = -clipped_ratio.detach() * advantages * log_prob
    return (pg_losses * response_mask).sum() / response_mask.sum()


def random_case(seed: int):
    g = torch.Generator().manual_seed(seed)
    base = -torch.rand(6, 9, generator=g) * 3
    old = base + 0.4 * torch.randn(6, 9, generator=g)  # log-ratios past +-0.4 on both sides
    mask = (torch.arange(9) < torch.tensor([[9], [4], [1], [7], [9], [2]])).float()
    adv = torch.tensor([1.0, -0.5, 0.0, 2.0, -1.5, 0.7])
    return base, old, mask, adv


@pytest.mark.parametrize("loss", ["gmpo", "kl_cov", "reinforce", "clip_cov", "cispo"])
def test_verls_other_policy_losses_give_its_loss_and_gradient(loss):
    """GMPO (verl's geo_mean; aggregated as seq_mean_token_mean, its mean over sequences),
    KL-Cov (token_mean, its default; a share of 0.1 picks 3 of the 32 tokens), REINFORCE
    (-A log pi), Clip-Cov (the same draw of torch's generator) and CISPO with verl's two-sided
    bounds, loss and gradient against verl's code."""
    from vlrl.algos.losses import token_loss
    from vlrl.config import AlgoConfig

    base, old, mask, adv = random_case(0)
    options = {
        "gmpo": {"loss": "gmpo", "epsilon": 0.4, "epsilon_high": 0.4},
        "kl_cov": {"loss": "kl_cov", "kl_cov_ratio": 0.1, "kl_cov_coef": 2.0, "aggregation": "token_mean"},
        "reinforce": {"loss": "reinforce", "aggregation": "token_mean"},
        # 8 tokens covary within (0.05, 1) unclipped: a share of 0.2 of the 32 detaches 6 of them
        "clip_cov": {"loss": "clip_cov", "clip_cov_ratio": 0.2, "clip_cov_lb": 0.05, "clip_cov_ub": 1.0,
                     "aggregation": "token_mean"},
        "cispo": {"loss": "cispo", "cispo_bounds": "verl", "epsilon": 0.2, "epsilon_high": 0.28,
                  "aggregation": "token_mean"},
    }[loss]  # fmt: skip
    cfg = AlgoConfig(**options)
    cfg.validate("algo")
    ours_logp, theirs_logp = base.clone().requires_grad_(), base.clone().requires_grad_()
    torch.manual_seed(5)  # Clip-Cov's draw, from torch's global generator as verl's
    per_token = token_loss(ours_logp, old, adv, mask, cfg).per_token
    ours = (per_token * token_weights(mask, cfg.aggregation, 9)).sum()
    adv_tokens = adv[:, None].expand_as(base)
    if loss == "gmpo":
        theirs = verl_geo_mean(old, theirs_logp, adv_tokens, mask, 0.4, 0.4)
    elif loss == "kl_cov":
        theirs = verl_kl_cov(old, theirs_logp, adv_tokens, mask, 0.1, 2.0)
    elif loss == "cispo":
        theirs = verl_cispo(old, theirs_logp, adv_tokens, mask, 0.2, 0.28)
    elif loss == "clip_cov":
        torch.manual_seed(5)
        theirs = verl_clip_cov(old, theirs_logp, adv_tokens, mask, 0.2, 0.2, 0.05, 1.0)
        unclipped = AlgoConfig(aggregation="token_mean")  # the detached tokens change the gradient
        plain = (token_loss(base.clone().requires_grad_(), old, adv, mask, unclipped).per_token * mask).sum()
        assert not torch.allclose(plain / mask.sum(), theirs)
    else:
        theirs = (-adv_tokens * theirs_logp * mask).sum() / mask.sum()
    ours.backward()
    theirs.backward()
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(ours_logp.grad, theirs_logp.grad)


def verl_kl_penalty(logprob, ref_logprob, kl_penalty):
    """verl's kl_penalty and kl_penalty_forward (verl/trainer/ppo/core_algos.py at b178a3c),
    transcribed; the "+" is taken off the name given to the forward, which at that commit
    raises for a suffixed name (its docs and the straight-through lines mean this)."""
    name = kl_penalty.removesuffix("+")
    if name in ("kl", "k1"):
        forward_score = logprob - ref_logprob
    elif name == "abs":
        forward_score = (logprob - ref_logprob).abs()
    elif name in ("mse", "k2"):
        forward_score = 0.5 * (logprob - ref_logprob).square()
    else:  # low_var_kl, k3
        kl = torch.clamp(ref_logprob - logprob, min=-20, max=20)
        forward_score = torch.clamp((torch.exp(kl) - kl - 1).contiguous(), min=-10, max=10)
    if not kl_penalty.endswith("+") or kl_penalty in ("mse", "k2"):
        return forward_score
    backward_score = 0.5 * (logprob - ref_logprob).square()
    return backward_score - backward_score.detach() + forward_score.detach()


@pytest.mark.parametrize(("ours", "theirs"), [("abs", "abs"), ("k1+", "k1+"), ("low_var+", "k3+"), ("low_var", "k3")])
def test_verls_kl_loss_types_give_its_value_and_gradient(ours, theirs):
    """kl_estimator abs, k1+ and low_var+ against verl's abs, k1+ and k3+ (k2's gradient
    through k1's and k3's values), with log-ratios far enough apart for k3's clamps."""
    g = torch.Generator().manual_seed(4)
    logp = (torch.randn(3, 5, generator=g) * 8).requires_grad_()
    ref = torch.randn(3, 5, generator=g) * 8
    values = []
    for kl in (KL_ESTIMATORS[ours](logp, ref), verl_kl_penalty(logp, ref, theirs)):
        (grad,) = torch.autograd.grad(kl.sum(), logp)
        values.append((kl.detach(), grad))
    torch.testing.assert_close(values[0], values[1], rtol=0, atol=0)
