"""The HF engine's decoding loop equals the loop it replaced, whatever rows it decodes: rows that
finish leave the batch (`rollout.hf.compact`), and the tokens, log-probs, entropies and the
random stream consumed are those of decoding every row to the end. For every model family, on
image and video prompts, with completions that stop at different steps."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import Cache
from transformers.cache_utils import LinearAttentionCacheLayerMixin

from tests.families import decoder_families
from tests.models.test_policy import family_setup
from tests.raised_logits import raised_logits
from vlrl.config import ConfigError, ModelConfig
from vlrl.models.batch import collate
from vlrl.models.decode_step import ModelStep
from vlrl.models.families import family_of_model
from vlrl.models.loading import core_model, load_model, load_processor
from vlrl.models.policy import SamplingFilter, completion_logits, prefill
from vlrl.plugins import plugin_options
from vlrl.rollout import Generation, SamplingParams
from vlrl.rollout.decoding import Draw, Record, sample_categorical
from vlrl.rollout.hf import GrowingLayer, HFEngine, HFOptions, stop_token_ids
from vlrl.rollout.static import (
    LeanStaticStep,
    RowsLayer,
    StaticDecoding,
    StaticPlan,
    cache_length,
    static_refusal,
    windows,
)

STOP_BIAS = 1.0  # added to the stop tokens' logits: sampled completions end after 1 to 14 tokens


@pytest.fixture(scope="module", params=decoder_families())
def setup(request, rec_data, video_qa_data):
    model, processor, prompts = family_setup(request.param, rec_data, video_qa_data)
    # a tensor: indexing with a list would copy host data in at every step
    stops = torch.tensor(stop_token_ids(model.generation_config, processor.tokenizer))
    with raised_logits(model, stops, STOP_BIAS):
        yield model, processor, prompts


@torch.no_grad()
def reference_generate(engine: HFEngine, prompts, params: SamplingParams, generator=None):
    """The engine's loop before compaction (vlrl at fda6e23), kept as the reference: every row is
    decoded until all have stopped, finished ones fed the pad token and masked out."""
    device = engine.device
    batch = collate(prompts, engine.pad_id).to(device)
    prefix = prefill(engine.model, batch)
    n = params.n
    prefix.cache.batch_repeat_interleave(n)
    logits = prefix.last_logits.repeat_interleave(n, dim=0)
    next_position = prefix.next_position.repeat_interleave(n)
    attention_mask = batch.attention_mask.repeat_interleave(n, dim=0)
    rows = logits.shape[0]
    greedy = params.temperature == 0
    sampler = SamplingFilter(engine.banned.to(device), 0 if greedy else params.top_k, 1.0 if greedy else params.top_p)
    stop_ids = engine.stop_ids.to(device)
    tokens, logprobs, entropies = [], [], []
    finished = torch.zeros(rows, dtype=torch.bool, device=device)
    for step in range(params.max_new_tokens):
        logits = logits.float()
        if params.temperature > 0:
            logits = logits / params.temperature
        step_logp = torch.log_softmax(logits, dim=-1)
        allowed = sampler.apply(logits)
        if params.temperature > 0:
            choice = sample_categorical(torch.softmax(allowed, dim=-1), generator)
        else:
            choice = allowed.argmax(dim=-1)
        choice = torch.where(finished, torch.full_like(choice, engine.pad_id), choice)
        tokens.append(choice)
        logprobs.append(step_logp.gather(1, choice[:, None]).squeeze(1))
        entropies.append(-(step_logp.exp() * step_logp).sum(dim=-1))
        live = ~finished
        finished = finished | torch.isin(choice, stop_ids)
        if bool(finished.all()) or step + 1 == params.max_new_tokens:
            break
        attention_mask = torch.cat([attention_mask, live.long()[:, None]], dim=1)
        out = engine.model(
            input_ids=choice[:, None],
            attention_mask=attention_mask,
            position_ids=engine.family.decode_positions(next_position, step, 1),
            past_key_values=prefix.cache,
            use_cache=True,
        )
        logits = out.logits[:, -1]
    return engine._completions(
        torch.stack(tokens, dim=1), torch.stack(logprobs, dim=1), torch.stack(entropies, dim=1), n
    )


def completions(groups):
    return [c for g in groups for c in g.completions]


def assert_same_completions(groups, expected) -> None:
    """Tokens and truncation exactly; log-probs and entropies to float32 rounding: a matrix
    product's rounding depends on how many rows it has (measured on this CPU: a Linear over 6
    rows and over 3 of them differ in the last bit), so a shrinking batch cannot be bitwise."""
    got, want = completions(groups), completions(expected)
    assert [c.token_ids for c in got] == [c.token_ids for c in want]
    assert [c.truncated for c in got] == [c.truncated for c in want]
    for c, e in zip(got, want, strict=True):
        torch.testing.assert_close(torch.tensor(c.logprobs), torch.tensor(e.logprobs), rtol=0, atol=2e-5)
        torch.testing.assert_close(torch.tensor(c.entropies), torch.tensor(e.entropies), rtol=0, atol=2e-5)


def decoded_batch_sizes(model):
    """Records the number of rows of every decoding forward (one token per row), at the token
    embedding: the model's forward or the lean step (models/decode_step.py) both embed."""
    sizes: list[int] = []

    def record(module, args):
        if args[0].shape[1] == 1:
            sizes.append(args[0].shape[0])

    return sizes, core_model(model).get_input_embeddings().register_forward_pre_hook(record)


SAMPLING = {
    "top-k": SamplingParams(n=3, max_new_tokens=14, temperature=1.0, top_k=40),
    "top-p": SamplingParams(n=3, max_new_tokens=14, temperature=0.7, top_p=0.9),
    "greedy": SamplingParams(n=3, max_new_tokens=14, temperature=0.0),
}


