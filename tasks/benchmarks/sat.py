"""SAT (Spatial Aptitude Training) as lmms-eval evaluates it (commit 75571cf): `sat`
(lmms_eval/tasks/sat/{sat.yaml, utils.py}) on nv-njb/SAT @ test: spatial questions over one or
more images (camera and object motion, perspective), options listed after the question.

- Prompt: the question stripped, "\\n", its camera-motion hint and "\\n", "\\n", the options as
  "A. ...\\n" lines, "\\n", "Only output the letter of the correct option and nothing else." (the
  yaml's post_prompt is never read); the images before it; 16 new tokens.
- Its filter (MultiChoiceRegexFilter.apply, on the raw response): every character that is
  neither a word character nor whitespace removed, then stripped; where the question itself
  lists "X. text" lines, the leftmost of those texts found in it becomes that option's letter;
  then the first space-separated piece. Then lmms-eval's reasoning strip (the filter has
  already removed the tags' brackets, so nothing is stripped, kept) and the generic
  `exact_match` (ignore case and punctuation, AI2D's) against the letter of `correct_answer_idx`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from rewards.text import compile_pattern, findall
from tasks.benchmarks import LMMS_EVAL
from tasks.benchmarks.ai2d import exact_match
from tasks.benchmarks.counting import dot_scenes
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, mean, variants

HINT = ("When multiple images are provided, You want to realize that when camera moves left, the objects in the image "
        "move right, and vice versa. And when you are asked about the movement of the same object captured in "
        "different images, you can compare the position of the object relative to other objects in the image to "
        "answer the question.\n")  # fmt: skip
INSTRUCTION = "Only output the letter of the correct option and nothing else."
NOT_WORD_OR_SPACE = compile_pattern(r"[^\w\s]")
# `\b([A-Z])\.\s+([^\n]*)` there; a capital is a word character, so \b before it is no word character before it
LISTED_OPTION = compile_pattern(r"(?<!\w)([A-Z])\.\s+([^\n]*)")
SCHEMA = pa.schema(
    [("image_bytes", pa.list_(IMAGE_TYPE)), ("question", pa.string()), ("answers", pa.list_(pa.string())),
     ("correct_answer_idx", pa.int64()), ("question_type", pa.string())]
)  # fmt: skip


def listed_option(response: str, question: str) -> str:
    """MultiChoiceRegexFilter.apply for one response."""
    cleaned = NOT_WORD_OR_SPACE.sub("", response).strip()
    letters: dict[str, str] = {}  # choice text -> letter, in the order listed (a repeated text keeps its last)
    texts: list[str] = []
    for i, (_, text) in enumerate(findall(LISTED_OPTION, question)):
        letters[text.strip()] = chr(ord("A") + i)
        texts.append(text.strip())
    found = _leftmost(cleaned, texts)
    return (letters[found] if found is not None else cleaned).split(" ")[0]


def _leftmost(text: str, alternatives: Sequence[str]) -> str | None:
    """What re.search("|".join(map(re.escape, alternatives)), text) matches: the leftmost
    position where one matches, the first alternative in order there; None without any."""
    for start in range(len(text) + 1):
        for alternative in alternatives:
            if text.startswith(alternative, start):
                return alternative
    return None


class SAT(Benchmark):
    """lmms_eval/tasks/sat/utils.py."""

    reference = LMMS_EVAL
    columns = (Column("image_bytes", "list<image>"), Column("question", "string"), Column("answers", "list<string>"),
               Column("correct_answer_idx", "int"))  # fmt: skip
    schema = SCHEMA
    max_new_tokens = 16

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        question = ctx.get(record, "question", str, "the question")
        options = "".join(f"{chr(ord('A') + i)}. {option}\n" for i, option in enumerate(record["answers"] or []))
        prompt = question.strip() + "\n" + HINT + "\n" + options + "\n" + INSTRUCTION
        letter = chr(ord("A") + ctx.get(record, "correct_answer_idx", int, "the right option's index"))
        images = [record_image({"image": path}, ctx) for path in record["image_bytes"] or []]
        return row_sample(self.name, ctx, prompt, {"answer": letter, "question": question}, images)

    def predict(self, completion: str, sample: Sample) -> str:
        return listed_option(completion, sample.solution["question"])

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        return {"exact_match": exact_match(completion, sample.solution["answer"])}

    def doc_target(self, record: dict[str, Any], sample: Sample) -> Any:
        return sample.solution["answer"]  # sat_doc_to_target: the right option's letter

    def aggregations(self):
        return {"exact_match": mean}

    def synthetic_rows(self, size: int, seed: int):
        for image, count, index in dot_scenes(size, seed, fill=(40, 40, 40)):
            right = index % 4
            options = [f"{count - right + k} dots" for k in range(4)]
            listed = "".join(f"\n{chr(65 + k)}. {option}" for k, option in enumerate(options)) if index % 2 else ""
            yield {"image_bytes": [image_cell(image, f"{index}.png")] * (1 + index % 2),
                   "question": f" How many dots are there?{listed} ", "answers": options, "correct_answer_idx": right,
                   "question_type": "counting"}  # fmt: skip


BENCHMARKS = variants(SAT, [
    {"name": "sat", "split": "test", "dataset": "nv-njb/SAT",
     "description": "SAT (Spatial Aptitude Training) test, lmms-eval's sat: the filtered first word, exact match"}])  # fmt: skip
