"""The coefficient of the KL taken off the reward (algo.kl_in reward or returns): fixed at
algo.beta, or adaptive toward a target KL, Ziegler et al.'s controller ("Fine-Tuning Language
Models from Human Preferences", 2019) as verl's AdaptiveKLController (verl/trainer/ppo/
core_algos.py at b178a3c; OpenRLHF's and EasyR1's are the same rule)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class KLController:
    value: float  # the coefficient the next step takes
    target: float | None  # the KL it steers to (None: fixed)
    horizon: int  # the completions over which it closes a 20% error by 20%

    def update(self, current_kl: float, completions: int) -> None:
        """After a step whose KL (each completion's token mean, averaged) was `current_kl`, over
        `completions` completions: the coefficient times 1 + e n / horizon, the relative error
        e = KL / target - 1 clipped to [-0.2, 0.2] (verl's n_steps: the batch's completions)."""
        if self.target is None:
            return
        error = min(max(current_kl / self.target - 1, -0.2), 0.2)
        self.value *= 1 + error * completions / self.horizon

    def state_dict(self) -> dict[str, float]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.value = float(state["value"])