def test_a_completion_stops_at_the_tokenizers_end_token_as_well_as_the_generation_configs():
    from types import SimpleNamespace

    assert stop_token_ids(SimpleNamespace(eos_token_id=[7, 2]), SimpleNamespace(eos_token_id=1)) == [1, 2, 7]
    assert stop_token_ids(SimpleNamespace(eos_token_id=None), SimpleNamespace(eos_token_id=1)) == [1]


def test_a_zero_probability_token_is_never_drawn_even_at_a_uniform_of_zero():
    probs = torch.tensor([[0.0, 0.5, 0.0, 0.5]])
    for u, drawn in ((0.0, 1), (0.4999, 1), (0.5, 3), (0.9999, 3)):
        assert sample_categorical(probs, uniforms=torch.tensor([[u]])).tolist() == [drawn], u


def test_a_diverged_policys_non_finite_probabilities_still_draw_a_token_inside_the_vocabulary():
    probs = torch.tensor([[float("nan")] * 4, [1.0, float("nan"), 1.0, 1.0]])
    assert sample_categorical(probs, uniforms=torch.tensor([[0.5], [0.0]])).tolist() == [3, 3]


def test_a_finished_row_takes_the_pad_token_and_a_decoded_row_draws_its_batch_rows_uniform():
    logits = torch.randn(2, 10, generator=torch.Generator().manual_seed(1))
    banned = torch.zeros(10, dtype=torch.bool)
    params = SamplingParams(n=1, max_new_tokens=4, temperature=1.0)
    draw = Draw(params, SamplingFilter(banned), pad_id=9, rows=3, generator=torch.Generator().manual_seed(0))
    # decoded rows: batch row 0 (finished) and batch row 2
    choice, logp, _ = draw(logits, torch.tensor([0, 2]), torch.tensor([True, False]))
    uniforms = torch.rand(3, 1, generator=torch.Generator().manual_seed(0))
    drawn = sample_categorical(torch.softmax(logits[1:], dim=-1), uniforms=uniforms[2:])
    assert choice.tolist() == [9, int(drawn)]
    expected = torch.log_softmax(logits, dim=-1)[[0, 1], [9, int(drawn)]]
    torch.testing.assert_close(logp, expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("temperature, greedy", [(0.0, 0), (1.3, 1)], ids=["greedy call", "greedy row"])
def test_a_greedy_token_is_the_argmax_transformers_greedy_search_takes_at_ties_and_near_ties(temperature, greedy):
    """transformers' greedy search takes the argmax of its processed logits (bans, a repetition
    penalty), no warper: not after top-p, which may drop the first of tied maxima, nor after a
    temperature, which may merge logits one ulp apart (6.528122 and its next float over 1.3)."""
    from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor

    vocab = 151936
    logits = torch.full((2, vocab), -30.0)
    logits[0, [11, 90000]] = 5.0  # a tie: the first is greedy's
    logits[0, 500] = 4.5
    near = torch.tensor(6.528122)
    logits[1, 7], logits[1, 70000] = near, torch.nextafter(near, torch.tensor(7.0))  # the second is larger
    assert (logits[1, 7] / 1.3 == logits[1, 70000] / 1.3) and logits[1, 70000] > logits[1, 7]
    logits[1, 3] = 6.0  # seen: penalized below the others
    banned = torch.zeros(vocab, dtype=torch.bool)
    # greedy rows: n = 1, each prompt's first row greedy, so both rows here
    params = SamplingParams(n=1, temperature=temperature, top_p=0.3, repetition_penalty=1.5, greedy=greedy)
    draw = Draw(params, SamplingFilter(banned, 0, 0.3), pad_id=9, rows=2, generator=torch.Generator().manual_seed(0))
    seen = torch.tensor([[3, 3], [3, 3]])
    draw.begin(seen, torch.ones(2, 2, dtype=torch.long))
    choice, _, _ = draw(logits.clone(), torch.tensor([0, 1]), None)
    want = RepetitionPenaltyLogitsProcessor(1.5)(seen, logits.clone()).argmax(dim=-1)
    assert choice.tolist() == want.tolist() == [11, 70000]


def test_the_static_cache_holds_the_prompt_and_every_fed_token_rounded_up_to_128_slots():
    # (prompt, max_new_tokens): prompt + max_new_tokens - 1 slots (the last token is never fed)
    cases = {(134, 14): 256, (1, 128): 128, (2, 128): 256, (1, 1): 128, (128, 1): 128, (129, 1): 256, (384, 14): 512}
    assert {case: cache_length(*case) for case in cases} == cases


@pytest.mark.parametrize("key", ["check_every", "smallest_bucket"])
def test_the_static_steps_periods_and_buckets_are_at_least_one(key):
    from vlrl.config import ConfigError

    with pytest.raises(ConfigError, match="check_every and smallest_bucket must be >= 1"):
        HFOptions(**{key: 0}).validate("rollout.hf")


@pytest.mark.parametrize("sampling", SAMPLING)
def test_compacted_decoding_equals_decoding_every_row(setup, sampling):
    model, processor, prompts = setup
    engine = HFEngine(model, processor.tokenizer, options=HFOptions(compact=True))
    params = SAMPLING[sampling]
    generator, reference_generator = torch.Generator().manual_seed(6), torch.Generator().manual_seed(6)
    sizes, handle = decoded_batch_sizes(model)
    try:
        groups = engine.generate(prompts, params, generator)
    finally:
        handle.remove()
    expected = reference_generate(engine, prompts, params, reference_generator)
    assert_same_completions(groups, expected)
    assert torch.equal(generator.get_state(), reference_generator.get_state())  # the stream, consumed alike
    assert sizes == sorted(sizes, reverse=True) and all(0 < size <= 9 for size in sizes)
    stats = engine.stats  # what bench/recipe_on_gpu.py reports
    assert (stats.calls, stats.forwards, stats.row_steps) == (1, len(sizes), sum(sizes))
    assert stats.useful_row_steps == sum(len(c.token_ids) - 1 for c in completions(groups)) <= stats.row_steps
    if params.temperature > 0:  # (greedy: the tiny model's flat logits stop every row at once)
        lengths = {len(c.token_ids) for c in completions(expected)}
        assert len(lengths) >= 3, lengths  # rows stopped at different steps...
        assert sizes[-1] < 9  # ...and left the batch


def test_without_compaction_every_row_is_decoded_to_the_end(setup):
    """Every row, until the last one stops: with the stop tokens favoured further here, the rows
    stop at different steps before the limit, and the loop ends with the last of them. (A
    stopped row draws the pad token, which Qwen's tokenizers also stop at.)"""
    model, processor, prompts = setup
    engine = HFEngine(model, processor.tokenizer, options=HFOptions(compact=False))
    params = SamplingParams(n=2, max_new_tokens=20, temperature=1.0)
    stops = engine.stop_ids

    def stop_sooner_still(module, inputs, output):
        output = output.clone()
        output[..., stops] += 4.0
        return output

    favoured = core_model(model).lm_head.register_forward_hook(stop_sooner_still)
    sizes, handle = decoded_batch_sizes(model)
    try:
        groups = engine.generate(prompts, params, torch.Generator().manual_seed(2))
        expected = reference_generate(engine, prompts, params, torch.Generator().manual_seed(2))
    finally:
        handle.remove()
        favoured.remove()
    assert_same_completions(groups, expected)
    lengths = [len(c.token_ids) for c in completions(expected)]
    assert len(set(lengths)) > 1 and max(lengths) < params.max_new_tokens, lengths
    assert sizes[: max(lengths) - 1] == [6] * (max(lengths) - 1)  # the engine's forwards, each of every row
    assert engine.stats.forwards == max(lengths) - 1


def test_the_dynamic_loop_writes_each_token_into_reserved_slots_as_a_growing_cache_would(setup, monkeypatch):
    """Bit for bit what DynamicLayer's concatenation gives, with one buffer per layer from the
    prefill on (a new one only when compaction selects rows)."""
    model, processor, prompts = setup
    params = SamplingParams(n=3, max_new_tokens=14, temperature=1.0)
    seen: list[tuple[int, bool]] = []  # the first layer's buffer at each call, and whether it was a compaction
    first: list[GrowingLayer] = []

    def spy(name: str, compaction: bool):
        real = getattr(GrowingLayer, name)

        def call(layer, *args, **kwargs):
            if not first:
                first.append(layer)
            out = real(layer, *args, **kwargs)
            if layer is first[0]:
                seen.append((layer.all_keys.data_ptr(), compaction))
            return out

        monkeypatch.setattr(GrowingLayer, name, call)

    spy("update", False)
    spy("batch_select_indices", True)
    engine = HFEngine(model, processor.tokenizer)
    reserved = engine.generate(prompts, params, torch.Generator().manual_seed(4))
    monkeypatch.undo()
    assert first and len(seen) > 5
    buffers = [ptr for i, (ptr, compaction) in enumerate(seen) if i == 0 or compaction or ptr != seen[i - 1][0]]
    assert len(buffers) == 1 + sum(compaction for _, compaction in seen)  # written in place between compactions
    monkeypatch.setattr("vlrl.rollout.hf.reserve", lambda cache, slots: None)  # transformers' DynamicLayer
    grown = engine.generate(prompts, params, torch.Generator().manual_seed(4))
    for got, want in zip(completions(reserved), completions(grown), strict=True):
        assert (got.token_ids, got.logprobs, got.entropies) == (want.token_ids, want.logprobs, want.entropies)


STATIC = {
    "static, compacted every 3 steps": HFOptions(static_cache=True, check_every=3, smallest_bucket=1),
    "static, every row to the end": HFOptions(static_cache=True, compact=False, check_every=4),
    "static, looked at every step": HFOptions(static_cache=True, check_every=1, smallest_bucket=2),
}


def static_batch_sizes(groups, max_new_tokens: int, options: HFOptions) -> list[int]:
    """The static step's batch size at each decoding forward, worked out from where each row
    stopped: the host looks after the first token and then every `check_every` steps, and moves
    the rows still running into the smallest bucket that holds them (the whole batch and powers
    of two down to `smallest_bucket`; no compaction: always the whole batch)."""
    rows = completions(groups)
    stops = [max_new_tokens + 1 if c.truncated else len(c.token_ids) for c in rows]
    sizes = {len(rows)}
    if options.compact:
        sizes |= {2**k for k in range(len(rows).bit_length()) if options.smallest_bucket <= 2**k < len(rows)}
    out, bucket, done = [], len(rows), 1
    while done < max_new_tokens and any(stop > done for stop in stops):
        running = sum(stop > done for stop in stops)
        bucket = min(bucket, min(size for size in sizes if size >= running))
        count = min(options.check_every, max_new_tokens - done)
        out, done = out + [bucket] * count, done + count
    return out


@pytest.mark.parametrize("sampling", SAMPLING)
@pytest.mark.parametrize("options", STATIC)
def test_the_static_step_equals_decoding_every_row(setup, options, sampling):
    """Eager on the CPU (CUDA graphs: tests/gpu/test_decoding_graphs.py). Families whose cache the
    static step cannot hold decode with the dynamic loop, and say so. The batch shrinks only
    when the host looks (every rollout.hf.check_every steps) and into the buckets
    rollout.hf.smallest_bucket allows."""
    model, processor, prompts = setup
    engine = HFEngine(model, processor.tokenizer, options=STATIC[options])
    params = SAMPLING[sampling]
    assert engine.static_plan is not None  # every family's cache and layers, on the CPU
    sizes = []
    for seed in (5, 6):  # a new generator each: new buffers (their reuse: the next test)
        generator, reference_generator = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        recorded, handle = decoded_batch_sizes(model)
        try:
            groups = engine.generate(prompts, params, generator)
        finally:
            handle.remove()
        sizes += recorded
        expected = reference_generate(engine, prompts, params, reference_generator)
        assert_same_completions(groups, expected)
        assert torch.equal(generator.get_state(), reference_generator.get_state())
        assert recorded == static_batch_sizes(expected, params.max_new_tokens, STATIC[options])
    assert engine.stats.calls == 2 and engine.stats.row_steps == sum(sizes)
    if params.temperature > 0 and STATIC[options].compact:
        assert min(sizes) < 9


def test_experts_take_the_static_step_where_transformers_routes_their_tokens_on_the_device(monkeypatch):
    """Qwen3-VL MoE's experts through transformers' grouped_mm (its default where torch has it):
    the static step holds them (their samples and the step's host waits: the tests above, for
    every family). Through the eager loop they pick their tokens with nonzero(), and grouped_mm
    below compute capability 8.0 falls back to a loop over offsets read on the host: refused,
    so the engine decodes with the dynamic loop and says why."""
    model = load_model(ModelConfig(path="tiny:qwen3_vl_moe", dtype="float32")).eval()
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert core_model(model).config.get_text_config()._experts_implementation == "grouped_mm"
    assert static_refusal(model, cpu) == ""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))  # an A100's
    assert static_refusal(model, cuda) == ""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))  # a T4's
    assert static_refusal(model, cuda) == (
        "its experts' grouped_mm falls back below compute capability 8.0 to a loop reading their offsets on the host"
    )
    core_model(model).set_experts_implementation("batched_mm")
    assert static_refusal(model, cuda) == ""
    core_model(model).set_experts_implementation("eager")
    assert static_refusal(model, cpu).startswith("its experts' implementation 'eager' is not one that routes")


