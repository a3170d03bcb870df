"""Math and reasoning VQA: each public recipe's answer extraction, verifier and format reward.

Every function takes the completion (what the model wrote after the prompt) and the record's
answer string, and returns the value the recipe gives, scaled to [0, 1] (the recipes' own
weights are the task's default reward weights):

- EasyR1 (hiyouga/EasyR1 @b44b311, examples/reward_function/math.py, the Geometry3K recipe):
  whitespace around `<`, `>` and `/` deleted first (`easyr1_collapse`, "handle qwen2.5vl-32b
  format"), then format = `<think>.*</think>.*\\boxed\\{.*\\}.*` (full match) and accuracy =
  MathRuler's grade_answer of the last `\\boxed{}` (rewards/mathruler.py).
  `easyr1_r1v_*`: examples/reward_function/r1v.py: the first one-line `<answer>` (else the
  whole completion) graded by MathRuler; format = R1's think/answer full match.
- MM-Eureka (ModalMinds/MM-EUREKA qwen @bccddd7, examples/scripts/reward_func_qwen_instruct.py,
  MMK12): the first one-line `<answer>...</answer>` with its tags (else what follows the last
  `<answer>`) parsed by math-verify with the String (A-D), LaTeX and Expr configs, verified
  against `parse("$answer$")`; then, for a gold letter a-d, the answer text must contain it and
  none of the other three letters. An answer math-verify cannot parse scores 1 (a constant: no
  advantage under GRPO). Format: exactly one of each tag, a non-empty think, then the answer.
- LMM-R1 (TideDra/lmm-r1 @f917f18, openrlhf/models/remote_rm/math_verifier.py): the whole
  response parsed by math-verify, LaTeX only, anchored, boxed first (`verify_math`); an answer
  not starting with `$` is wrapped in `$...$`; an unparseable answer scores 1. Format: starts
  with `<think>`, `</think><answer>` adjacent, ends with `</answer>`, one of each.
- VisualThinker-R1-Zero (turningpoint-ai/VisualThinker-R1-Zero @cd71978, src/open-r1-multimodal/
  src/open_r1/grpo.py): math-verify of the completion against `<answer>truth</answer>`, else the
  first one-line `<answer>` equal to the truth, else the last standalone capital A-H of it;
  format = R1's full match of `"<think>" + completion` (the base prompt ends with `<think>`).

math-verify is an optional dependency (`pip install 'vlrl[math]'`, the 0.5.2 the three recipes
pin): `require_math_verify` says how to get it. Its time limits are SIGALRM timers, which work
only in a main thread (0.5.2 elsewhere silently returns string-only parses), and its regexes run
unbounded (quadratic on `"\\(" * n`: about 40 s at MAX_VERIFY_CHARS), so the functions that
call it run in the reward worker (rewards/worker.py): in its main thread whichever thread asks,
and ended after VERIFY_SECONDS with a TimeoutError (the scorer then counts a failure and scores
0). Its Expr extraction hands digit-and-operator text to sympy's parse_expr (evaluate=False),
under its timer; everything else here reads text without evaluating it.
"""

from __future__ import annotations

import contextlib
import io
from functools import cache
from typing import Any

import regex

from rewards.format import think_answer
from rewards.mathruler import NO_BOX, boxed_content, grade_answer
from rewards.text import compile_pattern, findall, fullmatch, search
from rewards.worker import isolated

# math-verify runs its regexes with `re`, unbounded: longer completions score 0 without it, as the
# scorer (vlrl.tasking.scoring, 65,536 characters) scores them 0 anyway.
MAX_VERIFY_CHARS = 65536
# A completion's verdict, all of math-verify's calls for it: past its own timers' 3 s a parse and
# 5 s a verify, well short of its regexes' worst case.
VERIFY_SECONDS = 10.0
MATH_VERIFY_HINT = "math-verify is not installed: pip install 'vlrl[math]' (math-verify==0.5.2, as the recipes pin)"


@cache
def math_verify() -> Any:
    """The math_verify module; ImportError with the install hint when it is missing."""
    try:
        import math_verify as module
    except ImportError as err:
        raise ImportError(MATH_VERIFY_HINT) from err
    return module


def require_math_verify() -> None:
    math_verify()


@cache
def math_verify_available() -> bool:
    try:
        math_verify()
    except ImportError:
        return False
    return True


