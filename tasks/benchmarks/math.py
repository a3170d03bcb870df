"""Math and logic benchmarks as lmms-eval evaluates them (commit 75571cf): MathVista testmini,
MathVerse testmini, MathVision, DynaMath, LogicVista, WeMath, Math Kangaroo and Geometry3K, where lmms-eval's scoring
needs no judge model.

- `mathvista_testmini_cot` / `_solution` / `_format` (AI4Math/MathVista, lmms_eval/tasks/
  mathvista/utils.py and mathvista_evals.py): the step-by-step, solution and format-prompt
  queries; scored by the rule path lmms-eval takes before it asks its GPT judge to extract the
  answer, with the judge unavailable (offline its extraction is ""): a response that is exactly
  a choice, or (integer / float questions) parses as one, is the extraction; anything else is "".
  A multiple-choice extraction is then mapped to the Levenshtein-nearest choice (for "" the
  first shortest), an integer to int(float(x)), a float to round(x, precision) — which raises
  for the dataset's float64 precision, so no float question is ever right there (kept).
  Reported as lmms-eval's `llm_as_judge_eval`: percent correct, rounded to 2 places. lmms-eval
  reports None when it is 0; vlrl reports 0.0 (a deviation: a number, not a missing value).
  These numbers are lmms-eval's without a judge, not its judged numbers (`describe` says so).
- `mathvista_testmini_cot_reasoning` (mathvista/reasoning/) and `mathverse_testmini_reasoning`
  (CaraJ/MathVerse-lmmseval, mathverse/reasoning/): the reasoning system prompt, and
  `_task_utils/reasoning_utils.py`'s compute_score, fully rule-based (its judge is off unless
  USE_LLM_JUDGE=True): `acc_score` and `format_score`, means. They need math-verify (vlrl[math]).
  The other MathVerse tasks are judge-only (every sample scores 0 offline) and are not offered.
- `mathvision_reason_testmini_reasoning` / `mathvision_reason_test_reasoning` (MathLLMs/MathVision,
  mathvision/reasoning/utils.py): MathVision's boxed-answer query, the reasoning system prompt,
  compute_score against the answer (an option letter, or the value). They need math-verify. The
  standard `mathvision_testmini` / `_test` score with MATH-V's eval_utils, which runs latex2sympy's
  rendering of the response as Python code, and are not offered.
- `dynamath_reasoning` (kcz358/DynaMath, dynamath/reasoning/utils.py): the question, the
  reasoning system prompt, compute_score against `ground_truth`; `dynamath_average` and
  `dynamath_worst`: the rows grouped by their `id`, each group's mean (or minimum) accuracy,
  averaged over the groups. They need math-verify.
- `logicvista_reasoning` (lscpku/LogicVista, logicvista/reasoning/utils.py): the question, the
  reasoning system prompt, compute_score against `answer`. It needs math-verify.
- `mathkangaroo` (dfkiuser/kangaroo_math_mc_questions, mathkangaroo/utils.py): Math Kangaroo's
  five-option problems, the question stripped + "\nAnswer with the option letter (A, B, C, D, or
  E) only."; the letter after "answer", "final answer" or "option" (any case), else the last line
  that is only a letter, else the last standalone letter A-E; right when it is among the letters
  of `ground_truth`. 64 new tokens.
- `wemath_testmini_reasoning` (We-Math/We-Math, wemath/reasoning/utils.py and wemath_utils.py):
  the question and its options, the reasoning system prompt, compute_score against `answer`;
  `acc_score`, `format_score`, and WeMath's four-dimensional `wemath_loose` / `wemath_strict`
  (`wemath_score`). It needs math-verify.
- `geometry3k` (Yang130/geometry3k_4choices_mixed, geometry3k/utils.py): four choices, the
  letter read by four patterns in order (the last match of the first that matches), else the
  first choice whose text the response contains; `exact_match`, the mean.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import regex
from PIL import Image

from rewards.ocr import levenshtein
from rewards.text import compile_pattern, findall, fullmatch, search
from tasks.benchmarks import LMMS_EVAL, lettered
from tasks.benchmarks.counting import dot_scenes
from tasks.benchmarks.reasoning import LETTERS, ComputeScored, reasoning_score
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, mean, variants

# -- MathVista's query (MathVistaEvaluator.create_one_query, zero-shot, no caption / OCR) -------------
MC_HINT = "Hint: Please answer the question and provide the correct option letter, e.g., A, B, C, D, at the end."
FREE_HINTS = {
    "integer": "Hint: Please answer the question requiring an integer answer and provide the final value, e.g., 1, 2, 3, at the end.",
    ("float", 1): "Hint: Please answer the question requiring a floating-point number with one decimal place and provide the final value, e.g., 1.2, 1.3, 1.4, at the end.",
    ("float", 2): "Hint: Please answer the question requiring a floating-point number with two decimal places and provide the final value, e.g., 1.23, 1.34, 1.45, at the end.",
    "list": "Hint: Please answer the question requiring a Python list as an answer and provide the final list, e.g., [1, 2, 3], [1.2, 1.3, 1.4], at the end.",
}  # fmt: skip
FORMAT_HINTS = {
    "multi_choice": "Answer with the option's letter from the given choices directly.",
    "integer": "Answer the question using a single integer number.",
    ("float", 1): "Answer the question using a single floating-point number with one decimal place.",
    ("float", 2): "Answer the question using a single floating-point number with two decimal places.",
    "list": "Answer the question using a Python list.",
}


def _hint_key(answer_type: str, precision: Any) -> Any:
    return ("float", precision) if answer_type == "float" else answer_type


def mathvista_query(doc: dict[str, Any], shot_type: str) -> str:
    """The zero-shot query for `step-by-step`, `solution` or `format-prompt`; ValueError where
    lmms-eval has no hint (a float question whose precision is neither 1 nor 2)."""
    multi = doc["question_type"] == "multi_choice"
    key = "multi_choice" if multi else _hint_key(doc["answer_type"], doc.get("precision"))
    hints = FORMAT_HINTS if shot_type == "format-prompt" else {"multi_choice": MC_HINT, **FREE_HINTS}
    if key not in hints:
        raise ValueError(
            f"no MathVista hint for answer_type {doc['answer_type']!r}, precision {doc.get('precision')!r}"
        )
    question = doc["question"] if shot_type == "format-prompt" else f"Question: {doc['question']}"
    if doc.get("unit"):
        question += f" (Unit: {doc['unit']})"
    choices = doc.get("choices") or []
    if not choices:
        choices_text = ""
    elif shot_type == "format-prompt":
        choices_text = lettered(choices)
    else:
        choices_text = "\n".join(["Choices:", *(f"({chr(65 + i)}) {c}" for i, c in enumerate(choices))])
    ending = "Solution: " if shot_type == "solution" else ""
    query = "\n".join(e for e in (question, choices_text, hints[key], ending) if e != "")
    return ("\n\n" + query).strip()


PAREN_LETTER = compile_pattern(r"\(([a-zA-Z])\)")


def mathvista_correct(response: str, doc: dict[str, Any]) -> bool:
    """mathvista_process_results with the judge unavailable: extract, normalize, safe_equal."""
    response = response.strip()
    choices, qtype, atype = doc.get("choices") or [], doc["question_type"], doc["answer_type"]
    extraction = ""
    if response and qtype == "multi_choice" and response in choices:
        extraction = response
    elif response and atype == "integer":
        try:
            extraction = str(int(response))
        except ValueError:
            pass
    elif response and atype == "float":
        try:
            extraction = str(float(response))
        except ValueError:
            pass
    prediction: Any
    if qtype == "multi_choice":
        extraction = extraction.strip()
        letters = findall(PAREN_LETTER, extraction)
        if letters:
            extraction = letters[0].upper()
        options = [chr(65 + i) for i in range(len(choices))]
        if extraction in options:
            prediction = choices[options.index(extraction)]
        else:
            distances = [levenshtein(extraction, c, cap=None) for c in choices]
            prediction = choices[distances.index(min(distances))]
    elif atype == "integer":
        try:
            prediction = str(int(float(extraction)))
        except (ValueError, OverflowError):
            prediction = None
    elif atype == "float":
        try:
            prediction = str(round(float(extraction), doc.get("precision", 0)))
        except (ValueError, TypeError, OverflowError):
            prediction = None  # a float64 precision: round() raises, as it does there
    else:
        prediction = str(extraction)
    answer = doc.get("answer")
    return answer is not None and str(prediction).strip() == str(answer).strip()


# -- Geometry3K -------------------------------------------------------------------------------------------
_B = r"(?:(?<=\w)(?!\w)|(?<!\w)(?=\w))"  # \b, which rewards.text cannot compile as it is
GEO3K_PATTERNS = [
    compile_pattern(r"[Aa]nswer\s*[:=]\s*\(?([A-Da-d])\)?"),
    compile_pattern(_B + r"([A-Da-d])\s*[.)\]]"),
    compile_pattern(r"^\s*\(?([A-Da-d])\)?$"),
    compile_pattern(_B + r"([A-Da-d])" + _B),
]
GEO3K_POST_PROMPT = "\nAnswer with the option's letter from the given choices directly."


def geometry3k_letter(response: str, choices: Sequence[str]) -> str:
    """_extract_answer_letter."""
    response = response.strip()
    for pattern in GEO3K_PATTERNS:
        matches = findall(pattern, response)
        for match in reversed(matches):
            if match.upper() in "ABCD":
                return match.upper()
    for index, choice in enumerate(choices):
        if choice.lower() in response.lower():
            return "ABCD"[index]
    return ""


# -- the benchmarks ------------------------------------------------------------------------------------------
class _MathBenchmark(Benchmark):
    reference = LMMS_EVAL

    def _sample(self, record, ctx, prompt: str, truth: Any, image_key: str) -> list[Sample]:
        return row_sample(self.name, ctx, prompt, truth, [record_image(record, ctx, (image_key,))])

    def synthetic_rows(self, size: int, seed: int):
        return (self._synthetic_row(*scene) for scene in dot_scenes(size, seed, fill=(30, 30, 200)))


MATHVISTA_COLUMNS = (
    Column("pid", "string"), Column("question", "string"), Column("decoded_image", "image"),
    Column("choices", "list<string>"), Column("unit", "string", required=False),
    Column("precision", "number", required=False), Column("answer", "string"), Column("question_type", "string"),
    Column("answer_type", "string"),
)  # fmt: skip
MATHVISTA_SCHEMA = pa.schema(
    [("pid", pa.string()), ("question", pa.string()), ("image", pa.string()), ("decoded_image", IMAGE_TYPE),
     ("choices", pa.list_(pa.string())), ("unit", pa.string()), ("precision", pa.float64()), ("answer", pa.string()),
     ("question_type", pa.string()), ("answer_type", pa.string()), ("query", pa.string())]
)  # fmt: skip
DOC_KEYS = ("question", "choices", "unit", "precision", "answer", "question_type", "answer_type")


class MathVista(_MathBenchmark):
    """lmms_eval/tasks/mathvista: the judge-free path of mathvista_process_results."""

    columns = MATHVISTA_COLUMNS
    schema = MATHVISTA_SCHEMA
    max_new_tokens = 16384
    shot_type = "step-by-step"

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        doc = {key: record.get(key) for key in DOC_KEYS}
        if doc["question_type"] not in ("multi_choice", "free_form"):
            raise ctx.error(f"question_type must be multi_choice or free_form, got {doc['question_type']!r}")
        if doc["question_type"] == "multi_choice" and (not doc["choices"] or doc["answer"] not in doc["choices"]):
            raise ctx.error("a multi_choice question needs its choices, the answer among them")
        try:
            prompt = mathvista_query(doc, self.shot_type)
        except ValueError as err:
            raise ctx.error(str(err)) from err
        return self._sample(record, ctx, prompt, self._truth(doc), "decoded_image")

    def _truth(self, doc: dict[str, Any]) -> Any:
        return doc

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        return {"llm_as_judge_eval": 1.0 if mathvista_correct(completion, sample.solution) else 0.0}

    def aggregations(self):
        return {"llm_as_judge_eval": lambda items: round(mean(items) * 100, 2)}

    def describe(self, frame) -> dict[str, Any]:
        return {**super().describe(frame), "judge": "none (lmms-eval's extraction with its judge unavailable)"}

    def _synthetic_row(self, image: Image.Image, count: int, index: int) -> dict[str, Any]:
        kind = index % 3
        choices = [str(count - index % 4 + d) for d in range(4)] if kind == 0 else None
        atype, precision = ("text", None) if kind == 0 else ("integer", None) if kind == 1 else ("float", 1.0)
        answer = str(count) if kind < 2 else f"{count / 2:.1f}"
        question = "How many dots are there?" if kind < 2 else "What is half the number of dots?"
        return {"pid": str(index), "question": question, "image": f"images/{index}.png",
                "decoded_image": image_cell(image, f"{index}.png"), "choices": choices, "unit": None if kind else "",
                "precision": precision, "answer": answer, "question_type": "multi_choice" if kind == 0 else "free_form",
                "answer_type": atype, "query": question}  # fmt: skip


class MathVistaReasoning(ComputeScored, MathVista):
    """lmms_eval/tasks/mathvista/reasoning: the step-by-step query, the reasoning system prompt,
    compute_score against the option letter (multiple choice) or the answer."""

    def _truth(self, doc: dict[str, Any]) -> Any:
        choices = doc["choices"]
        if choices and doc["question_type"] == "multi_choice":
            return LETTERS[choices.index(doc["answer"])]
        return doc["answer"]

    def describe(self, frame) -> dict[str, Any]:
        return Benchmark.describe(self, frame)


MATHVERSE_SCHEMA = pa.schema(
    [("sample_index", pa.string()), ("problem_index", pa.string()), ("problem_version", pa.string()),
     ("question", pa.string()), ("image", IMAGE_TYPE), ("answer", pa.string()), ("question_type", pa.string()),
     ("query_wo", pa.string()), ("query_cot", pa.string()), ("question_for_eval", pa.string())]
)  # fmt: skip


class MathVerseReasoning(ComputeScored, _MathBenchmark):
    """lmms_eval/tasks/mathverse/reasoning: query_wo (format-prompt), the reasoning system
    prompt, compute_score against the answer."""

    columns = (Column("image", "image"), Column("query_wo", "string"), Column("answer", "string"))
    schema = MATHVERSE_SCHEMA

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        return self._sample(record, ctx, ("\n\n" + record["query_wo"]).strip(), record["answer"], "image")

    def _synthetic_row(self, image: Image.Image, count: int, index: int) -> dict[str, Any]:
        query = "According to the question shown in the image, please directly answer the question.\nQuestion: How many dots are there?"
        return {"sample_index": str(index), "problem_index": str(index), "problem_version": "Vision Intensive",
                "question": "How many dots are there?", "image": image_cell(image, f"{index}.png"), "answer": str(count),
                "question_type": "free-form", "query_wo": query, "query_cot": query, "question_for_eval": query}  # fmt: skip


MATHVISION_SCHEMA = pa.schema(
    [("id", pa.string()), ("question", pa.string()), ("options", pa.list_(pa.string())), ("image", pa.string()),
     ("decoded_image", IMAGE_TYPE), ("answer", pa.string()), ("solution", pa.string()), ("level", pa.int64()),
     ("subject", pa.string())]
)  # fmt: skip


def mathvision_query(question: str, options: Sequence[str]) -> str:
    """mathvision/reasoning/utils.py mathvision_doc_to_text with no lmms_eval_specific_kwargs (the
    reasoning yaml names none, so no mc_prompt): the instruction and the question run together."""
    query = 'Please solve the problem step by step and put your answer in one "\\boxed{}".'
    choices = "\n".join(f"{chr(ord('A') + i)}. {option}" for i, option in enumerate(options))
    return query + (f"{question}\nChoices: {choices}" if choices else question)


class MathVisionReasoning(ComputeScored, _MathBenchmark):
    """lmms_eval/tasks/mathvision/reasoning: the query (stripped by make_reasoning_doc_to_messages),
    the reasoning system prompt, compute_score against `answer` as given (a letter where there
    are options); a simple model class cuts answers at its yaml's `until`."""

    columns = (Column("question", "string"), Column("options", "list<string>"),
               Column("decoded_image", "image"), Column("answer", "string"))  # fmt: skip
    schema = MATHVISION_SCHEMA
    until = ("</s>", "Q:", "<|im_end|>")  # reasoning/_default_template_yaml

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        prompt = mathvision_query(record["question"], record["options"] or []).strip()
        return self._sample(record, ctx, prompt, record["answer"], "decoded_image")

    def _synthetic_row(self, image: Image.Image, count: int, index: int) -> dict[str, Any]:
        options = [str(count + d) for d in (-1, 0, 1, 2)] if index % 2 == 0 else []
        return {"id": str(index), "question": "<image1>\nHow many dots are there?", "options": options,
                "image": f"images/{index}.jpg", "decoded_image": image_cell(image, f"{index}.jpg"),
                "answer": "B" if options else str(count), "solution": None, "level": 1 + index % 5,
                "subject": "counting"}  # fmt: skip


