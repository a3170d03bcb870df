"""RealWorldQA as lmms-eval evaluates it (commit 75571cf): `realworldqa` and
`realworldqa_reasoning` (lmms_eval/tasks/realworldqa/{utils.py, reasoning/utils.py}) on
lmms-lab-encoder/RealWorldQA @ test (image, question with its options and instruction, answer).

- Prompt: the question, stripped (its own "Please answer directly with only the letter..."
  kept: the default post prompt is empty); 16 new tokens.
- An answer A-D: the letter mcq_extract reads from the response (over A-D) must equal it.
  Another answer ("0", "Downhill"): the response lowercased, stripped and without trailing
  periods must equal it lowercased. `exact_match`, the mean.
- The reasoning task: the question alone after the <think>/<answer> system prompt of
  realworldqa/reasoning, 49,152 tokens, compute_score against the answer lowercased and
  stripped (math-verify, vlrl[math]): `acc_score`, `format_score`.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from PIL import Image

from tasks.benchmarks import LMMS_EVAL
from tasks.benchmarks.counting import dot_scenes
from tasks.benchmarks.mcq_extract import extract_mcq_answer
from tasks.benchmarks.reasoning import ComputeScored
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, mean, variants

SCHEMA = pa.schema([("image", IMAGE_TYPE), ("question", pa.string()), ("answer", pa.string())])
LETTER_INSTRUCTION = "Please answer directly with only the letter of the correct option and nothing else."


def realworldqa_right(response: str, answer: str) -> bool:
    """realworldqa_process_results' score."""
    answer = answer.strip()
    if answer.upper() in ("A", "B", "C", "D"):
        return extract_mcq_answer(response, "ABCD") == answer.upper()
    return response.lower().strip().rstrip(".") == answer.lower()


class RealWorldQA(Benchmark):
    """lmms_eval/tasks/realworldqa/utils.py with the default kwargs."""

    reference = LMMS_EVAL
    columns = (Column("image", "image"), Column("question", "string"), Column("answer", "string"))
    schema = SCHEMA
    max_new_tokens = 16

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        question = ctx.get(record, "question", str, "the question").strip()
        return row_sample(
            self.name, ctx, question, ctx.get(record, "answer", str, "the answer"), [record_image(record, ctx)]
        )

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        return {"exact_match": 1.0 if realworldqa_right(completion, sample.solution) else 0.0}

    def aggregations(self):
        return {"exact_match": mean}

    def synthetic_rows(self, size: int, seed: int):
        return (synthetic_row(*scene) for scene in dot_scenes(size, seed, fill=(200, 120, 20)))


class RealWorldQAReasoning(ComputeScored, RealWorldQA):
    """lmms_eval/tasks/realworldqa/reasoning/utils.py: compute_score against the answer lowercased."""

    def truth(self, sample: Sample) -> str:
        return sample.solution.lower().strip()


def synthetic_row(image: Image.Image, count: int, index: int) -> dict[str, Any]:
    """A counting question in RealWorldQA's schema: lettered options and the letter instruction,
    or (one in three) a question answered by a number or a word."""
    if index % 3 == 2:
        question, answer = ("How many dots are there? Please answer directly with a single word or number.",
                            str(count) if index % 2 else "Dots")  # fmt: skip
    else:
        options = "\n".join(f"{'ABC'[k]}. {count - 1 + k}" for k in range(3))
        question, answer = f"How many dots are there?\n{options}\n{LETTER_INSTRUCTION} ", "B"
    return {"image": image_cell(image, f"{index}.png"), "question": question, "answer": answer}


BENCHMARKS = variants(RealWorldQA, [{"name": "realworldqa", "split": "test", "dataset": "lmms-lab-encoder/RealWorldQA",
                                     "description": "RealWorldQA, lmms-eval's realworldqa: the option letter or the exact answer"}])  # fmt: skip
BENCHMARKS |= variants(RealWorldQAReasoning, [{"name": "realworldqa_reasoning", "split": "test", "dataset": "lmms-lab-encoder/RealWorldQA",
                                               "description": "RealWorldQA with lmms-eval's reasoning prompt and rule-based score (math-verify)"}])  # fmt: skip
