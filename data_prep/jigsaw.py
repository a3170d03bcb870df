"""Jigsaw puzzles from any folder of images (or from synthetic scenes), as Jigsaw-R1 builds them.

Puzzle construction follows Jigsaw-R1 (arXiv 2505.23590; github.com/zifuwanggg/Jigsaw-R1,
`utils/jigsaw_utils.py` and `utils/prompt.py`): the image is converted to RGB and cropped from
the top-left corner to a multiple of the grid (width to a multiple of n, height of m); the
m x n patches are shuffled by a uniformly random permutation (the identity included, as in
Jigsaw-R1) and pasted into ONE jigsaw image of the cropped size. The ground truth is the
"forward" list: entry X (1-based, row-major) is the original position of the patch now at X.

Jigsaw-R1 draws puzzles on the fly; vlrl writes them to files so that a split is fixed,
inspectable and reproducible. A record (one per line in a .jsonl file, in a list in a .json file):

    {"id": "000003", "image": "images/train_000003.png", "source_image": "cat.jpg",
     "width": 320, "height": 240, "m": 2, "n": 2, "permutation": [3, 1, 4, 2],
     "question_type": "pair", "k": 1, "l": 4,
     "choices": ["1 is directly above 4", "1 is on the lower left of 4", ...], "answer": "B"}

- `image`: the shuffled puzzle, relative to the data file's folder (or absolute, inside that folder
  unless `data.allow_outside_root=true`).
- `m`, `n`: rows and columns; `permutation`: the forward answer, a permutation of 1..m*n.
- `question_type` "full": the answer is `permutation` itself (no more keys).
- "pair": positions `k` != `l`; `choices` are Jigsaw-R1's relation sentences (2 for a 1-row or
  1-column grid, else 8) in the order shown; `answer` is the letter of the true relation of
  the two patches in the original image.
- "multiple": `choices` are candidate answers written as grids ("3 1\\n4 2"); `answer` is the
  letter of the one equal to `permutation`.
- "single": position `k`; `answer` is `permutation[k-1]`.

Deviations from Jigsaw-R1's generator, each to keep a split well defined:
- multiple-choice distractors are distinct and never equal to the answer (Jigsaw-R1 may add
  the answer twice), and a grid with fewer than `n_choices` permutations offers them all
  (Jigsaw-R1's loop never ends there, e.g. 4 choices for a 2x1 puzzle);
- the grid curriculum is a property of the written file (see `write_jigsaw_dataset`), where
  Jigsaw-R1 switches grid after a number of dataset reads.
Patch-border masking (`mask_ratio`) and the "box" question are not implemented.
"""

from __future__ import annotations

import json
import math
import string
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

import numpy as np
from PIL import Image

from data_prep.files import write_records_atomic
from data_prep.shapes import SceneSpec, make_scene
from rewards.jigsaw import QUESTION_TYPES

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff"})
LETTERS = string.ascii_uppercase
MAX_CHOICES = 25  # Jigsaw-R1 asserts n_c < 26

# Jigsaw-R1's relation sentences for pair questions, in its order: the first two serve 1-row
# grids, the next two 1-column grids, all eight other grids.
PAIR_RELATIONS: tuple[str, ...] = (
    "{k} is directly to the left of {l}",
    "{k} is directly to the right of {l}",
    "{k} is directly above {l}",
    "{k} is directly below {l}",
    "{k} is on the upper left of {l}",
    "{k} is on the upper right of {l}",
    "{k} is on the lower left of {l}",
    "{k} is on the lower right of {l}",
)

# (vertical, horizontal) place of patch k against patch l -> its sentence in PAIR_RELATIONS.
_RELATION_INDEX = {
    ("same", "left"): 0,
    ("same", "right"): 1,
    ("upper", "same"): 2,
    ("lower", "same"): 3,
    ("upper", "left"): 4,
    ("upper", "right"): 5,
    ("lower", "left"): 6,
    ("lower", "right"): 7,
}

GridSpec = str | tuple[int, int]


# -- grids and answers ------------------------------------------------------------------------
def parse_grid_spec(spec: GridSpec) -> tuple[int, int]:
    """ "3x1" or (3, 1) -> (m rows, n columns); at least two patches."""
    if isinstance(spec, str):
        parts = spec.lower().split("x")
        if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
            raise ValueError(f"grid {spec!r} must read 'MxN' (rows x columns), e.g. '2x1'")
        m, n = int(parts[0]), int(parts[1])
    else:
        m, n = (int(v) for v in spec)
    if m < 1 or n < 1 or m * n < 2:
        raise ValueError(f"grid {spec!r} must have m, n >= 1 and at least 2 patches")
    return m, n