class DynaMathReasoning(ComputeScored, _MathBenchmark):
    """lmms_eval/tasks/dynamath/reasoning: the question as written, compute_score against
    `ground_truth`; process_results keeps the accuracy with the row's `id` for the grouped means."""

    doc_to_target = "ground_truth"
    columns = (Column("id", "string|int"), Column("question", "string"), Column("decoded_image", "image"),
               Column("ground_truth", "string"))  # fmt: skip
    schema = pa.schema([("id", pa.int64()), ("question_id", pa.int64()), ("question", pa.string()),
                        ("decoded_image", IMAGE_TYPE), ("ground_truth", pa.string())])  # fmt: skip

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        truth = {"answer": ctx.get(record, "ground_truth", str, "the answer"), "id": record["id"]}
        return self._sample(record, ctx, record["question"].strip(), truth, "decoded_image")

    def truth(self, sample: Sample) -> str:
        return sample.solution["answer"]

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        acc, _ = reasoning_score(completion.strip(), self.truth(sample))
        kept = {"acc": acc, "variant_id": sample.solution["id"]}
        return {"dynamath_average": kept, "dynamath_worst": kept}

    def aggregations(self):
        return {
            "dynamath_average": lambda items: _grouped(items, mean),
            "dynamath_worst": lambda items: _grouped(items, min),
        }

    def _synthetic_row(self, image: Image.Image, count: int, index: int) -> dict[str, Any]:
        return {"id": index % 3, "question_id": index, "question": "How many dots are there?",
                "decoded_image": image_cell(image, f"{index}.png"), "ground_truth": str(count)}  # fmt: skip


