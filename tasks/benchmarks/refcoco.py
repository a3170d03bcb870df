"""RefCOCO, RefCOCO+ and RefCOCOg as lmms-eval evaluates them: the strict REC tasks
(`refcoco_bbox_rec_*`, lmms_eval/tasks/refcoco*/utils_rec.py) and the lenient grounding
tasks (`refcoco_grounding_*`, lmms_eval/tasks/refcoco_grounding/utils.py), lmms-eval commit
75571cf (PyPI 0.7.3).

Data: lmms-lab/RefCOCO, RefCOCOplus, RefCOCOg as downloaded: parquet, data/<split>-*.parquet,
columns question_id, image (embedded), question, answer (the referring expressions),
segmentation, bbox ([x, y, w, h] in pixels), iscrowd, file_name.

Strict (`refcoco_bbox_rec_*`): one sample per expression (lmms-eval explodes `answer`). The
prompt asks for a box of floats in [0, 1]; the prediction is the first bracketed group of
four numbers in the response ([0, 0, 0, 0] without one); the ground truth is the box
normalized by the image size, in the type the table declares for `bbox`: lmms-eval's
process_docs writes it back into that column through `datasets.map`, which keeps the column's
type, so from the hub's float32 column the truth is float32-rounded (0.1 is
0.10000000149011612), and an answer at a threshold scores as there ([0.1, 0.1, 0.2, 0.3]
against [0.1, 0.1, 0.3, 0.3] has IoU 0.49999993: not ACC@0.5). Metrics: `refcoco_IoU`, `refcoco_ACC@t` for t in 0.1, 0.3,
0.5, 0.7, 0.9 (IoU >= t) and `refcoco_Center_ACC` (the predicted box's center inside the
ground truth, edges count), means over samples. Its IoU does not clip areas (an inverted box
has a positive area); where its union is 0 lmms-eval raises, here the IoU is 0.

Lenient (`refcoco_grounding_*`): one sample per row, every expression quoted in one prompt
asking for JSON boxes. Every box in the response is parsed (JSON, else a regex), each is read
as original pixels and as 0-1000, and the candidate with the best IoU against the ground
truth (original pixels) is scored; areas are clipped at 0. The same metrics, named
`refcoco_grounding_*`. JSON longer than 65,536 characters or nested deeper than 16 levels is
not parsed (lmms-eval would try; the regex still reads it), and a coordinate too large for a
float skips its box (lmms-eval raises).

`task.options.coords=model`: the strict prompt asks for the model's own frame (its coordinate
sentence replaced), and both tasks read the boxes in that frame alone, mapped to the original
image before the same scoring.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
import regex
from PIL import Image, ImageDraw

from rewards.detection import INVALID_JSON, load_json
from rewards.text import compile_pattern, finditer, search
from tasks.benchmarks import LMMS_EVAL
from tasks.records import record_image
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, CoordsOptions, mean, variants
from vlrl.vision.frames import Frame

REC_METRICS = ("IoU", "ACC@0.1", "ACC@0.3", "ACC@0.5", "ACC@0.7", "ACC@0.9", "Center_ACC")
REC_PROMPT = (
    "Bounding box coordinates are specified in the format (top-left x, top-left y, bottom-right x, bottom-right y). "
    "{values} Please provide the bounding box coordinate of the region this sentence describes: {expression}"
)
# The sentence that states the coordinate convention, per convention.
REC_VALUES = {
    "lmms_eval": "All values are floating point numbers bounded between 0 and 1.",
    "absolute": "All values are integer pixel coordinates of the image.",
    "norm1000": "All values are integers between 0 and 1000.",
    "original": "All values are pixel coordinates of the image.",
}
GROUNDING_PROMPT = (
    "Locate every object that matches the description {refs} in the image. Report bbox coordinates in JSON format."
)
_NUM = r"(-?\d+(?:\.\d+)?)"
FIRST_BOX = compile_pattern(rf"\[\s*{_NUM},\s*{_NUM},\s*{_NUM},\s*{_NUM}\s*\]")
LOOSE_BOX = compile_pattern(rf"\[?\s*{_NUM}\s*[,\s]\s*{_NUM}\s*[,\s]\s*{_NUM}\s*[,\s]\s*{_NUM}\s*\]?")
CODE_FENCE = compile_pattern(r"```(?:json)?\s*(.*?)\s*```", regex.DOTALL | regex.IGNORECASE)
BOX_KEYS = ("bbox_2d", "bbox", "box", "coordinates", "coord", "location", "position")

SCHEMA = pa.schema(
    [
        ("question_id", pa.string()),
        ("image", IMAGE_TYPE),
        ("question", pa.string()),
        ("answer", pa.list_(pa.string())),
        ("segmentation", pa.list_(pa.float32())),
        ("bbox", pa.list_(pa.float32())),
        ("iscrowd", pa.int8()),
        ("file_name", pa.string()),
    ]
)


# -- lmms-eval's box arithmetic ------------------------------------------------------------------
def rec_iou(box1: list[float], box2: list[float]) -> float:
    """utils_rec.compute_iou: areas unclipped; a zero union (which raises there) scores 0."""
    x_left, y_top = max(box1[0], box2[0]), max(box1[1], box2[1])
    x_right, y_bottom = min(box1[2], box2[2]), min(box1[3], box2[3])
    intersection = max(0, x_right - x_left) * max(0, y_bottom - y_top)
    area1 = (box1[2] - box1[0]) * (box1[3] - box1[1])
    area2 = (box2[2] - box2[0]) * (box2[3] - box2[1])
    union = area1 + area2 - intersection
    return intersection / union if union != 0 else 0.0


def grounding_iou(box1: list[float], box2: list[float]) -> float:
    """refcoco_grounding._compute_iou: areas clipped at 0, no IoU without a positive union."""
    x_left, y_top = max(box1[0], box2[0]), max(box1[1], box2[1])
    x_right, y_bottom = min(box1[2], box2[2]), min(box1[3], box2[3])
    intersection = max(0.0, x_right - x_left) * max(0.0, y_bottom - y_top)
    area1 = max(0.0, box1[2] - box1[0]) * max(0.0, box1[3] - box1[1])
    area2 = max(0.0, box2[2] - box2[0]) * max(0.0, box2[3] - box2[1])
    union = area1 + area2 - intersection
    return 0.0 if union <= 0 else intersection / union


def center_inside(gt: list[float], pred: list[float]) -> bool:
    """The predicted box's center lies in the ground truth, edges included."""
    cx, cy = (pred[0] + pred[2]) / 2, (pred[1] + pred[3]) / 2
    return gt[0] <= cx <= gt[2] and gt[1] <= cy <= gt[3]