def grid_name(m: int, n: int) -> str:
    return f"{m}x{n}"


def grid_string(values: Sequence[int], m: int, n: int) -> str:
    """Values laid out as Jigsaw-R1 writes a grid: a line per row, entries separated by a space."""
    return "\n".join(" ".join(str(values[i * n + j]) for j in range(n)) for i in range(m))


def pair_choices(m: int, n: int, k: int, l: int) -> list[str]:  # noqa: E741 - Jigsaw-R1's names
    """Every relation sentence a pair question on an m x n grid offers, in Jigsaw-R1's order."""
    relations = PAIR_RELATIONS[:2] if m == 1 else PAIR_RELATIONS[2:4] if n == 1 else PAIR_RELATIONS
    return [r.format(k=k, l=l) for r in relations]


def pair_relation(permutation: Sequence[int], n: int, k: int, l: int) -> str:  # noqa: E741
    """Where the patch now at k sits relative to the patch now at l in the original image."""
    k_row, k_col = divmod(permutation[k - 1] - 1, n)
    l_row, l_col = divmod(permutation[l - 1] - 1, n)
    vertical = "same" if k_row == l_row else "upper" if k_row < l_row else "lower"
    horizontal = "same" if k_col == l_col else "left" if k_col < l_col else "right"
    return PAIR_RELATIONS[_RELATION_INDEX[vertical, horizontal]].format(k=k, l=l)


