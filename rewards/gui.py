"""GUI agent rewards (UI-R1, GUI-R1): action parsing, action type, click, input text, format.

The definitions follow the public code, cited per function:

- UI-R1 (github.com/lll6gg/UI-R1, src/.../open_r1/grpo_json_action_coord*.py):
  answer `[{'action': 'click', 'coordinate': [x, y]}]`; rewards `accuracy_action` (action
  type equal), `accuracy_coord` (action equal and, for a click, the point inside the box,
  edges included, after truncating the point to integer original pixels), `format`
  (`<think>.*?</think>\\s*<answer>.*?</answer>` full match; UI-R1-E: `<answer>.*?</answer>`).
- GUI-R1 (github.com/ritzz-ai/GUI-R1, verl/utils/reward_score/r1gui.py): answer
  `[{'action': 'click', 'point': [x, y], 'input_text': 'no input text'}]`; `accuracy`
  (action equal, case-insensitive; click: strictly inside a box, or closer than 140 px to a
  point; type/select/scroll: input text F1 >= 0.5; any other action: the type suffices),
  `format` (think/answer full match and every action a dict with `action` (str), `point`
  (two ints), `input_text` (str), a text for type/select/open_app, a direction for scroll);
  total 0.8 * accuracy + 0.2 * format.

Model output is untrusted. Nothing here evaluates it. To extract an action the answer is read
as JSON, then by a small literal parser (Python-literal style: 'single quotes', True/None,
tuples) with limits on size, depth and node count; where that fails, the public code's own
regexes extract the fields (bounded time). GUI-R1's format, which runs `eval` on the answer,
reads it instead as Python reads a literal (`rewards.text.python_literal`). Every function
returns a number for any input and never raises.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

import regex

from rewards.format import THINK_ANSWER
from rewards.text import answer_text, compile_pattern, fullmatch, python_literal, search

Style = Literal["gui_r1", "ui_r1"]
Parser = Literal["structured", "public_regex"]

NO_INPUT_TEXT = "no input text"  # GUI-R1's default input text, and its extractor's value when there is none
SCROLL_DIRECTIONS = ("left", "right", "up", "down")
MAX_COMPLETION_CHARS = 65536  # longer completions parse to nothing (the scorer scores them 0 anyway)
MAX_ANSWER_CHARS = 8192  # an action list is a few hundred characters; longer ones are not read as a literal
MAX_DEPTH = 8
MAX_NODES = 512


# -- a literal parser that runs nothing --------------------------------------------------------
class LiteralError(ValueError):
    """The text is not a literal this parser accepts (or exceeds its limits)."""


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "v": "\v", "a": "\a", "0": "\0",
            "\\": "\\", "'": "'", '"': '"', "/": "/"}  # fmt: skip
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}
_NAMES = {"True": True, "False": False, "None": None, "true": True, "false": False, "null": None}
# Python and JSON number literals are ASCII digits only.
_NUMBER = compile_pattern(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_NAME = compile_pattern(r"[A-Za-z_]\w*")


class _LiteralParser:
    """Recursive descent over JSON and Python literals: dict, list, tuple, str, int, float,
    True/False/None (and true/false/null). No names, calls, operators or f-strings."""

    def __init__(self, text: str, max_depth: int, max_nodes: int):
        self.text = text
        self.pos = 0
        self.max_depth = max_depth
        self.nodes_left = max_nodes

    def parse(self) -> Any:
        value = self._value(0)
        self._skip_ws()
        if self.pos != len(self.text):
            raise LiteralError(f"unexpected text at {self.pos}")
        return value

    def _skip_ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t\r\n":
            self.pos += 1

    def _peek(self) -> str:
        self._skip_ws()
        if self.pos >= len(self.text):
            raise LiteralError("unexpected end")
        return self.text[self.pos]

    def _value(self, depth: int) -> Any:
        if depth > self.max_depth:
            raise LiteralError("too deep")
        self.nodes_left -= 1
        if self.nodes_left < 0:
            raise LiteralError("too many values")
        ch = self._peek()
        if ch in "[(":
            return self._sequence(depth)
        if ch == "{":
            return self._dict(depth)
        if ch in "'\"":
            return self._string()
        number = _NUMBER.match(self.text, self.pos)
        if number:
            self.pos = number.end()
            token = number.group()
            try:
                return float(token) if any(c in token for c in ".eE") else int(token)
            except ValueError as err:  # more digits than int() converts
                raise LiteralError(str(err)) from err
        name = _NAME.match(self.text, self.pos)
        if name and name.group() in _NAMES:
            self.pos = name.end()
            return _NAMES[name.group()]
        raise LiteralError(f"unexpected {ch!r} at {self.pos}")

    def _items(self, close: str, depth: int, item) -> tuple[list, bool]:
        """Comma-separated items up to `close`; returns them and whether a comma was seen."""
        self.pos += 1
        items, comma = [], False
        while True:
            if self._peek() == close:
                self.pos += 1
                return items, comma
            items.append(item(depth + 1))
            ch = self._peek()
            self.pos += 1
            if ch == close:
                return items, comma
            if ch != ",":
                raise LiteralError(f"expected ',' or {close!r} at {self.pos - 1}")
            comma = True

    def _sequence(self, depth: int) -> list | tuple | Any:
        if self.text[self.pos] == "[":
            return self._items("]", depth, self._value)[0]
        items, comma = self._items(")", depth, self._value)
        if len(items) == 1 and not comma:  # (x) is x, as in Python
            return items[0]
        return tuple(items)

    def _pair(self, depth: int) -> tuple[Any, Any]:
        key = self._value(depth)
        if not isinstance(key, (str, int, float, bool)) and key is not None:
            raise LiteralError("unhashable key")
        if self._peek() != ":":
            raise LiteralError(f"expected ':' at {self.pos}")
        self.pos += 1
        return key, self._value(depth)

    def _dict(self, depth: int) -> dict:
        return dict(self._items("}", depth, self._pair)[0])

    def _string(self) -> str:
        quote = self.text[self.pos]
        self.pos += 1
        out: list[str] = []
        text = self.text
        while True:
            end = self.pos
            while end < len(text) and text[end] not in (quote, "\\", "\n"):
                end += 1
            out.append(text[self.pos : end])
            if end >= len(text) or text[end] == "\n":
                raise LiteralError("unterminated string")
            self.pos = end + 1
            if text[end] == quote:
                return "".join(out)
            out.append(self._escape())

    def _escape(self) -> str:
        if self.pos >= len(self.text):
            raise LiteralError("unterminated escape")
        ch = self.text[self.pos]
        self.pos += 1
        if ch in _ESCAPES:
            return _ESCAPES[ch]
        if ch in _HEX_ESCAPES:
            digits = self.text[self.pos : self.pos + _HEX_ESCAPES[ch]]
            self.pos += len(digits)
            try:
                if len(digits) != _HEX_ESCAPES[ch]:
                    raise ValueError
                return chr(int(digits, 16))
            except ValueError as err:
                raise LiteralError("bad escape") from err
        return "\\" + ch  # Python keeps an unknown escape as written


def parse_literal(text: str, max_chars: int = MAX_ANSWER_CHARS, max_depth: int = MAX_DEPTH,
                  max_nodes: int = MAX_NODES) -> Any:  # fmt: skip
    """JSON first, then the Python-literal style models write (`[{'action': 'click'}]`).
    Raises LiteralError for anything else, or for text over the limits. Runs no code."""
    if not isinstance(text, str) or len(text) > max_chars:
        raise LiteralError("not a string or too long")
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return _LiteralParser(text, max_depth, max_nodes).parse()
    _check_limits(value, max_depth, max_nodes)
    return value


def _check_limits(value: Any, max_depth: int, max_nodes: int) -> None:
    """The literal parser's depth and node limits, applied to what JSON read."""
    stack, nodes = [(value, 0)], 0
    while stack:
        item, depth = stack.pop()
        nodes += 1
        if depth > max_depth or nodes > max_nodes:
            raise LiteralError("too deep or too many values")
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        stack.extend((child, depth + 1) for child in children)


