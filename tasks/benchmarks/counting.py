"""Counting benchmarks as lmms-eval evaluates them (commit 75571cf, PyPI 0.7.3): `countbench`
and `countbenchqa` (vikhyatk/CountBenchQA: image, text, question, number), `pixmo_count`
(kcz358/pixmo-count: image, question, answer) and `fsc147` (yifehuang97/CoCount-train-fsc147,
FSC-147's images with CoCount's captions), lmms_eval/tasks/<name>/utils.py.

They differ in prompt and in how the response is read; each reports `acc`, the mean of the
per-sample scores:

- countbench: "Look at the image carefully and count the objects. Answer with just a number,
  without any additional text. " + the question. The whole response, stripped and lowercased,
  with a number word ("none", "zero" ... "twenty") replaced by its numeral, must equal the
  number: "3." or "3 cups" score 0.
- countbenchqa: the caption `text` (when present), a blank line, the question, and
  "\\nAnswer with a single number."; the stripped response must equal the number exactly.
- pixmo_count: the question without "<image>", stripped, and "\\nAnswer with a single
  number."; the first run of digits in the response (the whole response without one) must
  equal the first run of digits of the answer.

- fsc147 reads whichever columns the row has: the count is the first of annotated_pos_count,
  pos_count, count, answer, label, gt_count, gt_num that reads as an integer (a number
  rounded, half to even; a string's first number, commas dropped); the object is the first
  non-empty of pos_caption, caption, question, query, prompt, text, stripped, less a leading
  "The " and trailing dots and spaces ("objects" without one); the image the first of image,
  img, query_image. Prompt: "How many {object} are there in the image?\nAnswer with only an
  integer." The response is read as the count is. `fsc147_exact_match` (the counts equal) and
  `fsc147_mae` (their absolute difference; |count| when the response has no number), means
  over the rows; a row without a count scores 0 on both, as there. Where a number is too large
  for a float (lmms-eval raises), the response reads as having none and a row's count is an
  error naming the row.

Generation lengths are lmms-eval's: 16 tokens for countbench, 32 for the others.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
from PIL import Image, ImageDraw

from rewards.text import compile_pattern, search
from tasks.benchmarks import LMMS_EVAL
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, mean, variants

COUNTBENCH_PRE_PROMPT = (
    "Look at the image carefully and count the objects. Answer with just a number, without any additional text. "
)
SINGLE_NUMBER = "\nAnswer with a single number."
NUMBER_WORDS = {
    "none": "0", "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6",
    "seven": "7", "eight": "8", "nine": "9", "ten": "10", "eleven": "11", "twelve": "12", "thirteen": "13",
    "fourteen": "14", "fifteen": "15", "sixteen": "16", "seventeen": "17", "eighteen": "18", "nineteen": "19",
    "twenty": "20",
}  # fmt: skip
DIGITS = compile_pattern(r"\d+")
FSC147_NUMBER = compile_pattern(r"-?\d+(?:\.\d+)?")
FSC147_THE = compile_pattern(r"^[Tt]he\s+")
FSC147_COUNT_KEYS = ("annotated_pos_count", "pos_count", "count", "answer", "label", "gt_count", "gt_num")
FSC147_CAPTION_KEYS = ("pos_caption", "caption", "question", "query", "prompt", "text")
FSC147_IMAGE_KEYS = ("image", "img", "query_image")


def countbench_normalize(answer: Any) -> str:
    """countbench's _normalize_count_answer: stripped, lowercased, a number word as its numeral."""
    text = str(answer).strip().lower()
    return NUMBER_WORDS.get(text, text)


def first_digits(text: str) -> str | None:
    match = search(DIGITS, text)
    return match.group() if match else None


