"""`answer_check`: whether a reward asks math-verify before it compares answers as text, as
R1-VL's `accuracy_reward` and CLS-RL's grpo.py do. A task's Options inherit it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rewards.math import math_verify_available
from vlrl.config import ConfigError


@dataclass
class AnswerCheck:
    # math-verify's verdict first, then the text (the public reward); `auto` does so where
    # math-verify is installed and compares the text alone otherwise; `string` never asks it.
    answer_check: Literal["auto", "math_verify", "string"] = "auto"

    def __post_init__(self) -> None:
        if self.answer_check == "math_verify" and not math_verify_available():
            raise ConfigError(
                "config: task.options.answer_check=math_verify needs the math-verify package (pip install 'vlrl[math]')"
            )

    @property
    def asks_math_verify(self) -> bool:
        """Whether the reward may ask math-verify (it does where it is installed)."""
        return self.answer_check != "string"