def scorers(iou) -> dict[str, Any]:
    """Metric -> score of (ground truth, prediction), as both lmms-eval tasks define them."""
    out = {"IoU": iou, "Center_ACC": center_inside}
    for t in (0.1, 0.3, 0.5, 0.7, 0.9):
        out[f"ACC@{t}"] = lambda gt, pred, t=t, iou=iou: iou(gt, pred) >= t
    return out


def rec_aggregations(prefix: str) -> dict[str, Any]:
    """The strict REC metrics (utils_rec's aggregations): each score's mean over the samples."""
    score = scorers(rec_iou)
    return {
        f"{prefix}{m}": lambda items, m=m: mean([score[m](i["bbox"], i["pred"]) for i in items]) for m in REC_METRICS
    }


def normalized_from_model(box: list[float], frame: Frame) -> list[float]:
    """A box in the model's frame (coords=model) as the image's [0, 1] x1y1x2y2."""
    x1, y1, x2, y2 = frame.box_to_original(box)
    return [x1 / frame.width, y1 / frame.height, x2 / frame.width, y2 / frame.height]


# -- parsing responses ---------------------------------------------------------------------------
def first_box(text: str) -> list[float] | None:
    """utils_rec.parse_float_sequence_within (None where it returns [0, 0, 0, 0])."""
    match = search(FIRST_BOX, text)
    return [float(match.group(i)) for i in range(1, 5)] if match else None


def _json_value(text: str) -> Any:
    """refcoco_grounding._try_parse_json: a code fence, the text, then the outermost [...] or {...}."""
    text = text.strip()
    if not text:
        return None
    fence = search(CODE_FENCE, text)
    for candidate in ([fence.group(1)] if fence else []) + [text]:
        value = load_json(candidate)
        if value is not INVALID_JSON:
            return value
    for open_, close in (("[", "]"), ("{", "}")):
        start, end = text.find(open_), text.rfind(close)
        if start != -1 and end > start:
            value = load_json(text[start : end + 1])
            if value is not INVALID_JSON:
                return value
    return None


def _float_box(values: list[Any]) -> list[float] | None:
    try:
        return [float(v) for v in values]
    except (TypeError, ValueError, OverflowError):
        return None


