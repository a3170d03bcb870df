"""GroundingME (visual grounding with fine-grained descriptions, spatial relations, limited
visibility and descriptions of nothing in the image) as lmms-eval evaluates it (commit 75571cf):
`groundingme` (lmms_eval/tasks/groundingme/{groundingme.yaml, utils.py}) on lirang04/GroundingME
@ test, columns id, image, description, bbox ([x1, y1, x2, y2] pixels), subtask_l1, subtask_l2,
width, height.

- Prompt: utils.PROMPT with the description (the viewer's-perspective sentence, the request for
  at most one box as {"bbox_2d": [x1, y1, x2, y2]}, {"bbox_2d": null} if no object matches);
  20,480 new tokens, greedy.
- The box (parse_bbox): from the first "{" to the last "}" around a `"bbox_2d"` (its greedy
  regex, found here by string search in linear time) read as JSON: null is [0, 0, 0, 0], four
  values are floats; anything else falls back to the last four numbers in the text separated by
  spaces or commas; none, [0, 0, 0, 0].
- Scored (process_result): a Rejection row's truth is [0, 0, 0, 0], which only [0, 0, 0, 0]
  matches (IoU 1, else 0). The box is read four ways, as pixels of the row's `width` x `height`,
  as [0, 1] (all four <= 1) or 0-999 coordinates, and as pixels of MiMo's and of Qwen's resized
  image (their smart_resize at the factor 28 and pixel bounds utils.py sets; a quirk kept: the
  resized height divides x and the width y, as utils.py unpacks them swapped, so a box in a
  non-square resized frame is not read back); the reading of best IoU (the first of equal
  ones) is kept. Areas are not clipped. ACC@t is IoU >= t at t = 0.5,
  0.55, ..., 0.95; MACC their mean; Center_ACC the box's center in the truth, edges included.
- Metrics: the yaml's 55, `groundingme_<metric>`: IoU, ACC@0.5/0.75/0.9, Center_ACC and MACC over
  all rows; ACC@0.5/0.75/0.9 and MACC of each level-1 category (Discriminative, Spatial,
  Limited) and level-2 one (D_Appearance, D_Component, D_Text, D_State, Relationship, Counting,
  Occlusion, Small); ACC@0.5 of Rejection and R_Appearance, R_Component, R_Text, R_State (their
  aggregations read `..._ACC@0.5`). A category without rows is NaN, as there.

Deviations, each where lmms-eval stops: JSON whose top level has no "bbox_2d" key, or whose box
holds a null, a list or a number too large for a float (KeyError, TypeError, OverflowError
there), falls back to the numbers as a ValueError does; JSON longer than 65,536 characters or
nested deeper than 16 levels is not parsed (it falls back too); a zero union scores IoU 0
(ZeroDivisionError there). A row whose width and height MiMo's or Qwen's resize refuses (a
side under 10 pixels, an aspect ratio over 200), whose description is no string, or whose
non-Rejection bbox is not four finite numbers is skipped and named. `task.options.coords=model`
reads the box in the model's frame alone, mapped to the row's pixels.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
from PIL import Image, ImageDraw

from rewards.detection import INVALID_JSON, load_json
from rewards.text import compile_pattern, findall
from tasks.benchmarks import LMMS_EVAL
from tasks.benchmarks.refcoco import COLORS, center_inside, rec_iou
from tasks.records import record_image
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, CoordsOptions, variants

PROMPT = (
    "All spatial relationships are defined from the viewer's perspective, where 'front' means closer to the viewer "
    "and 'back' means farther from the viewer. Please provide the bounding box coordinate of the object the "
    "following statement describes:\n{description}\nEnsure that all details mentioned about the object are "
    "accurate. Provide at most one bounding box. If a matching object is found, provide its bounding box as a JSON "
    'in the format {{"bbox_2d": [x1, y1, x2, y2]}}. If no matching object is found, output {{"bbox_2d": null}}.'
)
_NUM = r"(-?\d+(?:\.\d+)?)"
FOUR_NUMBERS = compile_pattern(rf"{_NUM}[\s,]+{_NUM}[\s,]+{_NUM}[\s,]+{_NUM}")
NOTHING = [0.0, 0.0, 0.0, 0.0]
THRESHOLDS = [round(0.5 + x * 0.05, 2) for x in range(10)]
# level 1 -> its level-2 categories; Rejection's are named R_*, Discriminative's D_*
CATEGORIES = {
    "Discriminative": ("Appearance", "Component", "Text", "State"),
    "Spatial": ("Relationship", "Counting"),
    "Limited": ("Occlusion", "Small"),
    "Rejection": ("Appearance", "Component", "Text", "State"),
}
SCORES = {"ACC@0.5": "acc_5", "ACC@0.75": "acc_75", "ACC@0.9": "acc_9", "MACC": "macc", "Center_ACC": "center_acc",
          "IoU": "iou"}  # fmt: skip
SCHEMA = pa.schema(
    [("id", pa.string()), ("image", IMAGE_TYPE), ("description", pa.string()), ("bbox", pa.list_(pa.float64())),
     ("subtask_l1", pa.string()), ("subtask_l2", pa.string()), ("width", pa.int64()), ("height", pa.int64())]
)  # fmt: skip


def _metrics() -> dict[str, str]:
    """The yaml's metric -> the name its aggregation passes to groundingme_aggregation_result."""
    accs = ("ACC@0.5", "ACC@0.75", "ACC@0.9", "MACC")
    names = ["IoU", "ACC@0.5", "ACC@0.75", "ACC@0.9", "Center_ACC", "MACC"]
    names += [f"{level}_{a}" for level in ("Discriminative", "Spatial", "Limited") for a in accs]
    out = {name: name for name in names} | {"Rejection_ACC": "Rejection_ACC@0.5"}
    for level, prefix in (("Discriminative", "D_"), ("Spatial", ""), ("Limited", "")):
        out |= {f"{prefix}{sub}_{a}": f"{prefix}{sub}_{a}" for sub in CATEGORIES[level] for a in accs}
    return out | {f"R_{sub}_ACC": f"R_{sub}_ACC@0.5" for sub in CATEGORIES["Rejection"]}