# -- extracting the predicted action -----------------------------------------------------------
@dataclass(frozen=True)
class GuiAction:
    """The first action of an answer: its type as written, its point (the model's frame) and text."""

    action: str | None
    point: tuple[float, float] | None
    input_text: str | None


# The public extractors (UI-R1 and GUI-R1 share the first three; UI-R1 falls back to an
# unquoted action; GUI-R1 and UI-R1-E take the point inside braces, UI-R1 the first pair).
ACTION_QUOTED = compile_pattern(r"'action':\s*'(\w+)'")
ACTION_BARE = compile_pattern(r"'action':\s*(\w+)")
INPUT_TEXT = compile_pattern(r"'input_text':\s*'(.*?)'")
POINT_IN_BRACES = compile_pattern(r"\{.*\[(\d+),\s*(\d+)]\s*.*\}")
POINT_FIRST = compile_pattern(r"\[(\d+),\s*(\d+)]")


def _point(value: Any) -> tuple[float, float] | None:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        return None
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        return None
    try:
        x, y = float(value[0]), float(value[1])
    except OverflowError:  # an integer too large for a float is no coordinate
        return None
    return (x, y) if math.isfinite(x) and math.isfinite(y) else None


def first_action_dict(value: Any) -> dict | None:
    """The action dict of a parsed answer: the answer itself, or the first item of a list."""
    if isinstance(value, dict):
        return value
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], dict):
        return value[0]
    return None