def test_the_static_step_takes_eager_attention_and_leaves_flash_attention_to_the_dynamic_loop(rec_data, video_qa_data):
    """The step's mask holds the slots not written yet and relies on the causal mask to hide
    them, which SDPA and eager attention apply and FlashAttention does not (it reads the padding
    mask alone, so it would attend to them): eager attention decodes as the dynamic loop does,
    a flash_attention_2 model is not given the static step."""
    model, processor, prompts = family_setup("qwen2_5_vl", rec_data, video_qa_data)
    model.set_attn_implementation("eager")
    options = STATIC["static, compacted every 3 steps"]
    engine = HFEngine(model, processor.tokenizer, options=options)
    assert engine.static_plan is not None and not engine.note
    params = SAMPLING["top-p"]
    generator, reference_generator = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    groups = engine.generate(prompts, params, generator)
    assert_same_completions(groups, reference_generate(engine, prompts, params, reference_generator))
    model.config._attn_implementation = "flash_attention_2"  # the package is not needed to be refused
    engine = HFEngine(model, processor.tokenizer, options=options)
    assert engine.static_plan is None
    assert engine.note == (
        "decodes with the dynamic loop, not the static step: its attention is 'flash_attention_2', which would "
        "attend to the slots not written yet (the step's mask holds them; SDPA's and eager attention's causal "
        "mask hides them)"
    )


