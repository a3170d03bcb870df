"""The HF engine's static step replayed from CUDA graphs (`rollout.hf.cuda_graphs`) samples what
the same step run eagerly samples, from the same seed, leaving the generator where eager
decoding leaves it; and a graph captured before an optimizer step, replayed after it, samples
from the updated weights (the optimizer writes the parameters in place, and a graph reads them
by address); for a LoRA policy decoding merged, from the re-merged weights; and the static
step's lean forward (static.LeanStaticStep) samples what the model's forward does; so does a
float32 output layer (model.lm_head_fp32) replayed from its graphs. At the mid-size
shape in bf16: the graph replays the eager step's kernels, so the tokens must agree exactly and
the log-probs to float32 rounding.

On the CPU (VLRL_GPU_TIER_ON_CPU=1) only the comparison's own logic runs: there are no graphs
there, so both sides decode eagerly."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from data_prep.refcoco import write_synthetic_rec
from tasks.refcoco import RefCOCO
from tests.gpu.runs import free
from tests.rollout.test_hf_engine import prompt_slots
from vlrl.config import LoraConfig, ModelConfig
from vlrl.data.records import load_split
from vlrl.models.decode_step import ModelStep
from vlrl.models.float32_head import Float32Head
from vlrl.models.loading import core_model, frame_spec, load_model, load_processor
from vlrl.models.prompting import render_prompt
from vlrl.rollout import SamplingParams
from vlrl.rollout.hf import HFEngine, HFOptions, stop_token_ids
from vlrl.rollout.static import LeanStaticStep

pytestmark = pytest.mark.gpu

# Buckets of 16 rows down to 2, the host looking every 4 steps: completions of a random model
# run to max_new_tokens, so compaction is forced by a stop-token bias (below).
GRAPHS = HFOptions(static_cache=True, cuda_graphs=True, check_every=4, smallest_bucket=2)
EAGER = HFOptions(static_cache=True, cuda_graphs=False, check_every=4, smallest_bucket=2)
PARAMS = SamplingParams(n=4, max_new_tokens=40, temperature=1.0, top_k=50)


def stop_sooner(model, processor, device):
    """Make the random model's stop tokens likelier, so that rows end apart; returns the hook's
    handle. The bias is made once, on the device: a graph captures the hook, and a capture
    cannot copy from the host. It is sized by the tokens sampling chooses among (PARAMS.top_k),
    not by the embedding's rows (151,936 at Qwen's scale, of which the engine samples only the
    tokenizer's 582): that made a stop all but certain at the first token, so no row ever
    reached a graph. With this bias the mid-size model (float32 on the CPU, seeds 11-13) gave
    lengths from 1 to 40, half of them under 12."""
    stops = torch.tensor(stop_token_ids(core_model(model).generation_config, processor.tokenizer))
    vocab = core_model(model).config.get_text_config().vocab_size
    bias = torch.zeros(vocab, dtype=core_model(model).dtype, device=device)
    bias[stops.to(device)] = math.log(PARAMS.top_k / (5 * len(stops)))
    return core_model(model).lm_head.register_forward_hook(lambda module, inputs, output: output + bias)


def loaded(path: Path, device: torch.device, tmp_path_factory):
    """The checkpoint at `path` in bf16 on `device`, its processor and four RefCOCO prompts,
    its stops made likelier while the fixture lasts."""
    data = write_synthetic_rec(tmp_path_factory.mktemp("rec") / "train.json", size=4, seed=2)
    cfg = ModelConfig(path=str(path), dtype="bfloat16", max_pixels=200704)
    processor = load_processor(cfg)
    model = load_model(cfg, device=device).eval()
    task = RefCOCO()
    prompts = [
        render_prompt(processor, task.messages(s), s, cfg)
        for s in load_split(data, task.build_sample, frame_spec(cfg)).samples
    ]
    handle = stop_sooner(model, processor, device)
    yield model, processor, prompts
    handle.remove()
    del model
    free(device)


@pytest.fixture(scope="module")
def setup(mid_model, device, tmp_path_factory):
    yield from loaded(mid_model, device, tmp_path_factory)


@pytest.fixture(scope="module")
def lora_setup(mid_model, device, setup):
    """The same model with LoRA adapters of rank 16 that move it (B drawn, not zero)."""
    _, processor, prompts = setup
    cfg = ModelConfig(path=str(mid_model), dtype="bfloat16", max_pixels=200704, lora=LoraConfig(r=16))
    model = load_model(cfg, device=device).eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.02)
    handle = stop_sooner(model, processor, device)
    yield model, processor, prompts
    handle.remove()
    del model
    free(device)


def engine(setup, device, options: HFOptions) -> HFEngine:
    model, processor, _ = setup
    if device.type == "cpu":
        options = replace(
            EAGER,
            lean_step=options.lean_step,
            compile_step=options.compile_step,
            smallest_window=options.smallest_window,
        )
    return HFEngine(model, processor.tokenizer, device, options)


def sample(engine: HFEngine, prompts, generator: torch.Generator, seed: int, params: SamplingParams = PARAMS):
    """The completions from `seed`; the generator object is the graphs' (registered with them)."""
    generator.manual_seed(seed)
    groups = engine.generate(prompts, params, generator)
    completions = [c for g in groups for c in g.completions]
    return (
        [c.token_ids for c in completions],
        [torch.tensor(c.logprobs) for c in completions],
        generator.get_state(),
    )


