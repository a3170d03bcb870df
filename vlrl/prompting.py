"""Rendering Samples into model inputs, once per prompt, and batching rendered prompts.

A prompt is rendered (chat template, image resize, processor) once per step; its G
completions and every forward over them reuse that work.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from vlrl.sample import Sample
from vlrl.vision.images import load_image

VISION_KEYS = ("pixel_values", "image_grid_thw")


@dataclass
class Prompt:
    """One rendered prompt: token ids, modality types and vision tensors from the processor."""

    input_ids: torch.Tensor  # (P,)
    mm_token_type_ids: torch.Tensor  # (P,) 0 text, 1 image, 2 video
    vision: dict[str, torch.Tensor]
    text: str

    def __len__(self) -> int:
        return self.input_ids.shape[0]


def render_prompt(processor, messages: list[dict], sample: Sample, min_pixels: int, max_pixels: int) -> Prompt:
    """Chat template + smart-resized images -> Prompt; checks the processor kept our resize."""
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    images = [load_image(path, min_pixels, max_pixels) for path in sample.images]
    size = {"shortest_edge": min_pixels, "longest_edge": max_pixels}
    kwargs = {"images": images, "size": size} if images else {}
    encoded = processor(text=[text], return_tensors="pt", **kwargs)
    if images:
        patch = processor.image_processor.patch_size
        for image, (_, h, w) in zip(images, encoded["image_grid_thw"].tolist(), strict=True):
            if (h * patch, w * patch) != (image.height, image.width):
                raise RuntimeError(
                    f"{sample.source}: processor resized {image.width}x{image.height} to {w * patch}x{h * patch}; "
                    "coordinates would be in the wrong frame"
                )
    vision = {k: encoded[k] for k in VISION_KEYS if k in encoded}
    return Prompt(encoded["input_ids"][0], encoded["mm_token_type_ids"][0], vision, text)


@dataclass
class PromptBatch:
    """Prompts left-padded into one batch, vision tensors concatenated in prompt order."""

    input_ids: torch.Tensor  # (B, P)
    attention_mask: torch.Tensor  # (B, P)
    mm_token_type_ids: torch.Tensor  # (B, P)
    vision: dict[str, torch.Tensor]

    def to(self, device: torch.device | str) -> PromptBatch:
        return PromptBatch(
            self.input_ids.to(device),
            self.attention_mask.to(device),
            self.mm_token_type_ids.to(device),
            {k: v.to(device) for k, v in self.vision.items()},
        )


def collate(prompts: Sequence[Prompt], pad_id: int) -> PromptBatch:
    length = max(len(p) for p in prompts)
    n = len(prompts)
    input_ids = torch.full((n, length), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((n, length), dtype=torch.long)
    mm_types = torch.zeros((n, length), dtype=prompts[0].mm_token_type_ids.dtype)
    for i, p in enumerate(prompts):
        input_ids[i, length - len(p) :] = p.input_ids
        attention_mask[i, length - len(p) :] = 1
        mm_types[i, length - len(p) :] = p.mm_token_type_ids
    vision = {}
    for key in VISION_KEYS:
        parts = [p.vision[key] for p in prompts if key in p.vision]
        if parts:
            vision[key] = torch.cat(parts, dim=0)
    return PromptBatch(input_ids, attention_mask, mm_types, vision)
