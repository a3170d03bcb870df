"""Atomic checkpoints: a checkpoint directory either is complete or does not exist.

Everything is written into a hidden temporary directory, flushed to disk, then renamed to
`step-NNNNNNN`; a killed save leaves only the temporary directory, which is never loaded
and is cleaned up by the next save. A save that fails (a full disk) removes its temporary
directory and leaves the previous checkpoints as they were.

The trainer state holds only tensors and plain Python values (RNG states included), so it
loads with `torch.load(weights_only=True)`: a checkpoint from elsewhere is data, never code.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

STATE_FILE = "trainer_state.pt"
STATE_INFO = "trainer_state.json"
STATE_FORMAT = 2  # 1 (no "format" in trainer_state.json): a pickle with numpy objects, refused
STEP_DIR = re.compile(r"^step-(\d{7})$")


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be written or read; the message names it and says what to do."""


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
    """Every RNG a step draws from, as tensors and plain values (numpy's key array as a tensor)."""
    name, keys, pos, has_gauss, cached_gaussian = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": {
            "name": name,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gaussian),
        },
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "sampler": generator.get_state(),
    }


def restore_rng(state: dict[str, Any], generator: torch.Generator) -> None:
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    numpy = state["numpy"]
    keys = numpy["keys"].numpy().astype(np.uint32)
    np.random.set_state((numpy["name"], keys, numpy["pos"], numpy["has_gauss"], numpy["cached_gaussian"]))
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
    """Write step-NNNNNNN/ (HF-format model + processor + trainer state) atomically; prune old
    ones. Raises CheckpointError, with the previous checkpoints intact, when the write fails."""
    checkpoints.mkdir(parents=True, exist_ok=True)
    for stale in checkpoints.glob(".tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    final = checkpoints / f"step-{step:07d}"
    tmp = checkpoints / f".tmp-{final.name}-{os.getpid()}"
    try:
        model.save_pretrained(tmp)
        processor.save_pretrained(tmp)
        torch.save(trainer_state, tmp / STATE_FILE)
        (tmp / STATE_INFO).write_text(json.dumps({"step": step, "format": STATE_FORMAT}, indent=1) + "\n")
        _fsync_tree(tmp)
    except OSError as err:
        shutil.rmtree(tmp, ignore_errors=True)  # give back the space a partial write took
        kept = list_checkpoints(checkpoints)
        raise CheckpointError(
            f"could not write the checkpoint of step {step} in {checkpoints}: {err.strerror or err}; "
            f"the previous checkpoint {kept[-1] if kept else '(none yet)'} is intact"
        ) from err
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
    """The trainer state of a checkpoint, read as data only: a file that holds anything other
    than tensors and plain values (an old vlrl's pickle, or a tampered file) is refused unread."""
    path = checkpoint / STATE_FILE
    if not path.is_file():
        raise CheckpointError(f"{checkpoint} is not a complete vlrl checkpoint (no {STATE_FILE})")
    try:
        info = json.loads((checkpoint / STATE_INFO).read_text())
    except (OSError, ValueError):
        info = {}
    if not isinstance(info, dict) or info.get("format") != STATE_FORMAT:
        raise CheckpointError(
            f"{path} was written by an older vlrl as a Python pickle, which vlrl no longer loads (unpickling "
            f"can run code); its weights are safe to use: start a new run from them with model.path={checkpoint}"
        )
    try:
        return torch.load(path, weights_only=True, map_location="cpu")
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError) as err:
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(
            f"{path} holds something other than tensors and plain values, or is damaged; refusing to load it "
            f"({first_line})"
        ) from err
