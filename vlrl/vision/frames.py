"""Coordinate frames: the one place where boxes and points change frame.

Ground truth is stored in original-image pixels. A model reads and writes another frame:

- ``absolute`` (Qwen2.5-VL): pixels of the image after smart_resize (the model family's factor);
- ``norm1000`` (Qwen2-VL, Qwen3-VL, Qwen3.5): 0..1000 normalized by the original width and
  height, x / width * 1000 (Qwen's "relative coordinates");
- ``original``: original pixels (for scoring outputs of systems that already map back).

Tasks convert ground truth into the model's frame for prompts and SFT targets, and
predictions back into the original frame for rewards and metrics.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from vlrl.vision.resize import model_size

FrameKind = Literal["absolute", "norm1000", "original"]
FRAME_KINDS: tuple[str, ...] = ("absolute", "norm1000", "original")


@dataclass(frozen=True)
class Frame:
    """Maps coordinates between an image's original pixels and the model's frame."""

    kind: FrameKind
    width: int  # original image
    height: int
    model_width: float  # extent of the model's frame along x
    model_height: float

    @classmethod
    def for_image(
        cls,
        kind: FrameKind,
        width: int,
        height: int,
        min_pixels: int,
        max_pixels: int,
        factor: int | None = None,
        then_within: tuple[int, int] | None = None,
    ) -> Frame:
        """`factor` (smart_resize's) is needed by the absolute frame only; `then_within`:
        EasyR1's resize (`model_size`)."""
        if kind == "absolute":
            if factor is None:
                raise ValueError("the absolute frame needs the model's resize factor")
            resized_h, resized_w = model_size(height, width, factor, min_pixels, max_pixels, then_within)
            return cls(kind, width, height, resized_w, resized_h)
        if kind == "norm1000":
            return cls(kind, width, height, 1000, 1000)
        if kind == "original":
            return cls(kind, width, height, width, height)
        raise ValueError(f"unknown frame kind {kind!r}; expected one of {FRAME_KINDS}")

    # Where the model's extent equals the image's, the frames coincide and a conversion is the
    # identity, exactly: x / 728 * 728 is 100.00000000000001 for x = 100, which would flip a
    # strict comparison on a box edge (GUI-R1 compares in the model's frame, unconverted).
    # Elsewhere division comes first, as VLM-R1 writes it, so results agree to the last bit.
    def x_to_original(self, x: float) -> float:
        if self.model_width == self.width:
            return float(x)
        return x / self.model_width * self.width

    def y_to_original(self, y: float) -> float:
        if self.model_height == self.height:
            return float(y)
        return y / self.model_height * self.height

    def x_to_model(self, x: float) -> float:
        if self.model_width == self.width:
            return float(x)
        return x / self.width * self.model_width

    def y_to_model(self, y: float) -> float:
        if self.model_height == self.height:
            return float(y)
        return y / self.height * self.model_height

    def box_to_original(self, box: Sequence[float]) -> list[float]:
        x1, y1, x2, y2 = box
        return [self.x_to_original(x1), self.y_to_original(y1), self.x_to_original(x2), self.y_to_original(y2)]

    def box_to_model(self, box: Sequence[float], integer: bool = True) -> list[float]:
        x1, y1, x2, y2 = box
        out = [self.x_to_model(x1), self.y_to_model(y1), self.x_to_model(x2), self.y_to_model(y2)]
        return [round(v) for v in out] if integer else out

    def point_to_original(self, point: Sequence[float]) -> list[float]:
        x, y = point
        return [self.x_to_original(x), self.y_to_original(y)]

    def point_to_model(self, point: Sequence[float], integer: bool = True) -> list[float]:
        x, y = point
        out = [self.x_to_model(x), self.y_to_model(y)]
        return [round(v) for v in out] if integer else out