def lean_and_model_engines(model, processor) -> dict[bool, HFEngine]:
    """Static-step engines compacting every 3 steps, by whether their forward is the lean step
    (which every family takes)."""
    options = STATIC["static, compacted every 3 steps"]
    engines = {
        lean: HFEngine(model, processor.tokenizer, options=replace(options, lean_step=lean)) for lean in (True, False)
    }
    assert engines[True].static_plan.lean and not engines[False].static_plan.lean
    return engines


@pytest.mark.parametrize("sampling", ["top-k", "top-p"])
def test_the_static_steps_lean_forward_decodes_as_the_models_forward_bit_for_bit(setup, sampling):
    """rollout.hf.lean_step in the static step (static.LeanStaticStep: its rope tables and its
    mask of the slots written) against the model's own forward on the same buffers: the same
    tokens, log-probs and entropies, exactly, through compaction into smaller buckets."""
    model, processor, prompts = setup
    engines = lean_and_model_engines(model, processor)
    got = {}
    for lean, engine in engines.items():
        got[lean] = completions(engine.generate(prompts, SAMPLING[sampling], torch.Generator().manual_seed(5)))
        assert isinstance(engine._static[1].forward, LeanStaticStep if lean else ModelStep)  # each side's own path
    assert [(c.token_ids, c.logprobs, c.entropies) for c in got[True]] == [
        (c.token_ids, c.logprobs, c.entropies) for c in got[False]
    ]
    if sampling == "top-k":  # rows ended apart, so the batch was compacted
        assert len({len(c.token_ids) for c in got[True]}) >= 3


def prompt_slots(processor, prompts) -> int:
    """The cache slots a batch of `prompts` takes: the longest, the others padded to it."""
    return collate(prompts, processor.tokenizer.pad_token_id).input_ids.shape[1]


def windowed_and_whole(setup, lean: bool, smallest: int, params: SamplingParams, monkeypatch):
    """Completions (tokens, log-probs, entropies) from one seed, the widths of the keys each
    layer attended over (seen at the cache) and the engine's stats, by `rollout.hf.smallest_window`:
    `smallest`, then 0 (the whole cache)."""
    model, processor, prompts = setup
    widths: list[int] = []
    update = RowsLayer.update

    def seen(layer, *args, **kwargs):
        keys, values = update(layer, *args, **kwargs)
        widths.append(keys.shape[2])
        return keys, values

    monkeypatch.setattr(RowsLayer, "update", seen)
    options = replace(STATIC["static, compacted every 3 steps"], lean_step=lean)
    got = []
    for window in (smallest, 0):
        engine = HFEngine(model, processor.tokenizer, options=replace(options, smallest_window=window))
        assert engine.static_plan.lean == lean
        widths.clear()
        groups = engine.generate(prompts, params, torch.Generator().manual_seed(5))
        got.append((completions(groups), list(widths), engine.stats))
    return got


