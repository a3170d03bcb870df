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
    tiny_builds: ClassVar[dict] = {"qwen3_vl_moe": QWEN3_TINY}
    limits = (
        "LoRA reaches attention only: the experts are fused 3D parameters (gate_up_proj, down_proj), "
        "not the Linear modules peft targets"
    )

    @staticmethod
    def model_class() -> type:
        from transformers import Qwen3VLMoeForConditionalGeneration

        return Qwen3VLMoeForConditionalGeneration

    def text_config(self, spec: TinySpec, tokenizer) -> dict[str, Any]:
        return {**super().text_config(spec, tokenizer), **experts_config(spec), "decoder_sparse_step": 1}


def experts_config(spec: TinySpec) -> dict[str, int]:
    """A mixture of experts' text config keys (Qwen3-VL MoE, Qwen3.5 MoE): the spec's counts, or
    the tiny build's 4 experts, 2 of them a token, each half as wide as intermediate_size."""
    return {
        "num_experts": spec.experts or 4,
        "num_experts_per_tok": spec.experts_per_token or 2,
        "moe_intermediate_size": spec.expert_intermediate or spec.intermediate_size // 2,
    }
