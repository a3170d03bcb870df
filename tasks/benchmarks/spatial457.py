"""Spatial457 as lmms-eval evaluates it (commit 75571cf): `spatial457_l1_single`,
`spatial457_l2_objects`, `spatial457_l3_2d_spatial`, `spatial457_l4_occ`, `spatial457_l4_pose`,
`spatial457_l5_6d_spatial`, `spatial457_l5_collision` (lmms_eval/tasks/spatial457/{*.yaml,
utils.py}) on lmms-lab-eval/Spatial457, one config per level @ test: questions of growing
spatial difficulty (attributes, several objects, 2D relations, occlusion, pose, 6D relations,
collisions) over synthetic 3D scenes.

- Prompt: the level's task instruction (its `category` kwarg's), the question, "\\n", and the
  reasoning instruction asking for {'Reasoning': ..., 'Answer': ...}; the image before it; 512
  new tokens.
- The answer (_extract_answer_from_response, case-insensitive): the quoted text after
  "Answer" and ":" or "=" (quotes around "Answer" allowed); else the word after "Answer", an
  optional quote and ":" and an optional quote; else (never reached: the second pattern reads
  every digit answer it would) the digits after a quoted "Answer":; else the whole response,
  stripped.
- Right (_check_correctness): equal to the answer written as text (`str(answer)`, stripped)
  when both are lower-cased and stripped; or both among yes/true/1, or among no/false/0; or
  both `isdigit()` and equal as integers. A digit `isdigit()` accepts but `int()` refuses
  ("²") makes lmms-eval fail; here it is only not equal.
- `spatial457_accuracy`: the share right. The samples file logs each row's category as
  process_results computes it, which is not given the level's kwarg: the row's `category`,
  else read off `question_index` (below 200,000 L1_single, ... from 550,000 L5_collision).
"""

from __future__ import annotations

from typing import Any, ClassVar

import pyarrow as pa
import regex

from rewards.text import compile_pattern, search
from tasks.benchmarks import LMMS_EVAL
from tasks.benchmarks.counting import dot_scenes
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, mean, variants

_OPENING = "You are an intelligent chatbot designed to answer questions based on an image. Your task is to analyze the images, identify attributes of "  # fmt: skip
INSTRUCTIONS = {
    "L1_single": _OPENING + "the objects, and then determine the answer to the question.\n",
    "L2_objects": _OPENING + "multiple objects, and then determine the answer to the question.\n",
    "L3_2d_spatial": _OPENING + "multiple objects and their spatial relationship from 2D projected camera view, and "
    "then determine the answer to the question.\n",
    "L4_occ": _OPENING + "multiple objects and their occlusion relationships, and then determine the answer to the "
    "question.\n",
    "L4_pose": _OPENING + "multiple objects and their facing direction in 3D space from the camera view, and then "
    "determine the answer to the question.\n",
    "L5_6d_spatial": _OPENING + "multiple objects and their spatial relationship from objects' perspective in 3D "
    "space, and then determine the answer to the question.\n",
    "L5_collision": _OPENING + "multiple objects and their potential collision given the assumption of moving "
    "direction in 3D space, and then determine the answer to the question.\n",
}  # TASK_INSTRUCTIONS
REASONING_INSTRUCTION = (
    "First, you should identify the related objects referred in the questions, including their shape, color, size; "
    "then add a brief reasoning process about the questions. Each object in the image has a shape (e.g., 'airliner'), "
    "a size (only can be 'small' or 'large'), a color (e.g. 'blue'). The size of the object is either 'small' or "
    "'large'. The color of the object is one of the following: 'gray', 'blue', 'purple', 'brown', 'green', 'cyan', "
    "'red', 'yellow'. The direction of the object is one of the following: 'left', 'right', 'front', 'back'.\n\n"
    "Second, give the answer based on the reasoning process. The answer should only be (1) a phrase, or (2) an "
    "integer [0-10] when asked for 'How many' or 'What is the number of', or (3) 'Yes' or 'No' when asked for 'Is "
    "there'. If you think there are no possible answers or the question is not clear, choose the best answer that "
    "fits the question.\n\nWrite your response into this json template: {'Reasoning': '<your reasons>', 'Answer': "
    "'<Your answer>'}"
)
ANSWER_PATTERNS = tuple(
    compile_pattern(p, regex.IGNORECASE)
    for p in (r"['\"]?Answer['\"]?\s*[:=]\s*['\"]([^'\"]+)['\"]", r"Answer['\"]?\s*:\s*['\"]?(\w+)",
              r"['\"]Answer['\"]:\s*(\d+)")
)  # fmt: skip
YES, NO = {"yes", "true", "1"}, {"no", "false", "0"}
# _get_category_from_doc: the level of a question_index below each bound, in turn
INDEX_LEVELS = ((200000, "L1_single"), (300000, "L2_objects"), (400000, "L3_2d_spatial"), (450000, "L4_occ"),
                (500000, "L4_pose"), (550000, "L5_6d_spatial"))  # fmt: skip