def structured_action(content: str) -> GuiAction | None:
    """The first action of an answer read as a literal; None if it is not one. Its point is
    GUI-R1's `point`, else UI-R1's `coordinate`."""
    try:
        first = first_action_dict(parse_literal(content))
    except LiteralError:
        return None
    if first is None:
        return None
    action = first.get("action")
    point = first.get("point", first.get("coordinate"))
    text = first.get("input_text")
    return GuiAction(
        action.strip() if isinstance(action, str) else None,
        _point(point),
        text if isinstance(text, str) else None,
    )


def regex_action(content: str, style: Style, thinking: bool = True) -> GuiAction:
    """The fields as the public extractors find them: single-quoted action and input text,
    non-negative integer points (GUI-R1 / UI-R1-E: the last pair inside braces; UI-R1: the
    first pair). Missing fields are None; a point the public code cannot use is (inf, inf),
    which clicks nothing."""
    match = search(ACTION_QUOTED, content)
    if match is None and style == "ui_r1":
        match = search(ACTION_BARE, content)
    action = match.group(1) if match else None
    text_match = search(INPUT_TEXT, content)
    point_pattern = POINT_FIRST if style == "ui_r1" and thinking else POINT_IN_BRACES
    point_match = search(point_pattern, content)
    point = None
    if point_match:
        try:
            point = (float(int(point_match.group(1))), float(int(point_match.group(2))))
        except ValueError:  # more digits than int() reads: GUI-R1's extractor falls back to [0, 0]; UI-R1 scores 0
            point = (0.0, 0.0) if style == "gui_r1" else (math.inf, math.inf)
        except OverflowError:  # no float holds it: the public comparisons fail or raise, never a hit
            point = (math.inf, math.inf)
    return GuiAction(action, point, text_match.group(1) if text_match else None)


def ui_r1_screenspot_point(completion: str) -> list[int] | None:
    """The point UI-R1's ScreenSpot evaluation reads (lll6gg/UI-R1 2fe9bf0,
    evaluation/test_screenspot.py `extract_coord`): the last [x, y] before a '}' on one line of
    the first answer, as written; [0, 0, 0, 0] where the answer has none. None where the script
    writes no result: without an <answer> its fallback pattern (unbalanced parentheses) raises,
    and so does int() of a number over Python's 4,300 digits; the script catches both and
    moves on."""
    content = answer_text(completion)
    if content is None:
        return None
    match = search(POINT_IN_BRACES, content)
    if match is None:
        return [0, 0, 0, 0]
    try:
        return [int(match.group(1)), int(match.group(2))]
    except ValueError:
        return None


@lru_cache(maxsize=256)
def extract_action(completion: str, style: Style = "gui_r1", thinking: bool = True,
                   parser: Parser = "structured") -> GuiAction | None:  # fmt: skip
    """The action a completion's <answer> states, or None without an answer.

    `structured` reads the answer as a literal and falls back to the public regexes when it is
    not one (junk around the list, or over MAX_ANSWER_CHARS); `public_regex` uses only the
    public regexes, for numbers identical to the public code's on every completion (of at most
    MAX_COMPLETION_CHARS, which the scorer scores 0 anyway)."""
    if not isinstance(completion, str) or len(completion) > MAX_COMPLETION_CHARS:
        return None
    content = answer_text(completion)
    if content is None:
        return None
    if parser == "structured":
        parsed = structured_action(content)
        if parsed is not None:
            return parsed
    return regex_action(content, style, thinking)


# -- components --------------------------------------------------------------------------------
def action_type(pred: str | None, gt: str, case_sensitive: bool = True) -> float:
    """1 if the predicted action type is the ground truth's (UI-R1: exact; GUI-R1: lower-cased)."""
    if not isinstance(pred, str):
        return 0.0
    if case_sensitive:
        return 1.0 if pred == gt else 0.0
    return 1.0 if pred.lower() == gt.lower() else 0.0


def point_in_box(point: Sequence[float], box: Sequence[float], inclusive: bool = True) -> bool:
    """Is the point inside [x1, y1, x2, y2]? UI-R1 / ScreenSpot count the edges, GUI-R1 does not."""
    x, y = point
    if inclusive:
        return box[0] <= x <= box[2] and box[1] <= y <= box[3]
    return box[0] < x < box[2] and box[1] < y < box[3]


