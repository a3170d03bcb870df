"""VLMs are Blind (BlindTest) as lmms-eval evaluates it (commit 75571cf): `vlmsareblind`
(lmms_eval/tasks/vlmsareblind/{vlmsareblind.yaml, utils.py}) on XAI/vlmsareblind @ valid:
low-level geometry a person sees at a glance (touching circles, line crossings, a circled
letter, nested squares, rings, grid rows and columns, subway paths).

- Prompt: the row's `prompt` (which states the answer format) + "\\nAnswer only in the required
  format."; 32 new tokens.
- The answer (parse_response, on the response stripped and lower-cased), by `task`: touching
  circles, the whole response "yes" or "no"; line plot intersections, subway connections, the
  olympic countings and nested squares, the first run of digits anywhere (in braces or not);
  circled letter, the first letter a-z anywhere ("the letter is b" reads t, as there); the
  counting grids, "{r}{c}" (or "{r} {c}"), else "(r, c)", else "rows={r} columns={c}", as "r,c".
  Right when it equals `groundtruth`, stripped and lower-cased; no answer (another task too) is
  wrong.
- `accuracy`: the share right. `accuracy_by_task` (a dict there, `accuracy_by_task/<task>`
  here): the share right per task, the two counting grids as one "counting grid", and
  `task_mean`, their mean. Only a task with a right answer has an entry, so `task_mean` leaves
  out the tasks with none (as there); with no right answer at all lmms-eval fails (a mean of
  nothing), and vlrl reports `task_mean` 0.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pyarrow as pa
from PIL import Image, ImageDraw

from rewards.text import compile_pattern, search
from tasks.benchmarks import LMMS_EVAL
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, mean, variants

POST_PROMPT = "\nAnswer only in the required format."
TASKS = ("circled letter", "counting grid - blank grids", "counting grid - word grids", "line plot intersections",
         "nested squares", "olympic counting - circles", "olympic counting - pentagons", "subway connections",
         "touching circles")  # fmt: skip
GROUPED = {"counting grid - blank grids": "counting grid", "counting grid - word grids": "counting grid"}  # TASK_MAP
NUMBER_TASKS = ("line plot intersections", "subway connections", "olympic counting - circles",
                "olympic counting - pentagons", "nested squares")  # fmt: skip
NUMBER = compile_pattern(r"\{?(\d+)\}?")
LETTER = compile_pattern(r"\{?([a-z])\}?")
GRID = (compile_pattern(r"\{(\d+)\}\s*\{(\d+)\}"), compile_pattern(r"\((\d+)\s*,\s*(\d+)\)"),
        compile_pattern(r"rows=\{(\d+)\}\scolumns=\{(\d+)\}"))  # fmt: skip
SCHEMA = pa.schema(
    [("image", IMAGE_TYPE), ("prompt", pa.string()), ("groundtruth", pa.string()), ("task", pa.string())]
)


def parse_response(response: str, task: str) -> str | None:
    """utils.parse_response: the answer in the task's format, None without one."""
    response, task = response.strip().lower(), task.lower()
    if task == "touching circles" and response in ("yes", "no"):
        return response
    if task in NUMBER_TASKS and (match := search(NUMBER, response)):
        return match.group(1)
    if task == "circled letter" and (match := search(LETTER, response)):
        return match.group(1)
    if task.startswith("counting grid"):
        for pattern in GRID:
            if match := search(pattern, response):
                return f"{match.group(1)},{match.group(2)}"
    return None


def accuracy_by_task(items: list[dict[str, Any]]) -> dict[str, float]:
    """utils.vlmsareblind_aggregate_by_task: per (grouped) task with a right answer, its share
    right, and their mean (0 where no task has one; lmms-eval divides by zero there)."""
    right: dict[str, int] = defaultdict(int)
    total: dict[str, int] = defaultdict(int)
    for item in items:
        task = GROUPED.get(item["task"].lower(), item["task"].lower())
        total[task] += 1
        if item["is_correct"]:
            right[task] += 1
    shares = {task: right[task] / total[task] for task in right}
    return shares | {"task_mean": sum(shares.values()) / len(shares) if shares else 0.0}


class VLMsAreBlind(Benchmark):
    """lmms_eval/tasks/vlmsareblind/utils.py."""

    reference = LMMS_EVAL
    doc_to_target = "groundtruth"
    columns = (Column("image", "image"), Column("prompt", "string", required=False), Column("groundtruth", "string"),
               Column("task", "string"))  # fmt: skip
    schema = SCHEMA
    max_new_tokens = 32

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        truth = {
            "answer": ctx.get(record, "groundtruth", str, "the answer"),
            "task": ctx.get(record, "task", str, "the task"),
        }
        prompt = f"{record.get('prompt', '')}{POST_PROMPT}"  # a null prompt: "None", as there
        return row_sample(self.name, ctx, prompt, truth, [record_image(record, ctx)])

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        task, answer = sample.solution["task"], sample.solution["answer"]
        prediction = parse_response(completion.strip().lower(), task)
        right = prediction is not None and prediction.strip().lower() == answer.strip().lower()
        return {"accuracy": float(right), "accuracy_by_task": {"task": task, "is_correct": right}}

    def aggregations(self):
        return {"accuracy": lambda items: mean(items)}

    def aggregate(self, processed) -> dict[str, float]:
        by_task = accuracy_by_task([values["accuracy_by_task"] for values in processed])
        return super().aggregate(processed) | {f"accuracy_by_task/{task}": share for task, share in by_task.items()}

    def synthetic_rows(self, size: int, seed: int):
        for index in range(size):
            task = TASKS[index % len(TASKS)]
            n = 2 + index % 4
            image = Image.new("RGB", (96, 96), (255, 255, 255))
            for k in range(n):
                ImageDraw.Draw(image).ellipse([6 + 20 * k, 30, 26 + 20 * k, 50], outline=(0, 0, 200), width=2)
            answer = {"circled letter": "abcd"[index % 4], "touching circles": ("Yes", "No")[index % 2]}.get(
                task, f"{n},{n + 1}" if task.startswith("counting grid") else str(n)
            )
            yield {"image": image_cell(image, f"{index}.png"), "task": task.title() if index % 7 == 6 else task,
                   "prompt": f"{task}: answer in curly brackets, e.g., {{3}}.", "groundtruth": answer}  # fmt: skip


BENCHMARKS = variants(VLMsAreBlind, [
    {"name": "vlmsareblind", "split": "valid", "dataset": "XAI/vlmsareblind",
     "description": "VLMs are Blind (BlindTest), lmms-eval's vlmsareblind: the answer in each task's format"}])  # fmt: skip
