"""Rendering Samples into model inputs (`Prompt`, models/batch.py), once per prompt.

A prompt is rendered (chat template, image resize, processor) once per step; its G
completions and every forward over them reuse that work.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import TypeVar, get_type_hints

import torch
from PIL import Image

from vlrl.config import ModelConfig
from vlrl.data.records import RecordError
from vlrl.data.sample import Sample
from vlrl.models.batch import Prompt
from vlrl.models.families import model_family, processor_resize
from vlrl.vision.images import load_image
from vlrl.vision.video import Video, load_video, shuffle_frames

T = TypeVar("T")


class UnusableSample(RecordError):
    """A sample whose image or video fails when a step reads it, though its record passed the
    load-time check (a truncated file, undecodable frames), or whose prompt is over
    model.max_prompt_tokens: that sample is left out (`render_usable`), the step goes on."""


def render_usable(
    items: Sequence[T], rendered: Sequence[Prompt | UnusableSample]
) -> tuple[list[T], list[Prompt], list[UnusableSample]]:
    """The items whose prompts rendered, their prompts, and the errors of those that did not
    (`rendered`: render_prompts' answer for `items`)."""
    kept: list[T] = []
    prompts: list[Prompt] = []
    skipped: list[UnusableSample] = []
    for item, prompt in zip(items, rendered, strict=True):
        if isinstance(prompt, UnusableSample):
            skipped.append(prompt)
        else:
            kept.append(item)
            prompts.append(prompt)
    return kept, prompts, skipped


def read_media(sample: Sample, model: ModelConfig, decoded: dict[str, Video]) -> list[Image.Image]:
    """The sample's images, resized for the model, and its video decoded into `decoded` (unless
    there already). Raises UnusableSample when a file fails to decode."""
    images, media = [], ""
    factor, then_within = model_family(model).factor, processor_resize(model)
    try:
        for media in sample.images:
            size = (model.min_pixels, model.max_pixels, factor, sample.image_size, then_within)
            images.append(load_image(media, *size, jpeg_quality=model.image_jpeg_quality))
        if sample.video and sample.video not in decoded:
            media = sample.video
            decoded[media] = load_video(media, model.video, factor)
    except Exception as err:  # passed the load-time check, yet fails to decode (Pillow raises SyntaxError too)
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


def templated_text(processor, messages: list[dict], model: ModelConfig) -> str:
    """The text the processor tokenizes (`Prompt.text`): the chat template with its generation
    prompt, or the raw content. Not eval.harness.prompt_text, the messages' text parts alone."""
    if model.chat_template == "none":
        return raw_prompt(messages, model)
    return processor.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=False, **model.chat_template_kwargs
    )


ASSISTANT_HEADER = "<|im_start|>assistant\n"  # ChatML's, as every Qwen family's chat template writes it


def answer_prefill(text: str, model: ModelConfig) -> str:
    """What the chat template already wrote of the answer, the model going on from it: a
    reasoning block it opened after the assistant's header (Qwen3-VL-Thinking's `<think>\n`,
    Qwen3.5's with thinking on). A task's rewards read it and the completion as one answer
    (TRL issue 6966: a format reward that looks for the opening tag scored 0 on every completion);
    an SFT target does not write it again. "" otherwise: no template (model.chat_template none),
    or a block it closed (Qwen3.5's with thinking off, whose answer follows it alone)."""
    if model.chat_template == "none":
        return ""
    _, header, tail = text.rpartition(ASSISTANT_HEADER)
    return tail if header and "<think>" in tail and "</think>" not in tail else ""


def image_kwargs(images: list[Image.Image], model: ModelConfig) -> dict:
    """The processor's image arguments: the images, already sized, and the pixel limits they
    were sized by, widened to hold each (model.image_resize=easyr1 sizes within others)."""
    if not images:
        return {}
    # The size as an images_kwargs entry: a video's own size goes in videos_kwargs, and transformers
    # refuses a size given both at the top and in a modality's kwargs (a prompt with an image and a video)
    size = covering({"shortest_edge": model.min_pixels, "longest_edge": model.max_pixels}, images)
    return {"images": images, "images_kwargs": {"size": size}}


