"""The shared-prefix forward equals G independent full forwards (values and gradients), and the
rollout engine samples what the policy says, never vision tokens: for every model family, on a
batch of image prompts and a video prompt (Qwen3.5's cache holds linear-attention states), and
on text-only prompts, alone and beside them (LMM-R1's text-only samples)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from tasks.refcoco import RefCOCO
from tasks.video_qa import VideoQA
from tests.families import decoder_families
from tests.raised_logits import raised_logits
from vlrl.config import ModelConfig, VideoConfig
from vlrl.data.records import load_split
from vlrl.models.batch import collate
from vlrl.models.loading import core_model, family_of_model, frame_spec, load_model, load_processor
from vlrl.models.policy import SamplingFilter, TokenScorer, completion_logprobs, prefill
from vlrl.models.prompting import render_prompt
from vlrl.rollout import EngineSetup, SamplingParams
from vlrl.rollout.base import completion_rows
from vlrl.rollout.decoding import sample_categorical
from vlrl.rollout.hf import HFEngine
from vlrl.trainer.batch import RolloutBatch, rows_logprobs

MIN_PIXELS, MAX_PIXELS = 3136, 50176


def family_setup(family: str, rec_data, video_qa_data):
    """The tiny float32 model of `family`, its processor, and two image prompts and a video one."""
    video = VideoConfig(max_frames=4, min_pixels=MIN_PIXELS, max_pixels=12544)
    cfg = ModelConfig(path=f"tiny:{family}", dtype="float32", min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS, video=video)
    processor = load_processor(cfg)
    model = load_model(cfg).eval()
    task = RefCOCO()
    samples = load_split(rec_data, task.build_sample, frame_spec(cfg)).samples
    prompts = [render_prompt(processor, task.messages(s), s, cfg) for s in samples[:2]]
    clip = next(s for s in VideoQA().load(video_qa_data, frame_spec(cfg)).samples if s.video)
    prompts.append(render_prompt(processor, VideoQA().messages(clip), clip, cfg))  # images and a video in one batch
    return model, processor, prompts


@pytest.fixture(scope="module", params=decoder_families())
def setup(request, rec_data, video_qa_data):
    return family_setup(request.param, rec_data, video_qa_data)


def full_forward_logprobs(model, prompts, rows, ids, mask, pad_id):
    """The peers' way: each row is prompt + completion in one sequence, vision per row."""
    per_row = [prompts[r] for r in rows.tolist()]
    batch = collate(per_row, pad_id)
    input_ids = torch.cat([batch.input_ids, ids], dim=1)
    attention = torch.cat([batch.attention_mask, mask.long()], dim=1)
    types = torch.cat([batch.mm_token_type_ids, torch.zeros_like(ids, dtype=batch.mm_token_type_ids.dtype)], dim=1)
    out = model(input_ids=input_ids, attention_mask=attention, mm_token_type_ids=types, **batch.vision)
    logits = out.logits[:, batch.input_ids.shape[1] - 1 : -1]
    return torch.log_softmax(logits.float(), -1).gather(-1, ids[..., None]).squeeze(-1)


def taken_grads(model) -> dict[str, torch.Tensor]:
    """The parameters' gradients by name (those that got one), cleared from the model."""
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    return grads


def six_completions(seed: int, ends: dict[int, int]) -> tuple[torch.Tensor, ...]:
    """Rows, token ids, mask and random weights of six 9-token completions of three prompts (G
    completions share a prompt's cache: rows 0, 0, 1, 2, 2, 2), row r ending at token ends[r]."""
    generator = torch.Generator().manual_seed(seed)
    rows = torch.tensor([0, 0, 1, 2, 2, 2])
    ids = torch.randint(0, 300, (6, 9), generator=generator)
    mask = torch.ones(6, 9)
    for row, end in ends.items():
        mask[row, end:] = 0
    return rows, ids, mask, torch.rand(6, 9, generator=generator) * mask


def assert_shared_equals_full(model, prompts, rows, ids, mask, weights, pad_id) -> dict:
    """The shared-prefix log-probs of `rows` equal the full forwards', and so do the gradients
    of their `weights`-weighted sum; the gradients, by parameter name."""
    model.zero_grad()
    shared = completion_logprobs(model, collate(prompts, pad_id), rows, ids, mask).logp
    (shared * weights).sum().backward()
    shared_grads = taken_grads(model)
    full = full_forward_logprobs(model, prompts, rows, ids, mask, pad_id)
    (full * weights).sum().backward()
    full_grads = taken_grads(model)
    torch.testing.assert_close(shared * mask, full * mask, rtol=1e-5, atol=1e-5)
    assert shared_grads.keys() == full_grads.keys()
    for name in full_grads:
        torch.testing.assert_close(shared_grads[name], full_grads[name], rtol=1e-4, atol=1e-5, msg=name)
    return full_grads


