"""Qwen3-VL (dense and MoE): patch 16 merged 2 x 2 (factor 32), answers in relative 0-1000
coordinates, frames of a video placed in time by text timestamps.

Coordinates: Qwen3-VL writes x / width * 1000 and y / height * 1000 of the image as given
(its ODinW evaluation maps answers back with `bbox / 1000 * [img_w, img_h]`), Qwen2-VL's
convention exactly: the `norm1000` frame. Video: its processor writes `<t.t seconds>` before
each temporal patch's tokens, the mean time of the patch's frames (frame index / file fps), so
it must be told where the frames came from (`video_metadata`); without it, it assumes 24 fps.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from vlrl.models.base import ModelFamily
from vlrl.models.build import TinySpec, instantiate, text_config

# Renders what Qwen3-VL-Instruct's own template renders for vlrl's messages (an optional system
# message, user turns of images, videos and text, assistant turns of text): no default system
# message, unlike Qwen2-VL's. Tool calls are left out; a real checkpoint brings its own template.
QWEN3_CHAT_TEMPLATE = (
    "{%- if messages[0].role == 'system' %}{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].content is string %}{{- messages[0].content }}{%- else %}"
    "{%- for content in messages[0].content %}{%- if 'text' in content %}{{- content.text }}{%- endif %}{%- endfor %}"
    "{%- endif %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}{%- if message.role != 'system' %}"
    "{{- '<|im_start|>' + message.role + '\\n' }}"
    "{%- if message.content is string %}{{- message.content }}{%- else %}{%- for content in message.content %}"
    "{%- if content.type == 'image' or 'image' in content or 'image_url' in content %}"
    "{{- '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif content.type == 'video' or 'video' in content %}{{- '<|vision_start|><|video_pad|><|vision_end|>' }}"
    "{%- elif 'text' in content %}{{- content.text }}{%- endif %}{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
QWEN3_VISION_POSITIONS = 2304  # the vision tower's learned 48 x 48 position grid, resampled per image
# Head size 32 (hidden 64, 2 heads): vLLM's CPU attention has no kernel for 16.
QWEN3_TINY = {"num_heads": 2, "num_kv_heads": 1}


class Qwen3VL(ModelFamily):
    name = "qwen3_vl"
    label = "Qwen3-VL"
    model_types = ("qwen3_vl",)
    name_hints = ("qwen3-vl", "qwen3_vl")
    coord_frame = "norm1000"
    patch_size = 16
    processor_pixels = (65536, 16777216)
    tiny_builds: ClassVar[dict] = {"qwen3_vl": QWEN3_TINY}
    chat_template = QWEN3_CHAT_TEMPLATE

    def video_metadata(self, clip) -> dict[str, Any]:
        # Frames shuffled for T-GRPO keep the timestamps of the ordered clip: the text says when
        # each temporal patch is, the pixels are shuffled, as Video-R1 shuffles only pixels.
        return {**super().video_metadata(clip), "frames_indices": sorted(clip.indices)}

    def video_processor_settings(self, video) -> dict[str, Any]:
        # Its `size` budgets pixels over all frames, so no value of it states a per-frame limit
        # (how many frames a clip gives depends on its length): the frame sampling only.
        settings = super().video_processor_settings(video)
        del settings["size"]
        return settings

    def video_size(self, clip) -> dict[str, int]:
        # Qwen3-VL's video processor budgets pixels over all frames (t x h x w), not per frame.
        pixels = clip.frames.shape[0] * clip.frames.shape[2] * clip.frames.shape[3]
        return {"shortest_edge": pixels, "longest_edge": pixels}

    def vision_config(self, spec: TinySpec) -> dict[str, Any]:
        return dict(
            depth=spec.vision_depth,
            hidden_size=spec.vision_hidden,
            intermediate_size=spec.vision_intermediate or 2 * spec.vision_hidden,
            num_heads=spec.vision_heads,
            out_hidden_size=spec.hidden_size,
            patch_size=self.patch_size,
            spatial_merge_size=self.merge_size,
            temporal_patch_size=self.temporal_patch_size,
            num_position_embeddings=QWEN3_VISION_POSITIONS,
            deepstack_visual_indexes=list(range(8, spec.vision_depth, 8)) or [spec.vision_depth - 1],  # Qwen: every 8th
        )

    def text_config(self, spec: TinySpec, tokenizer) -> dict[str, Any]:
        return {**text_config(spec, tokenizer, mrope_interleaved=True), "head_dim": spec.head_width}

    @staticmethod
    def model_class() -> type:
        """The transformers class its tiny build instantiates (each Qwen3 family its own)."""
        from transformers import Qwen3VLForConditionalGeneration

        return Qwen3VLForConditionalGeneration

    def build_tiny_model(self, spec: TinySpec, tokenizer):
        text, vision = self.text_config(spec, tokenizer), self.vision_config(spec)
        return instantiate(self.model_class(), spec, tokenizer, text, vision)

    def build_tiny_processor(self, spec: TinySpec, tokenizer):
        from transformers import Qwen2VLImageProcessor, Qwen3VLProcessor
        from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

        shape = dict(
            patch_size=self.patch_size, merge_size=self.merge_size, temporal_patch_size=self.temporal_patch_size
        )
        return Qwen3VLProcessor(
            image_processor=Qwen2VLImageProcessor(
                min_pixels=spec.min_pixels,
                max_pixels=spec.max_pixels,
                image_mean=[0.5] * 3,
                image_std=[0.5] * 3,
                **shape,
            ),
            tokenizer=tokenizer,
            video_processor=Qwen3VLVideoProcessor(**shape),
            chat_template=self.chat_template,
        )


class Qwen3VLMoe(Qwen3VL):
    name = "qwen3_vl_moe"
    label = "Qwen3-VL MoE"
    model_types = ("qwen3_vl_moe",)
    name_hints = ("qwen3-vl-30b-a3b", "qwen3-vl-235b-a22b", "qwen3_vl_moe")
    # experts 96 wide in a 64-wide model: no fused expert tensor is square, so a checkpoint read in the
    # wrong layout fails on its shape (vLLM's CPU kernel takes gate and up together in multiples of 64 only)
    tiny_builds: ClassVar[dict] = {"qwen3_vl_moe": {**QWEN3_TINY, "expert_intermediate": 96}}
    limits = (
        "LoRA's target_modules reach attention only: the experts are fused 3D parameters, which "
        "model.lora.target_parameters adapts ([mlp.experts.gate_up_proj, mlp.experts.down_proj])"
    )

    @staticmethod
    def model_class() -> type:
        from transformers import Qwen3VLMoeForConditionalGeneration

        return Qwen3VLMoeForConditionalGeneration

    def text_config(self, spec: TinySpec, tokenizer) -> dict[str, Any]:
        # norm_topk_prob as the released config.json states it: transformers 5 always normalizes
        # and no longer declares it, vLLM reads it
        moe = {"decoder_sparse_step": 1, "norm_topk_prob": True}
        return {**super().text_config(spec, tokenizer), **experts_config(spec), **moe}

    def load_model(self, path: str, dtype: torch.dtype, attn_implementation: str) -> torch.nn.Module:
        return saving_released_experts(super().load_model(path, dtype, attn_implementation))

    def build_tiny_model(self, spec: TinySpec, tokenizer):
        return saving_released_experts(super().build_tiny_model(spec, tokenizer))


def saving_released_experts(model: torch.nn.Module) -> torch.nn.Module:
    """`model` (Qwen3-VL MoE) saving its fused experts as the released checkpoints store them
    (gate_up_proj experts x hidden x 2*intermediate, down_proj experts x intermediate x hidden),
    the layout vLLM (`is_fused_checkpoint_transposed`), llama.cpp and transformers 4 read.

    transformers 5 holds them transposed and loads either layout (`Transpose(1, 2,
    check_dims=True)`: transposed where the shape differs from the parameter's), but its reverse
    for saving compares the tensor with that same parameter, so it never transposes back: its
    saves, and what `loading.checkpoint_layout` pushes, were in its own layout, which vLLM read
    transposed (llama.cpp#20200 met such checkpoints). A square tensor (hidden == 2 *
    intermediate, or == intermediate) keeps transformers' layout: its load could not tell the
    two apart."""
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import PrefixChange, Transpose, WeightConverter

    class SavedTransposed(Transpose):
        """Loads either layout, as Transpose(check_dims) does; saves transposed back."""

        @property
        def reverse_op(self) -> Transpose:
            return Transpose(self.dim1, self.dim0)

    held = {name.rpartition(".")[2]: p.shape for name, p in model.named_parameters() if ".mlp.experts." in name}

    def checked(op) -> bool:
        return type(op) is Transpose and op.check_dims

    def released(converter: WeightConverter) -> WeightConverter:
        shape = held.get(converter.target_patterns[0].rpartition(".")[2])
        if shape is None or shape[-1] == shape[-2] or not any(map(checked, converter.operations)):
            return converter  # square: kept as transformers keeps it
        ops = [SavedTransposed(op.dim0, op.dim1, True) if checked(op) else op for op in converter.operations]
        return converter.copy(converter._original_source_patterns, converter._original_target_patterns, operations=ops)

    # as transformers' save finds them: those its load used, else the model type's (less prefix changes)
    conversions = getattr(model, "_weight_conversions", None)
    if conversions is None:
        conversions = [
            c for c in get_model_conversion_mapping(model, add_legacy=False) if not isinstance(c, PrefixChange)
        ]
    model._weight_conversions = [released(c) if isinstance(c, WeightConverter) else c for c in conversions]
    return model


def experts_saved_as_held(checkpoint: str) -> bool:
    """Whether the checkpoint folder stores its fused experts as transformers 5 holds them (a
    save by transformers itself, or by vlrl before it saved the released layout): read from the
    first gate_up_proj's shape in the weights' headers, against config.json's widths."""
    import json
    from pathlib import Path

    from safetensors import safe_open

    folder = Path(checkpoint)
    if not (folder / "config.json").is_file():
        return False  # not a folder vLLM starts from either: it says so itself
    text = json.loads((folder / "config.json").read_text()).get("text_config", {})
    hidden, wide = text.get("hidden_size"), 2 * text.get("moe_intermediate_size", 0)
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(file, "pt") as weights:
            names = weights.keys()  # a safetensors handle is not iterable
            name = next((n for n in names if n.endswith(".mlp.experts.gate_up_proj")), None)
            if name is not None:
                return hidden != wide and tuple(weights.get_slice(name).get_shape()[1:]) == (wide, hidden)
    return False


def experts_config(spec: TinySpec) -> dict[str, int]:
    """A mixture of experts' text config keys (Qwen3-VL MoE, Qwen3.5 MoE): the spec's counts, or
    the tiny build's 4 experts, 2 of them a token, each half as wide as intermediate_size."""
    return {
        "num_experts": spec.experts or 4,
        "num_experts_per_tok": spec.experts_per_token or 2,
        "moe_intermediate_size": spec.expert_intermediate or spec.intermediate_size // 2,
    }
