"""Synthetic math VQA in EasyR1's Geometry3K record format: arithmetic over drawn shapes.

Record (hiyouga/geometry3k's columns, images as local paths; `count` and `addend` are what
the synthetic problem is made of, which EasyR1's reader ignores):
    {"images": ["images/x.png"], "problem": "<image>How many circles are in the image? ...",
     "answer": "5", "count": 3, "addend": 2, "width": 140, "height": 128}
Every `text_only_every`-th record (when set) is a text-only problem, no image (LMM-R1's
stage-1 data is text-only): {"problem": "What is 3 plus 2?", "answer": "5", "count": 3, "addend": 2}.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from data_prep.files import write_records_atomic
from data_prep.shapes import SceneSpec, make_scene

QUESTION = "<image>How many {shape}s are in the image? What is that number plus {addend}?"
TEXT_QUESTION = "What is {count} plus {addend}?"


@dataclass
class MathSceneSpec:
    """The shapes to count (one kind, so the count is all there is to read) and the addends."""

    scene: SceneSpec = field(
        default_factory=lambda: SceneSpec(
            min_objects=1,
            max_objects=4,
            min_side=112,
            max_side=168,
            sizes=("large",),
            shapes=("circle",),
            colors=("red",),
            backgrounds=("solid",),
        )
    )
    max_addend: int = 3  # the addend is drawn from 0..max_addend
    text_only_every: int = 0  # every N-th record has no image (0: none)


def write_synthetic_math_vqa(path: str | Path, size: int, seed: int, spec: MathSceneSpec | None = None) -> Path:
    """`size` problems "count the shapes, add k"; images beside `path` in images/."""
    path = Path(path)
    spec = spec or MathSceneSpec()
    rng = np.random.default_rng(seed)
    (path.parent / "images").mkdir(parents=True, exist_ok=True)
    records = []
    for index in range(size):
        addend = int(rng.integers(0, spec.max_addend + 1))
        if spec.text_only_every and index % spec.text_only_every == spec.text_only_every - 1:
            count = int(rng.integers(spec.scene.min_objects, spec.scene.max_objects + 1))
            problem = TEXT_QUESTION.format(count=count, addend=addend)
            records.append({"problem": problem, "answer": str(count + addend), "count": count, "addend": addend})
            continue
        scene = make_scene(spec.scene, rng)
        count = len(scene.objects)
        relative = f"images/{path.stem}_{index:06d}.png"
        scene.image.save(path.parent / relative)
        shape = spec.scene.shapes[0] if len(spec.scene.shapes) == 1 else "shape"
        records.append(
            {
                "images": [relative],
                "problem": QUESTION.format(shape=shape, addend=addend),
                "answer": str(count + addend),
                "count": count,
                "addend": addend,
                "width": scene.image.width,
                "height": scene.image.height,
            }
        )
    write_records_atomic(path, records)
    return path
