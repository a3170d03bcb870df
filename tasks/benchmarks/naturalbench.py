"""NaturalBench (NeurIPS 2024) as lmms-eval evaluates it (commit 75571cf): `naturalbench`
(lmms_eval/tasks/naturalbench/{naturalbench.yaml, utils.py}) on BaiqiL/NaturalBench-lmms-eval @
test: natural adversarial VQA, two questions asked of two images, each pair of images built so
that the two questions' answers swap between them.

- A group is four rows in `Index` order: question 0 on image 0, on image 1, question 1 on image
  0, on image 1 (Index 4g ... 4g + 3). The rows' answers are not read: the scoring takes
  question 0 on image 0 and question 1 on image 1 to be "yes" (or A), the other two "no" (or B),
  as the benchmark is laid out.
- Prompt: the question + " Please answer Yes or No." (`Question_Type` yes_no) or + " Please
  output the letter corresponding to the correct option." (multiple_choice); 16 new tokens.
- The answer (extract_answer): whichever of the words yes / no (or A / B), as whole words in any
  case, comes first in the response: 1 for yes / A, 0 for no / B, -1 for neither (wrong on
  every count). "a" as an article reads as A, as there.
- Metrics (get_scores): `naturalbench_Q_ACC`, a question right on both images (per question,
  out of two per group); `naturalbench_I_ACC`, an image right on both questions (per image);
  `naturalbench_G_ACC`, all four right (per group). The binary accuracy over the rows,
  `naturalbench_Acc`, is computed there but never reported (process_results names it
  naturalbench_Acc, the yaml's metric_list naturalbench_ACC); vlrl reports it.

Deviations, named in docs/benchmarks.md: lmms-eval asserts exactly 7,600 rows with Index 0-7599
in order; vlrl groups rows by Index // 4 and scores the complete groups (a group with a row
missing or repeated is left out). A row of another `Question_Type` (extract_answer raises
there) is skipped and reported.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import regex
from PIL import Image, ImageDraw

from rewards.text import compile_pattern, search
from tasks.benchmarks import LMMS_EVAL
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, variants

SUFFIX = {"yes_no": "Please answer Yes or No.", "multiple_choice": "Please output the letter corresponding to the correct option."}  # fmt: skip
WORDS = {"yes_no": ("yes", "no"), "multiple_choice": ("A", "B")}  # extract_answer's (1, 0) words per type
# find_word_position's pattern per word, in any case; `\bWORD\b` there: each word starts and ends
# with a word character, so its boundaries are no word character beside it
WORD = {w: compile_pattern(rf"(?<!\w){w}(?!\w)", regex.IGNORECASE) for words in WORDS.values() for w in words}
METRICS = ("G_ACC", "Q_ACC", "I_ACC", "Acc")
SCHEMA = pa.schema(
    [("Index", pa.int64()), ("Image", IMAGE_TYPE), ("Question", pa.string()), ("Question_Type", pa.string()),
     ("answer", pa.string())]
)  # fmt: skip


def word_position(text: str, word: str) -> int:
    """extract_answer.find_word_position: where `word` first stands as a whole word, any case."""
    match = search(WORD[word], text)
    return match.start() if match else -1


def extract_answer(text: str, question_type: str) -> int:
    """utils.extract_answer: 1 (yes / A), 0 (no / B) or -1, by which word comes first."""
    one, zero = (word_position(text, word) for word in WORDS[question_type])
    if one == -1 and zero == -1:
        return -1
    if one != -1 and zero != -1:
        return 1 if one < zero else 0
    return 0 if one == -1 else 1


def naturalbench_scores(items: list[dict[str, Any]]) -> dict[str, float]:
    """utils.get_scores over the complete groups of four (q0_i0, q0_i1, q1_i0, q1_i1 by Index)."""
    groups: dict[int, dict[int, list[int]]] = {}
    for item in items:
        groups.setdefault(item["id"] // 4, {}).setdefault(item["id"] % 4, []).append(item["score"])
    complete = [[g[k][0] for k in range(4)] for g in groups.values() if all(len(g.get(k, ())) == 1 for k in range(4))]
    question = image = binary = group = 0
    for q0_i0, q0_i1, q1_i0, q1_i1 in complete:
        by_question = (q0_i0 == 1 and q0_i1 == 0) + (q1_i1 == 1 and q1_i0 == 0)
        by_image = (q0_i0 == 1 and q1_i0 == 0) + (q1_i1 == 1 and q0_i1 == 0)
        question, image = question + by_question, image + by_image
        binary += (q0_i0 == 1) + (q0_i1 == 0) + (q1_i0 == 0) + (q1_i1 == 1)
        group += by_question == 2 and by_image == 2
    n = len(complete)
    if not n:
        return dict.fromkeys(METRICS, 0.0)
    return {"Q_ACC": question / (n * 2), "I_ACC": image / (n * 2), "Acc": binary / (n * 4), "G_ACC": group / n}


class NaturalBench(Benchmark):
    """lmms_eval/tasks/naturalbench/utils.py."""

    reference = LMMS_EVAL
    columns = (Column("Index", "int"), Column("Image", "image"), Column("Question", "string"),
               Column("Question_Type", "string"), Column("answer", "string", required=False))  # fmt: skip
    schema = SCHEMA
    max_new_tokens = 16

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        kind = ctx.get(record, "Question_Type", str, "yes_no or multiple_choice")
        if kind not in SUFFIX:
            raise ctx.error(f"Question_Type must be yes_no or multiple_choice, got {kind!r}"[:200])
        index = ctx.get(record, "Index", int, "the row's place: rows 4g ... 4g + 3 form group g")
        if index < 0:
            raise ctx.error(f"Index must be >= 0 (rows 4g ... 4g + 3 form group g), got {index}")
        question = ctx.get(record, "Question", str, "the question") + " " + SUFFIX[kind]
        image = record_image({"image": record["Image"]}, ctx)
        return row_sample(self.name, ctx, question, {"index": index, "type": kind}, [image])

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        truth = sample.solution
        item = {"id": truth["index"], "score": extract_answer(completion, truth["type"])}
        return {f"naturalbench_{metric}": item for metric in METRICS}

    def aggregations(self):
        return {f"naturalbench_{m}": lambda items, m=m: naturalbench_scores(items)[m] for m in METRICS}

    def synthetic_rows(self, size: int, seed: int):
        """Groups of four: a red and a blue square; question 0 asks for red, question 1 for blue."""
        for index in range(size):
            group, position = divmod(index, 4)
            question, picture = divmod(position, 2)
            image = Image.new("RGB", (96 + group % 3 * 16, 96), (250, 250, 250))
            ImageDraw.Draw(image).rectangle([24, 24, 72, 72], fill=((200, 30, 30), (30, 30, 200))[picture])
            if group % 2:
                color = ("red", "blue")[question]
                text, kind, answer = f"Is the square {color}?", "yes_no", ("Yes", "No")[question != picture]
            else:
                options = ("A. red\nB. blue", "A. blue\nB. red")[question]
                text, kind, answer = (
                    f"What color is the square?\n{options}",
                    "multiple_choice",
                    "AB"[question != picture],
                )
            yield {"Index": index, "Image": image_cell(image, f"{index}.png"), "Question": text,
                   "Question_Type": kind, "answer": answer}  # fmt: skip


BENCHMARKS = variants(NaturalBench, [
    {"name": "naturalbench", "split": "test", "dataset": "BaiqiL/NaturalBench-lmms-eval",
     "description": "NaturalBench (natural adversarial VQA), lmms-eval's naturalbench: question, image and group accuracy"}])  # fmt: skip
