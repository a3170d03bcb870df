"""Detection: a JSON list of labelled boxes inside <answer>, scored against labelled ground truth.

A completion answers ``[{"bbox_2d": [x1, y1, x2, y2], "label": "..."}]`` (usually in a
```json fence) or ``None`` when nothing is there. Boxes are compared in whatever frame the
caller gives both sides in; the detection task maps predictions back to original pixels first.

Public definitions matched (each function's docstring says what it follows and where not):

- ``map_reward`` / ``ap50_reward``: VLM-R1 ``map_reward`` / ``calculate_map`` (and ``od_reward``
  with score_type 0 / 1) in om-ai-lab/VLM-R1 ``src/open-r1-multimodal/src/open_r1/grpo_jsonl.py``:
  pycocotools ``COCOeval`` ("bbox") on one image, every prediction scored 1.0, stats[0] / stats[1].
  ``coco_ap`` re-implements COCOeval's evaluateImg + accumulate + summarize for one image
  (pycocotools ``cocoeval.py``), tested equal to it to 1e-9 and about two orders faster.
- ``od_length_reward``: VLM-R1 ``odLength_reward`` (map_reward with ``length_reward=True``).
- ``weighted_sum_reward``: VLM-R1 ``detection_score`` and the ``weighted_sum`` branch of its
  ``accuracy_reward``.
- ``hungarian_reward``: Perception-R1 ``pr1_detection_reward`` with ``HungarianMatcher`` and
  ``calculate_reward`` (linkangheng/PR1 @accb7cb ``src/open_r1/rewards.py`` and
  ``src/open_r1/utils.py``), divided by its maximum 3 so that it lies in [0, 1].

Everything here is pure Python (numpy, scipy) over untrusted text: no eval, JSON parsed under
size and nesting limits, linear-time scanning for tags and fences, values always in [0, 1].

Where the public code crashes or reads garbage, this module decides, on purpose:
- an entry is well formed only with exactly 4 finite numbers (no booleans, |v| <= 1e9) and a
  string label; VLM-R1 uses the first four of a longer list and hands NaN or booleans to
  pycocotools. Malformed entries still count as entries (n_pred, false alarms), as in VLM-R1.
- weighted_sum reads its answer as VLM-R1's accuracy_reward does (`parse_weighted_sum`: its
  clean_text, twice, then the first ```json fence of the lower-cased text). An entry without a
  label is malformed (VLM-R1 raises NameError or reuses the previous entry's label).
- hungarian compares the labels themselves in the class cost (Perception-R1 indexes the
  prediction by id and the target by id - 1), works in float64 (Perception-R1: float32), counts
  an inverted box as wrong format (Perception-R1's GIoU assertion fails and scores 0), and
  follows the detection rule for empty cases (Perception-R1 has no images without objects).
- per-image AP honours crowd regions as COCOeval does (VLM-R1's data has none).
"""

from __future__ import annotations

import json
import math
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from rewards.grounding import iou_continuous, iou_vlm_r1
from rewards.text import compile_pattern

Box = tuple[float, float, float, float]  # x1, y1, x2, y2
ParseMode = Literal["vlm_r1", "lenient"]

MAX_COMPLETION_CHARS = 65536  # longer text is not an answer (the scorer drops it too)
MAX_JSON_DEPTH = 16  # a detection list needs 3 levels; deeper text is rejected before json runs
MAX_ABS_COORD = 1e9  # a coordinate beyond this is not a coordinate (and would overflow areas)

# pycocotools Params.setDetParams, built the same way so that the floats are identical.
COCO_IOU_THRESHOLDS: tuple[float, ...] = tuple(
    np.linspace(0.5, 0.95, int(np.round((0.95 - 0.5) / 0.05)) + 1, endpoint=True).tolist()
)
COCO_RECALL_THRESHOLDS: tuple[float, ...] = tuple(
    np.linspace(0.0, 1.00, int(np.round((1.00 - 0.0) / 0.01)) + 1, endpoint=True).tolist()
)
COCO_AREA_ALL: tuple[float, float] = (0.0**2, 1e5**2)
COCO_MAX_DETS = 100
_EPS = float(np.spacing(1))  # accumulate(): pr = tp / (fp + tp + np.spacing(1))