SCHEMA = pa.schema(
    [("image", IMAGE_TYPE), ("question", pa.string()), ("answer", pa.string()), ("question_index", pa.int64())]
)


def extracted_answer(response: str) -> str:
    """_extract_answer_from_response."""
    for pattern in ANSWER_PATTERNS:
        if (match := search(pattern, response)) is not None:
            return match.group(1).strip()
    return response.strip()


def is_right(truth: str, answer: str) -> bool:
    """_check_correctness."""
    truth, answer = truth.strip().lower(), answer.strip().lower()
    if truth == answer or (truth in YES and answer in YES) or (truth in NO and answer in NO):
        return True
    if truth.isdigit() and answer.isdigit():
        try:
            return int(truth) == int(answer)
        except ValueError:  # a digit int() does not read: lmms-eval fails there
            return False
    return False


def index_level(question_index: int) -> str:
    return next((level for bound, level in INDEX_LEVELS if question_index < bound), "L5_collision")


class Spatial457(Benchmark):
    """lmms_eval/tasks/spatial457/utils.py with the level's kwargs."""

    reference = LMMS_EVAL
    columns = (Column("image", "image", required=False), Column("question", "string", required=False),
               Column("answer", "string|int"), Column("question_index", "int", required=False),
               Column("category", "string", required=False))  # fmt: skip
    schema = SCHEMA
    max_new_tokens = 512
    category: ClassVar[str] = "L1_single"  # the level's lmms_eval_specific_kwargs category

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        question = record.get("question") or ""
        prompt = INSTRUCTIONS[self.category] + question + "\n" + REASONING_INSTRUCTION
        answer = ctx.get(record, "answer", (str, int), "the answer")  # lmms-eval compares a null one's "None"
        index = record.get("question_index") or 0
        logged = record["category"] if "category" in record else index_level(index)
        truth = {"answer": str(answer).strip(), "question_index": index, "category": logged}
        images = [record_image(record, ctx)] if record.get("image") is not None else []
        return row_sample(self.name, ctx, prompt, truth, images)

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        truth, answer = sample.solution, extracted_answer(completion)
        return {"spatial457_accuracy": {"question_index": truth["question_index"], "category": truth["category"],
                                        "gt_answer": truth["answer"], "pred_answer": answer, "response": completion,
                                        "is_correct": is_right(truth["answer"], answer)}}  # fmt: skip

    def aggregations(self):
        return {"spatial457_accuracy": lambda items: mean([1.0 if item["is_correct"] else 0.0 for item in items])}

    def synthetic_rows(self, size: int, seed: int):
        for image, count, index in dot_scenes(size, seed, fill=(60, 140, 200)):
            answer = ("Yes", str(count), "large", "No")[index % 4]
            yield {"image": image_cell(image, f"{index}.png"), "question": "How many dots are there?",
                   "answer": answer, "question_index": 100000 * (1 + index % 6) + index}  # fmt: skip


LEVELS = ("L1_single", "L2_objects", "L3_2d_spatial", "L4_occ", "L4_pose", "L5_6d_spatial", "L5_collision")
BENCHMARKS = variants(Spatial457, [
    {"name": f"spatial457_{level.lower()}", "split": "test", "dataset": f"lmms-lab-eval/Spatial457 ({level})",
     "category": level, "description": f"Spatial457 {level}, lmms-eval's spatial457_{level.lower()}: the "
     "answer read off its JSON template, exact or as yes/no/number"}
    for level in LEVELS
])  # fmt: skip
