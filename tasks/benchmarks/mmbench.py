"""MMBench (English, dev) as lmms-eval scores it without a judge (commit 75571cf):
`mmbench_en_dev_static` (lmms_eval/tasks/mmbench/{en_utils.py, mmbench_evals.py}) on
lmms-lab-encoder/MMBench, its `en` config @ dev (index, question, hint, answer, A-D, category,
L2-category, image; a question's circular copies hold index + k x 1,000,000, their options
rotated).

- Prompt: the hint, " ", where there is one (None or "nan" is none; "" is one, so the prompt
  starts with a space, kept), the question, " There are several options:" and each option
  "\\nA. ..." (options that are empty, None or "nan" left out), then "\\n\\nAnswer with the
  option's letter from the given choices directly." (the post prompt begins with the newline
  the code also adds, kept); answers cut at "ASSISTANT:"; 1,024 new tokens.
- A response's letter (MMBench_Evaluator.can_infer on the stripped response): the one
  whitespace-separated word among A-E, when exactly one is (but not when the word "A" stands
  in a response of more than three words: "A" may be an article); else the one word "B." (or
  "B,", "B:", "B)", "B).", "(B)", "(B).", ":B", ":B,", ":B.", ":B)", ":B)."), trying those forms
  in order; else the one option (A-D, lower-cased) whose text the lower-cased response holds;
  else extract_mcq_answer over the row's options (tasks/benchmarks/mcq_extract.py).
- Circular evaluation: a question is right only when it and each of its copies in the set are
  (every copy's letter its own answer). `gpt_eval_score`: the share right of the questions
  (index < 1,000,000) x 100. The test split holds no answers and is not offered.
"""

from __future__ import annotations

import math
from typing import Any

import pyarrow as pa
from PIL import Image

from tasks.benchmarks import LMMS_EVAL
from tasks.benchmarks.counting import dot_scenes
from tasks.benchmarks.mcq_extract import extract_mcq_answer
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, variants

SYS_PROMPT = "There are several options:"  # mmbench.yaml metadata.sys_prompt
POST_PROMPT = "\nAnswer with the option's letter from the given choices directly."
LETTERS = "ABCDE"  # the option columns the prompt reads; the scoring reads A-D
CIRCULAR = 1_000_000
SCHEMA = pa.schema(
    [("index", pa.int64()), ("question", pa.string()), ("hint", pa.string()), ("answer", pa.string()),
     *[(letter, pa.string()) for letter in "ABCD"], ("category", pa.string()), ("image", IMAGE_TYPE),
     ("source", pa.string()), ("L2-category", pa.string()), ("comment", pa.string()), ("split", pa.string())]
)  # fmt: skip
# can_infer_option's (prefix, suffix) forms of a letter, in the order it tries them
FORMS = (("", "."), ("", ","), ("", ":"), ("", ")"), ("", ")."), ("(", ")"), ("(", ")."), (":", ""), (":", ","),
         (":", "."), (":", ")"), (":", ")."))  # fmt: skip


