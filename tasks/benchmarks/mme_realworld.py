"""MME-RealWorld as lmms-eval evaluates it (commit 75571cf): `mmerealworld`, `mmerealworld_lite`,
`mmerealworld_cn` (lmms_eval/tasks/mme_realworld/{*.yaml, utils.py}) and the reasoning tasks
`mmerealworld_reasoning`, `mmerealworld_cn_reasoning` (reasoning/) on
yifanzhang114/MME-RealWorld-Lmms-eval (-lite-, -CN-) @ train: high-resolution photographs
(remote sensing, driving, monitoring, documents) with five options.

- The image is the `bytes` column: the image file's bytes in base64, a string (decoded into the
  image cache, vlrl.data.tables' `base64_image`).
- Prompt (doc_to_text; the yamls' post_prompt is never read): the question, " ", "The choices are
  listed below:\\n", the option lines ("(A) ...") joined by newlines, "\\n", then "Select the best
  answer to the above multiple-choice question based on the image. Respond with only the letter
  (A, B, C, D, or E) of the correct option.\\nThe best answer is: " (its trailing space kept);
  the Chinese task's words in Chinese. 16 new tokens.
- The letter (extract_characters_regex): the answer phrases ("The best answer is", ...) deleted,
  "" for more than ten words without a capital A-E, else the first capital A-E anywhere (the "A"
  of "Answer: D", kept), else the first of "(A)" ... "(E)" that holds the response lower-cased
  (an empty response reads "A", kept). Right when it equals the answer, case folded, or holds it.
- `mme_realworld_score`: the share right over every row. lmms-eval logs per-category accuracies
  first and stops on a row whose category is not one of its five subtasks; here every row counts.
- The reasoning tasks: the same question and options with "Select best answer to above
  multiple-choice question based on image." (Chinese: "根据图像选择上述多项选择题的最佳答案。"),
  reasoning_utils' default <analysis> system prompt, compute_score against the letter (math-verify,
  vlrl[math]): `acc_score`, `format_score`.
"""

from __future__ import annotations

import base64
import dataclasses
import io
from typing import Any, ClassVar

import pyarrow as pa

from rewards.text import compile_pattern, search
from tasks.benchmarks import LMMS_EVAL
from tasks.benchmarks.counting import dot_scenes
from tasks.benchmarks.reasoning import ANALYSIS_SYSTEM, ComputeScored
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import Column
from vlrl.tasking.benchmark import Benchmark, mean, variants

ANSWER_PHRASES = ("The best answer is", "The correct answer is", "The answer is", "The answer", "The best option is",
                  "The correct option is", "Best answer:", "Best option:")  # fmt: skip
CAPITAL_CHOICE = compile_pattern(r"[ABCDE]")
PROMPTS = {  # (options heading, instruction) by language and kind
    ("en", "direct"): ("The choices are listed below:\n", "Select the best answer to the above multiple-choice "
                       "question based on the image. Respond with only the letter (A, B, C, D, or E) of the correct "
                       "option.\nThe best answer is: "),
    ("cn", "direct"): ("选项如下所示:\n", "根据图像选择上述多项选择题的最佳答案。只需回答正确选项的字母（A, B, C, D 或 E）。\n最佳答案为： "),
    ("en", "reasoning"): ("The choices are listed below:\n", "Select best answer to above multiple-choice question based on image."),
    ("cn", "reasoning"): ("选项如下所示:\n", "根据图像选择上述多项选择题的最佳答案。"),
}  # fmt: skip
SCHEMA = pa.schema(
    [("index", pa.int64()), ("question", pa.string()), ("multi-choice options", pa.list_(pa.string())),
     ("answer", pa.string()), ("category", pa.string()), ("l2-category", pa.string()), ("bytes", pa.string())]
)  # fmt: skip


def choice_letter(response: str) -> str:
    """extract_characters_regex of mme_realworld/utils.py, quirks kept."""
    text = response.strip()
    for phrase in ANSWER_PHRASES:
        text = text.replace(phrase, "")
    found = search(CAPITAL_CHOICE, text)
    if len(text.split()) > 10 and found is None:
        return ""
    if found is None:
        return next((choice[1] for choice in ("(A)", "(B)", "(C)", "(D)", "(E)") if text.lower() in choice.lower()), "")
    return found.group(0)


