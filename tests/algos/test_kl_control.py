"""The coefficient of the KL in the reward against verl's AdaptiveKLController, transcribed."""

from __future__ import annotations

import numpy as np
import pytest

from vlrl.algos.kl_control import KLController


class VerlAdaptive:
    """verl/trainer/ppo/core_algos.py at b178a3c: AdaptiveKLController."""

    def __init__(self, init_kl_coef, target_kl, horizon):
        self.value, self.target, self.horizon = init_kl_coef, target_kl, horizon

    def update(self, current_kl, n_steps):
        proportional_error = np.clip(current_kl / self.target - 1, -0.2, 0.2)
        self.value *= 1 + proportional_error * n_steps / self.horizon


def test_the_adaptive_coefficient_follows_verls_controller_step_by_step():
    ours, theirs = KLController(0.05, 0.01, 500), VerlAdaptive(0.05, 0.01, 500)
    for kl in (0.0, 0.002, 0.0105, 0.03, 0.5, 0.011, 0.009):  # far below, near and far above the target
        ours.update(kl, 64)
        theirs.update(kl, 64)
        assert ours.value == pytest.approx(theirs.value, rel=1e-12)
    assert ours.value != 0.05


def test_a_fixed_coefficient_stays_and_the_state_round_trips():
    fixed = KLController(0.04, None, 10)
    fixed.update(5.0, 1000)
    assert fixed.value == 0.04
    moved = KLController(0.04, 0.1, 10)
    moved.update(1.0, 10)
    fresh = KLController(0.04, 0.1, 10)
    fresh.load_state_dict(moved.state_dict())
    assert fresh.value == pytest.approx(0.04 * 1.2)