@pytest.mark.parametrize("lean", [True, False], ids=["lean step", "model's forward"])
def test_a_static_step_attending_over_a_window_of_the_cache_decodes_as_one_attending_over_all_of_it(
    setup, lean, monkeypatch
):
    """rollout.hf.smallest_window at its default: the slots past the window are not written yet,
    so attending over the window alone gives the same tokens, log-probs and entropies, exactly,
    as attending over the whole cache, through compaction (here 512 slots of 640)."""
    _, processor, prompts = setup
    prompt = prompt_slots(processor, prompts)
    params = replace(SAMPLING["top-k"], max_new_tokens=200)
    (windowed, windowed_widths, windowed_stats), (whole, whole_widths, whole_stats) = windowed_and_whole(
        setup, lean, HFOptions.smallest_window, params, monkeypatch
    )
    assert [(c.token_ids, c.logprobs, c.entropies) for c in windowed] == [
        (c.token_ids, c.logprobs, c.entropies) for c in whole
    ]
    length = cache_length(prompt, params.max_new_tokens)
    window = min(w for w in windows(length, HFOptions.smallest_window) if w > prompt + 16)  # every row stops by 16
    assert (window, length) == (512, 640) and set(windowed_widths) == {window} and set(whole_widths) == {length}
    assert whole_stats.attended_slots == whole_stats.cache_slots == windowed_stats.cache_slots
    assert windowed_stats.attended_slots * length == windowed_stats.cache_slots * window
    assert len({len(c.token_ids) for c in windowed}) >= 3  # rows ended apart: compacted


@pytest.mark.parametrize("lean", [True, False], ids=["lean step", "model's forward"])
def test_the_window_widens_as_the_rows_decode_and_samples_as_the_whole_cache_does(setup, lean, monkeypatch):
    """A window just past the prompt, so it widens while the rows decode: the same tokens, and
    log-probs and entropies to float32 rounding (a window of any width: SDPA's CPU kernel sums a
    row's exponentials in vector lanes, so a width off their multiple rounds otherwise; at the
    default's widths it is exact, above)."""
    _, processor, prompts = setup
    prompt = prompt_slots(processor, prompts)
    params = SAMPLING["top-k"]
    (windowed, widths, stats), (whole, _, _) = windowed_and_whole(setup, lean, prompt + 4, params, monkeypatch)
    assert_same_completions([Generation(windowed)], [Generation(whole)])
    length = cache_length(prompt, params.max_new_tokens)
    assert widths == sorted(widths) and widths[0] == prompt + 4 < widths[-1] <= length  # widened at the second look
    assert stats.attended_slots < stats.cache_slots


def test_the_windows_double_from_the_smallest_to_the_whole_cache():
    assert windows(1024, 128) == [128, 256, 512, 1024]
    assert windows(1280, 128) == [128, 256, 512, 1024, 1280]
    assert windows(300, 128) == [128, 256, 300]
    assert windows(128, 128) == [128] and windows(100, 128) == [100]  # the whole cache, however short
    assert windows(1280, 0) == [1280]  # 0: the whole cache only


def test_a_hook_added_between_two_batches_of_the_same_shape_counts_in_the_static_steps_lean_forward(setup):
    """The second batch reuses the first's buffers and step; the lean step looks the model's
    parts up again before it, as the dynamic loop's does: a hook added in between on a plain
    Linear (which it otherwise computes as F.linear of its weight, past any hook) decodes as it
    does through the model's own forward."""
    model, processor, prompts = setup
    engines = lean_and_model_engines(model, processor)
    params, generators = SAMPLING["top-k"], {lean: torch.Generator() for lean in engines}  # one each: the same shape

    def sample(lean: bool):
        return [
            c.token_ids for c in completions(engines[lean].generate(prompts, params, generators[lean].manual_seed(5)))
        ]

    before = {lean: sample(lean) for lean in engines}
    kept = {lean: engine._static[1] for lean, engine in engines.items()}
    out = core_model(model).model.language_model.layers[-1].self_attn.o_proj  # a plain Linear in every family
    handle = out.register_forward_hook(lambda module, inputs, output: output * 4)
    try:
        after = {lean: sample(lean) for lean in engines}
    finally:
        handle.remove()
    assert all(engine._static[1] is kept[lean] for lean, engine in engines.items())  # reused
    assert isinstance(kept[True].forward, LeanStaticStep)
    assert after[True] == after[False] and after[False] != before[False]  # the hook counts, in both


def test_a_second_batch_of_the_same_shape_reuses_the_static_buffers_and_decodes_as_a_fresh_one(setup):
    """The buffers are kept for the next `generate` of the same shape (rows, cache length,
    sampling, generator): whatever the first batch left in them (finished rows, a small bucket,
    the record, its step counts) is reset."""
    model, processor, prompts = setup
    options = STATIC["static, compacted every 3 steps"]
    engine = HFEngine(model, processor.tokenizer, options=options)
    params = SAMPLING["top-k"]
    generator, reference_generator = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    kept, sizes = [], []
    for _ in range(2):
        recorded, handle = decoded_batch_sizes(model)
        try:
            groups = engine.generate(prompts, params, generator)
        finally:
            handle.remove()
        kept.append(engine._static[1])
        sizes.append(recorded)
        expected = reference_generate(engine, prompts, params, reference_generator)
        assert_same_completions(groups, expected)
        assert torch.equal(generator.get_state(), reference_generator.get_state())
        assert recorded == static_batch_sizes(expected, params.max_new_tokens, options)
    assert kept[0] is kept[1] and min(sizes[0]) < len(completions(groups))  # reused, after compacting
    stats = engine.stats
    assert (stats.calls, stats.forwards, stats.row_steps) == (2, sum(map(len, sizes)), sum(map(sum, sizes)))


