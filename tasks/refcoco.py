"""The RefCOCO grounding family (refcoco, refcoco+, refcocog), as VLM-R1 and Perception-R1
train and evaluate it.

Data: VLM-R1's REC json (`image`, `problem`, `normal_caption`, `solution` box in original
pixels, `height`, `width`), written from the original refer annotations by
`data_prep.refer`, or VLM-R1's grpo_jsonl records (`image`, `conversations`: the question
turn's text without `<image>`, the answer turn's box). Two extensions: a `solution` that is a list of boxes (an expression that
names several objects), and a `segmentation` (COCO polygons in original pixels) that the
`polygon_iou` reward and metrics score against. The model answers in its own frame;
rewards and metrics map predictions back to original pixels before comparing.

The three tasks differ in name, description and the grammar of their synthetic
expressions (RefCOCO+ has no location words, RefCOCOg has longer ones); data, rewards and
metrics are the same code.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from data_prep.refcoco import write_synthetic_rec
from data_prep.shapes import ExpressionStyle, SceneSpec
from rewards.format import FORMATS
from rewards.grounding import (
    BOX_PARSERS,
    FIRST_BOX_PARSERS,
    IOU_CONVENTIONS,
    MAX_BOXES,
    box_center_inside,
    hungarian_mean_iou,
    parse_eval_box,
    pr1_relative_to_norm1000,
    pr1_untagged,
)
from rewards.polygon import box_geometry, coco_geometry, geometry_iou, parse_answer_shapes, polygon_geometry
from rewards.text import answer_text, compile_pattern, findall
from tasks.records import record_image, vlm_r1_conversation
from vlrl.config import ConfigError, build
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.tasking.task import RewardFn, Task
from vlrl.vision.frames import Frame

# VLM-R1's question template for REC.
VLM_R1_REC_TEMPLATE = (
    "{Question} First output the thinking process in <think> </think> tags and then output "
    "the final answer in <answer> </answer> tags. Output the final answer in JSON format."
)
# For the families that answer in relative 0-1000 coordinates (Qwen3-VL, Qwen3.5): VLM-R1's
# template, with the answer's JSON bbox_2d and its frame stated as Qwen3-VL's grounding data
# writes them. No public RL recipe for Qwen3-VL grounding exists to copy (docs/tasks.md).
QWEN3_REC_TEMPLATE = (
    "{Question} First output the thinking process in <think> </think> tags and then output the final answer "
    'in <answer> </answer> tags. Output the final answer in JSON format as {{"bbox_2d": [x1, y1, x2, y2]}}, '
    "with coordinates relative to the image from 0 to 1000."
)
ACC_THRESHOLDS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
_NUMBER = compile_pattern(r"-?\d+(?:\.\d+)?")


@dataclass
class GroundingOptions:
    # {Question}: the record's problem; {Caption}: its referring expression (normal_caption).
    prompt_template: str = VLM_R1_REC_TEMPLATE
    format: Literal["vlm_r1_rec", "think_answer"] = "vlm_r1_rec"
    iou_convention: Literal["vlm_r1", "continuous"] = "vlm_r1"
    iou_threshold: float = 0.5  # for the thresholded reward `iou_threshold` (1 if IoU > t)
    target_think: str = "{caption}"  # reasoning text of the SFT target
    # The SFT target's boxes scaled about their centers (clipped to the image): 1.0 is the
    # ground truth; above 1 imitates a teacher whose boxes are too loose (the demo's cold start).
    target_box_scale: float = 1.0
    # vlm_r1: integer boxes inside <answer>; perception_r1: Perception-R1's float patterns anywhere.
    box_parser: Literal["vlm_r1", "perception_r1"] = "vlm_r1"
    # perception_r1 on a completion without <|box_start|>: "relative" scales its box by 1000 into
    # the 0-1000 frame, as PR1 does; "model" reads it in the model's frame (completions decoded
    # without special tokens, as vlrl's HF rollout decodes them, never hold <|box_start|>).
    pr1_untagged_boxes: Literal["relative", "model"] = "relative"
    # ACC@t counts IoU > t (VLM-R1's evaluation); inclusive: IoU >= t (Perception-R1's evaluate_grounding.py).
    acc_inclusive: bool = False
    synthetic_multi: float = 0.0  # fraction of synthetic records whose expression names several objects
    synthetic_polygons: bool = False  # synthetic records carry their targets' exact outlines
    synthetic_scene: dict[str, Any] = field(default_factory=dict)  # data_prep.shapes.SceneSpec fields


class RefCOCO(Task):
    name = "refcoco"
    description = (
        "Referring-expression grounding (RefCOCO, VLM-R1 REC json): one or more boxes per expression, IoU rewards"
    )
    Options = GroundingOptions
    default_rewards = {"format": 1.0, "iou": 1.0}
    accuracy_metric = "acc@0.5"
    headline = ("acc@0.5", "mean_iou", "format_rate")
    data_source = "VLM-R1's REC json (rec_jsons_processed) as downloaded, or the refer annotations converted: python -m data_prep.refer --refs 'refcoco/refs(unc).p' --instances refcoco/instances.json --split {split} --out {path}"
    family_options: ClassVar[dict[str, dict[str, Any]]] = {
        family: {"prompt_template": QWEN3_REC_TEMPLATE}
        for family in ("qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe")
    }
    option_templates: ClassVar[dict[str, tuple[str, ...]]] = {
        "prompt_template": ("Question", "Caption"),
        "target_think": ("caption", "problem"),
    }
    expression_style: ClassVar[ExpressionStyle] = "refcoco"  # grammar of the synthetic expressions

    def __init__(self, options: dict[str, Any] | None = None, rewards: dict[str, float] | None = None):
        super().__init__(options, rewards)
        self.scene = build(SceneSpec, self.options.synthetic_scene, prefix="task.options.synthetic_scene.")
        if self.options.target_box_scale <= 0:
            raise ConfigError(f"config: task.options.target_box_scale must be > 0, got {self.options.target_box_scale}")
        if not 0.0 <= self.options.synthetic_multi <= 1.0:
            raise ConfigError(
                f"config: task.options.synthetic_multi must be in [0, 1], got {self.options.synthetic_multi}"
            )

    # -- data -----------------------------------------------------------------------------
    def build_sample(self, record: dict[str, Any], ctx: RecordContext) -> Sample:
        if "problem" not in record and "conversations" in record:
            problem, solution = vlm_r1_conversation(record, ctx)
            if not isinstance(solution, (list, str)):
                raise ctx.error(f"conversations[1].value must be a box [x1, y1, x2, y2], got {solution!r}"[:200])
            boxes = _solution_boxes(solution, "conversations[1].value", ctx)
        else:
            problem = ctx.get(record, "problem", str, "the question text")
            solution = ctx.get(record, "solution", (list, str), "a box [x1, y1, x2, y2] in original pixels")
            boxes = _solution_boxes(solution, "solution", ctx)
        path, width, height = record_image(record, ctx)
        for i, (x1, y1, x2, y2) in enumerate(boxes):
            # One pixel of slack: public annotations round box edges past the border.
            if not (-1 <= x1 < x2 <= width + 1 and -1 <= y1 < y2 <= height + 1):
                which = f"box {i} of the solution" if len(boxes) > 1 else "box"
                raise ctx.error(f"{which} {[x1, y1, x2, y2]} is empty or outside the {width}x{height} image")
        meta: dict[str, Any] = {"caption": record.get("normal_caption", "")}
        segmentation = _segmentation(record, ctx, len(boxes), width, height)
        if segmentation is not None:
            meta["segmentation"] = segmentation
        return Sample(
            id=ctx.record_id(record),
            task=self.name,
            problem=problem,
            solution=boxes[0] if len(boxes) == 1 else boxes,
            images=[path],
            frame=ctx.frame_spec.frame(width, height),
            meta=meta,
            source=ctx.source,
        )

    def synthesize(self, path: str | Path, size: int, seed: int) -> None:
        write_synthetic_rec(
            path,
            size,
            seed,
            self.scene,
            style=self.expression_style,
            multi_fraction=self.options.synthetic_multi,
            polygons=self.options.synthetic_polygons,
        )

    # -- prompting ------------------------------------------------------------------------
    def messages(self, sample: Sample) -> list[dict[str, Any]]:
        text = self.options.prompt_template.format(Question=sample.problem, Caption=sample.meta.get("caption", ""))
        return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]

    def target(self, sample: Sample) -> str:
        scale = self.options.target_box_scale
        width, height = sample.frame.width, sample.frame.height
        boxes = [sample.frame.box_to_model(scale_box(box, scale, width, height)) for box in target_boxes(sample)]
        caption = sample.meta.get("caption", "")
        if self.options.box_parser == "perception_r1":  # Qwen2-VL's grounding tokens, no reasoning
            spans = "".join(f"<|box_start|>({x1},{y1}),({x2},{y2})<|box_end|>" for x1, y1, x2, y2 in boxes)
            return f"<|object_ref_start|>{caption}<|object_ref_end|>{spans}"
        think = self.options.target_think.format(caption=caption, problem=sample.problem)
        objects = [f'{{"bbox_2d": [{x1}, {y1}, {x2}, {y2}]}}' for x1, y1, x2, y2 in boxes]
        answer = objects[0] if len(objects) == 1 else "[" + ", ".join(objects) + "]"
        return f"<think>{think}</think>\n<answer>{answer}</answer>"

    # -- scoring --------------------------------------------------------------------------
    def reward_functions(self) -> dict[str, RewardFn]:
        return {
            "format": self._format_reward,
            "iou": self._iou_reward,
            "iou_squared": lambda c, s: [v * v for v in self._iou_reward(c, s)],
            "iou_threshold": lambda c, s: [
                1.0 if v > self.options.iou_threshold else 0.0 for v in self._iou_reward(c, s)
            ],
            "multi_iou": lambda c, s: [self._multi_iou(ci, si) for ci, si in zip(c, s, strict=True)],
            "polygon_iou": lambda c, s: [self._polygon_iou(ci, si) for ci, si in zip(c, s, strict=True)],
        }

    def _format_reward(self, completions: Sequence[str], samples: Sequence[Sample]) -> list[float]:
        check = FORMATS[self.options.format]
        return [check(c) for c in completions]

    def _iou_reward(self, completions: Sequence[str], samples: Sequence[Sample]) -> list[float]:
        return [self._box_score(c, s)[0] for c, s in zip(completions, samples, strict=True)]

    def _to_original(self, boxes: list | None, completion: str, sample: Sample) -> list[list[float]] | None:
        """Stated boxes in original pixels; None without an answer, or where a coordinate maps to
        no finite float (VLM-R1's frame conversion raises there, and its reward is 0)."""
        if boxes is None:
            return None
        frame = sample.frame
        relative = self.options.box_parser == "perception_r1" and self.options.pr1_untagged_boxes == "relative"
        if relative and pr1_untagged(completion):
            boxes = [pr1_relative_to_norm1000(box) for box in boxes]
            if any(box is None for box in boxes):
                return None
            frame = Frame.for_image("norm1000", frame.width, frame.height, 0, 0)
        try:
            out = [frame.box_to_original(box) for box in boxes]
        except OverflowError:
            return None
        return out if all(math.isfinite(v) for box in out for v in box) else None

    def _pred_boxes(self, completion: str, sample: Sample) -> list[list[float]] | None:
        """Every box the completion states, in original pixels (None if it states no answer)."""
        return self._to_original(BOX_PARSERS[self.options.box_parser](completion), completion, sample)

    def _one_box(self, completion: str, sample: Sample, evaluation: bool = False) -> list[float] | None:
        """The one box a single-target answer states, in original pixels; `evaluation`: the one
        the public evaluation reads (VLM-R1's test_rec_r1.py: in braces, the last; Perception-R1
        evaluates with its reward's parser)."""
        vlm_r1_eval = evaluation and self.options.box_parser == "vlm_r1"
        box = parse_eval_box(completion) if vlm_r1_eval else FIRST_BOX_PARSERS[self.options.box_parser](completion)
        boxes = self._to_original(None if box is None else [box], completion, sample)
        return None if boxes is None else boxes[0]

    def _box_score(self, completion: str, sample: Sample, evaluation: bool = False) -> tuple[float, float, bool]:
        """(IoU, center hit, parsed) of a completion. One target: the first box the answer
        states, as VLM-R1 and Perception-R1 score it (`evaluation`: the box the public
        evaluation reads). Several targets: `hungarian_mean`
        over every stated box; the center hit is the share of matched boxes whose center
        lies in their target, over max(#predicted, #targets)."""
        iou = IOU_CONVENTIONS[self.options.iou_convention]
        gts = target_boxes(sample)
        if len(gts) == 1:
            box = self._one_box(completion, sample, evaluation)
            if box is None:
                return 0.0, 0.0, False
            return iou(box, gts[0]), float(box_center_inside(box, gts[0])), True
        boxes = self._pred_boxes(completion, sample)
        if not boxes:
            return 0.0, 0.0, False
        score, pairs = hungarian_mean_iou(boxes, gts, iou)
        hits = sum(box_center_inside(boxes[p], gts[t]) for p, t, _ in pairs)
        return score, hits / max(len(boxes), len(gts)), True

    def _multi_iou(self, completion: str, sample: Sample) -> float:
        """`hungarian_mean` over every stated box, also for one target (extra boxes cost)."""
        boxes = self._pred_boxes(completion, sample)
        if boxes is None:
            return 0.0
        return hungarian_mean_iou(boxes, target_boxes(sample), IOU_CONVENTIONS[self.options.iou_convention])[0]

    def _polygon_iou(self, completion: str, sample: Sample) -> float:
        """Area IoU of the stated shape(s) against the targets' polygons (their boxes where a
        record has no segmentation): the first shape for one target, `hungarian_mean` for several."""
        shapes = self._pred_shapes(completion, sample)
        if not shapes:
            return 0.0
        gts = target_geometries(sample)
        if len(gts) == 1:
            return geometry_iou(shapes[0], gts[0])
        return hungarian_mean_iou(shapes, gts, geometry_iou)[0]

    def _pred_shapes(self, completion: str, sample: Sample) -> list | None:
        frame = sample.frame
        if self.options.box_parser != "vlm_r1":
            boxes = self._pred_boxes(completion, sample)
            return None if boxes is None else [box_geometry(b) for b in boxes]
        shapes = parse_answer_shapes(completion)
        if shapes is None:
            return None
        try:
            original = [
                (kind, frame.box_to_original(value) if kind == "box" else [frame.point_to_original(p) for p in value])
                for kind, value in shapes
            ]
        except OverflowError:  # an integer beyond any float: no usable answer
            return None
        values = [v for kind, value in original for v in (value if kind == "box" else [c for p in value for c in p])]
        if not all(math.isfinite(v) for v in values):
            return None
        return [
            box_geometry(value) if kind == "box" else polygon_geometry([tuple(p) for p in value])
            for kind, value in original
        ]

    def predict(self, completion: str, sample: Sample) -> list | None:
        """The first stated box for one target; every stated box for several (original pixels)."""
        if len(target_boxes(sample)) > 1:
            return self._pred_boxes(completion, sample)
        return self._one_box(completion, sample, evaluation=True)

    def _hit(self, iou: float, threshold: float) -> bool:
        """ACC@t counts IoU > t, as VLM-R1's evaluation; IoU >= t with acc_inclusive (Perception-R1)."""
        return iou >= threshold if self.options.acc_inclusive else iou > threshold

    def correct(self, completions: Sequence[str], samples: Sequence[Sample]) -> list[float]:
        """ACC@0.5 of each completion, as `metrics` counts it."""
        scores = [self._box_score(c, s, evaluation=True) for c, s in zip(completions, samples, strict=True)]
        return [float(self._hit(iou, 0.5)) for iou, _, _ in scores]

    def metrics(self, samples: Sequence[Sample], completions: Sequence[str]) -> dict[str, float]:
        n = len(samples)
        if n == 0:
            return {}
        scores = [self._box_score(c, s, evaluation=True) for c, s in zip(completions, samples, strict=True)]
        ious = [iou for iou, _, _ in scores]
        hit = self._hit
        out = {f"acc@{t:.1f}": sum(hit(v, t) for v in ious) / n for t in ACC_THRESHOLDS}
        out["mean_iou"] = sum(ious) / n
        out["center_acc"] = sum(center for _, center, _ in scores) / n
        out["format_rate"] = sum(self._format_reward(completions, samples)) / n
        out["parse_rate"] = sum(parsed for _, _, parsed in scores) / n
        multi = [i for i, s in enumerate(samples) if len(target_boxes(s)) > 1]
        if multi:
            out["multi_target_acc@0.5"] = sum(hit(ious[i], 0.5) for i in multi) / len(multi)
        with_polygons = [(c, s) for c, s in zip(completions, samples, strict=True) if "segmentation" in s.meta]
        if with_polygons:
            polygon_ious = [self._polygon_iou(c, s) for c, s in with_polygons]
            out["polygon_mean_iou"] = sum(polygon_ious) / len(polygon_ious)
            out["polygon_acc@0.5"] = sum(hit(v, 0.5) for v in polygon_ious) / len(polygon_ious)
        return out


class RefCOCOPlus(RefCOCO):
    name = "refcoco+"
    description = "Referring-expression grounding (RefCOCO+: appearance only, no location words), VLM-R1 REC json"
    expression_style = "refcoco+"
    data_source = "VLM-R1's REC json (rec_jsons_processed) as downloaded, or the refer annotations converted: python -m data_prep.refer --refs 'refcoco+/refs(unc).p' --instances refcoco+/instances.json --split {split} --out {path}"


class RefCOCOg(RefCOCO):
    name = "refcocog"
    description = "Referring-expression grounding (RefCOCOg: longer expressions), VLM-R1 REC json"
    expression_style = "refcocog"
    data_source = "VLM-R1's REC json (rec_jsons_processed) as downloaded, or the refer annotations converted: python -m data_prep.refer --refs 'refcocog/refs(umd).p' --instances refcocog/instances.json --split {split} --out {path}"


def scale_box(box: list[float], scale: float, width: float, height: float) -> list[float]:
    """The box grown (or shrunk) by `scale` about its center, kept inside the image."""
    if scale == 1.0:
        return box
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    hw, hh = (box[2] - box[0]) * scale / 2, (box[3] - box[1]) * scale / 2
    return [max(0.0, cx - hw), max(0.0, cy - hh), min(float(width), cx + hw), min(float(height), cy + hh)]


def target_boxes(sample: Sample) -> list[list[float]]:
    """The sample's target boxes: one for a single-object expression, several otherwise."""
    solution = sample.solution
    return solution if solution and isinstance(solution[0], (list, tuple)) else [solution]


def target_geometries(sample: Sample) -> list:
    """Each target's shape: its segmentation polygons where the record has them, else its box."""
    segmentation = sample.meta.get("segmentation") or [None] * len(target_boxes(sample))
    return [
        box_geometry(box) if polygons is None else coco_geometry(polygons)
        for box, polygons in zip(target_boxes(sample), segmentation, strict=True)
    ]


def _solution_boxes(given: list | str, key: str, ctx: RecordContext) -> list[list[float]]:
    """The ground-truth boxes (record key `key`): 4 numbers, a list of such boxes, or VLM-R1's
    "<answer>[x1,y1,x2,y2]</answer>" (several boxes: 4 numbers each)."""
    value: Any = given
    if isinstance(value, str):
        inner = answer_text(value)
        value = [float(v) for v in findall(_NUMBER, inner if inner is not None else value)]
        if len(value) > 4 and len(value) % 4 == 0:
            value = [value[i : i + 4] for i in range(0, len(value), 4)]
    boxes = value if value and all(isinstance(v, list) for v in value) else [value]
    if len(boxes) > MAX_BOXES:
        raise ctx.error(f"key '{key}' has {len(boxes)} boxes; at most {MAX_BOXES} are supported")
    for box in boxes:
        if len(box) != 4 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in box):
            raise ctx.error(
                f"key '{key}' must be 4 numbers [x1, y1, x2, y2] (or a list of such boxes), got {given!r}"[:200]
            )
    try:
        boxes = [[float(v) for v in box] for box in boxes]
    except OverflowError:  # an integer past 1e308
        raise ctx.error(f"key '{key}' has a coordinate no float holds: {given!r}"[:200]) from None
    if not all(math.isfinite(v) for box in boxes for v in box):
        raise ctx.error(f"key '{key}' has a non-finite coordinate: {boxes}"[:200])
    return boxes


