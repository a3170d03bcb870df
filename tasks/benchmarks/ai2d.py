"""AI2D as lmms-eval evaluates it (commit 75571cf): `ai2d` and `ai2d_reasoning`
(lmms_eval/tasks/ai2d/{ai2d.yaml, utils.py, reasoning/utils.py}) on lmms-lab-encoder/ai2d @ test
(question, options, answer: the right option's index as a string, image).

- Prompt: the question, "\\n", "A. option" lines, and "\\nAnswer with the option's letter from
  the given choices directly."; 16 new tokens.
- Its filter ("flexible-extract", ai2d's MultiChoiceRegexFilter) runs on the raw response: a
  response opening with a capital letter and a period ("  B. because") becomes that letter,
  any other stays. Then lmms-eval's generic exact_match (api/metrics.py
  exact_match_hf_evaluate, ignore_case and ignore_punctuation): the response (the reasoning and
  surrounding whitespace stripped) lowercased and without ASCII punctuation must equal the
  option letter the same way ("(b)" is right, "B)" too, "B is right" not). `exact_match`, the mean.
- The reasoning task: the question and the option lines alone, after the <think>/<answer> system
  prompt of ai2d/reasoning, 49,152 tokens, compute_score against the letter (math-verify,
  vlrl[math]): `acc_score`, `format_score`.
"""

from __future__ import annotations

import string
from typing import Any

import numpy as np
import pyarrow as pa
from PIL import Image

from rewards.text import compile_pattern, search
from tasks.benchmarks import LMMS_EVAL, lettered
from tasks.benchmarks.counting import dot_scenes
from tasks.benchmarks.reasoning import ComputeScored
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, mean, variants

POST_PROMPT = "\nAnswer with the option's letter from the given choices directly."
LEADING_LETTER = compile_pattern(r"^\s*([A-Z])\.")
NO_PUNCTUATION = str.maketrans("", "", string.punctuation)
SCHEMA = pa.schema(
    [("question", pa.string()), ("options", pa.list_(pa.string())), ("answer", pa.string()), ("image", IMAGE_TYPE)]
)


def leading_letter(completion: str) -> str:
    """MultiChoiceRegexFilter.apply (ai2d's and muirbench's "flexible-extract" filter): a
    response that starts with "X." becomes X; any other stays as it is."""
    match = search(LEADING_LETTER, completion)
    return match.group(1) if match else completion


def exact_match(prediction: str, reference: str) -> float:
    """exact_match_hf_evaluate(ignore_case=True, ignore_punctuation=True) of one pair, through
    numpy's string arrays as there (they drop trailing NULs)."""
    predictions, references = np.char.lower(np.asarray([prediction])), np.char.lower(np.asarray([reference]))
    predictions = np.char.translate(predictions, table=NO_PUNCTUATION)
    references = np.char.translate(references, table=NO_PUNCTUATION)
    return float(np.mean(predictions == references))


class AI2D(Benchmark):
    """lmms_eval/tasks/ai2d with the default kwargs (prompt_format mcq, target mcq)."""

    reference = LMMS_EVAL
    columns = (Column("question", "string"), Column("options", "list<string>"), Column("answer", "string|int"),
               Column("image", "image"))  # fmt: skip
    schema = SCHEMA
    max_new_tokens = 16

    def prompt(self, question: str, choices: str) -> str:
        return f"{question}\n{choices}{POST_PROMPT}"

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        question, options = ctx.get(record, "question", str, "the question"), record["options"]
        if not isinstance(options, list) or not options or not all(isinstance(o, str) for o in options):
            raise ctx.error(f"options must be a list of strings, got {options!r}"[:200])
        try:
            index = int(record["answer"])
        except (ValueError, TypeError):
            index = -1
        if not 0 <= index < len(options):
            raise ctx.error(f"answer must index one of the {len(options)} options, got {record['answer']!r}"[:200])
        return row_sample(
            self.name, ctx, self.prompt(question, lettered(options)), chr(ord("A") + index), [record_image(record, ctx)]
        )

    def doc_target(self, record: dict[str, Any], sample: Sample) -> Any:
        return sample.solution  # ai2d_doc_to_target (mcq): the right option's letter

    def predict(self, completion: str, sample: Sample) -> str:
        return leading_letter(completion)

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        return {"exact_match": exact_match(completion, sample.solution)}

    def aggregations(self):
        return {"exact_match": mean}

    def synthetic_rows(self, size: int, seed: int):
        return (synthetic_row(*scene) for scene in dot_scenes(size, seed, fill=(20, 160, 160)))


class AI2DReasoning(ComputeScored, AI2D):
    """lmms_eval/tasks/ai2d/reasoning/utils.py: no filter, compute_score against the letter."""

    def prompt(self, question: str, choices: str) -> str:
        return f"{question}\n{choices}".strip()  # make_reasoning_doc_to_messages strips the text

    def doc_target(self, record: dict[str, Any], sample: Sample) -> Any:
        return Benchmark.doc_target(self, record, sample)  # ai2d_reasoning.yaml: the "answer" column


def synthetic_row(image: Image.Image, count: int, index: int) -> dict[str, Any]:
    """A counting question in AI2D's schema (every other one opening with a space), the right
    option among four in turn."""
    options = [str(count + k - index % 4) for k in range(4)]
    return {"question": " How many dots are in the diagram?"[index % 2 :], "options": options, "answer": str(index % 4),
            "image": image_cell(image, f"{index}.png")}  # fmt: skip


BENCHMARKS = variants(AI2D, [{"name": "ai2d", "split": "test", "dataset": "lmms-lab-encoder/ai2d",
                              "description": "AI2D, lmms-eval's ai2d: the option letter, exact match ignoring case and punctuation"}])  # fmt: skip
BENCHMARKS |= variants(AI2DReasoning, [{"name": "ai2d_reasoning", "split": "test", "dataset": "lmms-lab-encoder/ai2d",
                                        "description": "AI2D with lmms-eval's reasoning prompt and rule-based score (math-verify)"}])  # fmt: skip
