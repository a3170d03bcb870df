"""MMSI-Bench as lmms-eval evaluates it (commit 75571cf): `mmsi_bench`
(lmms_eval/tasks/mmsi_bench/{msr_bench.yaml, utils.py}) on RunsenXu/MMSI-Bench @ test:
multi-image spatial intelligence (positions of objects, cameras and regions across views,
attributes, motion, multi-step reasoning), options written in the question.

- The images: `images`, a list of images (plain bytes or `Image` cells), before the text.
- Prompt: the question stripped + "\\nAnswer with the option's letter from the given choices
  directly. Enclose the option's letter within ``." (the default kwargs); 2,048 new tokens.
- Scored by extract_single_choice_with_word_boundary: the response narrowed to what a ``...``,
  then a `...`, then a {...} holds (each the first such, in turn); then the first standalone
  letter A-F (either case) not followed by a space and a letter ("A cat" is no answer, kept),
  upper-cased; no letter: no answer (0). Right when the answer, lower-cased, is that letter.
- Metrics: one per `question_type` (lmms-eval's names: "Positional Relationship (Obj.–Obj.)", with
  an en dash where the data has "-", ... "MSR"), each the share right of its rows, and `average`
  over all rows.
"""

from __future__ import annotations

import io
from typing import Any

import pyarrow as pa
import regex

from rewards.text import compile_pattern, search
from tasks.benchmarks import LMMS_EVAL
from tasks.benchmarks.counting import dot_scenes
from tasks.records import record_image_list, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import Column
from vlrl.tasking.benchmark import Benchmark, mean, variants

POST_PROMPT = (
    "\nAnswer with the option's letter from the given choices directly. Enclose the option's letter within ``."
)
CATEGORIES = ("Positional Relationship (Obj.–Obj.)", "Positional Relationship (Cam.–Obj.)",
              "Positional Relationship (Cam.–Cam.)", "Positional Relationship (Obj.–Reg.)",
              "Positional Relationship (Cam.–Reg.)", "Positional Relationship (Reg.–Reg.)", "Attribute (Meas.)",
              "Attribute (Appr.)", "Motion (Obj.)", "Motion (Cam.)", "MSR")  # fmt: skip
# CATEGORY_ALIASES: the data's hyphenated names -> the metric names' en dashes
ALIASES = {name.replace("–", "-"): name for name in CATEGORIES if "–" in name}
NARROWING = tuple(compile_pattern(p) for p in (r"``([^`]*)``", r"`([^`]*)`", r"\{([^}]*)\}"))
# `\b[A-F]\b(?!\s[a-zA-Z])` there: a letter is a word character, so its boundaries are no word character beside it
STANDALONE = compile_pattern(r"(?<!\w)[A-F](?!\w)(?!\s[a-zA-Z])", regex.IGNORECASE)
SCHEMA = pa.schema(
    [("id", pa.int64()), ("images", pa.list_(pa.binary())), ("question_type", pa.string()), ("question", pa.string()),
     ("answer", pa.string()), ("thought", pa.string())]
)  # fmt: skip


def choice_score(response: str, answer: str) -> float:
    """extract_single_choice_with_word_boundary, None (no letter) as 0, as msr_process_results
    scores it. Its last three comparisons (after "(", "option ", "the answer is ") can never hold
    on a single letter and are left out."""
    for pattern in NARROWING:
        if (match := search(pattern, response)) is not None:
            response = match.group(1)
    letter = search(STANDALONE, response)
    if letter is None:
        return 0.0
    return 1.0 if answer.lower().replace("\n", " ").strip() == letter.group().lower() else 0.0


class MMSIBench(Benchmark):
    """lmms_eval/tasks/mmsi_bench/utils.py with the default kwargs."""

    reference = LMMS_EVAL
    columns = (Column("id", "int|string"), Column("images", "list<image>|list<image_bytes>"),
               Column("question_type", "string"), Column("question", "string"), Column("answer", "string"))  # fmt: skip
    schema = SCHEMA
    max_new_tokens = 2048

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        prompt = ctx.get(record, "question", str, "the question").strip() + POST_PROMPT
        question_type = ctx.get(record, "question_type", str, "the question type")
        truth = {"answer": ctx.get(record, "answer", str, "the answer's letter"), "id": record["id"],
                 "category": ALIASES.get(question_type, question_type)}  # fmt: skip
        images = record_image_list(record, ctx, "images", "the question's images")
        return row_sample(self.name, ctx, prompt, truth, images)

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        truth = sample.solution
        kept = {
            "question_id": truth["id"],
            "l2_category": truth["category"],
            "score": choice_score(completion, truth["answer"]),
        }
        return {truth["category"]: kept, "average": kept}

    def aggregations(self):
        def share(items: list[dict[str, Any]]) -> float:  # msr_aggregate_results: the mean of every score
            return mean([item["score"] for item in items])

        return {**{name: share for name in CATEGORIES}, "average": share}

    def synthetic_rows(self, size: int, seed: int):
        kinds = [*ALIASES, "Attribute (Meas.)", "Motion (Cam.)", "MSR"]  # the data's names, hyphens and all
        for image, count, index in dot_scenes(size, seed, fill=(200, 120, 30)):
            buffer = io.BytesIO()
            image.save(buffer, format="PNG")
            right = "ABCD"[index % 4]
            options = ", ".join(f"{letter}: {count - 'ABCD'.index(right) + k}" for k, letter in enumerate("ABCD"))
            yield {"id": index, "images": [buffer.getvalue()] * (1 + index % 2), "question_type": kinds[index % len(kinds)],
                   "question": f" How many dots are there? Options: {options} ", "answer": right, "thought": ""}  # fmt: skip


BENCHMARKS = variants(MMSIBench, [
    {"name": "mmsi_bench", "split": "test", "dataset": "RunsenXu/MMSI-Bench",
     "description": "MMSI-Bench, lmms-eval's mmsi_bench: the enclosed option letter, by question type"}])  # fmt: skip
