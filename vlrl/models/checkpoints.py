"""Where a checkpoint's files are: a LoRA checkpoint holds only its adapter, whose config names
the model it was added to (itself perhaps a LoRA checkpoint)."""

from __future__ import annotations

import json
from pathlib import Path

ADAPTER_CONFIG = "adapter_config.json"


def lora_base(path: str) -> str | None:
    """The base model a LoRA checkpoint's adapter was trained on (None: not a LoRA checkpoint)."""
    adapter = Path(path) / ADAPTER_CONFIG
    return json.loads(adapter.read_text())["base_model_name_or_path"] if adapter.is_file() else None


def weights_root(path: str) -> str:
    """The checkpoint with full weights under a LoRA checkpoint (an RL adapter's base may itself
    be a LoRA checkpoint: the SFT cold start it was added to)."""
    while (base := lora_base(path)) is not None:
        path = base
    return path
