"""MIRB (Multi-Image Reasoning Benchmark) as lmms-eval evaluates it (commit 75571cf): `mirb`
(lmms_eval/tasks/mirb/{mirb.yaml, utils.py}) on VLLMs/MIRB-hf @ test: eleven subsets of
questions over several images (knowledge, reasoning, perception, multi-hop).

- Prompt: every image of `image_list`, then the subset's instruction and the question with
  nothing between them ("Answer with a single word.What is ..."); 64 new tokens.
- An answer among A-E is a multiple-choice one: the response, where it opens with a capital and
  a period ("B. ..."), becomes that letter (AI2D's filter), and must then equal the answer
  whole. Any other answer is MMMU's open one (tasks/benchmarks/mmmu.py, the same code): the
  response's key parts and their numbers, normalized, must hold the normalized answer.
- `mirb_score`: the share right. lmms-eval prints the share per subset and per dimension
  (Knowledge: food, sightseeing; Reasoning: codeu, plot_code, analogy, 3d_scene; Perception:
  image_jigsaw, count, attribute; Multi-Hop: visual_chain, arxiv: the mean of its subsets');
  vlrl reports them as `mirb_score/<subset>` and `mirb_score/<dimension>`.

Deviations, named in docs/benchmarks.md: a row of a subset get_task_instruction does not know
(lmms-eval fails on an unbound name) is skipped and named; where a dimension misses one of its
subsets (a partial run) lmms-eval fails on the missing key, and vlrl reports `mirb_score` and the
subsets without that dimension's mean.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from tasks.benchmarks import LMMS_EVAL
from tasks.benchmarks.ai2d import leading_letter
from tasks.benchmarks.counting import dot_scenes
from tasks.benchmarks.mmmu import eval_open, parse_open_response
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, mean, variants

INSTRUCTIONS = {
    **dict.fromkeys(("analogy", "attribute", "plot_code", "visual_chain", "sightseeing"), "Answer with a single word."),
    **dict.fromkeys(("codeu", "food", "image_jigsaw"), "Answer with the option symbol."),
    "arxiv": "Answer with the paper title.",
    "count": "Answer with a single number.",
    "3d_scene": "The following images are different views of the same 3D scene. Answer with a single number.",
}  # get_task_instruction
DIMENSIONS = {"Knowledge": ("food", "sightseeing"), "Reasoning": ("codeu", "plot_code", "analogy", "3d_scene"),
              "Perception": ("image_jigsaw", "count", "attribute"), "Multi-Hop": ("visual_chain", "arxiv")}  # fmt: skip
LETTERS = ("A", "B", "C", "D", "E")
SCHEMA = pa.schema(
    [("subset", pa.string()), ("questions", pa.string()), ("answers", pa.string()),
     ("image_list", pa.list_(IMAGE_TYPE)), ("question_id", pa.string())]
)  # fmt: skip


def is_right(response: str, answer: str) -> bool:
    """mirb_process_results then the aggregation's check of one row."""
    if answer in LETTERS:
        return leading_letter(response) == answer
    return eval_open(answer, parse_open_response(response))


class MIRB(Benchmark):
    """lmms_eval/tasks/mirb/utils.py."""

    reference = LMMS_EVAL
    doc_to_target = "answers"
    columns = (Column("subset", "string"), Column("questions", "string"), Column("answers", "string"),
               Column("image_list", "list<image>"), Column("question_id", "string|int", required=False))  # fmt: skip
    schema = SCHEMA
    max_new_tokens = 64

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        subset = ctx.get(record, "subset", str, "the row's subset")
        if subset not in INSTRUCTIONS:
            raise ctx.error(f"subset {subset!r} is none of MIRB's eleven ({', '.join(INSTRUCTIONS)})")
        prompt = INSTRUCTIONS[subset] + ctx.get(record, "questions", str, "the question")
        images = [record_image({"image": image}, ctx) for image in record["image_list"] or []]
        truth = {"answer": ctx.get(record, "answers", str, "the answer"), "subset": subset}
        return row_sample(self.name, ctx, prompt, truth, images)

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        truth = sample.solution
        return {"mirb_score": {"subset": truth["subset"], "correct": is_right(completion, truth["answer"])}}

    def aggregations(self):
        return {"mirb_score": lambda items: mean([float(item["correct"]) for item in items])}

    def aggregate(self, processed) -> dict[str, float]:
        rights: dict[str, list[float]] = {}
        for values in processed:
            item = values["mirb_score"]
            rights.setdefault(item["subset"], []).append(float(item["correct"]))
        shares = {subset: mean(values) for subset, values in rights.items()}
        dimensions = {name: mean([shares[s] for s in subsets]) for name, subsets in DIMENSIONS.items()
                      if all(s in shares for s in subsets)}  # fmt: skip
        extra = {f"mirb_score/{key}": value for key, value in (shares | dimensions).items()}
        return super().aggregate(processed) | extra

    def synthetic_rows(self, size: int, seed: int):
        subsets = list(INSTRUCTIONS)
        for image, count, index in dot_scenes(size, seed, fill=(200, 60, 120)):
            subset = subsets[index % len(subsets)]
            letter = subset in ("codeu", "food", "image_jigsaw")
            answer = (
                "ABCDE"[index % 5] if letter else {"count": str(count), "3d_scene": f"{count},000"}.get(subset, "dots")
            )
            question = f"\nHow many dots?{' Options: ' + ' '.join(f'{c}. {count + k}' for k, c in enumerate('ABCDE')) if letter else ''}"
            yield {"subset": subset, "questions": question, "answers": answer, "question_id": f"mirb_{index}",
                   "image_list": [image_cell(image, f"{index}.png")] * (1 + index % 3)}  # fmt: skip


BENCHMARKS = variants(MIRB, [
    {"name": "mirb", "split": "test", "dataset": "VLLMs/MIRB-hf",
     "description": "MIRB (multi-image reasoning), lmms-eval's mirb: option letters and MMMU's open answers"}])  # fmt: skip
