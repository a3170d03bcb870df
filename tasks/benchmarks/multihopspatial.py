"""MultihopSpatial (multi-hop spatial reasoning, answered and grounded) as lmms-eval evaluates it
(commit 75571cf): `multihopspatial` (lmms_eval/tasks/multihopspatial/{multihopspatial.yaml,
utils.py}) on etri-vilab/MultihopSpatial, config `benchmark` @ test.

- Prompt: the question without its <ATT>/<POS>/<REL> markers (runs of whitespace made one space,
  stripped), then the answer and box format lines; 512 new tokens.
- The choice: "Answer: (x) ..." , else "Answer: x) ...", else "Answer: x" ending a line, else
  the first "(x)" anywhere (a-d, any case); right when its letter is the one in `answer`.
- The box: `"bbox_2d": [...]`, else "Bounding Box: [...]", else the first bare [a, b, c, d]
  (unsigned numbers), as x1y1x2y2; all divided by 1000 when any exceeds 1. Scored only when it
  lies in [0, 1] with x2 > x1 and y2 > y1: its IoU (rounded to 4 places) with `bbox` ([x, y,
  w, h] in pixels of `image_resolution` "WxH", else of the image).
- Metrics, in percent rounded to 2 places: `mcq_acc` (right choices), `acc50iou` (right choices
  whose box has IoU >= 0.5), `avg_iou` (the mean IoU over the right choices with a box).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import regex
from PIL import ImageDraw

from rewards.text import compile_pattern, findall, search
from tasks.benchmarks import LMMS_EVAL
from tasks.benchmarks.counting import dot_scenes
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, variants

FORMAT = (
    "\n\nPlease respond in the following format:\n"
    'Answer: (your choice, e.g., "(a) object name")\n'
    'Bounding Box: {"bbox_2d": [x1, y1, x2, y2]}\n\n'
    "Important: Use NORMALIZED coordinates (0.0 to 1.0).\n"
    'Example: {"bbox_2d": [0.25, 0.1, 0.75, 0.8]}'
)
TAGS, SPACES = compile_pattern(r"</?(?:ATT|POS|REL)>"), compile_pattern(r"\s+")
ANSWERS = (  # _parse_mcq_answer's patterns, in turn: (pattern, how the match becomes "(x) ...")
    (compile_pattern(r"Answer:\s*(\([a-d]\)\s*[^\n]*)", regex.IGNORECASE), lambda m: m.group(1).strip()),
    (compile_pattern(r"Answer:\s*([a-d])\)\s*([^\n]*)", regex.IGNORECASE),
     lambda m: f"({m.group(1).lower()}) {m.group(2).strip()}" if m.group(2).strip() else f"({m.group(1).lower()})"),
    (compile_pattern(r"Answer:\s*([a-d])\s*$", regex.IGNORECASE | regex.MULTILINE), lambda m: f"({m.group(1).lower()})"),
    (compile_pattern(r"(\([a-d]\)\s*[^\n,\[\]]*)", regex.IGNORECASE), lambda m: m.group(1).strip()),
)  # fmt: skip
LETTER = compile_pattern(r"\(([a-d])\)", regex.IGNORECASE)
_NUM = r"(\d*\.?\d+)"
BOXES = (
    compile_pattern(r'"bbox_2d"\s*:\s*\[\s*' + r"\s*,\s*".join([_NUM] * 4) + r"\s*\]"),
    compile_pattern(r"Bounding Box:\s*\[\s*" + r"\s*,\s*".join([_NUM] * 4) + r"\s*\]", regex.IGNORECASE),
)
BARE_BOX = compile_pattern(r"\[\s*" + r"\s*,\s*".join([_NUM] * 4) + r"\s*\]")
SCHEMA = pa.schema(
    [("id", pa.string()), ("image", IMAGE_TYPE), ("question", pa.string()), ("answer", pa.string()),
     ("bbox", pa.list_(pa.float64())), ("image_resolution", pa.string()), ("hop", pa.string()), ("view", pa.string())]
)  # fmt: skip


def choice(text: str) -> str | None:
    """_parse_mcq_answer then _extract_choice_letter: the chosen letter, lower-case."""
    for pattern, written in ANSWERS:
        match = search(pattern, text) if text else None
        if match:
            letter = search(LETTER, written(match))
            return letter.group(1).lower() if letter else None
    return None


def response_box(text: str) -> list[float] | None:
    """_parse_bbox: x1y1x2y2, divided by 1000 when a number exceeds 1."""
    match = next((m for m in (search(pattern, text) for pattern in BOXES) if m), None)
    groups = match.groups() if match else next(iter(findall(BARE_BOX, text)), None)
    if groups is None:
        return None
    box = [float(v) for v in groups]
    return [v / 1000.0 for v in box] if any(v > 1 for v in box) else box


def box_iou(truth: list[float], box: list[float], width: int, height: int) -> float:
    """_calculate_iou: `truth` [x, y, w, h] in pixels, `box` normalized x1y1x2y2; 4 places."""
    gx, gy, gw, gh = truth
    gt = [gx, gy, gx + gw, gy + gh]
    pred = [box[0] * width, box[1] * height, box[2] * width, box[3] * height]
    ix1, iy1, ix2, iy2 = max(gt[0], pred[0]), max(gt[1], pred[1]), min(gt[2], pred[2]), min(gt[3], pred[3])
    if ix2 <= ix1 or iy2 <= iy1:
        return 0.0
    inter = (ix2 - ix1) * (iy2 - iy1)
    union = (gt[2] - gt[0]) * (gt[3] - gt[1]) + (pred[2] - pred[0]) * (pred[3] - pred[1]) - inter
    return 0.0 if union <= 0 else round(inter / union, 4)


def image_dims(resolution: Any, width: int, height: int) -> tuple[int, int]:
    """_image_dims: "WxH" where it reads, else the image's size."""
    if isinstance(resolution, str) and "x" in resolution:
        try:
            w, h = resolution.lower().split("x")
            return int(w), int(h)
        except (ValueError, TypeError):
            pass
    return width, height


