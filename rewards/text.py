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
from collections.abc import Callable
from functools import cache, cached_property, partial
from typing import Any

import regex

MATCH_TIMEOUT_S = 0.25

_CLASS_ESCAPES = {"d": r"\d", "s": r"\s", "w": r"\w"}
_COMPILED: list[tuple[Pattern, str, int]] = []  # every compiled pattern, with the pattern and flags as written


@cache
def _every_code_point() -> str:
    """Every code point, position == code point (surrogates included), decoded from UTF-32
    in C: a quarter of the time of joining 1.1 million `chr`s, at the import of every reward."""
    codes = array.array("I", range(sys.maxunicode + 1))  # 4-byte items on CPython's platforms
    return codes.tobytes().decode(f"utf-32-{'le' if sys.byteorder == 'little' else 'be'}", "surrogatepass")


def _hex(code: int) -> str:
    return f"\\U{code:08x}"


@cache
def re_class_body(piece: str, flags: int = 0) -> str:
    """The characters `re` matches with the one-character `piece` (r"\\d", "[a-z]", "i") under
    `flags`, as set ranges without brackets: read off `re` itself across every code point."""
    runs = re.finditer(f"(?:{piece})+", _every_code_point(), flags)
    return "".join(_hex(m.start()) + ("" if m.end() - m.start() == 1 else "-" + _hex(m.end() - 1)) for m in runs)


def _set_end(pattern: str, start: int) -> int:
    """Index just past the set that opens at `start` (a leading ^ and a leading ] are members' syntax)."""
    i = start + 1
    i += pattern.startswith("^", i)
    i += pattern.startswith("]", i)
    while i < len(pattern) and pattern[i] != "]":
        i += 2 if pattern[i] == "\\" else 1
    if i >= len(pattern):
        raise ValueError(f"pattern {pattern!r}: set at {start} is not closed")
    return i + 1


def _group_header_end(pattern: str, start: int) -> int:
    """Index just past a "(?...)" group's header, whose letters (a group's name) are not text."""
    head = pattern[start + 2 : start + 4]
    if head[:1] in (":", "=", "!"):
        return start + 3
    if head in ("<=", "<!"):
        return start + 4
    if head[:1] == "#" or head == "P=":
        return pattern.index(")", start) + 1
    if head == "P<" or head[:1] == "<":
        return pattern.index(">", start) + 1
    raise ValueError(
        f"pattern {pattern!r}: inline flags or {pattern[start : start + 4]!r} have no exact re equivalent here"
    )


def re_compatible(pattern: str, ignorecase: bool = False) -> str:
    """`pattern` with \\d \\D \\s \\S \\w \\W spelled out as `re` defines them (for str patterns).

    With `ignorecase`, every letter and every set is spelled out too, with what `re`'s
    IGNORECASE matches for it, so that the result is compiled without the flag: the regex
    module folds case by its own tables, and its "i" misses the dotless "\u0131" that `re`'s
    matches (as `re`'s [A-Z] does "\u0131", "\u0130", "\u017f" and the Kelvin sign).

    Raises ValueError for what it cannot spell out exactly: \\b, \\B, negated classes inside a
    set, and under `ignorecase` inline flags, back-references and characters given by number.
    """
    return _spelled(_compatible_pieces(pattern, ignorecase))


# Text of a spelled-out pattern, or what computes it: a class body read off `re` takes tens of
# milliseconds, so `compile_pattern` checks a pattern at once and spells it out at its first use.
Piece = str | Callable[[], str]


def _spelled(pieces: list[Piece]) -> str:
    return "".join(piece if isinstance(piece, str) else piece() for piece in pieces)


def _class(piece: str, flags: int = 0, negated: bool = False) -> list[Piece]:
    """A set of what `re` matches with the one-character `piece`, read off `re` when it is spelled out."""
    return ["[^" if negated else "[", partial(re_class_body, piece, flags), "]"]


