"""Bounded-time text matching for untrusted completions.

Patterns run with the `regex` module under a time limit, so a crafted completion cannot
make a reward backtrack for minutes; a timed-out match counts as no match.
"""

from __future__ import annotations

import regex

MATCH_TIMEOUT_S = 0.25


def compile_pattern(pattern: str, flags: int = 0) -> regex.Pattern:
    return regex.compile(pattern, flags | regex.VERSION0)


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
