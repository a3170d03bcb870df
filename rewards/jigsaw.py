"""Jigsaw puzzle rewards as Jigsaw-R1 defines them, for any completion in linear time.

Definitions follow Jigsaw-R1 (Wang et al., "Jigsaw-R1: A Study of Rule-based Visual
Reinforcement Learning with Jigsaw Puzzles", arXiv 2505.23590, TMLR 2025) and its public code,
github.com/zifuwanggg/Jigsaw-R1: `utils/reward.py` (answer extraction, `process_jigsaw_string`,
`score_jigsaw_patches`, `score_jigsaw_connections`, `accuracy_reward_helper`, `format_reward`)
and `utils/prompt.py` (how answers are asked for). Re-implemented here without regular
expressions so that the time is linear in the completion's length, and so that the result
equals Jigsaw-R1's on every string (the tests compare with Python's `re` on the same patterns).

The puzzle: an image is cut into an m x n grid (m rows, n columns) whose patches are shuffled.
Positions are numbered 1..m*n row-major. The answer of a *full* question is, for each current
position X, the original position Y of the patch now at X (Jigsaw-R1's "forward" order),
written as m*n integers (Jigsaw-R1 asks for them "arranged in a m x n grid").

Question types and their accuracy reward (Jigsaw-R1's `accuracy_reward`):
- full: fraction of positions right, 0 when the answer does not parse or has the wrong length
  (`jigsaw_partial`); exact match (`jigsaw_exact`) is Jigsaw-R1's logged "correct".
- pair, multiple: a multiple-choice letter, 1 if it is the right one (`parse_choice`).
- single: the original position of one patch, 1 if it is right (`parse_number`).

Jigsaw-R1's reading of an answer, reproduced exactly:
- thinking on: the stripped text of the first `<answer>...</answer>`; with no such tag the
  whole stripped completion (Jigsaw-R1 falls back to it). `require_tag=True` turns the
  fallback off (not Jigsaw-R1; named so in the task options).
- thinking off: the whole stripped completion.
- a grid: "`" "," ";" and newlines become spaces, runs of two or more whitespace characters
  become one space, the text is split on single spaces, and every piece must be ASCII digits
  with a value in 1..m*n, or the whole answer is unparseable.
- a letter: the last A-Z letter of the answer; with none, the answer itself, compared
  case-insensitively (so a lone lowercase "b" is accepted as "B", as in Jigsaw-R1).
- a number: the first run of decimal digits; Jigsaw-R1 compares it with math_verify, which
  reads ASCII digits only, so a run with other decimal digits never matches. With no digit at
  all Jigsaw-R1 hands the whole answer to math_verify; here that scores 0 (docs/tasks.md).

Every function here returns a float in [0, 1] (or a parse result), never raises on any string,
and never evaluates model output.
"""

from __future__ import annotations

from collections.abc import Sequence

QUESTION_TYPES: tuple[str, ...] = ("full", "pair", "multiple", "single")

ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
_GRID_SEPARATORS = ("`", ",", ";", "\n")
_MAX_NUMBER_DIGITS = 18  # a position index longer than this is out of range whatever the grid


# -- reading the answer -----------------------------------------------------------------------
def answer_content(completion: str, think: bool = True, require_tag: bool = False) -> str | None:
    """The text Jigsaw-R1 reads as the answer (None only when `require_tag` and there is no tag).

    The first `<answer>` and the first `</answer>` after it delimit the answer, exactly what
    the lazy pattern `<answer>(.*?)</answer>` (DOTALL) finds.
    """
    if not isinstance(completion, str):
        return None
    if think:
        start = completion.find(ANSWER_OPEN)
        if start >= 0:
            end = completion.find(ANSWER_CLOSE, start + len(ANSWER_OPEN))
            if end >= 0:
                return completion[start + len(ANSWER_OPEN) : end].strip()
        if require_tag:
            return None
    return completion.strip()


def _collapse_whitespace_runs(text: str) -> str:
    """Jigsaw-R1's `re.sub(r"\\s{2,}", " ", text)`: runs of 2+ whitespace chars become one space."""
    out: list[str] = []
    i, size = 0, len(text)
    while i < size:
        if text[i].isspace():
            j = i + 1
            while j < size and text[j].isspace():
                j += 1
            out.append(" " if j - i >= 2 else text[i])
            i = j
        else:
            j = i + 1
            while j < size and not text[j].isspace():
                j += 1
            out.append(text[i:j])
            i = j
    return "".join(out)


def parse_grid(text: str, num_positions: int) -> list[int] | None:
    """Jigsaw-R1's `process_jigsaw_string`: the position indexes an answer lists, or None.

    None when any piece is not ASCII digits or is outside 1..num_positions. The length is not
    checked here: a parsed answer of the wrong length scores 0 in the rewards.
    """
    if not isinstance(text, str):
        return None
    for char in _GRID_SEPARATORS:
        text = text.replace(char, " ")
    pieces = _collapse_whitespace_runs(text).strip().split(" ")
    values: list[int] = []
    for piece in pieces:
        if not piece or not piece.isascii() or not piece.isdigit():
            return None
        digits = piece.lstrip("0")
        if len(digits) > _MAX_NUMBER_DIGITS:
            return None
        value = int(digits or "0")
        if not 1 <= value <= num_positions:
            return None
        values.append(value)
    return values


def parse_permutation(
    completion: str, num_positions: int, think: bool = True, require_tag: bool = False
) -> list[int] | None:
    """The answer of a full question as Jigsaw-R1 reads it from a completion (None if unparseable)."""
    content = answer_content(completion, think, require_tag)
    return None if content is None else parse_grid(content, num_positions)


