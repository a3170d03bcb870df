"""Image classification data in CLS-RL's jsonl record format, and a synthetic generator.

CLS-RL record (few-shot-data.ipynb in github.com/minglllli/CLS-RL):
    {"image": "images/x.png", "label": "red circle", "split": "train",
     "problem": "What type of object is in the photo?\nPlease choose one from list [ blue square, red circle]."}
The candidate list lives inside "problem", in CLS-RL's wording; this package also reads an
explicit "choices" list (and builds the problem from it when "problem" is absent).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from data_prep.files import write_records_atomic
from data_prep.shapes import SceneSpec, make_scene

CLS_RL_QUESTION = "What type of object is in the photo?"
SYNTHETIC_CHOICES = 6  # candidates shown per synthetic record, the true label among them


def choice_text(choices: Sequence[str]) -> str:
    """CLS-RL's candidate sentence: "Please choose one from list [ a, b, c]."."""
    return "Please choose one from list [ " + ", ".join(choices) + "]."


def cls_rl_problem(question: str, choices: Sequence[str]) -> str:
    return f"{question}\n{choice_text(choices)}" if choices else question


def shape_labels(spec: SceneSpec) -> list[str]:
    """The fixed label set of the synthetic task: every "color shape" pair."""
    return [f"{color} {shape}" for color in spec.colors for shape in spec.shapes]


def write_synthetic_classification(path: str | Path, size: int, seed: int, spec: SceneSpec | None = None) -> Path:
    """`size` one-object scenes labelled "color shape" (18 classes), CLS-RL records at `path`."""
    path = Path(path)
    spec = spec or SceneSpec(min_objects=1, max_objects=1, sizes=("large",))
    labels = shape_labels(spec)
    rng = np.random.default_rng(seed)
    (path.parent / "images").mkdir(parents=True, exist_ok=True)
    records = []
    for index in range(size):
        scene = make_scene(spec, rng, n_objects=1)
        obj = scene.objects[0]
        label = f"{obj.color} {obj.shape}"
        others = [c for c in labels if c != label]
        picked = [str(c) for c in rng.choice(others, size=min(SYNTHETIC_CHOICES, len(labels)) - 1, replace=False)]
        choices = [str(c) for c in rng.permutation([*picked, label])]
        relative = f"images/{path.stem}_{index:06d}.png"
        scene.image.save(path.parent / relative)
        records.append(
            {
                "image": relative,
                "label": label,
                "problem": cls_rl_problem(CLS_RL_QUESTION, choices),
                "choices": choices,
                "split": path.stem,
                "width": scene.image.width,
                "height": scene.image.height,
            }
        )
    write_records_atomic(path, records)
    return path