def covering(size: dict[str, int], images: Sequence[Image.Image]) -> dict[str, int]:
    """The processor's pixel limits for images vlrl has sized already: `size`, widened to hold
    each image, so that its resize (smart_resize of sides already on the patch grid) keeps them
    as they are (a benchmark's lmms-eval budget may lie beyond the engine's)."""
    pixels = [image.width * image.height for image in images]
    return {"shortest_edge": min(size["shortest_edge"], *pixels), "longest_edge": max(size["longest_edge"], *pixels)}


def uncapped(processor) -> dict:
    """`cap_pixels_per_frame=False` where the video processor has the option (transformers 5.23's
    Qwen video processors), which only silences its warning that the default will change: the
    frames come sized as qwen-vl-utils sizes them, its budget for the whole video included, and
    at the exact size vlrl passes (`video_size`) the cap leaves them as they are either way."""
    valid = getattr(getattr(processor, "video_processor", None), "valid_kwargs", None)
    return {"cap_pixels_per_frame": False} if takes_cap_option(valid or dict) else {}


@cache
def takes_cap_option(valid_kwargs: type) -> bool:
    """Whether a video processor's kwargs declare cap_pixels_per_frame (read once per class)."""
    try:
        return "cap_pixels_per_frame" in get_type_hints(valid_kwargs)
    except NameError:  # kwargs naming a type their module does not import
        return False


def check_sizes(processor, sample: Sample, sizes: list[tuple[int, int]], grids: list[list[int]]) -> None:
    """Raise unless the processor kept each image's (and the video's) size: coordinates are in
    the smart-resized frame."""
    patch = processor.image_processor.patch_size
    for (height, width), (_, h, w) in zip(sizes, grids, strict=True):
        if (h * patch, w * patch) != (height, width):
            raise RuntimeError(
                f"{sample.source}: processor resized {width}x{height} to {w * patch}x{h * patch}; "
                "coordinates would be in the wrong frame"
            )


def within_limit(prompt: Prompt, sample: Sample, model: ModelConfig) -> Prompt:
    """`prompt`, unless it has more tokens than model.max_prompt_tokens: then its sample is
    unusable (left out where it was drawn, as verl and EasyR1 filter overlong prompts)."""
    tokens = len(prompt.input_ids)
    if model.max_prompt_tokens is not None and tokens > model.max_prompt_tokens:
        raise UnusableSample(
            sample.source, f"its prompt has {tokens} tokens, over model.max_prompt_tokens ({model.max_prompt_tokens})"
        )
    return prompt


def render_prompt(
    processor, messages: list[dict], sample: Sample, model: ModelConfig, decoded: dict[str, Video] | None = None
) -> Prompt:
    """Chat template + smart-resized images (and sampled video frames), sized by the model's
    pixel limits -> Prompt; checks that the processor kept our resize. `decoded` holds videos
    already decoded, by path, and receives the ones decoded here: T-GRPO renders each video
    twice a step, in order and shuffled, from one decode."""
    decoded = {} if decoded is None else decoded
    text = templated_text(processor, messages, model)
    return prompt_of(processor, text, read_media(sample, model, decoded), sample, model, decoded)


