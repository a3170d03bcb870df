"""`rollout.hf.compile_step` on a GPU: the static step's forward compiled by torch.compile
(Triton kernels), captured per bucket as a CUDA graph and replayed, samples what the same
compiled step run eagerly samples (the same kernels: the same tokens, the log-probs to float32
rounding), and its graphs, captured before an optimizer step, sample from the new weights after
it. That the compiled step samples what the uncompiled one does is tested on the CPU in float32
(tests/rollout/test_compiled_step.py): in bf16 the fused kernels round otherwise, and two
sampled sequences part at the first token drawn otherwise. Apart from test_decoding_graphs.py
because the mid-size model's compilation takes its own minute (bench/gpu_session.sh compiled).

On the CPU (VLRL_GPU_TIER_ON_CPU=1) only the comparison's own logic runs: both sides decode
eagerly, compiled."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from tests.gpu.test_decoding_graphs import (
    GRAPHS,
    assert_graphs_follow_an_optimizer_step,
    assert_graphs_sample_as_eager,
    setup,  # noqa: F401  (the fixture)
)

pytestmark = pytest.mark.gpu

COMPILED_GRAPHS = replace(GRAPHS, compile_step=True)


def test_the_compiled_steps_graph_replays_sample_what_it_samples_eagerly(setup, device):  # noqa: F811
    graphs, eager = assert_graphs_sample_as_eager(setup, device, COMPILED_GRAPHS)
    assert graphs.static_plan.compiled and eager.static_plan.compiled


def test_the_compiled_steps_graphs_replayed_after_an_optimizer_step_sample_from_the_new_weights(setup, device):  # noqa: F811
    model = setup[0]
    trained = [p for n, p in model.named_parameters() if "language_model" in n and p.dtype == torch.bfloat16]
    assert_graphs_follow_an_optimizer_step(setup, device, trained, COMPILED_GRAPHS)