METRICS = _metrics()


# -- utils.py's arithmetic -----------------------------------------------------------------------
def smart_resize_mimo(height: int, width: int, factor: int = 28, min_pixels: int = 28 * 28 * 8,
                      max_pixels: int = 28 * 28 * 4096) -> tuple[int, int]:  # fmt: skip
    """utils.smart_resize_mimo, quirks kept (a short side is set to the factor before the other
    is scaled by factor / it, so the other keeps its length). Raises ValueError as it does."""
    if max(height, width) < 10:
        raise ValueError(f"a side must be at least 10 pixels, got {height} x {width}")
    elif min(height, width) < factor:
        if height < width:
            height = factor
            width = int(width * (factor / height))
        else:
            width = factor
            height = int(height * (factor / width))
    elif max(height, width) / min(height, width) > 200:
        raise ValueError(f"an aspect ratio over 200: {height} x {width}")
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar, w_bar = math.floor(height / beta / factor) * factor, math.floor(width / beta / factor) * factor
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar, w_bar = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def smart_resize_qwen(height: int, width: int, factor: int = 28, min_pixels: int = 4 * 28 * 28,
                      max_pixels: int = 16384 * 28 * 28) -> tuple[int, int]:  # fmt: skip
    """utils.smart_resize_qwen (Qwen2.5-VL's processor bounds). Raises ValueError as it does."""
    if max(height, width) / min(height, width) > 200:
        raise ValueError(f"an aspect ratio over 200: {height} x {width}")
    h_bar, w_bar = max(factor, int(round(height / factor) * factor)), max(factor, int(round(width / factor) * factor))
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, int(math.floor(height / beta / factor) * factor))
        w_bar = max(factor, int(math.floor(width / beta / factor) * factor))
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = max(factor, int(math.ceil(height * beta / factor) * factor))
        w_bar = max(factor, int(math.ceil(width * beta / factor) * factor))
    return h_bar, w_bar


