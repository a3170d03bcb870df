"""HR-Bench as lmms-eval scores it with its judge unavailable (commit 75571cf): `hrbench4k` and
`hrbench8k` (lmms_eval/tasks/hrbench/{hrbench4k.yaml, hrbench8k.yaml, utils.py, hrbench_evals.py})
on DreamMr/HR-Bench, config hrbench_version_split @ hrbench_4k / hrbench_8k: 4K and 8K images,
four options.

- The image is the `image` column, the file's bytes in base64 (vlrl.data.tables' `base64_image`).
- Prompt: the question stripped, "\\n", each option present ("A. ..." and a newline: every
  column A-E that is not empty), then "Answer the option letter directly."; the model class's
  generation length (the yamls set none).
- The letter (HRBenchEval.can_infer, VLMEvalKit's): a refusal phrase reads "Z"; else, with
  ".()[],:;!*#{}" made spaces, the one option letter standing as a word (exactly one of them);
  else "Z" standing alone; else the one option whose lower-cased text the lower-cased response
  holds. lmms-eval asks its GPT judge for any other response and, with none reachable, stops
  (get_chat_response returns no prediction); here that response is wrong, and results.json says
  `judge: none`. These are lmms-eval's numbers wherever its rules read the letter.
- `single`, `cross` (the rows of that `category`) and `average` (all): the rows grouped by
  `cycle_category`, each group's share right, the mean over the groups.
"""

from __future__ import annotations

import base64
import io
from typing import Any

import pyarrow as pa

from tasks.benchmarks import LMMS_EVAL
from tasks.benchmarks.counting import dot_scenes
from tasks.benchmarks.mmbench import infer_text, missing
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import Column
from vlrl.tasking.benchmark import Benchmark, mean, variants

LETTERS = "ABCDE"  # the option columns read (hrbench_doc_to_options takes every column A-Z there)
REFUSALS = ("Sorry, I can't help with images of people yet.", "I can't process this file.",
            "I'm sorry, but without the image provided", "Cannot determine the answer")  # fmt: skip
SPACED = ".()[],:;!*#{}"  # can_infer_option's characters made spaces
SCHEMA = pa.schema(
    [("index", pa.int64()), ("question", pa.string()), ("answer", pa.string()), ("category", pa.string()),
     ("cycle_category", pa.string()), *[(letter, pa.string()) for letter in "ABCD"], ("image", pa.string())]
)  # fmt: skip


def infer_letter(response: str, options: dict[str, str]) -> str:
    """HRBenchEval.can_infer (VERBOSE unset): can_infer_option, else can_infer_text; "" where
    neither reads a letter (where lmms-eval would ask its judge)."""
    return _standing_letter(response, options) or infer_text(response, options)


def _standing_letter(response: str, options: dict[str, str]) -> str:
    """can_infer_option: a refusal reads "Z"; else the one option letter standing as a word."""
    if "Failed to obtain answer via API" in response:
        return ""
    if any(refusal in response for refusal in REFUSALS):
        return "Z"
    spaced = response
    for char in SPACED:
        spaced = spaced.replace(char, " ")
    words = [word.strip() for word in spaced.split()]
    standing = [letter for letter in options if letter in words]
    if len(standing) == 1:
        return standing[0]
    return "Z" if not standing and "Z" in words else ""


def cycle_mean(items: list[dict[str, Any]]) -> float:
    """hrbench_aggregate_results: each cycle_category's mean score, the mean over them."""
    groups: dict[Any, list[float]] = {}
    for item in items:
        groups.setdefault(item["cycle_category"], []).append(item["gpt_score"])
    return mean([mean(scores) for scores in groups.values()])


class HRBench(Benchmark):
    """hrbench/utils.py with hrbench_evals.py's rule-based reading and no judge."""

    reference = LMMS_EVAL
    columns = (Column("index", "int|string"), Column("question", "string"), Column("answer", "string"),
               Column("category", "string"), Column("cycle_category", "string|int"), Column("image", "base64_image"),
               *[Column(letter, "string", required=False) for letter in LETTERS])  # fmt: skip
    schema = SCHEMA

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        options = {letter: record[letter] for letter in LETTERS if not missing(record.get(letter))}
        lines = "".join(f"{letter}. {text}\n" for letter, text in options.items())
        prompt = f"{record['question'].strip()}\n{lines}Answer the option letter directly."
        truth = {"answer": ctx.get(record, "answer", str, "the answer's letter"), "options": options,
                 "category": ctx.get(record, "category", str, "the category"),
                 "index": record["index"], "cycle_category": record["cycle_category"]}  # fmt: skip
        return row_sample(self.name, ctx, prompt, truth, [record_image(record, ctx)])

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        truth = sample.solution
        letter = infer_letter(completion, truth["options"])
        kept = {"index": truth["index"], "cycle_category": truth["cycle_category"],
                "gpt_score": int(truth["answer"].lower() == letter.lower())}  # fmt: skip
        return {truth["category"]: kept, "average": kept}

    def aggregations(self):
        return {"single": cycle_mean, "cross": cycle_mean, "average": cycle_mean}

    def describe(self, frame) -> dict[str, Any]:
        return {**super().describe(frame), "judge": "none (lmms-eval's rule-based reading, its judge unavailable)"}

    def synthetic_rows(self, size: int, seed: int):
        for image, count, index in dot_scenes(size, seed):
            buffer = io.BytesIO()
            image.save(buffer, format="PNG")
            right = index % 4
            options = {letter: str(count - right + k) for k, letter in enumerate("ABCD")}
            yield {"index": index, "question": " How many dots are there? ", "answer": "ABCD"[right],
                   "category": ("single", "cross")[index % 2], "cycle_category": f"cycle_{min(index % 4, 2)}", **options,
                   "image": base64.b64encode(buffer.getvalue()).decode()}  # fmt: skip


BENCHMARKS = variants(HRBench, [
    {"name": f"hrbench{k}", "split": f"hrbench_{k}", "dataset": "DreamMr/HR-Bench",
     "description": f"HR-Bench {k.upper()}, lmms-eval's hrbench{k} with its rule-based reading (no judge)"}
    for k in ("4k", "8k")])  # fmt: skip
