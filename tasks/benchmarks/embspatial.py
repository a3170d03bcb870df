"""EmbSpatial-Bench as lmms-eval evaluates it (commit 75571cf): `embspatial`
(lmms_eval/tasks/embspatial/{embspatial.yaml, _default_template_yaml, utils.py}) on
FlagEval/EmbSpatial-Bench @ test: spatial relations in embodied scenes (AI2-THOR, Matterport3D,
ScanNet), four options.

- Prompt (doc_to_messages with the default kwargs: the images, then doc_to_text's text): "Note:
  You only need to respond with A, B, C, D without providing any additional information.\\n",
  the question, "\\n", and the options as "A) ..." lines; 1,024 new tokens.
- The letter: CV-Bench's (the same _extract_answer_letter: the response's first letter after any
  opening parentheses and whitespace, upper-cased; "The answer is B" reads T, kept). Right when it
  is the letter of `answer`, the right option's index.
- `embspatial_acc`: the share right; `ai2thor_accuracy`, `mp3d_accuracy`, `scannet_accuracy`:
  the share right of the rows of that `data_source` (0 where there are none, as there).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from PIL import Image

from tasks.benchmarks import LMMS_EVAL
from tasks.benchmarks.counting import dot_scenes
from tasks.benchmarks.cv_bench import answer_letter
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, mean, variants

PRE_PROMPT = "Note: You only need to respond with A, B, C, D without providing any additional information.\n"
LETTERS = "ABCD"  # embspatial_process_results' choices: an answer index names one of these
SOURCES = ("ai2thor", "mp3d", "scannet")
SCHEMA = pa.schema(
    [("question_id", pa.string()), ("question", pa.string()), ("answer_options", pa.list_(pa.string())),
     ("answer", pa.int64()), ("relation", pa.string()), ("image", IMAGE_TYPE), ("data_source", pa.string())]
)  # fmt: skip


class EmbSpatial(Benchmark):
    """lmms_eval/tasks/embspatial/utils.py with the default kwargs."""

    reference = LMMS_EVAL
    columns = (Column("question", "string"), Column("answer_options", "list<string>"), Column("answer", "int"),
               Column("image", "image"), Column("data_source", "string", required=False))  # fmt: skip
    schema = SCHEMA
    max_new_tokens = 1024

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        answer = ctx.get(record, "answer", int, "the right option's index")
        if not 0 <= answer < len(LETTERS):
            raise ctx.error(f"answer {answer} names none of the options {', '.join(LETTERS)} (lmms-eval fails on it)")
        options = "\n".join(f"{chr(65 + i)}) {item}" for i, item in enumerate(record["answer_options"] or []))
        prompt = PRE_PROMPT + ctx.get(record, "question", str, "the question") + "\n" + options
        truth = {"answer": LETTERS[answer], "data_source": record.get("data_source", "unknown")}
        return row_sample(self.name, ctx, prompt, truth, [record_image(record, ctx)])

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        entry = {**sample.solution, "is_correct": answer_letter(completion) == sample.solution["answer"]}
        return {"embspatial_acc": entry, **{f"{source}_accuracy": entry for source in SOURCES}}

    def aggregations(self):
        def of_source(source: str):
            return lambda items: _share_right([item for item in items if item["data_source"] == source])

        return {"embspatial_acc": _share_right, **{f"{source}_accuracy": of_source(source) for source in SOURCES}}

    def synthetic_rows(self, size: int, seed: int):
        return (self._synthetic_row(*scene) for scene in dot_scenes(size, seed, fill=(30, 160, 30)))

    @staticmethod
    def _synthetic_row(image: Image.Image, count: int, index: int) -> dict[str, Any]:
        right = index % 4
        options = [str(count - right + k) for k in range(4)]
        return {"question_id": str(index), "question": "How many dots are there?", "answer_options": options,
                "answer": right, "relation": "count", "image": image_cell(image, f"{index}.png"),
                "data_source": (*SOURCES, None)[index % 4]}  # fmt: skip


def _share_right(items: list[dict[str, Any]]) -> float:
    """embspatial_aggregate_results / _aggregate_by_source: the share right, 0 of none."""
    return mean([1.0 if item["is_correct"] else 0.0 for item in items]) if items else 0.0


BENCHMARKS = variants(EmbSpatial, [
    {"name": "embspatial", "split": "test", "dataset": "FlagEval/EmbSpatial-Bench",
     "description": "EmbSpatial-Bench, lmms-eval's embspatial: the first letter of the response"}])  # fmt: skip
