"""POPE as lmms-eval evaluates it (commit 75571cf): `pope` (lmms-lab-encoder/POPE, default
config @ test) and `pope_adv`, `pope_pop`, `pope_random` (its Full config @ adversarial,
popular, random: give the Full folder to --data), lmms_eval/tasks/pope/utils.py.

- Prompt: the question, stripped, + "\\nAnswer the question using a single word or phrase.";
  128 new tokens.
- The response, lowercased and stripped, must equal the answer ("yes" / "no"): "Yes." is wrong
  (kept).
- `pope_accuracy`; `pope_precision` and `pope_recall` of "yes" (0 when undefined);
  `pope_f1_score`; `pope_yes_ratio`, the share of "yes" among the ground-truth answers, not
  the predictions (lmms-eval's, kept). A row whose answer is not yes or no (an assertion
  there) is skipped and reported.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from PIL import Image

from tasks.benchmarks import LMMS_EVAL
from tasks.benchmarks.counting import dot_scenes
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, mean, variants

POST_PROMPT = "\nAnswer the question using a single word or phrase."
SCHEMA = pa.schema(
    [("question_id", pa.string()), ("question", pa.string()), ("answer", pa.string()), ("image_source", pa.string()),
     ("image", IMAGE_TYPE), ("category", pa.string())]
)  # fmt: skip


def _count(items: list[dict[str, str]], truth: str, prediction: str) -> int:
    return sum(1 for item in items if item["ground_truth"] == truth and item["prediction"] == prediction)


def precision(items: list[dict[str, str]]) -> float:
    hits, false_yes = _count(items, "yes", "yes"), _count(items, "no", "yes")
    return hits / (hits + false_yes) if hits + false_yes > 0 else 0.0


def recall(items: list[dict[str, str]]) -> float:
    hits, missed = _count(items, "yes", "yes"), _count(items, "yes", "no")
    return hits / (hits + missed) if hits + missed > 0 else 0.0


def f1(items: list[dict[str, str]]) -> float:
    p, r = precision(items), recall(items)
    return 2 * (p * r) / (p + r) if p + r > 0 else 0.0


def yes_ratio(items: list[dict[str, str]]) -> float:
    yes, no = (sum(1 for item in items if item["ground_truth"] == answer) for answer in ("yes", "no"))
    return yes / (yes + no) if yes + no > 0 else 0.0


class POPE(Benchmark):
    """lmms_eval/tasks/pope/utils.py with the default kwargs."""

    reference = LMMS_EVAL
    columns = (Column("question_id", "string|int"), Column("question", "string"), Column("answer", "string"),
               Column("image", "image"))  # fmt: skip
    schema = SCHEMA
    max_new_tokens = 128

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        answer = ctx.get(record, "answer", str, "yes or no").lower().strip()
        if answer not in ("yes", "no"):
            raise ctx.error(f"answer must be yes or no, got {record['answer']!r}"[:200])
        question = ctx.get(record, "question", str, "the question").strip() + POST_PROMPT
        return row_sample(
            self.name,
            ctx,
            question,
            {"answer": answer, "question_id": record["question_id"]},
            [record_image(record, ctx)],
        )

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        """pope_process_results: one item, logged under each metric."""
        pred, truth = completion.lower().strip(), sample.solution["answer"]
        item = {"question_id": sample.solution["question_id"], "score": 1.0 if pred == truth else 0.0,
                "prediction": pred, "ground_truth": truth}  # fmt: skip
        return dict.fromkeys(self.aggregations(), item)

    def aggregations(self):
        return {"pope_accuracy": lambda items: mean([item["score"] for item in items]), "pope_precision": precision,
                "pope_recall": recall, "pope_f1_score": f1, "pope_yes_ratio": yes_ratio}  # fmt: skip

    def synthetic_rows(self, size: int, seed: int):
        return (synthetic_row(*scene, split=self.split) for scene in dot_scenes(size, seed, fill=(90, 90, 90)))


def synthetic_row(image: Image.Image, count: int, index: int, split: str = "test") -> dict[str, Any]:
    """A yes/no question in POPE's schema, true one time in two."""
    asked = count if index % 2 == 0 else count + 1
    return {"question_id": str(index + 1), "question": f" Are there {asked} dots in the image? ",
            "answer": "yes" if asked == count else "no", "image_source": f"synthetic_{index}",
            "image": image_cell(image, f"{index}.png"), "category": split if split != "test" else "random"}  # fmt: skip


_POPE = "lmms-lab-encoder/POPE"
BENCHMARKS = variants(POPE, [
    {"name": "pope", "split": "test", "dataset": _POPE, "description": "POPE, lmms-eval's pope: exact yes/no, accuracy, precision, recall, F1"},
    {"name": "pope_adv", "split": "adversarial", "dataset": f"{_POPE} (Full)", "description": "POPE adversarial (its Full config), lmms-eval's pope_adv"},
    {"name": "pope_pop", "split": "popular", "dataset": f"{_POPE} (Full)", "description": "POPE popular (its Full config), lmms-eval's pope_pop"},
    {"name": "pope_random", "split": "random", "dataset": f"{_POPE} (Full)", "description": "POPE random (its Full config), lmms-eval's pope_random"},
])  # fmt: skip
