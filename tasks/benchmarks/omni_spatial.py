"""OmniSpatial as lmms-eval evaluates it (commit 75571cf): `omni_spatial`
(lmms_eval/tasks/omni_spatial/{omni_spatial.yaml, utils.py}) on nv-njb/OmniSpatial-Test @ test:
1,533 multiple-choice questions on spatial reasoning over one image (complex logic, dynamic
reasoning, perspective taking, spatial interaction), answered directly with a letter.

- Prompt: OmniSpatial's system prompt and its direct-answer note, "\\n", the question, then
  "\\nA. ...", "\\nB. ..." for each option; the image before it; 16 new tokens.
- The letter (_strip_think): the response cut after its first "</think>", then after its first
  "</thought>"; the first <answer>...</answer> (any case) if there is one, else all of it;
  stripped, upper-cased, its first character. Right when it is the letter of `answer` (the
  right option's index).
- Metrics: `omni_spatial_score` (the share right) and the share right of each `task_type`:
  `complex_logic`, `dynamic_reasoning`, `perspective_taking`, `spatial_interaction` (0 where
  there are none).
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

SYSTEM_PROMPT = """\
You are a spatial-reasoning assistant.

Task
-----
You will receive
1. **Image** - a single RGB frame depicting a scene.
2. **Multi-View Image** - a RGB frame depicting a scene from 6 novel views.
3. **Question** - a natural-language query about spatial relationships between objects in the image.
4. **Options** - >=2 answer candidates, each tagged by a capital letter (A, B, C, D...).

Based on the image and question, provide your answer.
Always ground your answer in the visual evidence; do not hallucinate unseen objects.
If uncertain, pick the most plausible option---never refuse or reply "insufficient information."
"""  # DEFAULT_SYSTEM_PROMPT
DIRECT_FORMAT = "\nNote: You only need to respond with A, B, C, or D without providing any additional information.\n"
TASK_TYPES = {"complex_logic": "Complex_Logic", "dynamic_reasoning": "Dynamic_Reasoning",
              "perspective_taking": "Perspective_Taking", "spatial_interaction": "Spatial_Interaction"}  # fmt: skip
THINKING_ENDS = tuple(compile_pattern(p, regex.DOTALL) for p in (r"^.*?</think>", r"^.*?</thought>"))
ANSWER_TAG = compile_pattern(r"<answer>(.*?)</answer>", regex.DOTALL | regex.IGNORECASE)
SCHEMA = pa.schema(
    [("image", IMAGE_TYPE), ("question", pa.string()), ("options", pa.list_(pa.string())), ("answer", pa.int64()),
     ("task_type", pa.string()), ("sub_task_type", pa.string())]
)  # fmt: skip


def answer_letter(response: str) -> str:
    """_strip_think, then the first character upper-cased ("" of nothing)."""
    for pattern in THINKING_ENDS:
        response = pattern.sub("", response, count=1)
    tagged = search(ANSWER_TAG, response)
    response = tagged.group(1).strip() if tagged else response.strip()
    return response.strip().upper()[:1]


class OmniSpatial(Benchmark):
    """lmms_eval/tasks/omni_spatial/utils.py with the default kwargs (eval_type direct)."""

    reference = LMMS_EVAL
    columns = (Column("image", "image"), Column("question", "string"), Column("options", "list<string>"),
               Column("answer", "int|string"), Column("task_type", "string", required=False),
               Column("sub_task_type", "string", required=False))  # fmt: skip
    schema = SCHEMA
    max_new_tokens = 16

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        try:
            right = chr(65 + int(record["answer"]))
        except (TypeError, ValueError, OverflowError):
            raise ctx.error(f"answer {record['answer']!r} is no option's index (lmms-eval fails on it)"[:200]) from None
        options = "".join(f"\n{chr(65 + i)}. {option}" for i, option in enumerate(record["options"] or []))
        prompt = SYSTEM_PROMPT + DIRECT_FORMAT + "\n" + ctx.get(record, "question", str, "the question") + options
        truth = {"answer": right, "task_type": str(record.get("task_type", "")),
                 "sub_task_type": str(record.get("sub_task_type", ""))}  # fmt: skip
        return row_sample(self.name, ctx, prompt, truth, [record_image(record, ctx)])

    def doc_target(self, record: dict[str, Any], sample: Sample) -> Any:
        return sample.solution["answer"]  # omni_spatial_doc_to_answer: the right option's letter

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        truth = sample.solution
        item = {"score": int(answer_letter(completion) == truth["answer"]), "task_type": truth["task_type"],
                "sub_task_type": truth["sub_task_type"]}  # fmt: skip
        return {name: item for name in ("omni_spatial_score", *TASK_TYPES)}

    def aggregations(self):
        overall = {"omni_spatial_score": lambda items: mean([item["score"] for item in items])}
        return overall | {name: share_where("task_type", task_type) for name, task_type in TASK_TYPES.items()}

    def synthetic_rows(self, size: int, seed: int):
        kinds = [*TASK_TYPES.values(), None]
        for image, count, index in dot_scenes(size, seed, fill=(200, 200, 60)):
            right = index % 4
            yield {"image": image_cell(image, f"{index}.png"), "question": "How many dots are there?",
                   "options": [str(count - right + k) for k in range(4)][: 4 if index % 3 else 2],
                   "answer": right, "task_type": kinds[index % len(kinds)], "sub_task_type": "counting"}  # fmt: skip


BENCHMARKS = variants(OmniSpatial, [
    {"name": "omni_spatial", "split": "test", "dataset": "nv-njb/OmniSpatial-Test",
     "description": "OmniSpatial, lmms-eval's omni_spatial: the first letter after the thinking, by task type"}])  # fmt: skip
