"""IllusionVQA as lmms-eval evaluates it (commit 75571cf): `illusionvqa_comprehension` and
`illusionvqa_soft_localization` (lmms_eval/tasks/illusionvqa/{illusionvqa.yaml, utils.py}) on
csebuetnlp/illusionVQA-Comprehension and csebuetnlp/illusionVQA-Soft-Localization @ test:
optical illusions, impossible objects and hidden shapes, multiple choice.

Its utils.py is adapted from AI2D's, and scores as AI2D does (tasks/benchmarks/ai2d.py):

- Prompt: "You'll be given an image, an instruction and some options. You have to select the
  correct one. Do not explain your reasoning. Answer with only the letter which corresponds to
  the correct option. Do not repeat the entire answer." (the pre_prompt, with nothing between
  it and the question), the question, "\\n", and "A. option" lines; 16 new tokens.
- The filter ("flexible-extract", the same MultiChoiceRegexFilter): a response opening with a
  capital letter and a period becomes that letter. Then exact_match ignoring case and
  punctuation against the letter of `answer`, which is the right option's text
  (illusionvqa_doc_to_target: options.index(answer)). `exact_match`, the mean.

A row whose `answer` is none of its options is skipped and reported (lmms-eval raises there).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from PIL import Image

from tasks.benchmarks import lettered
from tasks.benchmarks.ai2d import AI2D
from tasks.benchmarks.counting import dot_scenes
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import variants

PRE_PROMPT = (
    "You'll be given an image, an instruction and some options. You have to select the correct one. Do not explain "
    "your reasoning. Answer with only the letter which corresponds to the correct option. Do not repeat the entire "
    "answer."
)
SCHEMA = pa.schema(
    [("image", IMAGE_TYPE), ("question", pa.string()), ("options", pa.list_(pa.string())), ("answer", pa.string()),
     ("category", pa.string())]
)  # fmt: skip


class IllusionVQA(AI2D):
    """lmms_eval/tasks/illusionvqa/utils.py."""

    columns = (Column("question", "string"), Column("options", "list<string>"), Column("answer", "string"),
               Column("image", "image"))  # fmt: skip
    schema = SCHEMA

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        question, options = ctx.get(record, "question", str, "the question"), record["options"]
        if not isinstance(options, list) or not options or not all(isinstance(o, str) for o in options):
            raise ctx.error(f"options must be a list of strings, got {options!r}"[:200])
        answer = ctx.get(record, "answer", str, "the right option's text")
        if answer not in options:
            raise ctx.error(f"answer must be one of the options {options!r}, got {answer!r}"[:200])
        prompt = f"{PRE_PROMPT}{question}\n{lettered(options)}"
        return row_sample(self.name, ctx, prompt, chr(ord("A") + options.index(answer)), [record_image(record, ctx)])

    def synthetic_rows(self, size: int, seed: int):
        return (_synthetic_row(*scene) for scene in dot_scenes(size, seed, fill=(160, 20, 160)))


def _synthetic_row(image: Image.Image, count: int, index: int) -> dict[str, Any]:
    """A counting question with two to four options, the right one in turn (a repeated option:
    the first of them is the target, as options.index finds it)."""
    options = [str(count + k - index % 3) for k in range(2 + index % 3)]
    if index % 5 == 4:
        options.append(options[index % 3 % len(options)])
    return {"image": image_cell(image, f"{index}.png"), "question": "How many dots are there?", "options": options,
            "answer": options[index % 3 % len(options)], "category": "counting"}  # fmt: skip


BENCHMARKS = variants(IllusionVQA, [
    {"name": "illusionvqa_comprehension", "split": "test", "dataset": "csebuetnlp/illusionVQA-Comprehension",
     "description": "IllusionVQA comprehension, lmms-eval's illusionvqa_comprehension: the option letter, as AI2D"},
    {"name": "illusionvqa_soft_localization", "split": "test", "dataset": "csebuetnlp/illusionVQA-Soft-Localization",
     "description": "IllusionVQA soft localization, lmms-eval's illusionvqa_soft_localization: the option letter, as AI2D"}])  # fmt: skip
