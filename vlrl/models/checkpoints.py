"""Where a checkpoint's files are: a local directory, a model already in the local Hugging Face
cache named by its hub id (never downloaded), and a LoRA checkpoint, which holds only its
adapter, whose config names the model it was added to (itself perhaps a LoRA checkpoint)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from vlrl.config import ConfigError

ADAPTER_CONFIG = "adapter_config.json"
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")  # org/name, as the hub names a model
# RUN/base: a run's links to its base model when that is another run's checkpoint; a kept LoRA
# checkpoint's own base is kept inside it under the same name (trainer/checkpoint.py keep_base)
KEPT_BASE = "base"


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
    a hub id there (as PEFT records one) is the cached snapshot. The adapter records its base
    by absolute path: a run's kept base (RUN/base) that is not there any more (the run was
    moved, or the base was another run's, deleted since) is read where vlrl keeps it beside the
    adapter: inside a kept checkpoint (`KEPT_BASE`), or in its run (RUN/checkpoints/step-N ->
    RUN/base)."""
    adapter = Path(path) / ADAPTER_CONFIG
    if not adapter.is_file():
        return None
    recorded = json.loads(adapter.read_text())["base_model_name_or_path"]
    base = local_path(recorded)
    if Path(base).exists() or HUB_ID.fullmatch(recorded):
        return base
    if Path(recorded).name == KEPT_BASE:
        here = Path(path)
        for kept in (here / KEPT_BASE, here.parent.parent / KEPT_BASE if here.parent.name == "checkpoints" else None):
            if kept is not None and kept.is_dir():
                return str(kept)
    raise ConfigError(
        f"{path} is a LoRA checkpoint whose base model {recorded} (its {ADAPTER_CONFIG}) is not there: put the "
        "base back there, or evaluate a checkpoint of a run that kept it"
    )


def weights_root(path: str) -> str:
    """The checkpoint with full weights under a LoRA checkpoint (an RL adapter's base may itself
    be a LoRA checkpoint: the SFT cold start it was added to)."""
    path = local_path(path)
    while (base := lora_base(path)) is not None:
        path = base
    return path
