"""MMStar as lmms-eval evaluates it (commit 75571cf): `mmstar`, `mmstar_qwen` and
`mmstar_reasoning` (lmms_eval/tasks/mmstar/{utils.py, mmstar_qwen.yaml, reasoning/utils.py}) on
Lin-Chen/MMStar @ val (index, question with its options, image, answer letter, category,
l2_category).

- Prompt: the question, stripped, with " Please answer yes or no." deleted and "\\nAnswer with
  the option's letter from the given choices directly" appended (`mmstar`); "Question: " before
  and "Answer with the option letter only." after (`mmstar_qwen`: the prompt lmms-eval also
  gives `mmstar` when run with its qwen3_vl model class); the question alone, stripped, after
  reasoning_utils' system prompt (`mmstar_reasoning`, 49,152 tokens). The others generate the
  model class's length (their yaml sets none: 128 in lmms-eval's Qwen chat classes).
- The letter is read by _task_utils/mcq_extract.py's extract_mcq_answer over A-D (the format
  that ranks highest, its last occurrence) and must equal the answer, stripped and upper-cased.
- Metrics: each of the six categories and `average`, each the mean over its L2 categories of
  their accuracies (a macro mean: mmstar_aggregate_results). A row of another category counts
  in `average` only. The reasoning task: compute_score's `acc_score` and `format_score`, means
  (math-verify, vlrl[math]).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pyarrow as pa
from PIL import Image

from tasks.benchmarks import LMMS_EVAL
from tasks.benchmarks.counting import dot_scenes
from tasks.benchmarks.mcq_extract import extract_mcq_answer
from tasks.benchmarks.reasoning import ANALYSIS_SYSTEM, ComputeScored
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, mean, variants

CATEGORIES = {
    "coarse perception": ["image scene and topic", "image style & quality", "image emotion"],
    "fine-grained perception": ["object counting", "recognition", "localization"],
    "instance reasoning": ["single-instance reasoning", "cross-instance attribute reasoning", "cross-instance relation reasoning"],
    "logical reasoning": ["code & sequence reasoning", "diagram reasoning", "common reasoning"],
    "science & technology": ["biology & chemistry & physics", "electronics & energy & mechanical eng.", "geography & earth science & agriculture"],
    "math": ["geometry", "numeric commonsense and calculation", "statistical reasoning"],
}  # fmt: skip
YES_NO = " Please answer yes or no."
SCHEMA = pa.schema(
    [("index", pa.int64()), ("question", pa.string()), ("image", IMAGE_TYPE), ("answer", pa.string()),
     ("category", pa.string()), ("l2_category", pa.string())]
)  # fmt: skip


def yes_no_prompt(question: str, pre_prompt: str, post_prompt: str) -> str:
    """mmstar_doc_to_text (and MME's, the same code): the question stripped; " Please answer yes
    or no." deleted where a pre or a post prompt is given, and they added."""
    question = question.strip()
    if pre_prompt:
        question = pre_prompt + question.replace(YES_NO, "")
    if post_prompt:
        question = question.replace(YES_NO, "") + post_prompt
    return question


def macro_mean(items: list[dict[str, Any]]) -> float:
    """mmstar_aggregate_results: the mean of the L2 categories' mean scores."""
    by_l2: dict[str, list[float]] = defaultdict(list)
    for item in items:
        by_l2[item["l2_category"]].append(item["score"])
    return mean([mean(scores) for scores in by_l2.values()])


class MMStar(Benchmark):
    """lmms_eval/tasks/mmstar/utils.py with the default kwargs."""

    reference = LMMS_EVAL
    columns = (Column("index", "int|string"), Column("question", "string"), Column("image", "image"),
               Column("answer", "string"), Column("category", "string"), Column("l2_category", "string"))  # fmt: skip
    schema = SCHEMA
    pre_prompt = ""
    post_prompt = "\nAnswer with the option's letter from the given choices directly"
    model_kwargs = {"qwen3_vl": {"pre_prompt": "Question: ", "post_prompt": "Answer with the option letter only."}}

    def prompt(self, question: str) -> str:
        return yes_no_prompt(question, self.pre_prompt, self.post_prompt)

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        truth = {key: ctx.get(record, key, str, "text") for key in ("answer", "category", "l2_category")}
        truth["index"] = record["index"]
        prompt = self.prompt(ctx.get(record, "question", str, "the question"))
        return row_sample(self.name, ctx, prompt, truth, [record_image(record, ctx)])

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        """mmstar_process_results: the item under its category and under `average`."""
        truth = sample.solution
        score = 1.0 if extract_mcq_answer(completion, "ABCD") == truth["answer"].strip().upper() else 0.0
        item = {"question_id": truth["index"], "l2_category": truth["l2_category"], "score": score}
        return {truth["category"]: item, "average": item}

    def aggregations(self):
        return dict.fromkeys([*CATEGORIES, "average"], macro_mean)

    def synthetic_rows(self, size: int, seed: int):
        return (synthetic_row(*scene) for scene in dot_scenes(size, seed, fill=(30, 140, 60)))


class MMStarReasoning(ComputeScored, MMStar):
    """lmms_eval/tasks/mmstar/reasoning/utils.py: no kwargs, compute_score."""

    system = ANALYSIS_SYSTEM
    post_prompt = ""

    def truth(self, sample: Sample) -> str:
        return sample.solution["answer"]


def synthetic_row(image: Image.Image, count: int, index: int) -> dict[str, Any]:
    """A counting question in MMStar's schema, its options in the question as MMStar writes them;
    every category in turn (and one yes/no question in five)."""
    categories = list(CATEGORIES)
    category = categories[index % len(categories)]
    l2 = CATEGORIES[category][index % 3]
    options = [count - 1, count, count + 1, count + 2]
    question = (f"Are there {count} dots?{YES_NO}\nOptions: A: yes, B: no" if index % 5 == 4 else
                "How many dots are there?\nOptions: " + ", ".join(f"{'ABCD'[k]}: {n}" for k, n in enumerate(options)))  # fmt: skip
    return {"index": index, "question": question, "image": image_cell(image, f"{index}.png"),
            "answer": "A" if index % 5 == 4 else "B", "category": category, "l2_category": l2}  # fmt: skip


BENCHMARKS = variants(MMStar, [{"name": "mmstar", "split": "val", "dataset": "Lin-Chen/MMStar",
                                "description": "MMStar, lmms-eval's mmstar: the option letter, macro means by category"}])  # fmt: skip
BENCHMARKS |= variants(MMStar, [{"name": "mmstar_qwen", "split": "val", "dataset": "Lin-Chen/MMStar",
                                 "pre_prompt": "Question: ", "post_prompt": "Answer with the option letter only.",
                                 "description": "MMStar with lmms-eval's Qwen prompt (mmstar_qwen; its mmstar under the qwen3_vl model class)"}])  # fmt: skip
BENCHMARKS |= variants(MMStarReasoning, [{"name": "mmstar_reasoning", "split": "val", "dataset": "Lin-Chen/MMStar",
                                          "description": "MMStar with lmms-eval's reasoning prompt and rule-based score (math-verify)"}])  # fmt: skip