# -- parsing ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Detections:
    """What an answer states: its well-formed entries, and how many entries it had in all.

    `raw_count` counts every entry the way VLM-R1 iterates the parsed JSON (malformed ones
    too): the public rewards decide "empty" and the length penalty on it. `says_none` is
    VLM-R1's weighted_sum test for the no-object answer: strip, drop trailing dots, lower.
    """

    boxes: tuple[Box, ...] = ()
    labels: tuple[str, ...] = ()
    raw_count: int = 0
    says_none: bool = False

    def map_boxes(self, fn: Callable[[Box], Sequence[float]]) -> Detections:
        """The same detections with every box passed through `fn` (e.g. a frame change)."""
        boxes = tuple(tuple(float(v) for v in fn(b)) for b in self.boxes)
        return Detections(boxes, self.labels, self.raw_count, self.says_none)  # type: ignore[arg-type]


def _between(text: str, start: str, end: str) -> list[str]:
    """re.findall(start + '(.*?)' + end, text, DOTALL) for literal delimiters, in linear time."""
    found, pos = [], 0
    while True:
        s = text.find(start, pos)
        if s < 0:
            return found
        e = text.find(end, s + len(start))
        if e < 0:  # no later start can close either
            return found
        found.append(text[s + len(start) : e])
        pos = e + len(end)


def last_answer(completion: str) -> str | None:
    """Content of the last <answer>...</answer>, stripped (VLM-R1's od_reward takes the last)."""
    blocks = _between(completion, "<answer>", "</answer>")
    return blocks[-1].strip() if blocks else None


def _last_fence(text: str, json_only: bool) -> str | None:
    """Content of the last ```json ... ``` (or, when not `json_only`, ``` ... ```) block."""
    if json_only:
        blocks = _between(text, "```json", "```")
        return blocks[-1] if blocks else None
    found, pos = [], 0
    while (s := text.find("```", pos)) >= 0:
        inner = s + 3 + (4 if text.startswith("json", s + 3) else 0)
        e = text.find("```", inner)
        if e < 0:
            break
        found.append(text[inner:e])
        pos = e + 3
    return found[-1] if found else None


_STRUCTURE = compile_pattern(r'[\[\]{}"\\]')


def _nesting_within(text: str, limit: int) -> bool:
    """True if brackets outside JSON strings nest at most `limit` deep (checked before json runs)."""
    depth, in_string, escaped_at = 0, False, -1
    try:
        for match in _STRUCTURE.finditer(text, timeout=0.25):
            i = match.start()
            if i == escaped_at:
                continue
            c = text[i]
            if in_string:
                if c == "\\":
                    escaped_at = i + 1
                elif c == '"':
                    in_string = False
            elif c == '"':
                in_string = True
            elif c in "[{":
                depth += 1
                if depth > limit:
                    return False
            elif c in "]}":
                depth -= 1
    except TimeoutError:
        return False
    return True


INVALID_JSON = object()


def load_json(text: str) -> Any:
    """json.loads under size and nesting limits; `INVALID_JSON` when the text is not acceptable JSON."""
    if len(text) > MAX_COMPLETION_CHARS or not _nesting_within(text, MAX_JSON_DEPTH):
        return INVALID_JSON
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # JSONDecodeError, or an integer too long to convert
        return INVALID_JSON


def _entry(item: Any) -> tuple[Box, str] | None:
    """A well-formed {"bbox_2d": [4 finite numbers], "label": str}, or None."""
    if not isinstance(item, dict):
        return None
    box, label = item.get("bbox_2d"), item.get("label")
    if not isinstance(label, str) or not isinstance(box, list) or len(box) != 4:
        return None
    values = []
    for v in box:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return None
        try:
            f = float(v)
        except OverflowError:
            return None
        if not math.isfinite(f) or abs(f) > MAX_ABS_COORD:
            return None
        values.append(f)
    return (values[0], values[1], values[2], values[3]), label


def _detections(items: list[Any], says_none: bool) -> Detections:
    entries = [e for e in map(_entry, items) if e is not None]
    return Detections(tuple(b for b, _ in entries), tuple(lab for _, lab in entries), len(items), says_none)


def _says_none(answer: str) -> bool:
    return answer.strip().rstrip(".").lower() == "none"


