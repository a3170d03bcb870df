"""Reading images for the model: RGB, resized by smart_resize before the processor sees them.

Every image is opened through `open_image`, which refuses one whose header states more pixels
than a limit before any pixel is decoded (a decompression bomb: a small file that decodes to
gigabytes).
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import BinaryIO

from PIL import Image

from vlrl.config import PIL_REFUSES_ABOVE, DataConfig
from vlrl.vision.resize import easyr1_size, model_size

# PIL's own Image.MAX_IMAGE_PIXELS. PIL only warns up to twice this and refuses above; vlrl
# refuses above the configured limit (data.max_image_pixels), which may go up to PIL's refusal.
DEFAULT_MAX_IMAGE_PIXELS = DataConfig.max_image_pixels


class ImageTooLarge(ValueError):
    """An image whose header states more pixels than the limit."""


def open_image(path: str | Path | BinaryIO, max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS, name: str = "") -> Image.Image:
    """Image.open (header only), refusing more than `max_pixels` pixels; `name`: what messages
    call the image (default: its path)."""
    name = name or f"image {path}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # the limit below decides
        try:
            image = Image.open(path)
        except Image.DecompressionBombError as err:
            raise ImageTooLarge(f"{name} is over PIL's decompression-bomb limit: {err}") from err
    if image.width * image.height > max_pixels:
        image.close()
        raise ImageTooLarge(f"{name} has {image.width}x{image.height} pixels, more than the limit of {max_pixels}")
    return image


def image_size(path: str | Path, max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> tuple[int, int]:
    """(width, height) from the file header, without decoding the pixels."""
    with open_image(path, max_pixels) as im:
        return im.size


def to_rgb(image: Image.Image) -> Image.Image:
    """RGB; transparent pixels over white, as qwen-vl-utils does."""
    if image.mode == "RGBA":
        background = Image.new("RGB", image.size, (255, 255, 255))
        background.paste(image, mask=image.split()[3])
        return background
    return image.convert("RGB")


def jpeg_roundtrip(image: Image.Image, quality: int) -> Image.Image:
    """The image as lmms-eval's Qwen2-VL and Qwen2.5-VL simple classes send it (models/
    model_utils/media_encoder.py's encode_image_to_data_url @75571cf: converted to RGB where it is
    not, saved as JPEG at `quality`) and qwen-vl-utils decodes it."""
    buffer = io.BytesIO()
    (image if image.mode == "RGB" else image.convert("RGB")).save(buffer, format="JPEG", quality=quality)
    with Image.open(buffer) as decoded:
        return to_rgb(decoded)


def load_image(
    path: str | Path, min_pixels: int, max_pixels: int, factor: int, squash_to: tuple[int, int] | None = None,
    then_within: tuple[int, int] | None = None, jpeg_quality: int = 0,
) -> Image.Image:  # fmt: skip
    """Open, convert to RGB (with `jpeg_quality`, through `jpeg_roundtrip`), squash to
    `squash_to` (width, height; LANCZOS) where given, and resize to the smart_resize size
    (bicubic, as qwen-vl-utils). With `then_within` (EasyR1's pipeline, `model_size`): resized
    by EasyR1's `process_image` first, in the file's own mode with PIL's default filter (nearest
    for a palette image), and only then made RGB by PIL's convert, which drops an alpha channel
    where qwen-vl-utils paints it over white (hiyouga/EasyR1 b44b311, GUI-R1 d43eea2
    verl/utils/dataset.py); then smart-resized within those limits (bicubic, as its processor).
    The data's size limit was checked when the record was read (RecordContext.image); here only
    PIL's own refusal applies."""
    with open_image(path, PIL_REFUSES_ABOVE) as im:
        if jpeg_quality:
            image = jpeg_roundtrip(im, jpeg_quality)
        else:
            image = to_rgb(im) if then_within is None else im.copy()
    if squash_to is not None and image.size != squash_to:
        image = image.resize(squash_to, Image.Resampling.LANCZOS)
    height, width = model_size(image.height, image.width, factor, min_pixels, max_pixels, then_within)
    if then_within is not None:
        first_h, first_w = easyr1_size(image.height, image.width, min_pixels, max_pixels)
        if (first_w, first_h) != image.size:
            image = image.resize((first_w, first_h))
        image = image if image.mode == "RGB" else image.convert("RGB")
    if (width, height) != image.size:
        image = image.resize((width, height), Image.Resampling.BICUBIC)
    return image
