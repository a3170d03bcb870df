"""BLINK as lmms-eval evaluates it (commit 75571cf): `blink_art_style`, `blink_counting`, ...
`blink_visual_similarity` (lmms_eval/tasks/blink/utils.py), one per configuration of
BLINK-Benchmark/BLINK @ val (idx, question, sub_task, image_1 ... image_4, choices, answer
"(A)", prompt: the question with its options, explanation).

- Images: every `image_N` column the row has, in column order, empty ones left out.
- Prompt: "Note: You only need to respond with A, B without providing any additional
  information.\\n" (the letters the choices take) and the row's `prompt`, with no newline
  between (CV-Bench's adds one); 1,024 new tokens.
- The letter and `blink_acc` as CV-Bench's (tasks/benchmarks/cv_bench.py): the first letter
  of the response after any opening parentheses and whitespace, case-insensitive ("Answer: B"
  is A, kept), right when it is the answer without its parentheses; the plain accuracy.
- lmms-eval's `blink` group reports the plain mean of the fourteen tasks' `blink_acc`
  (its aggregate_metric_list, weight_by_size false); run the fourteen to have it.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pyarrow as pa
from PIL import Image, ImageOps

from rewards.text import compile_pattern, search
from tasks.benchmarks import LMMS_EVAL
from tasks.benchmarks.counting import dot_scenes
from tasks.benchmarks.cv_bench import CVBench
from tasks.records import record_image
from vlrl.data.records import RecordContext
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import variants

IMAGE_KEY = compile_pattern(r"^image_\d+$")
IMAGE_KEYS = ("image_1", "image_2", "image_3", "image_4")
SCHEMA = pa.schema(
    [("idx", pa.string()), ("question", pa.string()), ("sub_task", pa.string()),
     *[(key, IMAGE_TYPE) for key in IMAGE_KEYS], ("choices", pa.list_(pa.string())), ("answer", pa.string()),
     ("prompt", pa.string()), ("explanation", pa.string())]
)  # fmt: skip
CONFIGS = ("Art_Style", "Counting", "Forensic_Detection", "Functional_Correspondence", "IQ_Test", "Jigsaw",
           "Multi-view_Reasoning", "Object_Localization", "Relative_Depth", "Relative_Reflectance",
           "Semantic_Correspondence", "Spatial_Relation", "Visual_Correspondence", "Visual_Similarity")  # fmt: skip


class BLINK(CVBench):
    """lmms_eval/tasks/blink/utils.py with the default kwargs."""

    reference = LMMS_EVAL
    columns = (Column("idx", "int|string"), Column("image_1", "image"),
               *[Column(key, "image", required=False) for key in IMAGE_KEYS[1:]], Column("choices", "list<string>"),
               Column("answer", "string"), Column("prompt", "string"))  # fmt: skip
    schema = SCHEMA
    metric: ClassVar[str] = "blink_acc"
    separator: ClassVar[str] = ""
    config: ClassVar[str] = "Counting"  # the synthetic rows' sub_task

    def record_images(self, record: dict[str, Any], ctx: RecordContext) -> list[tuple[str, int, int]]:
        """blink_doc_to_visual: every image_N the row holds, in column order."""
        keys = [key for key in record if search(IMAGE_KEY, key) and record[key] is not None]
        if not keys:
            raise ctx.error("the row holds no image (image_1 ... image_4 are all empty)")
        return [record_image(record, ctx, (key,)) for key in keys]

    def synthetic_rows(self, size: int, seed: int):
        return (synthetic_row(*scene, config=self.config) for scene in dot_scenes(size, seed, fill=(20, 60, 150)))


def synthetic_row(image: Image.Image, count: int, index: int, config: str = "Counting") -> dict[str, Any]:
    """A counting question in BLINK's schema: two to four choices, the right one in turn, and
    (one row in two) a second image, the first mirrored, as BLINK's multi-image tasks show."""
    choices = [str(count + k) for k in range(2 + index % 3)]
    right = index % len(choices)
    choices = [str(count + k - right) for k in range(len(choices))]
    options = "\n".join(f"({chr(65 + k)}) {c}" for k, c in enumerate(choices))
    second = image_cell(ImageOps.mirror(image), f"{index}_2.png") if index % 2 else None
    return {"idx": f"val_{config}_{index + 1}", "question": "How many dots are in the first image?", "sub_task": config,
            "image_1": image_cell(image, f"{index}.png"), "image_2": second, "image_3": None, "image_4": None,
            "choices": choices, "answer": f"({chr(65 + right)})",
            "prompt": f"How many dots are in the first image?\nSelect from the following choices.\n{options}",
            "explanation": ""}  # fmt: skip


def _task(config: str) -> str:
    return "blink_" + config.lower().replace("-", "_")


BENCHMARKS = variants(BLINK, [
    {"name": _task(config), "split": "val", "dataset": f"BLINK-Benchmark/BLINK ({config})", "config": config,
     "description": f"BLINK {config.replace('_', ' ')} (its {config} config), lmms-eval's {_task(config)}"}
    for config in CONFIGS
])  # fmt: skip
