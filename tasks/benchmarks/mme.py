"""MME as lmms-eval evaluates it (commit 75571cf): `mme` (lmms_eval/tasks/mme/utils.py) on
lmms-lab-encoder/MME @ test (question_id: the image's name, image, question, answer Yes/No,
category).

- Prompt: the question, stripped, " Please answer yes or no." deleted, + "\\nAnswer the
  question using a single word or phrase."; 16 new tokens.
- The response (Otter's parse_pred_ans): lowercased, stripped, periods deleted; "yes" / "no"
  as they are, "y" / "n" as yes / no, else yes when its first four characters hold "yes", no
  when they hold "no" ("nope" is no, "not sure" is no), else other. Right when it is the answer.
- Two questions share each image. Per category, each image scores acc (its share of right
  answers, x100) plus acc+ (100 when both are right); the category's score is the mean over its
  images; `mme_perception_score` sums the ten perception categories' (at most 2,000),
  `mme_cognition_score` the four cognition ones' (at most 800).
- Deviation: an image with other than two scored questions (a skipped row, a subset) stops
  lmms-eval (an assertion); vlrl scores it with the answers it has (acc over them, acc+ only
  with two, both right). A row whose answer is not yes or no is skipped and reported.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pyarrow as pa
from PIL import Image

from tasks.benchmarks import LMMS_EVAL
from tasks.benchmarks.counting import dot_scenes
from tasks.benchmarks.mmstar import YES_NO, yes_no_prompt
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, variants

PERCEPTION = ("existence", "count", "position", "color", "posters", "celebrity", "scene", "landmark", "artwork", "OCR")
COGNITION = ("commonsense_reasoning", "numerical_calculation", "text_translation", "code_reasoning")
POST_PROMPT = "\nAnswer the question using a single word or phrase."
SCHEMA = pa.schema(
    [("question_id", pa.string()), ("image", IMAGE_TYPE), ("question", pa.string()), ("answer", pa.string()),
     ("category", pa.string())]
)  # fmt: skip


def parse_pred_ans(response: str) -> str:
    """Otter's parse_pred_ans, as lmms-eval's mme copies it: yes, no or other."""
    answer = response.lower().strip().replace(".", "")
    if answer in ("yes", "no"):
        return answer
    if len(answer) == 1:
        return {"y": "yes", "n": "no"}.get(answer, "other")
    head = answer[:4]
    return "yes" if "yes" in head else "no" if "no" in head else "other"


def mme_score(items: list[dict[str, Any]]) -> float:
    """mme_aggregate_results: per category the mean over its images of acc + acc+, summed."""
    by_category: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for item in items:
        by_category[item["category"]][item["question_id"]].append(item["score"])
    total = 0.0
    for images in by_category.values():
        category = 0.0
        for scores in images.values():
            category += sum(scores) / len(scores) * 100.0 + (len(scores) == 2 and sum(scores) == 2) * 100.0
        total += category / len(images)
    return total


class MME(Benchmark):
    """lmms_eval/tasks/mme/utils.py with the default kwargs."""

    reference = LMMS_EVAL
    columns = (Column("question_id", "string"), Column("image", "image"), Column("question", "string"),
               Column("answer", "string"), Column("category", "string"))  # fmt: skip
    schema = SCHEMA
    max_new_tokens = 16

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        answer = ctx.get(record, "answer", str, "Yes or No").lower().strip().replace(".", "")
        if answer not in ("yes", "no"):
            raise ctx.error(f"answer must be yes or no, got {record['answer']!r}"[:200])
        question = yes_no_prompt(ctx.get(record, "question", str, "the question"), "", POST_PROMPT)
        truth = {"answer": answer, "question_id": ctx.get(record, "question_id", str, "the image's name"),
                 "category": ctx.get(record, "category", str, "an MME category")}  # fmt: skip
        return row_sample(self.name, ctx, question, truth, [record_image(record, ctx)])

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        """mme_process_results: the item under the perception or the cognition score."""
        truth = sample.solution
        score = 1.0 if parse_pred_ans(completion) == truth["answer"] else 0.0
        key = "mme_perception_score" if truth["category"] in PERCEPTION else "mme_cognition_score"
        return {key: {"question_id": truth["question_id"], "category": truth["category"], "score": score}}

    def aggregations(self):
        return {"mme_perception_score": mme_score, "mme_cognition_score": mme_score}

    def synthetic_rows(self, size: int, seed: int):
        return (synthetic_row(*scene) for scene in dot_scenes(size, seed, fill=(160, 40, 90)))


def synthetic_row(image: Image.Image, count: int, index: int) -> dict[str, Any]:
    """Two questions an image as MME asks them (the right count, then a wrong one), two images a
    category, categories in turn: an image's pair is rows 2k and 2k + 1 (their images differ
    here; the name pairs them)."""
    pair, second = divmod(index, 2)
    category = (*PERCEPTION, *COGNITION)[pair // 2 % (len(PERCEPTION) + len(COGNITION))]
    asked = count + second
    return {"question_id": f"{category}/{pair}.png", "image": image_cell(image, f"{index}.png"),
            "question": f"Are there {asked} dots in the image?{YES_NO}", "answer": "No" if second else "Yes",
            "category": category}  # fmt: skip


BENCHMARKS = variants(MME, [{"name": "mme", "split": "test", "dataset": "lmms-lab-encoder/MME",
                             "description": "MME, lmms-eval's mme: yes/no per image pair, perception and cognition scores"}])  # fmt: skip