RESIZES = (smart_resize_mimo, smart_resize_qwen)  # the resized frames a box is read in


def iou(truth: list[float], box: list[float]) -> float:
    """utils.compute_iou: a truth of [0, 0, 0, 0] (Rejection) is matched by [0, 0, 0, 0] alone."""
    if truth == NOTHING:
        return 1 if box == NOTHING else 0
    return rec_iou(truth, box)


def readings(box: list[float], width: int, height: int) -> list[list[float]]:
    """process_result's candidates: pixels, [0, 1] or 0-999, MiMo's and Qwen's resized pixels."""
    if all(v <= 1 for v in box):
        scaled = [box[0] * width, box[1] * height, box[2] * width, box[3] * height]
    else:
        scaled = [box[0] / 999 * width, box[1] / 999 * height, box[2] / 999 * width, box[3] / 999 * height]
    out = [box, scaled]
    for resize in RESIZES:
        # convert_bbox_from_*: (height, width) as it returns them, unpacked as (width, height)
        across, down = resize(height, width)
        out.append([box[0] / across * width, box[1] / down * height, box[2] / across * width, box[3] / down * height])
    return out


# -- parsing -------------------------------------------------------------------------------------
def _json_span(text: str) -> str | None:
    """What r'\\{.*"bbox_2d".*\\}' (DOTALL, greedy) matches: from the first "{" before the last
    `"bbox_2d"` that a "}" follows, to the last "}"."""
    close = text.rfind("}")
    key = text.rfind('"bbox_2d"', 0, close)
    start = text.find("{", 0, key)
    return None if close < 0 or key < 0 or start < 0 else text[start : close + 1]


def _json_box(text: str) -> list[float] | None:
    """The JSON reading, None where parse_bbox falls back to the numbers (or would stop)."""
    span = _json_span(text)
    data = INVALID_JSON if span is None else load_json(span)
    if not isinstance(data, dict) or "bbox_2d" not in data:
        return None
    box = data["bbox_2d"]
    if box is None:
        return list(NOTHING)
    if not isinstance(box, list) or len(box) != 4:
        return None
    try:
        return [float(v) for v in box]
    except (TypeError, ValueError, OverflowError):
        return None


def parse_bbox(text: str) -> list[float]:
    """utils.parse_bbox: the JSON box, else the last four numbers, else [0, 0, 0, 0]."""
    box = _json_box(text)
    if box is not None:
        return box
    matches = findall(FOUR_NUMBERS, text)
    return [float(v) for v in matches[-1]] if matches else list(NOTHING)


def category(metric: str) -> tuple[str | None, str | None]:
    """The (level-1, level-2) category a metric averages over (None: any), as
    groundingme_aggregation_result reads it from the name."""
    head, _, rest = metric.partition("_")
    if head in CATEGORIES:
        return head, None
    if head in ("D", "R"):
        return ("Discriminative" if head == "D" else "Rejection"), rest.partition("_")[0]
    for level in ("Spatial", "Limited"):
        if head in CATEGORIES[level]:
            return level, head
    return None, None


def aggregate(items: list[dict[str, Any]], metric: str) -> float:
    """utils.groundingme_aggregation_result: the metric's score averaged over its category's
    rows, NaN where there are none."""
    level, sub = category(metric)
    key = next(SCORES[kind] for kind in SCORES if kind in metric)
    scores = [i[key] for i in items if level in (None, i["subtask_l1"]) and sub in (None, i["subtask_l2"])]
    return sum(scores) / len(scores) if scores else math.nan


