"""DocVQA and InfographicVQA validation as lmms-eval evaluates them (commit 75571cf):
`docvqa_val` and `infovqa_val` (lmms_eval/tasks/{docvqa,infovqa}, scored by api/metrics.py's
`anls`) on lmms-lab-encoder/DocVQA, its DocVQA and InfographicVQA configs @ validation
(question, answers: a list, image). The test splits hold no answers (their scores come from the
organisers' servers) and are not offered.

- Prompt: the question + "\\nAnswer the question using a single word or phrase."; 32 tokens.
- ANLS (Qwen-VL's infographicsvqa_eval.py, as lmms-eval copies it): for each answer, the
  Levenshtein distance (rewards.ocr.levenshtein, uncut) between answer and response, both
  lowercased, stripped and with runs of whitespace made one space, divided by the longer of the two as written (not as normalized:
  lmms-eval's, kept); 1 - the smallest of these, and 0 below 0.5. `anls`, the mean.
- A row without answers (min() of nothing in lmms-eval) is skipped and reported.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from PIL import Image, ImageDraw

from rewards.ocr import levenshtein
from tasks.benchmarks import LMMS_EVAL
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, mean, variants

POST_PROMPT = "\nAnswer the question using a single word or phrase."
SCHEMA = pa.schema(
    [("questionId", pa.string()), ("question", pa.string()), ("image", IMAGE_TYPE), ("answers", pa.list_(pa.string())),
     ("data_split", pa.string())]
)  # fmt: skip


def anls(answers: list[str], prediction: str, threshold: float = 0.5) -> float:
    """api/metrics.py's anls of one response. An answer whose length differs from the
    response's by more than 1 - threshold of the longer is not compared: the distance is at
    least that difference, so its score would fall under the threshold and never be the best
    one kept (a 1 MB response is then scored at once, to the same value)."""
    det = " ".join(prediction.strip().lower().split())
    values = []
    for answer in answers:
        gt = " ".join(answer.strip().lower().split())
        length = max(len(answer.upper()), len(prediction.upper()))
        if length and abs(len(gt) - len(det)) / length > 1 - threshold:
            continue
        values.append(0.0 if length == 0 else levenshtein(gt, det, cap=None) / length)
    score = 1 - min(values, default=1.0)
    return 0.0 if score < threshold else score


class DocVQA(Benchmark):
    """lmms_eval/tasks/docvqa (and infovqa) with the default kwargs: the generic `anls` metric."""

    reference = LMMS_EVAL
    doc_to_target = "answers"
    columns = (Column("question", "string"), Column("answers", "list<string>"), Column("image", "image"))
    schema = SCHEMA
    max_new_tokens = 32

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        answers = record["answers"]
        if not isinstance(answers, list) or not answers or not all(isinstance(a, str) for a in answers):
            raise ctx.error(f"answers must be a non-empty list of strings, got {answers!r}"[:200])
        question = ctx.get(record, "question", str, "the question") + POST_PROMPT
        return row_sample(self.name, ctx, question, answers, [record_image(record, ctx)])

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        return {"anls": anls(sample.solution, completion)}

    def aggregations(self):
        return {"anls": mean}

    def synthetic_rows(self, size: int, seed: int):
        return (synthetic_row(index) for index in range(size))


WORDS = ("Invoice 2041", "ACME Corp.", "12 March 1998", "$ 1,250.00", "Dear  Sir", "Total")


def synthetic_row(index: int) -> dict[str, Any]:
    """A page with one line of text, asked for it; its answers in a few spellings."""
    text = WORDS[index % len(WORDS)]
    image = Image.new("RGB", (160, 48), (255, 255, 255))
    ImageDraw.Draw(image).text((6, 16), text, fill=(0, 0, 0))
    return {"questionId": str(index), "question": "What is written on the page?", "image": image_cell(image, f"{index}.png"),
            "answers": [text, text.upper().replace(" ", "")][: 1 + index % 2], "data_split": "val"}  # fmt: skip


_HUB = "lmms-lab-encoder/DocVQA"
BENCHMARKS = variants(DocVQA, [
    {"name": "docvqa_val", "split": "validation", "dataset": f"{_HUB} (DocVQA)", "description": "DocVQA validation, lmms-eval's docvqa_val: ANLS"},
    {"name": "infovqa_val", "split": "validation", "dataset": f"{_HUB} (InfographicVQA)", "description": "InfographicVQA validation, lmms-eval's infovqa_val: ANLS"},
])  # fmt: skip
