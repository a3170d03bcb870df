"""Rendering Samples into model inputs, once per prompt, and batching rendered prompts.

A prompt is rendered (chat template, image resize, processor) once per step; its G
completions and every forward over them reuse that work.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import torch
from PIL import Image

from vlrl.config import ModelConfig
from vlrl.data import RecordError
from vlrl.models import model_family
from vlrl.sample import Sample
from vlrl.vision.images import load_image
from vlrl.vision.video import Video, load_video, shuffle_frames

T = TypeVar("T")


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


class UnusableSample(RecordError):
    """A sample whose image or video fails when a step reads it, though its record passed the
    load-time check (a truncated file, undecodable frames): that sample is left out
    (`render_usable`), the step goes on."""


def render_usable(items: Sequence[T], render: Callable[[T], Prompt]) -> tuple[list[T], list[Prompt], list[UnusableSample]]:
    """The items whose prompts render, their prompts, and the errors of those that did not."""
    kept: list[T] = []
    prompts: list[Prompt] = []
    skipped: list[UnusableSample] = []
    for item in items:
        try:
            prompts.append(render(item))
        except UnusableSample as err:
            skipped.append(err)
        else:
            kept.append(item)
    return kept, prompts, skipped


def read_media(sample: Sample, model: ModelConfig, decoded: dict[str, Video]) -> list[Image.Image]:
    """The sample's images, resized for the model, and its video decoded into `decoded` (unless
    there already). Raises UnusableSample when a file fails to decode."""
    images, media = [], ""
    factor = model_family(model).factor
    try:
        for media in sample.images:
            images.append(load_image(media, model.min_pixels, model.max_pixels, factor))
        if sample.video and sample.video not in decoded:
            media = sample.video
            decoded[media] = load_video(media, model.video, factor)
    except (OSError, ValueError) as err:  # the file passed the load-time check, yet fails to decode
        raise UnusableSample(sample.source, f"cannot read {media}: {err}"[:400]) from err
    return images


def render_prompt(
    processor, messages: list[dict], sample: Sample, model: ModelConfig, decoded: dict[str, Video] | None = None
) -> Prompt:
    """Chat template + smart-resized images (and sampled video frames), sized by the model's
    pixel limits -> Prompt; checks that the processor kept our resize. `decoded` holds videos
    already decoded, by path, and receives the ones decoded here: T-GRPO renders each video
    twice a step, in order and shuffled, from one decode."""
    family = model_family(model)
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    decoded = {} if decoded is None else decoded
    images = read_media(sample, model, decoded)
    size = {"shortest_edge": model.min_pixels, "longest_edge": model.max_pixels}
    kwargs: dict = {"images": images, "size": size} if images else {}
    if sample.video:
        clip = decoded[sample.video]
        if sample.shuffle_frames is not None:
            clip = shuffle_frames(clip, sample.shuffle_frames)
        kwargs["videos"] = [clip.frames]
        kwargs["videos_kwargs"] = family.video_processor_kwargs(clip)
    encoded = processor(text=[text], return_tensors="pt", **kwargs)
    patch = processor.image_processor.patch_size
    sizes = [(image.height, image.width) for image in images]
    grids = encoded["image_grid_thw"].tolist() if images else []
    if sample.video:
        sizes.append(tuple(clip.frames.shape[2:]))
        grids += encoded["video_grid_thw"].tolist()
    for (height, width), (_, h, w) in zip(sizes, grids, strict=True):
        if (h * patch, w * patch) != (height, width):
            raise RuntimeError(
                f"{sample.source}: processor resized {width}x{height} to {w * patch}x{h * patch}; "
                "coordinates would be in the wrong frame"
            )
    vision = {k: torch.as_tensor(encoded[k]) for k in family.vision_keys if k in encoded}
    return Prompt(
        encoded["input_ids"][0], encoded["mm_token_type_ids"][0], vision, text, images, clip if sample.video else None
    )


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
