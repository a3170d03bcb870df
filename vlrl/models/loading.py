"""Loading a policy and its processor from a local checkpoint, through its model family."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import pickle
import re
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch

from vlrl.config import MODEL_PATH_MISSING, ConfigError, ModelConfig, absolute_if_local, first_line
from vlrl.data.records import FrameSpec
from vlrl.models.checkpoints import HUB_ID, local_path, lora_base, weights_root
from vlrl.models.families import (
    checkpoint_model_type,
    family_of_model,
    model_family,
    processor_resize,
    supported_model_types,
)
from vlrl.models.float32_head import float32_head
from vlrl.models.lora import merged_weight, targeted_parameters
from vlrl.models.patch_embed import linear_patch_embedding
from vlrl.models.tiny import resolve_tiny
from vlrl.models.vision_attention import grouped_vision_attention
from vlrl.vision.frames import FrameKind


def frame_kind(cfg: ModelConfig) -> FrameKind:
    """The coordinate frame the model writes: explicit, or its family's."""
    if cfg.coord_frame != "auto":
        return cfg.coord_frame
    return model_family(cfg).coord_frame


def frame_spec(cfg: ModelConfig) -> FrameSpec:
    return FrameSpec(frame_kind(cfg), cfg.min_pixels, cfg.max_pixels, model_family(cfg).factor, processor_resize(cfg))


def torch_dtype(name: str) -> torch.dtype:
    """model.dtype as a torch dtype; auto: bfloat16 on a GPU that has it, else float32."""
    if name == "auto":
        if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    return getattr(torch, name)


def checkpoint_path(cfg: ModelConfig) -> str:
    """The local directory to load from; fails early (naming model.path) if there is none, or
    if no model could load as configured (`require_attention`): before any data is read."""
    if not cfg.path:
        raise ConfigError(MODEL_PATH_MISSING)
    require_attention(cfg)
    path = local_path(resolve_tiny(cfg.path))
    if lora_base(path) is not None:
        return path
    if not (Path(path) / "config.json").is_file():
        raise ConfigError(not_found(cfg.path))
    kind = checkpoint_model_type(path)
    family = model_family(cfg)
    if kind not in family.model_types:
        claimed = f"the {family.name!r} family (model.family) loads {', '.join(family.model_types)}"
        supported = claimed if cfg.family != "auto" else f"supported: {', '.join(supported_model_types())}"
        raise ConfigError(f"config: model.path {cfg.path!r} is a {kind!r} model; {supported}")
    return path


def checkpoint_repetition_penalty(cfg: ModelConfig) -> float:
    """The repetition penalty the checkpoint's generation_config.json names (1.0 where it names
    none), which transformers' generate applies when its caller names none."""
    path = Path(checkpoint_path(cfg)) / "generation_config.json"
    if not path.is_file():
        return 1.0
    try:
        value = json.loads(path.read_text()).get("repetition_penalty", 1.0)
    except (OSError, ValueError, AttributeError) as err:
        raise ConfigError(f"{path}: not a JSON object of generation settings ({first_line(err)})") from err
    if value is None:
        return 1.0
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(f"{path}: repetition_penalty should be a number > 0, got {value!r}")
    return float(value)


def require_attention(cfg: ModelConfig) -> None:
    """The attention implementation's package is there (flash-attn: a CUDA machine's)."""
    if cfg.attn_implementation == "flash_attention_2" and importlib.util.find_spec("flash_attn") is None:
        raise ConfigError(
            "config: model.attn_implementation=flash_attention_2 needs the flash-attn package (pip install "
            "flash-attn, on a CUDA machine); sdpa needs nothing"
        )