def _boxes_in(data: Any) -> list[list[float]]:
    """refcoco_grounding._bbox_list_from_json: four numbers, a box under a known key, or any nested."""
    boxes: list[list[float]] = []
    if isinstance(data, list):
        if data and all(isinstance(v, (int, float)) for v in data) and len(data) == 4:
            box = _float_box(data)
            boxes += [box] if box else []
        else:
            for item in data:
                boxes += _boxes_in(item)
    elif isinstance(data, dict):
        box = None
        for key in BOX_KEYS:
            if key in data and isinstance(data[key], (list, tuple)) and len(data[key]) == 4:
                box = _float_box(data[key])
                if box is not None:
                    break
        if box is not None:
            boxes.append(box)
        else:
            for value in data.values():
                boxes += _boxes_in(value)
    return boxes


def all_boxes(text: str) -> list[list[float]]:
    """refcoco_grounding._parse_pred_boxes: JSON boxes, else every loose group of four numbers."""
    if not text:
        return []
    boxes = _boxes_in(_json_value(text))
    return boxes or [[float(m.group(i)) for i in range(1, 5)] for m in finditer(LOOSE_BOX, text)]


def best_box(candidates: list[list[float]], gt: list[float]) -> list[float]:
    """refcoco_grounding._pick_best_box: the first candidate of highest IoU ([0, 0, 0, 0] if none)."""
    best, best_iou = (candidates[0] if candidates else [0.0, 0.0, 0.0, 0.0]), -1.0
    for box in candidates:
        iou = grounding_iou(box, gt)
        if iou > best_iou:
            best, best_iou = box, iou
    return best


# -- the tasks -----------------------------------------------------------------------------------
class _RefCOCOBenchmark(Benchmark):
    Options = CoordsOptions
    description = "RefCOCO-family grounding as lmms-eval evaluates it"
    reference = LMMS_EVAL
    schema = SCHEMA
    doc_to_target = "bbox"

    def _row(self, record: dict[str, Any], ctx: RecordContext) -> tuple[str, int, int, list[float], str]:
        path, width, height = record_image(record, ctx)
        bbox = record["bbox"]
        if not (
            isinstance(bbox, list)
            and len(bbox) == 4
            and all(isinstance(v, (int, float)) and math.isfinite(v) for v in bbox)
        ):
            raise ctx.error(f"bbox must be 4 finite numbers [x, y, w, h], got {bbox!r}"[:200])
        qid = record.get("question_id")
        return path, width, height, [float(v) for v in bbox], str(ctx.index if qid is None else qid)

    def synthetic_rows(self, size: int, seed: int):
        return synthetic_rows(size, seed)


class RefCOCOBboxRec(_RefCOCOBenchmark):
    """lmms-eval's strict REC task (utils_rec.py)."""

    until = ("ASSISTANT:",)  # _default_template_bbox_rec_yaml

    columns = (Column("question_id", "string", required=False), Column("image", "image"),
               Column("answer", "list<string>"), Column("bbox", "list<number>"))  # fmt: skip

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        path, width, height, (x, y, w, h), qid = self._row(record, ctx)
        normalized = [x / width, y / height, (x + w) / width, (y + h) / height]
        if "bbox" in ctx.float32:  # written back into the float32 column by datasets.map: rounded there
            normalized = [float(np.float32(v)) for v in normalized]
        frame = ctx.frame_spec.frame(width, height)
        values = REC_VALUES["lmms_eval" if self.options.coords == "lmms_eval" else frame.kind]
        return [
            Sample(
                id=f"{qid}/{k}",
                task=self.name,
                problem=REC_PROMPT.format(values=values, expression=answer),
                solution=normalized,
                images=[path],
                frame=frame,
                meta={"answer": answer, "ann_id": qid},
                source=ctx.source,
            )
            for k, answer in enumerate(_strings(record["answer"], ctx))
        ]

    def doc_target(self, record: dict[str, Any], sample: Sample) -> Any:
        return sample.solution  # "bbox" as refcoco_bbox_rec_preprocess_dataset leaves it: normalized

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        box = first_box(completion)
        if box is None:
            box = [0, 0, 0, 0]
        elif self.options.coords == "model":
            box = normalized_from_model(box, sample.frame)
        data = {"answer": sample.meta["answer"], "pred": box, "ann_id": sample.meta["ann_id"], "bbox": sample.solution}
        return {f"refcoco_{metric}": data for metric in REC_METRICS}

    def aggregations(self):
        return rec_aggregations("refcoco_")


