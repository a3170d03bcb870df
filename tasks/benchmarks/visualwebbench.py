"""VisualWebBench's multiple-choice tasks as lmms-eval evaluates them (commit 75571cf):
`visualwebbench_element_ground`, `visualwebbench_action_prediction`,
`visualwebbench_action_ground` (lmms_eval/tasks/visualwebbench/{*.yaml, prompts.py, utils.py}) on
lmms-lab-encoder/VisualWebBench, configs element_ground, action_prediction, action_ground @ test:
web page screenshots, the element or action asked for picked among lettered candidates.

- Prompt (prompts.py, each ending in a newline): element_ground names the element's
  description (`elem_desc`); action_prediction the box (`bbox`, as Python writes it) and the
  options (`options`, as Python writes them: a list in brackets); action_ground the
  instruction; 16 new tokens.
- The letter (parse_multi_choice_response over A-H): a one-character response upper-cased; an
  empty one reads "a" (no letter); one opening with a capital and a period, that capital; else,
  with , . ! ? ; : ' " removed, the "(X)" or else the " X " (space-delimited) letter, the last
  one where several are. Right when its index (A = 0) is `answer`.
- `accuracy`: the share right, in percent (each row 100 or 0, as there).

The other four VisualWebBench tasks (captions, heading and element OCR, web QA) are scored with
the `rouge` package's ROUGE, which vlrl does not depend on; not offered. A row of another
`task_type` than the task's (a folder of several configs given as the data) is skipped and named.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from rewards.text import compile_pattern, search
from tasks.benchmarks import LMMS_EVAL
from tasks.benchmarks.screenspot import synthetic_screens
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, mean, variants

PROMPTS = {
    "element_ground": "In this website screenshot, I have labeled IDs for some HTML elements as candicates. Tell me "
    "which one best matches the description: {elem_desc}\n\nYou should directly tell me your choice in a single "
    "uppercase letter, and do not output any explanation or any other contents.\n",
    "action_prediction": "You are given a screenshot of a webpage with a red rectangle bounding box. The [x1, y1, x2, "
    "y2] coordinates of the bounding box is {bbox}.\nPlease select the best webpage description that matches the new "
    "webpage after clicking the selected element in the bounding box:\n{options}\n\nYou should directly tell me your "
    "choice in a single uppercase letter, and do not output any explanation or any other contents.\n",
    "action_ground": "In this website screenshot, I have labeled IDs for some HTML elements as candicates. Tell me "
    "which one I should click to complete the following task: {instruction}\n\nYou should directly tell me your "
    "choice in a single uppercase letter, and do not output any explanation or any other contents.\n",
}  # prompts.py
FIELDS = {"element_ground": ("elem_desc",), "action_prediction": ("bbox", "options"), "action_ground": ("instruction",)}
CHOICES = "ABCDEFGH"
LETTER_PERIOD = compile_pattern(r"^[A-Z]\.")  # re.match: at the start
STRIPPED = ",.!?;:'\""
SCHEMA = pa.schema(
    [("id", pa.string()), ("task_type", pa.string()), ("website", pa.string()), ("image", IMAGE_TYPE),
     ("image_size", pa.list_(pa.int64())), ("options", pa.list_(pa.string())), ("bbox", pa.list_(pa.float64())),
     ("elem_desc", pa.string()), ("instruction", pa.string()), ("answer", pa.int64())]
)  # fmt: skip


def choice_letter(response: str) -> str:
    """utils.parse_multi_choice_response over A-H."""
    if len(response) == 1:
        return response.upper()
    if not response:
        return "a"
    if search(LETTER_PERIOD, response):
        return response[0]
    for char in STRIPPED:
        response = response.replace(char, "")
    response = f" {response} "
    candidates = [c for c in CHOICES if f"({c})" in response]
    form = "({})" if candidates else " {} "
    candidates = candidates or [c for c in CHOICES if f" {c} " in response]
    if not candidates:
        return "z"
    return candidates[int(np.argmax([response.rfind(form.format(c)) for c in candidates]))]


def choice_index(response: str) -> int:
    """visualwebbench_process_results_accuracy's reading: the letter's index, -1 for no capital
    (a one-character response that upper-cases to two, "ß", is none: ord() raises there)."""
    letter = choice_letter(response)
    return ord(letter) - ord("A") if len(letter) == 1 and "A" <= letter <= "Z" else -1


class VisualWebBench(Benchmark):
    """lmms_eval/tasks/visualwebbench/utils.py, the accuracy tasks."""

    reference = LMMS_EVAL
    columns = (Column("image", "image"), Column("task_type", "string"), Column("answer", "int"),
               Column("elem_desc", "string", required=False), Column("instruction", "string", required=False),
               Column("bbox", "list<number>|string", required=False),
               Column("options", "list<string>|string", required=False))  # fmt: skip
    schema = SCHEMA
    max_new_tokens = 16

    @property
    def task_type(self) -> str:
        return self.name.removeprefix("visualwebbench_")

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        kind = ctx.get(record, "task_type", str, "the row's task type")
        if kind != self.task_type:
            raise ctx.error(f"task_type {kind!r} is not {self.task_type!r}: give the {self.task_type} config's folder")
        missing = [field for field in FIELDS[kind] if record.get(field) is None]
        if missing:
            raise ctx.error(f"a {kind} row needs {', '.join(missing)}")
        prompt = PROMPTS[kind].format(**{field: record[field] for field in FIELDS[kind]})
        return row_sample(self.name, ctx, prompt, record["answer"], [record_image(record, ctx)])

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        return {"accuracy": 100.0 if choice_index(completion) == sample.solution else 0.0}

    def aggregations(self):
        return {"accuracy": mean}

    def synthetic_rows(self, size: int, seed: int):
        for image, (x1, y1, x2, y2), _, _, index in synthetic_screens(size, seed):
            width, height = image.size
            yield {"id": f"{self.task_type}_{index}", "task_type": self.task_type, "website": "example.com",
                   "image": image_cell(image, f"{index}.png"), "image_size": [width, height],
                   "options": [f"a page about item {k}" for k in range(2 + index % 7)],
                   "bbox": [round(x1 / width, 2), round(y1 / height, 2), round(x2 / width, 2), round(y2 / height, 2)],
                   "elem_desc": f"the blue button {index}", "instruction": f"open item {index}",
                   "answer": index % (2 + index % 7)}  # fmt: skip


BENCHMARKS = variants(VisualWebBench, [
    {"name": f"visualwebbench_{kind}", "split": "test", "dataset": f"lmms-lab-encoder/VisualWebBench ({kind})",
     "description": f"VisualWebBench {kind.replace('_', ' ')}, lmms-eval's visualwebbench_{kind}: the candidate's letter"}
    for kind in ("element_ground", "action_prediction", "action_ground")])  # fmt: skip
