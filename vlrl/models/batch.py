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
    # (3, P) rope positions and the next position, on the CPU, once a forward computed them
    rope: tuple[torch.Tensor, int] | None = field(default=None, repr=False)
    # what the chat template already wrote of the answer and the model goes on from (`answer_prefill`)
    prefill: str = ""

    def __len__(self) -> int:
        return self.input_ids.shape[0]


@dataclass
class PromptBatch:
    """Prompts left-padded into one batch, vision tensors concatenated in prompt order."""

    input_ids: torch.Tensor  # (B, P)
    attention_mask: torch.Tensor  # (B, P)
    mm_token_type_ids: torch.Tensor  # (B, P)
    vision: dict[str, torch.Tensor]
    prompts: Sequence[Prompt]  # what it was collated from: their rope positions are kept there

    def to(self, device: torch.device | str) -> PromptBatch:
        return PromptBatch(
            self.input_ids.to(device),
            self.attention_mask.to(device),
            self.mm_token_type_ids.to(device),
            {k: v.to(device) for k, v in self.vision.items()},
            self.prompts,
        )

    def kept_rope(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The rope positions (3, B, P) and next positions (B,) its prompts kept, placed as
        get_rope_index places them (0 on the padding), on the batch's device; None unless every
        prompt kept its own."""
        if any(p.rope is None for p in self.prompts):
            return None
        length = self.input_ids.shape[1]
        positions = torch.zeros(3, len(self.prompts), length, dtype=self.prompts[0].rope[0].dtype)
        for row, prompt in enumerate(self.prompts):
            positions[:, row, length - len(prompt) :] = prompt.rope[0]
        next_position = torch.tensor([prompt.rope[1] for prompt in self.prompts])
        return positions.to(self.input_ids.device), next_position.to(self.input_ids.device)

    def keep_rope(self, positions: torch.Tensor, next_position: torch.Tensor) -> None:
        """Each prompt keeps its row of this batch's rope positions `positions` (3, B, P),
        without the left padding, and its next position (`next_position` (B,))."""
        positions, next_position = positions.cpu(), next_position.tolist()
        for row, prompt in enumerate(self.prompts):
            prompt.rope = (positions[:, row, positions.shape[2] - len(prompt) :], next_position[row])


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
    return PromptBatch(input_ids, attention_mask, mm_types, vision, list(prompts))
