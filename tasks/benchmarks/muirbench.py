"""MuirBench as lmms-eval evaluates it (commit 75571cf): `muirbench`
(lmms_eval/tasks/muirbench/utils.py) on MUIRBENCH/MUIRBENCH @ test (idx, task, image_relation,
image_type, question, options: a list, image_list: the images, answer: the letter).

- Prompt: every image of `image_list`, then the question, "\\n", the options "A. ..." a line
  each, then "\\nAnswer with the option's letter from the given choices directly."; 16 new
  tokens.
- Filter "flexible-extract" (its MultiChoiceRegexFilter, AI2D's): a response that starts with
  "X." becomes X; any other is scored as it is.
- Right when the filtered response equals the answer, both lower-cased and stripped ("B" and
  "b." are, "(B)" is not). `muirbench_score_overall`: the share right; the per-task shares are
  printed there, not reported.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from PIL import Image, ImageOps

from tasks.benchmarks import LMMS_EVAL, lettered
from tasks.benchmarks.ai2d import leading_letter
from tasks.benchmarks.counting import dot_scenes
from tasks.records import record_image_list, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, mean, variants

POST_PROMPT = "\nAnswer with the option's letter from the given choices directly."
SCHEMA = pa.schema(
    [("idx", pa.string()), ("task", pa.string()), ("image_relation", pa.string()), ("image_type", pa.string()),
     ("question", pa.string()), ("options", pa.list_(pa.string())), ("image_list", pa.list_(IMAGE_TYPE)),
     ("answer", pa.string()), ("counterpart_idx", pa.string())]
)  # fmt: skip


def muir_prompt(question: str, options: list[str]) -> str:
    """muir_doc_to_text with the default kwargs."""
    return f"{question}\n{lettered(options)}{POST_PROMPT}"


class MuirBench(Benchmark):
    """lmms_eval/tasks/muirbench/utils.py with the default kwargs."""

    reference = LMMS_EVAL
    columns = (Column("question", "string"), Column("options", "list<string>"), Column("answer", "string"),
               Column("image_list", "list<image>"))  # fmt: skip
    schema = SCHEMA
    max_new_tokens = 16

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        images = record_image_list(record, ctx, "image_list", "the question's images")
        prompt = muir_prompt(
            ctx.get(record, "question", str, "the question"), ctx.get(record, "options", list, "options")
        )
        return row_sample(self.name, ctx, prompt, ctx.get(record, "answer", str, "the right option's letter"), images)

    def predict(self, completion: str, sample: Sample) -> str:
        return leading_letter(completion)

    def process(self, response: str, sample: Sample) -> dict[str, Any]:
        """muir_process_results, and muir_aggregation's comparison."""
        return {"muirbench_score_overall": float(response.lower().strip() == sample.solution.lower().strip())}

    def aggregations(self):
        return {"muirbench_score_overall": mean}

    def synthetic_rows(self, size: int, seed: int):
        return (synthetic_row(*scene) for scene in dot_scenes(size, seed, fill=(200, 120, 20)))


def synthetic_row(image: Image.Image, count: int, index: int) -> dict[str, Any]:
    """Two images (the second mirrored, one row in two a third, flipped), asked about the first;
    two to four options, the right one in turn."""
    images = [image, ImageOps.mirror(image)] + ([ImageOps.flip(image)] if index % 2 else [])
    n = 2 + index % 3
    right = index % n
    return {"idx": str(index), "task": ("Counting", "Image-Text Matching")[index % 2], "image_relation": "Similar",
            "image_type": "Synthetic", "question": "How many dots does the first image <image> show?",
            "options": [str(count + k - right) for k in range(n)],
            "image_list": [image_cell(im, f"{index}_{k}.png") for k, im in enumerate(images)],
            "answer": chr(ord("A") + right), "counterpart_idx": ""}  # fmt: skip


BENCHMARKS = variants(MuirBench, [{"name": "muirbench", "split": "test", "dataset": "MUIRBENCH/MUIRBENCH",
                                   "description": "MuirBench (multi-image), lmms-eval's muirbench: the leading letter"}])  # fmt: skip
