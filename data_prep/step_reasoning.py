"""Step-wise reasoning data in R1-VL's record format, and a synthetic generator.

R1-VL (jingyi0000/R1-VL, R1-VL-10K) record, a JSON list:
    {"image_path": "images/x.png", "problem": "...",
     "solution": "### Image Description: ... ### Step 1: ... ### The final answer is: 3",
     "key_steps": {"Steps": ["2 circles", ["2 + 1 = 3", "3 in total"]]}}
A key step is a phrase or a list of alternative phrases. The synthetic problems add two
counts of shapes drawn in the image; the solution is a full Mulberry-style chain.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from data_prep.files import write_records_atomic
from data_prep.shapes import SHAPES, SceneSpec, make_scene

QUESTION = "How many {first}s and {second}s are there in the image in total?"
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def reasoning_spec() -> SceneSpec:
    return SceneSpec(min_objects=2, max_objects=6, min_side=160, max_side=256, sizes=("small",))


def _count_phrase(n: int, shape: str) -> str:
    return f"{n} {shape}" if n == 1 else f"{n} {shape}s"


def write_synthetic_step_reasoning(path: str | Path, size: int, seed: int, spec: SceneSpec | None = None) -> Path:
    """`size` counting-and-adding problems over shape scenes, with their reasoning chains and
    key steps (each count, with its number also spelled out, and the sum); images beside `path`."""
    path = Path(path)
    spec = spec or reasoning_spec()
    rng = np.random.default_rng(seed)
    (path.parent / "images").mkdir(parents=True, exist_ok=True)
    records = []
    for index in range(size):
        scene = make_scene(spec, rng)
        first, second = (str(s) for s in rng.choice(SHAPES, size=2, replace=False))
        a = sum(o.shape == first for o in scene.objects)
        b = sum(o.shape == second for o in scene.objects)
        shapes = ", ".join(f"a {o.color} {o.shape}" for o in scene.objects)
        solution = (
            f"### Image Description:\nThe image shows {len(scene.objects)} shapes: {shapes}.\n"
            f"### Rationales:\nCount the {first}s and the {second}s, then add the two counts.\n"
            "### Let's think step by step.\n"
            f"### Step 1:\nThere are {_count_phrase(a, first)}.\n"
            f"### Step 2:\nThere are {_count_phrase(b, second)}.\n"
            f"### Step 3:\n{a} + {b} = {a + b}.\n"
            f"### The final answer is: {a + b}"
        )
        key_steps = [
            [_count_phrase(a, first), _count_phrase(a, first).replace(str(a), NUMBER_WORDS[a], 1)],
            [_count_phrase(b, second), _count_phrase(b, second).replace(str(b), NUMBER_WORDS[b], 1)],
            f"{a} + {b} = {a + b}",
        ]
        image = f"images/{path.stem}_{index:05d}.png"
        scene.image.save(path.parent / image)
        records.append(
            {
                "image_path": image,
                "problem": QUESTION.format(first=first, second=second),
                "solution": solution,
                "key_steps": {"Steps": key_steps},
            }
        )
    write_records_atomic(path, records)
    return path