def percent(hits: int, total: int) -> float:
    return round(hits / total * 100, 2) if total else 0.0


class MultihopSpatial(Benchmark):
    """lmms_eval/tasks/multihopspatial/utils.py."""

    reference = LMMS_EVAL
    max_new_tokens = 512
    columns = (Column("image", "image"), Column("question", "string"), Column("answer", "string", required=False),
               Column("bbox", "list<number>", required=False), Column("image_resolution", "string", required=False))  # fmt: skip
    schema = SCHEMA

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        path, width, height = record_image(record, ctx)
        question = ctx.get(record, "question", str, "the question")
        prompt = SPACES.sub(" ", TAGS.sub("", question)).strip() + FORMAT
        answer = record.get("answer")  # _extract_choice_letter of it: its "(x)"
        letter = search(LETTER, answer) if answer is not None else None
        truth = {"letter": letter.group(1).lower() if letter else None, "bbox": record.get("bbox"),
                 "size": image_dims(record.get("image_resolution"), width, height)}  # fmt: skip
        return row_sample(self.name, ctx, prompt, truth, [(path, width, height)])

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        truth = sample.solution
        letter = choice(completion)
        right = letter is not None and letter == truth["letter"]
        box, iou = response_box(completion), None
        if box is not None and all(0 <= v <= 1 for v in box) and box[2] > box[0] and box[3] > box[1]:
            if truth["bbox"] is not None and len(truth["bbox"]) == 4:
                iou = box_iou(truth["bbox"], box, *truth["size"])
        record = {"mcq_correct": right, "iou": iou}
        return {"mcq_acc": record, "acc50iou": record, "avg_iou": record}

    def aggregations(self):
        def avg_iou(items):
            ious = [i["iou"] for i in items if i["mcq_correct"] and i["iou"] is not None]
            return round(sum(ious) / len(ious) * 100, 2) if ious else 0.0

        return {
            "mcq_acc": lambda items: percent(sum(1 for i in items if i["mcq_correct"]), len(items)),
            "acc50iou": lambda items: percent(
                sum(1 for i in items if i["mcq_correct"] and i["iou"] is not None and i["iou"] >= 0.5), len(items)
            ),
            "avg_iou": avg_iou,
        }

    def synthetic_rows(self, size: int, seed: int):
        """A boxed object to pick among four; every third row's resolution twice its image's, every
        third one empty (the image's size then)."""
        objects = ("box", "dot", "cup", "pen")
        question = "Which <REL>object</REL> is left of the <ATT>green</ATT>  dots?\n(a) box (b) dot (c) cup (d) pen"
        for image, _, index in dot_scenes(size, seed, fill=(30, 150, 90)):
            width, height = image.size
            ImageDraw.Draw(image).rectangle([10, 10, 40, 30], outline=(200, 0, 0), width=2)
            k = index % 3
            resolution = (f"{width}x{height}", f"{width * 2}x{height * 2}", "")[k]
            yield {"id": f"hop_{index}", "image": image_cell(image, f"{index}.png"), "question": question,
                   "answer": f"({'abcd'[index % 4]}) {objects[index % 4]}", "bbox": [10.0, 10.0, 30.0, 20.0],
                   "image_resolution": resolution, "hop": str(1 + k), "view": ("ego", "exo")[index % 2]}  # fmt: skip


BENCHMARKS = variants(MultihopSpatial, [
    {"name": "multihopspatial", "split": "test", "dataset": "etri-vilab/MultihopSpatial (benchmark)",
     "description": "MultihopSpatial, lmms-eval's multihopspatial: the choice and its box (mcq_acc, acc50iou, avg_iou)"}])  # fmt: skip
