"""SimpleVQA (factual visual questions with short answers) as lmms-eval evaluates it (commit
75571cf): `simplevqa` (lmms_eval/tasks/simplevqa/{simplevqa.yaml, _default_template_simplevqa_yaml,
utils.py}) on m-a-p/SimpleVQA @ test.

- Prompt: the question stripped + "\\nAnswer the question using a short phrase." (lmms-eval's
  qwen3_vl model: "Question: " before it and "\\nAnswer with a short phrase only." after); 32
  new tokens. The image: an `Image` cell, or its bytes in base64.
- `exact_match`: the response and the answer, each through EvalAIAnswerProcessor (TextVQA's
  normalization: tasks/benchmarks/textvqa.py `evalai_answer`, the same code), equal.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from tasks.benchmarks import LMMS_EVAL
from tasks.benchmarks.counting import dot_scenes
from tasks.benchmarks.textvqa import evalai_answer
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, mean, variants

SCHEMA = pa.schema(
    [("data_id", pa.string()), ("image", IMAGE_TYPE), ("question", pa.string()), ("answer", pa.string())]
)


class SimpleVQA(Benchmark):
    """lmms_eval/tasks/simplevqa/utils.py."""

    reference = LMMS_EVAL
    columns = (Column("image", "image|base64_image"), Column("question", "string"), Column("answer", "string"))
    schema = SCHEMA
    max_new_tokens = 32
    pre_prompt = ""
    post_prompt = "\nAnswer the question using a short phrase."
    model_kwargs = {"qwen3_vl": {"pre_prompt": "Question: ", "post_prompt": "\nAnswer with a short phrase only."}}

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        question = ctx.get(record, "question", str, "the question").strip()
        answer = ctx.get(record, "answer", str, "the answer")
        prompt = f"{self.pre_prompt}{question}{self.post_prompt}"
        return row_sample(self.name, ctx, prompt, answer, [record_image(record, ctx)])

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        return {"exact_match": float(evalai_answer(completion) == evalai_answer(sample.solution))}

    def aggregations(self):
        return {"exact_match": mean}

    def synthetic_rows(self, size: int, seed: int):
        words = ("zero", "one", "two", "three", "four", "five", "six")
        for image, count, index in dot_scenes(size, seed, fill=(80, 80, 80)):
            answer = (str(count), f"{words[count]} dots", f"The {count}!", f"{count},000")[index % 4]
            yield {"data_id": f"svqa_{index}", "image": image_cell(image, f"{index}.png"),
                   "question": f" How many dots are there?{'  ' if index % 2 else ''}", "answer": answer}  # fmt: skip


BENCHMARKS = variants(SimpleVQA, [
    {"name": "simplevqa", "split": "test", "dataset": "m-a-p/SimpleVQA",
     "description": "SimpleVQA (short factual answers), lmms-eval's simplevqa: EvalAI-normalized exact match"}])  # fmt: skip