def _compatible_pieces(pattern: str, ignorecase: bool) -> list[Piece]:
    """`re_compatible`'s result in pieces, its errors raised here."""
    flags = re.IGNORECASE if ignorecase else 0
    out: list[Piece] = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "[":
            end = _set_end(pattern, i)
            out += _class(pattern[i:end], flags) if ignorecase else _set_pieces(pattern, i, end)
            i = end
            continue
        if char == "(" and pattern.startswith("?", i + 1) and ignorecase:
            end = _group_header_end(pattern, i)
            out.append(pattern[i:end])
            i = end
            continue
        if char == "\\" and i + 1 < len(pattern):
            name = pattern[i + 1]
            i += 2
            if name.lower() in _CLASS_ESCAPES:
                out += _class(_CLASS_ESCAPES[name.lower()], negated=name.isupper())
            elif name in "bB" or (ignorecase and (name.isdigit() or name in "xuUN")):
                raise ValueError(f"pattern {pattern!r}: \\{name} has no exact re equivalent here")
            elif ignorecase and not name.isalnum():
                out += _literal(name)
            else:
                out.append("\\" + name)
            continue
        out += _literal(char) if ignorecase and char not in ".^$*+?{}()|" else [char]
        i += 1
    return out


def _literal(char: str) -> list[Piece]:
    """A literal character under IGNORECASE: itself when `re` folds nothing onto it, else its members."""
    if char.isascii() and not char.isalpha():
        return [regex.escape(char)]
    return _class(re.escape(char), re.IGNORECASE)


def _set_pieces(pattern: str, start: int, end: int) -> list[Piece]:
    """The set pattern[start:end] with the class escapes inside it spelled out as `re` defines them."""
    out: list[Piece] = ["["]
    i = start + 1
    if pattern.startswith("^", i):
        out.append("^")
        i += 1
    if pattern.startswith("]", i):  # a leading ] is a member
        out.append("\\]")
        i += 1
    while i < end - 1:
        if pattern[i] == "\\":
            name = pattern[i + 1]
            if name.lower() in _CLASS_ESCAPES:
                if name.isupper():
                    raise ValueError(f"pattern {pattern!r}: \\{name} inside a set has no exact re equivalent here")
                out.append(partial(re_class_body, _CLASS_ESCAPES[name]))
            else:
                out.append(pattern[i : i + 2])
            i += 2
        else:
            out.append(pattern[i])
            i += 1
    out.append("]")
    return out


class Pattern:
    """A `regex` pattern spelled out and compiled on its first use, with every attribute of it
    (search, sub, pattern, ...). The reward modules hold over a hundred patterns and a run uses
    a few: spelling out and compiling them all took about 2 s at the import of any task, in
    every process and every `vlrl` command. A pattern `re_compatible` refuses is refused at
    once, at its module's import (`compile_pattern`)."""

    def __init__(self, pieces: list[Piece], flags: int) -> None:
        self.pieces, self.flags = pieces, flags

    @cached_property
    def compiled(self) -> regex.Pattern:
        return regex.compile(_spelled(self.pieces), self.flags)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # copy's and pickle's probes of a bare instance
            raise AttributeError(name)
        return getattr(self.compiled, name)


def compile_pattern(pattern: str, flags: int = 0) -> Pattern:
    """`pattern` for the `regex` module, matching what Python's `re` matches (compiled at its first use)."""
    ignorecase = bool(flags & regex.IGNORECASE)
    compiled = Pattern(_compatible_pieces(pattern, ignorecase), (flags & ~regex.IGNORECASE) | regex.VERSION0)
    _COMPILED.append((compiled, pattern, flags))
    return compiled


def compiled_patterns() -> list[tuple[Pattern, str, int]]:
    """Every pattern `compile_pattern` has built, with its text and flags as written (to test against `re`)."""
    return list(_COMPILED)


def search(pattern: Pattern, text: str, timeout: float = MATCH_TIMEOUT_S) -> regex.Match | None:
    try:
        return pattern.search(text, timeout=timeout)
    except TimeoutError:
        return None


def fullmatch(pattern: Pattern, text: str, timeout: float = MATCH_TIMEOUT_S) -> regex.Match | None:
    try:
        return pattern.fullmatch(text, timeout=timeout)
    except TimeoutError:
        return None


def findall(pattern: Pattern, text: str, timeout: float = MATCH_TIMEOUT_S) -> list:
    try:
        return pattern.findall(text, timeout=timeout)
    except TimeoutError:
        return []


def finditer(pattern: Pattern, text: str, timeout: float = MATCH_TIMEOUT_S) -> list[regex.Match]:
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