def assert_same(got, expected) -> None:
    tokens, logprobs, state = got
    assert tokens == expected[0]
    for mine, theirs in zip(logprobs, expected[1], strict=True):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-5)
    assert torch.equal(state, expected[2])  # the stream consumed alike


def assert_graphs_sample_as_eager(setup, device, graphs_options: HFOptions = GRAPHS) -> tuple[HFEngine, HFEngine]:
    """The step of `graphs_options` replayed from its graphs samples what it samples run
    eagerly (cuda_graphs=false, all else alike), through several buckets; the two engines."""
    _, _, prompts = setup
    graphs = engine(setup, device, graphs_options)
    replayed = sample(graphs, prompts, torch.Generator(device=device), seed=11)
    eager_engine = engine(setup, device, replace(graphs_options, cuda_graphs=False))
    eager = sample(eager_engine, prompts, torch.Generator(device=device), seed=11)
    assert_same(replayed, eager)
    assert not eager_engine.static_plan.graphs  # cuda_graphs=false: eager even on CUDA
    lengths = {len(t) for t in eager[0]}
    assert len(lengths) >= 3, lengths  # rows stopped apart: several buckets were captured
    if device.type == "cuda":
        assert graphs.static_plan.graphs and graphs._static[1].captures >= 2
    return graphs, eager_engine


def test_graph_replays_sample_what_the_eager_step_samples(setup, device):
    assert_graphs_sample_as_eager(setup, device)


def test_replays_count_the_drawn_tokens_and_ban_the_end_tokens_before_min_new_tokens(setup, device):
    """SamplingParams.min_new_tokens (rollout.min_new_tokens) in CUDA graphs: each replay
    advances the count of drawn tokens in place, so the end tokens are banned at the same steps
    as in eager decoding: the same tokens, log-probs and stream, and none ends before it."""
    _, _, prompts = setup
    params = replace(PARAMS, min_new_tokens=6)
    drawn = [
        sample(engine(setup, device, options), prompts, torch.Generator(device=device), 11, params)
        for options in (GRAPHS, replace(GRAPHS, cuda_graphs=False))
    ]
    assert_same(*drawn)
    assert min(len(tokens) for tokens in drawn[0][0]) >= 7


@pytest.fixture
def float32_head(setup):
    """The setup's model with its output layer computing in float32 (model.lm_head_fp32) for
    one test, the layer's own class back after it."""
    head = core_model(setup[0]).get_output_embeddings()
    head.__class__ = Float32Head
    yield setup
    head.__class__ = torch.nn.Linear


def test_a_float32_heads_product_is_captured_and_replays_what_the_eager_step_samples(float32_head, device):
    """model.lm_head_fp32 under CUDA graphs: the upcast weight and the float32 product are inside
    the capture, every decoding step draws from float32 logits, and the replays sample what the
    step run eagerly samples."""
    drawn_from: list[torch.dtype] = []
    head = core_model(float32_head[0]).get_output_embeddings()
    handle = head.register_forward_hook(lambda module, inputs, output: drawn_from.append(output.dtype))
    try:
        assert_graphs_sample_as_eager(float32_head, device)
    finally:
        handle.remove()
    assert drawn_from and set(drawn_from) == {torch.float32}


def test_each_window_of_the_cache_is_captured_and_replays_what_the_eager_step_samples(setup, device):
    """rollout.hf.smallest_window just past the prompt, so the window widens while the rows
    decode: a graph per bucket and window, each replaying what the step run eagerly samples.
    That a window samples as the whole cache does: tests/rollout/test_hf_engine.py (bit for bit
    on the CPU at the default's widths)."""
    _, processor, prompts = setup
    prompt = prompt_slots(processor, prompts)
    graphs, _ = assert_graphs_sample_as_eager(setup, device, replace(GRAPHS, smallest_window=prompt + 4))
    assert graphs.stats.attended_slots < graphs.stats.cache_slots
    if device.type == "cuda":
        assert len({window for _, window in graphs._static[1].graphs}) >= 2


