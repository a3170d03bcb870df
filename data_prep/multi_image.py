"""Multi-image grounding data in UniVG-R1's record format, and a synthetic generator.

UniVG-R1 (AMAP-ML/UniVG-R1, stage2_rl.json) record, a JSON list:
    {"images": ["a.png", "b.png"], "question": "<image><image>... in the second image ...",
     "answer": [x1, y1, x2, y2]}      # Qwen2-VL's 0-1000 frame of the image the question names
vlrl reads one more key, optional: "target_image", the 0-based index of that image.

Synthetic records hold 2 to `max_images` shape scenes and ask for one shape in one of them,
either named ("In the second image, locate the small red circle.") or by reference to another
image ("The first image shows one shape. Locate the shape of the same color and kind in the
third image."). Each names its target image.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from data_prep.files import write_records_atomic
from data_prep.shapes import Scene, SceneSpec, make_scene, referring_expression

ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth")
NAMED = "In the {target} image, locate {expression}."
BY_REFERENCE = (
    "The {reference} image shows one shape. Locate the shape of the same color and kind in the {target} image."
)


def multi_image_spec() -> SceneSpec:
    return SceneSpec(min_objects=1, max_objects=3, min_side=112, max_side=224, sizes=("large",))


def norm1000_box(box: list[int], width: int, height: int) -> list[int]:
    """A pixel box in Qwen2-VL's 0-1000 frame of its image (x / width * 1000, rounded)."""
    x1, y1, x2, y2 = box
    return [round(x1 / width * 1000), round(y1 / height * 1000), round(x2 / width * 1000), round(y2 / height * 1000)]


def _question(scenes: list[Scene], spec: SceneSpec, rng: np.random.Generator) -> tuple[str, int, list[int]] | None:
    """(question, target image, target box in pixels), or None when these scenes allow none. A
    question by reference replaces another scene with one showing a single shape like the target."""
    target = int(rng.integers(len(scenes)))
    objects = scenes[target].objects
    if not objects:
        return None
    index = int(rng.integers(len(objects)))
    chosen = objects[index]
    unique = sum((o.color, o.shape) == (chosen.color, chosen.shape) for o in objects) == 1
    if unique and rng.random() < 0.5:
        reference = int(rng.choice([i for i in range(len(scenes)) if i != target]))
        alike = dataclasses.replace(spec, colors=(chosen.color,), shapes=(chosen.shape,))
        scenes[reference] = make_scene(alike, rng, n_objects=1)
        question = BY_REFERENCE.format(reference=ORDINALS[reference], target=ORDINALS[target])
        return question, target, chosen.box
    expression = referring_expression(scenes[target], index)
    if expression is None:
        return None
    return NAMED.format(target=ORDINALS[target], expression=expression), target, chosen.box


def write_synthetic_multi_image(
    path: str | Path, size: int, seed: int, max_images: int = 3, spec: SceneSpec | None = None
) -> Path:
    """`size` multi-image grounding records; images under images/ beside `path`."""
    if not 2 <= max_images <= len(ORDINALS):
        raise ValueError(f"max_images must be in [2, {len(ORDINALS)}], got {max_images}")
    path = Path(path)
    spec = spec or multi_image_spec()
    rng = np.random.default_rng(seed)
    (path.parent / "images").mkdir(parents=True, exist_ok=True)
    records = []
    while len(records) < size:
        count = int(rng.integers(2, max_images + 1))
        scenes = [make_scene(spec, rng) for _ in range(count)]
        found = _question(scenes, spec, rng)
        if found is None:
            continue
        question, target, box = found
        names = [f"images/{path.stem}_{len(records):05d}_{i}.png" for i in range(count)]
        for name, scene in zip(names, scenes, strict=True):
            scene.image.save(path.parent / name)
        width, height = scenes[target].image.size
        records.append(
            {
                "images": names,
                "question": "<image>" * count + question,
                "answer": norm1000_box(box, width, height),
                "target_image": target,
            }
        )
    write_records_atomic(path, records)
    return path
