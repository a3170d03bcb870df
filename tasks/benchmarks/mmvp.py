"""MMVP as lmms-eval evaluates it (commit 75571cf): `mmvp` (lmms_eval/tasks/mmvp/utils.py) on
lmms-lab-eval/MMVP @ train (Index 1-300, Question, Options "(a) Open (b) Closed", Correct
Answer "(a)", image: 150 pairs of CLIP-blind images, one question each, opposite answers).

- Prompt: the question, "\\n", the options read from their "(a) ... (b) ..." text and relettered
  "A. Open\\nB. Closed", then "\\nAnswer with the option's letter from the given choices
  directly."; 16 new tokens.
- The response's letter: the first of five patterns, each under re.IGNORECASE, that finds an
  A or a B (the letter alone, the letter first, "answer is B", "option B", then any A or B
  followed by a space or the end: "a cat" reads A, kept), else the first character when it is
  one. Right when it equals the answer's letter ("(a)" -> A, "(b)" -> B, else the answer
  upper-cased: an empty answer is right for a response without a letter, kept).
- `mmvp_accuracy`, the share right; `mmvp_pair_accuracy`, the share of pairs (Index 2k-1 and
  2k; Index <= 0 is taken as already 0-based, kept) with both right, over the pairs that have
  exactly two scored questions.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pyarrow as pa
import regex
from PIL import Image

from rewards.text import compile_pattern, findall, search
from tasks.benchmarks import LMMS_EVAL, lettered
from tasks.benchmarks.counting import dot_scenes
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, mean, variants

POST_PROMPT = "\nAnswer with the option's letter from the given choices directly."
OPTION = compile_pattern(r"\([a-z]\)\s*([^(]+?)(?=\s*\([a-z]\)|$)", regex.IGNORECASE)
LETTER_PATTERNS = [
    compile_pattern(pattern, regex.IGNORECASE)
    for pattern in (r"^\s*\(?([AB])\)?\.?\s*$", r"^\s*\(?([AB])\)?[\.\s]", r"answer\s+is\s+\(?([AB])\)?",
                    r"option\s+\(?([AB])\)?", r"\(?([AB])\)?(?:\s|$)")
]  # fmt: skip
SCHEMA = pa.schema(
    [("Index", pa.int32()), ("Question", pa.string()), ("Options", pa.string()), ("Correct Answer", pa.string()),
     ("image", IMAGE_TYPE)]
)  # fmt: skip


def answer_letter(response: str) -> str:
    """_extract_answer_letter: A, B or ""."""
    text = response.strip()
    for pattern in LETTER_PATTERNS:
        match = search(pattern, text)
        if match:
            return match.group(1).upper()
    return text[0].upper() if text and text[0].upper() in ("A", "B") else ""


def options_prompt(options: str | list[str]) -> str:
    """_parse_options (for text), then each option relettered "A. ...": mmvp_doc_to_text's lines."""
    parsed = [m.strip() for m in findall(OPTION, options)] if isinstance(options, str) else options
    return lettered(parsed)


def target_letter(answer: str) -> str:
    """_normalize_answer."""
    answer = answer.strip().lower()
    if "(a)" in answer or answer == "a":
        return "A"
    if "(b)" in answer or answer == "b":
        return "B"
    return answer.upper()


def pair_accuracy(items: list[dict[str, Any]]) -> float:
    """mmvp_aggregate_pair_results: pairs of exactly two scored questions, both right."""
    pairs: dict[int, list[bool]] = defaultdict(list)
    for item in items:
        pairs[item["pair_index"]].append(item["is_correct"])
    complete = [right for right in pairs.values() if len(right) == 2]
    return sum(1 for right in complete if all(right)) / len(complete) if complete else 0.0


class MMVP(Benchmark):
    """lmms_eval/tasks/mmvp/utils.py with the default kwargs."""

    reference = LMMS_EVAL
    columns = (Column("Index", "int", required=False), Column("Question", "string"),
               Column("Options", "string|list<string>"), Column("Correct Answer", "string"),
               Column("image", "image"))  # fmt: skip
    schema = SCHEMA
    max_new_tokens = 16

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        index = record.get("Index")
        index = -1 if index is None else ctx.get(record, "Index", int, "the 1-based question number")
        options = ctx.get(record, "Options", (str, list), 'the options, "(a) ... (b) ..."')
        problem = f"{ctx.get(record, 'Question', str, 'the question')}\n{options_prompt(options)}{POST_PROMPT}"
        truth = {"answer": target_letter(ctx.get(record, "Correct Answer", str, 'the answer, "(a)" or "(b)"')),
                 "index": index - 1 if index > 0 else index}  # fmt: skip
        return row_sample(self.name, ctx, problem, truth, [record_image(record, ctx)])

    def doc_target(self, record: dict[str, Any], sample: Sample) -> Any:
        return sample.solution["answer"]  # mmvp_doc_to_target: _normalize_answer of the answer

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        """mmvp_process_results: one item, logged under each metric."""
        letter = answer_letter(completion)
        item = {"index": sample.solution["index"], "pair_index": sample.solution["index"] // 2, "pred_letter": letter,
                "gt": sample.solution["answer"], "is_correct": letter == sample.solution["answer"]}  # fmt: skip
        return {"mmvp_accuracy": item, "mmvp_pair_accuracy": item}

    def aggregations(self):
        return {"mmvp_accuracy": lambda items: mean([float(item["is_correct"]) for item in items]),
                "mmvp_pair_accuracy": pair_accuracy}  # fmt: skip

    def synthetic_rows(self, size: int, seed: int):
        return (synthetic_row(*scene) for scene in dot_scenes(size, seed, fill=(30, 140, 60)))


def synthetic_row(image: Image.Image, count: int, index: int) -> dict[str, Any]:
    """A two-option question in MMVP's schema; rows 2k and 2k + 1 share it, as MMVP's pairs do.
    MMVP writes "(a) ... (b) ..." and answers "(a)"; some rows here write the other forms the
    reference reads (capital option letters, a bare or a capital answer letter, the option too)."""
    letter = "ab"[count % 2]
    options = "(a) Even (b) Odd" if index % 3 else "(A) Even\n(B)  Odd "
    answer = (f"({letter})", letter, f"({letter}) {('Even', 'Odd')[count % 2]}", letter.upper())[index % 4]
    return {"Index": index + 1, "Question": "Is the number of dots even or odd?", "Options": options,
            "Correct Answer": answer, "image": image_cell(image, f"{index}.png")}  # fmt: skip


BENCHMARKS = variants(MMVP, [{"name": "mmvp", "split": "train", "dataset": "lmms-lab-eval/MMVP",
                              "description": "MMVP, lmms-eval's mmvp: A/B letter, accuracy and pair accuracy"}])  # fmt: skip
