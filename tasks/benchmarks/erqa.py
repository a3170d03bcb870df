"""ERQA (Embodied Reasoning QA, Gemini Robotics) as lmms-eval evaluates it (commit 75571cf):
`erqa` (lmms_eval/tasks/erqa/{erqa.yaml, _default_template_yaml, utils.py}) on FlagEval/ERQA @
test: multiple-choice questions about robots' scenes (spatial reasoning, trajectories, actions,
state estimation), the options written in the question, one image or several.

- The images: every non-null one of `images`, in order, before the text (erqa_doc_to_messages).
- Prompt: the question as written; 1,024 new tokens.
- The letter: extract_mcq_answer (_task_utils/mcq_extract.py, MMStar's) over A-D; right when it
  equals `answer` as written (no letter: "", wrong).
- `erqa_acc`: the share right (the per-`question_type` shares are only logged there).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from tasks.benchmarks import LMMS_EVAL
from tasks.benchmarks.counting import dot_scenes
from tasks.benchmarks.mcq_extract import extract_mcq_answer
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, mean, variants

CHOICES = "ABCD"  # erqa_process_results' choices
SCHEMA = pa.schema(
    [("question_id", pa.string()), ("question", pa.string()), ("question_type", pa.string()),
     ("images", pa.list_(IMAGE_TYPE)), ("answer", pa.string())]
)  # fmt: skip


class ERQA(Benchmark):
    """lmms_eval/tasks/erqa/utils.py."""

    reference = LMMS_EVAL
    columns = (Column("question_id", "string|int"), Column("question", "string"), Column("question_type", "string"),
               Column("images", "list<image>", required=False), Column("answer", "string"))  # fmt: skip
    schema = SCHEMA
    max_new_tokens = 1024

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        truth = {"answer": ctx.get(record, "answer", str, "the answer's letter"), "id": record["question_id"],
                 "sub_task": record["question_type"]}  # fmt: skip
        images = [record_image({"image": image}, ctx) for image in record.get("images") or [] if image is not None]
        return row_sample(self.name, ctx, ctx.get(record, "question", str, "the question"), truth, images)

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        truth = sample.solution
        return {"erqa_acc": {"id": truth["id"], "gt_content": truth["answer"], "pred": completion,
                             "sub_task": truth["sub_task"],
                             "is_correct": extract_mcq_answer(completion, CHOICES) == truth["answer"]}}  # fmt: skip

    def aggregations(self):
        return {"erqa_acc": lambda items: mean([1.0 if item["is_correct"] else 0.0 for item in items])}

    def synthetic_rows(self, size: int, seed: int):
        for image, count, index in dot_scenes(size, seed, fill=(90, 90, 200)):
            right = index % 4
            options = " ".join(f"{letter}. {count - right + k}" for k, letter in enumerate(CHOICES))
            images = [[image_cell(image, f"{index}.png")], [None, image_cell(image, f"{index}.png")], []][index % 3]
            question = f"How many dots are there? Choices: {options}"
            yield {"question_id": f"erqa_{index}", "question": f" {question}\n" if index % 2 else question,
                   "question_type": ("Spatial Reasoning", "Trajectory Reasoning")[index % 2], "images": images,
                   "answer": CHOICES[right].lower() if index % 5 == 4 else CHOICES[right]}  # fmt: skip


BENCHMARKS = variants(ERQA, [
    {"name": "erqa", "split": "test", "dataset": "FlagEval/ERQA",
     "description": "ERQA (embodied reasoning), lmms-eval's erqa: the option letter extract_mcq_answer reads"}])  # fmt: skip