# -- images -----------------------------------------------------------------------------------
def crop_to_grid(image: Image.Image, m: int, n: int) -> Image.Image:
    """Jigsaw-R1's crop: keep the top-left (width // n * n) x (height // m * m)."""
    width, height = image.size
    if width < n or height < m:
        raise ValueError(f"a {width}x{height} image is too small for a {m}x{n} grid")
    return image.crop((0, 0, width // n * n, height // m * m))


def _patch_boxes(width: int, height: int, m: int, n: int) -> list[tuple[int, int, int, int]]:
    pw, ph = width // n, height // m
    return [(j * pw, i * ph, (j + 1) * pw, (i + 1) * ph) for i in range(m) for j in range(n)]


def shuffle_image(image: Image.Image, permutation: Sequence[int], m: int, n: int) -> Image.Image:
    """The jigsaw image: position X shows the original patch `permutation[X]` (1-based).
    `image` must already split evenly (see `crop_to_grid`)."""
    boxes = _patch_boxes(*image.size, m, n)
    out = Image.new("RGB", image.size)
    for position, original in enumerate(permutation):
        out.paste(image.crop(boxes[original - 1]), boxes[position][:2])
    return out


def solve_image(puzzle: Image.Image, permutation: Sequence[int], m: int, n: int) -> Image.Image:
    """The original image back from a puzzle and its forward answer (inverse of `shuffle_image`)."""
    boxes = _patch_boxes(*puzzle.size, m, n)
    out = Image.new("RGB", puzzle.size)
    for position, original in enumerate(permutation):
        out.paste(puzzle.crop(boxes[position]), boxes[original - 1][:2])
    return out


def synthetic_source_image(rng: np.random.Generator) -> Image.Image:
    """A shape scene over a four-corner colour field, so that no two patches look alike."""
    scene = make_scene(SceneSpec(min_objects=2, max_objects=5, backgrounds=("solid",)), rng)
    width, height = scene.image.size
    corners = rng.integers(0, 256, size=(2, 2, 3)).astype(np.float64)
    ty = np.linspace(0.0, 1.0, height)[:, None, None]
    tx = np.linspace(0.0, 1.0, width)[None, :, None]
    top = (1 - tx) * corners[0, 0] + tx * corners[0, 1]
    bottom = (1 - tx) * corners[1, 0] + tx * corners[1, 1]
    field = Image.fromarray(((1 - ty) * top + ty * bottom).astype(np.uint8), "RGB")
    return Image.blend(scene.image, field, 0.5)


def list_images(folder: str | Path, listing: str | Path | None = None) -> list[Path]:
    """Image files under `folder` (recursively), in a fixed order: sorted by relative path.
    With `listing` (a JSON list of paths relative to `folder`, like Jigsaw-R1's
    data/train2014.json), exactly those images, in the listed order."""
    root = Path(folder)
    if not root.is_dir():
        raise ValueError(f"image folder not found: {root}")
    if listing is not None:
        names = json.loads(Path(listing).read_text(encoding="utf-8"))
        if not isinstance(names, list) or not names or not all(isinstance(x, str) for x in names):
            raise ValueError(f"{listing}: expected a non-empty JSON list of image paths relative to {root}")
        missing = [x for x in names if not (root / x).is_file()]
        if missing:
            raise ValueError(f"{listing}: {len(missing)} listed image(s) not under {root}, e.g. {missing[0]}")
        return [root / x for x in names]
    found = [p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES]
    if not found:
        raise ValueError(f"no images ({', '.join(sorted(IMAGE_SUFFIXES))}) under {root}")
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


# -- the curriculum ---------------------------------------------------------------------------
GridsArg = str | Sequence[str | tuple[str, float]] | Mapping[str, float]


def normalize_grids(grids: GridsArg) -> list[tuple[int, int, float]]:
    """(m, n, weight) of every grid: "2x2"; ["2x1", "3x1"]; {"2x1": 1, "3x1": 3}; [("3x1", 1), ("4x1", 1)]."""
    if isinstance(grids, str):
        items: list = [(grids, 1.0)]
    elif isinstance(grids, Mapping):
        items = list(grids.items())
    else:
        items = [(g, 1.0) if isinstance(g, str) else tuple(g) for g in grids]
    if not items:
        raise ValueError("grids is empty: give at least one grid such as '2x2'")
    out = []
    for item in items:
        if len(item) != 2 or not isinstance(item[0], str):
            raise ValueError(f"grid entry {item!r} must be 'MxN' or ('MxN', weight)")
        spec, weight = item
        if (
            isinstance(weight, bool)
            or not isinstance(weight, (int, float))
            or not (math.isfinite(weight) and weight > 0)
        ):
            raise ValueError(f"grid {spec!r} has weight {weight!r}; weights must be numbers > 0")
        out.append((*parse_grid_spec(spec), float(weight)))
    return out


def _grid_plan(
    grids: list[tuple[int, int, float]], size: int, curriculum: str, rng: np.random.Generator
) -> list[tuple[int, int]]:
    """The grid of every record. "mix": drawn independently with probability by weight.
    "stages": consecutive blocks in the listed order, block sizes by weight (a schedule by index)."""
    weights = np.array([w for _, _, w in grids])
    if curriculum == "mix":
        picks = rng.choice(len(grids), size=size, p=weights / weights.sum())
        return [grids[int(i)][:2] for i in picks]
    if curriculum == "stages":
        bounds = np.rint(np.cumsum(weights) / weights.sum() * size).astype(int)
        return [grids[int(np.searchsorted(bounds, i, side="right"))][:2] for i in range(size)]
    raise ValueError(f"curriculum must be 'mix' or 'stages', got {curriculum!r}")


# -- questions --------------------------------------------------------------------------------
def _question_fields(
    question_type: str, permutation: list[int], m: int, n: int, n_choices: int, rng: np.random.Generator
) -> dict:
    size = m * n
    if question_type == "full":
        return {}
    if question_type == "single":
        k = int(rng.integers(1, size + 1))
        return {"k": k, "answer": permutation[k - 1]}
    if question_type == "pair":
        k, l = (int(v) + 1 for v in rng.choice(size, size=2, replace=False))  # noqa: E741
        choices = pair_choices(m, n, k, l)
        choices = [choices[int(i)] for i in rng.permutation(len(choices))]
        pos = int(rng.integers(len(choices)))
        truth = choices.index(pair_relation(permutation, n, k, l))
        choices[truth], choices[pos] = choices[pos], choices[truth]
        return {"k": k, "l": l, "choices": choices, "answer": LETTERS[pos]}
    if question_type == "multiple":
        count = min(n_choices, math.factorial(size))
        pos = int(rng.integers(count))
        answer = grid_string(permutation, m, n)
        choices, seen = [], {answer}
        while len(choices) < count - 1:
            candidate = grid_string([int(v) + 1 for v in rng.permutation(size)], m, n)
            if candidate not in seen:
                seen.add(candidate)
                choices.append(candidate)
        choices.insert(pos, answer)
        return {"choices": choices, "answer": LETTERS[pos]}
    raise ValueError(f"question type {question_type!r} is not one of {', '.join(QUESTION_TYPES)}")


# -- writing a split --------------------------------------------------------------------------
def write_jigsaw_dataset(
    out: str | Path,
    source_folder: str | Path | None,
    size: int | None,
    seed: int,
    grids: GridsArg = "2x2",
    question_types: str | Sequence[str] = ("full",),
    *,
    curriculum: Literal["mix", "stages"] = "mix",
    shuffle_mn: bool = True,
    n_choices: int = 4,
    source_list: str | Path | None = None,
) -> Path:
    """Write `size` puzzle records to `out` (.jsonl or .json) and their images under images/ beside it.

    - source_folder: any folder of images (searched recursively, used in a seeded order, each
      once before any repeats); None: synthetic shape scenes.
    - size: None writes one puzzle per source image, as Jigsaw-R1's dataset holds one: its
      `__getitem__` seeds Python's random with the image's index, so every epoch poses an image
      the same puzzle (vlrl's puzzle for it is drawn by this function's generator, not that
      stream), and a run longer than the file repeats them as there. A number of records
      larger than the images instead gives each reuse of an image a new puzzle.
    - grids: one grid ("2x2"), a list, or grids with weights ({"2x1": 1, "3x1": 3}). The default
      2x2 is vlrl's; Jigsaw-R1's grpo.py defaults to 2x1 for its first 6,400 reads, then 3x1
      (its README recipes name their grid, as configs/jigsaw.yaml does).
    - curriculum: "mix" draws each record's grid by weight; "stages" writes consecutive blocks
      in the listed order (Jigsaw-R1's schedule: e.g. [("3x1", 1), ("4x1", 1)] puts 3x1
      first). vlrl's trainer visits a split in a seeded random order, so to train stage by
      stage, write one file per stage and train on each in turn.
    - shuffle_mn: swap rows and columns with probability 1/2 (Jigsaw-R1's default: a 2x1 grid
      also yields 1x2 puzzles).
    - question_types: any of "full", "pair", "multiple", "single"; records cycle through them.
    - n_choices: options of a multiple question (Jigsaw-R1's n_c, default 4).
    - source_list: a JSON list of image paths relative to `source_folder` to use instead of
      every image in it (Jigsaw-R1 trains on the COCO train2014 images its data/train2014.json lists).

    The output is a function of the arguments only: the same seed gives byte-identical files.
    """
    out = Path(out)
    if size is None and source_folder is None:
        raise ValueError("size None writes one puzzle per source image; give source_folder, or a size")
    if size is not None and size < 0:
        raise ValueError(f"size must be >= 0, got {size}")
    types = [question_types] if isinstance(question_types, str) else list(question_types)
    unknown = [t for t in types if t not in QUESTION_TYPES]
    if not types or unknown:
        raise ValueError(f"question_types must be a non-empty subset of {QUESTION_TYPES}, got {types}")
    if not 2 <= n_choices <= MAX_CHOICES:
        raise ValueError(f"n_choices must be in 2..{MAX_CHOICES}, got {n_choices}")
    if source_list is not None and source_folder is None:
        raise ValueError("source_list names images relative to source_folder; give source_folder too")
    sources = list_images(source_folder, source_list) if source_folder is not None else None
    if size is None:  # one puzzle per source image (a source folder is given: checked above)
        size = len(sources or [])
    rng = np.random.default_rng(seed)
    plan = _grid_plan(normalize_grids(grids), size, curriculum, rng)
    order = rng.permutation(len(sources)) if sources else None

    image_dir = out.parent / "images"
    image_dir.mkdir(parents=True, exist_ok=True)
    records = []
    for index, (m, n) in enumerate(plan):
        if sources is not None:
            path = sources[int(order[index % len(sources)])]
            try:
                with Image.open(path) as opened:
                    image = opened.convert("RGB")
            except OSError as err:
                raise ValueError(f"cannot read image {path}: {err}") from err
            source_name = path.relative_to(Path(source_folder)).as_posix()
        else:
            image = synthetic_source_image(rng)
            source_name = "synthetic"
        if shuffle_mn and rng.random() < 0.5:
            m, n = n, m
        original = crop_to_grid(image, m, n)
        permutation = [int(v) + 1 for v in rng.permutation(m * n)]
        question_type = types[index % len(types)]
        fields = _question_fields(question_type, permutation, m, n, n_choices, rng)
        relative = f"images/{out.stem}_{index:06d}.png"
        shuffle_image(original, permutation, m, n).save(out.parent / relative, format="PNG")
        record = {
            "id": f"{index:06d}",
            "image": relative,
            "source_image": source_name,
            "width": original.width,
            "height": original.height,
            "m": m,
            "n": n,
            "permutation": permutation,
            "question_type": question_type,
            **fields,
        }
        records.append(record)
    write_records_atomic(out, records)
    return out
