"""Scene-graph rewards of R1-SGG: node- and edge-level matching against a ground-truth graph.

Definitions of gpt4vision/R1-SGG at e4de64d, open_r1/grpo.py (reimplemented): a graph is
{"objects": [{"id": "name.N", "bbox": [x1, y1, x2, y2]}], "relationships": [{"subject",
"predicate", "object"}]}, read from the answer by `extract_answer_content` (every "```" and
every "json" replaced by a space first). All geometry is in [0, 1] image coordinates:
predicted boxes times 1 / (the model frame's extent), ground truth times 1 / (image size).
Predicted ids are refined (`_` and `-` to spaces, stripped, lower-cased), ground-truth ids
are not. Ground-truth objects are matched to predicted ones by the Hungarian algorithm on
cost 1 (1 - sim) + 2 (1 - GIoU) + 5 L1 (`bi_match`); extra predictions cost nothing.

The values here are R1-SGG's divided by their scale, so that each lies in [0, 1]; a task's
weights carry the scale (format 1, nodes 2, edges 5):

- `node_acc` (`node_acc_reward` / 2): sum of sim(gt, matched prediction) / #gt objects.
- `node_box` (`node_box_reward` / 2): sum of (2 IoU + 5 e^-L1) / 7 / #gt objects.
- `edge` (`edge_reward` / 5): a ground-truth triplet counts sim x sim x sim when both its
  objects were matched and the prediction relates exactly those two (the last predicate given
  for an ordered pair wins); / max(1, #gt relations).
- `edge_hard` (`edge_hard_reward` / 5, the README's "Hard Recall"): a ground-truth triplet is
  recalled by any predicted one with the same refined predicate, IoU >= 0.5 for both boxes
  (looked up by the predicted ids: an unknown id zeroes the reward) and the same categories.
- `edge_hard_relax` (`edge_hard_relax_reward` / 5): the same IoU gate, then the largest
  sim x sim x sim over the qualifying predictions.
- `graph_format` (`format_reward`, sgg): 1 for `<think>...</think> <answer>...</answer>` (full
  match) whose answer is a valid graph (every object a dict with a string id and a 4-number
  bbox, every relationship three strings naming listed ids); 0.5 for a valid graph without
  that layout when not `strict`. Variant ``head`` is R1-SGG's code as published: a set() over
  the objects (added in 01aaf6d) raises for any non-empty list, so only an empty graph scores.

Where R1-SGG raises on a completion (no JSON, a missing key, a box of another length, a
relation naming an unknown id where it looks one up) its reward is 0, and so is it here.

`sim` is R1-SGG's `category_semantic_similarity` (the name before the first ".", lower-cased,
compared by spaCy en_core_web_sm, a learned model); here it is `category_match`, 1 for the
same name and 0 otherwise: equal to spaCy's wherever that gives 1 (identical text).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import regex

from rewards.detection import INVALID_JSON, load_json
from rewards.text import compile_pattern, fullmatch, search

SEM_WEIGHT, IOU_WEIGHT, BOX_L1_WEIGHT = 1.0, 2.0, 5.0  # the matching cost's weights
PAD_COST = 1e5  # rows that stand for missing predictions
HARD_IOU = 0.5
ANSWER = compile_pattern(r"<answer>(.*?)</answer>", regex.DOTALL)
ANSWER_OPEN = compile_pattern(r"<answer>(.*)", regex.DOTALL)
LAYOUT = compile_pattern(r"<think>.*?</think>\s*<answer>(.*?)</answer>", regex.DOTALL)

Box = Sequence[float]
FormatVariant = Literal["intended", "head"]


class GraphError(ValueError):
    """Where R1-SGG's reward raises (and scores 0)."""


@dataclass(frozen=True)
class Node:
    id: str
    bbox: tuple[float, float, float, float]  # [0, 1] image coordinates


@dataclass(frozen=True)
class Relation:
    subject: str
    predicate: str
    object: str


