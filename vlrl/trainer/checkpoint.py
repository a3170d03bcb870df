"""Atomic checkpoints: a checkpoint directory either is complete or does not exist.

Everything is written into a hidden temporary directory, flushed to disk, then renamed to
`step-NNNNNNN`; a killed save leaves only the temporary directory, which is never loaded
and is cleaned up by the next save.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

STATE_FILE = "trainer_state.pt"
STEP_DIR = re.compile(r"^step-(\d{7})$")


def _fsync_tree(path: Path) -> None:
    for file in path.rglob("*"):
        if file.is_file():
            with open(file, "rb") as handle:
                os.fsync(handle.fileno())
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def rng_state(generator: torch.Generator) -> dict[str, Any]:
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "sampler": generator.get_state(),
    }


def restore_rng(state: dict[str, Any], generator: torch.Generator) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    generator.set_state(state["sampler"])


def save_checkpoint(
    checkpoints: Path,
    step: int,
    model: torch.nn.Module,
    processor,
    trainer_state: dict[str, Any],
    keep_last: int,
) -> Path:
    """Write step-NNNNNNN/ (HF-format model + processor + trainer state) atomically; prune old ones."""
    checkpoints.mkdir(parents=True, exist_ok=True)
    for stale in checkpoints.glob(".tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    final = checkpoints / f"step-{step:07d}"
    tmp = checkpoints / f".tmp-{final.name}-{os.getpid()}"
    model.save_pretrained(tmp)
    processor.save_pretrained(tmp)
    torch.save(trainer_state, tmp / STATE_FILE)
    (tmp / "trainer_state.json").write_text(json.dumps({"step": step}, indent=1) + "\n")
    _fsync_tree(tmp)
    if final.exists():  # re-saving a step (a resumed run that rewinds): replace it
        shutil.rmtree(final)
    os.rename(tmp, final)
    _fsync_tree(checkpoints)
    for old in list_checkpoints(checkpoints)[:-keep_last]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(checkpoints: Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    if not checkpoints.is_dir():
        return []
    found = [p for p in checkpoints.iterdir() if STEP_DIR.match(p.name) and (p / STATE_FILE).is_file()]
    return sorted(found, key=lambda p: int(STEP_DIR.match(p.name).group(1)))


def load_trainer_state(checkpoint: Path) -> dict[str, Any]:
    path = checkpoint / STATE_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{checkpoint} is not a complete vlrl checkpoint (no {STATE_FILE})")
    return torch.load(path, weights_only=False)
