"""Bounded-time text matching for untrusted completions, with Python `re`'s character classes.

Patterns run with the `regex` module under a time limit, so a crafted completion cannot
make a reward backtrack for minutes; a timed-out match counts as no match.

The public code (VLM-R1, GUI-R1, UI-R1, Video-R1, ...) runs its patterns with `re`. The
`regex` module's `\\s`, `\\d` and `\\w` are not `re`'s: its `\\s` leaves out U+001C-U+001F, and
its newer Unicode tables make `\\d` and `\\w` match characters that `re` (and so `int()`)
does not know. `compile_pattern` therefore rewrites those escapes into explicit character
sets read off `re` itself, so that every pattern matches exactly what `re` matches.

Where public code calls `eval` on model output, `python_literal` reads the same text with
Python's own parser and evaluates literals only.
"""

from __future__ import annotations

import array
import ast
import re
import sys
import warnings
from functools import cache
from typing import Any

import regex

MATCH_TIMEOUT_S = 0.25

_CLASS_ESCAPES = {"d": r"\d", "s": r"\s", "w": r"\w"}
_COMPILED: list[tuple[regex.Pattern, str]] = []  # every compiled pattern, with the pattern as written


@cache
def _every_code_point() -> str:
    """Every code point, position == code point (surrogates included), decoded from UTF-32
    in C: a quarter of the time of joining 1.1 million `chr`s, at the import of every reward."""
    codes = array.array("I", range(sys.maxunicode + 1))  # 4-byte items on CPython's platforms
    return codes.tobytes().decode(f"utf-32-{'le' if sys.byteorder == 'little' else 'be'}", "surrogatepass")


def _hex(code: int) -> str:
    return f"\\U{code:08x}"


@cache
def re_class_body(escape: str) -> str:
    """The members of `re`'s class `escape` (r"\\d", r"\\s" or r"\\w") as set ranges, without brackets."""
    runs = re.finditer(escape + "+", _every_code_point())
    return "".join(_hex(m.start()) + ("" if m.end() - m.start() == 1 else "-" + _hex(m.end() - 1)) for m in runs)


def re_compatible(pattern: str) -> str:
    """`pattern` with \\d \\D \\s \\S \\w \\W spelled out as `re` defines them (for str patterns).

    Raises ValueError for what it cannot spell out exactly: \\b, \\B, and negated classes
    inside a set.
    """
    out: list[str] = []
    in_set = False
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\" and i + 1 < len(pattern):
            name = pattern[i + 1]
            i += 2
            if name.lower() in _CLASS_ESCAPES:
                body = re_class_body(_CLASS_ESCAPES[name.lower()])
                if in_set and name.isupper():
                    raise ValueError(f"pattern {pattern!r}: \\{name} inside a set has no exact re equivalent here")
                out.append(body if in_set else f"[{'^' if name.isupper() else ''}{body}]")
            elif name in "bB":
                raise ValueError(f"pattern {pattern!r}: \\{name} has no exact re equivalent here")
            else:
                out.append("\\" + name)
            continue
        if char == "[" and not in_set:
            in_set = True
            out.append(char)
            i += 1
            if i < len(pattern) and pattern[i] == "^":
                out.append("^")
                i += 1
            if i < len(pattern) and pattern[i] == "]":  # a leading ] is a member
                out.append("\\]")
                i += 1
            continue
        if char == "]" and in_set:
            in_set = False
        out.append(char)
        i += 1
    return "".join(out)


def compile_pattern(pattern: str, flags: int = 0) -> regex.Pattern:
    """`pattern` compiled with the `regex` module, matching what Python's `re` matches."""
    compiled = regex.compile(re_compatible(pattern), flags | regex.VERSION0)
    _COMPILED.append((compiled, pattern))
    return compiled


def compiled_patterns() -> list[tuple[regex.Pattern, str]]:
    """Every pattern `compile_pattern` has built, with its text as written (to test against `re`)."""
    return list(_COMPILED)


def search(pattern: regex.Pattern, text: str, timeout: float = MATCH_TIMEOUT_S) -> regex.Match | None:
    try:
        return pattern.search(text, timeout=timeout)
    except TimeoutError:
        return None


def fullmatch(pattern: regex.Pattern, text: str, timeout: float = MATCH_TIMEOUT_S) -> regex.Match | None:
    try:
        return pattern.fullmatch(text, timeout=timeout)
    except TimeoutError:
        return None


def findall(pattern: regex.Pattern, text: str, timeout: float = MATCH_TIMEOUT_S) -> list:
    try:
        return pattern.findall(text, timeout=timeout)
    except TimeoutError:
        return []


def finditer(pattern: regex.Pattern, text: str, timeout: float = MATCH_TIMEOUT_S) -> list[regex.Match]:
    """All matches (as a list), or none if matching runs out of time."""
    try:
        return list(pattern.finditer(text, timeout=timeout))
    except TimeoutError:
        return []


ANSWER_TAG = compile_pattern(r"<answer>(.*?)</answer>", regex.DOTALL)


def answer_text(completion: str) -> str | None:
    """Content of the first <answer>...</answer>, stripped (None if there is none)."""
    match = search(ANSWER_TAG, completion)
    return match.group(1).strip() if match else None


def python_literal(text: str) -> Any:
    """The value Python's `eval` gives `text` where the text is a literal: numbers, strings and
    bytes (implicit concatenation included), True / False / None, and tuples, lists, sets and
    dicts of them, with Python's comments and whitespace. Read by ast.literal_eval, which runs
    nothing. Raises ValueError where eval raises and where only eval reads the text (arithmetic,
    names, calls, `--1`); Python's parser bounds nesting, so deep input raises too."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an invalid escape in a string warns (SyntaxWarning from Python 3.12)
        try:
            return ast.literal_eval(text)
        except (SyntaxError, TypeError, MemoryError, RecursionError) as err:
            raise ValueError(f"not a Python literal: {err}") from err
