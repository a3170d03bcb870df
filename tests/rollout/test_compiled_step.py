"""`rollout.hf.compile_step`: the static step's forward through torch.compile samples what the
eager static step samples from the same seed (the same tokens; log-probs and entropies to float
rounding: the fused kernels may round otherwise), through compaction into smaller buckets;
compiles once for every shape and not again for a later rollout's step; reads the weights the
optimizer moves in place; keeps none of a step's buffers past the engine's sleep; and compiles
in warm-up steps, never inside a CUDA graph's capture (CUDA standing in). Compiled
and captured in CUDA graphs on a GPU: tests/gpu/test_compiled_step_on_gpu.py. On the tiny
Qwen2.5-VL; the linear-attention and experts families' layers in `make test-slow`: a compilation
takes seconds (20-37 from a cold cache)."""

from __future__ import annotations

import gc
import re
import weakref
from dataclasses import replace

import pytest
import sympy
import torch
from torch._dynamo.utils import counters
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from tests.models.test_policy import family_setup
from tests.rollout.test_hf_engine import SAMPLING, STOP_BIAS, prompt_slots
from vlrl.config import ConfigError
from vlrl.models.loading import core_model
from vlrl.rollout.hf import HFEngine, HFOptions, stop_token_ids

COMPILED = HFOptions(check_every=3, smallest_bucket=2, compile_step=True)  # the static step, asked for by compile_step
EAGER = replace(COMPILED, static_cache=True, compile_step=False)


@pytest.fixture(scope="module")
def setup(rec_data, video_qa_data):
    torch._dynamo.reset()  # this module counts the compilations it causes
    model, processor, prompts = family_setup("qwen2_5_vl", rec_data, video_qa_data)
    handle = stopping_sooner(model, processor.tokenizer)
    yield model, processor, prompts
    handle.remove()
    torch._dynamo.reset()


def stopping_sooner(model, tokenizer) -> torch.utils.hooks.RemovableHandle:
    """The stop tokens made likelier (a hook on the output layer, to remove), so rows end apart
    and the batch is compacted."""
    stops = torch.tensor(stop_token_ids(model.generation_config, tokenizer))
    bias = torch.zeros(core_model(model).config.get_text_config().vocab_size)
    bias[stops] = STOP_BIAS
    return model.lm_head.register_forward_hook(lambda module, inputs, output: output + bias)


def compilations() -> int:
    """Graphs torch.compile has made in this process (since the last reset)."""
    return counters["stats"]["unique_graphs"]


def sample(
    engine: HFEngine, prompts, seed: int = 5, generator: torch.Generator | None = None, params=SAMPLING["top-k"]
):
    """Completions from `seed`, drawn with `generator` (the engine keeps its static step for the
    next batch of the same shape, generator included), else a new one."""
    groups = engine.generate(prompts, params, (generator or torch.Generator()).manual_seed(seed))
    completions = [c for g in groups for c in g.completions]
    return [c.token_ids for c in completions], [(c.logprobs, c.entropies) for c in completions]


def assert_same(got, expected) -> None:
    assert got[0] == expected[0]
    for (logp, entropy), (their_logp, their_entropy) in zip(got[1], expected[1], strict=True):
        torch.testing.assert_close(torch.tensor(logp), torch.tensor(their_logp), rtol=0, atol=1e-5)
        torch.testing.assert_close(torch.tensor(entropy), torch.tensor(their_entropy), rtol=0, atol=1e-5)


def symbols_made(monkeypatch) -> list[str]:
    """What each symbol torch.compile makes from here on stands for (its source's name)."""
    made, create = [], ShapeEnv.create_symbol

    def recorded(self, val, source, *args, **kwargs):
        symbol = create(self, val, source, *args, **kwargs)
        if isinstance(symbol, sympy.Symbol):  # not a size or number specialized to its value
            made.append(source.name)
        return symbol

    monkeypatch.setattr(ShapeEnv, "create_symbol", recorded)
    return made


