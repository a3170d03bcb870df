"""Selective sample replay's selection rule (vlrl/algos/replay.py) against a transcription of
VL-Rethinker's `NaiveReplayBuffer.active_sampling` (TIGER-AI-Lab/VL-Rethinker @dd2c17d,
openrlhf/trainer/ppo_utils/replay_buffer.py): the same candidates, probabilities and sizes at
every draw, and the same selection when both draw the same indices, on typical, boundary and
hostile inputs. The draws themselves follow the probabilities, from the run's generator."""

from __future__ import annotations

import random
from collections import deque

import numpy as np
import pytest
import torch

import vlrl.algos.replay as replay
from vlrl.algos.replay import filter_selection, ssr_selection


class Scripted:
    """Stands in for both sides' random draws: records (probabilities, size) and returns the
    indices i, i+1, ... (mod the pool), so that both sides pick the same entries."""

    def __init__(self):
        self.calls: list[tuple[np.ndarray, int]] = []

    def indices(self, p: np.ndarray, size: int) -> list[int]:
        self.calls.append((np.asarray(p, dtype=np.float64) / np.sum(p), size))
        return [(len(self.calls) + i) % len(p) for i in range(size)]


def public_active_sampling(items, keep_items, do_ssr, choice):
    """active_sampling at dd2c17d with its `do_filter` guard bypassed (the intended algorithm),
    items as (advantage, reward) pairs, np.random.choice as `choice(pool, size, p)`; returns
    the training items, or "hangs" where its refill loop never ends."""
    if keep_items[0] is None:
        keep_items[0] = deque(maxlen=len(items) // 2)
    keep = keep_items[0]
    non_zero, zero, pos = [], [], []
    for q, (adv, rew) in enumerate(items):
        if adv == 0:
            if rew > 0.95:
                pos.append(q)
            zero.append(q)
        else:
            non_zero.append(q)
    keep.extend([items[i] for i in non_zero])
    random.seed(42)
    random.shuffle(non_zero)
    idxlist = non_zero + zero
    if not do_ssr:
        numtotal, newlist, sel = len(idxlist), [], non_zero
        while numtotal > 0:
            if not sel:
                return "hangs"
            if numtotal > len(sel):
                newlist.extend(sel)
            else:
                newlist.extend(choice(sel, numtotal, None))
            numtotal -= len(sel)
        return [items[i] for i in newlist]
    numtotal = len(idxlist) // 2
    num_pos = int(0.1 * len(non_zero))
    sel = (non_zero + pos[:num_pos])[:numtotal]
    current = [items[i] for i in sel]
    if current:
        a = np.array([abs(x[0]) for x in current])
        p = a / np.sum(a)
        if p.sum() < 1.0:
            p[-1] = 1.0 - np.sum(p[:-1])
        chosen = choice(np.arange(len(current)), min(len(idxlist) // 2, len(current)), p)
        current = [current[i] for i in chosen]
    sel = np.arange(len(keep))
    numtotal -= len(current)
    a = np.array([abs(x[0]) + 1e-4 for x in keep]) * 0.8
    p = a / np.sum(a) if len(a) else a
    newlist = []
    while numtotal > 0:
        if len(sel) == 0:
            return "hangs"
        if numtotal > len(sel):
            newlist.extend(sel)
        else:
            newlist.extend(choice(sel, numtotal, p))
        numtotal -= len(sel)
    return current + [keep[i] for i in newlist]


def compare(steps, do_ssr, monkeypatch):
    """Both sides over a sequence of steps (lists of (advantage, reward)), the buffer carried."""
    public_draws, ours = Scripted(), Scripted()

    def public_choice(pool, size, p):
        p = np.ones(len(pool)) if p is None else p
        return [pool[i] for i in public_draws.indices(p, size)]

    monkeypatch.setattr(replay, "draw", lambda w, n, g: ours.indices(w.numpy(), n) if n > 0 else [])
    keep_public = [None]
    buffer: deque | None = None
    generator = torch.Generator().manual_seed(0)
    for items in steps:
        expected = public_active_sampling(items, keep_public, do_ssr, public_choice)
        adv = torch.tensor([a for a, _ in items], dtype=torch.float64)
        rew = torch.tensor([r for _, r in items], dtype=torch.float32)
        if do_ssr:
            buffer = deque(maxlen=len(items) // 2) if buffer is None else buffer
            buffer.extend(items[i] for i in range(len(items)) if items[i][0] != 0)
            buffer_adv = torch.tensor([a for a, _ in buffer], dtype=torch.float64)
            got = ssr_selection(adv, rew, buffer_adv, len(items) // 2, 0.1, 0.95, 1.0, 1e-4, generator)
        else:
            got = filter_selection(adv, generator)
        if expected == "hangs":
            assert got is None
            continue
        chosen = [items[i] for i in got.current] + ([buffer[i] for i in got.replayed] if do_ssr else [])
        assert chosen == expected
        assert len(ours.calls) == len(public_draws.calls)
        for (p_ours, n_ours), (p_public, n_public) in zip(ours.calls, public_draws.calls, strict=True):
            assert n_ours == n_public
            np.testing.assert_allclose(p_ours, p_public, rtol=1e-12, atol=1e-15)
    return public_draws.calls


# The research worked example (2 prompts x 4 responses, A = r - mean): then typical mixes.
GROUP_A = [(0.75, 1.0), (-0.25, 0.0), (-0.25, 0.0), (-0.25, 0.0)]
ALL_RIGHT = [(0.0, 1.0)] * 4
ALL_WRONG = [(0.0, 0.0)] * 4
GROUP_C = [(0.5, 1.0), (0.5, 1.0), (-0.5, 0.0), (-0.5, 0.0)]
MANY = [((i % 7 - 3) / 10, float(i % 2)) for i in range(40)]  # 34 effective, 6 zero (3 rewarded 1)


@pytest.mark.parametrize("do_ssr", [True, False])
@pytest.mark.parametrize(
    "steps",
    [
        pytest.param([GROUP_A + ALL_RIGHT, ALL_RIGHT + GROUP_C, ALL_RIGHT + ALL_WRONG], id="worked-example"),
        pytest.param([MANY, MANY[::-1], [(0.0, 1.0)] * 30 + MANY[:10]], id="many-with-positive-items"),
        pytest.param([ALL_RIGHT + ALL_WRONG, GROUP_A + ALL_WRONG], id="never-informative-then-informative"),
        pytest.param([GROUP_C + GROUP_C + GROUP_A, GROUP_A + ALL_WRONG + ALL_RIGHT], id="buffer-full-evicts"),
        pytest.param([[(0.5, 1.0)], [(0.0, 1.0)]], id="one-row"),
        pytest.param([[(1e-30, 1.0), (-1e-30, 0.0), (0.0, 1.0), (0.0, 1.0)]], id="tiny-advantages"),
    ],
)
def test_the_selection_equals_vl_rethinkers_rule(steps, do_ssr, monkeypatch):
    compare(steps, do_ssr, monkeypatch)


def test_positive_items_join_the_current_part_with_no_more_than_the_rounding_remainder(monkeypatch):
    # 10 effective rows of 40 -> int(0.1 x 10) = 1 all-correct zero-advantage row joins them,
    # last, where the public sum fix gives it what float rounding left (0 here, <= 1e-16 there)
    items = [(0.3 if i % 2 else -0.3, 0.0) for i in range(10)] + [(0.0, 1.0)] * 30
    calls = compare([items], True, monkeypatch)
    p, size = calls[0]
    assert size == 11 and len(p) == 11 and p[-1] < 1e-15
    assert calls[1][1] == 20 - 11 and len(calls[1][0]) == 10  # the rest replayed from the 10 kept rows


def test_a_step_with_nothing_informative_and_an_empty_buffer_has_no_selection():
    g = torch.Generator().manual_seed(0)
    zeros = torch.zeros(8)
    assert ssr_selection(zeros, torch.ones(8), torch.zeros(0, dtype=torch.float64), 4, 0.1, 0.95, 1, 1e-4, g) is None
    assert filter_selection(zeros, g) is None
    # from a non-empty buffer every slot is replayed
    got = ssr_selection(zeros, torch.ones(8), torch.tensor([0.5, -0.5], dtype=torch.float64), 4, 0.1, 0.95, 1, 1e-4, g)
    assert got.current == [] and len(got.replayed) == 4 and set(got.replayed) <= {0, 1}


def test_non_finite_advantages_are_never_effective_nor_positive_items():
    g = torch.Generator().manual_seed(0)
    adv = torch.tensor([float("nan"), float("inf"), 0.5, -0.5, 0.0])
    got = ssr_selection(adv, torch.ones(5), torch.tensor([0.5, -0.5], dtype=torch.float64), 2, 1.0, 0.95, 1, 1e-4, g)
    assert set(got.current) <= {2, 3} and len(got.current) == 2
    got = filter_selection(adv, g)
    assert len(got.current) == 5 and set(got.current) == {2, 3}


def test_draws_follow_the_probabilities_from_the_runs_generator():
    weights = torch.tensor([0.5, 0.25, 0.25, 0.0], dtype=torch.float64)
    picks = replay.draw(weights, 20_000, torch.Generator().manual_seed(1))
    freq = np.bincount(picks, minlength=4) / len(picks)
    np.testing.assert_allclose(freq, [0.5, 0.25, 0.25, 0.0], atol=0.015)
    same = replay.draw(weights, 50, torch.Generator().manual_seed(7))
    assert same == replay.draw(weights, 50, torch.Generator().manual_seed(7))
    assert same != replay.draw(weights, 50, torch.Generator().manual_seed(8))
    state = torch.random.get_rng_state()
    replay.draw(weights, 50, torch.Generator().manual_seed(7))
    assert torch.equal(state, torch.random.get_rng_state())  # the global generators are left alone


def test_weights_that_all_underflow_draw_uniformly_instead_of_failing():
    g = torch.Generator().manual_seed(0)
    adv = torch.tensor([0.1, -0.1, 0.1, -0.1])
    got = ssr_selection(adv, torch.zeros(4), adv.double(), 4, 0.1, 0.95, 1000.0, 0.0, g)  # 0.1^1000 == 0.0
    assert len(got.current) == 4 and set(got.current) <= {0, 1, 2, 3}


def test_each_option_changes_the_selection_as_its_definition_says(monkeypatch):
    """Options away from the public constants, worked by hand: positive_reward 0.4 and
    positive_fraction 0.7 let int(0.7 x 3) = 2 zero-advantage rows rewarded above 0.4 join the
    three effective ones (0.95 would admit one, 0.1 none); the current part weighs |A|^2 (alpha
    2); the buffer refills the one slot left of train_rows 6 with weights (|A| + 0.01)^2."""
    calls = Scripted()
    monkeypatch.setattr(replay, "draw", lambda w, n, g: calls.indices(w.numpy(), n) if n > 0 else [])
    adv = torch.tensor([0.5, -0.25, 0.0, 0.0, 0.1, 0.0], dtype=torch.float64)
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.5, 1.0, 0.3])
    buffer = torch.tensor([0.5, -0.25, 0.1], dtype=torch.float64)
    got = ssr_selection(adv, rewards, buffer, 6, 0.7, 0.4, 2.0, 0.01, torch.Generator().manual_seed(0))
    order = [0, 1, 4]
    random.Random(42).shuffle(order)
    current = np.array([adv[i].item() ** 2 for i in order] + [0.0, 0.0])
    (p_current, n_current), (p_buffer, n_buffer) = calls.calls
    assert (n_current, n_buffer) == (5, 1)
    np.testing.assert_allclose(p_current, current / current.sum(), rtol=1e-12)
    refill = np.array([(0.5 + 0.01) ** 2, (0.25 + 0.01) ** 2, (0.1 + 0.01) ** 2])
    np.testing.assert_allclose(p_buffer, refill / refill.sum(), rtol=1e-12)
    candidates = [*order, 2, 3]  # Scripted picks entries 1, 2, ... of the first pool, 2 of the second
    assert got.current == [candidates[(1 + i) % 5] for i in range(5)] and got.replayed == [2]


def test_a_zero_advantage_row_rewarded_exactly_positive_reward_is_not_a_positive_item():
    """VL-Rethinker's `rew > 0.95` is strict: of two zero-advantage rows rewarded 0.5 and 0.75
    with positive_reward 0.5, only the second joins the two effective rows (3 candidates, so 3
    current draws), and the last of train_rows 4 is replayed from the buffer."""
    adv = torch.tensor([0.5, -0.5, 0.0, 0.0])
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.75])
    buffer = torch.tensor([0.5, -0.5], dtype=torch.float64)
    got = ssr_selection(adv, rewards, buffer, 4, 1.0, 0.5, 1.0, 1e-4, torch.Generator().manual_seed(0))
    assert len(got.current) == 3 and set(got.current) <= {0, 1} and len(got.replayed) == 1