def fsc147_number(value: Any) -> float | None:
    """fsc147's _to_int before its rounding: a number, or a string's first number (commas
    dropped); None for a bool or no number."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    match = search(FSC147_NUMBER, str(value).strip().replace(",", ""))
    return float(match.group(0)) if match else None


def fsc147_int(value: Any) -> int | None:
    """fsc147's _to_int: the number rounded, half to even; None also where it is too large for
    a float (int(round(inf)) raises there)."""
    number = fsc147_number(value)
    return round(number) if number is not None and math.isfinite(number) else None


def fsc147_object(record: dict[str, Any]) -> str:
    """fsc147's _extract_caption: the first non-empty caption, less "The " and trailing ". "."""
    for key in FSC147_CAPTION_KEYS:
        value = record.get(key)
        if isinstance(value, str) and value.strip():
            return FSC147_THE.sub("", value.strip(), count=1).rstrip(". ")
    return "objects"


class _CountingBenchmark(Benchmark):
    reference = LMMS_EVAL
    max_new_tokens = 32

    def _sample(self, record: dict[str, Any], ctx: RecordContext, prompt: str, truth: Any) -> list[Sample]:
        return row_sample(self.name, ctx, prompt, truth, [record_image(record, ctx)])

    def aggregations(self):
        return {"acc": lambda items: mean(items)}

    def synthetic_rows(self, size: int, seed: int):
        return (self._synthetic_row(*scene) for scene in dot_scenes(size, seed))


class CountBench(_CountingBenchmark):
    """lmms_eval/tasks/countbench/utils.py."""

    columns = (Column("image", "image"), Column("question", "string"), Column("number", "int|string"))
    schema = pa.schema(
        [("image", IMAGE_TYPE), ("text", pa.string()), ("question", pa.string()), ("number", pa.int64())]
    )
    max_new_tokens = 16

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        return self._sample(
            record, ctx, COUNTBENCH_PRE_PROMPT + _text(record, "question", ctx).strip(), record["number"]
        )

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        return {"acc": float(countbench_normalize(completion) == countbench_normalize(sample.solution))}

    def doc_target(self, record: dict[str, Any], sample: Sample) -> Any:
        return countbench_normalize(record["number"])  # countbench_doc_to_target

    def _synthetic_row(self, image: Image.Image, count: int, index: int) -> dict[str, Any]:
        return {"image": image_cell(image, f"{index}.png"), "text": f"A picture of {count} dots.",
                "question": "How many dots are there in this image?", "number": count}  # fmt: skip


class CountBenchQA(CountBench):
    """lmms_eval/tasks/countbenchqa/utils.py."""

    columns = (Column("image", "image"), Column("question", "string"), Column("number", "int|string"),
               Column("text", "string", required=False))  # fmt: skip
    max_new_tokens = 32

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        question = _text(record, "question", ctx)
        if record.get("text"):
            question = f"{record['text']}\n\n{question}"
        return self._sample(record, ctx, question + SINGLE_NUMBER, record["number"])

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        score = 1.0 if completion.strip() == str(sample.solution) else 0.0
        return {"acc": score, "exact_match": score}

    def doc_target(self, record: dict[str, Any], sample: Sample) -> Any:
        return record["number"]  # countbenchqa.yaml: the "number" column


class PixmoCount(_CountingBenchmark):
    """lmms_eval/tasks/pixmo_count/utils.py."""

    columns = (Column("image", "image"), Column("question", "string"), Column("answer", "string"))
    schema = pa.schema([("image", IMAGE_TYPE), ("question", pa.string()), ("answer", pa.string())])

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        question = _text(record, "question", ctx).replace("<image>", "").strip()
        return self._sample(record, ctx, question + SINGLE_NUMBER, _text(record, "answer", ctx))

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        pred, truth = completion.strip(), sample.solution.strip()
        truth = first_digits(truth) or truth
        score = 1.0 if (first_digits(pred) or pred) == truth else 0.0
        return {"acc": score, "exact_match": score}

    def _synthetic_row(self, image: Image.Image, count: int, index: int) -> dict[str, Any]:
        return {"image": image_cell(image, f"{index}.png"), "question": "<image>\nHow many dots are in the image?",
                "answer": str(count)}  # fmt: skip


