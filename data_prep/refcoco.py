"""RefCOCO-style grounding data in VLM-R1's REC json format.

A record: {"image": "images/x.png", "problem": "...", "normal_caption": "...",
"solution": [x1, y1, x2, y2] (original pixels), "height": H, "width": W}.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from data_prep.shapes import SceneSpec, make_scene, referring_expression

REC_PROBLEM = "Please provide the bounding box coordinate of the region this sentence describes: {caption}."


def write_json_atomic(path: Path, data: object) -> None:
    """Write JSON so that a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def write_synthetic_rec(path: str | Path, size: int, seed: int, spec: SceneSpec | None = None) -> Path:
    """`size` referring-expression records over shape scenes; images under images/ beside `path`."""
    path = Path(path)
    spec = spec or SceneSpec()
    rng = np.random.default_rng(seed)
    image_dir = path.parent / "images"
    image_dir.mkdir(parents=True, exist_ok=True)
    records = []
    while len(records) < size:
        scene = make_scene(spec, rng)
        if not scene.objects:
            continue
        index = int(rng.integers(len(scene.objects)))
        caption = referring_expression(scene, index)
        if caption is None:
            continue
        relative = f"images/{path.stem}_{len(records):06d}.png"
        scene.image.save(path.parent / relative)
        records.append(
            {
                "image": relative,
                "problem": REC_PROBLEM.format(caption=caption),
                "normal_caption": caption,
                "solution": scene.objects[index].box,
                "height": scene.image.height,
                "width": scene.image.width,
            }
        )
    write_json_atomic(path, records)
    return path
