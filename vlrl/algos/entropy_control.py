"""The entropy bonus's coefficient: fixed at algo.entropy_coef, or adaptive toward a target
entropy, Skywork-OR1's adaptive entropy control as TRL 1.16's GRPOTrainer runs it
(use_adaptive_entropy: grpo_trainer.py, _compute_loss): after every optimizer step the
coefficient moves by a fixed delta, up while the step's entropy is at most the target and down
past it, within [low, high]; the bonus acts only while the last step's entropy was at most the
target, and not at all before the first step."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass


@dataclass
class EntropyController:
    coef: float  # the coefficient, moved after every optimizer step when adaptive
    target: float | None  # the entropy it steers to (None: fixed)
    low: float = 0.0
    high: float = 1.0
    delta: float = 0.005
    last: float = math.inf  # the last optimizer step's entropy (none yet: no bonus, as TRL)

    def applied(self) -> float:
        """The coefficient the next optimizer step's loss takes."""
        if self.target is None:
            return self.coef
        return self.coef if self.last <= self.target else 0.0

    def update(self, entropy: float) -> None:
        """After an optimizer step whose trained tokens' mean entropy was `entropy`."""
        if self.target is None:
            return
        if entropy <= self.target:
            self.coef = min(self.coef + self.delta, self.high)
        else:
            self.coef = max(self.coef - self.delta, self.low)
        self.last = entropy

    def state_dict(self) -> dict[str, float]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.coef, self.last = float(state["coef"]), float(state["last"])
