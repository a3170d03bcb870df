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
TUPLE = compile_pattern(r"\(([-+]?\d+\.?\d*(?:,\s*[-+]?\d+\.?\d*)*?)\)")
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

    def prompt(self, record: dict[str, Any], ctx: RecordContext) -> str:
        return f"{ctx.get(record, 'question', str, 'the question')} {SUFFIX} {FORMAT}"

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        mask_path, _, _ = record_image({"image": record["mask"]}, ctx)
        truth = {"id": record[self.id_column], "mask": mask_path}
        return row_sample(self.name, ctx, self.prompt(record, ctx), truth, [record_image(record, ctx)])

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        mask = read_mask(sample.solution["mask"])
        found = points(completion, mask.shape[1], mask.shape[0])
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
    it that rounds up to 1 in every third, and one further right that rounds down (its other
    channels set: only the first counts)."""
    for image, _, index in dot_scenes(size, seed, fill=(90, 160, 90)):
        mask = Image.new("L" if index % 2 else "RGB", image.size, 0)
        mask.paste(255 if index % 2 else (255, 255, 255), (0, 0, image.width // 2, image.height // 2))
        if index % 3 == 2:
            mask.putpixel((image.width // 2, 0), 128 if index % 2 else (128, 0, 0))
        mask.putpixel((image.width * 9 // 16, 0), 100 if index % 2 else (100, 255, 0))
        yield image, mask, index


BENCHMARKS = variants(Where2Place, [
    {"name": "where2place", "split": "test", "dataset": "FlagEval/Where2Place",
     "description": "Where2Place, lmms-eval's where2place: the share of the answered points inside the mask"}])  # fmt: skip
