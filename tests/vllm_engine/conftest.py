"""The vLLM tests run in the second environment `make setup-vllm` builds (.venv-vllm), where
vLLM's CPU build is installed; `make test` runs them there. Everything in this folder is
marked `vllm`, and the main environment's run deselects it."""

from __future__ import annotations

import pytest

from vlrl.testing.tiny import tiny_checkpoint, tiny_spec

TINY_VLLM = "tiny:qwen2_5_vl-h32"  # head size 32: vLLM's CPU attention has no kernel for the default's 16
KV_CACHE = 64 << 20  # bytes: plenty for the tiny model, and vLLM starts fast


def pytest_collection_modifyitems(config, items):
    import importlib.util

    missing = importlib.util.find_spec("vllm") is None
    for item in items:
        if "/tests/vllm_engine/" in str(item.fspath):
            item.add_marker(pytest.mark.vllm)
            if missing:
                item.add_marker(pytest.mark.skip(reason="vLLM is not installed here: `make test` runs these in .venv-vllm"))


@pytest.fixture(scope="session")
def tiny_vllm_path():
    return tiny_checkpoint(tiny_spec(TINY_VLLM))


def pytest_configure(config):  # noqa: ARG001
    import importlib.util
    import os

    if importlib.util.find_spec("vllm") is None:
        if os.environ.get("VLRL_REQUIRE_VLLM") == "1":  # `make test` runs this folder in .venv-vllm
            raise pytest.UsageError("VLRL_REQUIRE_VLLM=1 but vllm is not importable: rebuild .venv-vllm (make setup-vllm)")


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
