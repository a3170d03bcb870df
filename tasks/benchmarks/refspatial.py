"""RefSpatial-Bench as lmms-eval evaluates it (commit 75571cf): `refspatial_location`,
`refspatial_placement`, `refspatial_unseen` (lmms_eval/tasks/refspatial/{*.yaml, utils.py}) on
BAAI/RefSpatial-Bench, one split each: point to the object or the free space a spatial
referring expression names (RoboRefer's benchmark), scored by the share of the points inside
the row's mask.

- Prompt (prompt_suffix_type original): the row's `prompt`, " ", its `suffix` (the answer format
  it asks for), " ", "Return only list of tuples, don't add anything else."; the image before
  it; 1,024 new tokens.
- Scored as Where2Place (RoboRefer's _text2pts and accuracy are RoboPoint's, line for line):
  tasks/benchmarks/where2place.py. `refspatial_acc`: the mean score (numpy's). lmms-eval's
  `refspatial` group reports the three splits' scores weighted by their sizes.
- `refspatial_<split>_json`: "Locate <object> in this image and output the point coordinates in
  JSON format." (RoboRefer's Qwen prompt), the points read as `where2place_json` reads them.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from tasks.benchmarks.where2place import FORMAT, Where2Place, synthetic_masks
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import variants

SCHEMA = pa.schema(
    [("id", pa.int64()), ("image", IMAGE_TYPE), ("mask", IMAGE_TYPE), ("object", pa.string()),
     ("prompt", pa.string()), ("suffix", pa.string()), ("step", pa.int64())]
)  # fmt: skip


class RefSpatial(Where2Place):
    """lmms_eval/tasks/refspatial/utils.py (prompt_suffix_type original)."""

    columns = (Column("id", "string|int"), Column("prompt", "string"), Column("suffix", "string"),
               Column("object", "string", required=False), Column("image", "image"), Column("mask", "image"))  # fmt: skip
    schema = SCHEMA
    id_column = "id"

    def prompt(self, record: dict[str, Any], ctx: RecordContext) -> str:
        if self.json:  # refspatial_doc_to_text_json: RoboRefer's Qwen prompt
            return f"Locate {ctx.get(record, 'object', str, 'the object')} in this image and output the point coordinates in JSON format."
        text, suffix = ctx.get(record, "prompt", str, "the expression"), ctx.get(record, "suffix", str, "the format")
        return f"{text} {suffix} {FORMAT}"

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        return {"refspatial_acc": super().process(completion, sample)["where2place_acc"]}

    def aggregations(self):
        return {"refspatial_acc": super().aggregations()["where2place_acc"]}

    def synthetic_rows(self, size: int, seed: int):
        for image, mask, index in synthetic_masks(size, seed):
            yield {"id": index, "image": image_cell(image, f"{index}.png"), "mask": image_cell(mask, f"{index}-mask.png"),
                   "object": "the upper left quarter", "prompt": "Point to the upper left quarter.",
                   "suffix": "Your answer should be formatted as a list of tuples, i.e. [(x1, y1)], where each tuple "
                   "contains the x and y coordinates of a point satisfying the conditions above. The coordinates "
                   "should be between 0 and 1, indicating the normalized pixel locations of the points.", "step": 1}  # fmt: skip


BENCHMARKS = variants(RefSpatial, [
    {"name": f"refspatial_{split}{suffix}", "split": split, "dataset": "BAAI/RefSpatial-Bench", "json": bool(suffix),
     "description": f"RefSpatial-Bench {split}, lmms-eval's refspatial_{split}{suffix}: the share of the points "
     "inside the mask" + (" (Qwen's point_2d JSON)" if suffix else "")}
    for split in ("location", "placement", "unseen") for suffix in ("", "_json")
])  # fmt: skip
