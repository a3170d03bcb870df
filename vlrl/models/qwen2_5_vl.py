"""Qwen2.5-VL: Qwen2-VL's factor 28, answers in pixels of the smart-resized image, video time
in mrope (seconds per temporal patch, `second_per_grid_ts`)."""

from __future__ import annotations

from typing import ClassVar

from vlrl.models.build import TinySpec, instantiate, text_config
from vlrl.models.qwen2_vl import H32, Qwen2VL


class Qwen25VL(Qwen2VL):
    name = "qwen2_5_vl"
    label = "Qwen2.5-VL"
    model_types = ("qwen2_5_vl",)
    name_hints = ("qwen2.5-vl", "qwen2_5_vl", "qwen2_5-vl")
    coord_frame = "absolute"
    vision_keys = (*Qwen2VL.vision_keys, "second_per_grid_ts")
    tiny_builds: ClassVar[dict] = {"qwen2_5_vl": {}, "qwen2_5_vl-h32": H32}

    def rope_positions(self, model, batch):
        # video frames are placed in time by their seconds per temporal patch
        positions, _ = model.model.get_rope_index(
            batch.input_ids,
            batch.mm_token_type_ids,
            image_grid_thw=batch.vision.get("image_grid_thw"),
            video_grid_thw=batch.vision.get("video_grid_thw"),
            second_per_grid_ts=batch.vision.get("second_per_grid_ts"),
            attention_mask=batch.attention_mask,
        )
        return positions, positions.amax(dim=(0, 2)) + 1

    def build_tiny_model(self, spec: TinySpec, tokenizer):
        from transformers import Qwen2_5_VLForConditionalGeneration

        vision = dict(
            depth=spec.vision_depth,
            hidden_size=spec.vision_hidden,
            intermediate_size=spec.vision_intermediate or 2 * spec.vision_hidden,
            num_heads=spec.vision_heads,
            out_hidden_size=spec.hidden_size,
            fullatt_block_indexes=list(range(7, spec.vision_depth, 8)) or [spec.vision_depth - 1],  # Qwen: every 8th
            window_size=112,
            tokens_per_second=2,
        )
        return instantiate(Qwen2_5_VLForConditionalGeneration, spec, tokenizer, text_config(spec, tokenizer), vision)

    def build_tiny_processor(self, spec: TinySpec, tokenizer):
        from transformers import Qwen2_5_VLProcessor

        return self._tiny_processor(Qwen2_5_VLProcessor, spec, tokenizer)