class HostWaits(TorchDispatchMode):
    """Records the operators that make the host wait for a CUDA device, which a CUDA graph cannot
    capture: a value read back (`.item()`, `int()`, `bool()`), a result whose shape depends on
    the data (nonzero, boolean-mask indexing, unique), host data copied in (`torch.tensor`, a
    copy between devices). Under inference mode (the engine's) a read-back reaches the probe as
    `aten::item` or `aten::is_nonzero`, not decomposed into `aten::_local_scalar_dense`."""

    READS = ("aten::_local_scalar_dense", "aten::item")
    WAITS = (*READS, "aten::nonzero", "aten::masked_select", "aten::lift_fresh",
             "aten::_unique2", "aten::unique_consecutive", "aten::is_nonzero", "aten::equal")  # fmt: skip

    def __init__(self):
        super().__init__()
        self.seen: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name
        masks = args[1] if name in ("aten::index", "aten::index_put_", "aten::index_put") else ()
        if name in self.WAITS or any(isinstance(m, torch.Tensor) and m.dtype == torch.bool for m in masks):
            self.seen.add(name)
        if name == "aten::_to_copy":
            source, target = args[0], torch.device((kwargs or {}).get("device") or args[0].device)
        elif name == "aten::copy_":
            source, target = args[1], args[0].device
        if name in ("aten::_to_copy", "aten::copy_") and target.type != source.device.type:
            self.seen.add(f"{name} {source.device.type} to {target.type}")
        return func(*args, **(kwargs or {}))


def host_waits_in_static_steps(engine: HFEngine, prompts, monkeypatch) -> tuple[set[str], set[str]]:
    """The waiting operators one top-p `generate` ran inside the static steps, and in the loop
    around them (whose looks wait: the probe is not blind)."""
    in_steps, in_loop = HostWaits(), HostWaits()

    def probed(method, probe):
        def run(self, *args):
            with probe:
                return method(self, *args)

        return run

    monkeypatch.setattr(StaticDecoding, "step", probed(StaticDecoding.step, in_steps))
    monkeypatch.setattr(StaticDecoding, "decode", probed(StaticDecoding.decode, in_loop))
    engine.generate(prompts, SAMPLING["top-p"], torch.Generator().manual_seed(5))
    assert engine.stats.forwards > 3
    return in_steps.seen, in_loop.seen


def test_the_static_step_never_makes_the_host_wait(setup, monkeypatch):
    """What `rollout.hf.cuda_graphs` captures (StaticDecoding.step: forward, draw, bookkeeping)
    runs no operator that waits for the device, for every family the static step holds, at
    every batch-size bucket the completions' stops compact it into."""
    model, processor, prompts = setup
    engine = HFEngine(model, processor.tokenizer, options=HFOptions(static_cache=True, check_every=3))
    assert engine.static_plan is not None
    sizes, handle = decoded_batch_sizes(model)
    try:
        in_steps, in_loop = host_waits_in_static_steps(engine, prompts, monkeypatch)
    finally:
        handle.remove()
    assert len(set(sizes)) > 1 and in_steps == set() and set(HostWaits.READS) & in_loop


@pytest.mark.parametrize("merge", [True, False], ids=["merged", "PEFT's layers"])
def test_the_static_step_of_a_lora_policy_never_makes_the_host_wait(rec_data, tiny_qwen25, merge, monkeypatch):
    from tests.models.test_lora import adapted_model

    model, processor, prompts = adapted_model(rec_data, "float32")
    engine = HFEngine(model, processor.tokenizer, options=HFOptions(static_cache=True, check_every=3, merge_lora=merge))
    assert (engine.lora is not None) == merge
    in_steps, in_loop = host_waits_in_static_steps(engine, prompts, monkeypatch)
    assert in_steps == set() and set(HostWaits.READS) & in_loop


def prefilled_cache(model, rows: int, prompt: int, device: torch.device) -> Cache:
    """A prefill's cache of zeros, as `prefill` leaves it for `rows` rows of `prompt` tokens:
    keys and values, and each linear-attention layer's (Qwen3.5's) states at the sizes its
    module makes them."""
    text = model.config.get_text_config()
    heads = text.num_key_value_heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    cache, dtype = family_of_model(model).new_cache(model), core_model(model).dtype
    for index, layer in enumerate(core_model(model).model.language_model.layers):
        if isinstance(cache.layers[index], LinearAttentionCacheLayerMixin):
            net = layer.linear_attn
            conv = torch.zeros(rows, net.conv_dim, net.conv_kernel_size, dtype=dtype, device=device)
            cache.update_conv_state(conv, index)
            cache.update_recurrent_state(  # in float32, as the gated delta rule computes it
                torch.zeros(rows, net.num_v_heads, net.head_k_dim, net.head_v_dim, device=device), index
            )
        else:
            keys = torch.zeros(rows, heads, prompt, head_dim, dtype=dtype, device=device)
            cache.update(keys, keys.clone(), index)
    return cache


