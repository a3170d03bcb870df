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
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vlrl.config import first_line
from vlrl.models.checkpoints import KEPT_BASE, lora_base
from vlrl.parallel.base import Strategy
from vlrl.parallel.distributed import Processes

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


def staging_dir(checkpoints: Path, step: int) -> Path:
    """A fresh hidden directory to write the checkpoint of `step` into (by process 0; under
    several processes each writes its part into it); the leftovers of killed saves go."""
    checkpoints.mkdir(parents=True, exist_ok=True)
    for stale in checkpoints.glob(".tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = checkpoints / f".tmp-step-{step:07d}-{os.getpid()}"
    tmp.mkdir()
    return tmp


def write_trainer_state(directory: Path, step: int, trainer_state: dict[str, Any]) -> None:
    torch.save(trainer_state, directory / STATE_FILE)
    (directory / STATE_INFO).write_text(json.dumps({"step": step, "format": STATE_FORMAT}, indent=1) + "\n")


def why_unwritten(err: Exception) -> str:
    """A failed write's reason in one line: an OSError's own words, another error's first line
    with its type (safetensors raises SafetensorError, tokenizers Exception, torch.save a
    RuntimeError when the disk fills)."""
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    return f"{type(err).__name__}: {first_line(err)}"


def save_failed(checkpoints: Path, tmp: Path | None, step: int, reason: str) -> CheckpointError:
    """Give back the space a partial write took; the error says which checkpoint is intact."""
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)
    kept = list_checkpoints(checkpoints)
    return CheckpointError(
        f"could not write the checkpoint of step {step} in {checkpoints}: {reason}; "
        f"the previous checkpoint {kept[-1] if kept else '(none yet)'} is intact"
    )


def set_aside_after(run_dir: Path, step: int) -> list[Path]:
    """A run resumed at `step` from its own checkpoint (trainer.resume=PATH, rewinding): its
    checkpoints of later steps belong to the timeline left behind; they are moved, whole, to
    RUN/rewound/<time>/ (never resumed from, never pruned) so that `resume=auto` and pruning see
    only the new one. The moved directories, in step order."""
    later = [p for p in list_checkpoints(run_dir / "checkpoints") if checkpoint_step(p) > step]
    if not later:
        return []
    aside = run_dir / "rewound" / time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    aside.mkdir(parents=True, exist_ok=True)
    return [Path(shutil.move(str(p), str(aside / p.name))) for p in later]


def commit_checkpoint(checkpoints: Path, tmp: Path, step: int, keep_last: int) -> Path:
    """Flush the complete `tmp`, rename it to step-NNNNNNN, prune the oldest beyond keep_last."""
    _fsync_tree(tmp)
    final = checkpoints / f"step-{step:07d}"
    if final.exists():  # re-saving a step (a resumed run that rewinds): replace it
        shutil.rmtree(final)
    os.rename(tmp, final)
    _fsync_tree(checkpoints)
    prune(checkpoints, keep_last)
    return final


def prune(checkpoints: Path, keep_last: int) -> None:
    """Remove all but the last `keep_last` checkpoints (no later step is there: set_aside_after).
    Each is renamed out of the way first, so that a kill while it is deleted leaves a `.tmp-`
    folder the next save sweeps (`staging_dir`), not a half-deleted step folder no listing sees."""
    for old in list_checkpoints(checkpoints)[:-keep_last]:
        doomed = old.with_name(f".tmp-pruned-{old.name}-{os.getpid()}")
        os.rename(old, doomed)
        shutil.rmtree(doomed, ignore_errors=True)


def write_checkpoint(
    checkpoints: Path,
    step: int,
    state: dict[str, Any],
    strategy: Strategy,
    processor,
    procs: Processes,
    generator: torch.Generator,
    keep_last: int,
    parts: dict[str, dict[str, Any]] | None = None,
) -> Path:
    """Every process writes its part into one staging directory (process 0: the trainer `state`,
    the processor and, through the strategy, the HF-format model; each other process its random
    generators; under FSDP2 each its shards; every process its own `parts`, name -> state, in
    NAME-process-NNNNN.pt); process 0 renames it to step-NNNNNNN when all are done and prunes
    old ones. Raises CheckpointError on every process, with the previous checkpoints intact,
    when any process could not write its part."""
    main = procs.main
    failure, tmp = "", None
    if main:
        try:
            tmp = staging_dir(checkpoints, step)
        except OSError as err:
            failure = err.strerror or str(err)
    shared = procs.gather([str(tmp or "")] if main else [])[0]
    if shared:
        tmp = Path(shared)
        try:
            strategy.save(tmp, main)
            if main:
                processor.save_pretrained(tmp)
                write_trainer_state(tmp, step, state)
            else:
                torch.save(rng_state(generator), rng_file(tmp, procs.rank))
            for name, part in (parts or {}).items():
                torch.save(part, process_file(tmp, name, procs.rank))
        except Exception as err:  # a full disk: OSError, or safetensors', tokenizers' and torch.save's own errors
            failure = why_unwritten(err)
    failures = procs.gather([f"process {procs.rank}: {failure}" if procs.world > 1 else failure] if failure else [])
    if failures or not shared:  # every process stops if any could not write its part
        raise save_failed(checkpoints, tmp if main else None, step, "; ".join(failures))
    final = None
    with procs.together():  # a flush or rename that fails (a full disk) stops every process
        try:
            final = commit_checkpoint(checkpoints, tmp, step, keep_last) if main else None
        except OSError as err:
            raise save_failed(checkpoints, tmp, step, err.strerror or str(err)) from err
    return final or list_checkpoints(checkpoints)[-1]


