"""VLMs are Biased as lmms-eval evaluates it (commit 75571cf): `vlms_are_biased`
(lmms_eval/tasks/vlms_are_biased/{vlms_are_biased.yaml, utils.py}) on anvo25/vlms-are-biased @
main: counting and identifying on counterfactual images of well-known subjects (a dog with five
legs, a flag with an extra stripe), where the memorized answer (`expected_bias`) is wrong.

- Prompt: the row's `prompt` as written (it states the answer format, "{...}"); 32 new tokens.
- The answer: the response, the truth and the bias each stripped, lower-cased, stripped of
  braces at both ends and stripped again; the response is right when it equals the truth and
  biased when it equals `expected_bias`; where it is neither, their digits (str.isdigit, so
  "²" counts) are compared instead: right when the response's digits equal the truth's, biased
  when they equal the bias's (a response without digits: neither).
- `accuracy` (the share right), `bias_ratio` (the share biased), `accuracy_by_topic` (a dict
  there, `accuracy_by_topic/<topic>` here: the share right per `topic`, "unknown" for a row
  without one, and `accuracy_by_topic/overall`).
"""

from __future__ import annotations

from collections import defaultdict
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

SCHEMA = pa.schema(
    [("image", IMAGE_TYPE), ("ID", pa.string()), ("prompt", pa.string()), ("ground_truth", pa.string()),
     ("expected_bias", pa.string()), ("topic", pa.string())]
)  # fmt: skip


def normalized(text: str) -> str:
    """The comparison's form: stripped, lower-cased, braces off both ends, stripped."""
    return text.strip().lower().strip("{}").strip()


def digits(text: str) -> str:
    return "".join(c for c in text if c.isdigit())


def judged(response: str, truth: str, bias: str) -> tuple[bool, bool]:
    """utils.vlms_are_biased_process_results: (right, biased)."""
    pred, truth, bias = normalized(response), normalized(truth), normalized(bias)
    right, biased = pred == truth, pred == bias
    if not right and not biased and digits(pred):
        right = bool(digits(truth)) and digits(pred) == digits(truth)
        biased = bool(digits(bias)) and digits(pred) == digits(bias)
    return right, biased


def accuracy_by_topic(items: list[dict[str, Any]]) -> dict[str, float]:
    """utils.vlms_are_biased_aggregate_by_topic: the share right per topic, and overall."""
    right: dict[str, int] = defaultdict(int)
    total: dict[str, int] = defaultdict(int)
    for item in items:
        total[item["topic"]] += 1
        right[item["topic"]] += bool(item["correct"])
    shares = {topic: right[topic] / total[topic] for topic in total}
    return shares | {"overall": sum(right.values()) / sum(total.values()) if total else 0.0}


class VLMsAreBiased(Benchmark):
    """lmms_eval/tasks/vlms_are_biased/utils.py."""

    reference = LMMS_EVAL
    doc_to_target = "ground_truth"
    columns = (Column("image", "image"), Column("prompt", "string", required=False),
               Column("ground_truth", "string|number"), Column("expected_bias", "string|number"),
               Column("topic", "string", required=False))  # fmt: skip
    schema = SCHEMA
    max_new_tokens = 32

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        truth = {"answer": str(record["ground_truth"]), "bias": str(record["expected_bias"]),
                 "topic": record.get("topic", "unknown")}  # fmt: skip
        prompt = f"{record.get('prompt', '')}"  # a null prompt: "None", as there
        return row_sample(self.name, ctx, prompt, truth, [record_image(record, ctx)])

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        truth = sample.solution
        right, biased = judged(completion, truth["answer"], truth["bias"])
        return {"accuracy": float(right), "bias_ratio": float(biased),
                "accuracy_by_topic": {"topic": truth["topic"], "correct": right}}  # fmt: skip

    def aggregations(self):
        return {"accuracy": mean, "bias_ratio": mean}

    def aggregate(self, processed) -> dict[str, float]:
        by_topic = accuracy_by_topic([values["accuracy_by_topic"] for values in processed])
        return super().aggregate(processed) | {f"accuracy_by_topic/{topic}": v for topic, v in by_topic.items()}

    def synthetic_rows(self, size: int, seed: int):
        return (_synthetic_row(*scene) for scene in dot_scenes(size, seed, fill=(200, 120, 20)))


def _synthetic_row(image: Image.Image, count: int, index: int) -> dict[str, Any]:
    """A count asked in braces, the bias one more (the memorized number); every third a yes/no."""
    if index % 3 == 2:
        truth, bias = ("Yes", "No") if index % 2 else ("No", "Yes")
        ask = "Are the dots red? Answer in curly brackets, e.g., {Yes} or {No}."
    else:
        truth, bias = str(count), str(count + 1)
        ask = "How many dots are there? Answer with a number in curly brackets, e.g., {9}."
    return {"image": image_cell(image, f"{index}.png"), "ID": f"biased_{index}", "prompt": ask, "ground_truth": truth,
            "expected_bias": bias, "topic": ("Animals", "Logos", "Flags")[index % 3]}  # fmt: skip


BENCHMARKS = variants(VLMsAreBiased, [
    {"name": "vlms_are_biased", "split": "main", "dataset": "anvo25/vlms-are-biased",
     "description": "VLMs are Biased (counterfactual images), lmms-eval's vlms_are_biased: accuracy and bias ratio"}])  # fmt: skip