def not_found(path: str) -> str:
    """Why model.path loads nothing, and how to get the model (vlrl never downloads)."""
    gone = Path(path)
    kept = sorted(p.name for p in gone.parent.glob("step-*") if p.is_dir()) if gone.parent.name == "checkpoints" else []
    if kept and not gone.exists():  # a run's checkpoint deleted by trainer.keep_last, or a step never saved
        return (
            f"config: model.path {path!r}: the run holds no {gone.name} (it keeps its last trainer.keep_last "
            f"checkpoints); its checkpoints: {', '.join(kept)}"
        )
    if HUB_ID.fullmatch(path) and not Path(path).exists():
        return (
            f"config: model.path {path!r} is a Hugging Face hub id that is not in the local cache "
            f"({os.environ.get('HF_HUB_CACHE') or 'HF_HUB_CACHE, default ~/.cache/huggingface/hub'}), and vlrl never "
            f"downloads: `huggingface-cli download {path}` puts it there (then model.path={path} loads it offline), "
            f"or `huggingface-cli download {path} --local-dir /models/{path.rpartition('/')[2]}` and give that directory"
        )
    steps = sorted(p for p in (Path(path) / "checkpoints").glob("step-*") if p.is_dir())
    if steps:  # a run directory
        return f"config: model.path {path!r} is a run directory, not a checkpoint: give one of its checkpoints ({steps[-1]} is the latest)"
    latest = sorted(str(max(s)) for run in Path(path).glob("*/checkpoints") if (s := list(run.glob("step-*"))))
    if latest:  # a folder of runs: the demo's (sft/, rl/)
        return f"config: model.path {path!r} holds runs, not a checkpoint: give one of their checkpoints (the latest: {', '.join(latest)})"
    return (
        f"config: model.path {path!r} is not a local checkpoint (no config.json) nor a hub id in the local Hugging "
        "Face cache; vlrl never downloads: download the model first, or use tiny:qwen2_5_vl"
    )


def load_processor(cfg: ModelConfig, path: str | None = None):
    """The model's processor, its image pixel limit model.max_pixels. vlrl's own renders pass
    the config's limits with every call (prompting.image_kwargs); this is for the processor a
    checkpoint saves, which then states the limit the model was trained at, for `vlrl export` and
    any server that runs it."""
    processor = model_family(cfg).load_processor(path or checkpoint_path(cfg))
    with_pixel_limits(processor, cfg.max_pixels)
    return processor


def with_pixel_limits(processor, max_pixels: int, min_pixels: int = 0) -> None:
    """The image processor's pixel limits (Qwen's `size`: shortest_edge and longest_edge are
    pixel counts), where it has them, as vlrl's resizing leaves images: at most `max_pixels`;
    at least `min_pixels` where that is more than its own minimum (below it, it enlarges them)."""
    images = getattr(processor, "image_processor", None)
    size = dict(getattr(images, "size", None) or {})
    if size.get("shortest_edge") and size.get("longest_edge"):
        images.size = {"shortest_edge": max(size["shortest_edge"], min_pixels), "longest_edge": max_pixels}


def pretrained(cfg: ModelConfig, path: str) -> torch.nn.Module:
    """The plain transformers model at `path`, loaded by its family; a LoRA checkpoint is merged
    into its base (recursively: an RL adapter on an SFT adapter on a base model)."""
    base = lora_base(path)
    if base is None:
        family = model_family(cfg)
        require_attention(cfg)
        with reading_weights(path):
            model = family.load_model(path, torch_dtype(cfg.dtype), cfg.attn_implementation)
        if cfg.patch_embedding == "linear":
            linear_patch_embedding(model)
        if cfg.vision_attention == "grouped":
            grouped_vision_attention(model)
        if cfg.lm_head_fp32:
            float32_head(model)
        model.vlrl_family = family  # forward passes ask the model's family (family_of_model)
        return model
    from peft import PeftModel

    # PEFT froze the base to load the adapter: unfrozen again, as any from_pretrained model
    model = pretrained(cfg, base)
    with reading_weights(path), peft_quiet():
        model = PeftModel.from_pretrained(model, path)
    return model.merge_and_unload().requires_grad_(True)


