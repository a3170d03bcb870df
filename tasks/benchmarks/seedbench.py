"""SEED-Bench as lmms-eval evaluates it (commit 75571cf): `seedbench` and `seedbench_lite`
(lmms_eval/tasks/seedbench/utils.py) on lmms-lab-encoder/SEED-Bench @ test and the seedbench
config of lmms-lab-encoder/LMMs-Eval-Lite @ lite (question, choice_a ... choice_d, answer "B",
data_type "image" or "video", question_id, image: a list, a video question's frames), and
`seedbench_2_plus` (seedbench_2_plus/utils.py) on doolayer/SEED-Bench-2-Plus @ test (choice_A
... choice_D, question_image_type "chart", "map" or "web", image: one text-rich image).

- Prompt: the question, "\\n", the four choices "A. ..." a line each, then "\\nAnswer with the
  option's letter from the given choices directly."; every image of the row before it.
  SEED-Bench-2-Plus writes "<image>" for a choice that names an image file (any "jpg" or
  "png" in it); its replacement of "<img>" in the question is discarded (`str.replace`'s
  result unused, kept). Answers cut at "ASSISTANT:" (the yaml's until); 16 new tokens for
  SEED-Bench-2-Plus, the model class's default for SEED-Bench.
- The prediction is the response's first character ("The answer is B" reads T, kept), right
  when it equals the answer, both lower-cased and stripped.
- Metrics, each the accuracy of the questions it holds: `seed_image`, `seed_video` and
  `seed_all` (`seedbench_2_plus_Chart`, `_Map`, `_Web`, `_all`). A row of another type counts
  in the `_all` metric only: lmms-eval aggregates only the metrics its yaml lists.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pyarrow as pa
from PIL import Image, ImageOps

from tasks.benchmarks import LMMS_EVAL, lettered
from tasks.benchmarks.counting import dot_scenes
from tasks.records import record_image, record_image_list, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, mean, variants

POST_PROMPT = "\nAnswer with the option's letter from the given choices directly."
IMAGE_TOKEN = "<image>"  # lmms_eval_specific_kwargs' img_token (SEED-Bench-2-Plus)
LETTERS = "ABCD"
SEED_SCHEMA = pa.schema(
    [("answer", pa.string()), *[(f"choice_{c}", pa.string()) for c in "abcd"], ("data_id", pa.string()),
     ("data_type", pa.string()), ("question", pa.string()), ("question_id", pa.string()),
     ("question_type_id", pa.int16()), ("image", pa.list_(IMAGE_TYPE))]
)  # fmt: skip
PLUS_SCHEMA = pa.schema(
    [("data_id", pa.string()), ("question_id", pa.string()), ("question_image_type", pa.string()),
     ("question_image_subtype", pa.string()), ("question", pa.string()),
     *[(f"choice_{c}", pa.string()) for c in LETTERS], ("answer", pa.string()), ("data_source", pa.string()),
     ("data_type", pa.string()), ("level", pa.string()), ("subpart", pa.string()), ("version", pa.string()),
     ("image", IMAGE_TYPE)]
)  # fmt: skip


def seed_prompt(question: str, choices: list[str]) -> str:
    """seed_doc_to_text: the question, the lettered choices, the post prompt."""
    return f"{question}\n{lettered(choices)}{POST_PROMPT}"


def choice_text(choice: str) -> str:
    """parse_choice_img: a choice naming an image file is shown as the image token."""
    return IMAGE_TOKEN if "jpg" in choice or "png" in choice else choice


def seed_right(item: dict[str, Any]) -> bool:
    """seed_aggregation_result's comparison."""
    return item["pred"].lower().strip() == item["answer"].lower().strip()


def accuracy(items: list[dict[str, Any]]) -> float:
    """seed_aggregation_result: the share of items right."""
    return mean([float(seed_right(item)) for item in items])


