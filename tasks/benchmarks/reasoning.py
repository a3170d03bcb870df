"""lmms-eval's `_task_utils/reasoning_utils.py` (commit 75571cf), which its `*_reasoning` tasks
score with: the answer a reasoning response gives (`answer_tag`), its format score
(`reasoning_format`) and `compute_score`'s accuracy (`reasoning_score`: a relaxed string match,
then math-verify; its LLM judge is off unless USE_LLM_JUDGE=True, and vlrl never calls one).
"""

from __future__ import annotations

from typing import Any, ClassVar

import regex

from rewards.math import math_verified, math_verify
from rewards.text import compile_pattern, fullmatch, search
from vlrl.config import ConfigError
from vlrl.data.sample import Sample
from vlrl.tasking.benchmark import mean

# The system prompt the MathVista, MathVerse and RealWorldQA reasoning tasks name (each its own copy).
THINK_SYSTEM = (
    "You are a helpful assistant. When the user asks a question, your response must include two parts: "
    "first, the reasoning process enclosed in <think>...</think> tags, then the final answer enclosed in "
    "<answer>...</answer> tags.Please provide a clear, concise response within <answer> </answer> tags that "
    "directly addresses the question."
)
# DEFAULT_REASONING_SYSTEM_PROMPT, which make_reasoning_doc_to_messages gives a task that names none.
ANALYSIS_SYSTEM = (
    "You are a helpful assistant. When user asks a question, your response must include two parts: "
    "first, reasoning process enclosed in <analysis>...</analysis> tags, then final answer enclosed in "
    "<answer>...</answer> tags.Please provide a clear, concise response within <answer> </answer> tags that "
    "directly addresses to question."
)
LETTERS = "ABCDEFGH"
REASONING_ANSWER = compile_pattern(r"<answer>(.*?)</answer>", regex.DOTALL)
LAST_NUMBER = compile_pattern(
    r"(?:(?<=\w)(?!\w)|(?<!\w)(?=\w))(\d+(?:\.\d+)?)(?:(?<=\w)(?!\w)|(?<!\w)(?=\w))(?:\s*\.?\s*$)"
)
THINK_ANSWER_ANY = compile_pattern(r"<think>.*</think>.*<answer>.*</answer>", regex.DOTALL)
ANALYSIS_ANSWER = compile_pattern(r"<analysis>.*</analysis>.*<answer>.*</answer>", regex.DOTALL)
HAS_MATH = compile_pattern(r"[=\+\-\*/\(\)\[\]\\]")
ANSWER_PHRASES = (
    "the answer is", "answer is", "the correct answer is", "correct answer is", "the answer", "answer",
    "correct answer", "the correct answer", "the best answer is", "best answer is", "the best answer", "best answer",
    "the option is", "option is", "the correct option is", "correct option is", "the choice is", "choice is",
    "the correct choice is", "correct choice is", "i choose", "i select", "i pick", "my answer is", "my choice is",
)  # fmt: skip
MCQ_PRIORITY = {"start": 10, "end": 9, "numbered": 8, "phrase": 7, "parentheses": 6, "period": 5, "colon": 4,
                "right_paren": 3, "space": 2, "dash": 1, "underscore": 1, "equals": 1, "fallback": 0}  # fmt: skip
MCQ_MARKS = (("({})", "parentheses"), ("{}.", "period"), ("{}:", "colon"), ("{})", "right_paren"), ("{} ", "space"),
             ("{}-", "dash"), ("{}_", "underscore"), ("{}=", "equals"))  # fmt: skip


def last_boxed(text: str) -> str:
    """extract_boxed_answer: the content of the last `\\boxed{` that closes ("" if none). One
    pass matching braces (a `}` closes the latest open `{`, as counting from each box's brace
    finds), not a scan to the end from each box: text of thousands of unclosed boxes took minutes."""
    found, found_at, opened = "", -1, []
    for pos, char in enumerate(text):
        if char == "{":
            opened.append(pos)
        elif char == "}" and opened:
            start = opened.pop()
            box = start - len("\\boxed")
            if start > found_at and box >= 0 and text.startswith("\\boxed", box):
                found, found_at = text[start + 1 : pos], start
    return found


def answer_tag(text: str) -> str:
    """extract_anwser_tag: the first <answer> (DOTALL), else the last box, else the number
    ending the last non-empty line that ends in one."""
    match = search(REASONING_ANSWER, text)
    if match:
        return match.group(1)
    boxed = last_boxed(text)
    if boxed:
        return boxed
    for line in reversed(text.strip().split("\n")):
        if line.strip():
            number = search(LAST_NUMBER, line)
            if number:
                return number.group(1)
    return ""