def missing(value: Any) -> bool:
    """pd.isna of a cell: None or a float NaN."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def mmbench_prompt(record: dict[str, Any], question: str) -> str:
    """mmbench_doc_to_text with the default kwargs (create_options_prompt's options)."""
    options = {key: record[key] for key in sorted(set(record) & set(LETTERS)) if record[key]}
    lines = "".join(f"{key}. {item}\n" for key, item in options.items() if not missing(item) and item != "nan")
    listed = f"{SYS_PROMPT}\n{lines}".rstrip("\n")
    hint = record.get("hint")
    query = f"{hint} {question} {listed}" if not missing(hint) and hint != "nan" else f"{question} {listed}"
    return f"{query}\n{POST_PROMPT}"


def infer_option(answer: str) -> str:
    """can_infer_option (num_choice 5): a letter written as a word of its own, or in one form."""
    words = [word.strip() for word in answer.split()]
    if "Failed to obtain answer via API" in answer:
        return ""
    if sum(1 for c in LETTERS if c in words) == 1 and not ("A" in words and len(words) > 3):
        return next(c for c in LETTERS if c in words)
    for prefix, suffix in FORMS:
        found = [c for c in LETTERS if prefix + c + suffix in words]
        if len(found) == 1:
            return found[0]
    return ""


def infer_text(answer: str, choices: dict[str, Any]) -> str:
    """can_infer_text: the one option whose lower-cased text the lower-cased answer holds."""
    found = [key for key, text in choices.items() if str(text).lower() in answer.lower()]
    return found[0] if len(found) == 1 else ""


def copy_right(item: dict[str, Any]) -> bool:
    """One row of eval_sub_data (static_only): can_infer's letter, else extract_mcq_answer's."""
    choices = {c: item[c] for c in "ABCD" if not missing(item[c])}  # build_choices
    letter = infer_option(item["prediction"]) or infer_text(item["prediction"], choices)
    if not letter:
        letter = extract_mcq_answer(item["prediction"], choices=sorted(choices))
    return bool(letter) and letter == item["answer"]


def circular_score(items: list[dict[str, Any]]) -> float:
    """MMBench_Evaluator.eval_result(eval_method="static") x 100: each question (index below
    1e6) right when every item of its index modulo 1e6 is; the mean over the questions (NaN
    without any)."""
    by_question: dict[int, list[dict[str, Any]]] = {}
    for item in items:
        by_question.setdefault(item["index"] % CIRCULAR, []).append(item)
    main = [item["index"] for item in items if item["index"] < CIRCULAR]
    right = {index: all(copy_right(item) for item in by_question[index]) for index in set(main)}
    return sum(right[index] for index in main) / len(main) * 100 if main else math.nan  # pandas' mean of none


class MMBench(Benchmark):
    """en_utils.py and mmbench_evals.py's static evaluation, with the default kwargs."""

    reference = LMMS_EVAL
    columns = (Column("index", "int"), Column("question", "string"), Column("answer", "string"),
               *[Column(letter, "string", required=False) for letter in LETTERS],
               Column("hint", "string", required=False), Column("image", "image"))  # fmt: skip
    schema = SCHEMA
    until = ("ASSISTANT:",)
    max_new_tokens = 1024

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        prompt = mmbench_prompt(record, ctx.get(record, "question", str, "the question"))
        truth = {"index": ctx.get(record, "index", int, "the question's index (+ k x 1,000,000 for a copy)"),
                 "answer": ctx.get(record, "answer", str, "the right option's letter"),
                 **{c: record.get(c, "nan") for c in "ABCD"}}  # fmt: skip
        return row_sample(self.name, ctx, prompt, truth, [record_image(record, ctx)])

    def process(self, response: str, sample: Sample) -> dict[str, Any]:
        """mmbench_process_results: the response beside the row's answer and options."""
        return {"gpt_eval_score": {**sample.solution, "prediction": response.strip()}}

    def aggregations(self):
        return {"gpt_eval_score": circular_score}

    def synthetic_rows(self, size: int, seed: int):
        scenes = list(dot_scenes((size + 1) // 2, seed, fill=(90, 60, 170)))
        return (synthetic_row(*scenes[index // 2][:2], index) for index in range(size))


def synthetic_row(image: Image.Image, count: int, index: int) -> dict[str, Any]:
    """A counting question; rows 2k and 2k + 1 are one question and its circular copy (the same
    image, index + 1e6, the options rotated by one); one question in three has three options,
    hints vary (text, none, empty)."""
    question, copy = divmod(index, 2)
    n = 3 if question % 3 == 2 else 4
    options = [str(count + k - question % n) for k in range(n)]
    options = options[copy:] + options[:copy]
    answer = "ABCD"[options.index(str(count))]
    hint = ("Count every dot.", None, "")[question % 3]
    return {"index": question + copy * CIRCULAR, "question": "How many dots are there?", "hint": hint,
            "answer": answer, **{c: (options[k] if k < n else None) for k, c in enumerate("ABCD")},
            "category": "object_localization", "image": image_cell(image, f"{index}.png"), "source": "synthetic",
            "L2-category": "fine-grained perception (instance-level)", "comment": None, "split": "dev"}  # fmt: skip


BENCHMARKS = variants(MMBench, [
    {"name": "mmbench_en_dev_static", "split": "dev", "dataset": "lmms-lab-encoder/MMBench (en)",
     "description": "MMBench English dev, lmms-eval's mmbench_en_dev_static: circular evaluation, rules only"},
])  # fmt: skip
