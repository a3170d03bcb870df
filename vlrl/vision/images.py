"""Reading images for the model: RGB, resized by smart_resize before the processor sees them."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from vlrl.vision.resize import IMAGE_FACTOR, smart_resize


def image_size(path: str | Path) -> tuple[int, int]:
    """(width, height) from the file header, without decoding the pixels."""
    with Image.open(path) as im:
        return im.size


def to_rgb(image: Image.Image) -> Image.Image:
    """RGB; transparent pixels over white, as qwen-vl-utils does."""
    if image.mode == "RGBA":
        background = Image.new("RGB", image.size, (255, 255, 255))
        background.paste(image, mask=image.split()[3])
        return background
    return image.convert("RGB")


def load_image(
    path: str | Path, min_pixels: int, max_pixels: int, factor: int = IMAGE_FACTOR
) -> Image.Image:
    """Open, convert to RGB and resize to the smart_resize size (bicubic, as qwen-vl-utils)."""
    with Image.open(path) as im:
        image = to_rgb(im)
    height, width = smart_resize(image.height, image.width, factor, min_pixels, max_pixels)
    if (width, height) != image.size:
        image = image.resize((width, height), Image.Resampling.BICUBIC)
    return image