def parse_detections(completion: str, mode: ParseMode = "vlm_r1") -> Detections | None:
    """The detections a completion's last <answer> states; None when it has no answer at all.

    ``vlm_r1`` reads the answer as VLM-R1's map_reward does: the last ```json fence is parsed
    with json and iterated as is (a list's items; a dict's keys; a string's characters);
    no fence, or JSON that does not parse, is an empty prediction. ``lenient`` also accepts a
    plain ``` fence or bare JSON, takes a single object as a one-entry list, treats ``None``
    as the empty answer, and returns None (unparseable) for anything else.
    """
    if not isinstance(completion, str) or len(completion) > MAX_COMPLETION_CHARS:
        return None
    answer = last_answer(completion)
    if answer is None:
        return None
    says_none = _says_none(answer)
    if mode == "vlm_r1":
        block = _last_fence(answer, json_only=True)
        data = INVALID_JSON if block is None else load_json(block.strip())
        items = list(data) if isinstance(data, (list, dict, str)) else []
        return _detections(items, says_none)
    if says_none:
        return Detections((), (), 0, True)
    block = _last_fence(answer, json_only=False)
    data = load_json((answer if block is None else block).strip())
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        return None
    return _detections(data, says_none)


def _newlines_out(text: str, char: str) -> str:
    """VLM-R1's `re.sub(r'(?<=\\s)' + char, '', text)` then `re.sub(r'(?<!\\s)' + char, ' ', text)`:
    `char` dropped after whitespace, then each one left made a space (linear time)."""
    kept = "".join(c for i, c in enumerate(text) if not (c == char and i > 0 and text[i - 1].isspace()))
    return "".join(" " if c == char and not (i > 0 and kept[i - 1].isspace()) else c for i, c in enumerate(kept))


def vlm_r1_clean_text(text: str) -> str:
    """VLM-R1's clean_text (grpo_jsonl.py): the last <answer> block, or all the text without one;
    newlines, then carriage returns, dropped after whitespace and made spaces elsewhere;
    stripped, trailing dots dropped, lower-cased."""
    blocks = _between(text, "<answer>", "</answer>")
    if blocks:
        text = blocks[-1]
    for char in ("\n", "\r"):
        text = _newlines_out(text, char)
    return text.strip().rstrip(".").lower()


def parse_weighted_sum(completion: str) -> Detections | None:
    """The detections VLM-R1's `weighted_sum` accuracy reads (om-ai-lab/VLM-R1 at 90052f4,
    grpo_jsonl.py: accuracy_reward, detection_score): the completion cleaned (says None when
    that is "none"), cleaned once more inside detection_score, then the first ```json fence of
    that lower-cased text parsed with json (so `NaN` no longer parses and `BBOX_2D` is a key).
    None only for text over the size limit."""
    if not isinstance(completion, str) or len(completion) > MAX_COMPLETION_CHARS:
        return None
    cleaned = vlm_r1_clean_text(completion)
    fences = _between(vlm_r1_clean_text(cleaned), "```json", "```")
    block = fences[0].strip() if fences else ""
    data = load_json(block) if block else INVALID_JSON
    items = list(data) if isinstance(data, (list, dict, str)) else []
    return _detections(items, cleaned == "none")


def answer_well_formed(completion: str, mode: ParseMode = "vlm_r1") -> bool:
    """The last <answer> says None, or holds a detection list every entry of which is well
    formed (in a ```json fence for ``vlm_r1``; fenced or bare for ``lenient``)."""
    if not isinstance(completion, str) or len(completion) > MAX_COMPLETION_CHARS:
        return False
    answer = last_answer(completion)
    if answer is None:
        return False
    if _says_none(answer):
        return True
    block = _last_fence(answer, json_only=mode == "vlm_r1")
    if block is None and mode == "vlm_r1":
        return False
    data = load_json((answer if block is None else block).strip())
    return isinstance(data, list) and all(_entry(item) is not None for item in data)


# -- COCO average precision on one image --------------------------------------------------


def _coco_iou(d: Box, g: Box, crowd: bool) -> float:
    """pycocotools maskApi.c bbIou on [x, y, w, h] boxes, in its order of operations."""
    w = min(d[2] + d[0], g[2] + g[0]) - max(d[0], g[0])
    if w <= 0:
        return 0.0
    h = min(d[3] + d[1], g[3] + g[1]) - max(d[1], g[1])
    if h <= 0:
        return 0.0
    inter = w * h
    da = d[2] * d[3]
    return inter / (da if crowd else da + g[2] * g[3] - inter)


