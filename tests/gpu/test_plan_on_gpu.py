"""`vlrl plan` against the GPU at Qwen2.5-VL-3B's shape: for each strategy and checkpointing
setting the plan says fits this card, one RL step of that configuration peaks within 10% of
the plan's estimate (torch's allocator peak, what the plan counts).

The workload is the one the plan assumes: the HF engine sampling every completion to
max_new_tokens (a random-weight model rarely draws a stop token from 151,936), and micro-batches
of one prompt with its G completions (the token budget is one prompt plus G x max_new_tokens).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from data_prep.refcoco import write_synthetic_rec
from tests.gpu.runs import rl_run
from vlrl.app.plan import fits, memory, variants
from vlrl.config import load_config
from vlrl.models.build import TinySpec
from vlrl.models.memory import GB, TEXT_TOKENS, Workload, model_shape
from vlrl.models.tiny import SHAPES, cache_dir, cache_key, write_tiny_checkpoint
from vlrl.rollout import choose_engine

pytestmark = pytest.mark.gpu

MAX_PIXELS = 200704  # images of at most 256 tokens
GENERATIONS, MAX_NEW = 4, 128


@pytest.fixture(scope="module")
def shape_model(device) -> Path:
    """Qwen2.5-VL-3B's shape (the tiny model on the CPU), drawn on the device, cached."""
    spec = SHAPES["qwen2.5-vl-3b"] if device.type == "cuda" else TinySpec()
    path = cache_dir() / "tiny" / cache_key(spec)
    if not (path / "vlrl_tiny_spec.json").is_file():
        write_tiny_checkpoint(path, spec, device.type)
    return path


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_synthetic_rec(tmp_path_factory.mktemp("rec") / "train.json", size=8, seed=3)


def configurations(model: Path, device: torch.device) -> list[tuple[str, bool, float, dict]]:
    """(strategy, checkpointing, estimated peak bytes, overrides) of what fits this device."""
    image_tokens = MAX_PIXELS // (28 * 28)
    budget = TEXT_TOKENS + image_tokens + GENERATIONS * MAX_NEW
    base = {
        "model.path": str(model), "model.max_pixels": MAX_PIXELS, "rollout.engine": "hf",
        "rollout.num_generations": GENERATIONS, "rollout.max_new_tokens": MAX_NEW, "trainer.prompts_per_step": 2,
        "trainer.token_budget": budget, "trainer.steps": 1,
    }  # fmt: skip
    cfg = load_config(None, [f"{k}={v}" for k, v in base.items()])
    memory_gb = torch.cuda.get_device_properties(device).total_memory / GB if device.type == "cuda" else 80.0
    work = Workload.of(cfg, 1, memory_gb, image_tokens)
    shape, engine = model_shape(cfg), choose_engine("hf", {})
    out = []
    for label, cls, options in variants():  # every registered strategy's configurations
        chosen = {"trainer.parallel": cls.name}
        if options is not None:
            chosen |= {f"trainer.{cls.options_key}.{k}": v for k, v in dataclasses.asdict(options).items()}
        for checkpointing in (False, True):
            terms = memory(shape, work, cls.memory(shape, work, options), engine, checkpointing)
            if fits(terms, work):
                out.append(
                    (
                        label,
                        checkpointing,
                        terms["peak"],
                        {**base, **chosen, "trainer.gradient_checkpointing": checkpointing},
                    )
                )
    return out


def test_the_plans_peak_is_within_10_percent_of_each_configuration_it_says_fits(shape_model, data, device, tmp_path):
    planned = configurations(shape_model, device)
    assert planned, "the plan says nothing fits one GPU"
    errors = {}
    for strategy, checkpointing, estimate, overrides in planned:
        outcome = rl_run(shape_model, data, tmp_path / f"{strategy}-{checkpointing}".replace(" ", ""), **overrides)
        assert outcome.rows[0]["completion_length"] > MAX_NEW / 2  # the workload the plan assumes
        if device.type == "cuda":
            errors[f"{strategy}, checkpointing {checkpointing}"] = (estimate - outcome.peak_bytes) / outcome.peak_bytes
    assert all(abs(e) <= 0.10 for e in errors.values()), errors