def test_a_window_of_the_cache_samples_what_the_whole_cache_samples(setup, device):
    """rollout.hf.smallest_window at its default (windows of whole 128-key tiles) against the
    whole cache, each replayed from its graphs, in bf16 on the GPU's kernels: the same tokens,
    the log-probs to float32 rounding (bit for bit on the CPU: tests/rollout/test_hf_engine.py).
    Completions may run to 1,024 tokens, so the cache is longer than the windows rows decode in."""
    _, _, prompts = setup
    params = replace(PARAMS, max_new_tokens=1024)
    windowed = engine(setup, device, GRAPHS)
    whole = engine(setup, device, replace(GRAPHS, smallest_window=0))
    got = sample(windowed, prompts, torch.Generator(device=device), seed=14, params=params)
    assert_same(got, sample(whole, prompts, torch.Generator(device=device), seed=14, params=params))
    assert windowed.stats.attended_slots < windowed.stats.cache_slots == whole.stats.attended_slots


def test_the_lean_static_step_samples_what_the_models_forward_samples(setup, device):
    """rollout.hf.lean_step in the static step (static.LeanStaticStep: its rope tables and its
    mask of the slots written) against the model's own forward, each replayed from its graphs,
    in bf16 on the GPU's kernels: the same tokens, the log-probs to float32 rounding (bit for bit
    on the CPU: tests/rollout/test_hf_engine.py)."""
    _, _, prompts = setup
    lean = engine(setup, device, GRAPHS)
    model_forward = engine(setup, device, replace(GRAPHS, lean_step=False))
    got = sample(lean, prompts, torch.Generator(device=device), seed=13)
    assert_same(got, sample(model_forward, prompts, torch.Generator(device=device), seed=13))
    assert isinstance(lean._static[1].forward, LeanStaticStep)
    assert isinstance(model_forward._static[1].forward, ModelStep)
    assert len({len(t) for t in got[0]}) >= 3  # rows stopped apart: several buckets


def assert_graphs_follow_an_optimizer_step(
    setup, device, trained: list[torch.Tensor], graphs_options: HFOptions = GRAPHS
) -> None:
    """Graphs captured before an optimizer step that moves `trained` in place, replayed after
    it (not captured again), sample what eager decoding with the moved weights samples."""
    _, _, prompts = setup
    eager_options = replace(graphs_options, cuda_graphs=False)
    graphs, generator = engine(setup, device, graphs_options), torch.Generator(device=device)
    before = sample(graphs, prompts, generator, seed=12)
    captured = dict(graphs._static[1].graphs)  # (bucket, window) -> graph (none on the CPU)
    assert captured or device.type != "cuda"  # else the check below holds of nothing
    start = [p.detach().clone() for p in trained]
    optimizer = torch.optim.SGD(trained, lr=1.0)
    for p in trained:  # a step that moves every one of them, in place
        p.grad = torch.randn_like(p) * 0.02
    try:
        optimizer.step()
        after = sample(graphs, prompts, generator, seed=12)
        # The graphs captured before, replayed (rows ending elsewhere may reach a bucket more)
        assert all(graphs._static[1].graphs[shape] is graph for shape, graph in captured.items())
        eager = engine(setup, device, eager_options)
        assert_same(after, sample(eager, prompts, torch.Generator(device=device), seed=12))
        assert after[0] != before[0]  # the new weights sample other tokens from the same seed
    finally:
        with torch.no_grad():
            for p, p0 in zip(trained, start, strict=True):
                p.copy_(p0)
            for p in trained:
                p.grad = None


def test_a_graph_replayed_after_an_optimizer_step_samples_from_the_new_weights(setup, device):
    model = setup[0]
    trained = [p for n, p in model.named_parameters() if "language_model" in n and p.dtype == torch.bfloat16]
    assert_graphs_follow_an_optimizer_step(setup, device, trained)


def test_a_lora_policys_graphs_replay_its_merged_weights_and_their_remerge_after_a_step(lora_setup, device):
    """A LoRA policy decodes with its adapters merged into copies of the weights
    (`rollout.hf.merge_lora`); the copies are refreshed in place at every rollout, so a graph
    that read them before the adapters moved reads the new merge after."""
    model, _, prompts = lora_setup
    graphs = engine(lora_setup, device, GRAPHS)
    assert graphs.lora is not None  # merged
    replayed = sample(graphs, prompts, torch.Generator(device=device), seed=13)
    assert_same(replayed, sample(engine(lora_setup, device, EAGER), prompts, torch.Generator(device=device), seed=13))
    adapters = [p for n, p in model.named_parameters() if "lora_" in n]
    assert adapters and all(p.requires_grad for p in adapters)
    assert_graphs_follow_an_optimizer_step(lora_setup, device, adapters)
