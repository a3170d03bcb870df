"""MindCube as lmms-eval evaluates it (commit 75571cf): `mindcube_full`, `mindcube_full_among`,
`mindcube_full_around`, `mindcube_full_rotation`, `mindcube_tiny`, `mindcube_tiny_among`,
`mindcube_tiny_around`, `mindcube_tiny_rotation` (lmms_eval/tasks/mindcube/{*.yaml, utils.py})
on oscarqjh/MindCube_lmmseval, configs `full` and `tiny`, splits `combined`, `among`, `around`,
`rotation`: spatial mental modeling from a few views (objects among others, around them, and
the viewer's rotation).

- Prompt: the row's `input_prompt`. A chat model class gets it interleaved
  (mindcube_doc_to_messages): the text split at each "<image>", each piece stripped and kept
  where not empty, each split point followed by the next image while there is one (images past
  the last "<image>" are not shown). A simple class gets the images, then the text with
  "<image>" deleted. 4,096 new tokens.
- The letter (extract_answer, from MindCube's own code): the last "X." (A-E); else, after an
  "<Answer>" tag, the last of the first of its patterns to match ("my answer is X", "the answer
  is X", "X.", a standalone X); else the last match of the first of its priority patterns (a
  letter at a line's start, in quotes or asterisks, after "Answer:", after "answer is"); else the
  first standalone A-E of the last line holding one. Right when it is `gt_answer`.
- Metrics: `overall_accuracy` and, by the first "_"-separated part of the row's `id` ("among",
  "rotation", "around"/"aroundnew"), `among_accuracy`, `rotation_accuracy`, `around_accuracy`
  (0 where there are none).
- The samples file's target is the text "grounded_output": the yaml's doc_to_target names no
  column of the dataset, so lmms-eval renders it as itself.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pyarrow as pa
import regex

from rewards.text import compile_pattern, finditer, search
from tasks.benchmarks import LMMS_EVAL, share_where
from tasks.benchmarks.counting import dot_scenes
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, mean, variants

IMAGE = "<image>"
SIMPLE = compile_pattern(r"([A-E])\.")
ANSWER_SECTION = compile_pattern(r"<Answer>(.*?)(?:<|$)", regex.DOTALL)
# `\b` there: beside a letter (a word character) it is no word character
SECTION_PATTERNS = tuple(
    compile_pattern(p)
    for p in (r"[Mm]y answer is ([A-E])", r"[Mm]y answer is ([A-E])\.", r"[Tt]he answer is ([A-E])",
              r"(?:Answer: )?([A-E])\.", r"(?<!\w)([A-E])(?!\w)")
)  # fmt: skip
PRIORITY_PATTERNS = tuple(
    compile_pattern(p)
    for p in (r'(?:Answer: )?([A-E])\. [A-Za-z0-9 \-\(\)\'",]+(?=(?:\n|$|\.|"))',
              r'(?:Answer: )?([A-E])\. [A-Za-z0-9 \-\(\)\'"]+', r"(?:^|\n)(?:Answer: )?([A-E])(?:\.|$|\s)",
              r"[\*\"]([A-E])[\*\"]", r"(?<!\w)Answer:?\s*([A-E])(?!\w)", r"[Mm]y answer is ([A-E])",
              r"[Mm]y answer is ([A-E])\.", r"answer is ([A-E])")
)  # fmt: skip
LINE_FULL = compile_pattern(r'([A-E])\. [A-Za-z0-9 \-\(\)\'",]+')
LINE_LETTER = compile_pattern(r"(?<!\w)([A-E])(?!\w)")
TYPES = {"among": "among", "rotation": "rotation", "around": "around", "aroundnew": "around"}
SCHEMA = pa.schema(
    [("id", pa.string()), ("input_prompt", pa.string()), ("images", pa.list_(IMAGE_TYPE)), ("gt_answer", pa.string())]
)


def _last(pattern: Any, text: str) -> str | None:
    matches = finditer(pattern, text)
    return matches[-1].group(1) if matches else None


def answer_letter(text: str) -> str | None:
    """extract_answer."""
    if not text:
        return None
    if (letter := _last(SIMPLE, text)) is not None:
        return letter
    if (section := search(ANSWER_SECTION, text)) is not None:
        for pattern in SECTION_PATTERNS:
            if (letter := _last(pattern, section.group(1))) is not None:
                return letter
    for pattern in PRIORITY_PATTERNS:
        if (letter := _last(pattern, text)) is not None:
            return letter
    lines = text.split("\n")
    full = [match.group(1) for line in lines if (match := search(LINE_FULL, line)) is not None]
    if full:
        return full[-1]
    for line in reversed(lines):
        if (match := search(LINE_LETTER, line)) is not None:
            return match.group(1)
    return None


def question_type(row_id: str) -> str:
    return TYPES.get(row_id.split("_", 1)[0], "other")


class MindCube(Benchmark):
    """lmms_eval/tasks/mindcube/utils.py with the default kwargs."""

    reference = LMMS_EVAL
    doc_to_target = "grounded_output"
    columns = (Column("id", "string"), Column("input_prompt", "string"), Column("images", "list<image>"),
               Column("gt_answer", "string"))  # fmt: skip
    schema = SCHEMA
    max_new_tokens = 4096
    config: ClassVar[str] = "full"  # the dataset config the split is of

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        prompt = ctx.get(record, "input_prompt", str, "the prompt")
        images = [record_image({"image": image}, ctx) for image in record["images"] or []]
        if self.model_class.chat:  # the images the interleaved message shows: one per "<image>"
            images = images[: prompt.count(IMAGE)]
        truth = {"answer": record["gt_answer"], "type": question_type(ctx.get(record, "id", str, "the row's id"))}
        return row_sample(self.name, ctx, prompt, truth, images)

    def messages(self, sample: Sample) -> list[dict[str, Any]]:
        """A chat class: _mindcube_interleaved_messages; a simple one: images, then text."""
        messages = super().messages(sample)
        if not self.model_class.chat:
            return messages
        pieces = sample.problem.split(IMAGE)
        content: list[dict[str, Any]] = []
        for i, piece in enumerate(pieces):
            if piece.strip():
                content.append({"type": "text", "text": piece.strip()})
            if i != len(pieces) - 1 and i < len(sample.images):
                content.append({"type": "image"})
        return [*messages[:-1], {"role": "user", "content": content}]

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        truth = sample.solution
        score = 1.0 if answer_letter(completion) == truth["answer"] else 0.0
        typed = {"score": score, "type": truth["type"]}
        return {"overall_accuracy": {"score": score}, **{f"{kind}_accuracy": typed for kind in TYPES.values()}}

    def aggregations(self):
        overall = {"overall_accuracy": lambda items: mean([item["score"] for item in items])}
        return overall | {f"{kind}_accuracy": share_where("type", kind) for kind in ("rotation", "among", "around")}

    def synthetic_rows(self, size: int, seed: int):
        kinds = ("among", "around", "rotation", "aroundnew", "other")
        for image, count, index in dot_scenes(size, seed, fill=(120, 60, 30)):
            right = index % 5
            options = " ".join(f"{'ABCDE'[k]}. {count - right + k}" for k in range(5))
            views = ("<image> <image>\n", "View 1: <image>\nView 2:", "", "<image>")[index % 4]
            yield {"id": f"{kinds[index % len(kinds)]}_{index}", "input_prompt": f"{views}How many dots? {options}",
                   "images": [image_cell(image, f"{index}.png")] * (1 + index % 3), "gt_answer": "ABCDE"[right]}  # fmt: skip


BENCHMARKS = variants(MindCube, [
    {"name": f"mindcube_{config}{'' if split == 'combined' else '_' + split}", "split": split, "config": config,
     "dataset": f"oscarqjh/MindCube_lmmseval ({config})",
     "description": f"MindCube {config} {split}, lmms-eval's mindcube_{config}"
     f"{'' if split == 'combined' else '_' + split}: MindCube's answer letter"}
    for config in ("full", "tiny") for split in ("combined", "among", "around", "rotation")
])  # fmt: skip
