"""The model families a test of the decoder and rollout sweeps: every one in `make test-slow`; in
`make test`, the three whose decoders hold every piece the other three's have, so the fast tier
stays within its time (a family's sweep through the engine, the policy and a training run costs
it 15-30 s each on CI's 2 cores).

Vision and prompting tests sweep every family in both tiers: the families' vision towers and
processors differ where their decoders do not."""

from __future__ import annotations

import pytest

from vlrl.models.families import family_names

# A family left to `make test-slow` -> the family in `make test` whose decoder has its pieces:
# Qwen2-VL's decoder is Qwen2.5-VL's (its vision tower, which differs, is swept everywhere);
# Qwen3-VL's and Qwen3.5's are their MoE siblings' with a dense MLP, which Qwen2.5-VL has.
COVERED_BY = {"qwen2_vl": "qwen2_5_vl", "qwen3_vl": "qwen3_vl_moe", "qwen3_5": "qwen3_5_moe"}


def decoder_families() -> list:
    """Every registered family as a parameter, those in COVERED_BY marked slow."""
    slow = pytest.mark.slow
    return [pytest.param(name, marks=slow) if name in COVERED_BY else name for name in sorted(family_names())]
