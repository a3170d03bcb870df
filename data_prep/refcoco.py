"""RefCOCO-style grounding data in VLM-R1's REC json format.

A record: {"image": "images/x.png", "problem": "...", "normal_caption": "...",
"solution": [x1, y1, x2, y2] (original pixels), "height": H, "width": W}.

Two extensions, both optional: an expression that names several objects has a list of
boxes as its solution ([[x1, y1, x2, y2], ...]); a record may carry its target's COCO
polygon segmentation ([[x1, y1, x2, y2, ...], ...]; with several targets, one such list
per target, in the order of the boxes).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from data_prep.files import write_records_atomic
from data_prep.shapes import ExpressionStyle, SceneSpec, group_expression, make_scene, referring_expression

REC_PROBLEM = "Please provide the bounding box coordinate of the region this sentence describes: {caption}."


MAX_UNNAMED_SCENES = 1000  # the default scenes name one of their objects 390 times in 400 (seed 0)


def write_synthetic_rec(
    path: str | Path,
    size: int,
    seed: int,
    spec: SceneSpec | None = None,
    style: ExpressionStyle = "refcoco",
    multi_fraction: float = 0.0,
    polygons: bool = False,
) -> Path:
    """`size` referring-expression records over shape scenes; images under images/ beside `path`.

    `style` picks the expression grammar (see `referring_expression`); a `multi_fraction` of
    the records name a group of objects ("all the red shapes": a list of boxes); with
    `polygons`, every record carries its targets' exact outlines as COCO segmentation.
    """
    path = Path(path)
    spec = spec or SceneSpec()
    rng = np.random.default_rng(seed)
    image_dir = path.parent / "images"
    image_dir.mkdir(parents=True, exist_ok=True)
    records: list[dict] = []
    unnamed = 0  # scenes in a row with no object an expression names: a spec that never gives one
    while len(records) < size:
        if unnamed >= MAX_UNNAMED_SCENES:
            raise ValueError(
                f"synthetic_scene: {unnamed} scenes in a row held no object an expression names ({spec.min_objects} to "
                f"{spec.max_objects} objects of colors {list(spec.colors)}, shapes {list(spec.shapes)}, sizes "
                f"{list(spec.sizes)}): allow at least one object (two for expressions naming several), or more "
                "colors, shapes or sizes"
            )
        unnamed += 1
        scene = make_scene(spec, rng)
        if not scene.objects:
            continue
        if multi_fraction > 0 and rng.random() < multi_fraction:
            found = group_expression(scene, style, rng)
            if found is None:
                continue
            caption, indices = found
        else:
            indices = [int(rng.integers(len(scene.objects)))]
            caption = referring_expression(scene, indices[0], style)
            if caption is None:
                continue
        unnamed = 0
        targets = [scene.objects[i] for i in indices]
        relative = f"images/{path.stem}_{len(records):06d}.png"
        scene.image.save(path.parent / relative)
        record = {
            "image": relative,
            "problem": REC_PROBLEM.format(caption=caption),
            "normal_caption": caption,
            "solution": targets[0].box if len(targets) == 1 else [t.box for t in targets],
            "height": scene.image.height,
            "width": scene.image.width,
        }
        if polygons:
            outlines = [[t.polygon()] for t in targets]
            record["segmentation"] = outlines[0] if len(targets) == 1 else outlines
        records.append(record)
    write_records_atomic(path, records)
    return path
