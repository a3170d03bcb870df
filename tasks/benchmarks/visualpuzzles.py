"""VisualPuzzles as lmms-eval evaluates it (commit 75571cf): `VisualPuzzles_direct` and
`VisualPuzzles_cot` (lmms_eval/tasks/VisualPuzzles/{*.yaml, utils.py}) on neulab/VisualPuzzles @
train: puzzles that test reasoning with little domain knowledge, four options (in the text, or
drawn in the image).

- Prompt: "Question: " and the question stripped; "\\nOptions:\\n(A) ...\\n(B) ...\\n(C) ...\\n(D) ..."
  (the first four options), or "\\nOptions: Choose from (A) (B) (C) (D) in the image." where the
  row has none; then "\\n" and the task's instruction (direct: answer with the letter; cot: think
  step by step and end with "Answer: $LETTER"); 4,096 new tokens.
- The letter (parse_response), the first of these to find one among A-D, each taking its last
  match (in the case written): "Answer: (X)", "Answer: X" not after "Final ", "Answer: X", "(X)";
  then, on the response stripped with a space before it, "X)", "{X}", "$X$", " X.", and " X" in
  a response of at most five characters; then, with options, "answer: <option>" in the
  lower-cased response, else the option whose text occurs last; else a random letter. Right when
  it equals the answer, case folded. `exact_match`: the share right.
- Deviation: lmms-eval draws the random letter from the process's global `random` (so a rerun
  can differ); vlrl draws it from a generator seeded with the row's `id`, as for MMMU.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, ClassVar

import pyarrow as pa

from rewards.text import compile_pattern, findall
from tasks.benchmarks import LMMS_EVAL
from tasks.benchmarks.counting import dot_scenes
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, mean, variants

PROMPTS = {
    "direct": "Answer the question with the option's letter from the given choices directly.",
    "cot": "Solve the multiple-choice question and then answer with the option letter from the given choices. The "
    "last line of your response should be of the following format: 'Answer: $LETTER' (without quotes) where LETTER "
    "is one of options. Think step by step before answering.",
}
LETTERS = ("A", "B", "C", "D")
# parse_response's patterns in its order: those read in the response as given, then those read in
# " " + the response stripped (the last only in a response of at most five characters).
AS_GIVEN = tuple(compile_pattern(p) for p in (r"Answer:\s*\(([A-Za-z])\)", r"(?<!Final )Answer:\s*([A-Za-z])",
                                               r"Answer:\s*([A-Za-z])", r"\s*\(([A-Za-z])\)"))  # fmt: skip
SPACED = tuple(compile_pattern(p) for p in (r"\s*([A-Za-z])\)", r"\s*\{([A-Za-z])\}", r"\s*\$([A-Za-z])\$",
                                             r" ([A-Da-d])\."))  # fmt: skip
SHORT = compile_pattern(r" ([A-Da-d])")
SCHEMA = pa.schema(
    [("id", pa.int64()), ("category", pa.string()), ("image", IMAGE_TYPE), ("question", pa.string()),
     ("options", pa.list_(pa.string())), ("answer", pa.string())]
)  # fmt: skip


def _last_letter(matches: Sequence[str]) -> str:
    return next((m for m in reversed(matches) if m in LETTERS or m.upper() in LETTERS), "")


def parse_letter(response: str, options: Sequence[str] | None, rng: random.Random) -> str:
    """parse_response with all_choices A-D; `rng` draws the letter of last resort."""
    for pattern in AS_GIVEN:
        if found := _last_letter(findall(pattern, response)):
            return found
    spaced = " " + response.strip()
    for pattern in SPACED:
        if found := _last_letter(findall(pattern, spaced)):
            return found
    if len(spaced) <= 5 and (found := _last_letter(findall(SHORT, spaced))):
        return found
    if options is not None:
        lowered = spaced.lower()
        for letter, text in zip(LETTERS, options, strict=False):
            if f"answer: {text}" in lowered or f"answer:{text}" in lowered:
                return letter
        last, at = "", -1
        for letter, text in zip(LETTERS, options, strict=False):
            if (where := spaced.rfind(text)) > at:
                last, at = letter, where
        if last:
            return last
    return rng.choice(LETTERS)


class VisualPuzzles(Benchmark):
    """lmms_eval/tasks/VisualPuzzles/utils.py."""

    reference = LMMS_EVAL
    columns = (Column("id", "int|string", required=False), Column("image", "image"), Column("question", "string"),
               Column("options", "list<string>", required=False), Column("answer", "string"))  # fmt: skip
    schema = SCHEMA
    max_new_tokens = 4096
    prompt: ClassVar[str] = "direct"

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        options = record.get("options")
        text = "Question: " + ctx.get(record, "question", str, "the question").strip()
        if options is not None:
            if len(options) < 4:
                raise ctx.error(f"options holds {len(options)} entries; the prompt shows four (lmms-eval fails)")
            text += "".join(f"\n({letter}) {option}" if i else f"\nOptions:\n(A) {option}"
                            for i, (letter, option) in enumerate(zip(LETTERS, options[:4], strict=True)))  # fmt: skip
        else:
            text += "\nOptions: Choose from (A) (B) (C) (D) in the image."
        truth = {"answer": ctx.get(record, "answer", str, "the answer's letter"), "id": ctx.record_id(record),
                 "options": None if options is None else list(options[:4])}  # fmt: skip
        return row_sample(self.name, ctx, f"{text}\n{PROMPTS[self.prompt]}", truth, [record_image(record, ctx)])

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        truth = sample.solution
        letter = parse_letter(completion.strip(), truth["options"], random.Random(truth["id"]))
        return {"exact_match": 1.0 if letter.lower() == truth["answer"].lower() else 0.0}

    def aggregations(self):
        return {"exact_match": mean}

    def synthetic_rows(self, size: int, seed: int):
        for image, count, index in dot_scenes(size, seed, fill=(160, 60, 160)):
            right = index % 4
            options = [f"{count - right + k} Dots" for k in range(4)] if index % 3 else None
            yield {"id": index, "category": "counting", "image": image_cell(image, f"{index}.png"),
                   "question": " How many dots are there? ", "options": options, "answer": LETTERS[right]}  # fmt: skip


BENCHMARKS = variants(VisualPuzzles, [
    {"name": f"VisualPuzzles_{kind}", "split": "train", "dataset": "neulab/VisualPuzzles", "prompt": kind,
     "description": f"VisualPuzzles, lmms-eval's VisualPuzzles_{kind}: the letter parse_response reads"}
    for kind in ("direct", "cot")])  # fmt: skip
