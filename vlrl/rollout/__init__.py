"""Rollout engines: turn rendered prompts into G completions each, with sampled-token log-probs."""

from vlrl.rollout.base import Completion, SamplingParams
from vlrl.rollout.hf import HFRollout

__all__ = ["Completion", "HFRollout", "SamplingParams"]