def point_near(point: Sequence[float], target: Sequence[float], threshold: float,
               scale: Sequence[float] = (1.0, 1.0)) -> bool:  # fmt: skip
    """Is the point closer than `threshold` to the target, each axis divided by `scale`?
    GUI-R1's reward: pixels, 140; its evaluation: scale = (width, height), 0.14."""
    dx = (point[0] - target[0]) / scale[0]
    dy = (point[1] - target[1]) / scale[1]
    return dx * dx + dy * dy < threshold * threshold  # nan and inf compare False


def text_f1(pred: str, gt: str) -> float:
    """GUI-R1's `calculate_f1_score`: brackets dropped, lower-cased, whitespace tokens as sets;
    two single tokens count 1 when one contains the other; else the F1 of the token sets."""
    pred_tokens = set(str(pred).replace("[", "").replace("]", "").lower().split())
    gt_tokens = set(str(gt).replace("[", "").replace("]", "").lower().split())
    if len(pred_tokens) == 1 and len(gt_tokens) == 1:
        (p,), (g,) = pred_tokens, gt_tokens
        if p in g or g in p:
            return 1.0
    common = len(pred_tokens & gt_tokens)
    precision = common / len(pred_tokens) if pred_tokens else 0.0
    recall = common / len(gt_tokens) if gt_tokens else 0.0
    return 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)


def input_text(pred: str | None, gt: str, threshold: float = 0.5) -> float:
    """1 if the token F1 of the texts reaches the threshold (GUI-R1: >= 0.5). A missing
    prediction is GUI-R1's "no input text"."""
    return 1.0 if text_f1(NO_INPUT_TEXT if pred is None else pred, gt) >= threshold else 0.0


def scroll_direction(pred: str | None, gt: str) -> float:
    """1 if the stated scroll direction (up/down/left/right, any case) is the ground truth's."""
    if not isinstance(pred, str):
        return 0.0
    pred = pred.strip().lower()
    return 1.0 if pred in SCROLL_DIRECTIONS and pred == gt.strip().lower() else 0.0


ANSWER_ONLY = compile_pattern(r"<answer>.*?</answer>", regex.DOTALL)  # UI-R1-E (no thinking)


def tags_format(completion: str, thinking: bool = True) -> float:
    """UI-R1's format reward: the whole completion is <think>..</think> <answer>..</answer>
    (UI-R1-E without thinking: <answer>..</answer>)."""
    if not isinstance(completion, str) or len(completion) > MAX_COMPLETION_CHARS:
        return 0.0
    return 1.0 if fullmatch(THINK_ANSWER if thinking else ANSWER_ONLY, completion) else 0.0


def _int_at(point: Any, index: int) -> bool:
    """GUI-R1's `isinstance(point[index], int)`: a bool is an int, and whatever indexes so passes
    (a dict {0: x, 1: y}, bytes); a point that does not index raises there, scoring 0."""
    try:
        return isinstance(point[index], int)
    except (LookupError, TypeError):
        return False


def gui_r1_action_format(item: Any) -> bool:
    """One action of GUI-R1's answer list as its `r1gui_format_reward` requires it."""
    if not isinstance(item, dict) or not {"action", "point", "input_text"} <= item.keys():
        return False
    action, point, text = item["action"], item["point"], item["input_text"]
    if not isinstance(action, str) or not isinstance(text, str):
        return False
    if not (_int_at(point, 0) and _int_at(point, 1)):
        return False
    if action in ("type", "select", "open_app") and text == NO_INPUT_TEXT:
        return False
    return not (action == "scroll" and text not in SCROLL_DIRECTIONS)


def gui_r1_format(completion: str, thinking: bool = True) -> float:
    """GUI-R1's format reward: the tags fully match and the answer is a list of well-formed
    actions (an empty list passes, as in GUI-R1). GUI-R1 reads the answer with `eval`; here
    Python reads it as a literal, so what passes is what passes there (comments, `0x10`,
    'cl' 'ick' included; JSON's true / false / null are names eval cannot resolve: 0), but for
    answers only eval reads (arithmetic, calls)."""
    if tags_format(completion, thinking) == 0.0:
        return 0.0
    content = answer_text(completion)
    try:
        actions = python_literal(content) if content is not None else None
    except ValueError:
        return 0.0
    if not isinstance(actions, list):
        return 0.0
    return 1.0 if all(gui_r1_action_format(item) for item in actions) else 0.0
