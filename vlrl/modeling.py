"""Loading a Qwen-VL policy and its processor from a local checkpoint."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch

from vlrl.config import MODEL_PATH_MISSING, ConfigError, ModelConfig
from vlrl.data import FrameSpec
from vlrl.testing.tiny import resolve_tiny, tiny_spec
from vlrl.vision.frames import FrameKind

SUPPORTED = {"qwen2_5_vl": "absolute", "qwen2_vl": "norm1000"}


def model_type(path: str) -> str | None:
    """The checkpoint's model_type, read from config.json (None if there is none to read)."""
    config = Path(weights_root(path)) / "config.json"
    if not config.is_file():
        return None
    return json.loads(config.read_text()).get("model_type")


def frame_kind(cfg: ModelConfig) -> FrameKind:
    """The coordinate frame the model writes: explicit, or from the checkpoint's architecture."""
    if cfg.coord_frame != "auto":
        return cfg.coord_frame
    path = cfg.path
    if path.startswith("tiny:"):
        return SUPPORTED[tiny_spec(path).arch]
    kind = model_type(path) if path else None
    if kind in SUPPORTED:
        return SUPPORTED[kind]
    # No local checkpoint (scoring without a model): go by the name, Qwen2.5-VL by default.
    return "norm1000" if "qwen2-vl" in Path(path).name.lower() else "absolute"


def frame_spec(cfg: ModelConfig) -> FrameSpec:
    return FrameSpec(frame_kind(cfg), cfg.min_pixels, cfg.max_pixels)


def torch_dtype(name: str) -> torch.dtype:
    """model.dtype as a torch dtype; auto: bfloat16 on a GPU that has it, else float32."""
    if name == "auto":
        if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    return getattr(torch, name)


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


def checkpoint_path(cfg: ModelConfig) -> str:
    """The local directory to load from; fails early (naming model.path) if there is none."""
    if not cfg.path:
        raise ConfigError(MODEL_PATH_MISSING)
    path = resolve_tiny(cfg.path)
    if lora_base(path) is not None:
        return path
    if not (Path(path) / "config.json").is_file():
        raise ConfigError(
            f"config: model.path {cfg.path!r} is not a local checkpoint (no config.json); "
            "vlrl loads local directories only: download the model first, or use tiny:qwen2_5_vl"
        )
    kind = model_type(path)
    if kind not in SUPPORTED:
        raise ConfigError(f"config: model.path {cfg.path!r} is a {kind!r} model; supported: {', '.join(SUPPORTED)}")
    return path


def load_processor(cfg: ModelConfig, path: str | None = None):
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(path or checkpoint_path(cfg))
    processor.tokenizer.padding_side = "left"
    return processor


def pretrained(cfg: ModelConfig, path: str) -> torch.nn.Module:
    """The plain transformers model at `path`; a LoRA checkpoint is merged into its base
    (recursively: an RL adapter on an SFT adapter on a base model)."""
    from transformers import AutoModelForImageTextToText

    base = lora_base(path)
    if base is None:
        return AutoModelForImageTextToText.from_pretrained(
            path, dtype=torch_dtype(cfg.dtype), attn_implementation=cfg.attn_implementation
        )
    from peft import PeftModel

    # PEFT froze the base to load the adapter: unfrozen again, as any from_pretrained model
    return PeftModel.from_pretrained(pretrained(cfg, base), path).merge_and_unload().requires_grad_(True)


def load_model(cfg: ModelConfig, path: str | None = None, device: str | torch.device = "cpu") -> torch.nn.Module:
    """The policy (or reference) model; LoRA adapters and vision freezing as configured.

    A LoRA checkpoint as model.path (an SFT cold start) is merged into its base: a run starts
    from that model, its reference is that model, and with model.lora.r > 0 the run trains a
    new adapter on top of it (whose adapter_config.json names model.path as its base). A LoRA
    checkpoint given as `path` (a run's own, to resume or evaluate) keeps its adapter on its
    base, trainable when the config trains LoRA adapters."""
    model_path = path or checkpoint_path(cfg)
    base = lora_base(model_path) if path else None
    model = pretrained(cfg, base or model_path).to(device)
    if cfg.freeze_vision:
        for param in model.model.visual.parameters():
            param.requires_grad_(False)
    if base is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, model_path, is_trainable=cfg.lora.r > 0).to(device)
    elif cfg.lora.r > 0:
        from peft import LoraConfig, get_peft_model

        names = "|".join(cfg.lora.target_modules)
        lora = LoraConfig(
            r=cfg.lora.r,
            lora_alpha=cfg.lora.alpha,
            lora_dropout=cfg.lora.dropout,
            target_modules=rf"^(?!.*visual).*\.({names})$",  # the language model only
        )
        model = get_peft_model(model, lora)
        model.peft_config["default"].base_model_name_or_path = model_path  # what the adapter was added to
    return model


def core_model(model: torch.nn.Module) -> torch.nn.Module:
    """The *ForConditionalGeneration under any PEFT wrapper."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


@torch.no_grad()
def full_weights(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """The policy's full weights by their transformers names, for an engine that holds its own
    copy (LoRA merged: `transformers_weights`)."""
    base = core_model(model)
    yield from transformers_weights(base, base.state_dict().items())


@torch.no_grad()
def transformers_weights(
    base: torch.nn.Module, tensors: Iterable[tuple[str, torch.Tensor]]
) -> Iterator[tuple[str, torch.Tensor]]:
    """`tensors` of `base` (the model under any PEFT wrapper, by names relative to it) as a
    plain transformers model holds them: LoRA adapters are merged out of place (W + scale * B A,
    summed in float32, in W's dtype), so the policy is never modified and no merge/unmerge
    rounding creeps into it; the adapters' own tensors are left out."""
    for key, tensor in tensors:
        if ".lora_" in key:
            continue
        if key.endswith(".base_layer.weight"):
            from peft.tuners.lora import LoraLayer

            module = base.get_submodule(key.removesuffix(".base_layer.weight"))
            if isinstance(module, LoraLayer) and not module.disable_adapters:
                delta = sum(module.get_delta_weight(a).float() for a in module.active_adapters if a in module.lora_A)
                tensor = (tensor.float() + delta).to(tensor.dtype)
        yield key.replace(".base_layer.", "."), tensor
