"""Shared fixtures: tiny checkpoints and synthetic data, built once per test session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a test that reaches for a hub fails instead of hanging
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_qwen25(tmp_path_factory) -> Path:
    from vlrl.models.build import TinySpec
    from vlrl.models.tiny import tiny_checkpoint

    return tiny_checkpoint(TinySpec(arch="qwen2_5_vl"))


@pytest.fixture(scope="session")
def tiny_qwen2(tmp_path_factory) -> Path:
    from vlrl.models.build import TinySpec
    from vlrl.models.tiny import tiny_checkpoint

    return tiny_checkpoint(TinySpec(arch="qwen2_vl"))


@pytest.fixture(scope="session")
def video_qa_data(tmp_path_factory) -> Path:
    """A small synthetic Video-R1 split: moving-shape and counting clips, and still images."""
    from data_prep.video import write_synthetic_video_qa

    return write_synthetic_video_qa(tmp_path_factory.mktemp("video_qa") / "train.json", 6, seed=0, n_frames=8)


@pytest.fixture(scope="session")
def rec_data(tmp_path_factory) -> Path:
    """A small synthetic RefCOCO split in VLM-R1's REC json format."""
    from data_prep.refcoco import write_synthetic_rec

    return write_synthetic_rec(tmp_path_factory.mktemp("rec") / "train.json", size=12, seed=0)


@pytest.fixture(scope="session", autouse=True)
def tiny_checkpoints_load_once():
    """Each cached tiny checkpoint's model and processor loaded once per test process, every later
    load handed a deep copy (its own parameters, buffers and config): a load costs ~0.1 s and a
    copy ~0.01 s, and the suite loads them thousands of times. Only the checkpoints under the tiny
    cache, built once and never written again, are kept; other paths (a run's checkpoints, a
    damaged copy) load from their files every time. A model whose loading draws from torch's
    random generator is loaded anew every time too, so what a test draws after a load is what it
    would draw without this."""
    import copy

    import torch

    from vlrl.models.base import ModelFamily
    from vlrl.models.tiny import cache_dir

    tiny = (cache_dir() / "tiny").resolve()
    models: dict[tuple, torch.nn.Module | None] = {}
    processors: dict[tuple, object] = {}
    load_model, load_processor = ModelFamily.load_model, ModelFamily.load_processor

    def cached(path) -> bool:
        return Path(path).resolve().is_relative_to(tiny)

    def model_once(self, path, dtype, attn_implementation):
        key = (type(self), str(path), dtype, attn_implementation)
        if cached(path) and key not in models:
            before = torch.random.get_rng_state()
            model = load_model(self, path, dtype, attn_implementation)
            drew = not torch.equal(before, torch.random.get_rng_state())
            models[key] = None if drew else copy.deepcopy(model)
            return model
        kept = models.get(key)
        return load_model(self, path, dtype, attn_implementation) if kept is None else copy.deepcopy(kept)

    def processor_once(self, path):
        key = (type(self), str(path))
        if not cached(path):
            return load_processor(self, path)
        if key not in processors:
            processors[key] = load_processor(self, path)
        return copy.deepcopy(processors[key])

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ModelFamily, "load_model", model_once)
        patch.setattr(ModelFamily, "load_processor", processor_once)
        yield
