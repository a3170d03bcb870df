"""Counting data in PixMo-Count's and CountBench's record formats, and a synthetic generator.

PixMo-Count (allenai/pixmo-count) record, with the image downloaded to a local path:
    {"image": "images/x.png", "label": "circles", "count": 3,
     "points": [{"x": 10.5, "y": 20.0}, ...]}            # points in original pixels, optional
CountBench / CountBenchQA record:
    {"image": "images/x.png", "question": "How many circles are there in the image?",
     "number": 3, "text": "a picture of 3 circles"}      # text (the caption) optional
The synthetic writer adds "width" and "height" so records can be scored without images.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from data_prep.files import write_records_atomic
from data_prep.shapes import SceneSpec, make_scene

COUNT_QUESTION = "How many {label} are there in the image?"
COUNTBENCH_EVERY = 4  # every 4th synthetic record is written in CountBench's format


def counting_spec() -> SceneSpec:
    """Scenes for counting: up to 8 small shapes, sometimes none of the kind asked about."""
    return SceneSpec(min_objects=0, max_objects=8, min_side=192, max_side=320, sizes=("small",))


def write_synthetic_counting(path: str | Path, size: int, seed: int, spec: SceneSpec | None = None) -> Path:
    """`size` counting records over shape scenes (points = object centers); images beside `path`."""
    path = Path(path)
    spec = spec or counting_spec()
    rng = np.random.default_rng(seed)
    (path.parent / "images").mkdir(parents=True, exist_ok=True)
    records = []
    for index in range(size):
        scene = make_scene(spec, rng)
        if scene.objects and rng.random() < 0.8:  # count the kind of an object that is there
            anchor = scene.objects[int(rng.integers(len(scene.objects)))]
            shape, color = anchor.shape, anchor.color
        else:  # or a kind that may be missing: counts of zero happen
            shape, color = str(rng.choice(spec.shapes)), str(rng.choice(spec.colors))
        by_color = bool(rng.random() < 0.5)
        label = f"{color} {shape}s" if by_color else f"{shape}s"
        matched = [o for o in scene.objects if o.shape == shape and (not by_color or o.color == color)]
        relative = f"images/{path.stem}_{index:06d}.png"
        scene.image.save(path.parent / relative)
        size_fields = {"width": scene.image.width, "height": scene.image.height}
        if index % COUNTBENCH_EVERY == COUNTBENCH_EVERY - 1:
            record = {
                "image": relative,
                "question": COUNT_QUESTION.format(label=label),
                "number": len(matched),
                "text": f"a picture of {len(matched)} {label}",
            }
        else:
            points = [{"x": o.center[0], "y": o.center[1]} for o in matched]
            record = {"image": relative, "label": label, "count": len(matched), "points": points}
        records.append({**record, **size_fields})
    write_records_atomic(path, records)
    return path