def keep_base(checkpoint: Path, kept: Path) -> str:
    """A run that starts from another run's checkpoint keeps its model files as its own: hard
    links in `kept` (RUN/base), which take no space and outlive the checkpoint when its run
    prunes it (keep_last) or is deleted; checkpoints are never written in place, so the links
    always hold what the run started from. The trainer state, optimizer and process files are
    not linked: a base is a model. Returns "" when kept, else why not (another filesystem:
    nothing is copied, the run then reads `checkpoint` itself)."""
    shutil.rmtree(kept, ignore_errors=True)  # a new run's: a stale one of an earlier start goes
    staging = kept.with_name(f".{kept.name}-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        link_model(checkpoint, staging)
    except OSError as err:
        shutil.rmtree(staging, ignore_errors=True)
        return err.strerror or str(err)
    os.rename(staging, kept)
    return ""


def link_model(source: Path, into: Path) -> None:
    """`source`'s model files hard-linked into `into`; a LoRA checkpoint's base too, into
    `into`/KEPT_BASE, where that base is a run's (its checkpoint, or its RUN/base), which the run
    may prune or delete: recursively, down an RL adapter on an SFT adapter to the full weights.
    `lora_base` reads a kept adapter's base there once the recorded one is gone."""
    into.mkdir(parents=True)
    for file in source.iterdir():
        if file.is_file() and file.name not in (STATE_FILE, STATE_INFO) and "-process-" not in file.name:
            os.link(file, into / file.name)
    base = lora_base(str(source))
    if base is not None and runs_own(Path(base)):
        link_model(Path(base), into / KEPT_BASE)


def runs_own(path: Path) -> bool:
    """Whether `path` belongs to a vlrl run, which may prune or delete it: a checkpoint, or a
    run's kept base (RUN/base beside RUN/checkpoints)."""
    return is_checkpoint(path) or (path.name == KEPT_BASE and (path.parent / "checkpoints").is_dir())


def is_checkpoint(path: Path) -> bool:
    """Whether `path` is a checkpoint of a vlrl run (which that run may prune): a step-NNNNNNN
    folder, which only a complete save renames into place. One that lost its trainer state since
    is listed all the same: resuming names it (`load_trainer_state`) instead of passing over it,
    to an earlier checkpoint or to none, and training over its steps."""
    return bool(STEP_DIR.match(path.name)) and path.is_dir()


def process_file(directory: Path, name: str, rank: int) -> Path:
    """Where process `rank` keeps its own state `name` in a checkpoint."""
    return directory / f"{name}-process-{rank:05d}.pt"


def rng_file(directory: Path, rank: int) -> Path:
    """Where process `rank` (> 0) keeps its random generators; process 0's are in the trainer state."""
    return process_file(directory, "rng", rank)


def load_process_rng(checkpoint: Path, rank: int) -> dict[str, Any] | None:
    """Process `rank`'s saved generators, read as data only; None if the checkpoint has none
    for it (written by fewer processes, or by an older vlrl)."""
    return load_process_state(checkpoint, "rng", rank)


def load_process_state(checkpoint: Path, name: str, rank: int) -> dict[str, Any] | None:
    """Process `rank`'s state `name`, read as data only (tensors and plain values); None if the
    checkpoint has none for it."""
    path = process_file(checkpoint, name, rank)
    if not path.is_file():
        return None
    try:
        return torch.load(path, weights_only=True, map_location="cpu")
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError) as err:
        raise CheckpointError(
            f"{path} holds something other than tensors and plain values, or is damaged; refusing it"
        ) from err


def list_checkpoints(checkpoints: Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    if not checkpoints.is_dir():
        return []
    return sorted(filter(is_checkpoint, checkpoints.iterdir()), key=checkpoint_step)


def checkpoint_step(checkpoint: Path) -> int:
    """The step a checkpoint directory step-NNNNNNN was written after."""
    return int(STEP_DIR.match(checkpoint.name).group(1))  # type: ignore[union-attr]


def load_trainer_state(checkpoint: Path) -> dict[str, Any]:
    """The trainer state of a checkpoint, read as data only: a file that holds anything other
    than tensors and plain values (an old vlrl's pickle, or a tampered file) is refused unread."""
    path = checkpoint / STATE_FILE
    if not path.is_file() or not (checkpoint / STATE_INFO).is_file():
        missing = STATE_FILE if not path.is_file() else STATE_INFO
        raise CheckpointError(f"{checkpoint} is not a complete vlrl checkpoint (no {missing})")
    try:
        info = json.loads((checkpoint / STATE_INFO).read_text())
    except (OSError, ValueError) as err:
        raise CheckpointError(
            f"{checkpoint / STATE_INFO} is damaged ({first_line(err)}): resume from another checkpoint"
        ) from err
    if not isinstance(info, dict) or info.get("format") != STATE_FORMAT:
        raise CheckpointError(
            f"{path} was written by an older vlrl as a Python pickle, which vlrl no longer loads (unpickling "
            f"can run code); its weights are safe to use: start a new run from them with model.path={checkpoint}"
        )
    try:
        return torch.load(path, weights_only=True, map_location="cpu")
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError) as err:
        raise CheckpointError(
            f"{path} holds something other than tensors and plain values, or is damaged; refusing to load it "
            f"({first_line(err)})"
        ) from err
