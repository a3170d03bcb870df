"""Counting: a count or a set of points parsed from the answer, scored against the true count.

Two reward definitions:

- `count_exact`: 1.0 if the stated count equals the true count, else 0.0. This is the
  accuracy of Perception-R1's counting evaluation (PR1 eval/evaluate_counting.py: the
  number of boxes equals `ground_truth`) and of CountBench.
- `count_points`: Perception-R1's training reward (PR1 src/open_r1/utils.py `num_scale`,
  `match_and_compute_distances`; src/open_r1/rewards.py `pr1_counting_reward`; read in the
  public copy philipmit/PR1):

      min(n_pred, n_gt) / max(n_pred, n_gt) * (1 - mean_dist / (1000 * sqrt(2)))

  where mean_dist is the mean Euclidean distance over the pairs of a minimum-cost
  (Hungarian) assignment between predicted and true points. Perception-R1 trains
  Qwen2-VL, whose coordinates are normalized to 0..1000 per axis, so 1000*sqrt(2) is the
  diagonal of that frame: the distance term is "distance as a fraction of the image
  diagonal in the 0-1000 frame". Callers pass points in that frame (tasks/counting.py
  converts through the sample's Frame) or another frame with its own diagonal as `scale`.

A center at infinity (a box `(1e999, 298),(300, 400)`, which PR1 counts) scores as there: an
infinite distance is a pair PR1's linear_sum_assignment never uses, so with more predicted
points than true ones the point is left unmatched, and where it must be matched the reward
is 0 ("cost matrix is infeasible", caught). A nan among PR1's distances scores 0: a nan
center, and, with more than 25 points on either side (torch.cdist's matrix-product path), a
+inf coordinate or one past float32's products (`_pr1_matrix_product_nan` says which). Huge
finite centers come out alike: unmatched where they can be, else a distance that clips the
reward to 0.

Where this differs from Perception-R1's code, on inputs its data never holds:
both point sets empty scores 1.0 (PR1's code raises inside torch.cdist and scores 0; its
PixMo-Count data has counts >= 1); the value is clipped to [0, 1] (PR1's goes negative for
points outside the frame); distances are float64 (PR1: float32, differences ~1e-7).

Parsing is bounded: patterns run under the time limit of rewards.text, at most
MAX_POINTS points are read (more is "no parse"), counts above MAX_COUNT are "no parse",
box text over MAX_BOX_CHARS is skipped, and nothing is ever run: PR1's box text is read by
Python's literal parser (rewards.text.python_literal), not its eval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import regex

from rewards.text import Pattern, answer_text, compile_pattern, findall, fullmatch, python_literal, search

MAX_POINTS = 2000  # more points than this in one answer is not a count, it is noise
MAX_COUNT = 10**9  # larger stated counts are treated as unparseable
NORM1000_DIAGONAL = 1000 * math.sqrt(2)
CDIST_MM_POINTS = 25  # torch.cdist computes p=2 distances by matrix products above this many points

Point = Sequence[float]

_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
# A point is two numbers in brackets: [x, y] (Qwen2.5-VL writes {"point_2d": [x, y], ...}).
POINT = compile_pattern(rf"\[\s*({_NUM})\s*,\s*({_NUM})\s*\]")
EMPTY_LIST = compile_pattern(r"\[\s*\]")
INTEGER = compile_pattern(r"\+?(\d{1,3}(?:,\d{3})+|\d+)")
# An integer standing alone in prose: not part of a word, a decimal, a negative or a list "1,2".
INTEGER_TOKEN = compile_pattern(r"(?<![\w.\-])(?<!\d,)(?:\d{1,3}(?:,\d{3})+|\d+)(?!\w|[.,]\d)")

# Number words understood as counts: zero..nineteen, the tens, tens-units compounds
# ("twenty-one", "twenty one"), and "dozen" / "a dozen" / "one dozen" (12). Nothing else:
# no "none", "no", "few", "hundred", ordinals or fractions. Case does not matter.
UNITS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
TENS = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
NUMBER_WORDS: dict[str, int] = {w: i for i, w in enumerate(UNITS)}
NUMBER_WORDS.update({w: 20 + 10 * i for i, w in enumerate(TENS)})
for _i, _tens in enumerate(TENS):
    for _unit in range(1, 10):
        NUMBER_WORDS[f"{_tens} {UNITS[_unit]}"] = 20 + 10 * _i + _unit
for _phrase in ("dozen", "a dozen", "one dozen"):
    NUMBER_WORDS[_phrase] = 12
NUMBER_PHRASE = compile_pattern(
    r"(?<![a-z])(?:(?:a|one)\s+dozen|dozen|(?:"
    + "|".join(TENS)
    + r")(?:[\s-]+(?:"
    + "|".join(UNITS[1:10])
    + r"))?|"
    + "|".join(sorted(UNITS, key=len, reverse=True))
    + r")(?![a-z])",
    regex.IGNORECASE,
)


def _words_value(text: str) -> int | None:
    """The count a whole phrase of number words names ("Twenty-one" -> 21), else None."""
    key = " ".join(text.lower().replace("-", " ").split())
    return NUMBER_WORDS.get(key)


def _integer_value(digits: str) -> int | None:
    digits = digits.replace(",", "")
    if len(digits) > len(str(MAX_COUNT)):
        return None
    value = int(digits)
    return value if value <= MAX_COUNT else None


def parse_count(text: str | None, mode: str = "strict", number_words: bool = True) -> int | None:
    """The count a piece of answer text states, or None.

    strict: the whole text (stripped, one trailing period allowed) is one non-negative
    integer ("7", "+7", "1,234") or, with `number_words`, one number-word phrase
    ("seven", "twenty-one", "a dozen"). "7.0", "7 apples" and "-1" are not counts.
    last_number: the last integer or number-word phrase standing alone anywhere in the
    text ("There are 7 apples." -> 7, "I see seven, no, eight" -> 8).
    """
    if text is None:
        return None
    if mode == "strict":
        body = text.strip()
        if body.endswith(".") and not body.endswith(".."):
            body = body[:-1].rstrip()
        match = fullmatch(INTEGER, body)
        if match:
            return _integer_value(match.group(1))
        if number_words and len(body) <= 40:
            return _words_value(body)
        return None
    if mode == "last_number":
        candidates = [(m.end(), _integer_value(m.group(0))) for m in _finditer(INTEGER_TOKEN, text)]
        if number_words:
            candidates += [(m.end(), _words_value(m.group(0))) for m in _finditer(NUMBER_PHRASE, text)]
        candidates = [c for c in candidates if c[1] is not None]
        return max(candidates)[1] if candidates else None
    raise ValueError(f"unknown count parse mode {mode!r}; expected 'strict' or 'last_number'")


def _finditer(pattern: Pattern, text: str, limit: int = 100_000) -> list[regex.Match]:
    """Matches of `pattern` in `text` under the time limit; what was found before it ran out."""
    found: list[regex.Match] = []
    try:
        for match in pattern.finditer(text, timeout=0.25):
            found.append(match)
            if len(found) >= limit:
                break
    except TimeoutError:
        pass
    return found


def parse_points(text: str | None) -> list[tuple[float, float]] | None:
    """Every `[x, y]` pair in the text, in order; None if there is none, if any coordinate is
    not finite, or if there are more than MAX_POINTS (an answer like that is not a count)."""
    if text is None:
        return None
    pairs = findall(POINT, text)
    if not pairs or len(pairs) > MAX_POINTS:
        return None
    points = []
    for x, y in pairs:
        fx, fy = float(x), float(y)
        if not (math.isfinite(fx) and math.isfinite(fy)):
            return None
        points.append((fx, fy))
    return points


def parse_answer(completion: str, mode: str = "strict", number_words: bool = True) -> tuple[int | None, list | None]:
    """(count, points) an R1-style completion states inside <answer>: the points if the answer
    lists `[x, y]` pairs (count = their number; an empty list `[]` is zero points), else a
    stated count and no points."""
    content = answer_text(completion)
    if content is None:
        return None, None
    if fullmatch(EMPTY_LIST, content):
        return 0, []
    points = parse_points(content)
    if points is not None:
        return len(points), points
    return parse_count(content, mode, number_words), None


# -- Perception-R1's own output format (Qwen2-VL special tokens) ------------------------------
# pr1_counting_format_reward: re.match of this pattern (anchored at the start only).
PR1_FORMAT = compile_pattern(
    r"\A<\|object_ref_start\|>[^<]*<\|object_ref_end\|>(?:<\|box_start\|>[^<]*<\|box_end\|>)+<\|im_end\|>"
)
PR1_BOX = compile_pattern(r"<\|box_start\|>(.*?)<\|box_end\|>")
PR1_STRIP = "<|endoftext|>"  # removed before the boxes are read (pr1_counting_reward)
MAX_BOX_CHARS = 1024  # a box is about 20 characters; longer box text is skipped unread


def pr1_format(completion: str) -> float:
    """Perception-R1's counting format: the completion opens with `<|object_ref_start|>label
    <|object_ref_end|>`, then one or more `<|box_start|>...<|box_end|>`, then `<|im_end|>`
    (re.match on the raw completion: anchored at the start only, <|endoftext|> kept)."""
    return 1.0 if search(PR1_FORMAT, completion) else 0.0


def pr1_box_center(text: str) -> tuple[float, float] | None:
    """The center PR1's extract_boxes takes from one box's text: the text as Python reads it,
    unpacked as `(x1, y1), (x2, y2)`, then `((x1 + x2) / 2, (y1 + y2) / 2)` in Python's
    arithmetic (True is 1, 1e999 is inf, an integer too large for a float raises); None where
    that raises, as PR1's `except` skips the box. A complex center, which PR1 counts and then
    cannot turn into a float tensor (its reward raises: 0), is (nan, nan), which scores 0 too."""
    if len(text) > MAX_BOX_CHARS:
        return None
    try:
        (x1, y1), (x2, y2) = python_literal(text)
        center = ((x1 + x2) / 2, (y1 + y2) / 2)
    except (ValueError, TypeError, OverflowError):
        return None
    if any(isinstance(v, complex) for v in center):
        return (math.nan, math.nan)
    return center


def pr1_box_centers(completion: str) -> list[tuple[float, float]] | None:
    """Centers of the boxes between <|box_start|> and <|box_end|>, as PR1's extract_boxes reads
    them (a box it skips is skipped; an infinite center is kept and counted); None if none."""
    centers = []
    for body in findall(PR1_BOX, completion.replace(PR1_STRIP, "")):
        center = pr1_box_center(body)
        if center is None:
            continue
        centers.append(center)
        if len(centers) > MAX_POINTS:
            return None
    return centers or None


# -- rewards ------------------------------------------------------------------------------------
def count_exact(predicted: int | None, truth: int) -> float:
    return 1.0 if predicted is not None and predicted == truth else 0.0


def count_ratio(n_pred: int, n_gt: int) -> float:
    """min/max of the two counts; 1.0 when both are zero."""
    if n_pred == n_gt:
        return 1.0
    return min(n_pred, n_gt) / max(n_pred, n_gt)


def _pr1_matrix_product_nan(p: np.ndarray, g: np.ndarray) -> bool:
    """Does torch.cdist's matrix-product path, which PR1's float32 distances take with more than
    CDIST_MM_POINTS points on either side, give a nan? It sums -2 p.g + |p|^2 + |g|^2, term by
    term here: +inf (or a product past float32's range) meets the infinite |p|^2 as inf - inf,
    and an infinite coordinate times a true 0 is nan."""
    p32, g32 = p.astype(np.float32), g.astype(np.float32)
    terms = (
        (-2 * p32[:, None, 0]) * g32[None, :, 0],
        (-2 * p32[:, None, 1]) * g32[None, :, 1],
        (p32**2).sum(axis=-1)[:, None],
        (g32**2).sum(axis=-1)[None, :],
    )
    return bool(np.isnan(sum(terms)).any())


def count_points(pred: Sequence[Point] | None, truth: Sequence[Point], scale: float = NORM1000_DIAGONAL) -> float:
    """Perception-R1's partial counting reward (see the module docstring), in [0, 1]."""
    pred = list(pred or [])
    truth = list(truth)
    if not pred and not truth:
        return 1.0
    if not pred or not truth or len(pred) > MAX_POINTS or not scale > 0:
        return 0.0
    p = np.asarray(pred, dtype=np.float64).reshape(-1, 2)
    g = np.asarray(truth, dtype=np.float64).reshape(-1, 2)
    if not np.isfinite(g).all():
        return 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        if max(len(p), len(g)) > CDIST_MM_POINTS and _pr1_matrix_product_nan(p, g):
            return 0.0
        cost = np.sqrt(((p[:, None, :] - g[None, :, :]) ** 2).sum(axis=-1))
    from scipy.optimize import linear_sum_assignment  # imported here: scipy is slow to import

    try:  # an infinite distance is a pair never matched; a nan, or no matching without one, raises
        rows, cols = linear_sum_assignment(cost)
    except ValueError:
        return 0.0  # PR1's `except` in pr1_counting_reward
    mean_dist = float(cost[rows, cols].mean())
    value = count_ratio(len(pred), len(truth)) * (1.0 - mean_dist / scale)
    return min(1.0, max(0.0, value))
