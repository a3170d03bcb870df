"""Video-R1's accuracy reward, by problem type (github.com/tulerfeng/Video-R1,
src/r1-v/src/open_r1/grpo.py, `accuracy_reward`).

Answers are read as Video-R1 reads them: the first `<answer>\\s*(.*?)\\s*</answer>` (DOTALL),
stripped, "" when there is none (rewards.ocr.video_r1_answer); the ground truth is the
record's answer.

- multiple choice: the answer equals the ground truth exactly ("A" matches "A", not "a" or "A.").
- numerical: both have a decimal point or comma, or neither; then float(text without commas),
  rounded to 2 decimals, equal.
- OCR: clip(1 - WER, 0, 1) (rewards.ocr.wer_score).
- free-form: the mean F-measure of ROUGE-1, ROUGE-2 and ROUGE-L (the rouge_score package,
  Porter stemmer), clipped to [0, 1].
- regression: 1 - clip((|p - g| + 1e-9) / (|g| + 1e-9), 0, 1).

Whatever fails to parse scores 0, as there. Two bounds of ours: a free-form answer is cut to
MAX_ROUGE_CHARS characters (ROUGE-L is quadratic), and numbers must be finite by default
(`nonfinite="zero"`): Video-R1's float() also reads "nan", and a NaN regression answer slips
through its clip as zero error and scores 1.0; `nonfinite="video_r1"` keeps that behavior for
scoring exactly as the public code does.
"""

from __future__ import annotations

import math
from functools import cache

from rewards.ocr import wer_score

PROBLEM_TYPES = ("multiple choice", "numerical", "OCR", "free-form", "regression")
MAX_ROUGE_CHARS = 4096


def to_number(text: str) -> float | None:
    """Video-R1's normalize_number: float() of the text without commas; None if that fails."""
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def multiple_choice(answer: str, truth: str) -> float:
    return 1.0 if answer.strip() == truth.strip() else 0.0


def numerical(answer: str, truth: str) -> float:
    if any(c in truth for c in ".,") != any(c in answer for c in ".,"):
        return 0.0
    p, g = to_number(answer), to_number(truth)
    if p is None or g is None:
        return 0.0
    return 1.0 if round(g, 2) == round(p, 2) else 0.0  # NaN equals nothing, so NaN scores 0 here


def regression(answer: str, truth: str, finite_only: bool = True) -> float:
    p, g = to_number(answer), to_number(truth)
    if p is None or g is None or (finite_only and not math.isfinite(p)):
        return 0.0
    relative = (abs(p - g) + 1e-9) / (abs(g) + 1e-9)
    return 1.0 - min(1.0, max(0.0, relative))


@cache
def _rouge():
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)


def free_form(answer: str, truth: str) -> float:
    scores = _rouge().score(truth, answer[:MAX_ROUGE_CHARS])
    mean = (scores["rouge1"].fmeasure + scores["rouge2"].fmeasure + scores["rougeL"].fmeasure) / 3
    return max(0.0, min(1.0, mean))


def accuracy(answer: str, truth: str, problem_type: str, nonfinite: str = "zero") -> float:
    """Video-R1's accuracy of one answer (already read from its <answer> tags)."""
    if problem_type == "multiple choice":
        return multiple_choice(answer, truth)
    if problem_type == "numerical":
        return numerical(answer, truth)
    if problem_type == "OCR":
        return wer_score(answer, truth)
    if problem_type == "free-form":
        return free_form(answer, truth)
    if problem_type == "regression":
        return regression(answer, truth, finite_only=nonfinite == "zero")
    return 0.0
