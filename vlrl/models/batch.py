"""Rendered prompts and their batches: what every forward and engine takes.

A prompt is rendered (models/prompting.py) once per step; its G completions and every
forward over them reuse that work. Prompts batch left-padded, their vision tensors
concatenated in prompt order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from PIL import Image

from vlrl.vision.video import Video


@dataclass
class Prompt:
    """One rendered prompt: token ids, modality types and vision tensors from the processor,
    and the images and video clip they were made from (engines that run their own processor,
    like vLLM, take these: the same pixels, so the same prompt)."""

    input_ids: torch.Tensor  # (P,)
    mm_token_type_ids: torch.Tensor  # (P,) 0 text, 1 image, 2 video
    vision: dict[str, torch.Tensor]
    text: str
    images: list[Image.Image] = field(default_factory=list)  # smart-resized, in prompt order
    video: Video | None = None  # sampled, sized (and for T-GRPO shuffled) frames

    def __len__(self) -> int:
        return self.input_ids.shape[0]


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
    for key in dict.fromkeys(key for p in prompts for key in p.vision):  # the processor's keys, in its order
        vision[key] = torch.cat([p.vision[key] for p in prompts if key in p.vision], dim=0)
    return PromptBatch(input_ids, attention_mask, mm_types, vision)
