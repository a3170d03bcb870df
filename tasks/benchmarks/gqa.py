"""GQA as lmms-eval evaluates it (commit 75571cf): `gqa` (lmms_eval/tasks/gqa/{gqa.yaml,
utils.py}) on lmms-lab-encoder/GQA (formerly lmms-lab/GQA) @ testdev, the balanced questions.

- The dataset publishes its questions and its images as two configs: the rows of
  testdev_balanced_instructions (`question`, `answer`, `imageId`, ...) name the images of
  testdev_balanced_images (`id`, `image`) by `imageId`; gqa_process_docs joins them, and so
  does vlrl's reader (vlrl.data.tables.ImageJoin). `--data` is the dataset folder as downloaded
  (both config folders in it).
- Prompt: the question + "\\nAnswer the question using a single word or phrase." (the default
  kwargs: no pre_prompt); 16 new tokens; no `until` of its own.
- No process_results: lmms-eval's generic `exact_match` (api/metrics.py exact_match_hf_evaluate,
  ignore_case and ignore_punctuation) of the response against `answer`, AI2D's comparison;
  `exact_match`, the mean.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from tasks.benchmarks import LMMS_EVAL
from tasks.benchmarks.ai2d import exact_match
from tasks.benchmarks.counting import dot_scenes
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, TABLE_SUFFIXES, Column, ImageJoin, hub_file, image_cell, write_parquet
from vlrl.tasking.benchmark import Benchmark, mean, variants

POST_PROMPT = "\nAnswer the question using a single word or phrase."
# The columns the row tables of the hub's testdev_balanced_instructions hold that vlrl writes
# in synthetic data (the hub's also hold groups, entailed, equivalent, types, annotations, semantic).
SCHEMA = pa.schema(
    [("id", pa.string()), ("imageId", pa.string()), ("question", pa.string()), ("answer", pa.string()),
     ("fullAnswer", pa.string()), ("isBalanced", pa.bool_()), ("semanticStr", pa.string())]
)  # fmt: skip
IMAGES_SCHEMA = pa.schema([("id", pa.string()), ("image", IMAGE_TYPE)])
QUESTIONS_PER_IMAGE = 3  # the hub's testdev: 12,578 questions over 398 images


class GQA(Benchmark):
    """lmms_eval/tasks/gqa with the default kwargs."""

    reference = LMMS_EVAL
    columns = (Column("imageId", "string"), Column("question", "string"), Column("answer", "string"))
    schema = SCHEMA
    max_new_tokens = 16

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        prompt = ctx.get(record, "question", str, "the question") + POST_PROMPT
        answer = ctx.get(record, "answer", str, "the answer")
        return row_sample(self.name, ctx, prompt, answer, [record_image(record, ctx)])

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        return {"exact_match": exact_match(completion, sample.solution)}

    def aggregations(self):
        return {"exact_match": mean}

    def synthesize(self, path: str | Path, size: int, seed: int) -> None:
        """`size` questions about dot scenes, QUESTIONS_PER_IMAGE an image, as the hub keeps the
        two configs (ROOT/CONFIG/SPLIT-00000-of-00001.parquet)."""
        if Path(path).suffix in TABLE_SUFFIXES:
            raise ValueError(f"{path}: {self.name}'s data is a dataset folder holding its two configs, not a file")
        join = self.image_join
        assert join is not None
        scenes = list(dot_scenes(-(-size // QUESTIONS_PER_IMAGE), seed))
        images = [{"id": f"n{index}", "image": image_cell(image, f"n{index}.jpg")} for image, _, index in scenes]
        rows = [self._synthetic_row(index, *scenes[index // QUESTIONS_PER_IMAGE][1:]) for index in range(size)]
        write_parquet(hub_file(path, self.split, join.images), images, IMAGES_SCHEMA)
        write_parquet(hub_file(path, self.split, join.rows), rows, SCHEMA)

    @staticmethod
    def _synthetic_row(index: int, count: int, scene: int) -> dict[str, Any]:
        question, answer = [("Are there dots?", "yes"), ("How many dots are there?", str(count)),
                            ("What color are the dots?", "red")][index % QUESTIONS_PER_IMAGE]  # fmt: skip
        return {"id": str(20_000_000 + index), "imageId": f"n{scene}", "question": question, "answer": answer,
                "fullAnswer": f"The answer is {answer}.", "isBalanced": True, "semanticStr": ""}  # fmt: skip


BENCHMARKS = variants(GQA, [
    {"name": "gqa", "split": "testdev", "dataset": "lmms-lab-encoder/GQA",
     "image_join": ImageJoin(rows="testdev_balanced_instructions", images="testdev_balanced_images", key="imageId"),
     "description": "GQA testdev (balanced), lmms-eval's gqa: exact match, case and punctuation ignored"}])  # fmt: skip
