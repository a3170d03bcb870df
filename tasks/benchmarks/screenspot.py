"""GUI grounding benchmarks as lmms-eval evaluates them (commit 75571cf, PyPI 0.7.3):
`screenspot_v2` (HongxinLi/ScreenSpot_v2) and `screenspot_pro` (TIGER-Lab/ScreenSpot-Pro),
lmms_eval/tasks/screenspot_{v2,pro}/utils.py, and the original ScreenSpot's box task
`screenspot_rec_test` (rootsautomation/ScreenSpot, lmms_eval/tasks/screenspot/utils_rec.py).

v2 and pro ask for one click point "as [x, y] in normalized coordinates within [0, 1]" and read it
the same way: a <bbox> tag's center, else the first bracketed pair, else "x: .., y: ..",
else the center of four numbers when the response says "box", else the first two numbers;
a number with "%" is divided by 100. A point beyond 1 on either axis is divided by the
image size. The sample is correct when the point lies in the ground-truth box, edges count.
Metrics: `<name>_action_acc` (all samples), `<name>_text_acc` and `<name>_icon_acc` (by
element type; 0 when a type has no samples). vlrl adds `<name>_acc/<platform>` and
`<name>_acc/<platform>/<type>` from the platform column, which lmms-eval does not report.

Where they differ is in reading the ground truth, quirks kept:

- v2: the image size is `image_width` / `image_height` when the row has them, else 1 x 1;
  a box inside [0, 1] with x2 >= x1 and y2 >= y1 is taken as normalized x1y1x2y2; else one
  whose 3rd and 4th numbers exceed the 1st and 2nd as pixel x1y1x2y2 (so an [x, y, w, h]
  box with w > x reads as x2 = w); else as [x, y, w, h]. Platform: `data_source`.
- pro: the size is `img_size` ([w, h], or a string of it) when given, else `image_width` /
  `image_height`, else 1 x 1; `bbox` (a list, or a string of one) is x1y1x2y2, normalized
  unless its x2 or y2 exceeds 1. The element type is `ui_type`, else `data_type`. Platform:
  `platform`.

`screenspot_rec_test` (SeeClick's ScreenSpot, as RefCOCO's strict REC): the prompt asks for the
element's box as floats in [0, 1] "with two decimal places"; the prediction is the first
bracketed or parenthesized group of four numbers ([0, 0, 0, 0] without one), divided by 1000
when any of them exceeds 1 (Qwen's 0-1000 grid); `bbox` is the normalized x1y1x2y2 truth.
Metrics, means over samples: `screenspot_IoU` (areas unclipped; a zero union, which raises
there, scores 0), `screenspot_ACC@t` (IoU >= t, t in 0.1 ... 0.9) and `screenspot_Center_ACC`
(the box's center in the truth, edges count; the paper's metric). lmms-eval prints each metric
per platform and element type (mobile: a `data_source` holding "ios" or "android"; desktop:
"macos" or "windows"; else web; `data_type` "text", else icon; an empty bucket 0); vlrl reports
Center_ACC's, as `screenspot_Center_ACC-mobile_text` ...

`task.options.coords=model` asks for the point (the box) in the model's frame (the prompt's
coordinate clause replaced) and maps it to original pixels before the same reading.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

import numpy as np
import pyarrow as pa
import regex
from PIL import Image, ImageDraw

from rewards.text import compile_pattern, findall, search
from tasks.benchmarks import LMMS_EVAL
from tasks.benchmarks.refcoco import REC_METRICS, REC_VALUES, center_inside, normalized_from_model, rec_aggregations
from tasks.records import record_image
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, CoordsOptions, mean, variants

PROMPT = (
    "Identify the UI element for the instruction and output exactly one click point as [x, y] in {coords}. "
    "Do not output a bounding box.\nInstruction: {instruction}"
)
COORDS = {
    "lmms_eval": "normalized coordinates within [0, 1]",
    "absolute": "integer pixel coordinates of the image",
    "norm1000": "integer coordinates normalized to 0-1000",
    "original": "pixel coordinates of the image",
}
_TOKEN = r"-?\d+(?:\.\d+)?%?"
NUMBER = compile_pattern(_TOKEN)
BBOX_TAG = compile_pattern(r"<\s*bbox[^>]*>(.*?)<\s*/\s*bbox\s*>", regex.IGNORECASE | regex.DOTALL)
PAIR = compile_pattern(rf"[\[\(]\s*({_TOKEN})\s*(?:,|\s)\s*({_TOKEN})\s*[\]\)]")
XY = compile_pattern(
    rf"['\"]?x['\"]?\s*[:=]\s*({_TOKEN}).*?['\"]?y['\"]?\s*[:=]\s*({_TOKEN})", regex.IGNORECASE | regex.DOTALL
)
BOX_WORDS = ("bbox", "box", "rect", "rectangle")
REC_PROMPT = (
    "Bounding box coordinates are specified in the format (top-left x, top-left y, bottom-right x, bottom-right y). "
    "{values} Please provide the bounding box coordinates of the region that corresponds to the command: {instruction}"
)
# The sentence that states the coordinate convention: screenspot_rec_doc_to_text's, or the model's frame's.
REC_COORDS = REC_VALUES | {
    "lmms_eval": "All values are floating point numbers bounded between 0 and 1 with two decimal places of precision "
    "(e.g., 0.15)."
}
_REC_NUM = r"(-?\d+(?:\.\d+)?)"
REC_BOX = compile_pattern(rf"[\[\(]\s*{_REC_NUM},\s*{_REC_NUM},\s*{_REC_NUM},\s*{_REC_NUM}\s*[\]\)]")
# utils_rec.screenspot_rec_aggregation_result's buckets: (name, data_source holds one of, data_type is text)
REC_PLATFORMS = (("mobile", ("ios", "android")), ("desktop", ("macos", "windows")))


def _value(token: str) -> float:
    token = token.strip()
    return float(token[:-1]) / 100.0 if token.endswith("%") else float(token)


def parse_point(text: str) -> tuple[float, float] | None:
    """screenspot_{v2,pro}._parse_point."""
    tag = search(BBOX_TAG, text)
    if tag:
        tokens = findall(NUMBER, tag.group(1))
        if len(tokens) >= 4:
            x1, y1, x2, y2 = (_value(v) for v in tokens[:4])
            return (x1 + x2) / 2.0, (y1 + y2) / 2.0
    for pattern in (PAIR, XY):
        match = search(pattern, text)
        if match:
            return _value(match.group(1)), _value(match.group(2))
    numbers = findall(NUMBER, text)
    if len(numbers) >= 4 and any(word in text.lower() for word in BOX_WORDS):
        x1, y1, x2, y2 = (_value(v) for v in numbers[:4])
        return (x1 + x2) / 2.0, (y1 + y2) / 2.0
    if len(numbers) >= 2:
        return _value(numbers[0]), _value(numbers[1])
    return None


def rec_box(text: str) -> list[float] | None:
    """utils_rec.parse_float_sequence_within before its 0-1000 step (None where it returns
    [0, 0, 0, 0])."""
    match = search(REC_BOX, text)
    return [float(match.group(i)) for i in range(1, 5)] if match else None


def rec_bucket(data_type: str, data_source: str) -> str:
    """The platform_type bucket screenspot_rec_aggregation_result counts a sample in."""
    platform = next((name for name, marks in REC_PLATFORMS if any(m in data_source for m in marks)), "web")
    return f"{platform}_{'text' if data_type == 'text' else 'icon'}"


def point_in_box(point: tuple[float, float], box: list[float]) -> bool:
    return box[0] <= point[0] <= box[2] and box[1] <= point[1] <= box[3]


def v2_box(bbox: list[float], width: int, height: int) -> list[float]:
    """screenspot_v2._normalize_bbox_to_xyxy."""
    if len(bbox) != 4:
        return [0.0, 0.0, 0.0, 0.0]
    x1, y1, x2_or_w, y2_or_h = (float(v) for v in bbox)
    if 0 <= x1 <= 1 and 0 <= y1 <= 1 and 0 <= x2_or_w <= 1 and 0 <= y2_or_h <= 1 and x2_or_w >= x1 and y2_or_h >= y1:
        return [x1, y1, x2_or_w, y2_or_h]
    if x2_or_w > x1 and y2_or_h > y1:
        return [x1 / width, y1 / height, x2_or_w / width, y2_or_h / height]
    return [x1 / width, y1 / height, (x1 + x2_or_w) / width, (y1 + y2_or_h) / height]


def pro_box(bbox: list[float], width: int, height: int) -> list[float]:
    """screenspot_pro._normalize_xyxy."""
    if len(bbox) != 4:
        return [0.0, 0.0, 0.0, 0.0]
    if bbox[2] <= 1 and bbox[3] <= 1:
        return bbox
    return [bbox[0] / width, bbox[1] / height, bbox[2] / width, bbox[3] / height]


def pro_numbers(value: Any) -> list[float]:
    """screenspot_pro._parse_bbox: a list, a JSON list, or the first four numbers of a string."""
    if isinstance(value, list):
        return [float(v) for v in value]
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
            if isinstance(parsed, list):
                return [float(v) for v in parsed]
        except (json.JSONDecodeError, TypeError, ValueError):
            numbers = regex.findall(r"-?\d+(?:\.\d+)?", value)
            if len(numbers) >= 4:
                return [float(v) for v in numbers[:4]]
    return [0.0, 0.0, 0.0, 0.0]


def pro_size(value: Any) -> tuple[int, int] | None:
    """screenspot_pro._parse_img_size: [w, h], a JSON [w, h], or the first two integers of a string."""
    if isinstance(value, list) and len(value) == 2:
        w, h = int(value[0]), int(value[1])
        if w > 0 and h > 0:
            return w, h
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
            if isinstance(parsed, list) and len(parsed) == 2:
                w, h = int(parsed[0]), int(parsed[1])
                if w > 0 and h > 0:
                    return w, h
        except (json.JSONDecodeError, TypeError, ValueError):
            numbers = regex.findall(r"\d+", value)
            if len(numbers) >= 2:
                w, h = int(numbers[0]), int(numbers[1])
                if w > 0 and h > 0:
                    return w, h
    return None


class _ScreenSpot(Benchmark):
    Options = CoordsOptions
    reference = LMMS_EVAL
    doc_to_target = "instruction"
    max_new_tokens = 128

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        path, width, height = record_image(record, ctx)
        instruction = record.get("instruction", "")
        frame = ctx.frame_spec.frame(width, height)
        coords = COORDS["lmms_eval" if self.options.coords == "lmms_eval" else frame.kind]
        box, size, kind, platform = self._truth(record, ctx)
        meta = {"size": size, "type": kind, "platform": platform}
        return [Sample(id=str(record.get("id", ctx.index)), task=self.name, problem=PROMPT.format(coords=coords, instruction=instruction),
                       solution=box, images=[path], frame=frame, meta=meta, source=ctx.source)]  # fmt: skip

    def _truth(self, record: dict[str, Any], ctx: RecordContext) -> tuple[list[float], list[int], str, str]:
        """(normalized box, the [width, height] the reading used, element type, platform)."""
        raise NotImplementedError

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        point = parse_point(completion)
        if point is not None and self.options.coords == "model":
            point = tuple(sample.frame.point_to_original(point))
        width, height = sample.meta["size"]
        if point is not None and (point[0] > 1 or point[1] > 1):
            point = (point[0] / width, point[1] / height)
        record = {"correct": bool(point and point_in_box(point, sample.solution)), self._type_key: sample.meta["type"],
                  "platform": sample.meta["platform"]}  # fmt: skip
        return {f"{self.name}_{m}": record for m in ("action_acc", "text_acc", "icon_acc")}

    def aggregations(self):
        return {
            f"{self.name}_action_acc": share_correct,
            f"{self.name}_text_acc": lambda items: share_correct([i for i in items if self._type_of(i) == "text"]),
            f"{self.name}_icon_acc": lambda items: share_correct([i for i in items if self._type_of(i) == "icon"]),
        }

    def aggregate(self, processed) -> dict[str, float]:
        out = super().aggregate(processed)
        groups: dict[str, list[dict]] = defaultdict(list)
        for values in processed:
            item = values[f"{self.name}_action_acc"]
            if item["platform"]:
                groups[item["platform"]].append(item)
                groups[f"{item['platform']}/{self._type_of(item)}"].append(item)
        return out | {f"{self.name}_acc/{key}": share_correct(items) for key, items in sorted(groups.items())}

    _type_key = "data_type"

    def _type_of(self, item: dict) -> str:
        return str(item.get(self._type_key, "")).lower()

    def synthetic_rows(self, size: int, seed: int):
        return (self._synthetic_row(*screen) for screen in synthetic_screens(size, seed))


class ScreenSpotV2(_ScreenSpot):
    """lmms_eval/tasks/screenspot_v2/utils.py."""

    columns = (Column("image", "image"), Column("instruction", "string"), Column("bbox", "list<number>"),
               Column("data_type", "string", required=False), Column("data_source", "string", required=False),
               Column("image_width", "int", required=False), Column("image_height", "int", required=False))  # fmt: skip
    schema = pa.schema([("img_filename", pa.string()), ("bbox", pa.list_(pa.float64())), ("instruction", pa.string()),
                        ("data_type", pa.string()), ("data_source", pa.string()), ("image", IMAGE_TYPE)])  # fmt: skip

    def _truth(self, record, ctx):
        width, height = 1, 1
        if "image_width" in record and "image_height" in record:
            width, height = int(record["image_width"]), int(record["image_height"])
        return (
            v2_box(record["bbox"], width, height),
            [width, height],
            record.get("data_type", ""),
            record.get("data_source") or "",
        )

    def _synthetic_row(self, image, box, kind, platform, index):
        x1, y1, x2, y2 = box
        return {"img_filename": f"{index}.png", "bbox": [x1, y1, x2 - x1, y2 - y1], "instruction": f"open item {index}",
                "data_type": kind, "data_source": platform, "image": image_cell(image, f"{index}.png")}  # fmt: skip


class ScreenSpotPro(_ScreenSpot):
    """lmms_eval/tasks/screenspot_pro/utils.py."""

    columns = (Column("image", "image"), Column("instruction", "string"), Column("bbox", "list<number>|string"),
               Column("img_size", "list<number>|string", required=False), Column("ui_type", "string", required=False),
               Column("data_type", "string", required=False), Column("platform", "string", required=False),
               Column("image_width", "int", required=False), Column("image_height", "int", required=False))  # fmt: skip
    schema = pa.schema([("id", pa.string()), ("image", IMAGE_TYPE), ("instruction", pa.string()), ("bbox", pa.string()),
                        ("img_size", pa.string()), ("ui_type", pa.string()), ("platform", pa.string()),
                        ("application", pa.string()), ("group", pa.string())])  # fmt: skip
    _type_key = "ui_type"

    def _truth(self, record, ctx):
        width, height = int(record.get("image_width", 1)), int(record.get("image_height", 1))
        size = pro_size(record.get("img_size"))
        if size is not None:
            width, height = size
        kind = str(record.get("ui_type", record.get("data_type", ""))).lower()
        return pro_box(pro_numbers(record["bbox"]), width, height), [width, height], kind, record.get("platform") or ""

    def _synthetic_row(self, image, box, kind, platform, index):
        return {"id": f"pro_{index}", "image": image_cell(image, f"{index}.png"), "instruction": f"open item {index}",
                "bbox": json.dumps(box), "img_size": json.dumps(list(image.size)), "ui_type": kind, "platform": platform,
                "application": "synthetic", "group": "Dev"}  # fmt: skip


class ScreenSpotRec(Benchmark):
    """lmms_eval/tasks/screenspot/utils_rec.py: the element's box, scored as RefCOCO's strict REC."""

    Options = CoordsOptions
    reference = LMMS_EVAL
    doc_to_target = "bbox"
    until = ("ASSISTANT:",)  # _default_template_rec_yaml
    columns = (Column("image", "image"), Column("instruction", "string"), Column("bbox", "list<number>"),
               Column("data_type", "string"), Column("data_source", "string"),
               Column("file_name", "string", required=False))  # fmt: skip
    schema = pa.schema([("file_name", pa.string()), ("bbox", pa.list_(pa.float64())), ("instruction", pa.string()),
                        ("data_type", pa.string()), ("data_source", pa.string()), ("image", IMAGE_TYPE)])  # fmt: skip

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        path, width, height = record_image(record, ctx)
        bbox = record["bbox"]
        if not isinstance(bbox, list) or len(bbox) != 4 or None in bbox:
            raise ctx.error(f"bbox must be 4 numbers [x1, y1, x2, y2] in [0, 1], got {bbox!r}"[:200])
        frame = ctx.frame_spec.frame(width, height)
        values = REC_COORDS["lmms_eval" if self.options.coords == "lmms_eval" else frame.kind]
        instruction = ctx.get(record, "instruction", str, "the command")
        meta = {"instruction": instruction, "ann_id": record.get("file_name"), "data_type": record["data_type"],
                "data_source": record["data_source"]}  # fmt: skip
        return [Sample(id=str(ctx.index), task=self.name, problem=REC_PROMPT.format(values=values, instruction=instruction),
                       solution=[float(v) for v in bbox], images=[path], frame=frame, meta=meta, source=ctx.source)]  # fmt: skip

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        box = rec_box(completion)
        if box is None:
            box = [0, 0, 0, 0]
        elif self.options.coords == "model":
            box = normalized_from_model(box, sample.frame)
        elif max(box) > 1:
            box = [v / 1000 for v in box]
        data = {"pred": box, "bbox": sample.solution} | sample.meta
        return {f"screenspot_{metric}": data for metric in REC_METRICS}

    def aggregations(self):
        return rec_aggregations("screenspot_")

    def aggregate(self, processed) -> dict[str, float]:
        out = super().aggregate(processed)
        buckets: dict[str, list[float]] = {
            f"{p}_{t}": [] for p in ("mobile", "web", "desktop") for t in ("text", "icon")
        }
        for values in processed:
            item = values["screenspot_Center_ACC"]
            buckets[rec_bucket(item["data_type"], item["data_source"])].append(
                float(center_inside(item["bbox"], item["pred"]))
            )
        return out | {
            f"screenspot_Center_ACC-{key}": mean(scores) if scores else 0.0 for key, scores in buckets.items()
        }

    def synthetic_rows(self, size: int, seed: int):
        for image, (x1, y1, x2, y2), kind, platform, index in synthetic_screens(size, seed):
            width, height = image.size
            if index % 4 == 3:  # a region from the corner: the origin, where no box reads, lies in it
                x1, y1 = 0, 0
            yield {"file_name": f"{platform}_{index}.png", "bbox": [x1 / width, y1 / height, x2 / width, y2 / height],
                   "instruction": f"open item {index}", "data_type": kind.title() if index % 5 == 4 else kind,
                   "data_source": ("android", "macos", "shop")[index % 3] if platform == "web" else platform,
                   "image": image_cell(image, f"{index}.png")}  # fmt: skip


def share_correct(items: list[dict]) -> float:
    """screenspot's _aggregate (and OSWorld-G's): the share of correct samples, 0 when there are none."""
    return sum(1 for item in items if item.get("correct")) / len(items) if items else 0.0


def synthetic_screens(size: int, seed: int):
    """(screenshot, element box x1y1x2y2 in pixels, text | icon, platform, index)."""
    rng = np.random.default_rng(seed)
    for index in range(size):
        width, height = int(rng.integers(160, 240)), int(rng.integers(120, 200))
        image = Image.new("RGB", (width, height), (235, 235, 240))
        w, h = int(rng.integers(12, 40)), int(rng.integers(10, 30))
        x, y = int(rng.integers(0, width - w)), int(rng.integers(0, height - h))
        ImageDraw.Draw(image).rectangle([x, y, x + w, y + h], fill=(30, 90, 200))
        yield (
            image,
            [x, y, x + w, y + h],
            str(rng.choice(["text", "icon"])),
            str(rng.choice(["ios", "windows", "web"])),
            index,
        )


BENCHMARKS = variants(ScreenSpotV2, [{"name": "screenspot_v2", "split": "test", "dataset": "HongxinLi/ScreenSpot_v2",
                                      "description": "ScreenSpot-v2, lmms-eval's screenspot_v2: normalized click point in the box"}])  # fmt: skip
BENCHMARKS |= variants(ScreenSpotPro, [{"name": "screenspot_pro", "split": "test", "dataset": "TIGER-Lab/ScreenSpot-Pro",
                                        "description": "ScreenSpot-Pro, lmms-eval's screenspot_pro: normalized click point in the box"}])  # fmt: skip
BENCHMARKS |= variants(ScreenSpotRec, [{"name": "screenspot_rec_test", "split": "test", "dataset": "rootsautomation/ScreenSpot",
                                        "description": "ScreenSpot (SeeClick), lmms-eval's screenspot_rec_test: the element's box, IoU and center accuracy"}])  # fmt: skip