class MMERealWorld(Benchmark):
    """mme_realworld/utils.py: mme_realworld_doc_to_text (or its _cn), process_results, aggregate."""

    reference = LMMS_EVAL
    columns = (Column("index", "int|string"), Column("question", "string"), Column("multi-choice options", "list<string>"),
               Column("answer", "string"), Column("category", "string"), Column("l2-category", "string"),
               Column("bytes", "base64_image"))  # fmt: skip
    schema = SCHEMA
    max_new_tokens = 16
    language: ClassVar[str] = "en"
    kind: ClassVar[str] = "direct"

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        heading, instruction = PROMPTS[(self.language, self.kind)]
        prompt = record["question"] + " " + heading + "\n".join(record["multi-choice options"]) + "\n" + instruction
        category = record["category"]
        truth = {"answer": ctx.get(record, "answer", str, "the answer's letter"), "question_id": record["index"],
                 "category": "Perception" if "perception" in category.lower() else "Reasoning",
                 "sub_category": category.split("/")[-1], "task_category": record["l2-category"]}  # fmt: skip
        return row_sample(self.name, ctx, prompt, truth, [record_image(record, ctx, ("bytes",))])

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        return {"mme_realworld_score": {**sample.solution, "pred_answer": choice_letter(completion)}}

    def aggregations(self):
        return {"mme_realworld_score": lambda items: mean([_right(item) for item in items])}

    def synthetic_rows(self, size: int, seed: int):
        for image, count, index in dot_scenes(size, seed):
            buffer = io.BytesIO()
            image.save(buffer, format="JPEG")
            yield self._synthetic_row(buffer.getvalue(), count, index)

    @staticmethod
    def _synthetic_row(jpeg: bytes, count: int, index: int) -> dict[str, Any]:
        right = index % 5  # the right option's place
        options = [f"({letter}) {count - right + k}" for k, letter in enumerate("ABCDE")]
        category = ["Perception/Remote Sensing", "Reasoning/Autonomous_Driving", "Perception/Monitoring"][index % 3]
        return {"index": index, "question": "How many dots are there?", "multi-choice options": options,
                "answer": "ABCDE"[right], "category": category, "l2-category": "counting/count",
                "bytes": base64.b64encode(jpeg).decode()}  # fmt: skip


def _right(item: dict[str, Any]) -> float:
    """mme_realworld_aggregate_results' count of one row."""
    predicted, answer = item["pred_answer"].lower(), item["answer"].lower()
    return float(predicted == answer or answer in predicted)


class MMERealWorldReasoning(ComputeScored, MMERealWorld):
    """mme_realworld/reasoning: the reasoning query, the default <analysis> system prompt,
    compute_score against the letter."""

    system = ANALYSIS_SYSTEM
    kind = "reasoning"

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        sample = super().build_samples(record, ctx)[0]
        return [dataclasses.replace(sample, problem=sample.problem.strip(), solution=sample.solution["answer"])]


MME_RW = "yifanzhang114/MME-RealWorld-Lmms-eval"
BENCHMARKS = variants(MMERealWorld, [
    {"name": "mmerealworld", "split": "train", "dataset": MME_RW,
     "description": "MME-RealWorld, lmms-eval's mmerealworld: the option letter"},
    {"name": "mmerealworld_lite", "split": "train", "dataset": "yifanzhang114/MME-RealWorld-lite-lmms-eval",
     "description": "MME-RealWorld lite, lmms-eval's mmerealworld_lite: the option letter"},
    {"name": "mmerealworld_cn", "split": "train", "dataset": "yifanzhang114/MME-RealWorld-CN-Lmms-eval", "language": "cn",
     "description": "MME-RealWorld (Chinese), lmms-eval's mmerealworld_cn: the option letter"},
])  # fmt: skip
BENCHMARKS |= variants(MMERealWorldReasoning, [
    {"name": "mmerealworld_reasoning", "split": "train", "dataset": MME_RW,
     "description": "MME-RealWorld with lmms-eval's reasoning prompt and rule-based score (math-verify)"},
    {"name": "mmerealworld_cn_reasoning", "split": "train", "dataset": "yifanzhang114/MME-RealWorld-CN-Lmms-eval",
     "language": "cn", "description": "MME-RealWorld (Chinese) with lmms-eval's reasoning prompt and rule-based score (math-verify)"},
])  # fmt: skip
