"""What every rollout engine takes and returns."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SamplingParams:
    n: int = 1  # completions per prompt
    max_new_tokens: int = 256
    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0
    top_k: int = 0  # 0: off


@dataclass
class Completion:
    """One sampled answer: its tokens (ending with the stop token unless truncated), the
    log-probs of those tokens and the entropy of each step's distribution under the
    temperature-scaled policy, and the decoded text."""

    token_ids: list[int]
    logprobs: list[float]
    entropies: list[float]
    text: str
    truncated: bool