def test_shared_prefix_logprobs_and_gradients_equal_full_forwards(setup):
    model, processor, prompts = setup
    rows, ids, mask, weights = six_completions(0, {1: 4, 3: 7})
    grads = assert_shared_equals_full(model, prompts, rows, ids, mask, weights, processor.tokenizer.pad_token_id)
    assert any("visual" in n for n in grads)


def test_one_token_completions_equal_full_forwards(setup):
    """A single-token continuation takes the cache's one-step path (Qwen3.5 updates its
    convolution window in place there): values and gradients still those of full forwards."""
    model, processor, prompts = setup
    rows = torch.tensor([0, 1, 2, 2])
    ids = torch.tensor([[5], [17], [42], [99]])
    mask = torch.ones(4, 1)
    assert_shared_equals_full(model, prompts, rows, ids, mask, mask, processor.tokenizer.pad_token_id)


def test_batched_generation_matches_one_prompt_at_a_time(setup):
    model, processor, prompts = setup
    engine = HFEngine(model, processor.tokenizer)
    params = SamplingParams(n=2, max_new_tokens=12, temperature=0.0)
    together = engine.generate(prompts, params)
    alone = [engine.generate([p], params)[0] for p in prompts]
    assert [[c.token_ids for c in g.completions] for g in together] == [
        [c.token_ids for c in g.completions] for g in alone
    ]


def test_rollout_logprobs_equal_the_training_forward(setup):
    model, processor, prompts = setup
    engine = HFEngine(model, processor.tokenizer)
    groups = engine.generate(
        prompts, SamplingParams(n=3, max_new_tokens=10, temperature=0.7), torch.Generator().manual_seed(1)
    )
    r = completion_rows(groups, engine.pad_id)
    assert r.rows.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    with torch.no_grad():
        recomputed = completion_logprobs(
            model, collate(prompts, engine.pad_id), r.rows, r.ids, r.mask, temperature=0.7
        ).logp
    torch.testing.assert_close(recomputed * r.mask, r.logprobs * r.mask, rtol=1e-5, atol=1e-5)


def _text_only_prompt(model, processor):
    """A prompt with no image (LMM-R1's text-only samples), rendered for the model's family."""
    from vlrl.data.sample import Sample

    cfg = ModelConfig(
        path=f"tiny:{family_of_model(model).name}", dtype="float32", min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS
    )
    sample = Sample(id="text", task="math_vqa", problem="What is 3 plus 2?", solution="5")
    messages = [{"role": "user", "content": [{"type": "text", "text": sample.problem}]}]
    return render_prompt(processor, messages, sample, cfg)


def test_text_only_prompts_alone_and_beside_images_equal_full_forwards(setup):
    model, processor, prompts = setup
    pad = processor.tokenizer.pad_token_id
    text = _text_only_prompt(model, processor)
    assert text.vision == {} and not text.mm_token_type_ids.any()
    generator = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 300, (4, 7), generator=generator)
    mask = torch.ones(4, 7)
    mask[2, 5:] = 0
    for batch_prompts, rows in (([text], torch.tensor([0, 0, 0, 0])), ([*prompts, text], torch.tensor([3, 0, 3, 2]))):
        assert_shared_equals_full(model, batch_prompts, rows, ids, mask, mask, pad)
    with torch.no_grad():  # the plain forward of the prompt and one completion, no cache, no rope positions given
        plain = model(input_ids=torch.cat([text.input_ids[None], ids[:1]], dim=1)).logits[0, len(text) - 1 : -1]
        expected = torch.log_softmax(plain.float(), -1).gather(-1, ids[0, :, None]).squeeze(-1)
        got = completion_logprobs(model, collate([text], pad), torch.tensor([0]), ids[:1], mask[:1]).logp[0]
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_a_text_only_prompt_samples_what_the_training_forward_scores(setup):
    model, processor, prompts = setup
    text = _text_only_prompt(model, processor)
    engine = HFEngine(model, processor.tokenizer)
    batch_prompts = [text, *prompts[:1]]
    groups = engine.generate(
        batch_prompts, SamplingParams(n=2, max_new_tokens=8, temperature=0.7), torch.Generator().manual_seed(2)
    )
    r = completion_rows(groups, engine.pad_id)
    with torch.no_grad():
        recomputed = completion_logprobs(
            model, collate(batch_prompts, engine.pad_id), r.rows, r.ids, r.mask, temperature=0.7
        ).logp
    torch.testing.assert_close(recomputed * r.mask, r.logprobs * r.mask, rtol=1e-5, atol=1e-5)
    alone = engine.generate([text], SamplingParams(n=1, max_new_tokens=8, temperature=0.0))
    together = engine.generate(batch_prompts, SamplingParams(n=1, max_new_tokens=8, temperature=0.0))
    assert alone[0].completions[0].token_ids == together[0].completions[0].token_ids


