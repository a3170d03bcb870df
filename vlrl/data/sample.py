"""Sample: one prompt's images, question, ground truth and metadata, as every task sees it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vlrl.vision.frames import Frame


@dataclass
class Sample:
    """A prompt and its ground truth, in original-image coordinates.

    `frame` maps between the original image and the frame the model reads and writes;
    rewards use it to bring a prediction back to the ground truth's frame. `source` is
    "file:line" of the record, for error messages and logs. `video` is a video file the
    prompt shows after its images; `shuffle_frames`, when set, is the seed that shuffles its
    sampled frames (T-GRPO's temporal contrast; the trainer mixes a draw of each visit's into a
    task's seed). `image_size`, when set, is the (width, height) every image is squashed to
    (LANCZOS) before the model's own resize, as a source that does so trains and evaluates
    (CLS-RL's 384 x 384); `frame` is then that size's.
    """

    id: str
    task: str
    problem: str
    solution: Any
    images: list[str] = field(default_factory=list)
    frame: Frame | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    video: str = ""
    shuffle_frames: int | None = None
    image_size: tuple[int, int] | None = None