def _grouped(items: Sequence[dict[str, Any]], within: Callable[[list[float]], float]) -> float:
    """dynamath_aggregate_results: `within` (mean or min) of each `variant_id` group's
    accuracies, the mean over the groups."""
    groups: dict[Any, list[float]] = {}
    for item in items:
        groups.setdefault(item["variant_id"], []).append(item["acc"])
    return sum(within(accs) for accs in groups.values()) / len(groups)


class LogicVistaReasoning(ComputeScored, _MathBenchmark):
    """lmms_eval/tasks/logicvista/reasoning: the question as written, compute_score against `answer`."""

    columns = (Column("question", "string"), Column("image", "image"), Column("answer", "string"))
    schema = pa.schema([("question", pa.string()), ("image", IMAGE_TYPE), ("answer", pa.string())])

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        return self._sample(record, ctx, record["question"].strip(), record["answer"], "image")

    def _synthetic_row(self, image: Image.Image, count: int, index: int) -> dict[str, Any]:
        options = "\n".join(f"{letter}. {count + d}" for letter, d in zip("ABCD", (-1, 0, 1, 2), strict=True))
        question = f"How many dots are there?\n{options}" if index % 2 else "How many dots are there?"
        return {
            "question": question,
            "image": image_cell(image, f"{index}.png"),
            "answer": "B" if index % 2 else str(count),
        }


