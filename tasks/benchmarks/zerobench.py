"""ZeroBench as lmms-eval evaluates it (commit 75571cf): `zerobench`
(lmms_eval/tasks/zerobench/{zerobench.yaml, _default_template_yaml, utils.py}) on
jonathan-roberts1/zerobench @ zerobench: 100 deliberately hard visual reasoning questions, each
over one or more images.

- Prompt: the question stripped + "\\nAnswer with only the final answer." (the default kwargs);
  the question's images (`question_images_decoded`, empty ones left out) before it; 128 new tokens.
- Right when the response and the answer (as a string), each stripped, lower-cased, stripped of
  surrounding quotes and backticks, whitespace runs made one space and a final "." dropped, are
  the same text, or both plain decimals (commas dropped) of the same value ("1,000" is "1000.0").
  `zerobench_exact_match`: the share right.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa

from rewards.text import compile_pattern, fullmatch
from tasks.benchmarks import LMMS_EVAL
from tasks.benchmarks.counting import dot_scenes
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, mean, variants

POST_PROMPT = "\nAnswer with only the final answer."
DECIMAL = compile_pattern(r"-?(?:\d+\.\d+|\d+|\.\d+)")
SPACES = compile_pattern(r"\s+")
SCHEMA = pa.schema(
    [("question_id", pa.string()), ("question_text", pa.string()), ("question_images_decoded", pa.list_(IMAGE_TYPE)),
     ("question_answer", pa.string())]
)  # fmt: skip


def _normalized(text: str) -> str:
    """_normalize_text."""
    out = SPACES.sub(" ", text.strip().lower().strip("\"'`"))
    return out[:-1].rstrip() if out.endswith(".") else out


def _decimal(text: str) -> Decimal | None:
    """_to_decimal: a plain decimal once commas are dropped, else None."""
    candidate = text.strip().replace(",", "")
    if fullmatch(DECIMAL, candidate) is None:
        return None
    try:
        return Decimal(candidate)
    except InvalidOperation:
        return None


def exact_match(prediction: str, target: str) -> bool:
    """_is_exact_match."""
    predicted, wanted = _normalized(prediction), _normalized(target)
    as_numbers = _decimal(predicted), _decimal(wanted)
    if None not in as_numbers:
        return as_numbers[0] == as_numbers[1]
    return predicted == wanted


class ZeroBench(Benchmark):
    """lmms_eval/tasks/zerobench/utils.py with the default kwargs."""

    reference = LMMS_EVAL
    doc_to_target = "question_answer"
    columns = (Column("question_text", "string"), Column("question_answer", "string|number"),
               Column("question_images_decoded", "list<image>", required=False))  # fmt: skip
    schema = SCHEMA
    max_new_tokens = 128

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        prompt = ctx.get(record, "question_text", str, "the question").strip() + POST_PROMPT
        images = [record_image({"image": path}, ctx) for path in record.get("question_images_decoded") or [] if path]
        return row_sample(self.name, ctx, prompt, str(record["question_answer"]).strip(), images)

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        return {"zerobench_exact_match": 1.0 if exact_match(completion.strip(), sample.solution) else 0.0}

    def aggregations(self):
        return {"zerobench_exact_match": mean}

    def synthetic_rows(self, size: int, seed: int):
        answers = ("{}", "{}.0", "'{}'", "{} dots", "1,00{}")
        for image, count, index in dot_scenes(size, seed):
            yield {"question_id": str(index), "question_text": " How many dots are there? ",
                   "question_images_decoded": [image_cell(image, f"{index}.png")] * (1 + index % 2),
                   "question_answer": answers[index % len(answers)].format(count)}  # fmt: skip


BENCHMARKS = variants(ZeroBench, [
    {"name": "zerobench", "split": "zerobench", "dataset": "jonathan-roberts1/zerobench",
     "description": "ZeroBench, lmms-eval's zerobench: exact match of the final answer, decimals by value"}])  # fmt: skip
