"""R1-VL's StepGRPO rewards: step-wise reasoning accuracy (StepRAR) and validity (StepRVR).

Definitions of jingyi0000/R1-VL at 679be5c, src/r1-vl/src/open_r1/grpo.py (reimplemented):

- `validity` (StepRVR, `validity_reward`): 1.0 when the completion is *complete* (it contains
  `### Image Description:`, `### Rationales:`, `### Step 1:` and `### The final answer is:`,
  in any order) and *logical* (`check_reasoning_logic`: unless the stripped text ends with the
  final-answer header, its first occurrence starts at or after the end of the last
  `### Step N:` header; and the numbers of every `### Step N:` header, in order, are 1..n).
- `key_step_score` (StepRAR's soft key-step matching, `key_step_single`): the share of a
  sample's key steps found, case-insensitively, as substrings of the `### Step N:` bodies
  joined by spaces; a key step is a string or a list of alternatives (any one matches); no
  key steps score 0. R1-VL adds it to its accuracy reward times 0.1 (`reward += step_r * 0.1`).
- `answer_correct` (the rest of R1-VL's `accuracy_reward`): 1.0 when math_verify's
  `verify(parse(completion), parse(solution))` holds, else when the text after the first
  `### The final answer is:` (to the end of its line, stripped; the whole text stripped when
  it has no such header) is the same in the completion and the solution.

math_verify is optional (`pip install math-verify`): without it only the string comparison
runs (`math_verify_available`), so equivalent answers written differently ("1/2", "0.5")
score 0; tasks name the choice.
"""

from __future__ import annotations

from collections.abc import Sequence

import regex

from rewards.math import math_verified, math_verify_available
from rewards.text import compile_pattern, findall, finditer, search

SECTIONS = ("### Image Description:", "### Rationales:", "### Step 1:", "### The final answer is:")
FINAL_ANSWER = "### The final answer is:"
STEP_HEADER = compile_pattern(r"### Step \d+:")
STEP_NUMBER = compile_pattern(r"### Step (\d+):")
STEP_BODY = compile_pattern(r"### Step \d+:\s*(.*?)(?=\n###|\Z)", regex.DOTALL)
FINAL_ANSWER_LINE = compile_pattern(r"### The final answer is:\s*\n?(.*)")
KEY_STEP_WEIGHT = 0.1  # R1-VL's alpha: accuracy = correct + 0.1 x key-step score

KeyStep = str | Sequence[str]  # one key step: a phrase, or its alternatives


def complete(text: str) -> bool:
    """R1-VL's check_reasoning_completeness: every section header occurs somewhere."""
    return all(section in text for section in SECTIONS)


def logical(text: str) -> bool:
    """R1-VL's check_reasoning_logic, for a text that has a `### Step N:` header. Its search
    `### The final answer is:.*?$` (DOTALL) always matches at the header's first occurrence,
    so that occurrence is what is compared with the end of the last step header."""
    if not text.strip().endswith(FINAL_ANSWER):
        headers = finditer(STEP_HEADER, text)
        first_answer = text.find(FINAL_ANSWER)
        if first_answer < 0 or not headers or first_answer < max(m.end() for m in headers):
            return False
    numbers = findall(STEP_NUMBER, text)
    if not numbers:
        return False
    return [int(n) for n in numbers] == list(range(1, len(numbers) + 1))


def validity(completion: str) -> float:
    """StepRVR: 1.0 for a complete and logical reasoning chain, else 0.0."""
    return 1.0 if complete(completion) and logical(completion) else 0.0


def step_text(completion: str) -> str:
    """The `### Step N:` bodies (each up to the next `\\n###` or the end), joined by spaces, lower-cased."""
    return " ".join(findall(STEP_BODY, completion)).lower()


def key_step_score(completion: str, key_steps: Sequence[KeyStep]) -> float:
    """StepRAR's soft key-step matching: matched key steps / all key steps (0 without any)."""
    if not key_steps:
        return 0.0
    text = step_text(completion)
    matched = 0
    for step in key_steps:
        alternatives = [step] if isinstance(step, str) else step
        if any(alternative.lower() in text for alternative in alternatives):
            matched += 1
    return matched / len(key_steps)


def final_answer(text: str) -> str:
    """The rest of the line after the first final-answer header (blank lines skipped), stripped;
    the whole text stripped when there is no header."""
    match = search(FINAL_ANSWER_LINE, text)
    return match.group(1).strip() if match else text.strip()


def answer_correct(completion: str, solution: str, use_math_verify: bool = True) -> float:
    """1.0 when the completion's answer is the solution's: math_verify first (where installed and
    asked for), then the final-answer lines compared as strings."""
    if use_math_verify and math_verify_available() and math_verified(completion, solution):
        return 1.0
    return 1.0 if final_answer(completion) == final_answer(solution) else 0.0
