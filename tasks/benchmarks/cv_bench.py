"""CV-Bench as lmms-eval evaluates it (commit 75571cf): `cv_bench`, `cv_bench_2d` and
`cv_bench_3d` (lmms_eval/tasks/cv_bench/utils.py) on nyu-visionx/CV-Bench (its default, 2D and
3D configs) @ test (idx, type, task, image, question, choices, answer "(A)", prompt: the
question with its options, source).

- Prompt: "Note: You only need to respond with A, B, C without providing any additional
  information.\\n" (the letters the choices take), a newline, and the row's `prompt`: a blank
  line between them (lmms-eval's, kept); 1,024 new tokens.
- The letter: the first letter of the response after any opening parentheses and whitespace,
  upper-cased (`[\\(\\s]*([A-Z])`, case-insensitive, at the start): "(b)" is B, but "Answer: B"
  is A and "The answer is B" is T (kept). Right when it is the answer without its parentheses.
- `cv_bench_acc`: the plain accuracy. lmms-eval's utils also define CV-Bench's own score (the
  mean of the 2D sources' accuracies averaged with Omni3D's), which no yaml of it reports; nor
  does vlrl.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pyarrow as pa
import regex
from PIL import Image

from rewards.text import compile_pattern, search
from tasks.benchmarks import LMMS_EVAL
from tasks.benchmarks.counting import dot_scenes
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, mean, variants

PRE_PROMPT = "Note: You only need to respond with {} without providing any additional information.\n"
LETTER = compile_pattern(r"^[\(\s]*([A-Z])[\)\.\s]*", regex.IGNORECASE)  # re.match, so anchored
SCHEMA = pa.schema(
    [("idx", pa.int64()), ("type", pa.string()), ("task", pa.string()), ("image", IMAGE_TYPE),
     ("question", pa.string()), ("choices", pa.list_(pa.string())), ("answer", pa.string()), ("prompt", pa.string()),
     ("source", pa.string())]
)  # fmt: skip


def answer_letter(response: str) -> str:
    """_extract_answer_letter."""
    match = search(LETTER, response.strip())
    return match.group(1).upper() if match else ""


class CVBench(Benchmark):
    """lmms_eval/tasks/cv_bench/utils.py with the default kwargs."""

    reference = LMMS_EVAL
    columns = (Column("idx", "int|string"), Column("image", "image"), Column("choices", "list<string>"),
               Column("answer", "string"), Column("prompt", "string"), Column("source", "string", required=False))  # fmt: skip
    schema = SCHEMA
    max_new_tokens = 1024
    metric: ClassVar[str] = "cv_bench_acc"
    separator: ClassVar[str] = "\n"  # between the instruction and the row's prompt
    split_type: ClassVar[str] = "2D"  # the synthetic rows' type

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        choices = record["choices"]
        if not isinstance(choices, list):
            raise ctx.error(f"choices must be a list, got {choices!r}"[:200])
        letters = ", ".join(chr(65 + i) for i in range(len(choices)))
        question = ctx.get(record, "prompt", str, "the question with its options")
        prompt = PRE_PROMPT.format(letters) + self.separator + question
        truth = {
            "answer": ctx.get(record, "answer", str, "the right option, e.g. (A)").strip("()"),
            "idx": record["idx"],
        }
        return row_sample(self.name, ctx, prompt, truth, self.record_images(record, ctx))

    def record_images(self, record: dict[str, Any], ctx: RecordContext) -> list[tuple[str, int, int]]:
        """cv_bench_doc_to_visual: the row's one image."""
        return [record_image(record, ctx)]

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        """cv_bench_process_results: its submission record, `is_correct` counted."""
        letter = answer_letter(completion)
        return {self.metric: {"id": sample.solution["idx"], "gt_content": sample.solution["answer"],
                                 "pred_parsed": letter, "pred": completion,
                                 "is_correct": letter == sample.solution["answer"]}}  # fmt: skip

    def aggregations(self):
        return {self.metric: lambda items: mean([1.0 if item["is_correct"] else 0.0 for item in items])}

    def synthetic_rows(self, size: int, seed: int):
        return (synthetic_row(*scene, kind=self.split_type) for scene in dot_scenes(size, seed, fill=(70, 110, 30)))


def synthetic_row(image: Image.Image, count: int, index: int, kind: str = "2D") -> dict[str, Any]:
    """A counting question in CV-Bench's schema, the right choice among four in turn."""
    choices = [str(count + k - index % 4) for k in range(4)]
    options = "\n".join(f"({chr(65 + k)}) {c}" for k, c in enumerate(choices))
    return {"idx": index, "type": kind, "task": "Count", "image": image_cell(image, f"{index}.png"),
            "question": "How many dots are in the image?", "choices": choices, "answer": f"({chr(65 + index % 4)})",
            "prompt": f"How many dots are in the image? Select from the following choices.\n{options}",
            "source": ("ADE20K", "COCO", "Omni3D")[index % 3]}  # fmt: skip


_CV = "nyu-visionx/CV-Bench"
BENCHMARKS = variants(CVBench, [
    {"name": "cv_bench", "split": "test", "dataset": _CV, "description": "CV-Bench, lmms-eval's cv_bench: the leading letter, plain accuracy"},
    {"name": "cv_bench_2d", "split": "test", "dataset": f"{_CV} (2D)", "description": "CV-Bench 2D (its 2D config), lmms-eval's cv_bench_2d"},
    {"name": "cv_bench_3d", "split": "test", "dataset": f"{_CV} (3D)", "split_type": "3D", "description": "CV-Bench 3D (its 3D config), lmms-eval's cv_bench_3d"},
])  # fmt: skip
