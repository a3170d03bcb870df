"""Scene-graph data in R1-SGG's record format, and a synthetic generator.

R1-SGG (gpt4vision/R1-SGG; the Hugging Face sets JosephZ/vg150_train_sgg_prompt and
JosephZ/psg_train_sg) record:
    {"image": "images/x.png", "image_id": "2343", "objects": [{"id": "man.1", "bbox": [x1, y1, x2, y2]}],
     "relationships": [{"subject": "man.1", "predicate": "riding", "object": "horse.2"}]}
boxes in original pixels; `objects` and `relationships` are lists or JSON strings of them
(the Hugging Face sets store strings). Synthetic scenes name each shape "<shape>.<n>" and
relate every pair of shapes by where the first lies from the second (left of, right of,
above, below).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from data_prep.files import write_records_atomic
from data_prep.shapes import SceneSpec, make_scene, spatial_relation

PREDICATES = ("left of", "right of", "above", "below")


def scene_graph_spec() -> SceneSpec:
    return SceneSpec(min_objects=2, max_objects=4, min_side=160, max_side=256)


def write_synthetic_scene_graphs(path: str | Path, size: int, seed: int, spec: SceneSpec | None = None) -> Path:
    """`size` scene-graph records over shape scenes; images under images/ beside `path`."""
    path = Path(path)
    spec = spec or scene_graph_spec()
    rng = np.random.default_rng(seed)
    (path.parent / "images").mkdir(parents=True, exist_ok=True)
    records = []
    while len(records) < size:
        scene = make_scene(spec, rng)
        if len(scene.objects) < 2:
            continue
        ids = [f"{o.shape}.{i}" for i, o in enumerate(scene.objects, start=1)]
        relationships = [
            {"subject": ids[i], "predicate": spatial_relation(a, b), "object": ids[j]}
            for i, a in enumerate(scene.objects)
            for j, b in enumerate(scene.objects)
            if i < j
        ]
        image = f"images/{path.stem}_{len(records):05d}.png"
        scene.image.save(path.parent / image)
        records.append(
            {
                "image": image,
                "image_id": f"{path.stem}-{len(records)}",
                "width": scene.image.width,
                "height": scene.image.height,
                "objects": [{"id": name, "bbox": o.box} for name, o in zip(ids, scene.objects, strict=True)],
                "relationships": relationships,
            }
        )
    write_records_atomic(path, records)
    return path