class GroundingME(Benchmark):
    """lmms_eval/tasks/groundingme/utils.py."""

    Options = CoordsOptions
    reference = LMMS_EVAL
    doc_to_target = ""  # the yaml's: an empty template
    max_new_tokens = 20480
    columns = (Column("image", "image"), Column("description", "string"), Column("bbox", "list<number>"),
               Column("subtask_l1", "string"), Column("subtask_l2", "string"), Column("width", "number"),
               Column("height", "number"), Column("id", "string|int", required=False))  # fmt: skip
    schema = SCHEMA

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        path, width, height = record_image(record, ctx)  # the row's width and height, checked against the image
        description = record["description"]
        if not isinstance(description, str):
            raise ctx.error(f"description must be a string, got {description!r}"[:200])
        try:
            for resize in RESIZES:
                resize(height, width)
        except ValueError as error:  # lmms-eval raises on every response of this row
            raise ctx.error(f"MiMo's or Qwen's resize refuses {width} x {height}: {error}") from None
        rejection = record["subtask_l1"] == "Rejection"
        box = record["bbox"]
        if not rejection and not (
            isinstance(box, list)
            and len(box) == 4
            and all(isinstance(v, (int, float)) and math.isfinite(v) for v in box)
        ):
            raise ctx.error(f"bbox must be 4 finite numbers [x1, y1, x2, y2], got {box!r}"[:200])
        truth = list(NOTHING) if rejection else [float(v) for v in box]
        return [Sample(id=str(record.get("id", ctx.index)), task=self.name, problem=PROMPT.format(description=description),
                       solution=truth, images=[path], frame=ctx.frame_spec.frame(width, height),
                       meta={"l1": record["subtask_l1"], "l2": record["subtask_l2"],
                             "description": description, "id": record.get("id")},
                       source=ctx.source)]  # fmt: skip

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        truth, f, raw = sample.solution, sample.frame, parse_bbox(completion)
        candidates = [f.box_to_original(raw)] if self.options.coords == "model" else readings(raw, f.width, f.height)
        ious = [iou(truth, box) for box in candidates]
        best = ious.index(max(ious))
        accs = [ious[best] >= t for t in THRESHOLDS]
        data = {"subtask_l1": sample.meta["l1"], "subtask_l2": sample.meta["l2"], "description": sample.meta["description"],
                "pred": candidates[best], "ann_id": sample.meta["id"], "bbox": truth, "iou": ious[best],
                "center_acc": center_inside(truth, candidates[best]), "acc_5": accs[0], "acc_75": accs[5],
                "acc_9": accs[8], "macc": sum(accs) / len(accs)}  # fmt: skip
        return {f"groundingme_{metric}": data for metric in METRICS}

    def aggregations(self):
        return {f"groundingme_{m}": lambda items, name=name: aggregate(items, name) for m, name in METRICS.items()}

    def synthetic_rows(self, size: int, seed: int):
        """Colored rectangles, one named per row, through every category; Rejection rows name a
        color the image lacks (their bbox the drawn one's or null, read by neither)."""
        rng = np.random.default_rng(seed)
        pairs = [(level, sub) for level, subs in CATEGORIES.items() for sub in subs]
        for index in range(size):
            width, height = int(rng.integers(96, 160)), int(rng.integers(96, 160))
            image = Image.new("RGB", (width, height), (245, 245, 245))
            names = list(rng.permutation(list(COLORS)))
            w, h = int(rng.integers(16, width // 2)), int(rng.integers(16, height // 2))
            x, y = int(rng.integers(0, width - w)), int(rng.integers(0, height - h))
            ImageDraw.Draw(image).rectangle([x, y, x + w - 1, y + h - 1], fill=COLORS[names[0]])
            level, sub = pairs[index % len(pairs)]
            named = names[1] if level == "Rejection" else names[0]
            yield {"id": f"gme_{index}", "image": image_cell(image, f"{index}.png"), "description": f"the {named} box",
                   "bbox": None if level == "Rejection" and index % 2 else [float(x), float(y), float(x + w), float(y + h)],
                   "subtask_l1": level, "subtask_l2": sub, "width": width, "height": height}  # fmt: skip


BENCHMARKS = variants(GroundingME, [
    {"name": "groundingme", "split": "test", "dataset": "lirang04/GroundingME",
     "description": "GroundingME (grounding fine-grained, spatial and limited-visibility descriptions, or refusing "
                    "one of nothing in the image), lmms-eval's groundingme: IoU, ACC@t, MACC by category"}])  # fmt: skip