def _xywh(box: Sequence[float]) -> Box:
    return (box[0], box[1], box[2] - box[0], box[3] - box[1])


def _precision_sums(
    gts: list[Box],
    gt_areas: list[float],
    gt_crowd: list[bool],
    dts: list[Box],
    thresholds: Sequence[float],
    area_range: tuple[float, float],
) -> list[float] | None:
    """Sum over the 101 recall thresholds of interpolated precision, per IoU threshold, for one
    category of one image (COCOeval evaluateImg then accumulate); None when it has no
    non-ignored ground truth (COCOeval leaves its precision at -1 and summarize skips it)."""
    lo, hi = area_range
    ignored = [c or a < lo or a > hi for c, a in zip(gt_crowd, gt_areas, strict=True)]
    order = [i for i, ig in enumerate(ignored) if not ig] + [i for i, ig in enumerate(ignored) if ig]
    npig = len(gts) - sum(ignored)
    if npig == 0:
        return None
    g_boxes = [gts[i] for i in order]
    g_crowd = [gt_crowd[i] for i in order]
    g_ignored = [ignored[i] for i in order]
    n_g = len(g_boxes)
    ious = [[_coco_iou(d, g, c) for g, c in zip(g_boxes, g_crowd, strict=True)] for d in dts]
    dt_out_of_range = [not (lo <= d[2] * d[3] <= hi) for d in dts]  # loadRes: area = w * h
    recall = COCO_RECALL_THRESHOLDS
    ascending = list(thresholds) == sorted(thresholds)
    plain = not any(g_ignored)  # no crowd or out-of-range ground truth: the common, fast case
    # Per detection, the ground truths it could match at the lowest threshold, best first and,
    # on equal IoU, the later one first: COCOeval's scan keeps the last best it meets.
    floor0 = min(min(thresholds), 1 - 1e-10)
    candidates = [sorted(((-v, -g) for g, v in enumerate(row) if v >= floor0)) for row in ious]
    sums = []
    for t in thresholds:
        floor = min(t, 1 - 1e-10)
        taken = [False] * n_g
        tp = fp = 0.0
        rc: list[float] = []
        pr: list[float] = []
        for d, out_of_range in enumerate(dt_out_of_range):
            m = -1
            if plain:
                for neg_v, neg_g in candidates[d]:
                    if -neg_v < floor:
                        break
                    if not taken[-neg_g]:
                        m = -neg_g
                        break
            else:
                m = _coco_match(ious[d], floor, taken, g_crowd, g_ignored)
            if m == -1:
                if out_of_range:
                    continue  # unmatched and outside the area range: ignored
                fp += 1.0
            else:
                taken[m] = True
                if g_ignored[m]:
                    continue  # matched an ignored (crowd) region: neither tp nor fp
                tp += 1.0
            # Ignored detections repeat the previous (recall, precision) point, which changes
            # neither the envelope nor the first index that reaches a recall threshold.
            rc.append(tp / npig)
            pr.append(tp / (fp + tp + _EPS))
        if tp == 0 and ascending:  # no match at t, so none at any higher threshold either
            sums.extend([0.0] * (len(thresholds) - len(sums)))
            break
        for i in range(len(pr) - 1, 0, -1):
            if pr[i] > pr[i - 1]:
                pr[i - 1] = pr[i]
        total, assigned = 0.0, 0
        for r, p in zip(rc, pr, strict=True):
            reached = bisect_right(recall, r)  # thresholds <= r: searchsorted(side='left') lands here first
            if reached > assigned:
                total += (reached - assigned) * p
                assigned = reached
        sums.append(total)
    return sums


def _coco_match(row: list[float], floor: float, taken: list[bool], crowd: list[bool], ignored: list[bool]) -> int:
    """COCOeval evaluateImg's match of one detection at one threshold (ignored gts sorted last)."""
    best, m = floor, -1
    for g, value in enumerate(row):
        if taken[g] and not crowd[g]:
            continue
        if m > -1 and not ignored[m] and ignored[g]:
            break
        if value < best:
            continue
        best, m = value, g
    return m


