"""Sharded checkpoint state through torch.distributed.checkpoint (DCP), read as data only.

Each process writes its shards of the model's trained weights (fp32 under mixed precision) and
of AdamW's state into `directory`; DCP reshards them on load, so a run may resume on another
number of processes. DCP stores tensors raw, but its index (`.metadata`) is a Python pickle
and non-tensor values would be pickled too: only tensors are stored here (the optimizer's
plain settings go into trainer_state.pt), and the index is read with torch's weights-only
unpickler, allowing DCP's own metadata classes and nothing else, so a tampered index is
refused without running anything.
"""

from __future__ import annotations

import dataclasses
import enum
import io
import os
import pickle
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import metadata as dcp_metadata
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import (
    CURRENT_DCP_VERSION,
    FileSystemReader,
    FileSystemWriter,
    _StorageInfo,
    _StoragePrefix,
)


def _metadata_classes() -> list[Any]:
    """DCP's metadata classes (its index pickles these), and the torch types their fields hold."""
    classes = [_StorageInfo, _StoragePrefix, torch.Size, torch.memory_format, torch.dtype]
    for value in vars(dcp_metadata).values():
        if isinstance(value, type) and value.__module__ == dcp_metadata.__name__:
            if dataclasses.is_dataclass(value) or issubclass(value, enum.Enum):
                classes.append(value)
    return classes


class DataOnlyWriter(FileSystemWriter):
    """FileSystemWriter whose index is pickled with protocol 2, the one torch's weights-only
    unpickler reads (DCP's default protocol frames its pickle, which that unpickler refuses)."""

    def finish(self, metadata: dcp_metadata.Metadata, results: list) -> None:
        super().finish(metadata, results)  # writes the index; written again here
        # What the index holds, as finish() completes it (torch 2.11 completes a copy, newer
        # torch the object passed in): the storage of every write, this writer's storage meta.
        storage = {result.index: result.storage_data for writes in results for result in writes}
        complete = dataclasses.replace(
            metadata, version=CURRENT_DCP_VERSION, storage_data=storage, storage_meta=self.storage_meta()
        )
        if complete.storage_meta is not None:  # a pathlib.Path: no class of DCP's own
            complete.storage_meta.checkpoint_id = str(complete.storage_meta.checkpoint_id)
        path = self._get_metadata_path()
        with open(path, "wb") as handle:
            pickle.dump(complete, handle, protocol=2)
            handle.flush()
            os.fsync(handle.fileno())


class DataOnlyReader(FileSystemReader):
    """FileSystemReader whose index is unpickled by torch's weights-only unpickler."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> dcp_metadata.Metadata:
        path = self._get_metadata_path(kwargs.get("rank"))
        with open(path, "rb") as handle:
            raw = handle.read()
        try:
            with torch.serialization.safe_globals(_metadata_classes()):
                metadata = torch._weights_only_unpickler.Unpickler(io.BytesIO(raw)).load()
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as err:
            raise ValueError(
                f"{path} is not a sharded-checkpoint index vlrl reads, or is damaged; refusing it ({err})"
            ) from err
        if not isinstance(metadata, dcp_metadata.Metadata):
            raise ValueError(f"{path} holds a {type(metadata).__name__}, not a sharded-checkpoint index")
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = dcp_metadata.StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


def _tensors_only(tree: Any, where: str = "") -> None:
    if isinstance(tree, dict):
        for key, value in tree.items():
            _tensors_only(value, f"{where}.{key}" if where else str(key))
    elif not isinstance(tree, torch.Tensor):
        raise TypeError(f"sharded state holds a {type(tree).__name__} at {where}: only tensors are stored (no pickles)")


def _first_failure(err: CheckpointException) -> str:
    """DCP raises one CheckpointException (a BaseException) for every process's failure."""
    failure, _ = next(iter(err.failures.values()))
    return f"{type(failure).__name__}: {failure}"


def save_sharded(state: dict[str, Any], directory: Path) -> None:
    """Every process writes its shards of `state` (nested dicts of tensors and DTensors); a
    failed write (on any process) raises OSError on every process."""
    _tensors_only(state)
    try:
        dcp.save(state, storage_writer=DataOnlyWriter(str(directory)))
    except CheckpointException as err:
        raise OSError(f"writing the sharded state failed: {_first_failure(err)}") from err


def load_sharded(state: dict[str, Any], directory: Path) -> None:
    """Fill `state` (the same structure, this run's shards) in place from `directory`; raises
    ValueError when its index is not DCP's data or the shards do not fit `state`."""
    if not (directory / ".metadata").is_file():
        raise ValueError(f"{directory} holds no sharded state (.metadata is missing)")
    reader = DataOnlyReader(str(directory))
    reader.read_metadata()  # refused here, with its own message, before DCP reads it
    try:
        dcp.load(state, storage_reader=reader)
    except CheckpointException as err:
        raise ValueError(f"{directory}: {_first_failure(err)}") from err