@pytest.mark.parametrize("lean", [True, False], ids=["lean step", "model's forward"])
@pytest.mark.parametrize("family", decoder_families())
def test_the_static_step_keeps_every_tensor_on_the_models_device_without_a_gpu(family, lean, monkeypatch):
    """The static step (top-p draw, record, a smaller bucket) with the model and its buffers as
    fake CUDA tensors (no memory, no GPU; torch checks devices as on a GPU): a tensor it made
    on the host and mixed in would fail here, as it would fail on a GPU, and one copied to the
    device is seen (a copy a CUDA graph cannot capture). In bf16, as on a GPU (grouped_mm, which
    Qwen3-VL MoE's experts take, has no float32 kernel on CUDA)."""
    cfg = ModelConfig(path=f"tiny:{family}", dtype="bfloat16")
    model, tokenizer = load_model(cfg).eval(), load_processor(cfg).tokenizer
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))  # an H100's
    assert static_refusal(model, torch.device("cuda")) == ""
    on_host = HFEngine(model, tokenizer)
    text = model.config.get_text_config()
    rows, prompt, steps = 6, 20, 8
    with FakeTensorMode(allow_non_fake_inputs=True):
        cuda = torch.device("cuda")
        model.to(cuda)
        assert next(model.parameters()).device.type == "cuda"
        prefilled = prefilled_cache(model, rows, prompt, cuda)  # its shapes are what the static buffers take
        params = SamplingParams(n=2, max_new_tokens=steps, temperature=0.7, top_p=0.9)
        draw = Draw(params, SamplingFilter(on_host.banned.to(cuda), 0, 0.9), on_host.pad_id, rows, None)
        record = Record(rows, steps, on_host.pad_id, cuda)
        plan = StaticPlan(
            compact=True, graphs=False, check_every=4, smallest_bucket=2, smallest_window=16, lean=lean, compiled=False
        )
        decoding = StaticDecoding(model, prefilled, 128, draw, record, on_host.stop_ids.to(cuda), plan)
        assert isinstance(decoding.forward, LeanStaticStep if lean else ModelStep)
        positions = torch.zeros(3, rows, 1, dtype=torch.long, device=cuda)
        decoding.start(prefilled, torch.ones(rows, prompt, dtype=torch.long, device=cuda), positions, positions + 1)
        decoding.sample(torch.zeros(rows, text.vocab_size, device=cuda))
        waits = HostWaits()
        with waits:
            decoding.widen(prompt + 4)  # a window of 32 of the 128 slots
            decoding.step()
            decoding.narrow(2, 64)
            decoding.step()
        assert decoding.record.tokens.device.type == decoding.ids.device.type == "cuda"
    assert waits.seen == set()  # nothing copied between the host and the device either


def test_a_bucket_is_captured_once_its_warm_up_steps_are_run_however_few_steps_each_look_allows(monkeypatch):
    """With rollout.hf.check_every below the warm-up's steps, the warm-up adds up over the host's
    looks and then the bucket is captured (it started again at every look: never captured, the
    option silently eager). CUDA's streams stand in for here; the capture itself:
    tests/gpu/test_decoding_graphs.py."""
    from contextlib import nullcontext

    from vlrl.rollout import static

    class Stream:
        def wait_stream(self, other) -> None:
            pass

    calls: list[str] = []

    class Graph:
        def replay(self) -> None:
            calls.append("replay")

    def capture():
        calls.append("capture")
        return Graph()

    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream())
    monkeypatch.setattr(torch.cuda, "stream", lambda stream: nullcontext())
    decoding = StaticDecoding.__new__(StaticDecoding)
    decoding.plan = StaticPlan(
        compact=True, graphs=True, check_every=1, smallest_bucket=2, smallest_window=128, lean=True, compiled=False
    )
    decoding.graphs, decoding.warm_steps, decoding.bucket, decoding.window = {}, {}, 8, 256
    decoding.stream, decoding.device = Stream(), torch.device("cpu")
    decoding.step, decoding.capture = lambda: calls.append("eager"), capture
    for _ in range(4):
        decoding.run(1)
    assert static.WARMUP_STEPS == 2 and calls == ["eager", "eager", "capture", "replay", "replay"]
    decoding.bucket = 4  # a smaller bucket warms up and is captured on its own
    decoding.run(3)
    assert calls[5:] == ["eager", "eager", "capture", "replay"] and decoding.warm_steps == {(8, 256): 2, (4, 256): 2}
    decoding.window = 512  # and so does a wider window
    decoding.run(3)
    assert calls[9:] == ["eager", "eager", "capture", "replay"] and set(decoding.graphs) == {
        (8, 256),
        (4, 256),
        (4, 512),
    }


def test_cuda_graphs_are_refused_where_they_cannot_run(setup):
    model, processor, _ = setup
    graphs = HFOptions(static_cache=True, cuda_graphs=True)
    with pytest.raises(ConfigError, match="rollout.hf.cuda_graphs needs CUDA"):
        HFEngine(model, processor.tokenizer, options=graphs)
    for bad in (
        {"check_every": 0},
        {"static_cache": False, "cuda_graphs": True},
        {"static_cache": False, "compile_step": True},
    ):
        with pytest.raises(ConfigError, match="rollout.hf"):
            plugin_options(HFEngine, {"hf": bad}, "rollout")


def generated(engine: HFEngine, processor, prompt, **options) -> list[int]:
    """transformers' greedy generate of one prompt with `options`, the engine's end tokens and
    bans: the answer's ids."""
    inputs = {"input_ids": prompt.input_ids[None], "attention_mask": torch.ones(1, len(prompt), dtype=torch.long),
              "mm_token_type_ids": prompt.mm_token_type_ids[None], **prompt.vision}  # fmt: skip
    with torch.no_grad():
        out = engine.model.generate(
            **inputs, do_sample=False, eos_token_id=engine.stop_ids.tolist(),
            suppress_tokens=engine.banned.nonzero().flatten().tolist(), pad_token_id=processor.tokenizer.pad_token_id,
            **options,
        )  # fmt: skip
    return out[0, len(prompt) :].tolist()