class FSC147(_CountingBenchmark):
    """lmms_eval/tasks/fsc147/utils.py."""

    columns = (*(Column(key, "image", required=False) for key in FSC147_IMAGE_KEYS),
               *(Column(key, "string", required=False) for key in FSC147_CAPTION_KEYS),
               *(Column(key, "number|string", required=False) for key in FSC147_COUNT_KEYS))  # fmt: skip
    schema = pa.schema([("image", IMAGE_TYPE), ("pos_caption", pa.string()), ("neg_caption", pa.string()),
                        ("annotated_pos_count", pa.int64()), ("pos_count", pa.float64())])  # fmt: skip

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        count = None  # _extract_count: the first key that reads as a number
        for key in FSC147_COUNT_KEYS:
            number = fsc147_number(record.get(key))
            if number is not None and not math.isfinite(number):
                raise ctx.error(f"key '{key}' must be a count, got {record[key]!r}: no integer that large"[:200])
            if number is not None:
                count = round(number)
                break
        key = next((k for k in FSC147_IMAGE_KEYS if record.get(k) is not None), None)
        images = [] if key is None else [record_image({"image": record[key]}, ctx)]
        prompt = f"How many {fsc147_object(record)} are there in the image?\nAnswer with only an integer."
        return row_sample(self.name, ctx, prompt, count, images)

    def doc_target(self, record: dict[str, Any], sample: Sample) -> Any:
        return "" if sample.solution is None else str(sample.solution)  # fsc147_doc_to_target

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        truth = sample.solution
        if truth is None:
            return {"fsc147_exact_match": 0.0, "fsc147_mae": 0.0}
        pred = fsc147_int(completion)
        if pred is None:
            return {"fsc147_exact_match": 0.0, "fsc147_mae": float(abs(truth))}
        return {"fsc147_exact_match": float(pred == truth), "fsc147_mae": float(abs(pred - truth))}

    def aggregations(self):
        return {"fsc147_exact_match": mean, "fsc147_mae": mean}

    def _synthetic_row(self, image: Image.Image, count: int, index: int) -> dict[str, Any]:
        caption = ("The red dots.", "red dots", " the dots . ", "")[index % 4]
        return {"image": image_cell(image, f"{index}.png"), "pos_caption": caption, "neg_caption": "blue squares",
                "annotated_pos_count": None if index % 3 == 1 else count,
                "pos_count": None if index % 6 == 4 else count + (0.5 if index % 2 else 0.0)}  # fmt: skip


def _text(record: dict[str, Any], key: str, ctx: RecordContext) -> str:
    value = record.get(key)
    if not isinstance(value, str):
        raise ctx.error(f"{key} must be a string, got {value!r}"[:200])
    return value


def dot_scenes(size: int, seed: int, fill: tuple[int, int, int] = (200, 30, 30)):
    """(image, count, index): 1 to 6 dots of color `fill` on a plain ground."""
    rng = np.random.default_rng(seed)
    for index in range(size):
        count, side = int(rng.integers(1, 7)), int(rng.integers(96, 144))
        image = Image.new("RGB", (side, side), (250, 250, 250))
        draw = ImageDraw.Draw(image)
        for k in range(count):
            x, y = 8 + (k % 3) * (side // 3), 8 + (k // 3) * (side // 2)
            draw.ellipse([x, y, x + 18, y + 18], fill=fill)
        yield image, count, index


BENCHMARKS = variants(CountBench, [{"name": "countbench", "split": "test", "dataset": "vikhyatk/CountBenchQA",
                                    "description": "CountBench (vikhyatk/CountBenchQA), lmms-eval's countbench: exact count after number words"}])  # fmt: skip
BENCHMARKS |= variants(CountBenchQA, [{"name": "countbenchqa", "split": "test", "dataset": "vikhyatk/CountBenchQA",
                                       "description": "CountBenchQA, lmms-eval's countbenchqa: the response must be the number"}])  # fmt: skip
BENCHMARKS |= variants(PixmoCount, [{"name": "pixmo_count", "split": "test", "dataset": "kcz358/pixmo-count",
                                     "description": "PixMo-Count, lmms-eval's pixmo_count: the first number in the response"}])  # fmt: skip
BENCHMARKS |= variants(FSC147, [{"name": "fsc147", "split": "train", "dataset": "yifehuang97/CoCount-train-fsc147",
                                 "description": "FSC-147 (CoCount's captions), lmms-eval's fsc147: exact count and MAE"}])  # fmt: skip
