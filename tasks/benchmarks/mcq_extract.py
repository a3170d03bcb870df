"""lmms-eval's `_task_utils/mcq_extract.py` (commit 75571cf): the option letter a free-form
response gives, shared there by MMStar, RealWorldQA and others. Candidates in eight ranked
formats (a standalone letter at the start, at the end, after an answer phrase in one of four
languages, "(B)", "B.", "B:", "B)", "B "), else any occurrence; of the highest-ranked format,
the last."""

from __future__ import annotations

from collections.abc import Sequence

from tasks.benchmarks.reasoning import padded

ANSWER_PHRASES = (
    "the answer is", "answer is", "the correct answer is", "correct answer is", "the best answer is", "best answer is",
    "the correct option is", "correct option is", "the best option is", "best option is", "the choice is", "choice is",
    "the correct choice is", "correct choice is", "i choose", "i select", "i pick", "my answer is", "my choice is",
    "옵션", "정답은", "답은", "답:", "答案是", "答案为", "选", "答えは",
)  # fmt: skip
FORMAT_PRIORITY = {"start": 10, "end": 9, "phrase": 7, "parentheses": 6, "period": 5, "colon": 4, "right_paren": 3,
                   "space": 2, "fallback": 0}  # fmt: skip
MARKS = (("({})", "parentheses"), ("{}.", "period"), ("{}:", "colon"), ("{})", "right_paren"), ("{} ", "space"))


def extract_mcq_answer(response: str, choices: Sequence[str] = "ABCDEFGH") -> str:
    """The choice letter a response gives: of the candidates in the highest-ranked format, the
    last one ("" if none)."""
    if not response or not response.strip():
        return ""
    text = padded(response)
    candidates = [
        (c, text.rfind(mark.format(c)), kind) for mark, kind in MARKS for c in choices if mark.format(c) in text
    ]
    lower = text.lower()
    for phrase in ANSWER_PHRASES:
        at = lower.find(phrase)
        if at != -1:
            after = at + len(phrase)
            candidates += [(c, text.find(c, after), "phrase") for c in choices if text.find(c, after) != -1]
    stripped = text.strip()
    candidates += [(c, 0, "start") for c in choices
                   if stripped.startswith(c) and (len(stripped) == 1 or not stripped[1].isalpha())]  # fmt: skip
    candidates += [(c, len(text) - 1, "end") for c in choices
                   if stripped.endswith(c) and (len(stripped) == 1 or not stripped[-2].isalpha())]  # fmt: skip
    if not candidates:
        candidates = [(c, text.rfind(c), "fallback") for c in choices if c in text]
    if not candidates:
        return ""
    return max(candidates, key=lambda x: (FORMAT_PRIORITY[x[2]], x[1]))[0]  # the first of ties, as a stable sort