WEMATH_PROBLEMS = 525  # compute_final_scores' total_count and update_main_results_df's constant


def wemath_score(items: Sequence[dict[str, Any]], strict: bool) -> float:
    """wemath_aggregate_results: each multi-step problem (rows keyed "2steps_1", "2steps_2",
    "2steps_multi", or the three steps of "3steps_*", sharing an `ID`) as pandas' left merges
    of process_steps_data pair them (every row of step 1 with every row of each later step of
    its ID, a missing one neither right nor wrong); each pairing counted by calculate_metrics'
    rules: insufficient knowledge (a step wrong, the whole wrong), inadequate generalization
    (every step right, the whole wrong), rote memorization (loose: every step wrong, strict:
    one step wrong, and the whole right). The score, update_main_results_df's: (525 - IG / 2 -
    RM - IK) / 525 as a percent with two decimals ("{:.2%}"), returned as that number where
    lmms-eval returns the string. lmms-eval's rates, which it computes first and divides by
    zero when no problem is mastered or memorized, are not computed."""
    rows: dict[tuple[str, Any], list[bool]] = {}  # (key, ID) -> whether each such row is right
    for item in items:
        rows.setdefault((item["key"], item["ID"]), []).append(item["acc_score"] == 1.0)
    penalty = 0.0
    for steps in (2, 3):
        keys = [f"{steps}steps_{i}" for i in range(1, steps + 1)] + [f"{steps}steps_multi"]
        for key, problem in [k for k in rows if k[0] == keys[0]]:
            for first in rows[(key, problem)]:
                for rest in itertools.product(*(rows.get((k, problem), [None]) for k in keys[1:])):
                    *later, whole = rest
                    parts = [first, *later]
                    every_right, some_wrong = all(p is True for p in parts), any(p is False for p in parts)
                    memorized = some_wrong if strict else all(p is False for p in parts)
                    penalty += (0.5 if every_right else 0.0) * (whole is False)
                    penalty += (memorized and whole is True) + (some_wrong and whole is False)
    return float(f"{(WEMATH_PROBLEMS - penalty) / WEMATH_PROBLEMS:.2%}"[:-1])


