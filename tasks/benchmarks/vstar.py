"""V* Bench as lmms-eval evaluates it (commit 75571cf): `vstar_bench` and `vstar_bench_reasoning`
(lmms_eval/tasks/vstar_bench/{utils.py, reasoning/utils.py}) on lmms-lab-encoder/vstar-bench @
test (question_id, text: the question with its options "(A) ... (B) ...", label: the letter,
category: direct_attributes or relative_position, image).

- Prompt: the options read out of the text (`\\([A-D]\\)\\s*([^()]+?)` up to the next or the end)
  and written "A. ..." under the question (the text before "(A)", stripped); a text without
  them as it is. Then "\\nAnswer with the option's letter from the given choices directly.";
  16 new tokens.
- The letter, on the response stripped and upper-cased: the first of five patterns (the
  letter first, "ANSWER IS B", "(B)", "B." / "B)" / "B]" anywhere, a letter standing alone),
  each case-insensitive; else the one A-D letter the response holds, if it holds exactly one;
  else its first character if that is A-D. Right when it equals the label (stripped, upper-
  cased). `vstar_overall_acc`: the share right x 100 (the per-category values process_results
  also returns are not in the yaml's metric list, so not reported).
- The reasoning task: the question alone (no instruction), stripped, after reasoning_utils'
  system prompt, 49,152 tokens; compute_score against the label: `vstar_overall_acc_score`,
  `vstar_overall_format_score` and each category's (means).
- lmms-eval's `vstar_bench_direct_attributes` and `vstar_bench_relative_position` name their
  category as `dataset_kwargs: category`, handed to `datasets.load_dataset` as a loading
  argument, not as a filter of the rows; they are not offered: `vstar_bench_reasoning` reports
  each category.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import regex
from PIL import Image

from rewards.text import compile_pattern, findall, search
from tasks.benchmarks import LMMS_EVAL
from tasks.benchmarks.counting import dot_scenes
from tasks.benchmarks.reasoning import ANALYSIS_SYSTEM, ComputeScored
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, mean, variants

POST_PROMPT = "\nAnswer with the option's letter from the given choices directly."
OPTION = compile_pattern(r"\([A-D]\)\s*([^()]+?)(?=\s*\([A-D]\)|$)")
LETTER_PATTERNS = [
    compile_pattern(pattern, regex.IGNORECASE)
    for pattern in (r"^([A-D])\s*[\.)\]]*", r"(?:THE\s+)?(?:ANSWER|CHOICE|OPTION)(?:\s+IS)?[\s:]+([A-D])",
                    r"\(([A-D])\)", r"([A-D])\s*(?:\.|\)|])", r"(?:^|\s)([A-D])(?:\s|$)")
]  # fmt: skip
ANY_LETTER = compile_pattern(r"[A-D]")
CATEGORIES = ("direct_attributes", "relative_position")  # those the reasoning yaml reports
SCHEMA = pa.schema(
    [("question_id", pa.int64()), ("text", pa.string()), ("label", pa.string()), ("category", pa.string()),
     ("image", IMAGE_TYPE)]
)  # fmt: skip


def question_text(text: str, post_prompt: str) -> str:
    """vstar_doc_to_text."""
    options = findall(OPTION, text)
    if options:
        lines = [f"{'ABCD'[i]}. {option.strip()}" for i, option in enumerate(options[:4])]
        text = text.split("(A)")[0].strip() + "\n" + "\n".join(lines)
    return text + post_prompt


def answer_letter(response: str) -> str | None:
    """extract_answer_letter."""
    response = response.strip().upper()
    for pattern in LETTER_PATTERNS:
        match = search(pattern, response)
        if match:
            return match.group(1).upper()
    letters = findall(ANY_LETTER, response)
    if len(letters) == 1:
        return letters[0]
    return response[0] if response and response[0] in "ABCD" else None


class VStar(Benchmark):
    """lmms_eval/tasks/vstar_bench/utils.py with the default kwargs."""

    reference = LMMS_EVAL
    doc_to_target = "label"
    columns = (Column("question_id", "int|string"), Column("text", "string"), Column("label", "string"),
               Column("category", "string", required=False), Column("image", "image"))  # fmt: skip
    schema = SCHEMA
    max_new_tokens = 16

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        text = ctx.get(record, "text", str, 'the question with its options, "(A) ... (B) ..."')
        truth = {"label": ctx.get(record, "label", str, "the right option's letter"),
                 "category": record.get("category") or "unknown", "question_id": record["question_id"]}  # fmt: skip
        problem = self.prompt(text)
        return row_sample(self.name, ctx, problem, truth, [record_image(record, ctx)])

    def prompt(self, text: str) -> str:
        return question_text(text, POST_PROMPT)

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        """vstar_process_results: one item, under its category's metric and the overall one."""
        letter, truth = answer_letter(completion), sample.solution["label"].strip().upper()
        item = {"question_id": sample.solution["question_id"], "category": sample.solution["category"],
                "score": 1.0 if letter == truth else 0.0, "prediction": letter, "ground_truth": truth}  # fmt: skip
        return {f"vstar_{item['category']}_acc": item, "vstar_overall_acc": item}

    def aggregations(self):
        return {"vstar_overall_acc": lambda items: mean([item["score"] for item in items]) * 100.0}

    def synthetic_rows(self, size: int, seed: int):
        return (synthetic_row(*scene) for scene in dot_scenes(size, seed, fill=(120, 30, 30)))


class VStarReasoning(ComputeScored, VStar):
    """lmms_eval/tasks/vstar_bench/reasoning/utils.py: compute_score against the label."""

    system = ANALYSIS_SYSTEM

    def prompt(self, text: str) -> str:
        """make_reasoning_doc_to_messages: doc_to_text with empty kwargs, stripped."""
        return question_text(text, "").strip()

    def truth(self, sample: Sample) -> str:
        return sample.solution["label"].strip().upper()

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        scores = super().process(completion, sample)
        return {f"vstar_{scope}_{name}": value for scope in (sample.solution["category"], "overall")
                for name, value in scores.items()}  # fmt: skip

    def aggregations(self):
        return {f"vstar_{scope}_{name}": mean for scope in ("overall", *CATEGORIES)
                for name in ("acc_score", "format_score")}  # fmt: skip


def synthetic_row(image: Image.Image, count: int, index: int) -> dict[str, Any]:
    """A counting question in V*'s schema: four options in its "(A) ..." text, the right one in
    turn; one in five written without options, as a text that holds none is read."""
    right = index % 4
    options = " ".join(f"({'ABCD'[k]}) {count + k - right}" for k in range(4))
    text = f"How many dots are there? {options}" if index % 5 != 4 else "How many dots are there? Answer A.\n"
    return {"question_id": index, "text": text, "label": "ABCD"[right] if index % 5 != 4 else "A",
            "category": CATEGORIES[index % 2], "image": image_cell(image, f"{index}.png")}  # fmt: skip


_VSTAR = "lmms-lab-encoder/vstar-bench"
BENCHMARKS = variants(VStar, [{"name": "vstar_bench", "split": "test", "dataset": _VSTAR,
                               "description": "V* Bench, lmms-eval's vstar_bench: the option letter, accuracy x 100"}])  # fmt: skip
BENCHMARKS |= variants(VStarReasoning, [{"name": "vstar_bench_reasoning", "split": "test", "dataset": _VSTAR,
                                         "description": "V* Bench with lmms-eval's reasoning prompt and rule-based score (math-verify)"}])  # fmt: skip