class SEEDBench(Benchmark):
    """lmms_eval/tasks/seedbench/utils.py."""

    reference = LMMS_EVAL
    columns = (Column("question", "string"), *[Column(f"choice_{c}", "string") for c in "abcd"],
               Column("answer", "string"), Column("data_type", "string"), Column("question_id", "int|string"),
               Column("image", "list<image>"))  # fmt: skip
    schema = SEED_SCHEMA
    until = ("ASSISTANT:",)
    choice_keys: ClassVar[tuple[str, ...]] = tuple(f"choice_{c}" for c in "abcd")
    type_key: ClassVar[str] = "data_type"
    prefix: ClassVar[str] = "seed_"
    types: ClassVar[tuple[str, ...]] = ("image", "video")  # the yaml's metric_list, less `all`

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        choices = [ctx.get(record, key, str, "a choice") for key in self.choice_keys]
        prompt = seed_prompt(ctx.get(record, "question", str, "the question"), [self.show(c) for c in choices])
        truth = {"answer": ctx.get(record, "answer", str, "the right choice's letter"),
                 "type": self.metric_type(ctx.get(record, self.type_key, str, "the question's type")),
                 "question_id": record["question_id"]}  # fmt: skip
        return row_sample(self.name, ctx, prompt, truth, self.record_images(record, ctx))

    def show(self, choice: str) -> str:
        return choice

    def metric_type(self, value: str) -> str:
        """The metric name's suffix for a row's type (seed_process_result)."""
        return value

    def record_images(self, record: dict[str, Any], ctx: RecordContext) -> list[tuple[str, int, int]]:
        """seed_doc_to_visual: every image of the row's list."""
        return record_image_list(record, ctx, "image", "the question's image or a video's frames")

    def process(self, response: str, sample: Sample) -> dict[str, Any]:
        """seed_process_result: the first character, logged under the row's type and `all`."""
        item = {"pred": response.strip()[:1], "answer": sample.solution["answer"],
                "question_id": sample.solution["question_id"]}  # fmt: skip
        return {f"{self.prefix}{sample.solution['type']}": item, f"{self.prefix}all": item}

    def aggregations(self):
        return {f"{self.prefix}{kind}": accuracy for kind in (*self.types, "all")}

    def synthetic_rows(self, size: int, seed: int):
        return (self.synthetic_row(*scene) for scene in dot_scenes(size, seed, fill=(170, 40, 120)))

    def synthetic_row(self, image: Image.Image, count: int, index: int) -> dict[str, Any]:
        """A counting question; one row in three a "video" of three frames (the image, then
        mirrored, then flipped), as SEED-Bench's video questions hold their frames."""
        video = index % 3 == 2
        frames = [image, ImageOps.mirror(image), ImageOps.flip(image)] if video else [image]
        choices, answer = _count_choices(count, index)
        return {"answer": answer, **{f"choice_{c}": choice for c, choice in zip("abcd", choices, strict=True)},
                "data_id": f"{index}.png", "data_type": "video" if video else "image",
                "question": "How many dots are there?", "question_id": str(100 + index), "question_type_id": 1,
                "image": [image_cell(frame, f"{index}_{k}.png") for k, frame in enumerate(frames)]}  # fmt: skip


class SEEDBench2Plus(SEEDBench):
    """lmms_eval/tasks/seedbench_2_plus/utils.py with the default kwargs."""

    columns = (Column("question", "string"), *[Column(f"choice_{c}", "string") for c in LETTERS],
               Column("answer", "string"), Column("question_image_type", "string"),
               Column("question_id", "int|string"), Column("image", "image"))  # fmt: skip
    schema = PLUS_SCHEMA
    max_new_tokens = 16
    choice_keys = tuple(f"choice_{c}" for c in LETTERS)
    type_key = "question_image_type"
    prefix = "seedbench_2_plus_"
    types = ("Chart", "Map", "Web")

    def show(self, choice: str) -> str:
        return choice_text(choice)

    def metric_type(self, value: str) -> str:
        return value.capitalize()

    def record_images(self, record: dict[str, Any], ctx: RecordContext) -> list[tuple[str, int, int]]:
        return [record_image(record, ctx)]

    def synthetic_row(self, image: Image.Image, count: int, index: int) -> dict[str, Any]:
        """A counting question over the three image types in turn; one row in four names an
        image file as a choice, as some of SEED-Bench-2-Plus's do."""
        choices, answer = _count_choices(count, index)
        if index % 4 == 3:
            choices[(LETTERS.index(answer) + 1) % 4] = f"images/{index}.jpg"
        kind = ("chart", "map", "web")[index % 3]
        return {"data_id": f"{index}.png", "question_id": str(index), "question_image_type": kind,
                "question_image_subtype": kind, "question": "How many dots are there? <img>",
                **{f"choice_{c}": choice for c, choice in zip(LETTERS, choices, strict=True)}, "answer": answer,
                "data_source": "synthetic", "data_type": "Single Image", "level": "L1", "subpart": "Text-Rich",
                "version": "v2", "image": image_cell(image, f"{index}.png")}  # fmt: skip


def _count_choices(count: int, index: int) -> tuple[list[str], str]:
    """Four counts around the true one, the right one at letter index % 4."""
    right = index % 4
    return [str(count + k - right) for k in range(4)], LETTERS[right]


BENCHMARKS = variants(SEEDBench, [
    {"name": "seedbench", "split": "test", "dataset": "lmms-lab-encoder/SEED-Bench",
     "description": "SEED-Bench (image and video questions), lmms-eval's seedbench: the first character"},
    {"name": "seedbench_lite", "split": "lite", "dataset": "lmms-lab-encoder/LMMs-Eval-Lite (seedbench)",
     "description": "SEED-Bench's lite subset (LMMs-Eval-Lite), lmms-eval's seedbench_lite"},
])  # fmt: skip
BENCHMARKS |= variants(SEEDBench2Plus, [
    {"name": "seedbench_2_plus", "split": "test", "dataset": "doolayer/SEED-Bench-2-Plus",
     "description": "SEED-Bench-2-Plus (charts, maps, webs), lmms-eval's seedbench_2_plus: the first character"},
])  # fmt: skip
