"""Qwen2-VL: patch 14 merged 2 x 2 (factor 28), answers in 0-1000 coordinates of the image."""

from __future__ import annotations

from typing import ClassVar

from vlrl.models.base import ModelFamily
from vlrl.models.build import CHAT_TEMPLATE, TinySpec, instantiate, text_config

# head size 32 (num_heads 2 at hidden 64): vLLM's CPU attention has no kernel for the default's 16
H32 = {"num_heads": 2, "num_kv_heads": 1}


class Qwen2VL(ModelFamily):
    name = "qwen2_vl"
    label = "Qwen2-VL"
    model_types = ("qwen2_vl",)
    name_hints = ("qwen2-vl", "qwen2_vl")
    coord_frame = "norm1000"
    patch_size = 14
    tiny_builds: ClassVar[dict] = {"qwen2_vl": {}, "qwen2_vl-h32": H32}
    chat_template = CHAT_TEMPLATE

    def build_tiny_model(self, spec: TinySpec, tokenizer):
        from transformers import Qwen2VLForConditionalGeneration

        vision = dict(
            depth=spec.vision_depth,
            embed_dim=spec.vision_hidden,
            hidden_size=spec.hidden_size,
            num_heads=spec.vision_heads,
            mlp_ratio=(spec.vision_intermediate or 2 * spec.vision_hidden) // spec.vision_hidden,
        )
        return instantiate(Qwen2VLForConditionalGeneration, spec, tokenizer, text_config(spec, tokenizer), vision)

    def build_tiny_processor(self, spec: TinySpec, tokenizer):
        from transformers import Qwen2VLProcessor

        return self._tiny_processor(Qwen2VLProcessor, spec, tokenizer)

    def _tiny_processor(self, processor_cls, spec: TinySpec, tokenizer):
        from transformers import Qwen2VLImageProcessor
        from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

        image_processor = Qwen2VLImageProcessor(min_pixels=spec.min_pixels, max_pixels=spec.max_pixels)
        return processor_cls(
            image_processor=image_processor,
            tokenizer=tokenizer,
            video_processor=Qwen2VLVideoProcessor(),
            chat_template=CHAT_TEMPLATE,
        )
