"""3DSRBench as lmms-eval evaluates it (commit 75571cf): `3dsrbench` and `3dsrbench_circular`
(lmms_eval/tasks/3dsrbench/{3dsrbench.yaml, 3dsrbench_circular.yaml, _default_template_yaml,
utils.py}) on oscarqjh/3DSRBench_lmmseval, configs `3dsr` and `3dsr_circular` @ test: 3D
spatial reasoning over one image (height, location, orientation, several objects).

- Prompt (doc_to_messages with the default kwargs: the image, then doc_to_text's text):
  "Question: " + the question + "\\n", then "Options:\\n" and an "X. text\\n" line for each of the
  columns A-D that holds an option (not null, not the text "nan" in any case, not NaN), then
  "Please select the correct answer from the options above. \\n"; 4,096 new tokens.
- The letter (extract_answer): the first of eight patterns that matches the response, in turn
  (a leading letter followed by ".", whitespace or ")"; the letter alone; "answer"/"Answer"
  followed by ":" or whitespace; "the answer is", "my answer is"; "(X)"; "X."; any standalone
  A-D); none: no answer. Right when it equals `answer` as written.
- Metrics: `vanilla_accuracy` (the share right), per main category (`height_accuracy`,
  `location_accuracy`, `orientation_accuracy`, `multi_object_accuracy`: the share right of the
  rows whose `category` maps to it, 0 where none does) and, for `3dsrbench`, per detailed
  category (`height_higher_accuracy` ... `multi_object_viewpoint_towards_object_accuracy`).
  `3dsrbench_circular` instead groups the rows by `qid` ("BASE0001", "BASE0001-1",
  "BASE0001-flip", "BASE0001-flip-1"): `flip_accuracy` (each question with its flip, the qid
  with "-flip" removed), `circular_accuracy` (the circular variants, a flipped question's apart:
  the qid's first 13 characters if it holds "-flip", else its first 8) and
  `flip_circular_accuracy` (the first 8 characters): the share of groups right throughout.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

import pyarrow as pa

from rewards.text import compile_pattern, search
from tasks.benchmarks import LMMS_EVAL, share_where
from tasks.benchmarks.counting import dot_scenes
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, mean, variants

POST_PROMPT = "Please select the correct answer from the options above. \n"
OPTION_COLUMNS = "ABCD"
CATEGORIES = {
    "height_higher": "height", "location_above": "location", "location_closer_to_camera": "location",
    "location_next_to": "location", "orientation_in_front_of": "orientation",
    "orientation_on_the_left": "orientation", "orientation_viewpoint": "orientation",
    "multi_object_closer_to": "multi_object", "multi_object_facing": "multi_object",
    "multi_object_viewpoint_towards_object": "multi_object", "multi_object_parallel": "multi_object",
    "multi_object_same_direction": "multi_object",
}  # fmt: skip  # CATEGORY_MAPPING: a detailed category -> its main one (any other: "other")
MAIN_CATEGORIES = ("height", "location", "orientation", "multi_object")
# extract_answer's patterns, in turn; `\b([A-D])\b` there: a letter is a word character, so its
# boundaries are no word character beside it
LETTER_PATTERNS = tuple(
    compile_pattern(p)
    for p in (r"^([A-D])[\.\s\)]", r"^([A-D])$", r"[Aa]nswer[:\s]+([A-D])", r"[Tt]he answer is[:\s]+([A-D])",
              r"[Mm]y answer is[:\s]+([A-D])", r"\(([A-D])\)", r"([A-D])\.", r"(?<!\w)([A-D])(?!\w)")
)  # fmt: skip
SCHEMA = pa.schema(
    [("index", pa.int64()), ("qid", pa.string()), ("question", pa.string()), ("A", pa.string()), ("B", pa.string()),
     ("C", pa.string()), ("D", pa.string()), ("answer", pa.string()), ("category", pa.string()), ("image", IMAGE_TYPE)]
)  # fmt: skip


def answer_letter(response: str) -> str | None:
    """extract_answer: the letter of the first pattern that matches; None without one."""
    text = response.strip()
    for pattern in LETTER_PATTERNS if text else ():
        if (match := search(pattern, text)) is not None:
            return match.group(1).upper()
    return None


def _is_option(value: Any) -> bool:
    """doc_to_text keeps an option column that is not null, "nan" (any case) or NaN."""
    if value is None:
        return False
    return value.lower() != "nan" if isinstance(value, str) else not (isinstance(value, float) and math.isnan(value))


def _all_right(items: list[dict[str, Any]], group: Callable[[str], str]) -> float:
    """The share of the groups of `items` (by `group` of the qid) whose every row is right."""
    groups: dict[str, float] = {}
    for item in items:
        key = group(item["qid"])
        groups[key] = groups.get(key, 1.0) * item["score"]
    return mean([1.0 if right == 1.0 else 0.0 for right in groups.values()]) if groups else 0.0


class ThreeDSRBench(Benchmark):
    """lmms_eval/tasks/3dsrbench/utils.py with the default kwargs."""

    reference = LMMS_EVAL
    columns = (Column("index", "int"), Column("qid", "string", required=False), Column("question", "string"),
               *(Column(c, "string|number", required=False) for c in OPTION_COLUMNS), Column("answer", "string"),
               Column("category", "string", required=False), Column("image", "image"))  # fmt: skip
    schema = SCHEMA
    max_new_tokens = 4096
    circular: ClassVar[bool] = False  # 3dsr_circular: the flip and circular groups, no detailed categories

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        index = record["index"]  # only logged
        # doc.get("qid", index): the groups' key, which the circular metrics read as text
        qid = (
            ctx.get(record, "qid", str, "the question id the groups are read from")
            if self.circular
            else record.get("qid", index)
        )
        options = {c: record[c] for c in OPTION_COLUMNS if _is_option(record.get(c))}
        listed = "Options:\n" + "".join(f"{c}. {option}\n" for c, option in options.items()) if options else ""
        prompt = f"Question: {ctx.get(record, 'question', str, 'the question')}\n{listed}{POST_PROMPT}"
        category = record.get("category", "unknown")
        truth = {"answer": ctx.get(record, "answer", str, "the answer's letter"), "index": index, "qid": qid,
                 "category": category, "main_category": CATEGORIES.get(category, "other")}  # fmt: skip
        return row_sample(self.name, ctx, prompt, truth, [record_image(record, ctx)])

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        entry = {key: value for key, value in sample.solution.items() if key != "answer"}
        entry["score"] = 1.0 if answer_letter(completion) == sample.solution["answer"] else 0.0
        metrics = ["vanilla", "flip", "circular", "flip_circular", *MAIN_CATEGORIES, *CATEGORIES]
        return {f"{metric}_accuracy": entry for metric in metrics}

    def aggregations(self):
        out: dict[str, Callable[[list[Any]], float]] = {
            "vanilla_accuracy": lambda items: mean([item["score"] for item in items])
        }
        if self.circular:
            out |= {
                "flip_accuracy": lambda items: _all_right(items, lambda qid: qid.replace("-flip", "")),
                "circular_accuracy": lambda items: _all_right(
                    items, lambda qid: qid[:13] if "-flip" in qid else qid[:8]
                ),
                "flip_circular_accuracy": lambda items: _all_right(items, lambda qid: qid[:8]),
            }
        out |= {f"{category}_accuracy": share_where("main_category", category) for category in MAIN_CATEGORIES}
        if not self.circular:
            out |= {f"{category}_accuracy": share_where("category", category) for category in CATEGORIES}
        return out

    def synthetic_rows(self, size: int, seed: int):
        categories = [*CATEGORIES, "unlisted", None]
        for image, count, index in dot_scenes(size, seed, fill=(160, 60, 160)):
            right = index % 4
            options: list[str | None] = [str(count - right + k) for k in range(4)]
            if index % 3 == 2 and right < 3:  # a missing fourth option, as "NaN" or null
                options[3] = ("NaN", None)[index % 2]
            # the published qids' 8-character base; every third group's 7 characters show lmms-eval's slicing
            base = f"Q{index // 4:07d}" if index // 4 % 3 != 2 else f"R{index // 4:06d}"
            yield {"index": index, "qid": base + ("", "-1", "-flip", "-flip-1")[index % 4],
                   "question": "How many dots are there?", **dict(zip(OPTION_COLUMNS, options, strict=True)),
                   "answer": OPTION_COLUMNS[right], "category": categories[index * 5 % len(categories)],
                   "image": image_cell(image, f"{index}.png")}  # fmt: skip


BENCHMARKS = variants(ThreeDSRBench, [
    {"name": "3dsrbench", "split": "test", "dataset": "oscarqjh/3DSRBench_lmmseval (3dsr)",
     "description": "3DSRBench, lmms-eval's 3dsrbench: the extracted letter, by category"},
    {"name": "3dsrbench_circular", "split": "test", "dataset": "oscarqjh/3DSRBench_lmmseval (3dsr_circular)",
     "circular": True,
     "description": "3DSRBench's circular and flipped variants, lmms-eval's 3dsrbench_circular: groups right throughout"},
])  # fmt: skip