def test_a_repetition_penalty_decodes_as_transformers_generate_in_both_loops(rec_data, video_qa_data):
    """SamplingParams.repetition_penalty (eval.repetition_penalty): greedy answers are
    model.generate's with the same penalty over each prompt's tokens and the answer's so far,
    from the dynamic loop (compacting) and the static step; sampled ones equal between the two
    (each row's tokens follow it through compaction into buckets), also in a second batch of the
    kept static step; and the penalty moves answers."""
    model, processor, prompts = family_setup("qwen2_5_vl", rec_data, video_qa_data)
    prompts = prompts[:2]  # the image prompts: generate takes them one at a time
    loops = {
        "dynamic": HFEngine(model, processor.tokenizer, options=HFOptions(compact=True)),
        "static": HFEngine(model, processor.tokenizer, options=HFOptions(static_cache=True, check_every=2)),
    }
    engine = loops["dynamic"]
    stops = engine.stop_ids.tolist()
    greedy = {}
    for penalty in (1.0, 1.6):
        params = SamplingParams(n=1, max_new_tokens=20, temperature=0.0, repetition_penalty=penalty)
        for name, loop in loops.items():
            greedy[name, penalty] = [g.completions[0].token_ids for g in loop.generate(prompts, params)]
        for prompt, got in zip(prompts, greedy["dynamic", penalty], strict=True):
            expected = generated(engine, processor, prompt, max_new_tokens=20, repetition_penalty=penalty)
            assert got == expected[: next((i + 1 for i, t in enumerate(expected) if t in stops), len(expected))]
        assert greedy["static", penalty] == greedy["dynamic", penalty]
    assert greedy["dynamic", 1.6] != greedy["dynamic", 1.0]
    sampled = SamplingParams(n=3, max_new_tokens=14, temperature=1.0, repetition_penalty=1.6)
    kept = torch.Generator()  # the static step keeps its buffers for the next batch of its shape and generator
    drawn = {name: loop.generate(prompts, sampled, kept.manual_seed(5)) for name, loop in loops.items()}
    assert_same_completions(drawn["static"], drawn["dynamic"])
    # the kept step's second batch starts from its own prompts' tokens, none of the first's answers
    assert_same_completions(loops["static"].generate(prompts, sampled, kept.manual_seed(5)), drawn["static"])
    plain = loops["dynamic"].generate(
        prompts, replace(sampled, repetition_penalty=1.0), torch.Generator().manual_seed(5)
    )
    assert [c.token_ids for c in completions(plain)] != [c.token_ids for c in completions(drawn["dynamic"])]


@pytest.mark.parametrize("static", [False, True], ids=["dynamic loop", "static step"])
@pytest.mark.parametrize("penalty", [1.0, 1.6])
def test_greedy_rows_decode_as_a_greedy_call_and_the_sampled_rows_as_a_call_sampling_every_row(setup, static, penalty):
    """SamplingParams.greedy (ReMax's baseline among the sampled rows, `mixes_greedy`): each
    prompt's first row decodes what a greedy call of its own does, the others what the rows of
    a call sampling all n do, tokens exactly, log-probs to float rounding (a row draws its own
    uniform, whatever the others take); as rows stop and are compacted, with a repetition
    penalty too."""
    model, processor, prompts = setup
    engine = HFEngine(model, processor.tokenizer, options=HFOptions(static_cache=static, check_every=2))
    params = SamplingParams(n=4, max_new_tokens=12, repetition_penalty=penalty)
    mixed = engine.generate(prompts, replace(params, greedy=1), torch.Generator().manual_seed(5))
    sampled = engine.generate(prompts, params, torch.Generator().manual_seed(5))
    greedy = engine.generate(prompts, replace(params, n=1, temperature=0.0))
    assert [g.completions[0].token_ids for g in mixed] == [g.completions[0].token_ids for g in greedy]
    assert_same_completions(
        [Generation(g.completions[1:]) for g in mixed], [Generation(g.completions[1:]) for g in sampled]
    )
    # the first rows were sampled otherwise: the greedy ones are not what those rows draw
    assert [g.completions[0].token_ids for g in mixed] != [g.completions[0].token_ids for g in sampled]


@pytest.mark.parametrize("static", [False, True], ids=["dynamic loop", "static step"])
def test_no_completion_ends_before_min_new_tokens_and_its_log_probs_stay_the_policys(rec_data, video_qa_data, static):
    """SamplingParams.min_new_tokens (rollout.min_new_tokens): the end tokens are not drawn
    before it, greedy answers are model.generate's with the same min_new_tokens, sampled ones
    end as soon as they may where the policy all but ends at once, in both loops (a second
    batch of the kept static step too: its count starts again), and each token's log-prob is
    the policy's over the whole vocabulary, not the draw's."""
    model, processor, prompts = family_setup("qwen2_5_vl", rec_data, video_qa_data)
    prompts = prompts[:2]  # the image prompts: generate takes them one at a time
    engine = HFEngine(model, processor.tokenizer, options=HFOptions(static_cache=static, check_every=2))
    stops = engine.stop_ids.tolist()
    with raised_logits(model, stops, 30.0):
        for min_new in (0, 3):
            params = SamplingParams(n=1, max_new_tokens=8, temperature=0.0, min_new_tokens=min_new)
            got = [g.completions[0].token_ids for g in engine.generate(prompts, params)]
            assert [len(ids) for ids in got] == [min_new + 1] * 2
            for prompt, ids in zip(prompts, got, strict=True):
                expected = generated(engine, processor, prompt, max_new_tokens=8, min_new_tokens=min_new)
                assert ids == expected[: min_new + 1]
        sampled = SamplingParams(n=3, max_new_tokens=8, temperature=1.0, min_new_tokens=3)
        kept = torch.Generator()
        for _ in range(2):  # the static step keeps its buffers (and its count) for a second batch
            groups = engine.generate(prompts, sampled, kept.manual_seed(5))
            assert [len(c.token_ids) for c in completions(groups)] == [4] * 6
        rows = torch.arange(2).repeat_interleave(3)
        ids = torch.tensor([c.token_ids for c in completions(groups)])
        with torch.no_grad():
            logits = completion_logits(
                model, collate(prompts, engine.pad_id), rows, ids, torch.ones_like(ids), lean=False
            )
        policy = torch.log_softmax(logits.float(), -1).gather(-1, ids[..., None]).squeeze(-1)
        got = torch.tensor([c.logprobs for c in completions(groups)])
        torch.testing.assert_close(got, policy, rtol=0, atol=1e-4)
        assert bool((got[:, :3] < -20).all())  # the draw's, renormalized without the end tokens, would be near 0
