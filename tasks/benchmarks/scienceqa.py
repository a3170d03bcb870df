"""ScienceQA as lmms-eval evaluates it (commit 75571cf): `scienceqa` and `scienceqa_img`
(lmms_eval/tasks/scienceqa/utils.py) on lmms-lab-encoder/ScienceQA, its ScienceQA-FULL and
ScienceQA-IMG configs @ test (question, choices, answer: the right choice's index, hint,
image: none for a text-only question, and the subject fields).

- Prompt: "Context: " + the hint + "\\n" where there is one, the question, "\\n", the choices
  "A. ..." a line each, then "\\nAnswer with the option's letter from the given choices
  directly."; the image where there is one; 16 new tokens.
- Right (LLaVA's reading, as lmms-eval keeps it): the response, stripped, is the answer's
  letter in either case; or it begins with a capital letter and a period and that letter is
  the answer's ("B. A magnet" reads B; "b. x" and "(B)" read nothing). `exact_match`, the mean.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pyarrow as pa
from PIL import Image

from tasks.benchmarks import LMMS_EVAL, lettered
from tasks.benchmarks.counting import dot_scenes
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, mean, variants

POST_PROMPT = "\nAnswer with the option's letter from the given choices directly."
SCHEMA = pa.schema(
    [("image", IMAGE_TYPE), ("question", pa.string()), ("choices", pa.list_(pa.string())), ("answer", pa.int8()),
     ("hint", pa.string()), ("task", pa.string()), ("grade", pa.string()), ("subject", pa.string()),
     ("topic", pa.string()), ("category", pa.string()), ("skill", pa.string()), ("lecture", pa.string()),
     ("solution", pa.string())]
)  # fmt: skip


def sqa_prompt(question: str, choices: list[str], hint: str) -> str:
    """sqa_doc_to_text, the default format."""
    context = f"Context: {hint}\n" if hint else ""
    return f"{context}{question}\n{lettered(choices)}{POST_PROMPT}"


def sqa_right(response: str, letter: str) -> bool:
    """sqa_process_results: the letter itself, or "X." leading with a capital X."""
    target, pred = letter.strip().lower(), response.strip()
    if pred.lower() == target:
        return True
    return len(pred) >= 2 and pred[0].isupper() and pred[1] == "." and pred[0].lower() == target


class ScienceQA(Benchmark):
    """lmms_eval/tasks/scienceqa/utils.py with the default kwargs."""

    reference = LMMS_EVAL
    columns = (Column("question", "string"), Column("choices", "list<string>"), Column("answer", "int"),
               Column("hint", "string", required=False), Column("image", "image", required=False))  # fmt: skip
    schema = SCHEMA
    max_new_tokens = 16
    images_only: ClassVar[bool] = False  # ScienceQA-IMG: every question shows an image (its synthetic rows too)

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        choices = ctx.get(record, "choices", list, "the choices")
        answer = ctx.get(record, "answer", int, "the right choice's index")
        if not 0 <= answer < len(choices):
            raise ctx.error(f"answer {answer} names no choice of the {len(choices)} there are")
        prompt = sqa_prompt(ctx.get(record, "question", str, "the question"), choices, record.get("hint") or "")
        # sqa_doc_to_visual: no image for a text-only question
        images = [record_image(record, ctx)] if record.get("image") is not None else []
        return row_sample(self.name, ctx, prompt, chr(ord("A") + answer), images)

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        return {"exact_match": 1.0 if sqa_right(completion, sample.solution) else 0.0}

    def doc_target(self, record: dict[str, Any], sample: Sample) -> Any:
        return sample.solution  # sqa_doc_to_target: the right choice's letter

    def aggregations(self):
        return {"exact_match": mean}

    def synthetic_rows(self, size: int, seed: int):
        return (
            synthetic_row(*scene, with_image=self.images_only) for scene in dot_scenes(size, seed, fill=(10, 90, 160))
        )


def synthetic_row(image: Image.Image, count: int, index: int, with_image: bool = True) -> dict[str, Any]:
    """A counting question in ScienceQA's schema: two to four choices, the right one in turn, a
    hint one row in two; one row in three text-only (of the full set)."""
    n = 2 + index % 3
    right = index % n
    choices = [str(count + k - right) for k in range(n)]
    text_only = not with_image and index % 3 == 2
    return {"image": None if text_only else image_cell(image, f"{index}.png"), "question": "How many dots are there?",
            "choices": choices, "answer": right, "hint": "Count every dot." if index % 2 else "", "task": "closed choice",
            "grade": "grade2", "subject": "natural science", "topic": "counting", "category": "Counting",
            "skill": "Count", "lecture": "", "solution": ""}  # fmt: skip


BENCHMARKS = variants(ScienceQA, [
    {"name": "scienceqa", "split": "test", "dataset": "lmms-lab-encoder/ScienceQA (ScienceQA-FULL)",
     "description": "ScienceQA (its full test set, text-only questions too), lmms-eval's scienceqa"},
    {"name": "scienceqa_img", "split": "test", "dataset": "lmms-lab-encoder/ScienceQA (ScienceQA-IMG)", "images_only": True,
     "description": "ScienceQA's questions with an image (its ScienceQA-IMG config), lmms-eval's scienceqa_img"},
])  # fmt: skip