class RefCOCOGrounding(_RefCOCOBenchmark):
    """lmms-eval's lenient grounding task (refcoco_grounding/utils.py)."""

    columns = (Column("question_id", "string", required=False), Column("image", "image"),
               Column("answer", "list<string>|string"), Column("bbox", "list<number>"))  # fmt: skip
    max_new_tokens = 512

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        path, width, height, (x, y, w, h), qid = self._row(record, ctx)
        answers = record["answer"]
        return [
            Sample(
                id=qid,
                task=self.name,
                problem=GROUNDING_PROMPT.format(refs=_quoted(answers)),
                solution=[x, y, x + w, y + h],
                images=[path],
                frame=ctx.frame_spec.frame(width, height),
                meta={"answer": answers, "ann_id": qid},
                source=ctx.source,
            )
        ]

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        raw = all_boxes(completion)
        f = sample.frame
        if self.options.coords == "model":
            candidates = [f.box_to_original(box) for box in raw]
        else:  # each box as original pixels, and as Qwen's 0-1000
            candidates = [c for b in raw for c in (b, [b[0] / 1000.0 * f.width, b[1] / 1000.0 * f.height,
                                                      b[2] / 1000.0 * f.width, b[3] / 1000.0 * f.height])]  # fmt: skip
        data = {"answer": sample.meta["answer"], "pred_boxes": raw, "pred": best_box(candidates, sample.solution),
                "bbox": sample.solution, "ann_id": sample.meta["ann_id"]}  # fmt: skip
        return {f"refcoco_grounding_{metric}": data for metric in REC_METRICS}

    def aggregations(self):
        score = scorers(grounding_iou)
        return {
            f"refcoco_grounding_{m}": lambda items, m=m: mean([float(score[m](i["bbox"], i["pred"])) for i in items])
            for m in REC_METRICS
        }


def _strings(value: Any, ctx: RecordContext) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ctx.error(f"answer must be a list of referring expressions, got {value!r}"[:200])
    return value


def _quoted(answers: Any) -> str:
    """refcoco_grounding._format_refs: each expression in double quotes, comma-separated."""
    if isinstance(answers, list):
        cleaned = [str(a).strip() for a in answers if str(a).strip()]
        return ", ".join(f'"{a}"' for a in cleaned) if cleaned else '""'
    return f'"{answers}"'


# -- synthetic data in the published schema ------------------------------------------------------
COLORS = {"red": (220, 40, 40), "green": (40, 180, 60), "blue": (40, 80, 220), "yellow": (230, 210, 40)}


def synthetic_rows(size: int, seed: int) -> list[dict[str, Any]]:
    """Images of colored rectangles; each row names one of them in one or two expressions."""
    rng = np.random.default_rng(seed)
    rows = []
    for index in range(size):
        width, height = int(rng.integers(96, 160)), int(rng.integers(96, 160))
        image = Image.new("RGB", (width, height), (245, 245, 245))
        draw = ImageDraw.Draw(image)
        names = list(rng.permutation(list(COLORS)))[: int(rng.integers(1, 4))]
        boxes = []
        for name in names:
            w, h = int(rng.integers(16, width // 2)), int(rng.integers(16, height // 2))
            x, y = int(rng.integers(0, width - w)), int(rng.integers(0, height - h))
            draw.rectangle([x, y, x + w - 1, y + h - 1], fill=COLORS[name])
            boxes.append([x, y, w, h])
        k = int(rng.integers(0, len(names)))
        answers = [f"the {names[k]} box", f"{names[k]} rectangle"][: int(rng.integers(1, 3))]
        rows.append({"question_id": str(index), "image": image_cell(image, f"{index}.png"), "question": "",
                     "answer": answers, "segmentation": [], "bbox": boxes[k], "iscrowd": 0,
                     "file_name": f"{index}.png"})  # fmt: skip
    return rows


# -- the published variants (lmms-eval's task names) ---------------------------------------------
_REC = [("refcoco", "lmms-lab/RefCOCO", ("val", "test", "testA", "testB")),
        ("refcoco+", "lmms-lab/RefCOCOplus", ("val", "testA", "testB")),
        ("refcocog", "lmms-lab/RefCOCOg", ("val", "test"))]  # fmt: skip
_GROUNDING = [("refcoco", "lmms-lab/RefCOCO", ("test", "testA", "testB")),
              ("refcoco_plus", "lmms-lab/RefCOCOplus", ("testA", "testB")),
              ("refcocog", "lmms-lab/RefCOCOg", ("test",))]  # fmt: skip

BENCHMARKS = {
    **variants(RefCOCOBboxRec, [
        {"name": f"{family}_bbox_rec_{split}", "split": split, "dataset": dataset,
         "description": f"{dataset} {split}, lmms-eval's strict REC (normalized box, first bracketed box)"}
        for family, dataset, splits in _REC for split in splits]),
    **variants(RefCOCOGrounding, [
        {"name": f"{family}_grounding_{split}", "split": split, "dataset": dataset,
         "description": f"{dataset} {split}, lmms-eval's lenient grounding (best box, pixels or 0-1000)"}
        for family, dataset, splits in _GROUNDING for split in splits]),
}  # fmt: skip
