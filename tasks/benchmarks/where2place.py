"""Where2Place as lmms-eval evaluates it (commit 75571cf): `where2place`
(lmms_eval/tasks/where2place/{where2place.yaml, _default_template_yaml, utils.py}) on
FlagEval/Where2Place @ test: point to free space a phrase describes (RoboPoint's benchmark),
scored by the share of the points that land in the row's mask.

- Prompt (prompt_suffix_type original): the question, " ", the request for a list of (x, y)
  tuples normalized to [0, 1], " ", "Return only list of tuples, don't add anything else."; the
  image before it; 1,024 new tokens.
- The points (_text2pts): every "( ... )" holding comma-separated numbers; those of exactly two
  numbers are (x, y), scaled by the mask's width and height and truncated towards zero.
- The score (_where2place_acc): the mask decoded, divided by 255 and rounded (its first
  channel where it has several); the share of the points inside the image whose mask value is
  1, a point outside counting 0; no point: 0. `where2place_acc`: the mean score (numpy's).
- `where2place_json`: the question, " ", a request for JSON on the 0-1000 grid; every "[x, y]" or
  "(x, y)" pair read (parse_point2d: with a "." in [0, 1], integers on the 0-1000 grid).
- A number too large to scale (lmms-eval fails there) is a point outside the image.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
from PIL import Image

from rewards.text import compile_pattern, findall
from tasks.benchmarks import LMMS_EVAL
from tasks.benchmarks.counting import dot_scenes
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, variants

SUFFIX = ("Your answer should be formatted as a list of tuples, i.e. [(x1, y1), (x2, y2), ...], where each tuple "
          "contains the x and y coordinates of a point satisfying the conditions above. The coordinates should be "
          "between 0 and 1, indicating the normalized pixel locations of the points in the image.")  # fmt: skip
FORMAT = "Return only list of tuples, don't add anything else."
JSON_SUFFIX = ("Your answer should be JSON format. The coordinates should be between 0 and 1000, indicating the "
               "normalized pixel locations of the points in the image.")  # fmt: skip
TUPLE = compile_pattern(r"\(([-+]?\d+\.?\d*(?:,\s*[-+]?\d+\.?\d*)*?)\)")
PAIR = compile_pattern(r"[\[\(]\s*([-+]?\d+\.?\d*)\s*,\s*([-+]?\d+\.?\d*)\s*[\]\)]")
SCHEMA = pa.schema(
    [("question_id", pa.string()), ("question", pa.string()), ("image", IMAGE_TYPE), ("mask", IMAGE_TYPE)]
)


def read_mask(path: str) -> np.ndarray:
    """The mask as where2place_process_results reads it: 0 / 1 per pixel, its first channel."""
    with Image.open(path) as image:
        mask = np.round(np.array(image) / 255.0, 0).astype(int)
    return mask[:, :, 0] if mask.ndim == 3 else mask


def points(text: str, width: int, height: int) -> list[tuple[int, int] | None]:
    """_text2pts with its normalization constant 1; None: a point no image holds (too large to scale)."""
    out: list[tuple[int, int] | None] = []
    for group in findall(TUPLE, text):
        vector = [float(num) if "." in num else int(num) for num in group.split(",")]
        if len(vector) == 2:
            try:
                out.append((int(vector[0] / 1 * width), int(vector[1] / 1 * height)))
            except OverflowError:  # an infinite or too large coordinate
                out.append(None)
    return out


def json_points(text: str, width: int, height: int) -> list[tuple[int, int] | None]:
    """_task_utils/point_format.py parse_point2d (Qwen's point_2d): every "[x, y]" or "(x, y)"; a pair
    written with a "." is in [0, 1], one of integers on a 0-1000 grid; None as in `points`."""
    out: list[tuple[int, int] | None] = []
    for xs, ys in findall(PAIR, text):
        x, y = float(xs), float(ys)
        try:
            if "." in xs or "." in ys:
                out.append((int(x * width), int(y * height)))
            else:
                out.append((int(x / 1000 * width), int(y / 1000 * height)))
        except OverflowError:
            out.append(None)
    return out


def in_mask_share(mask: np.ndarray, found: list[tuple[int, int] | None]) -> float:
    """_where2place_acc."""
    if not found:
        return 0.0
    height, width = mask.shape
    inside = [p for p in found if p is not None and 0 <= p[0] < width and 0 <= p[1] < height]
    return sum(int(mask[y, x]) for x, y in inside) / len(found)


class Where2Place(Benchmark):
    """lmms_eval/tasks/where2place/utils.py (prompt_suffix_type original)."""

    reference = LMMS_EVAL
    doc_to_target = ""  # the yaml's: an empty template, logged as ""
    columns = (Column("question_id", "string|int"), Column("question", "string"), Column("image", "image"),
               Column("mask", "image"))  # fmt: skip
    schema = SCHEMA
    max_new_tokens = 1024

    id_column: ClassVar[str] = "question_id"
    json: ClassVar[bool] = False  # the `_json` variant: Qwen's point_2d JSON asked for and read

    def prompt(self, record: dict[str, Any], ctx: RecordContext) -> str:
        question = ctx.get(record, "question", str, "the question")
        return f"{question} {JSON_SUFFIX}" if self.json else f"{question} {SUFFIX} {FORMAT}"

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        mask_path, _, _ = record_image({"image": record["mask"]}, ctx)
        truth = {"id": record[self.id_column], "mask": mask_path}
        return row_sample(self.name, ctx, self.prompt(record, ctx), truth, [record_image(record, ctx)])

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        mask = read_mask(sample.solution["mask"])
        found = (json_points if self.json else points)(completion, mask.shape[1], mask.shape[0])
        parsed = [point for point in found if point is not None]
        return {"where2place_acc": {"id": sample.solution["id"], "pred": completion, "parsed_points": parsed,
                                    "accuracy": in_mask_share(mask, found)}}  # fmt: skip

    def aggregations(self):
        # where2place_aggregate_results: numpy's mean (pairwise summation: not always sum / n to the last bit)
        return {"where2place_acc": lambda items: float(np.mean([item["accuracy"] for item in items]))}

    def synthetic_rows(self, size: int, seed: int):
        for image, mask, index in synthetic_masks(size, seed):
            yield {"question_id": str(index), "question": "Point to the upper left quarter.",
                   "image": image_cell(image, f"{index}.png"), "mask": image_cell(mask, f"{index}-mask.png")}  # fmt: skip


def synthetic_masks(size: int, seed: int) -> Iterator[tuple[Image.Image, Image.Image, int]]:
    """Scenes with a mask of their upper left quarter (grey-scale or RGB in turn), a pixel beside
    it that rounds up to 1 in every third, one further right that rounds down (its other channels
    set: only the first counts), and the top right pixel."""
    for image, _, index in dot_scenes(size, seed, fill=(90, 160, 90)):
        mask = Image.new("L" if index % 2 else "RGB", image.size, 0)
        mask.paste(255 if index % 2 else (255, 255, 255), (0, 0, image.width // 2, image.height // 2))
        if index % 3 == 2:
            mask.putpixel((image.width // 2, 0), 128 if index % 2 else (128, 0, 0))
        mask.putpixel((image.width * 9 // 16, 0), 100 if index % 2 else (100, 255, 0))
        mask.putpixel((image.width - 1, 0), 255 if index % 2 else (255, 255, 255))  # the last column's pixel
        yield image, mask, index


BENCHMARKS = variants(Where2Place, [
    {"name": "where2place", "split": "test", "dataset": "FlagEval/Where2Place",
     "description": "Where2Place, lmms-eval's where2place: the share of the answered points inside the mask"},
    {"name": "where2place_json", "split": "test", "dataset": "FlagEval/Where2Place", "json": True,
     "description": "Where2Place asking for Qwen's point_2d JSON, lmms-eval's where2place_json"},
])  # fmt: skip
