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
