"""OCR: the transcription a completion states, compared with the true text by edit distance.

- `wer_score` is Video-R1's OCR reward (github.com/tulerfeng/Video-R1,
  src/r1-v/src/open_r1/grpo.py, `accuracy_reward`, problem_type "OCR"): words are
  `str.split()` tokens, WER = word-level Levenshtein distance / max(1, number of reference
  words), reward = clip(1 - WER, 0, 1). Case and punctuation count; nothing is normalized.
  Its answers are `<answer>\\s*(.*?)\\s*</answer>` (DOTALL), "" when there is none.
- `edit_distance_score` is 1 - NED with NED = character Levenshtein distance (unit costs,
  no transpositions) / max(len(pred), len(gt)), the normalized edit distance Perception-R1
  reports for OCR (eval/evaluate_ocr.py: nltk.edit_distance(pred, gt) / max(len(pred), len(gt)))
  and OCR benchmarks use. Both texts empty: distance 0, score 1 (PR1 divides by zero there).

Bounded time: each side is cut to MAX_EDIT_SYMBOLS symbols (characters or words) before
comparing (an OCR answer longer than that is not a transcription; the scorer already scores
completions over 65,536 characters 0), and the distance runs row by row in numpy, so the
worst case is MAX_EDIT_SYMBOLS vectorized rows of MAX_EDIT_SYMBOLS + 1 cells.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import numpy as np

from rewards.text import MATCH_TIMEOUT_S, answer_text, compile_pattern

MAX_EDIT_SYMBOLS = 8192
WHITESPACE_RUN = compile_pattern(r"\s\s+")  # jiwer's RemoveMultipleSpaces


def levenshtein(a: Sequence[Hashable], b: Sequence[Hashable], cap: int | None = MAX_EDIT_SYMBOLS) -> int:
    """Edit distance with unit insert / delete / substitute costs, over any two sequences, each
    cut to `cap` symbols first (a reward's time bounded; None: whole, as a benchmark's metric
    needs: ANLS divides by the uncut length)."""
    if cap is not None:
        a, b = a[:cap], b[:cap]
    if a == b:
        return 0
    if len(a) < len(b):
        a, b = b, a  # rows over the longer sequence, vectors as long as the shorter
    if not b:
        return len(a)
    codes: dict[Hashable, int] = {}
    row_symbols = [codes.setdefault(s, len(codes)) for s in a]
    column = np.array([codes.setdefault(s, len(codes)) for s in b], dtype=np.int64)
    offsets = np.arange(len(b) + 1, dtype=np.int64)
    previous = offsets.copy()
    current = np.empty_like(previous)
    for i, symbol in enumerate(row_symbols, start=1):
        # Substitution (or match) from the diagonal, deletion from above ...
        np.minimum(previous[:-1] + (column != symbol), previous[1:] + 1, out=current[1:])
        current[0] = i
        # ... then insertions along the row: D[j] = min_k<=j (C[k] + j - k) = j + cummin(C - offsets).
        np.minimum.accumulate(current - offsets, out=current)
        current += offsets
        previous, current = current, previous
    return int(previous[-1])


def normalized_edit_distance(pred: str, gt: str) -> float:
    """Character Levenshtein distance / max(len(pred), len(gt)); 0.0 when both are empty."""
    pred, gt = pred[:MAX_EDIT_SYMBOLS], gt[:MAX_EDIT_SYMBOLS]
    longest = max(len(pred), len(gt))
    return levenshtein(pred, gt) / longest if longest else 0.0


def edit_distance_score(pred: str, gt: str) -> float:
    """1 - normalized edit distance, in [0, 1]."""
    return 1.0 - normalized_edit_distance(pred, gt)


def jiwer_words(text: str) -> list[str]:
    """The words jiwer's default transform reads (RemoveMultipleSpaces, Strip,
    ReduceToListOfListOfWords): a run of two or more whitespace characters is one space, and
    words are split at spaces only, so a single newline or tab joins the words beside it."""
    return [word for word in WHITESPACE_RUN.sub(" ", text, timeout=MATCH_TIMEOUT_S).strip().split(" ") if word]


def word_error_rate(reference: str, hypothesis: str, words: Callable[[str], list[str]] = str.split) -> float:
    """Word Levenshtein distance / max(1, reference words), words as `words` splits them (Video-R1's
    `str.split`, or `jiwer_words`). Can exceed 1."""
    ref, hyp = words(reference)[:MAX_EDIT_SYMBOLS], words(hypothesis)[:MAX_EDIT_SYMBOLS]
    return levenshtein(ref, hyp) / max(1, len(ref))


def wer_score(pred: str, gt: str) -> float:
    """Video-R1's OCR reward: clip(1 - WER(gt, pred), 0, 1)."""
    return max(0.0, min(1.0, 1.0 - word_error_rate(gt, pred)))


def video_r1_answer(completion: str) -> str:
    """The text Video-R1 reads from a completion: the first <answer>, stripped; "" if none."""
    content = answer_text(completion)
    return "" if content is None else content
