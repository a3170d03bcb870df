"""The static step of the families with layers other than attention and a dense MLP, replayed
from CUDA graphs: Qwen3.5's linear-attention states, kept in the step's buffers and written in
place (static.RowsStateLayer), and Qwen3-VL MoE's experts, routed on the device by
transformers' grouped_mm: the lean step calls both as the model calls them (`decode_step.Layer`,
`decode_step.feed_forward`). Run after tests/gpu/test_decoding_graphs.py (whose helpers
these are) in `bash bench/gpu_session.sh first`: new on 2026-12-01, not yet run on a GPU.

On the CPU (VLRL_GPU_TIER_ON_CPU=1) only the comparison's own logic runs, both sides eager."""

from __future__ import annotations

import pytest
import torch

from tests.gpu.test_decoding_graphs import assert_graphs_follow_an_optimizer_step, assert_graphs_sample_as_eager, loaded
from vlrl.rollout.static import LeanStaticStep

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", params=["qwen3_5", "qwen3_vl_moe", "qwen3_5_moe"])
def model_forward_setup(request, mid_checkpoint, device, tmp_path_factory):
    """Qwen3.5's hybrid layers (three of every four linear attention, whose states the step
    keeps beside the keys and values), Qwen3-VL MoE's experts (routed on the device by
    transformers' grouped_mm), and Qwen3.5 MoE's both; the family's name after them."""
    for loaded_setup in loaded(mid_checkpoint(request.param), device, tmp_path_factory):
        yield *loaded_setup, request.param


def test_the_graphs_of_qwen3_5s_states_and_qwen3_vl_moes_experts_replay_the_eager_step_and_an_optimizer_step(
    model_forward_setup, device
):
    """The static step replayed from its graphs: Qwen3.5's convolution windows and recurrent
    states read off the bucket's view of the step's buffers and written back into it
    (static.RowsStateLayer), Qwen3-VL MoE's tokens sorted and counted per expert on the
    device, both through the lean step, all of it captured by address. Replays sample
    what the eager step samples, through several buckets, and after an optimizer step that
    moved the weights in place."""
    *setup, family = model_forward_setup
    graphs, _ = assert_graphs_sample_as_eager(setup, device)
    assert isinstance(graphs._static[1].forward, LeanStaticStep), family
    model = setup[0]
    trained = [p for n, p in model.named_parameters() if "language_model" in n and p.dtype == torch.bfloat16]
    assert_graphs_follow_an_optimizer_step(setup, device, trained)
