"""Grounding: a box parsed from the answer, scored by IoU against the ground-truth box.

`iou_vlm_r1` is VLM-R1's definition to the bit (its inclusive-pixel intersection: an
overlap at most one pixel wide counts as none); `iou_continuous` is plain geometric IoU.
"""

from __future__ import annotations

from collections.abc import Sequence

from rewards.text import answer_text, compile_pattern, search

# VLM-R1's box pattern: the first four non-negative integers in brackets inside <answer>.
INT_BOX = compile_pattern(r"\[(\d+),\s*(\d+),\s*(\d+),\s*(\d+)]")

Box = Sequence[float]


def parse_answer_box(completion: str) -> list[int] | None:
    """First `[x1, y1, x2, y2]` (integers) inside <answer>; None if absent or absurd."""
    content = answer_text(completion)
    if content is None:
        return None
    match = search(INT_BOX, content)
    if match is None:
        return None
    try:
        return [int(g) for g in match.groups()]
    except ValueError:  # more digits than Python will convert: not a coordinate
        return None


def iou_vlm_r1(box1: Box, box2: Box) -> float:
    inter_x1 = max(box1[0], box2[0])
    inter_y1 = max(box1[1], box2[1])
    inter_x2 = min(box1[2] - 1, box2[2] - 1)
    inter_y2 = min(box1[3] - 1, box2[3] - 1)
    if inter_x1 < inter_x2 and inter_y1 < inter_y2:
        inter = (inter_x2 - inter_x1 + 1) * (inter_y2 - inter_y1 + 1)
    else:
        inter = 0
    union = (box1[2] - box1[0]) * (box1[3] - box1[1]) + (box2[2] - box2[0]) * (box2[3] - box2[1]) - inter
    if union == 0:  # VLM-R1 raises ZeroDivisionError here and scores 0
        return 0.0
    return float(inter) / union


def iou_continuous(box1: Box, box2: Box) -> float:
    width = min(box1[2], box2[2]) - max(box1[0], box2[0])
    height = min(box1[3], box2[3]) - max(box1[1], box2[1])
    inter = max(0.0, width) * max(0.0, height)
    area1 = max(0.0, box1[2] - box1[0]) * max(0.0, box1[3] - box1[1])
    area2 = max(0.0, box2[2] - box2[0]) * max(0.0, box2[3] - box2[1])
    union = area1 + area2 - inter
    return inter / union if union > 0 else 0.0


IOU_CONVENTIONS = {"vlm_r1": iou_vlm_r1, "continuous": iou_continuous}


def box_center_inside(pred: Box, gt: Box) -> bool:
    cx, cy = (pred[0] + pred[2]) / 2, (pred[1] + pred[3]) / 2
    return gt[0] <= cx <= gt[2] and gt[1] <= cy <= gt[3]
