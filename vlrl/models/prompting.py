"""Rendering Samples into model inputs (`Prompt`, models/batch.py), once per prompt.

A prompt is rendered (chat template, image resize, processor) once per step; its G
completions and every forward over them reuse that work.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import torch
from PIL import Image

from vlrl.config import ModelConfig
from vlrl.data.records import RecordError
from vlrl.data.sample import Sample
from vlrl.models.batch import Prompt
from vlrl.models.families import model_family
from vlrl.vision.images import load_image
from vlrl.vision.video import Video, load_video, shuffle_frames

T = TypeVar("T")


class UnusableSample(RecordError):
    """A sample whose image or video fails when a step reads it, though its record passed the
    load-time check (a truncated file, undecodable frames): that sample is left out
    (`render_usable`), the step goes on."""


def render_usable(
    items: Sequence[T], render: Callable[[T], Prompt]
) -> tuple[list[T], list[Prompt], list[UnusableSample]]:
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


def raw_prompt(messages: list[dict], model: ModelConfig) -> str:
    """The messages' content with no chat template (model.chat_template: none): text as it is,
    an image or a video as the family's vision tokens, in order; no roles, no generation prompt."""
    family = model_family(model)
    pieces = []
    for message in messages:
        content = message["content"]
        for part in [{"type": "text", "text": content}] if isinstance(content, str) else content:
            if part.get("type") in ("image", "video"):
                pad = family.image_pad if part["type"] == "image" else family.video_pad
                pieces.append(f"<|vision_start|>{pad}<|vision_end|>")
            else:
                pieces.append(part["text"])
    return "".join(pieces)


def render_prompt(
    processor, messages: list[dict], sample: Sample, model: ModelConfig, decoded: dict[str, Video] | None = None
) -> Prompt:
    """Chat template + smart-resized images (and sampled video frames), sized by the model's
    pixel limits -> Prompt; checks that the processor kept our resize. `decoded` holds videos
    already decoded, by path, and receives the ones decoded here: T-GRPO renders each video
    twice a step, in order and shuffled, from one decode."""
    family = model_family(model)
    if model.chat_template == "none":
        text = raw_prompt(messages, model)
    else:
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