@contextlib.contextmanager
def reading_weights(path: str) -> Iterator[None]:
    """A weights file that does not load said in one line naming the checkpoint, not as a
    traceback: cut short or damaged (safetensors' own error, which is no OSError), or a pickled
    .bin holding more than tensors, which torch's weights_only load refuses to run (its message
    suggests unpickling it whole: never, for a checkpoint from elsewhere)."""
    from safetensors import SafetensorError

    try:
        yield
    except SafetensorError as err:
        raise ConfigError(
            f"{path}: its weights do not load ({first_line(err)}): a file is damaged or cut short"
        ) from err
    except pickle.UnpicklingError as err:
        raise ConfigError(
            f"{path}: a pickled weights file (.bin) holds more than tensors, and vlrl does not unpickle it "
            "(unpickling can run any code): use the checkpoint's safetensors, or a .bin of tensors alone"
        ) from err


@contextlib.contextmanager
def peft_quiet() -> Iterator[None]:
    """PEFT 0.21 reads transformers 5's deprecated `is_gradient_checkpointing` when it wraps a
    model: a FutureWarning on every LoRA command that only a PEFT release can act on."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
        yield


def export_full_model(checkpoint: str, out: Path, trained: ModelConfig | None = None) -> tuple[Path, bool]:
    """`checkpoint` as a plain transformers model directory that `from_pretrained` loads without
    PEFT: a LoRA checkpoint's adapters merged (an RL adapter on an SFT adapter on a base), in the
    dtype its full weights were saved in; the processor beside it, with the image pixel limits
    and video sampling of `trained` (the run's model config), else as the checkpoint's says. Returns the directory
    and whether adapters were merged (a full checkpoint has none)."""
    cfg = ModelConfig(path=checkpoint)
    path = checkpoint_path(cfg)
    saved = json.loads((Path(weights_root(path)) / "config.json").read_text())
    cfg.dtype = saved.get("dtype") or saved.get("torch_dtype") or "float32"
    pretrained(cfg, path).save_pretrained(out)
    family = model_family(cfg)
    processor = family.load_processor(path)
    if trained is not None:
        with_pixel_limits(processor, trained.max_pixels, trained.min_pixels)
        videos = getattr(processor, "video_processor", None)
        for name, value in family.video_processor_settings(trained.video).items() if videos is not None else ():
            setattr(videos, name, value)
    processor.save_pretrained(out)
    return out, lora_base(path) is not None


def load_model(
    cfg: ModelConfig, path: str | None = None, device: str | torch.device = "cpu", own_memory: bool = True
) -> torch.nn.Module:
    """The policy (or reference) model; LoRA adapters and vision freezing as configured.

    A LoRA checkpoint as model.path (an SFT cold start) is merged into its base: a run starts
    from that model, its reference is that model, and with model.lora.r > 0 the run trains a
    new adapter on top of it (whose adapter_config.json names model.path as its base). A LoRA
    checkpoint given as `path` (a run's own, to resume or evaluate) keeps its adapter on its
    base, trainable when the config trains LoRA adapters. On the CPU its weights are copied out
    of the checkpoint file (`in_own_memory`) unless `own_memory` is False: a caller that copies
    them anyway (FSDP2, into its shards)."""
    model_path = path or checkpoint_path(cfg)
    base = lora_base(model_path) if path else None
    family = model_family(cfg)
    model = pretrained(cfg, base or model_path)  # on the CPU: new LoRA adapters draw from its generator
    if cfg.freeze_vision:
        for param in family.vision_module(model).parameters():
            param.requires_grad_(False)
    if base is not None:
        from peft import PeftModel

        with reading_weights(model_path), peft_quiet():
            model = PeftModel.from_pretrained(model, model_path, is_trainable=cfg.lora.r > 0)
    elif cfg.lora.r > 0:
        from peft import LoraConfig, get_peft_model

        target = family.lora_target(cfg.lora.target_modules)  # the language model only
        linears = {n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
        if not any(re.match(target, name) for name in linears):  # a name no family has is skipped, as by PEFT
            own = sorted({n.rpartition(".")[2] for n in linears if family.vision_tower not in n})
            raise ConfigError(
                f"config: model.lora.target_modules {cfg.lora.target_modules} name no linear layer of the language "
                f"model; its layers are named {', '.join(own)}"
            )
        check_target_parameters(model, cfg.lora.target_parameters)
        lora = LoraConfig(
            r=cfg.lora.r,
            lora_alpha=cfg.lora.alpha,
            use_rslora=cfg.lora.use_rslora,
            lora_dropout=cfg.lora.dropout,
            target_modules=target,
            target_parameters=cfg.lora.target_parameters or None,
        )
        with peft_quiet():
            model = get_peft_model(model, lora)
        # what the adapter was added to, absolute: its checkpoint is read from any directory
        model.peft_config["default"].base_model_name_or_path = absolute_if_local(model_path)
    if own_memory and torch.device(device).type == "cpu":
        in_own_memory(model)
    # Moved last, so that a run's adapters start the same on every device and strategy (FSDP2
    # loads on the CPU, the replicated strategy on the GPU).
    return model.to(device)


def check_target_parameters(model: torch.nn.Module, names: list[str]) -> None:
    """Each of `names` (model.lora.target_parameters) picks some parameter (PEFT skips a name
    that picks none, silently)."""
    missing = [name for name in names if not targeted_parameters(model, [name])]
    if missing:
        fused = sorted({n.split(".", n.count(".") - 2)[-1] for n, p in model.named_parameters() if p.dim() == 3})
        raise ConfigError(
            f"config: model.lora.target_parameters {missing} name no parameter of the model; its fused (3D) "
            f"parameters are {', '.join(fused) or 'none'}"
        )


@torch.no_grad()
def in_own_memory(model: torch.nn.Module) -> None:
    """Each CPU parameter and buffer copied out of the checkpoint file it may be a view of.

    Where a safetensors file holds a weight in the dtype it is loaded in, transformers hands out
    a view of the file mapped into memory, starting wherever the file puts it (40 bytes past a
    64-byte boundary in this project's checkpoints), and a product of one row by a weight (a
    matrix-vector product: a prompt's last-token logits) sums in another order at another
    alignment on the CPU: a policy read from a run's checkpoint and a reference read from a
    bfloat16 base computed log-probs 5e-7 apart with equal weights, so a resumed run's KL
    gradient was not zero where the uninterrupted run's was, and AdamW makes even a 1e-9
    gradient a full step (tests/gpu/test_runs_on_gpu.py's resumed run, run on the CPU). A copy
    also leaves the file free: a weight never written (a reference's) would otherwise follow
    whatever happens to its file (tests/models/test_loading.py). Under FSDP2 the shards are the
    copies: copied here first, every process would hold a whole model of its own where the views
    share the file's pages (a 72B model in bfloat16 on 8 processes: 1.1 TB for a moment)."""
    for tensor in [*model.parameters(), *model.buffers()]:  # a tied weight once
        if tensor.device.type == "cpu":
            tensor.data = tensor.data.clone()


def core_model(model: torch.nn.Module) -> torch.nn.Module:
    """The *ForConditionalGeneration under any PEFT wrapper."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def save_model(model: torch.nn.Module, directory: Path, state_dict: dict[str, torch.Tensor] | None = None) -> None:
    """`model.save_pretrained`; a PEFT model's adapters without embedding layers (LoRA adapts
    linear layers only here, LoraConfig.validate), so that PEFT does not look for its base's
    config.json to compare vocabularies: the base a run kept of a LoRA checkpoint has none, and
    every save warned "Could not find a config file in RUN/base"."""
    if hasattr(model, "get_base_model"):
        model.save_pretrained(directory, state_dict=state_dict, save_embedding_layers=False)
    else:
        model.save_pretrained(directory, state_dict=state_dict)


def fsdp_sharded(model: torch.nn.Module) -> bool:
    """Whether FSDP2 shards `model` (its weights are gathered in its modules' forwards, as new
    tensors at every gathering)."""
    if not torch.distributed.is_available():
        return False
    from torch.distributed.fsdp import FSDPModule

    return any(isinstance(m, FSDPModule) for m in model.modules())


def without_grad(model: torch.nn.Module) -> contextlib.AbstractContextManager:
    """The context for forwards of `model` whose results are data, not graph (rollouts,
    reference and old log-probs): torch.inference_mode, which skips the version counters and view
    tracking no_grad still keeps (a sixth of a tiny model's decoding step on the CPU,
    docs/performance.md). no_grad under FSDP2, whose first gathering makes the unsharded
    parameters every later forward reuses, training ones included; and among several
    processes: `vlrl eval` under torchrun aborted at exit (rank 1, SIGABRT, "terminate called without
    an active exception") in 2 of 20 runs with inference mode, in none of 12 with no_grad,
    for a reason then not found; a later session saw it in 1 of 69 runs with inference mode, after
    process 0 had written the results (so the evidence that no_grad avoids it is thin). Its cause,
    found since, is the interpreter's finalization, which such a process now skips
    (`distributed.exit_process`)."""
    dist = torch.distributed
    several = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    return torch.no_grad() if several or fsdp_sharded(model) else torch.inference_mode()


__all__ = ["core_model", "family_of_model", "frame_kind", "frame_spec", "full_weights", "load_model", "load_processor"]


@torch.no_grad()
def full_weights(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """The policy's full weights by their transformers names, for an engine that holds its own
    copy (LoRA merged: `transformers_weights`)."""
    base = core_model(model)
    yield from transformers_weights(base, base.state_dict().items())


def checkpoint_layout(
    model: torch.nn.Module, weights: Iterable[tuple[str, torch.Tensor]]
) -> Iterator[tuple[str, torch.Tensor]]:
    """`weights` (transformers names, a strategy's `full_weights`) as the model's checkpoints
    store them, what save_pretrained writes and so what an engine that loaded the checkpoint
    takes back: transformers' load-time conversions reverted one tensor at a time (Qwen3.5 MoE's
    fused experts split into each expert's projections, Qwen3-VL MoE's transposed to the released
    layout, `qwen3_vl.saving_released_experts`, Qwen2-VL's and Qwen2.5-VL's language model named
    `model.` again). One at a time holds for every family here (each reverted
    conversion takes one tensor: tests/models/test_loading.py compares with save_pretrained)."""
    from transformers.core_model_loading import revert_weight_conversion

    base = core_model(model)
    for name, tensor in weights:
        yield from revert_weight_conversion(base, {name: tensor}).items()


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
        if ".base_layer." in key:
            layer = adapting_layer(base, key)
            if layer is not None:
                tensor = merged_weight(layer, tensor)
        yield re.sub(r"\.base_layer(?=\.)", "", key), tensor  # nested wrappers: one .base_layer each


def adapting_layer(base: torch.nn.Module, key: str) -> torch.nn.Module | None:
    """The LoRA layer whose adapters are on and adapt the tensor `key` (a name under PEFT's
    wrappers: `x.base_layer.weight` of an adapted Linear, `experts.base_layer.base_layer.down_proj`
    of a parameter PEFT wraps, its wrappers nested one per parameter); None when none does."""
    from peft.tuners.lora import LoraLayer

    path, _, name = key.rpartition(".")
    layer = base.get_submodule(path.partition(".base_layer")[0])
    while isinstance(layer, LoraLayer):
        if name == getattr(layer, "parameter_name", "weight"):  # a ParamWrapper's, or a Linear's weight
            return None if layer.disable_adapters else layer
        layer = layer.base_layer
    return None