def _letter_answer(content: str) -> str:
    """Jigsaw-R1's letter extraction: the last A-Z letter, else the reversed answer text."""
    for char in reversed(content):
        if "A" <= char <= "Z":
            return char
    return content[::-1]


def parse_choice(completion: str, think: bool = True, require_tag: bool = False) -> str | None:
    """The option letter (A-Z) a pair / multiple answer names, as Jigsaw-R1 compares it; None if none.

    Jigsaw-R1 compares its extracted text with the letter case-insensitively; the only texts
    that can equal a letter that way are returned here as that (upper-case) letter.
    """
    content = answer_content(completion, think, require_tag)
    if content is None:
        return None
    lowered = _letter_answer(content).lower()
    return lowered.upper() if len(lowered) == 1 and "a" <= lowered <= "z" else None


def _first_decimal_run(content: str) -> str | None:
    """Python's `re.search(r"(\\d+)")` on a str: the first run of Unicode decimal digits."""
    for start, char in enumerate(content):
        if char.isdecimal():
            end = start + 1
            while end < len(content) and content[end].isdecimal():
                end += 1
            return content[start:end]
    return None


def parse_number(completion: str, think: bool = True, require_tag: bool = False) -> int | None:
    """The position a single question's answer names: its first run of digits (None if none usable)."""
    content = answer_content(completion, think, require_tag)
    if content is None:
        return None
    run = _first_decimal_run(content)
    if run is None or not run.isascii():  # math_verify parses ASCII digits only
        return None
    digits = run.lstrip("0")
    if len(digits) > _MAX_NUMBER_DIGITS:
        return None
    return int(digits or "0")


# -- scoring parsed answers -------------------------------------------------------------------
def jigsaw_partial(pred: Sequence[int] | None, gt: Sequence[int]) -> float:
    """Fraction of positions right; 0 if unparsed or of the wrong length (`score_jigsaw_patches`)."""
    if pred is None or len(gt) == 0 or len(pred) != len(gt):
        return 0.0
    return sum(1 for p, g in zip(pred, gt, strict=False) if p == g) / len(gt)


def jigsaw_exact(pred: Sequence[int] | None, gt: Sequence[int]) -> float:
    """1 if every position is right (Jigsaw-R1's `correct = float(pred == gt)`)."""
    return 1.0 if pred is not None and list(pred) == list(gt) else 0.0


def jigsaw_connections(pred: Sequence[int] | None, gt: Sequence[int], m: int, n: int) -> float:
    """Jigsaw-R1's `score_jigsaw_connections` (forward answers): of the 2mn - m - n pairs of
    neighbouring current positions, the fraction whose predicted patches are neighbours in the
    same direction in the ground truth; 0 if unparsed or of the wrong length."""
    if pred is None or len(pred) != len(gt) or len(gt) != m * n:
        return 0.0
    total = 2 * m * n - m - n
    if total <= 0:
        return 0.0
    where = {value: index for index, value in enumerate(gt)}  # value -> its index in the ground truth
    correct = 0
    for i in range(m):
        for j in range(n):
            here = where.get(pred[i * n + j])
            if here is None:
                continue
            if j + 1 < n:
                right = where.get(pred[i * n + j + 1])
                if right is not None and here // n == right // n and right % n - here % n == 1:
                    correct += 1
            if i + 1 < m:
                below = where.get(pred[(i + 1) * n + j])
                if below is not None and here % n == below % n and below // n - here // n == 1:
                    correct += 1
    return correct / total


# -- format -----------------------------------------------------------------------------------
def think_answer_shape(completion: str) -> bool:
    """Jigsaw-R1's think format: `re.search(r"<think>.*?</think>\\s*<answer>.*?</answer>", DOTALL)`
    matches and its match is the whole completion.

    Stricter than a full match: the lazy search ends at the first `</answer>` after the answer
    opens, so anything after it (even another `</answer>`) fails.
    """
    if not isinstance(completion, str) or not completion.startswith(THINK_OPEN):
        return False
    pos = len(THINK_OPEN)
    while True:
        close = completion.find(THINK_CLOSE, pos)
        if close < 0:
            return False
        j = close + len(THINK_CLOSE)
        while j < len(completion) and completion[j].isspace():
            j += 1
        if completion.startswith(ANSWER_OPEN, j):
            end = completion.find(ANSWER_CLOSE, j + len(ANSWER_OPEN))
            return end >= 0 and end + len(ANSWER_CLOSE) == len(completion)
        pos = close + 1


def jigsaw_format(
    completion: str, question_type: str, num_positions: int, think: bool = True, require_tag: bool = False
) -> float:
    """Jigsaw-R1's `format_reward`: 1 if the completion has the shape asked for, else 0.

    Thinking on: the think/answer shape above, and an answer of the question's kind (full: a
    grid that parses with exactly m*n entries; single: digits; pair/multiple: one letter).
    Thinking off: single: the completion is digits; pair/multiple: one upper-case character;
    full: the completion parses as a grid of m*n entries.
    """
    if not isinstance(completion, str):
        return 0.0
    if think and not think_answer_shape(completion):
        return 0.0
    if not think and question_type == "single":
        return 1.0 if completion.isdigit() else 0.0
    if not think and question_type in ("pair", "multiple"):
        return 1.0 if len(completion) == 1 and completion[0].isupper() else 0.0
    content = answer_content(completion, think, require_tag)
    if content is None:
        return 0.0
    if question_type == "full":
        values = parse_grid(content, num_positions)
        return 1.0 if values is not None and len(values) == num_positions else 0.0
    if question_type == "single":
        run = _first_decimal_run(content)
        return 1.0 if (run if run is not None else content).isdigit() else 0.0
    if question_type in ("pair", "multiple"):
        letter = _letter_answer(content)
        return 1.0 if len(letter) == 1 and letter[0].isupper() else 0.0
    return 0.0