def _segmentation(
    record: dict[str, Any], ctx: RecordContext, n_targets: int, width: int, height: int
) -> list[list[list[float]] | None] | None:
    """The record's COCO polygons, one list per target (None for a target without), or None.
    One target: [[x1, y1, x2, y2, ...], ...]; several: one such list (or null) per box."""
    if record.get("segmentation") is None:
        return None
    value = record["segmentation"]
    # Per-target form: every entry is null or a list of polygons; else it is one target's polygons.
    nested = isinstance(value, list) and bool(value) and all(v is None or _is_polygon_list(v) for v in value)
    per_target = value if nested else [value]
    if len(per_target) != n_targets:
        raise ctx.error(f"key 'segmentation' has {len(per_target)} entries for {n_targets} target boxes")
    out: list[list[list[float]] | None] = []
    for i, polygons in enumerate(per_target):
        which = f"segmentation of target {i}" if n_targets > 1 else "segmentation"
        if polygons is None:
            out.append(None)
            continue
        if not _is_polygon_list(polygons):
            raise ctx.error(
                f"{which} must be COCO polygons: a list of flat [x1, y1, x2, y2, ...] lists (RLE is not supported)"
            )
        for polygon in polygons:
            if len(polygon) < 6 or len(polygon) % 2:
                raise ctx.error(f"{which}: a polygon needs an even count of at least 6 numbers, got {len(polygon)}")
            if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in polygon):
                raise ctx.error(f"{which}: a polygon has a value that is not a finite number")
            xs, ys = polygon[0::2], polygon[1::2]
            if min(xs) < -1 or min(ys) < -1 or max(xs) > width + 1 or max(ys) > height + 1:
                raise ctx.error(f"{which}: a polygon reaches outside the {width}x{height} image")
        clean = [[float(v) for v in polygon] for polygon in polygons]
        if not coco_geometry(clean).area > 0:
            raise ctx.error(f"{which} has no area")
        out.append(clean)
    return out


def _is_polygon_list(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(p, list) and p and not isinstance(p[0], list) for p in value)
    )