def test_the_compiled_static_step_samples_what_the_eager_one_samples_and_compiles_once_for_every_shape(
    setup, monkeypatch
):
    model, processor, prompts = setup
    symbols = symbols_made(monkeypatch)
    compiled = HFEngine(model, processor.tokenizer, options=COMPILED)
    eager = HFEngine(model, processor.tokenizer, options=EAGER)
    assert compiled.static_plan.compiled and not eager.static_plan.compiled
    assert not compiled.exact_logprobs and eager.exact_logprobs  # fused kernels round otherwise
    # The first batch has as many rows as a head is wide (the recipe's 128 rows at Qwen's 128):
    # compiled so, torch took the two sizes for one and compiled again at the first compaction.
    text = core_model(model).config.get_text_config()
    head = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    first_batch = dict(prompts=prompts[:2], params=replace(SAMPLING["top-k"], n=head // 2))
    before = compilations()
    got = sample(compiled, **first_batch)
    first = compilations()
    assert len(got[0]) == head and first == before + 1  # compiled once, through compaction into smaller buckets
    # sizes are symbols, the model's numbers (head widths, norm epsilons) constants: as symbols
    # their guards took most of the compilation's time
    assert symbols and all(re.search(r"\.(size\(\)|stride\(\))\[\d\]$|\.item\(\)$", name) for name in symbols)
    expected = sample(eager, **first_batch)
    assert_same(got, expected)
    assert len({len(tokens) for tokens in got[0]}) >= 3  # rows ended apart: several buckets
    compiled.sleep()  # as after every rollout: the next one makes its step anew
    assert_same(sample(compiled, **first_batch), expected)
    assert compilations() == first  # the compilations are kept with the code, not the step
    for shape in (prompts, prompts[1:2]):  # other cache lengths and batch sizes
        assert_same(sample(compiled, shape, seed=6), sample(eager, shape, seed=6))
    prompt = prompt_slots(processor, prompts)
    widening = {  # a window just past the prompt, widened at the host's second look
        name: HFEngine(model, processor.tokenizer, options=replace(options, smallest_window=prompt + 4))
        for name, options in (("compiled", COMPILED), ("eager", EAGER))
    }
    assert_same(sample(widening["compiled"], prompts), sample(widening["eager"], prompts))
    assert widening["compiled"].stats.attended_slots < widening["compiled"].stats.cache_slots
    assert compilations() == first  # one compilation for every batch size, window and cache length: sizes symbolic


# Each compiles for 20-37 s from a cold compile cache (CI's): `make test-slow` runs them.
@pytest.mark.slow
@pytest.mark.parametrize("arch", ["qwen3_5", "qwen3_vl_moe", "qwen3_5_moe"])
def test_the_compiled_step_of_linear_attention_and_experts_samples_what_the_eager_one_samples(
    arch, rec_data, video_qa_data
):
    """Qwen3.5's gated delta net (its states written in place in the step's buffers) and the
    MoE families' experts, both called by the lean step as the model calls them: compiled
    whole, one graph without a break, the same tokens as the eager static step, rows ending
    apart."""
    model, processor, prompts = family_setup(arch, rec_data, video_qa_data)
    handle = stopping_sooner(model, processor.tokenizer)
    try:
        compiled = HFEngine(model, processor.tokenizer, options=COMPILED)
        assert compiled.static_plan.lean and compiled.static_plan.compiled
        before, breaks = compilations(), sum(counters["graph_break"].values())
        got = sample(compiled, prompts)
        assert compilations() == before + 1 and sum(counters["graph_break"].values()) == breaks
        assert len({len(tokens) for tokens in got[0]}) >= 2
        assert_same(got, sample(HFEngine(model, processor.tokenizer, options=EAGER), prompts))
    finally:
        handle.remove()


def test_the_compiled_step_reads_the_weights_the_optimizer_moves_in_place(setup):
    """The same step object, kept for a second batch of its shape, and the one made after the
    engine slept (as after every update), both sample from the moved weights."""
    model, processor, prompts = setup
    compiled, generator = HFEngine(model, processor.tokenizer, options=COMPILED), torch.Generator()
    before = sample(compiled, prompts, generator=generator)
    kept = compiled._static[1]
    trained = [p for n, p in model.named_parameters() if "language_model" in n]
    start = [p.detach().clone() for p in trained]
    optimizer = torch.optim.SGD(trained, lr=1.0)
    for p in trained:
        p.grad = torch.randn_like(p) * 0.05
    try:
        optimizer.step()
        expected = sample(HFEngine(model, processor.tokenizer, options=EAGER), prompts)
        assert expected[0] != before[0]  # the moved weights sample other tokens from the same seed
        assert_same(sample(compiled, prompts, generator=generator), expected)
        assert compiled._static[1] is kept  # the step compiled before the optimizer's step
        compiled.sleep()
        assert_same(sample(compiled, prompts, generator=generator), expected)
    finally:
        with torch.no_grad():
            for p, p0 in zip(trained, start, strict=True):
                p.copy_(p0)
                p.grad = None


def test_the_compiled_steps_buffers_are_freed_when_the_engine_sleeps(setup):
    """What torch keeps of a compilation holds no tensor of the step it compiled: the KV cache
    and the other buffers go when the engine sleeps, so the update has their memory."""
    model, processor, prompts = setup
    compiled = HFEngine(model, processor.tokenizer, options=COMPILED)
    sample(compiled, prompts)
    decoding = compiled._static[1]
    kept = [weakref.ref(t) for t in (decoding.layers[0].all_keys, decoding.mask, decoding.positions)]
    kept.append(weakref.ref(decoding.forward))
    del decoding
    compiled.sleep()
    gc.collect()
    assert all(ref() is None for ref in kept)


def test_the_compiled_step_is_refused_under_fsdp2(setup, monkeypatch):
    """Not tried on FSDP2's gathered weights: a clear error rather than a run that finds out."""
    model, processor, _ = setup
    monkeypatch.setattr("vlrl.rollout.hf.fsdp_sharded", lambda model: True)
    with pytest.raises(ConfigError, match="rollout.hf.compile_step has not been tried on FSDP2"):
        HFEngine(model, processor.tokenizer, options=COMPILED)


def test_compiled_graphs_are_refused_for_experts_that_grouped_mm_would_loop_over_on_the_host(monkeypatch):
    """Compiled, transformers' grouped_mm multiplies experts in bfloat16 only; in float32 it loops
    over offsets read on the host, which a CUDA graph's capture cannot hold: a clear error on
    CUDA (an H100's capability standing in, no GPU touched), none in bfloat16, none without
    graphs, and none for batched_mm, which reads nothing back."""
    from vlrl.config import ModelConfig
    from vlrl.models.loading import load_model, load_processor

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    cuda = torch.device("cuda")
    for dtype in ("float32", "bfloat16"):
        cfg = ModelConfig(path="tiny:qwen3_vl_moe", dtype=dtype)
        model, tokenizer = load_model(cfg).eval(), load_processor(cfg).tokenizer
        if dtype == "float32":
            with pytest.raises(ConfigError, match="rollout.hf.compile_step in CUDA graphs: its experts' weights are"):
                HFEngine(model, tokenizer, cuda, COMPILED)
            assert HFEngine(model, tokenizer, cuda, replace(COMPILED, cuda_graphs=False)).static_plan.compiled
            core_model(model).set_experts_implementation("batched_mm")
        engine = HFEngine(model, tokenizer, cuda, COMPILED)
        assert engine.static_plan.compiled and engine.static_plan.graphs


def test_every_compilation_runs_in_a_warm_up_step_never_inside_a_capture(setup, monkeypatch):
    """On a GPU a compilation inside a CUDA graph's capture would fail it (or be captured): each
    bucket's warm-up steps run before its capture, with the shapes the capture then sees, so
    torch compiles there. CUDA's streams and graphs stand in here (a capture runs its step, a
    replay nothing); torch's compilations are counted around each capture, from a fresh start."""
    from contextlib import contextmanager, nullcontext

    model, processor, prompts = setup

    class Stream:
        def wait_stream(self, other) -> None:
            pass

    class Graph:
        def register_generator_state(self, generator) -> None:
            pass

        def replay(self) -> None:
            pass

    during_captures = []

    @contextmanager
    def graph(graph, pool=None, stream=None):
        before = compilations()
        yield
        during_captures.append(compilations() - before)

    for name, fake in {
        "current_stream": lambda device=None: Stream(), "stream": lambda stream: nullcontext(),
        "Stream": lambda device=None: Stream(), "graph_pool_handle": lambda: None, "CUDAGraph": Graph, "graph": graph,
    }.items():  # fmt: skip
        monkeypatch.setattr(torch.cuda, name, fake)
    engine = HFEngine(model, processor.tokenizer, options=COMPILED)
    engine.static_plan = replace(engine.static_plan, graphs=True)  # refused on the CPU: set past the refusal
    torch._dynamo.reset()
    generator = torch.Generator()
    for _ in range(2):  # a second batch of the shape replays the first's graphs: it captures none
        engine.generate(prompts, SAMPLING["top-k"], generator.manual_seed(5))
    assert during_captures == [0] * len(during_captures)
    assert compilations() >= 1 and len(during_captures) >= 2  # compiled, and several buckets captured
    assert engine.stats.captures == len(during_captures)  # each counted once (bench/recipe_on_gpu.py reports it)
