"""SophiaVL-R1's outcome rewards (kxfan2002/SophiaVL-R1 at a818494,
verl/utils/reward_score/math.py, called by verl/workers/reward/custom.py).

A run scores with one of them (its `worker.reward.compute_score`), whatever a sample's
problem type; each is 0 unless the completion, with every `$` removed (the reward manager
removes them from completion and truth), is `<think>...</think>...<answer>...</answer>...` in
full (DOTALL). The answer is the first `<answer>...</answer>`'s content, not stripped:

- `choice` (its released script's): the answer split at commas, each piece stripped; 1 when
  there are as many pieces as the truth has characters and each piece occurs in the truth as
  a substring ("B" against "B" scores 1, "12" against "12" 0: two characters, one piece).
- `math`: MathRuler's grade_answer(answer, truth) (rewards.mathruler, without its eval).
- `ocr`: exp(-WER) with WER of the stripped texts, words as jiwer's default transform reads them
  (rewards.ocr.jiwer_words: split at spaces, a run of whitespace one space, so "STOP\\nHERE" is one word).
- `caption` (also `text`): the mean F-measure of ROUGE-1, ROUGE-2 and ROUGE-L (rouge_score,
  Porter stemmer) of the texts with newlines as spaces, stripped (rewards.video.free_form: an
  F-measure is the same either way round; the answer cut to MAX_ROUGE_CHARS).

Its `r1v` scorer takes no step argument, which its reward manager passes, so it cannot run
there; it is left out.
"""

from __future__ import annotations

import math

import regex

from rewards.mathruler import grade_answer
from rewards.ocr import jiwer_words, word_error_rate
from rewards.text import ANSWER_TAG, compile_pattern, fullmatch, search
from rewards.video import free_form

FORMAT = compile_pattern(r"<think>(.*?)</think>.*<answer>(.*?)</answer>.*", regex.DOTALL)


def without_dollars(text: str) -> str:
    """The reward manager's `.replace('$$', '').replace('$', '')`: every `$` gone."""
    return text.replace("$", "")


def answer_content(completion: str) -> str | None:
    """The first <answer>'s content of a completion in SophiaVL-R1's format; None when it is not."""
    completion = without_dollars(completion)
    if not fullmatch(FORMAT, completion):
        return None
    return search(ANSWER_TAG, completion).group(1)  # unstripped, unlike rewards.text.answer_text


def choice(answer: str, truth: str) -> float:
    pieces = [piece.strip() for piece in answer.split(",")]
    return 1.0 if len(pieces) == len(truth) and all(piece in truth for piece in pieces) else 0.0


def math_answer(answer: str, truth: str) -> float:
    return 1.0 if grade_answer(answer, truth) else 0.0


def ocr(answer: str, truth: str) -> float:
    return math.exp(-word_error_rate(truth.strip(), answer.strip(), jiwer_words))


def caption(answer: str, truth: str) -> float:
    return free_form(answer.replace("\n", " ").strip(), truth.replace("\n", " ").strip())


SCORERS = {"choice": choice, "math": math_answer, "ocr": ocr, "caption": caption, "text": caption}


def outcome(completion: str, truth: str, scorer: str) -> float:
    """SophiaVL-R1's answer score of a completion against the truth (the record's answer)."""
    answer = answer_content(completion)
    return 0.0 if answer is None else SCORERS[scorer](answer, without_dollars(truth))
