"""VMCBench (twenty VQA benchmarks turned into four-option multiple choice) as lmms-eval
evaluates it (commit 75571cf): `vmcbench` (lmms_eval/tasks/vmcbench/{vmcbench.yaml, utils.py}) on
suyc21/VMCBench @ dev.

- Prompt: "Question: " + question + "\\nOptions:\\n" + "A. ...\\n" ... "D. ...\\n" + "Answer with
  the option's letter from the given choices directly.\\n"; the default token limit.
- The letter (parse_multi_choice_response, MMMU's with one change): the response stripped of
  , . ! ? ; : ' at both ends and padded with spaces; the letters written "(X)" or "X. ", else
  " X ", else (a response of more than five words) the options whose text it contains; of
  several, the one written last (for "X. " matches that is -1 for each, so the first of them,
  as np.argmax there); of none, a random letter. Right when it is `answer`.
- Metrics, each the share right: `general`, `reason`, `doc`, `ocr` (the rows whose source
  `category` belongs to it, datasets_category_map; a group without rows is not reported, as
  there) and `average` (all rows).

Deviations, named in docs/benchmarks.md: lmms-eval draws the random letter from the process's
global `random` (seeded by --seed, then consumed in thread-pool order); vlrl from a generator
seeded with the row's `index`, so a rerun gives the same number (as its MMMU). A row whose
`category` is none of the twenty (lmms-eval raises a KeyError) is skipped and named.
"""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa

from tasks.benchmarks import LMMS_EVAL, lettered
from tasks.benchmarks.counting import dot_scenes
from tasks.benchmarks.mmmu import parse_multi_choice
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, mean, variants

CHOICES = "ABCD"
POST_PROMPT = "Answer with the option's letter from the given choices directly.\n"
GROUPS = {
    "general": ("SEEDBench", "MMStar", "A-OKVQA", "VizWiz", "MMVet", "VQAv2", "OKVQA"),
    "reason": ("MMMU", "MathVista", "ScienceQA", "RealWorldQA", "GQA", "MathVision"),
    "ocr": ("TextVQA", "OCRVQA"),
    "doc": ("AI2D", "ChartQA", "DocVQA", "InfoVQA", "TableVQABench"),
}
GROUP_OF = {category: group for group, categories in GROUPS.items() for category in categories}  # datasets_category_map
SCHEMA = pa.schema(
    [("index", pa.int64()), ("question", pa.string()), ("A", pa.string()), ("B", pa.string()), ("C", pa.string()),
     ("D", pa.string()), ("answer", pa.string()), ("category", pa.string()), ("image", IMAGE_TYPE)]
)  # fmt: skip


def choice_letter(response: str, options: dict[str, str], rng: random.Random) -> str:
    """utils.parse_multi_choice_response, its random letter drawn from `rng`: MMMU's, "X. " read
    with "(X)" and " X " alone after them."""
    return parse_multi_choice(response, list(CHOICES), options, rng, bracketed=("({})", "{}. "), plain=(" {} ",))


class VMCBench(Benchmark):
    """lmms_eval/tasks/vmcbench/utils.py."""

    reference = LMMS_EVAL
    columns = (Column("index", "int|string"), Column("question", "string"),
               *(Column(c, "string") for c in CHOICES), Column("answer", "string"), Column("category", "string"),
               Column("image", "image"))  # fmt: skip
    schema = SCHEMA

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        category = ctx.get(record, "category", str, "the source benchmark")
        if category not in GROUP_OF:
            raise ctx.error(f"category {category!r} is none of VMCBench's twenty sources ({', '.join(GROUP_OF)})")
        options = {c: ctx.get(record, c, str, f"option {c}") for c in CHOICES}
        prompt = f"Question: {ctx.get(record, 'question', str, 'the question')}\nOptions:\n{lettered(list(options.values()))}\n{POST_PROMPT}"
        truth = {"answer": record["answer"], "options": options, "index": record["index"], "group": GROUP_OF[category]}
        return row_sample(self.name, ctx, prompt, truth, [record_image(record, ctx)])

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        truth = sample.solution
        letter = choice_letter(completion, truth["options"], random.Random(truth["index"]))
        score = {"score": int(letter == truth["answer"])}
        return {truth["group"]: score, "average": score}

    def aggregations(self):
        return {name: lambda items: mean([item["score"] for item in items]) for name in (*GROUPS, "average")}

    def synthetic_rows(self, size: int, seed: int):
        categories = list(GROUP_OF)
        for image, count, index in dot_scenes(size, seed, fill=(40, 120, 200)):
            right = index % 4
            yield {"index": 1000 + index, "question": "How many dots are there?",
                   **{c: f"{count - right + k} dots" for k, c in enumerate(CHOICES)}, "answer": CHOICES[right],
                   "category": categories[index * 7 % len(categories)], "image": image_cell(image, f"{index}.png")}  # fmt: skip


BENCHMARKS = variants(VMCBench, [
    {"name": "vmcbench", "split": "dev", "dataset": "suyc21/VMCBench",
     "description": "VMCBench (20 VQA benchmarks as multiple choice), lmms-eval's vmcbench: the option letter"}])  # fmt: skip