class WeMathReasoning(ComputeScored, _MathBenchmark):
    """lmms_eval/tasks/wemath/reasoning: the question, "\\n" and the options; compute_score
    against `answer`; the per-row accuracy kept with the row's `ID` and `key` for `wemath_score`."""

    columns = (Column("ID", "string"), Column("key", "string"), Column("question", "string"),
               Column("option", "string"), Column("answer", "string"), Column("image_path", "image"))  # fmt: skip
    schema = pa.schema([("ID", pa.string()), ("split", pa.string()), ("knowledge concept", pa.string()),
                        ("question", pa.string()), ("option", pa.string()), ("answer", pa.string()),
                        ("image_path", IMAGE_TYPE), ("key", pa.string()), ("question number", pa.int64()),
                        ("knowledge concept description", pa.string())])  # fmt: skip

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        prompt = (record["question"] + "\n" + record["option"]).strip()
        truth = {"answer": ctx.get(record, "answer", str, "the answer"), "ID": record["ID"], "key": record["key"]}
        return self._sample(record, ctx, prompt, truth, "image_path")

    def truth(self, sample: Sample) -> str:
        return sample.solution["answer"]

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        values = super().process(completion, sample)
        kept = {"ID": sample.solution["ID"], "key": sample.solution["key"], "acc_score": values["acc_score"]}
        return {"wemath_loose": kept, "wemath_strict": kept, **values}

    def aggregations(self):
        return {"wemath_loose": lambda items: wemath_score(items, strict=False),
                "wemath_strict": lambda items: wemath_score(items, strict=True), **super().aggregations()}  # fmt: skip

    def _synthetic_row(self, image: Image.Image, count: int, index: int) -> dict[str, Any]:
        """Problems of two steps and a whole (three rows), of three steps and a whole (four), and one-step rows."""
        keys = ["2steps_1", "2steps_2", "2steps_multi", "3steps_1", "3steps_2", "3steps_3", "3steps_multi", "1step"]
        key = keys[index % len(keys)]
        problem = f"{index // len(keys)}-{key[0]}"
        options = "A. " + str(count - 1) + "; B. " + str(count) + "; C. " + str(count + 1)
        return {"ID": problem, "split": "testmini", "knowledge concept": "counting", "question": "How many dots?",
                "option": options, "answer": "B", "image_path": image_cell(image, f"{index}.png"), "key": key,
                "question number": index, "knowledge concept description": "counting dots"}  # fmt: skip