def prompt_of(
    processor, text: str, images: list[Image.Image], sample: Sample, model: ModelConfig, decoded: dict[str, Video]
) -> Prompt:
    """`render_prompt`'s Prompt from its templated `text` and read `images` (the sample's video in
    `decoded`). A text the processor refuses (a vision token written in a record, which then has
    no image) costs that sample: UnusableSample."""
    family = model_family(model)
    kwargs = image_kwargs(images, model)
    if sample.video:
        clip = decoded[sample.video]
        if sample.shuffle_frames is not None:
            clip = shuffle_frames(clip, sample.shuffle_frames)
        kwargs["videos"] = [clip.frames]
        kwargs["videos_kwargs"] = {**family.video_processor_kwargs(clip), **uncapped(processor)}
    try:
        encoded = processor(text=[text], return_tensors="pt", **kwargs)
    except Exception as err:
        raise UnusableSample(
            sample.source, f"the processor refused the prompt: {type(err).__name__}: {err}"[:400]
        ) from err
    sizes = [(image.height, image.width) for image in images]
    grids = encoded["image_grid_thw"].tolist() if images else []
    if sample.video:
        sizes.append(tuple(clip.frames.shape[2:]))
        grids += encoded["video_grid_thw"].tolist()
    check_sizes(processor, sample, sizes, grids)
    vision = {k: torch.as_tensor(encoded[k]) for k in family.vision_keys if k in encoded}
    prompt = Prompt(
        encoded["input_ids"][0], encoded["mm_token_type_ids"][0], vision, text, images, clip if sample.video else None,
        prefill=answer_prefill(text, model),
    )  # fmt: skip
    return within_limit(prompt, sample, model)


def render_prompts(
    processor, jobs: Sequence[tuple[list[dict], Sample]], model: ModelConfig, decoded: dict[str, Video] | None = None
) -> list[Prompt | UnusableSample]:
    """Each job's (messages, sample) prompt as `render_prompt` renders it, or the UnusableSample
    of a sample whose media fail to read. The prompts without a video go through the processor
    in one call: at the demo's sizes its per-call overhead is a good part of a prompt's rendering
    (the step bench's four prompts: 20.8-23.1 ms one at a time, 13.7-15.6 ms so). A video prompt,
    whose processor arguments are its clip's own, is rendered alone. Alone or batched, a
    prompt's ids and tensors are the same (tests/models/test_prompting.py)."""
    decoded = {} if decoded is None else decoded
    out: list[Prompt | UnusableSample | None] = [None] * len(jobs)
    batched: list[tuple[int, str, list[Image.Image], Sample]] = []
    for position, (messages, sample) in enumerate(jobs):
        try:
            if sample.video:
                out[position] = render_prompt(processor, messages, sample, model, decoded)
            else:
                batched.append(
                    (position, templated_text(processor, messages, model), read_media(sample, model, decoded), sample)
                )
        except UnusableSample as err:
            out[position] = err
    if batched:
        images = [image for _, _, row_images, _ in batched for image in row_images]
        texts = [text for _, text, _, _ in batched]
        try:
            encoded = processor(text=texts, return_tensors="pt", padding=True, **image_kwargs(images, model))
        except Exception:  # a prompt the processor refuses: each encoded alone (media as read), that one skipped
            for position, text, row_images, sample in batched:
                try:
                    out[position] = prompt_of(processor, text, row_images, sample, model, decoded)
                except UnusableSample as err:
                    out[position] = err
            return out  # type: ignore[return-value]
        real = encoded["attention_mask"].bool()
        grids = encoded["image_grid_thw"] if images else torch.zeros(0, 3, dtype=torch.long)
        row_grids = grids.split([len(row_images) for _, _, row_images, _ in batched])  # each row's images
        row_pixels = encoded["pixel_values"].split([int(g.prod(dim=1).sum()) for g in row_grids]) if images else ()
        for row, (position, text, row_images, sample) in enumerate(batched):
            check_sizes(processor, sample, [(i.height, i.width) for i in row_images], row_grids[row].tolist())
            vision = {"pixel_values": row_pixels[row], "image_grid_thw": row_grids[row]} if row_images else {}
            ids, types = encoded["input_ids"][row][real[row]], encoded["mm_token_type_ids"][row][real[row]]
            prompt = Prompt(ids, types, vision, text, row_images, None, prefill=answer_prefill(text, model))
            try:
                out[position] = within_limit(prompt, sample, model)
            except UnusableSample as err:
                out[position] = err
    return out  # type: ignore[return-value]
