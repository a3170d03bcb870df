"""Grounding: boxes parsed from the answer, scored by IoU against the ground-truth box(es).

`iou_vlm_r1` is VLM-R1's definition to the bit (its inclusive-pixel intersection: an
overlap at most one pixel wide counts as none); `iou_continuous` is plain geometric IoU,
which is also Perception-R1's `compute_iou` (PR1 src/open_r1/utils.py; its reward is IoU²).

Box parsers, by the name a task option uses:
- ``vlm_r1``: integer boxes ``[x1, y1, x2, y2]`` inside ``<answer>`` (VLM-R1's `iou_reward`,
  src/open-r1-multimodal/.../vlm_modules/qwen_module.py); the first one is *the* answer.
- ``qwen2vl_pair``: Qwen2-VL's ``(x1,y1),(x2,y2)`` (non-negative integers) inside
  ``<answer>`` (UniVG-R1's `iou_reward`, AMAP-ML/UniVG-R1 at 44868ea,
  src/open-r1-multimodal/src/open_r1/vlm_modules/qwen_module.py); the first one is the answer.
- ``perception_r1``: Perception-R1's `extract_bbox_answer` and `parse_float_sequence_within`
  (src/open_r1/utils.py, linkangheng/PR1 at 48d5558): `<|endoftext|>` removed, then anywhere in
  the completion the first pattern of ``[a, b, c, d]``, ``(a, b, c, d)``, ``(a, b), (c, d)``
  that occurs at all, signed decimals allowed. A completion without `<|box_start|>` states a
  relative (0-1) box, which PR1 scales into its 0-1000 frame as int(v * 1000)
  (`pr1_untagged` / `pr1_relative_to_norm1000`; the grounding tasks apply it).

Several targets (an expression that names several objects) are scored by
`hungarian_mean_iou`: an optimal one-to-one matching of predicted to target boxes that
maximises total IoU, divided by max(#predicted, #targets), so that missing and extra boxes
both cost. Neither VLM-R1 nor Perception-R1 defines a multi-target *grounding* reward
(Perception-R1's Hungarian matcher is for detection, with class and L1/GIoU costs); this
variant is named ``hungarian_mean`` (the grounding tasks' `multi_iou` reward, and their
`iou` on records with several targets).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import regex

from rewards.text import answer_text, compile_pattern, findall, search

# VLM-R1's box pattern: the first four non-negative integers in brackets inside <answer>.
INT_BOX = compile_pattern(r"\[(\d+),\s*(\d+),\s*(\d+),\s*(\d+)]")

# UniVG-R1's box pattern: Qwen2-VL's "(x1,y1),(x2,y2)", spaces allowed after the commas only.
PAIR_BOX = compile_pattern(r"\((\d+),\s*(\d+)\),\s*\((\d+),\s*(\d+)\)")

# Perception-R1's three box patterns, tried in this order over the whole completion.
_PR1_NUM = r"(-?\d+(?:\.\d+)?)"
PR1_BOX_PATTERNS = (
    compile_pattern(rf"\[\s*{_PR1_NUM},\s*{_PR1_NUM},\s*{_PR1_NUM},\s*{_PR1_NUM}\s*\]"),
    compile_pattern(rf"\(\s*{_PR1_NUM},\s*{_PR1_NUM},\s*{_PR1_NUM},\s*{_PR1_NUM}\s*\)"),
    compile_pattern(rf"\(\s*{_PR1_NUM},\s*{_PR1_NUM}\),\s*\(\s*{_PR1_NUM},\s*{_PR1_NUM}\)"),
)

# More boxes than this in one answer is not an answer (and would make matching slow).
MAX_BOXES = 64

Box = Sequence[float]


def _integers(groups: Sequence[str]) -> list[int] | None:
    """The box's integers; None where one has more digits than int() reads or is beyond any
    float (VLM-R1's int() or its frame conversion raises there, and its reward is 0)."""
    try:
        values = [int(g) for g in groups]
        for value in values:
            float(value)
    except (ValueError, OverflowError):
        return None
    return values


def parse_answer_box(completion: str) -> list[int] | None:
    """First `[x1, y1, x2, y2]` (integers) inside <answer>; None if absent or absurd."""
    content = answer_text(completion)
    if content is None:
        return None
    match = search(INT_BOX, content)
    return None if match is None else _integers(match.groups())


# VLM-R1's evaluation (src/eval/test_rec_r1.py, extract_bbox_answer) asks for the box inside braces
# and, its first `.*` greedy, takes the last one a `}` follows, where its training reward takes the
# first box, braces or not
EVAL_BOX = compile_pattern(r"\{.*\[(\d+),\s*(\d+),\s*(\d+),\s*(\d+)]\s*.*\}", regex.DOTALL)


def parse_eval_box(completion: str) -> list[int] | None:
    """The box VLM-R1's REC evaluation reads in the first <answer> (None: it scores [0, 0, 0, 0])."""
    content = answer_text(completion)
    match = None if content is None else search(EVAL_BOX, content)
    return None if match is None else _integers(match.groups())


def parse_pair_box(text: str) -> list[int] | None:
    """First Qwen2-VL `(x1,y1),(x2,y2)` anywhere in `text`; None if absent or absurd."""
    match = search(PAIR_BOX, text)
    return None if match is None else _integers(match.groups())


def parse_answer_pair_box(completion: str) -> list[int] | None:
    """First Qwen2-VL `(x1,y1),(x2,y2)` inside <answer> (UniVG-R1's iou_reward); None if absent or absurd."""
    content = answer_text(completion)
    return None if content is None else parse_pair_box(content)


# MIG-Bench's extract_bbox (AMAP-ML/UniVG-R1 @44868ea eval/MIG_bench/utils.py): the first of
# these patterns with a match anywhere in the response decides, and its first match is the box.
MIG_BENCH_BOX_PATTERNS = tuple(
    compile_pattern(p)
    for p in (
        r"\((\d+),\s*(\d+)\),\s*\((\d+),\s*(\d+)\)",
        r"\[(\d+\.\d+),\s*(\d+\.\d+),\s*(\d+\.\d+),\s*(\d+\.\d+)\]",
        r"\((\d+\.\d+),(\d+\.\d+)\),\((\d+\.\d+),(\d+\.\d+)\)",
        r"\((\d+\.\d+),\s*(\d+\.\d+),\s*(\d+\.\d+),\s*(\d+\.\d+)\)",
        r"\[(\d+),\s*(\d+),\s*(\d+),\s*(\d+)\]",
        r"<box>(\d+)\s+(\d+)\s+(\d+)\s+(\d+)</box>",
    )
)


def parse_mig_bench_box(response: str) -> list[int] | None:
    """The box MIG-Bench's evaluation reads: tags or none, reasoning included. A decimal match
    is no box (its int() raises and it scores [0, 0, 0, 0], which overlaps nothing); so is a
    number past the floats (its IoU would raise there)."""
    for pattern in MIG_BENCH_BOX_PATTERNS:
        match = search(pattern, response)
        if match is not None:
            return _integers(match.groups())
    return None


def parse_answer_boxes(completion: str) -> list[list[int]] | None:
    """Every VLM-R1 integer box inside <answer>, in order; None without an answer or with
    more than MAX_BOXES boxes. A JSON list of {"bbox_2d": [...]} objects, a list of lists
    and boxes in prose all read the same way."""
    content = answer_text(completion)
    if content is None:
        return None
    boxes = []
    for groups in findall(INT_BOX, content):
        box = _integers(groups)
        if box is None or len(boxes) >= MAX_BOXES:
            return None
        boxes.append(box)
    return boxes


PR1_END_OF_TEXT = "<|endoftext|>"  # removed before parsing (pr1_grounding_reward)
PR1_BOX_START = "<|box_start|>"


def pr1_untagged(completion: str) -> bool:
    """PR1's `is_qwen2vl` test: without `<|box_start|>` the box is relative (0-1); asked, as
    there, of the completion with `<|endoftext|>` removed."""
    return PR1_BOX_START not in completion.replace(PR1_END_OF_TEXT, "")


def pr1_relative_to_norm1000(box: Sequence[float]) -> list[int] | None:
    """PR1's `[int(x * 1000) for x in bbox]`; None where a value leaves the floats."""
    scaled = [v * 1000 for v in box]
    return [int(v) for v in scaled] if all(math.isfinite(v) for v in scaled) else None


def parse_box_perception_r1(completion: str) -> list[float] | None:
    """The box Perception-R1 scores: the first match of its first pattern that occurs
    anywhere in the completion, `<|endoftext|>` removed (None if none, or if a number is not
    finite), as stated: `pr1_relative_to_norm1000` scales an untagged one."""
    text = completion.replace(PR1_END_OF_TEXT, "")
    for pattern in PR1_BOX_PATTERNS:
        match = search(pattern, text)
        if match is not None:
            box = [float(v) for v in match.groups()]
            return box if all(math.isfinite(v) for v in box) else None
    return None


def parse_boxes_perception_r1(completion: str) -> list[list[float]] | None:
    """Every box of the first Perception-R1 pattern that occurs in the completion, in order
    (its first is the box Perception-R1 scores); None if a number is not finite or there are
    more than MAX_BOXES."""
    text = completion.replace(PR1_END_OF_TEXT, "")
    for pattern in PR1_BOX_PATTERNS:
        found = findall(pattern, text)
        if not found:
            continue
        if len(found) > MAX_BOXES:
            return None
        boxes = [[float(v) for v in groups] for groups in found]
        if not all(math.isfinite(v) for box in boxes for v in box):
            return None
        return boxes
    return []


# By parser name: the one box a single-target answer states, and every box an answer states.
FIRST_BOX_PARSERS: dict[str, Callable[[str], list | None]] = {
    "vlm_r1": parse_answer_box,
    "perception_r1": parse_box_perception_r1,
}
BOX_PARSERS: dict[str, Callable[[str], list | None]] = {
    "vlm_r1": parse_answer_boxes,
    "perception_r1": parse_boxes_perception_r1,
}


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
    try:
        return float(inter) / union
    except OverflowError:  # areas past the floats (201-digit coordinates): VLM-R1's try scores 0 too
        return 0.0


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


def hungarian_mean_iou(
    preds: Sequence, targets: Sequence, iou: Callable[[object, object], float]
) -> tuple[float, list[tuple[int, int, float]]]:
    """Multi-target score ``hungarian_mean``: the one-to-one matching of predictions to
    targets with the largest total IoU (Hungarian algorithm), summed and divided by
    max(len(preds), len(targets)). Both empty -> 1, one empty -> 0. Returns the score and
    the matched (pred index, target index, IoU) pairs. `iou` scores one pair (boxes or shapes)."""
    if not preds and not targets:
        return 1.0, []
    if not preds or not targets:
        return 0.0, []
    matrix = np.array([[iou(p, t) for t in targets] for p in preds], dtype=float)
    from scipy.optimize import linear_sum_assignment  # imported here: scipy is slow to import

    rows, cols = linear_sum_assignment(matrix, maximize=True)
    pairs = [(int(r), int(c), float(matrix[r, c])) for r, c in zip(rows, cols, strict=False)]
    return sum(v for _, _, v in pairs) / max(len(preds), len(targets)), pairs