KANGAROO_POST_PROMPT = "\nAnswer with the option letter (A, B, C, D, or E) only."
KANGAROO_STATED = compile_pattern(r"(?:final\s+answer|answer|option)\s*(?:is|:)?\s*\(?([A-E])\)?", regex.IGNORECASE)
KANGAROO_LINE = compile_pattern(r"\(?([A-E])\)?[\.)]?")
# `\b([A-E])\b` there: a letter is a word character, so its boundaries are no word character beside it
KANGAROO_STANDALONE = compile_pattern(r"(?<!\w)([A-E])(?!\w)")
KANGAROO_LETTER = compile_pattern(r"[A-E]")


def kangaroo_letter(response: str) -> str:
    """mathkangaroo/utils.py _extract_prediction."""
    text = response.strip()
    if (stated := search(KANGAROO_STATED, text)) is not None:
        return stated.group(1).upper()
    for line in reversed(text.splitlines()):
        line = line.strip().upper()
        if line and (alone := fullmatch(KANGAROO_LINE, line)) is not None:
            return alone.group(1)
    candidates = findall(KANGAROO_STANDALONE, text.upper())
    return candidates[-1] if candidates else ""


class MathKangaroo(_MathBenchmark):
    """lmms_eval/tasks/mathkangaroo/utils.py with the default kwargs."""

    doc_to_target = "ground_truth"
    columns = (Column("question", "string", required=False), Column("image", "image", required=False),
               Column("ground_truth", "string"))  # fmt: skip
    schema = pa.schema([("question", pa.string()), ("image", IMAGE_TYPE), ("ground_truth", pa.string())])
    max_new_tokens = 64

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        prompt = str(record.get("question", "")).strip() + KANGAROO_POST_PROMPT  # a null question reads "None", kept
        images = [record_image(record, ctx)] if record.get("image") else []
        truth = sorted(set(findall(KANGAROO_LETTER, str(record["ground_truth"] or "").upper())))
        return row_sample(self.name, ctx, prompt, truth, images)

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        letter = kangaroo_letter(completion)
        return {"mathkangaroo_accuracy": 1.0 if letter and letter in sample.solution else 0.0}

    def aggregations(self):
        return {"mathkangaroo_accuracy": mean}

    def _synthetic_row(self, image: Image.Image, count: int, index: int) -> dict[str, Any]:
        right = "ABCDE"[index % 5]
        options = " ".join(f"({letter}) {count - 'ABCDE'.index(right) + k}" for k, letter in enumerate("ABCDE"))
        return {"question": f" How many dots are there? {options} ", "image": image_cell(image, f"{index}.png") if index % 3 != 2 else None,
                "ground_truth": right if index % 4 else f"{right}, {'ABCDE'[(index + 1) % 5]}"}  # fmt: skip