def reasoning_format(text: str) -> float:
    if fullmatch(THINK_ANSWER_ANY, text) or fullmatch(ANALYSIS_ANSWER, text) or last_boxed(text):
        return 1.0
    if len(text.strip()) > 50 and search(HAS_MATH, text) and answer_tag(text):
        return 0.8
    return 0.0


def padded(text: str) -> str:
    """The text both of lmms-eval's letter readers search: stripped, then each of ,.!?;:'" stripped
    off its ends in turn, then one space either side (so that "B " matches a final B)."""
    text = text.strip()
    for char in ",.!?;:'\"":
        text = text.strip(char)
    return f" {text} "


def parse_mcq(text: str) -> str:
    """parse_mcq: the option letter A-H a response names, by the most telling mark."""
    if not text or not text.strip():
        return ""
    response = padded(text)
    candidates = []
    for mark, kind in MCQ_MARKS:
        candidates += [(c, response.rfind(mark.format(c)), kind) for c in LETTERS if mark.format(c) in response]
    lower = response.lower()
    for phrase in ANSWER_PHRASES:
        if phrase in lower:
            start = lower.find(phrase)
            candidates += [(c, response.find(c, start), "phrase") for c in LETTERS if response.find(c, start) != -1]
    stripped = response.strip()
    candidates += [(c, 0, "start") for c in LETTERS if stripped.startswith(c)]
    candidates += [(c, len(response) - 1, "end") for c in LETTERS if stripped.endswith(c)]
    for i, c in enumerate(LETTERS):
        if f"{i + 1}. {c}" in response:
            candidates.append((c, response.rfind(f"{i + 1}. {c}"), "numbered"))
    if not candidates:
        candidates = [(c, response.rfind(c), "fallback") for c in LETTERS if c in response]
    if not candidates:
        return ""
    candidates.sort(key=lambda x: (MCQ_PRIORITY[x[2]], -x[1]), reverse=True)
    return candidates[0][0]


def _simple_parse(text: str) -> str:
    return (text[:-1] if text.endswith(".") else text).strip()


def relax_exact_match(predict: str, truth: str, portion: float = 0.9) -> float:
    if parse_mcq(truth) in LETTERS and parse_mcq(truth):  # "Dark green" starts with D: an MCQ here too
        return 1.0 if parse_mcq(predict).lower().strip() == parse_mcq(truth).lower().strip() else 0.0
    if predict in truth and len(predict) >= portion * len(truth):
        return 1.0
    if truth in predict and len(truth) >= portion * len(predict):
        return 1.0
    return 1.0 if predict.strip() == truth.strip() else 0.0


def reasoning_score(solution: str, truth: str) -> tuple[float, float]:
    """compute_score's (acc_score, format_reward_score), the judge off."""
    fmt = reasoning_format(solution)
    predict, gt = _simple_parse(answer_tag(solution).strip()), _simple_parse(truth)
    acc = relax_exact_match(predict, gt)
    if acc == 0.0:
        acc = float(math_verified(gt, predict))  # there a failing verify scores 0 too
    return acc, fmt


def needs_math_verify(name: str) -> None:
    """A benchmark scored by `reasoning_score` refuses to start without math-verify (vlrl[math])."""
    try:
        math_verify()
    except ImportError as err:
        raise ConfigError(f"task {name!r}: {err}") from err


class ComputeScored:
    """What lmms-eval's `*_reasoning` tasks share, mixed in before the benchmark each varies: a
    system prompt asking for reasoning and an <answer> (THINK_SYSTEM unless the task names
    another), 49,152 new tokens, no filter, and compute_score's `acc_score` and `format_score`
    (means) against `truth`. It refuses to start without math-verify."""

    system: ClassVar[str | None] = THINK_SYSTEM
    max_new_tokens: ClassVar[int] = 49152
    model_kwargs: ClassVar[dict[str, dict[str, Any]]] = {}  # the reasoning yamls name no model's kwargs

    def __init__(self, options=None, rewards=None):
        super().__init__(options, rewards)
        needs_math_verify(self.name)

    def truth(self, sample: Sample) -> str:
        """The ground truth compute_score compares with (the task's process_results reads it)."""
        return str(sample.solution)

    def predict(self, completion: str, sample: Sample) -> str:
        return completion

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        acc, fmt = reasoning_score(completion.strip(), self.truth(sample))
        return {"acc_score": acc, "format_score": fmt}

    def aggregations(self):
        return {"acc_score": mean, "format_score": mean}