def test_vision_tokens_and_padded_vocabulary_are_never_sampled(setup):
    model, processor, prompts = setup
    tokenizer = processor.tokenizer
    forbidden = [tokenizer.convert_tokens_to_ids(t) for t in family_of_model(model).vision_tokens]
    vocab = model.config.get_text_config().vocab_size
    forbidden += list(range(len(tokenizer), vocab))
    assert len(tokenizer) < vocab  # the tiny vocabulary is padded, like Qwen's

    with raised_logits(model, forbidden, 1e4):
        engine = HFEngine(model, tokenizer)
        groups = engine.generate(prompts, SamplingParams(n=4, max_new_tokens=8), torch.Generator().manual_seed(0))
    sampled = {t for g in groups for c in g.completions for t in c.token_ids}
    assert sampled and not sampled & set(forbidden)


def test_sampled_token_frequencies_follow_the_probabilities_and_skip_zeros():
    probs = torch.tensor([0.0, 0.1, 0.0, 0.6, 0.3, 0.0, 0.0])  # zeros first, inside and last
    draws = 200_000
    tokens = sample_categorical(probs.repeat(draws, 1), torch.Generator().manual_seed(0))
    frequencies = torch.bincount(tokens, minlength=len(probs)).double() / draws
    assert frequencies[probs == 0].sum() == 0
    sigma = (probs * (1 - probs) / draws).sqrt().double()
    assert ((frequencies - probs.double()).abs() <= 5 * sigma).all(), frequencies
    unnormalized = sample_categorical(2.0 * probs.repeat(draws, 1), torch.Generator().manual_seed(0))
    assert torch.equal(unnormalized, tokens)  # the same draws: rows need not sum to 1


def test_top_k_and_top_p_keep_the_tokens_transformers_warpers_keep_ties_included():
    """The very tokens transformers' warpers keep (vLLM's apply_top_k_top_p takes the same
    steps): which of tied tokens, and how many over a flat distribution of a large vocabulary,
    where a sum from the top rounds otherwise."""
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

    from vlrl.models.policy import filter_top_k_top_p

    tie = torch.tensor([[0.0, 0.0, float("-inf")]])  # probabilities 0.5, 0.5, 0
    assert torch.equal(
        torch.isfinite(filter_top_k_top_p(tie, 0, 0.5)), torch.isfinite(TopPLogitsWarper(0.5)(None, tie))
    )
    assert torch.isfinite(filter_top_k_top_p(tie, 0, 0.5)).tolist() == [[False, True, False]]  # the same one kept
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 50, generator=generator) * 3
    ties = torch.randint(0, 3, (64, 2000), generator=generator).float()  # many tied at every value
    flat = torch.randn(16, 151936, generator=generator)  # Qwen's vocabulary, a nucleus of ~100,000
    cases = [(logits, 0, 0.3), (logits, 0, 0.9), (logits, 5, 1.0), (logits, 10, 0.7), (ties, 0, 0.1), (ties, 0, 0.5),
             (ties, 3, 0.9), (flat, 0, 0.95), (flat, 0, 0.999), (flat.bfloat16().float(), 0, 0.99)]  # fmt: skip
    for values, top_k, top_p in cases:
        want = values if top_k == 0 else TopKLogitsWarper(top_k)(None, values)
        want = want if top_p == 1.0 else TopPLogitsWarper(top_p)(None, want)
        got = filter_top_k_top_p(values, top_k, top_p)
        assert torch.equal(torch.isfinite(got), torch.isfinite(want)), (values.shape, top_k, top_p)


