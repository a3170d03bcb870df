"""smart_resize exactly as qwen-vl-utils computes it.

Qwen2.5-VL reads and writes coordinates in the pixels of the image *after* this resize,
so training, scoring and evaluation must agree with it to the pixel. transformers' image
processor has its own variant that differs on tiny images; vlrl resizes images with this
function before the processor sees them, so the processor's resize is the identity. The factor
is the model family's patch x merge size (28 for Qwen2/2.5-VL, 32 for Qwen3-VL and Qwen3.5).

As qwen-vl-utils' pipeline (Video-R1's), and unlike one that hands the processor the original
(VLM-R1, UI-R1): an image whose aspect ratio is just under transformers' limit of 200 can round
past it here (29488 x 152 -> 29484 x 140, 210.6), and the processor then refuses the resized
image, which costs the sample; and a side under one factor is rounded up to it (500 x 20 ->
504 x 28) where UI-R1's trainer first scales the image up to a short side of 28 (700 x 28).
"""

from __future__ import annotations

import math

MAX_RATIO = 200


def _round_by(number: float, factor: int) -> int:
    return round(number / factor) * factor


def _ceil_by(number: float, factor: int) -> int:
    return math.ceil(number / factor) * factor


def _floor_by(number: float, factor: int) -> int:
    return math.floor(number / factor) * factor


def smart_resize(
    height: int,
    width: int,
    factor: int,
    min_pixels: int,
    max_pixels: int,
) -> tuple[int, int]:
    """Return (height, width): multiples of `factor`, area within [min_pixels, max_pixels],
    aspect ratio kept as closely as possible."""
    if height <= 0 or width <= 0:
        raise ValueError(f"image size must be positive, got height={height}, width={width}")
    if max_pixels < min_pixels:
        raise ValueError(f"max_pixels ({max_pixels}) must be >= min_pixels ({min_pixels})")
    if max(height, width) / min(height, width) > MAX_RATIO:
        raise ValueError(
            f"absolute aspect ratio must be smaller than {MAX_RATIO}, got {max(height, width) / min(height, width)}"
        )
    h_bar = max(factor, _round_by(height, factor))
    w_bar = max(factor, _round_by(width, factor))
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = _floor_by(height / beta, factor)
        w_bar = _floor_by(width / beta, factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = _ceil_by(height * beta, factor)
        w_bar = _ceil_by(width * beta, factor)
    return h_bar, w_bar


def easyr1_size(height: int, width: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """(height, width) after EasyR1's `process_image` (hiyouga/EasyR1 b44b311 and GUI-R1 d43eea2,
    verl/utils/dataset.py): over max_pixels both sides are scaled by sqrt(max_pixels / pixels)
    and truncated, then under min_pixels by sqrt(min_pixels / pixels), truncated. Its processor
    then smart-resizes the result within its own limits."""
    if width * height > max_pixels:
        scale = math.sqrt(max_pixels / (width * height))
        width, height = int(width * scale), int(height * scale)
    if width * height < min_pixels:
        scale = math.sqrt(min_pixels / (width * height))
        width, height = int(width * scale), int(height * scale)
    return height, width


def model_size(
    height: int, width: int, factor: int, min_pixels: int, max_pixels: int,
    then_within: tuple[int, int] | None = None,
) -> tuple[int, int]:  # fmt: skip
    """smart_resize's (height, width), refusing a side of 0: qwen-vl-utils returns one for an
    image too thin for max_pixels (5000x30 under 3136 pixels: 700x0), and PIL then refuses to
    resize to it; transformers' processor would make that side one factor. Here the record
    reading the image, or the sample loading it, says why instead. `then_within`: EasyR1's
    pipeline, `easyr1_size` within min..max_pixels first, then smart_resize within these (its
    processor's) limits."""
    if then_within is not None:
        height, width = easyr1_size(height, width, min_pixels, max_pixels)
        min_pixels, max_pixels = then_within
    resized_h, resized_w = smart_resize(height, width, factor, min_pixels, max_pixels)
    if not resized_h or not resized_w:
        raise ValueError(
            f"a {width}x{height} image resizes to {resized_w}x{resized_h} under max_pixels {max_pixels} "
            f"(smart_resize, as qwen-vl-utils): too thin for a side of {factor} pixels"
        )
    return resized_h, resized_w
