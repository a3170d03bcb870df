"""OSWorld-G (GUI grounding on desktop screenshots, from the OSWorld environments) as lmms-eval
evaluates it (commit 75571cf): `osworld_g` (lmms_eval/tasks/osworld_g/{osworld_g.yaml, utils.py})
on MMInstruction/OSWorld-G @ test.

- Prompt (doc_to_messages: the screenshot, then the text): "Identify the UI target for the
  instruction and output exactly one click point as [x, y]. You may use either normalized
  coordinates in [0, 1] or absolute pixel coordinates. If the target does not exist, output
  [-1, -1].\\nInstruction: " + instruction; 128 new tokens.
- The point: ScreenSpot-v2's reading, the same code (tasks/benchmarks/screenspot.py
  `parse_point`). A point with both coordinates in [0, 1] is scaled by the image size
  (`image_size` [w, h] where the row has both positive, else the image's own); any other is
  taken as pixels.
- Right, by `box_type` (lower-cased): bbox, the point in `box_coordinates` [x, y, w, h] (edges
  count); polygon, inside the flat [x1, y1, x2, y2, ...] polygon by ray casting (four numbers:
  the box between two corners, edges count; fewer than three points or an odd count: never);
  refusal, both coordinates negative; any other type, never. No point: wrong.
- `osworld_g_acc` (all rows) and `osworld_g_bbox_acc`, `osworld_g_polygon_acc`,
  `osworld_g_refusal_acc` (the rows of that type; 0 where there are none).

`task.options.coords=model` asks for the point in the model's frame (the prompt's coordinate
sentence replaced) and maps it to the image's pixels (then to `image_size`'s), where the default
reads a model's pixels (Qwen2.5-VL's, in its resized image) as the original's. Deviation: a bbox row whose
`box_coordinates` are not four numbers (lmms-eval fails unpacking them) is skipped and named.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from tasks.benchmarks import LMMS_EVAL
from tasks.benchmarks.screenspot import COORDS, parse_point, point_in_box, share_correct, synthetic_screens
from tasks.records import record_image
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, CoordsOptions, variants

PROMPT = (
    "Identify the UI target for the instruction and output exactly one click point as [x, y]. {coords} "
    "If the target does not exist, output [-1, -1].\nInstruction: {instruction}"
)
LMMS_EVAL_COORDS = "You may use either normalized coordinates in [0, 1] or absolute pixel coordinates."
BOX_TYPES = ("bbox", "polygon", "refusal")
BOX_WORDS = {"bbox": "[x, y, w, h]", "polygon": "a flat list [x1, y1, x2, y2, ...]"}
SCHEMA = pa.schema(
    [("id", pa.string()), ("image", IMAGE_TYPE), ("instruction", pa.string()), ("image_size", pa.list_(pa.int64())),
     ("box_type", pa.string()), ("box_coordinates", pa.list_(pa.float64()))]
)  # fmt: skip


def accuracy(items: list[dict[str, Any]], box_type: str | None = None) -> float:
    """utils._aggregate: the share right of the rows of `box_type` (all: None), 0 of none."""
    return share_correct([item for item in items if box_type is None or item["box_type"] == box_type])


def in_box(point: tuple[float, float], box: list[float]) -> bool:
    """utils._point_in_bbox: inside [x, y, w, h], edges included."""
    left, top, width, height = box
    return point_in_box(point, [left, top, left + width, top + height])


def in_polygon(point: tuple[float, float], polygon: list[float]) -> bool:
    """utils._point_in_polygon: four numbers are two corners, either way round (edges included);
    else ray casting over (x, y) pairs, at least three."""
    if len(polygon) == 4:
        x1, y1, x2, y2 = polygon
        return point_in_box(point, [min(x1, x2), min(y1, y2), max(x1, x2), max(y1, y2)])
    if len(polygon) % 2 or len(polygon) < 6:
        return False
    x, y = point
    inside, n = False, len(polygon) // 2
    j = n - 1
    for i in range(n):
        xi, yi, xj, yj = polygon[2 * i], polygon[2 * i + 1], polygon[2 * j], polygon[2 * j + 1]
        if (yi > y) != (yj > y) and x < (xj - xi) * (y - yi) / (yj - yi) + xi:
            inside = not inside
        j = i
    return inside


class OSWorldG(Benchmark):
    """lmms_eval/tasks/osworld_g/utils.py."""

    Options = CoordsOptions
    reference = LMMS_EVAL
    doc_to_target = "instruction"
    max_new_tokens = 128
    columns = (Column("image", "image"), Column("instruction", "string", required=False),
               Column("image_size", "list<number>", required=False), Column("box_type", "string", required=False),
               Column("box_coordinates", "list<number>", required=False), Column("id", "string|int", required=False))  # fmt: skip
    schema = SCHEMA

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        path, width, height = record_image(record, ctx)
        frame = ctx.frame_spec.frame(width, height)
        size = record.get("image_size")
        if isinstance(size, list) and len(size) == 2 and size[0] > 0 and size[1] > 0:
            width, height = size
        box_type = str(record.get("box_type", "")).lower()
        box = record.get("box_coordinates", [0.0] * 4 if box_type == "bbox" else [])  # a missing column: the default
        if (box is None and box_type in ("bbox", "polygon")) or (box_type == "bbox" and len(box) != 4):
            raise ctx.error(f"box_coordinates of a {box_type} must be {BOX_WORDS[box_type]}, got {box!r}"[:200])
        coords = LMMS_EVAL_COORDS if self.options.coords == "lmms_eval" else f"Use {COORDS[frame.kind]}."
        prompt = PROMPT.format(coords=coords, instruction=record.get("instruction", ""))  # null: "None", as there
        truth = {"type": box_type, "box": list(box or []), "size": [width, height]}
        return [Sample(id=str(record.get("id", ctx.index)), task=self.name, problem=prompt, solution=truth,
                       images=[path], frame=frame, source=ctx.source)]  # fmt: skip

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        truth, point = sample.solution, parse_point(completion)
        right = False
        if point is not None:
            if self.options.coords == "model":  # to the image's pixels, then image_size's
                f, (width, height) = sample.frame, truth["size"]
                x, y = f.point_to_original(point)
                point = (x * width / f.width, y * height / f.height)
            elif 0 <= point[0] <= 1 and 0 <= point[1] <= 1:  # _to_absolute_point
                point = (point[0] * truth["size"][0], point[1] * truth["size"][1])
            kind = truth["type"]
            right = (
                (kind == "bbox" and in_box(point, truth["box"]))
                or (kind == "polygon" and in_polygon(point, truth["box"]))
                or (kind == "refusal" and point[0] < 0 and point[1] < 0)
            )
        record = {"correct": right, "box_type": truth["type"]}
        return {f"osworld_g_{m}": record for m in ("acc", "bbox_acc", "polygon_acc", "refusal_acc")}

    def aggregations(self):
        out = {"osworld_g_acc": accuracy}
        return out | {f"osworld_g_{kind}_acc": lambda items, kind=kind: accuracy(items, kind) for kind in BOX_TYPES}

    def synthetic_rows(self, size: int, seed: int):
        """Boxes, triangles, corner pairs (either way round) and refusals; every third row's
        `image_size` twice the image's (its coordinates too), every third has none."""
        for image, (x1, y1, x2, y2), _, _, index in synthetic_screens(size, seed):
            kind, k = ("bbox", "polygon", "refusal", "Polygon", "bbox")[index % 5], 2 if index % 3 == 1 else 1
            box = {
                "bbox": [x1, y1, x2 - x1, y2 - y1],
                "polygon": [x1, y1, x2, y1 + (y2 - y1) // 2, x1, y2] if index % 2 else [x2, y2, x1, y1],
                "refusal": [],
            }[kind.lower()]
            yield {"id": f"osworld_{index}", "image": image_cell(image, f"{index}.png"), "instruction": f"open item {index}",
                   "image_size": [v * k for v in image.size] if index % 3 else None, "box_type": kind,
                   "box_coordinates": [float(v * k) for v in box]}  # fmt: skip


BENCHMARKS = variants(OSWorldG, [
    {"name": "osworld_g", "split": "test", "dataset": "MMInstruction/OSWorld-G",
     "description": "OSWorld-G (desktop GUI grounding), lmms-eval's osworld_g: the click point in the box, polygon, or a refusal"}])  # fmt: skip