def test_min_p_keeps_what_transformers_keeps_after_top_k_top_p_and_vllm_before_them():
    """transformers' generate: top-k, top-p, then min-p; vLLM's sampler: min-p, then top-k and
    top-p (its MinPLogitsProcessor is transformers' MinPLogitsWarper's arithmetic). Renormalized
    by min-p first, top-p keeps fewer tokens: the orders differ, and each engine's is kept."""
    from transformers.generation.logits_process import MinPLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    from vlrl.models.policy import SamplingFilter

    def warp(logits, top_k, top_p, min_p, min_p_first):
        steps = [TopKLogitsWarper(top_k) if top_k else None, TopPLogitsWarper(top_p) if top_p < 1 else None]
        steps = [MinPLogitsWarper(min_p), *steps] if min_p_first else [*steps, MinPLogitsWarper(min_p)]
        for step in filter(None, steps):
            logits = step(None, logits)
        return torch.isfinite(logits)

    logits = torch.randn(64, 50, generator=torch.Generator().manual_seed(0)) * 3
    banned = torch.zeros(50, dtype=torch.bool)
    orders_differ = False
    for top_k, top_p, min_p in ((0, 1.0, 0.1), (10, 0.9, 0.05), (0, 0.8, 0.3), (5, 0.95, 0.5), (0, 1.0, 1.0)):
        for first in (False, True):
            kept = torch.isfinite(SamplingFilter(banned, top_k, top_p, min_p, first).apply(logits))
            assert torch.equal(kept, warp(logits, top_k, top_p, min_p, first)), (top_k, top_p, min_p, first)
        orders_differ |= not torch.equal(
            warp(logits, top_k, top_p, min_p, False), warp(logits, top_k, top_p, min_p, True)
        )
    assert orders_differ
    only_best = torch.isfinite(SamplingFilter(banned, min_p=1.0).apply(logits))
    assert torch.equal(only_best, logits == logits.amax(dim=-1, keepdim=True))


def test_non_finite_probabilities_still_draw_a_token_inside_the_vocabulary():
    """A diverged policy's NaN logits must not index past the vocabulary (on CUDA a device-side
    assert that ends the process before the trainer can stop the run with its message)."""
    probs = torch.tensor([[0.2, float("nan"), 0.8], [float("nan")] * 3, [float("inf"), 1.0, 0.0]])
    tokens = sample_categorical(probs, torch.Generator().manual_seed(0))
    assert ((tokens >= 0) & (tokens < 3)).all(), tokens


def test_forwards_compute_on_the_run_device_not_where_the_parameters_are_stored(setup):
    """FSDP2 with CPU offload stores the parameters on the CPU and computes on the GPU: inputs
    placed by the first parameter's device met CUDA logits in the reference forward (issue 23).
    A first parameter on the meta device stands in for the stored shards here."""
    model, processor, prompts = setup
    params = SamplingParams(n=2, max_new_tokens=6, temperature=0.0)
    expected = HFEngine(model, processor.tokenizer).generate(prompts, params)
    rows = completion_rows(expected, processor.tokenizer.pad_token_id)
    batch = RolloutBatch(
        [SimpleNamespace(prompt=p) for p in prompts], rows.rows, rows.ids, rows.mask, None, None, rows.truncated
    )
    everything = list(range(len(rows.rows)))
    with torch.no_grad():
        expected_logp, _ = rows_logprobs(
            model, batch, everything, 1.0, processor.tokenizer.pad_token_id, torch.device("cpu")
        )
    model.register_parameter("stored_elsewhere", torch.nn.Parameter(torch.zeros(1, device="meta"), requires_grad=False))
    try:
        assert next(model.parameters()).device.type == "meta"
        setup = EngineSetup(ModelConfig(), "", processor, 0, lambda: (model, torch.device("cpu")))
        engine = HFEngine.create(setup, None)
        assert [[c.token_ids for c in g.completions] for g in engine.generate(prompts, params)] == [
            [c.token_ids for c in g.completions] for g in expected
        ]
        with torch.no_grad():
            logp, _ = rows_logprobs(
                model, batch, everything, 1.0, processor.tokenizer.pad_token_id, torch.device("cpu")
            )
        assert torch.equal(logp.logp, expected_logp.logp)
    finally:
        del model._parameters["stored_elsewhere"]


def test_greedy_tokens_equal_transformers_generate(tiny_qwen25, rec_data):
    """On the CPU here, on a GPU in the GPU tier (tests/gpu/test_engine_on_gpu.py) at a mid-size shape."""
    from tests.gpu.test_engine_on_gpu import greedy_equals_generate

    greedy_equals_generate(tiny_qwen25, rec_data, torch.device("cpu"), "float32", 24)