def coco_ap(
    gt_boxes: Sequence[Sequence[float]],
    gt_labels: Sequence[str],
    dt_boxes: Sequence[Sequence[float]],
    dt_labels: Sequence[str],
    *,
    gt_crowd: Sequence[bool] | None = None,
    gt_areas: Sequence[float] | None = None,
    dt_scores: Sequence[float] | None = None,
    iou_thresholds: Sequence[float] = COCO_IOU_THRESHOLDS,
    max_dets: int = COCO_MAX_DETS,
    area_range: tuple[float, float] = COCO_AREA_ALL,
) -> float | None:
    """COCOeval("bbox") average precision of one image, as ``summarize`` reports it.

    Boxes are [x1, y1, x2, y2]; categories are the distinct ground-truth labels (detections
    of any other label are dropped, as VLM-R1's calculate_map drops them); `gt_areas`
    default to the box areas (VLM-R1 writes area = w * h); scores default to 1.0, ties keep
    list order (COCOeval sorts with a stable mergesort). With the default thresholds this
    is stats[0] (AP@[.50:.95], area all, maxDets 100); with (0.5,) it is stats[1].
    Returns None where COCOeval reports -1: no category has a non-ignored ground truth.
    """
    n_gt = len(gt_boxes)
    crowd = [bool(c) for c in gt_crowd] if gt_crowd is not None else [False] * n_gt
    g_xywh = [_xywh(b) for b in gt_boxes]
    areas = [float(a) for a in gt_areas] if gt_areas is not None else [b[2] * b[3] for b in g_xywh]
    by_category: dict[str, list[int]] = {}
    for i, label in enumerate(gt_labels):
        by_category.setdefault(label, []).append(i)
    dts_of: dict[str, list[int]] = {}
    for j, label in enumerate(dt_labels):
        if label in by_category:
            dts_of.setdefault(label, []).append(j)
    total, categories = 0.0, 0
    for label, gis in by_category.items():
        djs = dts_of.get(label, [])
        if dt_scores is not None:
            djs = sorted(djs, key=lambda j: -dt_scores[j])  # stable, like np.argsort(kind="mergesort")
        djs = djs[:max_dets]
        sums = _precision_sums(
            [g_xywh[i] for i in gis],
            [areas[i] for i in gis],
            [crowd[i] for i in gis],
            [_xywh(dt_boxes[j]) for j in djs],
            iou_thresholds,
            area_range,
        )
        if sums is not None:
            total += sum(sums)
            categories += 1
    if categories == 0:
        return None
    return total / (categories * len(iou_thresholds) * len(COCO_RECALL_THRESHOLDS))


# -- rewards ------------------------------------------------------------------------------


@dataclass(frozen=True)
class GroundTruth:
    """Labelled boxes of one image; `crowd` regions (COCO iscrowd) are ignore regions for AP."""

    boxes: tuple[Box, ...]
    labels: tuple[str, ...]
    crowd_boxes: tuple[Box, ...] = ()
    crowd_labels: tuple[str, ...] = ()


def _empty_case(pred: Detections, gt: GroundTruth) -> float | None:
    """VLM-R1 map_reward: both empty -> 1, one empty -> 0 (counting raw entries); else None."""
    if pred.raw_count == 0 or not gt.boxes:
        return 1.0 if pred.raw_count == 0 and not gt.boxes else 0.0
    return None


def _ap(pred: Detections, gt: GroundTruth, thresholds: Sequence[float]) -> float:
    value = coco_ap(
        gt.boxes + gt.crowd_boxes,
        gt.labels + gt.crowd_labels,
        pred.boxes,
        pred.labels,
        gt_crowd=[False] * len(gt.boxes) + [True] * len(gt.crowd_boxes),
        iou_thresholds=thresholds,
    )
    return 0.0 if value is None else min(1.0, max(0.0, value))


def map_reward(pred: Detections | None, gt: GroundTruth) -> float:
    """VLM-R1 map_reward (score_type 0): COCO AP@[.50:.95] of this one image, scores 1.0.

    No <answer> (pred None) scores 0; an empty prediction scores 1 on an empty image and 0
    otherwise; predictions with a label the image's ground truth lacks are dropped before
    COCOeval (VLM-R1's cats2id lookup). Where COCOeval would report -1 (every ground truth
    ignored) the reward is 0.
    """
    if pred is None:
        return 0.0
    empty = _empty_case(pred, gt)
    return empty if empty is not None else _ap(pred, gt, COCO_IOU_THRESHOLDS)


def ap50_reward(pred: Detections | None, gt: GroundTruth) -> float:
    """VLM-R1 map_reward with score_type 1 (`od_ap50`): COCO AP at IoU 0.5 of this one image."""
    if pred is None:
        return 0.0
    empty = _empty_case(pred, gt)
    return empty if empty is not None else _ap(pred, gt, COCO_IOU_THRESHOLDS[:1])


