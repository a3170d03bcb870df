"""ChartQA as lmms-eval evaluates it (commit 75571cf): `chartqa` (lmms_eval/tasks/chartqa/
utils.py) and `chartqa_reasoning` (chartqa/reasoning/utils.py), on lmms-lab-encoder/ChartQA
(formerly lmms-lab/ChartQA: type, question, answer, image; the test split, human_test and
augmented_test questions).

- Prompt: the question and "\\nAnswer the question with a single word." (the default kwargs;
  the qwen_vl ones are Qwen-VL 1's); 16 new tokens. The reasoning task: the question alone,
  stripped, 49,152 tokens, reasoning_utils' system prompt (<analysis>, <answer>).
- relaxed_correctness (Qwen-VL's evaluate_vqa.py): where both parse as Python floats (a
  trailing "%" divides by 100) and the answer is not 0, right within 5% of the answer;
  otherwise the lowercased strings must be equal.
- `relaxed_overall` is the mean over all samples, `relaxed_human_split` and
  `relaxed_augmented_split` over the samples of that type (any type but human_test counts as
  augmented); a split with no samples is not reported, as lmms-eval aggregates only the values
  returned.
- The reasoning task scores with reasoning_utils' compute_score (`answer_tag`, a relaxed
  string match, then math-verify; no judge): `relaxed_overall_acc_score` / `_format_score`
  and the same per split. It needs math-verify (vlrl[math]).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
from PIL import Image, ImageDraw

from tasks.benchmarks import LMMS_EVAL
from tasks.benchmarks.reasoning import ANALYSIS_SYSTEM, needs_math_verify, reasoning_score
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, mean, variants

POST_PROMPT = "\nAnswer the question with a single word."
SCHEMA = pa.schema([("type", pa.string()), ("question", pa.string()), ("answer", pa.string()), ("image", IMAGE_TYPE)])


def _to_float(text: str) -> float | None:
    try:
        return float(text.rstrip("%")) / 100.0 if text.endswith("%") else float(text)
    except ValueError:
        return None


def relaxed_correctness(prediction: str, target: str, max_relative_change: float = 0.05) -> bool:
    """Qwen-VL's relaxed_correctness, as lmms-eval's chartqa copies it."""
    prediction_float, target_float = _to_float(prediction), _to_float(target)
    if prediction_float is not None and target_float:
        return abs(prediction_float - target_float) / abs(target_float) <= max_relative_change
    return prediction.lower() == target.lower()


def split_metric(kind: str, metric: str) -> str:
    """The split metric a sample of this type also counts in."""
    return f"relaxed_{'human' if kind == 'human_test' else 'augmented'}_split{metric}"


class ChartQA(Benchmark):
    """lmms_eval/tasks/chartqa/utils.py."""

    reference = LMMS_EVAL
    columns = (Column("image", "image"), Column("question", "string"), Column("answer", "string"),
               Column("type", "string"))  # fmt: skip
    schema = SCHEMA
    max_new_tokens = 16
    suffixes: ClassVar[tuple[str, ...]] = ("",)  # the metrics' suffixes, as `scores` names them

    def prompt(self, question: str) -> str:
        return question + POST_PROMPT

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        question = ctx.get(record, "question", str, "the question")
        truth = {
            "answer": ctx.get(record, "answer", str, "the answer"),
            "type": ctx.get(record, "type", str, "the split"),
        }
        return row_sample(self.name, ctx, self.prompt(question), truth, [record_image(record, ctx)])

    def scores(self, completion: str, sample: Sample) -> dict[str, float]:
        """The per-sample values by metric suffix ("" for the relaxed accuracy)."""
        return {"": 1.0 if relaxed_correctness(completion, sample.solution["answer"]) else 0.0}

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        scores = self.scores(completion, sample)
        out = {f"relaxed_overall{suffix}": value for suffix, value in scores.items()}
        return out | {split_metric(sample.solution["type"], suffix): value for suffix, value in scores.items()}

    def aggregations(self):
        return {f"relaxed_{split}{suffix}": mean for split in ("overall", "human_split", "augmented_split")
                for suffix in self.suffixes}  # fmt: skip

    def synthetic_rows(self, size: int, seed: int):
        return synthetic_rows(size, seed)


class ChartQAReasoning(ChartQA):
    """lmms_eval/tasks/chartqa/reasoning/utils.py: compute_score's accuracy and format."""

    system = ANALYSIS_SYSTEM
    max_new_tokens = 49152
    suffixes = ("_acc_score", "_format_score")

    def __init__(self, options=None, rewards=None):
        super().__init__(options, rewards)
        needs_math_verify(self.name)

    def prompt(self, question: str) -> str:
        return question.strip()  # make_reasoning_doc_to_messages strips the text

    def scores(self, completion: str, sample: Sample) -> dict[str, float]:
        acc, fmt = reasoning_score(completion.strip(), sample.solution["answer"])
        return {"_acc_score": acc, "_format_score": fmt}


LABELS = ("Apples", "Pears", "Plums", "Figs")


def synthetic_rows(size: int, seed: int):
    """Rows in ChartQA's schema: a bar chart of three to four labelled bars, asked for the
    tallest bar's value (numbers, some as percentages) or its label (a question ending in a
    space, as some of ChartQA's do); human and augmented in turn."""
    rng = np.random.default_rng(seed)
    for index in range(size):
        values = [int(v) for v in rng.integers(5, 95, size=int(rng.integers(3, 5)))]
        image = Image.new("RGB", (40 * len(values) + 20, 120), (255, 255, 255))
        draw = ImageDraw.Draw(image)
        for k, value in enumerate(values):
            draw.rectangle([10 + 40 * k, 110 - value, 40 + 40 * k, 110], fill=(40, 90, 160))
            draw.text((10 + 40 * k, 111 - value - 12), str(value), fill=(0, 0, 0))
        best = int(np.argmax(values))
        kind = index % 3
        question, answer = (("What is the value of the tallest bar?", str(values[best])) if kind == 0
                            else ("What share does the tallest bar show?", f"{values[best]}%") if kind == 1
                            else ("Which fruit has the tallest bar? ", LABELS[best]))  # fmt: skip
        yield {"type": "human_test" if index % 2 == 0 else "augmented_test", "question": question, "answer": answer,
               "image": image_cell(image, f"{index}.png")}  # fmt: skip


BENCHMARKS = variants(ChartQA, [{"name": "chartqa", "split": "test", "dataset": "lmms-lab-encoder/ChartQA",
                                 "description": "ChartQA, lmms-eval's chartqa: relaxed accuracy (5% on numbers), overall and by split"}])  # fmt: skip
BENCHMARKS |= variants(ChartQAReasoning, [{"name": "chartqa_reasoning", "split": "test", "dataset": "lmms-lab-encoder/ChartQA",
                                           "description": "ChartQA with lmms-eval's reasoning prompt and rule-based score (math-verify)"}])  # fmt: skip