@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_chunked_logprobs_and_gradients_equal_the_full_logits(setup, temperature):
    """The update's output layer scores 5 tokens at a time here (CHUNK_TOKENS in training),
    each chunk recomputed in the backward pass: the log-probs, entropies, the sampling
    distribution's log-probs, the sums of squared probabilities and every gradient, through the log-probs and the entropies (an
    entropy bonus), are those of the full (R, T, V) logits (which are divided by the temperature
    even at 1, where the chunks skip the division); 0 at padding."""
    model, processor, prompts = setup
    pad = processor.tokenizer.pad_token_id
    rows, ids, mask, weights = six_completions(3, {1: 4, 3: 1})  # row 3: one token only
    banned = torch.zeros(model.config.get_text_config().vocab_size, dtype=torch.bool)
    banned[:7] = True
    sampler = SamplingFilter(
        banned, top_p=0.5
    )  # half of a tiny model's flat distribution: some tokens filtered, some kept
    batch = collate(prompts, pad)

    results, grads = {}, {}
    model.zero_grad()
    for chunk in (5, 1000, 0):  # chunks of 5 tokens; all tokens in one chunk; the full logits
        stats = completion_logprobs(
            model, batch, rows, ids, mask, temperature, True, sampler, chunk_tokens=chunk, with_sum_pi_squared=True
        )
        ((stats.logp - 0.7 * stats.entropy) * weights).sum().backward()
        results[chunk] = stats
        grads[chunk] = taken_grads(model)
    with torch.no_grad():
        no_grad = completion_logprobs(
            model, batch, rows, ids, mask, temperature, True, sampler, chunk_tokens=5, with_sum_pi_squared=True
        )

    full = results[0]
    real = mask.bool()
    assert full.sampled[real].isinf().any() and full.sampled[real].isfinite().any()  # filtered tokens and kept ones
    assert (~real).any() and all((t[~real] == 0).all() for t in full)  # padding is not scored, by either path
    for stats in (results[5], results[1000], no_grad):
        for got, want in zip(stats, full, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    assert grads[5].keys() == grads[0].keys() and any("lm_head" in n or "embed" in n for n in grads[0])
    for chunk in (5, 1000):
        for name, want in grads[0].items():
            torch.testing.assert_close(grads[chunk][name], want, rtol=1e-5, atol=2e-6, msg=name)


def test_each_scored_tokens_seen_ids_are_its_prompts_and_its_completions_before_it_and_no_other():
    """SeenTokens (what a repetition penalty makes less likely): a prompt's padding left out and
    its repeated ids (an image's pads) kept once, the completion's ids before the token, and a
    slot that holds none filled with an id already there (here 0, the padding, would be wrong)."""
    from vlrl.models.policy import SeenTokens

    ids = torch.tensor([[0, 0, 5, 7, 7, 7], [0, 9, 9, 3, 4, 4]])
    batch = SimpleNamespace(input_ids=ids, attention_mask=(torch.arange(6) >= torch.tensor([[2], [1]])).long())
    rows, completions = torch.tensor([0, 1, 1]), torch.tensor([[11, 12, 11], [13, 9, 14], [15, 15, 16]])
    seen = SeenTokens.of(batch, rows, completions)
    assert seen.prompt.shape == (3, 3)  # {5, 7} and {3, 4, 9}, each once
    got = seen.ids(slice(None))
    prompts = [{5, 7}, {3, 4, 9}]
    for n, (r, t) in enumerate(zip(seen.row.tolist(), seen.position.tolist(), strict=True)):
        assert set(got[n].tolist()) == prompts[int(rows[r])] | set(completions[r, :t].tolist()), (r, t)
    later = seen.select(seen.position == 2)
    assert set(later.ids(slice(1, 2))[0].tolist()) == {3, 4, 9, 13}  # row 1's third token


@pytest.mark.parametrize("chunk", [5, 0], ids=["chunks", "full logits"])
def test_under_a_repetition_penalty_the_sampled_column_is_the_draw_that_penalized_each_rows_seen_tokens(setup, chunk):
    """A foreign engine's draw with a repetition penalty (vLLM's, rollout.repetition_penalty)
    makes less likely, at each step, the tokens the row's prompt and its completion so far hold,
    before the temperature and the filters: the sampled column, from the chunks or the full
    logits, is that distribution's, computed here token by token; the policy's own log-probs
    are not penalized."""
    from vlrl.models.policy import completion_logits

    model, processor, prompts = setup
    batch = collate(prompts, processor.tokenizer.pad_token_id)
    rows, ids, mask, _ = six_completions(4, {1: 4, 3: 1})
    ids[:, 5] = ids[:, 2]  # a token the completion held before
    ids[:, 1] = batch.input_ids[rows, -3]  # one its prompt holds
    banned = torch.zeros(model.config.get_text_config().vocab_size, dtype=torch.bool)
    banned[:7] = True
    plain = SamplingFilter(banned, top_p=0.9)
    sampler = dataclasses.replace(plain, repetition_penalty=1.5)
    with torch.no_grad():
        got = completion_logprobs(model, batch, rows, ids, mask, 0.7, False, sampler, chunk_tokens=chunk)
        unpenalized = completion_logprobs(model, batch, rows, ids, mask, 0.7, False, plain, chunk_tokens=chunk)
        logits = completion_logits(model, batch, rows, ids, mask).float()
    expected = torch.zeros_like(got.sampled)
    for r, prompt in enumerate(rows.tolist()):
        held = batch.input_ids[prompt][batch.attention_mask[prompt].bool()].tolist()
        for t in range(int(mask[r].sum())):
            seen = sorted(set(held) | set(ids[r, :t].tolist()))
            raw = logits[r, t].clone()
            raw[seen] = torch.where(raw[seen] < 0, raw[seen] * 1.5, raw[seen] / 1.5)
            expected[r, t] = torch.log_softmax(plain.apply(raw / 0.7), -1)[ids[r, t]]
    torch.testing.assert_close(got.sampled, expected, rtol=1e-5, atol=1e-5)
    real = mask.bool()
    assert not torch.allclose(got.sampled[real], unpenalized.sampled[real])  # the penalty moved them
    torch.testing.assert_close(got.logp, unpenalized.logp, rtol=0, atol=0)


@pytest.mark.parametrize("chunk", [5, 0], ids=["chunks", "full logits"])
def test_before_min_new_tokens_the_sampled_column_is_the_draw_without_the_end_tokens(setup, chunk):
    """A foreign engine's draw with min_new_tokens (vLLM's min_tokens, rollout.min_new_tokens)
    bans the end tokens at a completion's first positions only: the sampled column, from the
    chunks and from the full logits, is that distribution's, computed here token by token (the
    first token, scored from the prompt's last logits, among them); the policy's own log-probs
    are not filtered."""
    from vlrl.models.policy import completion_logits

    model, processor, prompts = setup
    batch = collate(prompts, processor.tokenizer.pad_token_id)
    rows, ids, mask, _ = six_completions(4, {1: 4, 3: 1})
    vocab = model.config.get_text_config().vocab_size
    banned, stops = torch.zeros(vocab, dtype=torch.bool), torch.zeros(vocab, dtype=torch.bool)
    banned[:7] = True
    stops[300:340] = True  # the completions' ids are below 300
    plain = SamplingFilter(banned, top_p=0.9)
    sampler = dataclasses.replace(plain, min_new_tokens=3, stops=stops)
    with torch.no_grad():
        got = completion_logprobs(model, batch, rows, ids, mask, 0.7, False, sampler, chunk_tokens=chunk)
        unfiltered = completion_logprobs(model, batch, rows, ids, mask, 0.7, False, plain, chunk_tokens=chunk)
        logits = completion_logits(model, batch, rows, ids, mask).float()
    expected = torch.zeros_like(got.sampled)
    for r in range(len(rows)):
        for t in range(int(mask[r].sum())):
            raw = logits[r, t].clone()
            if t < 3:
                raw[stops] = float("-inf")
            expected[r, t] = torch.log_softmax(plain.apply(raw / 0.7), -1)[ids[r, t]]
    torch.testing.assert_close(got.sampled, expected, rtol=1e-5, atol=1e-5)
    real, early = mask.bool(), torch.arange(9) < 3
    assert not torch.allclose(got.sampled[:, early][real[:, early]], unfiltered.sampled[:, early][real[:, early]])
    torch.testing.assert_close(got.sampled[:, ~early], unfiltered.sampled[:, ~early], rtol=0, atol=0)
    torch.testing.assert_close(got.logp, unfiltered.logp, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_one_chunk_of_the_fused_output_layer_has_autograds_values_and_gradients_bit_for_bit(dtype):
    """ScoredChunks recomputes a chunk's logits in the backward pass and turns them into their
    gradient in place: on the CPU its columns and the hidden states', weight's and bias's
    gradients are those autograd computes through the output layer, the temperature, gather and
    logsumexp, to the bit (on a GPU, within rounding: tests/gpu/test_output_layer_on_gpu.py)."""
    from tests.gpu.test_output_layer_on_gpu import scored

    cpu, shape = torch.device("cpu"), (300, 64, 1000)
    fused, _ = scored(cpu, 512, shape, dtype, sampler=True)
    autograd, _ = scored(cpu, 0, shape, dtype, sampler=True)
    for got, want in zip(fused, autograd, strict=True):
        assert torch.equal(got, want)


def test_bfloat16_logits_are_upcast_before_the_temperature_divides_them_as_the_engines_draw_does():
    """The HF engine's draw (and vLLM's sampler) divide float32 logits by the temperature; the
    update scores that distribution, its gradient through the same order. Dividing bfloat16
    logits first rounds them to bfloat16 again: their log-probs differed from the engine's by up
    to 0.05 nats a token at 0.7 over Qwen's vocabulary, on a GPU's bfloat16 model."""
    from vlrl.rollout.decoding import Draw

    generator = torch.Generator().manual_seed(0)
    head = torch.nn.Linear(64, 1000, dtype=torch.bfloat16)
    with torch.no_grad():
        for p in head.parameters():
            p.copy_(torch.randn(p.shape, generator=generator))
    hidden = torch.randn(300, 64, generator=generator).to(torch.bfloat16).requires_grad_()
    ids = torch.randint(0, 1000, (300,), generator=generator)
    scaled = head(hidden).float() / 0.7
    want = scaled.gather(-1, ids[:, None]).squeeze(-1) - torch.logsumexp(scaled, dim=-1)
    (want_grad,) = torch.autograd.grad(want.sum(), hidden)
    params = SamplingParams(n=1, max_new_tokens=1, temperature=0.7)
    draw = Draw(params, SamplingFilter(torch.zeros(1000, dtype=torch.bool)), 0, 300, torch.Generator().manual_seed(1))
    drawn, engine_logp, _ = draw(head(hidden).detach(), torch.arange(300), None)
    scorer = TokenScorer(0.7, False, None, chunk_tokens=512)
    for got in (scorer.of_hidden(head, hidden, ids)[:, 0], scorer.of_logits(head(hidden), ids)[:, 0]):
        assert torch.equal(got, want.detach())
        assert torch.equal(torch.autograd.grad(got.sum(), hidden)[0], want_grad)
    torch.testing.assert_close(scorer.of_logits(head(hidden), drawn)[:, 0].detach(), engine_logp, rtol=0, atol=1e-5)


@pytest.mark.parametrize("entropy_and_sampler", [True, False])
def test_the_sum_of_squared_probabilities_is_each_steps_under_the_scaled_policy_beside_the_other_columns(
    entropy_and_sampler,
):
    """Optimal Token Baseline's column: sum_v pi(v)^2 of the temperature-scaled policy over the
    whole vocabulary (not the sampler's), from chunks of the output layer or the full logits,
    named apart from the entropy and the sampling distribution's log-probs when they are asked
    too, and without a gradient: the log-prob's is as without it."""
    generator = torch.Generator().manual_seed(3)
    head = torch.nn.Linear(16, 50)
    hidden = torch.randn(7, 16, generator=generator, requires_grad=True)
    ids = torch.randint(0, 50, (7,), generator=generator)
    sampler = SamplingFilter(torch.zeros(50, dtype=torch.bool), top_p=0.5) if entropy_and_sampler else None
    probs = torch.softmax(head(hidden).detach() / 0.7, dim=-1)
    plain = TokenScorer(0.7, entropy_and_sampler, sampler, chunk_tokens=3)
    asked = dataclasses.replace(plain, with_sum_pi_squared=True)
    for columns in (asked.of_hidden(head, hidden, ids), asked.of_logits(head(hidden), ids)):
        got, without = asked.split(columns), plain.split(plain.of_hidden(head, hidden, ids))
        torch.testing.assert_close(got.sum_pi_squared, probs.pow(2).sum(-1))
        for name in ("logp", "entropy", "sampled"):
            want = getattr(without, name)
            assert (getattr(got, name) is None) == (want is None)
            if want is not None:
                torch.testing.assert_close(getattr(got, name), want)
        (grad,) = torch.autograd.grad((got.logp + got.sum_pi_squared).sum(), hidden)
        torch.testing.assert_close(grad, torch.autograd.grad(without.logp.sum(), hidden)[0])


def test_the_output_layer_runs_once_per_chunk_and_once_more_in_the_backward_pass(monkeypatch):
    """Log-probs, entropies and the sampling distribution's log-probs come from one product of
    the output layer per chunk; the backward pass recomputes each chunk's once."""
    head = torch.nn.Linear(4, 10)
    hidden = torch.randn(7, 4, requires_grad=True)
    ids = torch.tensor([0, 3, 9, 2, 2, 5, 1])
    sampler = SamplingFilter(torch.zeros(10, dtype=torch.bool), top_p=0.9)
    products, linear = [], torch.nn.functional.linear
    monkeypatch.setattr(torch.nn.functional, "linear", lambda *a: products.append(1) or linear(*a))
    columns = TokenScorer(0.7, True, sampler, chunk_tokens=3).of_hidden(head, hidden, ids)
    assert len(products) == 3  # chunks of 3, 3 and 1 tokens
    columns[:, 0].sum().backward()
    assert len(products) == 6 and hidden.grad is not None


def test_a_prompts_rope_positions_are_computed_once_and_batched_as_the_family_computes_them(setup, monkeypatch):
    """The first prefill over a prompt keeps its rope positions; any later batch of it (other
    prompts, another order, so other padding) is given them, equal to the family's own for that
    batch, and the prefill computes none."""
    model, processor, prompts = setup
    pad = processor.tokenizer.pad_token_id
    prompts = [dataclasses.replace(p, rope=None) for p in [*prompts, _text_only_prompt(model, processor)]]
    family, core = family_of_model(model), core_model(model)
    with torch.no_grad():
        prefill(model, collate(prompts[:3], pad))
    assert [p.rope is not None for p in prompts] == [True, True, True, False]
    assert collate([prompts[3], prompts[0]], pad).kept_rope() is None  # one of them has none yet
    original, computed = type(family).rope_positions, []
    monkeypatch.setattr(type(family), "rope_positions", lambda *a: computed.append(1) or original(*a))
    for chosen in ([2, 0], [1], [0, 2, 1]):
        batch = collate([prompts[i] for i in chosen], pad).to("cpu")  # the engines move a batch to the device
        positions, next_position = original(family, core, batch)
        kept_positions, kept_next = batch.kept_rope()
        assert torch.equal(kept_positions, positions) and torch.equal(kept_next, next_position)
        with torch.no_grad():
            prefill(model, batch)
    assert computed == []


def test_qwen35s_linear_attention_cache_repeats_each_prompts_rows_together_and_selects_rows():
    """A prefill's rows are repeated prompt by prompt (a prompt's G completions are adjacent rows),
    then selected, in the recurrent state and the convolution window alike."""
    from vlrl.models.qwen3_5 import _shared_prefix_layer

    layer = _shared_prefix_layer()(number_of_states=1)
    conv = torch.arange(2 * 3 * 4, dtype=torch.float32).view(2, 3, 4)  # (prompts, channels, kernel)
    state = torch.arange(2 * 2 * 2, dtype=torch.float32).view(2, 2, 2) + 100
    layer.update_conv_state(conv, 0)
    layer.update_recurrent_state(state, 0)
    layer.batch_repeat_interleave(2)
    assert torch.equal(layer.conv_states[0], conv[[0, 0, 1, 1]])
    assert torch.equal(layer.recurrent_states[0], state[[0, 0, 1, 1]])
    layer.batch_select_indices(torch.tensor([3, 0]))
    assert torch.equal(layer.conv_states[0], conv[[1, 0]]) and torch.equal(layer.recurrent_states[0], state[[1, 0]])


def test_the_entropy_column_is_the_entropy_of_the_temperature_scaled_distribution():
    """Uniform over 4 tokens: ln 4; logits (ln 3, 0) at temperature 1: probabilities 3/4, 1/4."""
    import math

    scorer = TokenScorer(1.0, True, None)
    columns = scorer.of_logits(torch.zeros(1, 4), torch.tensor([2]))
    assert columns[0].tolist() == pytest.approx([-math.log(4), math.log(4)])
    two = torch.tensor([[math.log(3), 0.0]])
    want = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert TokenScorer(1.0, True, None).of_logits(two, torch.tensor([1]))[0].tolist() == pytest.approx(
        [math.log(0.25), want]
    )
    halved = TokenScorer(2.0, True, None).of_logits(2 * two, torch.tensor([1]))  # 2 x logits at temperature 2
    assert halved[0].tolist() == pytest.approx([math.log(0.25), want])


def test_top_k_above_the_vocabulary_keeps_every_token():
    from vlrl.models.policy import filter_top_k_top_p

    logits = torch.tensor([[0.5, -1.0, 2.0]])
    assert torch.equal(filter_top_k_top_p(logits, 10, 1.0), logits)


def test_no_tokens_still_run_the_output_layer_once_and_give_every_column(monkeypatch):
    """A process with no completion tokens in a micro-batch still calls the output layer, as
    its FSDP2 peers do, and gets the columns asked for, of no rows."""
    head = torch.nn.Linear(4, 10)
    sampler = SamplingFilter(torch.zeros(10, dtype=torch.bool), top_p=0.9)
    products, linear = [], torch.nn.functional.linear
    monkeypatch.setattr(torch.nn.functional, "linear", lambda *a: products.append(1) or linear(*a))
    columns = TokenScorer(1.0, True, sampler, chunk_tokens=3).of_hidden(
        head, torch.zeros(0, 4), torch.zeros(0, dtype=torch.long)
    )
    assert columns.shape == (0, 3) and len(products) == 1


def test_the_update_scores_tokens_chunk_by_chunk_unless_asked_for_the_full_logits(setup, monkeypatch):
    """By default the (R, T, V) logits are never made: the output layer scores CHUNK_TOKENS
    tokens at a time; chunk_tokens=0 asks for the full logits."""
    import vlrl.models.policy as policy

    model, processor, prompts = setup
    rows, ids, mask, _ = six_completions(0, {1: 4})
    batch = collate(prompts, processor.tokenizer.pad_token_id)
    full, real = [], policy.completion_logits
    monkeypatch.setattr(policy, "completion_logits", lambda *a: full.append(1) or real(*a))
    with torch.no_grad():
        completion_logprobs(model, batch, rows, ids, mask)
        assert full == []
        completion_logprobs(model, batch, rows, ids, mask, chunk_tokens=0)
    assert full == [1]