def od_length_reward(pred: Detections | None, gt: GroundTruth) -> float:
    """VLM-R1 odLength_reward: map_reward * (1 if n_gt >= n_pred else n_gt / n_pred).

    n_pred counts every entry of the answer, malformed ones included, as VLM-R1 does.
    """
    value = map_reward(pred, gt)
    if pred is None or pred.raw_count <= len(gt.boxes):
        return value
    return value * len(gt.boxes) / pred.raw_count


IOU_CONVENTIONS: dict[str, Callable[[Sequence[float], Sequence[float]], float]] = {
    "vlm_r1": iou_vlm_r1,
    "continuous": iou_continuous,
}


def weighted_sum_reward(
    pred: Detections | None,
    gt: GroundTruth,
    *,
    iou_threshold: float = 0.5,
    alpha: float = 0.7,
    beta: float = 0.0,
    gamma: float = 0.3,
    iou: Callable[[Sequence[float], Sequence[float]], float] = iou_vlm_r1,
) -> float:
    """VLM-R1 detection_score, as its accuracy_reward calls it for 'weighted_sum'.

    On an image with no objects: 1 if the answer says None (strip, trailing dots dropped,
    case-insensitive), else 0. Otherwise greedy one-to-one matching, label-blind: repeatedly
    the unmatched (prediction, ground truth) pair of highest IoU (first in prediction then
    ground-truth order on ties) while that IoU >= `iou_threshold`. A matched pair whose
    labels differ (case-insensitive) adds IoU 0 but is still matched. Then
    position = sum of matched IoU / n_gt, label = matched with equal labels / n_gt,
    miss = unmatched gt / n_gt, false_alarm = unmatched predictions / n_pred (n_pred counts
    malformed entries, which never match) and the reward is
    (alpha * position + beta * label + gamma * (1 - (miss + false_alarm) / 2)) / (alpha + beta + gamma).
    IoU is VLM-R1's (inclusive-pixel) by default.
    """
    if pred is None:
        return 0.0
    if not gt.boxes:
        return 1.0 if pred.says_none else 0.0
    if pred.raw_count == 0:
        return 0.0
    pairs = []
    for p, pbox in enumerate(pred.boxes):
        for g, gbox in enumerate(gt.boxes):
            value = iou(pbox, gbox)
            if value >= iou_threshold:
                pairs.append((-value, p, g))
    pairs.sort()  # highest IoU first; ties in (prediction, ground truth) order, as the public loop
    used_p, used_g = set(), set()
    position = labels_right = 0.0
    for neg_iou, p, g in pairs:
        if p in used_p or g in used_g:
            continue
        used_p.add(p)
        used_g.add(g)
        if pred.labels[p].lower() == gt.labels[g].lower():
            position += -neg_iou
            labels_right += 1.0
    n_gt, matched = len(gt.boxes), len(used_g)
    miss = (n_gt - matched) / n_gt
    false_alarm = (pred.raw_count - matched) / pred.raw_count
    score = alpha * position / n_gt + beta * labels_right / n_gt + gamma * (1.0 - (miss + false_alarm) / 2.0)
    return min(1.0, max(0.0, score / (alpha + beta + gamma)))


# Perception-R1 (utils.py / rewards.py) constants.
PR1_MATCH_IOU = 0.5  # HungarianMatcher(threshold=0.5): keep matched pairs with IoU > 0.5
PR1_COST_CLASS, PR1_COST_BBOX, PR1_COST_GIOU = 1.0, 5.0, 2.0
PR1_NUM_CLASSES = 90  # one-hot logits over COCO's 90 ids, softmaxed
PR1_FORMAT_SCALE, PR1_F1_SCALE, PR1_PENALTY_SCALE, PR1_MAX = 0.25, 0.75, 0.5, 3.0