class Geometry3K(_MathBenchmark):
    """lmms_eval/tasks/geometry3k/utils.py (default post_prompt)."""

    doc_to_target = "ground_truth"
    columns = (Column("images", "list<image>"), Column("problem", "string"), Column("choices", "list<string>"),
               Column("ground_truth", "string"))  # fmt: skip
    schema = pa.schema([("images", pa.list_(IMAGE_TYPE)), ("problem", pa.string()), ("choices", pa.list_(pa.string())),
                        ("ground_truth", pa.string())])  # fmt: skip
    max_new_tokens = 1024

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        choices = record["choices"] or []
        options = "\n".join(f"{letter}. {choice}" for letter, choice in zip("ABCD", choices, strict=False))
        prompt = f"{record['problem']}\n{options}{GEO3K_POST_PROMPT}"
        images = record["images"] or []
        if not images:
            raise ctx.error("'images' is empty: geometry3k shows the first image")
        truth = {"ground_truth": record["ground_truth"], "choices": choices}
        return self._sample({"image": images[0]}, ctx, prompt, truth, "image")

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        pred = geometry3k_letter(completion, sample.solution["choices"])
        return {"exact_match": 1.0 if pred and pred == sample.solution["ground_truth"].strip().upper() else 0.0}

    def aggregations(self):
        return {"exact_match": mean}

    def _synthetic_row(self, image: Image.Image, count: int, index: int) -> dict[str, Any]:
        choices = [str(n) for n in (count + 2, count, count + 1, count + 3)]
        return {"images": [image_cell(image, f"{index}.png")], "problem": "How many dots are there?",
                "choices": choices, "ground_truth": "B"}  # fmt: skip


