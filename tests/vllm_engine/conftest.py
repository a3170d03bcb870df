"""The vLLM tests run in the second environment `make setup-vllm` builds (.venv-vllm), where
vLLM's CPU build is installed; `make test` runs them there. Everything in this folder is
marked `vllm`, and the main environment's run deselects it."""

from __future__ import annotations

import pytest

from vlrl.models.families import tiny_spec
from vlrl.models.tiny import tiny_checkpoint

TINY_VLLM = "tiny:qwen2_5_vl-h32"  # head size 32: vLLM's CPU attention has no kernel for the default's 16
KV_CACHE = 64 << 20  # bytes: plenty for the tiny model, and vLLM starts fast


def reference_logprobs(model, processor, prompts, generations, temperature: float, sampler=None):
    """The engine's log-probs of its sampled tokens and the HF policy's, under the distribution
    the engine samples from (logits / T, the family's vision tokens and the padded vocabulary
    removed, then `sampler`'s filters where given), both (R, T) and zero past each completion."""
    import torch

    from vlrl.models.batch import collate
    from vlrl.models.loading import family_of_model
    from vlrl.models.policy import completion_logits
    from vlrl.rollout.base import banned_token_ids, completion_rows

    pad = processor.tokenizer.pad_token_id
    r = completion_rows(generations, pad)
    with torch.no_grad():
        logits = completion_logits(model, collate(prompts, pad), r.rows, r.ids, r.mask).float()
    logits[..., banned_token_ids(processor.tokenizer, logits.shape[-1], family_of_model(model).vision_tokens)] = float(
        "-inf"
    )
    scaled = logits / temperature
    scaled = scaled if sampler is None else sampler.apply(scaled)
    logp = torch.log_softmax(scaled, dim=-1).gather(-1, r.ids[..., None]).squeeze(-1)
    return logp * r.mask, r.logprobs * r.mask


def pytest_collection_modifyitems(config, items):
    import importlib.util

    missing = importlib.util.find_spec("vllm") is None
    for item in items:
        if "/tests/vllm_engine/" in str(item.fspath):
            item.add_marker(pytest.mark.vllm)
            if missing:
                item.add_marker(
                    pytest.mark.skip(reason="vLLM is not installed here: `make test` runs these in .venv-vllm")
                )


@pytest.fixture(scope="session")
def tiny_vllm_path():
    return tiny_checkpoint(tiny_spec(TINY_VLLM))


def pytest_configure(config):
    import importlib.util
    import os

    if importlib.util.find_spec("vllm") is None:
        if os.environ.get("VLRL_REQUIRE_VLLM") == "1":  # `make test` runs this folder in .venv-vllm
            raise pytest.UsageError(
                "VLRL_REQUIRE_VLLM=1 but vllm is not importable: rebuild .venv-vllm (make setup-vllm)"
            )


@pytest.fixture(scope="session")
def vllm_config(tiny_vllm_path):
    """A Config for the tiny vLLM model in float32 with a small KV cache, plus overrides."""
    from vlrl.config import load_config

    def make(**overrides):
        values = {
            "model.path": str(tiny_vllm_path),
            "model.dtype": "float32",
            "rollout.vllm.kv_cache_memory_bytes": KV_CACHE,
            **overrides,
        }
        return load_config(None, [f"{k}={v}" for k, v in values.items()])

    return make
