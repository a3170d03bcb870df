"""The HF rollout engine on a GPU: its lean decoding step is the model's forward bit for bit (and
so is the update's lean forward of completion tokens), its
greedy tokens are transformers' `generate`'s for the same prompt, and it samples the same tokens
with the policy of every parallelism strategy (FSDP2 gathers the shards, CPU offload brings them
from the CPU).

Two of these also run on the CPU in `make test`: the greedy check (tests/models/test_policy.py
calls it with the tiny model) and the lean step's (tests/models/test_decode_step.py, every
family, in float32 and bfloat16)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from rich.console import Console

from data_prep.refcoco import write_synthetic_rec
from tasks.refcoco import RefCOCO
from tests.gpu.runs import free, rl_overrides
from tests.gpu.test_strategies_on_gpu import STRATEGIES
from tests.models.test_decode_step import assert_bitwise, assert_same_gradients, decode_both, through_both
from tests.models.test_policy import six_completions
from vlrl.config import ModelConfig, load_config
from vlrl.data.records import load_split
from vlrl.models.decode_step import DecodeStep, decode_step_refusal, lean_forward
from vlrl.models.loading import frame_spec, load_model, load_processor
from vlrl.models.prompting import render_prompt
from vlrl.rollout import SamplingParams
from vlrl.rollout.hf import HFEngine
from vlrl.trainer.rl import RLTrainer

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_synthetic_rec(tmp_path_factory.mktemp("rec") / "train.json", size=4, seed=1)


def greedy_equals_generate(model_path: Path, data: Path, device: torch.device, dtype: str, max_new_tokens: int) -> None:
    """Every prompt's greedy completion from the engine (a batch of prompts, prefix cache
    repeated) is what `model.generate` gives for that prompt alone, up to its stop token."""
    cfg = ModelConfig(path=str(model_path), dtype=dtype, max_pixels=200704)
    processor = load_processor(cfg)
    model = load_model(cfg, device=device).eval()
    task = RefCOCO()
    samples = load_split(data, task.build_sample, frame_spec(cfg)).samples
    prompts = [render_prompt(processor, task.messages(s), s, cfg) for s in samples]
    engine = HFEngine(model, processor.tokenizer, device)
    params = SamplingParams(n=1, max_new_tokens=max_new_tokens, temperature=0.0)
    stops = engine.stop_ids.tolist()
    banned = engine.banned.nonzero().flatten().tolist()
    for prompt, generation in zip(prompts, engine.generate(prompts, params), strict=True):
        inputs = {
            "input_ids": prompt.input_ids[None].to(device),
            "attention_mask": torch.ones(1, len(prompt), dtype=torch.long, device=device),
            "mm_token_type_ids": prompt.mm_token_type_ids[None].to(device),
            **{k: v.to(device) for k, v in prompt.vision.items()},
        }
        with torch.no_grad():
            out = model.generate(
                **inputs, max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=stops, suppress_tokens=banned,
                pad_token_id=processor.tokenizer.pad_token_id,
            )  # fmt: skip
        expected = out[0, len(prompt) :].tolist()
        cut = next((i + 1 for i, t in enumerate(expected) if t in stops), len(expected))
        assert generation.completions[0].token_ids == expected[:cut]
    del model
    free(device)


def bf16_model_and_prompts(mid_model, data, device):
    """The mid-size model in bf16 on the GPU, its processor, and its prompts (of different lengths)."""
    cfg = ModelConfig(path=str(mid_model), dtype="bfloat16", max_pixels=200704)
    processor = load_processor(cfg)
    model = load_model(cfg, device=device).eval()
    task = RefCOCO()
    samples = load_split(data, task.build_sample, frame_spec(cfg)).samples
    return model, processor, [render_prompt(processor, task.messages(s), s, cfg) for s in samples]


def test_the_lean_decode_step_is_the_models_forward_bit_for_bit(mid_model, data, device):
    """models/decode_step.py against the model's own forward in bf16 on the GPU's kernels, over
    prompts of different lengths (padded rows); the HF engine's dynamic loop decodes with it."""
    model, processor, prompts = bf16_model_and_prompts(mid_model, data, device)
    assert decode_step_refusal(model) == ""
    logits, caches = decode_both(model, prompts, processor.tokenizer.pad_token_id, torch.Generator().manual_seed(0))
    assert len({len(p) for p in prompts}) > 1 and logits["model"][0].dtype == torch.bfloat16
    assert_bitwise(logits, caches)
    del model, caches
    free(device)


def test_the_lean_forward_of_completions_is_the_models_forward_bit_for_bit(mid_model, data, device):
    """The update's forward of completion tokens through the lean step (model.lean_forward)
    against the model's forward in bf16 on the GPU's kernels: the log-prob, entropy and sampling
    columns bit for bit, the gradients to bfloat16's rounding (autograd may sum a tensor's
    gradients in another order)."""
    model, processor, prompts = bf16_model_and_prompts(mid_model, data, device)
    assert isinstance(lean_forward(model), DecodeStep)
    rows, ids, mask, weights = six_completions(0, {1: 4, 3: 7})
    columns, grads = through_both(model, prompts, processor.tokenizer.pad_token_id, rows, ids, mask, weights)
    for name, want in columns[False]._asdict().items():
        assert torch.equal(getattr(columns[True], name), want), name
    assert_same_gradients(grads[True], grads[False], rounding=2**-6)
    del model, grads
    free(device)


def test_greedy_tokens_equal_transformers_generate(mid_model, data, device):
    # float32: greedy paths agree up to float32 rounding, far below a random model's logit gaps
    greedy_equals_generate(mid_model, data, device, "float32", 48)


def test_the_engine_samples_the_same_tokens_under_every_strategy(mid_model, data, device, tmp_path):
    """Inside the strategy's `gathered()`, with the run's generator seeded alike: the same
    completions as the replicated policy (step 1, before any update)."""
    tokens = {}
    for name, options in STRATEGIES.items():
        overrides = rl_overrides(
            mid_model, data, tmp_path / name.replace(" ", ""), **{**options, "rollout.engine": "hf"}
        )
        trainer = RLTrainer(load_config(None, overrides), Console(quiet=True))
        prompts = [trainer.render(RefCOCO(), s) for s in trainer.sources[0].train.samples[:2]]
        generator = torch.Generator(device=trainer.run.device).manual_seed(3)
        with trainer.sampling_weights():
            groups = trainer.engine.generate(prompts, SamplingParams(n=2, max_new_tokens=16), generator)
        tokens[name] = [[c.token_ids for c in g.completions] for g in groups]
        trainer.engine.close()
        del trainer
        free(device)
    assert all(t == tokens["replicated"] for t in tokens.values()), tokens
    assert any(len(ids) > 1 for group in tokens["replicated"] for ids in group)
