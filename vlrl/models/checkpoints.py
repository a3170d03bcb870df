"""Where a checkpoint's files are: a local directory, a model already in the local Hugging Face
cache named by its hub id (never downloaded), and a LoRA checkpoint, which holds only its
adapter, whose config names the model it was added to (itself perhaps a LoRA checkpoint)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

ADAPTER_CONFIG = "adapter_config.json"
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")  # org/name, as the hub names a model


def hub_snapshot(name: str) -> str | None:
    """The local snapshot of hub model `name` (Qwen/Qwen2.5-VL-3B-Instruct) in the Hugging Face
    cache (HF_HUB_CACHE, else HF_HOME/hub), as `huggingface-cli download` leaves it; None when
    `name` is a local path, no hub id, or not in the cache. Never goes online."""
    if Path(name).exists() or not HUB_ID.fullmatch(name):
        return None
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(name, local_files_only=True, cache_dir=os.environ.get("HF_HUB_CACHE") or None)
    except (OSError, ValueError):  # not in the cache (LocalEntryNotFoundError), or not a valid id
        return None


def local_path(path: str) -> str:
    """`path`, or the cached snapshot of the hub model it names."""
    return hub_snapshot(path) or path


def lora_base(path: str) -> str | None:
    """The base model a LoRA checkpoint's adapter was trained on (None: not a LoRA checkpoint);
    a hub id there (as PEFT records one) is the cached snapshot."""
    adapter = Path(path) / ADAPTER_CONFIG
    return local_path(json.loads(adapter.read_text())["base_model_name_or_path"]) if adapter.is_file() else None


def weights_root(path: str) -> str:
    """The checkpoint with full weights under a LoRA checkpoint (an RL adapter's base may itself
    be a LoRA checkpoint: the SFT cold start it was added to)."""
    path = local_path(path)
    while (base := lora_base(path)) is not None:
        path = base
    return path
