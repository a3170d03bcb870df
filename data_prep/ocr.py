"""OCR data: image + text records, and a synthetic generator of rendered words and numbers.

Record: {"image": "images/x.png", "text": "OPEN 24"}. tasks/ocr.py also reads Video-R1's
image OCR records ("path", "problem", "solution": "<answer>...</answer>") and
conversation records ("conversations": [{"from": "human", ...}, {"from": "gpt", "value": text}]).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import ImageDraw, ImageFont

from data_prep.files import write_records_atomic
from data_prep.shapes import background

WORDS = (
    "OPEN", "EXIT", "SALE", "STOP", "PARK", "HOTEL", "TAXI", "GATE", "NORTH", "SOUTH",
    "cafe", "road", "bus", "train", "bakery", "museum", "garden", "market", "river", "bridge",
    "Main", "Street", "Station", "Platform", "Library", "Office",
)  # fmt: skip
BACKGROUNDS = ("solid", "gradient", "noise")


def random_text(rng: np.random.Generator) -> str:
    """One to three tokens: words from WORDS or numbers of one to four digits."""
    tokens = []
    for _ in range(int(rng.integers(1, 4))):
        if rng.random() < 0.3:
            tokens.append(str(int(rng.integers(0, 10 ** int(rng.integers(1, 5))))))
        else:
            tokens.append(str(rng.choice(WORDS)))
    return " ".join(tokens)


def write_synthetic_ocr(path: str | Path, size: int, seed: int) -> Path:
    """`size` images of short dark text (PIL's default font, 18-32 px) on light backgrounds."""
    path = Path(path)
    rng = np.random.default_rng(seed)
    (path.parent / "images").mkdir(parents=True, exist_ok=True)
    records = []
    for index in range(size):
        text = random_text(rng)
        font = ImageFont.load_default(size=int(rng.integers(18, 33)))
        left, top, right, bottom = font.getbbox(text)
        margin_x, margin_y = (int(v) for v in rng.integers(12, 40, size=2))
        width, height = right - left + 2 * margin_x, bottom - top + 2 * margin_y
        image = background(str(rng.choice(BACKGROUNDS)), width, height, rng)
        ink = tuple(int(c) for c in rng.integers(0, 70, size=3))
        ImageDraw.Draw(image).text((margin_x - left, margin_y - top), text, font=font, fill=ink)
        relative = f"images/{path.stem}_{index:06d}.png"
        image.save(path.parent / relative)
        records.append({"image": relative, "text": text, "width": width, "height": height})
    write_records_atomic(path, records)
    return path