@isolated(lambda: VERIFY_SECONDS, imports=("math_verify",))
def math_verify_equal(first: str, second: str) -> bool:
    """math-verify's `verify(parse(first), parse(second))` (its gold first: the callers' order
    differs, as their code's does), in the reward worker."""
    return bool(math_verify().verify(parse(first), parse(second)))


def math_verified(first: str, second: str) -> bool:
    """`math_verify_equal`, False where it raises or gives no verdict in VERIFY_SECONDS: the
    public rewards' `try: ... except Exception: pass` around their verify."""
    try:
        return math_verify_equal(first, second)
    except Exception:
        return False


def parse(text: str, **options: Any) -> list:
    """math_verify.parse(text, **options), without what it prints where it cannot parse: the
    error with the whole text (a degenerate completion's 60,000 digits twice, sympy refusing
    integers over 4,300 digits) on stdout, at every such completion. Its result stands: []."""
    with contextlib.redirect_stdout(io.StringIO()):
        return math_verify().parse(text, **options)


# -- EasyR1 -------------------------------------------------------------------------------------
COLLAPSE = compile_pattern(r"\s*(<|>|/)\s*")
EASYR1_FORMAT = compile_pattern(r"<think>.*</think>.*\\boxed\{.*\}.*", regex.DOTALL)
FIRST_ANSWER_LINE = compile_pattern(r"<answer>(.*?)</answer>")  # no DOTALL: on one line


def easyr1_collapse(completion: str) -> str:
    """`re.sub(r"\\s*(<|>|/)\\s*", r"\\1", response)`: everywhere, also inside the answer."""
    try:
        return COLLAPSE.sub(r"\1", completion, timeout=0.25)
    except TimeoutError:
        return completion


def easyr1_format(completion: str) -> float:
    return 1.0 if fullmatch(EASYR1_FORMAT, easyr1_collapse(completion)) else 0.0


def easyr1_accuracy(completion: str, answer: str) -> float:
    return 1.0 if grade_answer(boxed_content(easyr1_collapse(completion)), answer) else 0.0


def easyr1_answer(completion: str) -> str | None:
    """The answer EasyR1 grades: the last box after the collapse (None for its "None")."""
    boxed = boxed_content(easyr1_collapse(completion))
    return None if boxed == NO_BOX else boxed


def r1v_answer(completion: str) -> str:
    """r1v.py: the first one-line <answer>, stripped, else the whole completion stripped."""
    match = search(FIRST_ANSWER_LINE, completion)
    return match.group(1).strip() if match else completion.strip()


def easyr1_r1v_accuracy(completion: str, answer: str) -> float:
    return 1.0 if grade_answer(r1v_answer(completion), answer.strip()) else 0.0


def easyr1_r1v_format(completion: str) -> float:
    return think_answer(completion)


# -- MM-Eureka ----------------------------------------------------------------------------------
END_TOKENS = ("<|im_end|>", "<｜end▁of▁sentence｜>", "<|endoftext|>")
TAGGED_ANSWER = compile_pattern(r"(<answer>.*?</answer>)")
CHOICES = ("a", "b", "c", "d")
MM_EUREKA_FORMAT = compile_pattern(
    r"^(?=(?:.*<think>){1})(?=(?:.*<\/think>){1})"
    r"(?=(?:.*<answer>){1})(?=(?:.*<\/answer>){1})"
    r"(?!.*<think>.*<think>)"
    r"(?!.*<\/think>.*<\/think>)"
    r"(?!.*<answer>.*<answer>)"
    r"(?!.*<\/answer>.*<\/answer>)"
    r".*<think>(.+?)</think>\s*<answer>.+?</answer>.*$",
    regex.DOTALL,
)


def chatml_response(completion: str, end_tokens: tuple[str, ...] = END_TOKENS) -> str:
    """get_response_from_query's cleaning: end-of-turn tokens removed everywhere, stripped."""
    for token in end_tokens:
        completion = completion.replace(token, "")
    return completion.strip()


