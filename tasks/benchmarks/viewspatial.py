"""ViewSpatial-Bench as lmms-eval evaluates it (commit 75571cf): `viewspatial`
(lmms_eval/tasks/viewspatial/{viewspatial.yaml, utils.py}) on oscarqjh/ViewSpatial_lmmseval @
test: relative direction and orientation questions from the camera's and from a person's
perspective, over one image or several.

- Prompt (the paper's): "Question: " + the question + "\\n", "Choices: " + the choices as the
  row holds them (a list written as Python writes it) + "\\n", "Reply only to the corresponding
  option.\\nAnswer:"; the images before it. The yaml sets no generation length: the model
  class's default.
- The option (extract_option): the first A-D (either case) standing alone, upper-cased, of the
  response's last line; the answer's the same way from `answer` ("A. left"). Right when the two
  are the same, a response without one included where the answer has none (kept).
- Metrics: `overall_accuracy` (the share right) and one per question type,
  `camera_perspective_relative_direction_accuracy` ...
  `person_perspective_scene_simulation_relative_direction_accuracy` (0 where there are none).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import regex

from rewards.text import compile_pattern, search
from tasks.benchmarks import LMMS_EVAL, share_where
from tasks.benchmarks.counting import dot_scenes
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, mean, variants

TYPES = {
    "Camera perspective - Relative Direction": "camera_perspective_relative_direction",
    "Camera perspective - Object View Orientation": "camera_perspective_object_view_orientation",
    "Person perspective - Relative Direction": "person_perspective_relative_direction",
    "Person perspective - Object View Orientation": "person_perspective_object_view_orientation",
    "Person perspective - Scene Simulation Relative Direction": "person_perspective_scene_simulation_relative_direction",
}  # VIEWSPATIAL_QUESTION_TYPES: the data's question type -> its metric's stem
POST_PROMPT = "Reply only to the corresponding option.\nAnswer:"
# `\b([A-D])\b` there: a letter is a word character, so its boundaries are no word character beside it
OPTION = compile_pattern(r"(?<!\w)([A-D])(?!\w)", regex.IGNORECASE)
SCHEMA = pa.schema(
    [("question", pa.string()), ("choices", pa.string()), ("answer", pa.string()), ("question_type", pa.string()),
     ("images", pa.list_(IMAGE_TYPE))]
)  # fmt: skip


def option(text: str) -> str | None:
    """extract_option."""
    match = search(OPTION, text)
    return match.group(1).upper() if match else None


class ViewSpatial(Benchmark):
    """lmms_eval/tasks/viewspatial/utils.py."""

    reference = LMMS_EVAL
    columns = (Column("question", "string"), Column("choices", "string|list<string>"), Column("answer", "string"),
               Column("question_type", "string", required=False), Column("images", "list<image>"))  # fmt: skip
    schema = SCHEMA

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        prompt = f"Question: {record['question']}\nChoices: {record['choices']}\n{POST_PROMPT}"
        answer = ctx.get(record, "answer", str, "the answer")
        truth = {"option": option(answer), "question_type": record.get("question_type", "unknown")}
        images = [record_image({"image": image}, ctx) for image in record["images"] or []]
        return row_sample(self.name, ctx, prompt, truth, images)

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        truth = sample.solution
        score = 1.0 if option(completion.split("\n")[-1]) == truth["option"] else 0.0
        typed = {f"{stem}_accuracy": {"score": score, "question_type": truth["question_type"], "target_type": name}
                 for name, stem in TYPES.items()}  # fmt: skip
        return {"overall_accuracy": {"score": score}, **typed}

    def aggregations(self):
        overall = {"overall_accuracy": lambda items: mean([item["score"] for item in items])}
        return overall | {f"{stem}_accuracy": share_where("question_type", name) for name, stem in TYPES.items()}

    def synthetic_rows(self, size: int, seed: int):
        kinds = [*TYPES, "Unlisted"]
        for image, count, index in dot_scenes(size, seed, fill=(30, 100, 60)):
            right = index % 4
            choices = [f"{'ABCD'[k]}. {count - right + k}" for k in range(4)]
            yield {"question": "How many dots are there?", "choices": ", ".join(choices) if index % 2 else str(choices),
                   "answer": choices[right] if index % 5 else "none of them", "question_type": kinds[index % len(kinds)],
                   "images": [image_cell(image, f"{index}.png")] * (1 + index % 2)}  # fmt: skip


BENCHMARKS = variants(ViewSpatial, [
    {"name": "viewspatial", "split": "test", "dataset": "oscarqjh/ViewSpatial_lmmseval",
     "description": "ViewSpatial-Bench, lmms-eval's viewspatial: the option letter of the last line, by perspective"}])  # fmt: skip