@dataclass(frozen=True)
class Graph:
    """A ground-truth graph, boxes in [0, 1]; ids as the data gives them."""

    objects: tuple[Node, ...]
    relations: tuple[Relation, ...]


def extract_answer_content(text: str) -> str:
    """R1-SGG's answer: fences and the word "json" blanked, then the first <answer>...</answer>,
    else everything after the first <answer>, else the whole text (stripped)."""
    text = text.replace("```", " ").replace("json", " ").strip()
    match = search(ANSWER, text) or search(ANSWER_OPEN, text)
    return match.group(1).strip() if match else text


def refine(name: Any) -> str:
    if not isinstance(name, str):
        raise GraphError(f"a name must be text, got {type(name).__name__}")
    return name.replace("_", " ").replace("-", " ").strip().lower()


def category(name: str) -> str:
    """An id's category: the name before its first ".", lower-cased, less one trailing space
    ("car .1"): spaCy keeps a single trailing space as the last token's whitespace, so R1-SGG's
    similarity of "car " and "car" is that of identical tokens, 1."""
    return name.split(".")[0].lower().removesuffix(" ")


def category_match(a: str, b: str) -> float:
    """The rule-based stand-in for R1-SGG's spaCy similarity of two ids' categories."""
    return 1.0 if category(a) == category(b) else 0.0