MATHVISTA = "AI4Math/MathVista"
BENCHMARKS = variants(MathVista, [
    {"name": "mathvista_testmini_cot", "split": "testmini", "dataset": MATHVISTA, "shot_type": "step-by-step",
     "description": "MathVista testmini, lmms-eval's step-by-step query, scored without its GPT judge"},
    {"name": "mathvista_testmini_solution", "split": "testmini", "dataset": MATHVISTA, "shot_type": "solution",
     "description": "MathVista testmini, lmms-eval's solution query, scored without its GPT judge"},
    {"name": "mathvista_testmini_format", "split": "testmini", "dataset": MATHVISTA, "shot_type": "format-prompt",
     "description": "MathVista testmini, lmms-eval's format prompt, scored without its GPT judge"},
])  # fmt: skip
RULE_BASED = "with lmms-eval's reasoning prompt and rule-based score (math-verify)"
for family, rows in (
    (MathVistaReasoning, [{"name": "mathvista_testmini_cot_reasoning", "split": "testmini", "dataset": MATHVISTA,
                           "description": f"MathVista testmini {RULE_BASED}"}]),
    (MathVerseReasoning, [{"name": "mathverse_testmini_reasoning", "split": "testmini",
                           "dataset": "CaraJ/MathVerse-lmmseval", "description": f"MathVerse testmini {RULE_BASED}"}]),
    (MathVisionReasoning, [{"name": f"mathvision_reason_{split}_reasoning", "split": split,
                            "dataset": "MathLLMs/MathVision", "description": f"MathVision {split} {RULE_BASED}"}
                           for split in ("testmini", "test")]),
    (DynaMathReasoning, [{"name": "dynamath_reasoning", "split": "test", "dataset": "kcz358/DynaMath",
                          "description": f"DynaMath {RULE_BASED}: average and worst case"}]),
    (LogicVistaReasoning, [{"name": "logicvista_reasoning", "split": "test", "dataset": "lscpku/LogicVista",
                            "description": f"LogicVista {RULE_BASED}"}]),
    (WeMathReasoning, [{"name": "wemath_testmini_reasoning", "split": "testmini", "dataset": "We-Math/We-Math",
                        "description": f"WeMath testmini {RULE_BASED} and four-dimensional metric"}]),
    (MathKangaroo, [{"name": "mathkangaroo", "split": "train", "dataset": "dfkiuser/kangaroo_math_mc_questions",
                     "description": "Math Kangaroo (five options), lmms-eval's mathkangaroo: the option letter"}]),
):  # fmt: skip
    BENCHMARKS |= variants(family, rows)
BENCHMARKS |= variants(Geometry3K, [
    {"name": "geometry3k", "split": "test", "dataset": "Yang130/geometry3k_4choices_mixed",
     "description": "Geometry3K (four choices), lmms-eval's geometry3k: the option letter"}])  # fmt: skip