def _pr1_iou_matrix(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Perception-R1 box_iou: IoU with 1e-8 added to the union, and the union."""
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    wh = np.clip(rb - lt, 0, None)
    inter = wh[..., 0] * wh[..., 1]
    union = area_a[:, None] + area_b[None, :] - inter
    return inter / (union + 1e-8), union


def _cxcywh(a: np.ndarray) -> np.ndarray:
    return np.stack([(a[:, 0] + a[:, 2]) / 2, (a[:, 1] + a[:, 3]) / 2, a[:, 2] - a[:, 0], a[:, 3] - a[:, 1]], axis=1)


def hungarian_reward(
    pred: Detections | None, gt: GroundTruth, vocabulary: Sequence[str] | None = None, penalty: bool = True
) -> float:
    """Perception-R1 pr1_detection_reward / 3 (its range is [0, 3]).

    Entries whose label is not in `vocabulary` (Perception-R1: the 80 COCO category names of its
    get_cate_to_id, whatever the prompt asked for) or
    whose box is inverted (Perception-R1's GIoU asserts x2 >= x1, y2 >= y1) count as wrong
    format: format = 1 - wrong / n_entries. Predictions and ground truth are matched by
    scipy's linear_sum_assignment on 5 * L1(cx, cy, w, h) - 2 * GIoU - p(class), p the
    softmax of a one-hot over 90 classes; pairs with IoU <= 0.5 are dropped. Then with m
    kept pairs: 0.25 * format + 0.75 * F1 + (label accuracy + mean IoU over the pairs)
    - 0.5 * (fp_rate + fn_rate), clamped to [0, 3]; with m = 0 only the format term.
    `penalty` false drops the fp / fn term (PR1's DO_PENAIlty=False, which its detection
    recipe, train_qwen2_2b_vl_detection.sh, sets; True is its code's default). Empty cases
    follow the detection rule (both empty 1, one empty 0).
    """
    if pred is None:
        return 0.0
    if pred.raw_count == 0 or not gt.boxes:
        return 1.0 if pred.raw_count == 0 and not gt.boxes else 0.0
    allowed = None if vocabulary is None else set(vocabulary)
    keep = [
        i
        for i, (b, label) in enumerate(zip(pred.boxes, pred.labels, strict=True))
        if b[2] >= b[0] and b[3] >= b[1] and (allowed is None or label in allowed)
    ]
    if not keep:
        return 0.0  # Perception-R1's parse_json returns no predictions and the reward is 0
    format_score = 1.0 - (pred.raw_count - len(keep)) / pred.raw_count
    reward = PR1_FORMAT_SCALE * format_score
    p_boxes = np.array([pred.boxes[i] for i in keep], dtype=np.float64)
    p_labels = [pred.labels[i] for i in keep]
    g_boxes = np.array(gt.boxes, dtype=np.float64)
    ious, union = _pr1_iou_matrix(p_boxes, g_boxes)
    lt = np.minimum(p_boxes[:, None, :2], g_boxes[None, :, :2])
    rb = np.maximum(p_boxes[:, None, 2:], g_boxes[None, :, 2:])
    wh = np.clip(rb - lt, 0, None)
    enclosing = wh[..., 0] * wh[..., 1] + 1e-8
    giou = ious - (enclosing - union) / enclosing
    l1 = np.abs(_cxcywh(p_boxes)[:, None, :] - _cxcywh(g_boxes)[None, :, :]).sum(axis=2)
    same = np.array([[pl == gl for gl in gt.labels] for pl in p_labels], dtype=np.float64)
    e = math.e
    prob = (same * e + (1.0 - same)) / (e + PR1_NUM_CLASSES - 1)
    cost = PR1_COST_BBOX * l1 - PR1_COST_CLASS * prob - PR1_COST_GIOU * giou
    from scipy.optimize import linear_sum_assignment  # imported here: scipy is slow to import

    rows, cols = linear_sum_assignment(cost)
    kept = [(r, c) for r, c in zip(rows.tolist(), cols.tolist(), strict=True) if ious[r, c] > PR1_MATCH_IOU]
    m = len(kept)
    if m:
        n_pred, n_gt = len(keep), len(gt.boxes)
        precision, recall = m / n_pred, m / n_gt
        f1 = 2 * (precision * recall) / (precision + recall + 1e-8)
        cls = sum(p_labels[r] == gt.labels[c] for r, c in kept) / m
        mean_iou = sum(float(ious[r, c]) for r, c in kept) / m
        reward += PR1_F1_SCALE * f1 + cls + mean_iou
        if penalty:
            reward -= PR1_PENALTY_SCALE * ((n_pred - m) / n_pred + (n_gt - m) / n_gt)
        reward = min(PR1_MAX, max(0.0, reward))
    return reward / PR1_MAX
