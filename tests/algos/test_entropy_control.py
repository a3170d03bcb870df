"""The adaptive entropy coefficient against TRL 1.16's controller, transcribed."""

from __future__ import annotations

import math

import pytest

from vlrl.algos.entropy_control import EntropyController


class TrlAdaptiveEntropy:
    """trl 1.16.0 grpo_trainer.py, _compute_loss: the applied coefficient and the update at each
    optimizer-step boundary (use_adaptive_entropy)."""

    def __init__(self, coef, target, low, high, delta):
        self.entropy_coef, self.target, self.low, self.high, self.delta = coef, target, low, high, delta
        self._last_world_entropy = float("inf")

    def applied(self):
        return self.entropy_coef if self._last_world_entropy <= self.target else 0.0

    def update(self, world_entropy):
        if world_entropy <= self.target:
            self.entropy_coef = min(self.entropy_coef + self.delta, self.high)
        else:
            self.entropy_coef = max(self.entropy_coef - self.delta, self.low)
        self._last_world_entropy = world_entropy


def test_the_adaptive_entropy_coefficient_is_trls_step_by_step():
    ours, theirs = EntropyController(0.01, 0.5, 0.0, 0.02, 0.004), TrlAdaptiveEntropy(0.01, 0.5, 0.0, 0.02, 0.004)
    applied = []
    for entropy in (0.9, 0.7, 0.4, 0.45, 0.3, 0.2, 0.1, 0.6, 0.5, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 0.0):
        assert ours.applied() == pytest.approx(theirs.applied(), abs=1e-15)
        applied.append(ours.applied())
        ours.update(entropy)
        theirs.update(entropy)
        assert ours.coef == pytest.approx(theirs.entropy_coef, abs=1e-15)
    assert applied[0] == 0.0  # no bonus before the first step's entropy is known
    assert max(applied) == pytest.approx(0.02)  # held at its ceiling
    assert ours.coef == pytest.approx(0.004)  # down to its floor (0), then up once


def test_a_fixed_entropy_coefficient_is_always_applied_and_the_state_round_trips():
    fixed = EntropyController(0.001, None)
    fixed.update(10.0)
    assert (fixed.applied(), fixed.coef, fixed.last) == (0.001, 0.001, math.inf)
    moved = EntropyController(0.01, 1.0)
    moved.update(0.5)
    fresh = EntropyController(0.01, 1.0)
    fresh.load_state_dict(moved.state_dict())
    assert (fresh.coef, fresh.last, fresh.applied()) == (pytest.approx(0.015), 0.5, pytest.approx(0.015))
