"""Classification: the class name a completion states, compared with the true label.

CLS-RL's definitions (github.com/minglllli/CLS-RL), to the character:

- Thinking variant, reward (src/cls-rl/src/open_r1/grpo.py, `accuracy_reward`): the answer is
  the first `<answer>(.*?)</answer>` without DOTALL (an answer that spans lines is not found),
  stripped, or the whole completion stripped when there is none; 1.0 if
  `answer.lower() == label.lower()`. Before that, CLS-RL asks math-verify:
  `verify(parse(completion), parse(solution))` with its solution "<answer> label </answer>",
  1.0 when it holds (`use_math_verify=True`, task option `answer_check`). It fires only where the
  label holds math: a number anywhere in the completion equal to FGVC-Aircraft's "737-200"
  read as 537, say, scores 1 whatever the answer says. That is CLS-RL's reward, kept.
- No-thinking variant, reward (grpo_direct.py): 1.0 if the completion *is* the label, byte
  for byte (no strip, case-sensitive). CLS-RL's no-thinking run has no format reward.
- Evaluation (src/eval/test_qwen2vl_fewshot.py): the answer is `<answer>\\s*(.*?)\\s*</answer>`
  (DOTALL) or the stripped output; correct if `answer.lower() == label.lower()` or
  `label.lower() in answer.lower()`, tried again with "_" in the label read as " ".

`label_normalized` is this package's looser match, not CLS-RL's: both sides lowercased,
punctuation (including "_" and "-") read as spaces, the articles a/an/the dropped, and
whitespace collapsed, as SQuAD's answer normalization does.

Everything here is linear in the text length; no pattern can backtrack (rewards.text).
"""

from __future__ import annotations

import string
import unicodedata

from rewards.math import math_verified, math_verify_available
from rewards.text import answer_text, compile_pattern, search

# CLS-RL's training pattern: no DOTALL.
CLS_RL_ANSWER = compile_pattern(r"<answer>(.*?)</answer>")
ARTICLES = frozenset({"a", "an", "the"})
_PUNCTUATION = str.maketrans({c: " " for c in string.punctuation})


def cls_rl_answer(completion: str) -> str:
    """The answer CLS-RL's training reward reads: first one-line <answer>, else the whole text."""
    match = search(CLS_RL_ANSWER, completion)
    return match.group(1).strip() if match else completion.strip()


def eval_answer(completion: str) -> str:
    """The answer CLS-RL's evaluation reads: first <answer> (may span lines), else the whole text."""
    content = answer_text(completion)
    return content if content else completion.strip()


def label_cls_rl(completion: str, label: str, use_math_verify: bool = False) -> float:
    """CLS-RL's `verify(parse(content), parse(sol))` (where installed and asked for; the
    completion's parse as the gold, as there), then the answer's case-insensitive match."""
    if use_math_verify and math_verify_available() and math_verified(completion, f"<answer> {label} </answer>"):
        return 1.0
    return 1.0 if cls_rl_answer(completion).lower() == label.lower() else 0.0


def label_direct(completion: str, label: str) -> float:
    """CLS-RL no-thinking: the completion must be exactly the label."""
    return 1.0 if completion == label else 0.0


def normalize_label(text: str) -> str:
    """Lowercase, punctuation as spaces, articles dropped, whitespace collapsed."""
    text = unicodedata.normalize("NFKC", text).lower().translate(_PUNCTUATION)
    return " ".join(w for w in text.split() if w not in ARTICLES)


def label_normalized(completion: str, label: str, think: bool = True) -> float:
    """Normalized equality of the answer (think: inside <answer>, else the whole completion)."""
    answer = eval_answer(completion) if think else completion
    return 1.0 if normalize_label(answer) == normalize_label(label) else 0.0


def cls_rl_eval_correct(completion: str, label: str) -> bool:
    """CLS-RL's evaluation rule (equality or containment, case-insensitive; "_" read as " ")."""
    answer = eval_answer(completion).lower()
    for gt in dict.fromkeys((label.lower(), label.lower().replace("_", " "))):
        if answer == gt or gt in answer:
            return True
    return False
