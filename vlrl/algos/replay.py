"""Which rows a step trains on under selective sample replay: pure functions of the step's
advantages and rewards, the replay buffer's advantages and the run's generator.

VL-Rethinker's `NaiveReplayBuffer.active_sampling` (TIGER-AI-Lab/VL-Rethinker @dd2c17d,
openrlhf/trainer/ppo_utils/replay_buffer.py), reimplemented: the unit is one response (a row),
"effective" means a non-zero advantage. `ssr` is its SSR branch (the README's and paper's
algorithm), `filter` its other branch (effective rows repeated to refill the batch). Both
shuffle the effective rows with `random.seed(42)` on every call, as there (a local Random(42)
here: the same permutation, the global generator left alone); every draw comes from the run's
generator instead of numpy's global one.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

PUBLIC_SHUFFLE_SEED = 42  # active_sampling: random.seed(42); random.shuffle(non_zero_questions)


@dataclass(frozen=True)
class Selection:
    """The rows a step trains on: this step's (`current`, indices into its rows) and the
    buffer's (`replayed`, indices into the buffer after this step's effective rows joined it),
    with repeats, in the order they were drawn."""

    current: list[int]
    replayed: list[int]


def effective(advantages: torch.Tensor) -> torch.Tensor:
    """Rows that carry a learning signal: a non-zero advantage (a non-finite one carries none)."""
    return torch.isfinite(advantages) & (advantages != 0)


def shuffled_effective(advantages: torch.Tensor) -> list[int]:
    """The effective rows in the public code's order: shuffled by a generator seeded with 42."""
    rows = effective(advantages).nonzero().flatten().tolist()
    random.Random(PUBLIC_SHUFFLE_SEED).shuffle(rows)
    return rows


def draw(weights: torch.Tensor, n: int, generator: torch.Generator) -> list[int]:
    """n indices drawn with replacement, with probability proportional to `weights` (float64,
    as numpy's choice), from `generator` (on its own device); uniformly where every weight
    underflowed to 0 (a large alpha on small advantages)."""
    if n <= 0:
        return []
    if not weights.sum() > 0:
        weights = torch.ones_like(weights)
    picked = torch.multinomial(weights.to(generator.device), n, replacement=True, generator=generator)
    return picked.cpu().tolist()


def fill(pool: list[int], weights: torch.Tensor | None, n: int, generator: torch.Generator) -> list[int] | None:
    """The public refill loop: while more than len(pool) slots remain, every entry once; the
    rest drawn with replacement (uniformly where `weights` is None). None where the pool is
    empty and slots remain: the public loop never ends there."""
    out: list[int] = []
    while n > 0:
        if not pool:
            return None
        if n > len(pool):
            out += pool
        else:
            w = torch.ones(len(pool), dtype=torch.float64) if weights is None else weights
            out += [pool[i] for i in draw(w, n, generator)]
        n -= len(pool)
    return out


def filter_selection(advantages: torch.Tensor, generator: torch.Generator) -> Selection | None:
    """The `not do_ssr` branch: as many rows as the step has, all of them effective ones
    (each once per full pass, the remainder drawn uniformly). None when none is effective."""
    current = fill(shuffled_effective(advantages), None, len(advantages), generator)
    return None if current is None else Selection(current, [])


def ssr_selection(
    advantages: torch.Tensor,
    rewards: torch.Tensor,
    buffer_advantages: torch.Tensor,
    train_rows: int,
    positive_fraction: float,
    positive_reward: float,
    alpha: float,
    eps: float,
    generator: torch.Generator,
) -> Selection | None:
    """The SSR branch: `train_rows` rows (VL-Rethinker: half the step's). The current part:
    the step's effective rows (shuffled) plus the first int(positive_fraction x #effective)
    zero-advantage rows rewarded above `positive_reward`, cut to train_rows, then as many
    draws with replacement, p ~ |A|^alpha. (numpy's choice needs probabilities that sum to 1,
    so the public code gives the last candidate what float rounding left, at most about 1e-16:
    a zero-advantage row could be drawn with that probability; here it never is.) The rest
    drawn from the buffer (which
    already holds this step's effective rows), p ~ (|A| + eps)^alpha. None when slots remain
    and the buffer is empty (no row was ever effective): the public loop never ends there."""
    a = advantages.double()
    non_zero = shuffled_effective(advantages)
    positive = ((a == 0) & (rewards.double() > positive_reward)).nonzero().flatten().tolist()
    candidates = (non_zero + positive[: int(positive_fraction * len(non_zero))])[:train_rows]
    current: list[int] = []
    if candidates:
        weights = a[candidates].abs() ** alpha
        current = [candidates[i] for i in draw(weights, len(candidates), generator)]
    buffer_weights = (buffer_advantages.double().abs() + eps) ** alpha
    replayed = fill(list(range(len(buffer_advantages))), buffer_weights, train_rows - len(current), generator)
    return None if replayed is None else Selection(current, replayed)