def iou(a: Box, b: Box) -> float:
    """R1-SGG's compute_iou: continuous, union 0 -> 0 (boxes not checked for order)."""
    inter = max(0, min(a[2], b[2]) - max(a[0], b[0])) * max(0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return 0.0 if union == 0 else inter / union


def giou(a: Box, b: Box) -> float:
    """R1-SGG's compute_giou: IoU - (C - U) / C, C the enclosing box; union 0 -> 0."""
    inter = max(0, min(a[2], b[2]) - max(a[0], b[0])) * max(0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    if union == 0:
        return 0.0
    enclosing = (max(a[2], b[2]) - min(a[0], b[0])) * (max(a[3], b[3]) - min(a[1], b[1]))
    if enclosing == 0:  # R1-SGG divides by it and raises
        raise GraphError("the boxes' enclosing box has no area")
    return inter / union - (enclosing - union) / enclosing


def box_l1(a: Box, b: Box) -> float:
    return sum(abs(x - y) for x, y in zip(a, b, strict=True))


def bi_match(gts: Sequence[Node], preds: Sequence[Node]) -> list[tuple[Node, Node]]:
    """R1-SGG's bi_match: (ground truth, prediction) pairs of the Hungarian assignment; rows
    padded with PAD_COST stand for missing predictions and are dropped."""
    pad = max(0, len(gts) - len(preds))
    cost = np.zeros((len(preds) + pad, len(gts)))
    for i, p in enumerate(preds):
        for j, g in enumerate(gts):
            cost[i, j] = (
                SEM_WEIGHT * (1.0 - category_match(p.id, g.id))
                + IOU_WEIGHT * (1.0 - giou(p.bbox, g.bbox))
                + BOX_L1_WEIGHT * box_l1(p.bbox, g.bbox)
            )
    if pad:
        cost[len(preds) :, :] = PAD_COST
    from scipy.optimize import linear_sum_assignment  # imported here: scipy is slow to import

    try:
        rows, cols = linear_sum_assignment(cost)
    except ValueError as err:  # NaN, or no finite assignment
        raise GraphError(str(err)) from err
    return [(gts[c], preds[r]) for r, c in zip(rows, cols, strict=True) if r < len(preds)]


def json_field(item: Any, key: str) -> Any:
    """item[key], where R1-SGG's subscript would raise: a GraphError."""
    if not isinstance(item, dict) or key not in item:
        raise GraphError(f"no {key!r} in {type(item).__name__}")
    return item[key]


def _as_list(value: Any) -> list:
    """What Python's `for` gives over a JSON value (a dict's keys, a string's characters)."""
    if isinstance(value, (list, dict, str)):
        return list(value)
    raise GraphError(f"{type(value).__name__} is not iterable")


@dataclass(frozen=True)
class Prediction:
    """A completion's graph as R1-SGG reads it: the answer's JSON, its objects refined and scaled."""

    answer: dict
    objects: tuple[Node, ...]

    def relations(self) -> list:
        return _as_list(json_field(self.answer, "relationships"))


def read_prediction(completion: str, scale_x: float, scale_y: float) -> Prediction:
    """The predicted objects, each box times (scale_x, scale_y); raises GraphError where R1-SGG
    raises (and scores 0)."""
    data = load_json(extract_answer_content(completion))
    if data is INVALID_JSON or not isinstance(data, dict):
        raise GraphError("the answer is no JSON object")
    objects = []
    for item in _as_list(json_field(data, "objects")):
        box = json_field(item, "bbox")
        if not isinstance(box, list) or len(box) != 4:
            raise GraphError("a bbox is not 4 values")
        if not all(isinstance(v, (int, float)) for v in box):  # booleans count, as in Python
            raise GraphError("a bbox value is not a number")
        try:
            scaled = (box[0] * scale_x, box[1] * scale_y, box[2] * scale_x, box[3] * scale_y)
        except OverflowError as err:
            raise GraphError("a bbox value is beyond any float") from err
        objects.append(Node(refine(json_field(item, "id")), scaled))
    return Prediction(data, tuple(objects))


def node_acc(pred: Prediction, gt: Graph) -> float:
    total = sum(category_match(g.id, p.id) for g, p in bi_match(gt.objects, pred.objects))
    return total / (len(gt.objects) or 1)


def node_box(pred: Prediction, gt: Graph) -> float:
    total = sum(
        (IOU_WEIGHT * iou(g.bbox, p.bbox) + BOX_L1_WEIGHT * math.exp(-box_l1(g.bbox, p.bbox)))
        / (IOU_WEIGHT + BOX_L1_WEIGHT)
        for g, p in bi_match(gt.objects, pred.objects)
    )
    return total / (len(gt.objects) or 1)


def edge(pred: Prediction, gt: Graph) -> float:
    relations = pred.relations()
    matched = {g.id: p.id for g, p in bi_match(gt.objects, pred.objects)}
    triplets = {
        (refine(json_field(r, "subject")), refine(json_field(r, "object"))): refine(json_field(r, "predicate"))
        for r in relations
    }
    total = 0.0
    for rel in gt.relations:
        if rel.subject not in matched or rel.object not in matched:
            continue
        pair = (matched[rel.subject], matched[rel.object])
        if pair in triplets:
            total += (
                category_match(rel.subject, pair[0])
                * category_match(rel.object, pair[1])
                * category_match(rel.predicate, triplets[pair])
            )
    return total / max(1, len(gt.relations))


def _box_of(boxes: dict[str, Box], relation: Any, key: str) -> Box:
    name = refine(json_field(relation, key))
    if name not in boxes:  # R1-SGG's dict lookup raises KeyError
        raise GraphError(f"relation names an unknown object {name!r}")
    return boxes[name]


def _by_id(pred: Prediction, gt: Graph) -> tuple[list, dict[str, Box], dict[str, Box]]:
    """The predicted relations, and the ground truth's and the prediction's boxes by id (the
    last of a repeated predicted id wins, as in R1-SGG's dict)."""
    return pred.relations(), {o.id: o.bbox for o in gt.objects}, {o.id: o.bbox for o in pred.objects}


def edge_hard(pred: Prediction, gt: Graph) -> float:
    relations, gt_boxes, boxes = _by_id(pred, gt)
    recalled = 0
    for rel in gt.relations:
        match = False
        for p in relations:
            if refine(rel.predicate) != refine(json_field(p, "predicate")):
                continue
            sub_iou = iou(gt_boxes[rel.subject], _box_of(boxes, p, "subject"))
            obj_iou = iou(gt_boxes[rel.object], _box_of(boxes, p, "object"))
            if sub_iou < HARD_IOU or obj_iou < HARD_IOU:
                continue
            match = refine(rel.subject).split(".")[0] == refine(p["subject"]).split(".")[0] and (
                refine(rel.object).split(".")[0] == refine(p["object"]).split(".")[0]
            )
            if match:
                break
        recalled += match
    return recalled / max(1, len(gt.relations))


def edge_hard_relax(pred: Prediction, gt: Graph) -> float:
    relations, gt_boxes, boxes = _by_id(pred, gt)
    total = 0.0
    for rel in gt.relations:
        best: list[float] = []
        for p in relations:
            sub_iou = iou(gt_boxes[rel.subject], _box_of(boxes, p, "subject"))
            obj_iou = iou(gt_boxes[rel.object], _box_of(boxes, p, "object"))
            if sub_iou < HARD_IOU or obj_iou < HARD_IOU:
                continue
            best.append(
                category_match(refine(rel.subject), refine(p["subject"]))
                * category_match(refine(rel.object), refine(p["object"]))
                * category_match(refine(rel.predicate), refine(json_field(p, "predicate")))
            )
        total += max(best) if best else 0.0
    return total / max(1, len(gt.relations))


GRAPH_REWARDS: dict[str, Callable[[Prediction, Graph], float]] = {
    "node_acc": node_acc,
    "node_box": node_box,
    "edge": edge,
    "edge_hard": edge_hard,
    "edge_hard_relax": edge_hard_relax,
}


def graph_reward(name: str, completion: str, gt: Graph, scale_x: float, scale_y: float) -> float:
    """One of GRAPH_REWARDS on a completion; 0 where R1-SGG's raises."""
    try:
        return GRAPH_REWARDS[name](read_prediction(completion, scale_x, scale_y), gt)
    except GraphError:
        return 0.0


def _valid_graph(data: Any, variant: FormatVariant) -> bool:
    """R1-SGG's format check of the answer JSON; raises GraphError where it raises."""
    if not (isinstance(data, dict) and "objects" in data and "relationships" in data):
        return False
    objects = _as_list(data["objects"])
    ids = []
    for item in objects:
        name = json_field(item, "id")
        if isinstance(name, (list, dict)):
            raise GraphError("an id is unhashable")
        ids.append(name)
    valid = True
    for item in objects:
        box = item.get("bbox")
        if not isinstance(box, list) or len(box) != 4:
            valid = False
            break
        if not isinstance(item["id"], str):  # its is_valid_id_format runs re.fullmatch on the id and raises
            raise GraphError("an id is not text")
        if not all(isinstance(v, (int, float)) for v in box):
            valid = False
            break
    if variant == "head" and objects:  # set(answer_json["objects"]): dicts are unhashable
        raise GraphError("head: set() over the objects")
    for rel in _as_list(data["relationships"]):
        subject, obj = json_field(rel, "subject"), json_field(rel, "object")
        json_field(rel, "predicate")
        if isinstance(subject, (list, dict)) or (subject in ids and isinstance(obj, (list, dict))):
            raise GraphError("a relation names an unhashable id")
        if (
            subject not in ids
            or obj not in ids
            or not all(isinstance(rel[k], str) for k in ("subject", "object", "predicate"))
        ):
            valid = False
            break
    return valid


def graph_format(completion: str, variant: FormatVariant = "intended", strict: bool = True) -> float:
    content = completion.strip()
    data = load_json(extract_answer_content(content))
    if data is INVALID_JSON:
        return 0.0
    try:
        valid = _valid_graph(data, variant)
    except GraphError:
        return 0.0
    if valid and fullmatch(LAYOUT, content):
        return 1.0
    return 0.5 if valid and not strict else 0.0