@isolated(lambda: VERIFY_SECONDS, imports=("math_verify",))
def mm_eureka_accuracy(completion: str, answer: str) -> float:
    """accuracy_reward_func (an empty response scores 0, as reward_func's guard does)."""
    mv = math_verify()
    completion = chatml_response(completion)
    if not completion or len(completion) > MAX_VERIFY_CHARS:
        return 0.0
    match = search(TAGGED_ANSWER, completion)
    content = match.group(1) if match else completion.split("<answer>")[-1]
    gold = parse(f"${answer}$")
    if not gold:
        return 1.0  # "Failed to parse gold solution": a constant reward
    configs = [mv.StringExtractionConfig(), mv.LatexExtractionConfig(), mv.ExprExtractionConfig()]
    try:
        if mv.verify(parse(content, extraction_config=configs), gold):
            return 1.0
    except Exception:  # verify's own failures score 0 there
        pass
    line = search(FIRST_ANSWER_LINE, completion)
    student = (line.group(1).strip() if line else content.strip()).replace("</answer>", "").replace("<answer>", "")
    student = student.strip().lower()
    for item in gold:
        letter = str(item).lower()
        if letter in CHOICES and letter in student and all(c not in student for c in CHOICES if c != letter):
            return 1.0
    return 0.0


def mm_eureka_format(completion: str) -> float:
    completion = chatml_response(completion)
    return 1.0 if completion and search(MM_EUREKA_FORMAT, completion) else 0.0


# -- LMM-R1 -------------------------------------------------------------------------------------
# LMM-R1's math_verifier.py (TideDra/lmm-r1 @f917f18) removes Gemma's end of turn too
LMM_R1_END_TOKENS = (*END_TOKENS, "<end_of_turn>")
LMM_R1_FORMAT = compile_pattern(
    r"^<think>(?:(?!</think>).)*</think><answer>(?:(?!</answer>).)*</answer>\Z", regex.DOTALL
)


@isolated(lambda: VERIFY_SECONDS, imports=("math_verify",))
def lmm_r1_accuracy(completion: str, answer: str) -> float:
    """verify_math(response, answer) with the answer `$`-wrapped unless it starts with `$`: 1 for
    an answer that does not parse, whatever the response, as there. An empty response scores 0
    (LMM-R1 then parses the whole query instead: not available here)."""
    mv = math_verify()
    answer = answer if answer.startswith("$") else f"${answer}$"
    gold = parse(answer, extraction_mode="first_match", extraction_config=[mv.LatexExtractionConfig()])
    if not gold:
        return 1.0  # "Failed to parse gold solution"
    response = chatml_response(completion, LMM_R1_END_TOKENS)
    if not response or len(response) > MAX_VERIFY_CHARS:
        return 0.0
    normalization = mv.LatexNormalizationConfig(
        nits=False, malformed_operators=False, basic_latex=True, boxed="all", units=True
    )
    config = mv.LatexExtractionConfig(
        normalization_config=normalization, boxed_match_priority=0, try_extract_without_anchor=False
    )
    try:
        parsed = parse(response, extraction_config=[config], extraction_mode="first_match")
        return float(mv.verify(parsed, gold))
    except Exception:  # "Failed to verify"
        return 0.0


def lmm_r1_format(completion: str) -> float:
    response = chatml_response(completion, LMM_R1_END_TOKENS)
    ok = search(LMM_R1_FORMAT, response) and response.count("<think>") == 1 and response.count("<answer>") == 1
    return 1.0 if ok else 0.0


# -- VisualThinker-R1-Zero ---------------------------------------------------------------------
LETTER = compile_pattern(r"(^|\s|\[|\()([A-H])(\s|\]|\)|$)")


@isolated(lambda: VERIFY_SECONDS, imports=("math_verify",))
def visualthinker_accuracy(completion: str, answer: str) -> float:
    """accuracy_reward: math-verify (completion first, as there), then the first one-line
    <answer> equal to the truth, or its last standalone letter A-H equal to it."""
    math_verify()  # missing: ImportError with the install hint, not a silent string match
    if len(completion) > MAX_VERIFY_CHARS:
        return 0.0
    solution = f"<answer>{answer}</answer>"
    if math_verified(completion, solution):
        return 1.0
    truth = r1v_answer(solution)
    student = r1v_answer(completion)
    if student == truth:
        return 1.0
    letters = findall(LETTER, student)
    return 1.0 if letters and letters[-1][1] == truth else 0.0


def visualthinker_format(completion: str, prefilled_think: bool = True) -> float:
    """format_reward: the base prompt ends with `<think>`, which the completion continues."""
    return think_answer("<think>" + completion if prefilled_think else completion)


# -- Vision-R1 ----------------------------------------------------------------------------------
def hard_format_result(formatted: float, correct: float) -> float:
    """Vision-R1's hard formatting result reward (HFRRF, Osilly/Vision-R1 README and paper; its
    RL code is not published): 1 only when the format holds and the result is right, no partial
    credit for either alone."""
    return 1.0 if formatted == 1.0 and correct == 1.0 else 0.0
