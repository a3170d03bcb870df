"""OCRBench as lmms-eval evaluates it (commit 75571cf): `ocrbench` (lmms_eval/tasks/ocrbench/
utils.py) and `ocrbench_reasoning` (ocrbench/reasoning/utils.py), on echo840/OCRBench (image,
question, answer: a list of strings, question_type: one of ten categories, dataset: the source).

- The prompt is the question, stripped; 128 new tokens (the reasoning task: 49,152, and
  reasoning_utils' system prompt asking for <analysis> and <answer>).
- A response is right when one of the answers is a substring of it. Both are stripped, their
  newlines made spaces; for HME100k (handwritten formulas) every space is then deleted, and
  for the other sources the text is lowercased and fullwidth ASCII (and the ideographic space)
  folded to ASCII first. An empty answer is in every response (kept).
- `ocrbench_accuracy` is the number right divided by 1000, OCRBench's size, whatever the
  number of samples scored: on a subset it is not a share (lmms-eval's, kept). lmms-eval keeps
  the per-category counts in module globals that a second aggregation in one process adds to,
  and writes them to ocrbench_results.txt; vlrl counts each run afresh and reports the total.
- The reasoning task scores the answer reasoning_utils reads from the response (the first
  <answer>, else the last box, else a trailing number: `answer_tag`) the same way, and its
  format score: `ocrbench_accuracy_acc_score` and `ocrbench_accuracy_format_score`, means.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from PIL import Image, ImageDraw

from tasks.benchmarks import LMMS_EVAL
from tasks.benchmarks.reasoning import ANALYSIS_SYSTEM, answer_tag, reasoning_format
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, mean, variants

QUESTION_TYPES = (
    "Regular Text Recognition", "Irregular Text Recognition", "Artistic Text Recognition", "Handwriting Recognition",
    "Digit String Recognition", "Non-Semantic Text Recognition", "Scene Text-centric VQA", "Doc-oriented VQA",
    "Key Information Extraction", "Handwritten Mathematical Expression Recognition",
)  # fmt: skip
OCRBENCH_SIZE = 1000  # the divisor of ocrbench_aggregate_accuracy
SCHEMA = pa.schema(
    [("dataset", pa.string()), ("question", pa.string()), ("question_type", pa.string()),
     ("answer", pa.list_(pa.string())), ("image", IMAGE_TYPE)]
)  # fmt: skip


def fold_fullwidth_ascii(text: str) -> str:
    """_fold_fullwidth_ascii: U+FF01..U+FF5E to ASCII, the ideographic space to a space."""
    return "".join(chr(ord(c) - 0xFEE0) if 0xFF01 <= ord(c) <= 0xFF5E else " " if c == "\u3000" else c for c in text)


def ocrbench_right(prediction: str, answers: Sequence[str], source: str) -> bool:
    """ocrbench_process_results' score: one of the answers inside the prediction."""
    if source == "HME100k":

        def norm(text: str) -> str:
            return text.strip().replace("\n", " ").replace(" ", "")
    else:

        def norm(text: str) -> str:
            return fold_fullwidth_ascii(text).lower().strip().replace("\n", " ")

    predict = norm(prediction.strip())
    return any(norm(answer) in predict for answer in answers)


class OCRBench(Benchmark):
    """lmms_eval/tasks/ocrbench/utils.py."""

    reference = LMMS_EVAL
    columns = (Column("image", "image"), Column("question", "string"), Column("answer", "list<string>|string"),
               Column("question_type", "string"), Column("dataset", "string"))  # fmt: skip
    schema = SCHEMA
    max_new_tokens = 128

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        question = ctx.get(record, "question", str, "the question")
        answers = record.get("answer")
        answers = [answers] if isinstance(answers, str) else answers
        if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
            raise ctx.error(f"answer must be a string or a list of strings, got {answers!r}"[:200])
        question_type = ctx.get(record, "question_type", str, "an OCRBench category")
        if question_type not in QUESTION_TYPES:
            raise ctx.error(
                f"question_type must be one of OCRBench's {', '.join(QUESTION_TYPES)}; got {question_type!r}"
            )
        truth = {"answer": answers, "dataset": ctx.get(record, "dataset", str, "the source dataset"),
                 "question_type": question_type}  # fmt: skip
        return row_sample(self.name, ctx, question.strip(), truth, [record_image(record, ctx)])

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        """lmms-eval's per-sample record, as its samples file logs it."""
        truth = sample.solution
        score = int(ocrbench_right(completion, truth["answer"], truth["dataset"]))
        return {"ocrbench_accuracy": {"question_type": truth["question_type"], "score": score,
                                      "prediction": completion.strip(), "ground_truth": truth["answer"]}}  # fmt: skip

    def aggregations(self):
        return {"ocrbench_accuracy": lambda items: sum(item["score"] for item in items) / OCRBENCH_SIZE}

    def synthetic_rows(self, size: int, seed: int):
        return synthetic_rows(size, seed)


class OCRBenchReasoning(OCRBench):
    """lmms_eval/tasks/ocrbench/reasoning/utils.py: the answer tag's text scored as above, and
    the format score."""

    system = ANALYSIS_SYSTEM
    max_new_tokens = 49152

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        truth = sample.solution
        right = ocrbench_right(answer_tag(completion).strip(), truth["answer"], truth["dataset"])
        return {
            "ocrbench_accuracy_acc_score": float(right),
            "ocrbench_accuracy_format_score": reasoning_format(completion),
        }

    def aggregations(self):
        return {"ocrbench_accuracy_acc_score": mean, "ocrbench_accuracy_format_score": mean}


WORDS = ("STOP", "exit", "Café", "ＯＰＥＮ", "42017", "x^{2}+1", "Main St", "hello world")


def synthetic_rows(size: int, seed: int):
    """Rows in echo840/OCRBench's schema: a word drawn on a plain image, every category in
    turn (HME100k's formulas among them), some answers in fullwidth or upper case."""
    rng = np.random.default_rng(seed)
    for index in range(size):
        word = WORDS[int(rng.integers(len(WORDS)))]
        image = Image.new("RGB", (int(rng.integers(96, 160)), 48), (250, 250, 250))
        ImageDraw.Draw(image).text((6, 16), word, fill=(20, 20, 20))
        question_type = QUESTION_TYPES[index % len(QUESTION_TYPES)]
        source = "HME100k" if question_type.startswith("Handwritten Mathematical") else "IIIT5K"
        yield {"dataset": source, "question": " what is written in the image? ", "question_type": question_type,
               "answer": [word, word.upper()][: 1 + index % 2], "image": image_cell(image, f"{index}.png")}  # fmt: skip


BENCHMARKS = variants(OCRBench, [{"name": "ocrbench", "split": "test", "dataset": "echo840/OCRBench",
                                  "description": "OCRBench, lmms-eval's ocrbench: an answer inside the response, right answers / 1000"}])  # fmt: skip
BENCHMARKS |= variants(OCRBenchReasoning, [{"name": "ocrbench_reasoning", "split": "test", "dataset": "echo840/OCRBench",
                                            "description": "OCRBench with lmms-eval's reasoning prompt: the <answer> scored as ocrbench, and the format"}])  # fmt: skip
