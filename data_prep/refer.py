"""The original refer annotations (RefCOCO, RefCOCO+, RefCOCOg) -> VLM-R1 REC json records.

Input, as the refer toolkit lays it out (lichengunc/refer, refer.py and data/README.md):

- ``refs(unc).p`` / ``refs(umd).p`` / ``refs(google).p``: a pickled list of refs, each
  ``{"ref_id", "ann_id", "image_id", "split", "category_id", "sentences": [{"sent_id",
  "sent", "raw", "tokens"}, ...]}``;
- ``instances.json``: COCO-style ``images`` (id, file_name, width, height),
  ``annotations`` (id, image_id, bbox ``[x, y, w, h]``, segmentation polygons or RLE) and
  ``categories``.

Output: one VLM-R1 REC record per sentence, as VLM-R1's rec_jsons_processed files have them
(``image``, ``problem`` = "Please provide the bounding box coordinate of the region this
sentence describes: {sent}.", ``normal_caption`` = the sentence, ``solution`` = ``[x1, y1,
x2, y2]`` in original pixels, ``height``, ``width``), plus ``id`` (the sentence id) and the
ref's ids for provenance, and its ``segmentation`` polygons when asked. A ref whose
``ann_id`` is a list (several objects, as generalized referring data writes it) becomes a
multi-box record.

Split selection follows refer's `getRefIds`: ``train`` and ``val`` match exactly, ``testA``
/ ``testB`` / ``testC`` match any split containing that letter (so ``testAB`` refs count
for both), ``test`` matches every test split.

The refs file is a pickle, and unpickling runs whatever the file names: a pickle from the
internet could execute code. `load_refs` therefore unpickles with `RefsUnpickler`, which
resolves no global at all except the builtin ``set`` and ``frozenset`` (refs hold only
lists, dicts, strings and numbers; a pickle naming any class or function is refused before
anything is called). Python 2 strings are read as bytes and decoded as UTF-8 (Latin-1 if
that fails), since the refer pickles were written by Python 2.

Run: ``python -m data_prep.refer --refs 'refcoco+/refs(unc).p' --instances
refcoco+/instances.json --split val --out refcocop_val.json [--segmentation]``.
"""

from __future__ import annotations

import argparse
import io
import json
import pickle
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from data_prep.fields import ItemError, finite_number, item_field, load_coco_instances
from data_prep.files import write_records_atomic
from data_prep.refcoco import REC_PROBLEM

SPLITS = ("train", "val", "test", "testA", "testB", "testC", "testAB", "testBC", "testAC")
_SAFE_GLOBALS = {("builtins", "set"), ("builtins", "frozenset"), ("__builtin__", "set"), ("__builtin__", "frozenset")}


class RefsUnpickler(pickle.Unpickler):
    """An unpickler for data only: builtin containers and primitives, no classes, no calls."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _SAFE_GLOBALS:
            return set if name == "set" else frozenset
        raise pickle.UnpicklingError(
            f"refused to load global {module}.{name}: a refs file holds only lists, dicts, strings and numbers"
        )


def _decode(value: Any) -> Any:
    """Python 2 `str` values and keys arrive as bytes: decode them, recursively."""
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value.decode("latin-1")
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_decode(v) for v in value)
    if isinstance(value, dict):
        return {_decode(k): _decode(v) for k, v in value.items()}
    return value


def load_refs(path: str | Path) -> list[dict[str, Any]]:
    """The refs of a refer pickle (`.p`) or a refs json (`.json`), as a list of dicts."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"refs file not found: {path}")
    data = path.read_bytes()
    if path.suffix == ".json":
        try:
            refs = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ItemError(str(path), f"invalid JSON: {err}") from err
    else:
        try:
            refs = _decode(RefsUnpickler(io.BytesIO(data), encoding="bytes").load())
        except Exception as err:  # a damaged pickle raises almost anything (AttributeError, MemoryError ...)
            raise ItemError(str(path), f"not a refs pickle: {type(err).__name__}: {err}") from err
    if not isinstance(refs, list):
        raise ItemError(str(path), f"expected a list of refs, got {type(refs).__name__}")
    return refs


def split_matches(wanted: str, split: str) -> bool:
    """refer's `getRefIds` split rule."""
    if wanted in ("testA", "testB", "testC"):
        return wanted[-1] in split
    if wanted == "test":
        return "test" in split
    return split == wanted


@dataclass
class Conversion:
    records: list[dict[str, Any]] = field(default_factory=list)
    errors: list[ItemError] = field(default_factory=list)


def convert_refer(
    refs_path: str | Path,
    instances_path: str | Path,
    split: str,
    *,
    segmentation: bool = False,
    image_prefix: str = "train2014/",
    sentence_key: str = "sent",
    decimals: int | None = 2,
    strict: bool = False,
) -> Conversion:
    """Records of one split, one per sentence. A ref that cannot be converted (unknown
    ann_id or image, box outside its image, RLE segmentation when polygons are asked for...)
    is skipped and its reason kept in `errors`, or raised at once when `strict`.

    `decimals` rounds x + w and y + h (COCO boxes carry two decimals; the sum would
    otherwise show float noise such as 238.14999999999998); None keeps the raw sums."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    refs = load_refs(refs_path)
    instances = load_coco_instances(instances_path)
    images = {img.get("id"): img for img in instances["images"] if isinstance(img, dict)}
    anns = {ann.get("id"): ann for ann in instances["annotations"] if isinstance(ann, dict)}
    out = Conversion()
    for index, ref in enumerate(refs):
        where = f"{refs_path}: refs[{index}]"
        try:
            if not isinstance(ref, dict):
                raise ItemError(where, f"a ref must be a dict, got {type(ref).__name__}")
            where = f"{refs_path}: refs[{index}] (ref_id {ref.get('ref_id')!r})"
            ref_split = item_field(ref, "split", str, where)
            if not split_matches(split, ref_split):
                continue
            out.records.extend(
                _ref_records(
                    ref, where, images, anns, instances_path, segmentation, image_prefix, sentence_key, decimals
                )
            )
        except ItemError as err:
            if strict:
                raise
            out.errors.append(err)
    return out


def _ref_records(
    ref: dict[str, Any],
    where: str,
    images: dict[Any, dict[str, Any]],
    anns: dict[Any, dict[str, Any]],
    instances_path: str | Path,
    segmentation: bool,
    image_prefix: str,
    sentence_key: str,
    decimals: int | None,
) -> list[dict[str, Any]]:
    ann_ids = item_field(ref, "ann_id", (int, list), where)
    ann_ids = ann_ids if isinstance(ann_ids, list) else [ann_ids]
    if not ann_ids or not all(isinstance(a, int) and not isinstance(a, bool) and a >= 0 for a in ann_ids):
        raise ItemError(where, f"ann_id {ref['ann_id']!r} names no object (no-target refs are not grounding data)")
    image_id = item_field(ref, "image_id", int, where)
    image = images.get(image_id)
    if image is None:
        raise ItemError(where, f"image_id {image_id} is not in {instances_path}")
    img_where = f"{instances_path}: image id {image_id}"
    file_name = item_field(image, "file_name", str, img_where)
    width = item_field(image, "width", int, img_where)
    height = item_field(image, "height", int, img_where)
    boxes, outlines = [], []
    for ann_id in ann_ids:
        ann = anns.get(ann_id)
        if ann is None:
            raise ItemError(where, f"ann_id {ann_id} is not in {instances_path}")
        ann_where = f"{instances_path}: annotation id {ann_id}"
        if ann.get("image_id") != image_id:
            raise ItemError(where, f"ann_id {ann_id} belongs to image {ann.get('image_id')!r}, the ref to {image_id}")
        boxes.append(_box(ann, ann_where, width, height, decimals))
        if segmentation:
            outlines.append(_polygons(ann, ann_where))
    sentences = item_field(ref, "sentences", list, where)
    records = []
    for position, sent in enumerate(sentences):
        sent_where = f"{where} sentences[{position}]"
        if not isinstance(sent, dict):
            raise ItemError(sent_where, f"a sentence must be a dict, got {type(sent).__name__}")
        text = " ".join(item_field(sent, sentence_key, str, sent_where).split())
        if not text:
            raise ItemError(sent_where, f"empty '{sentence_key}'")
        sent_id = sent.get("sent_id", f"{ref.get('ref_id')}-{position}")
        record: dict[str, Any] = {
            "id": str(sent_id),
            "image": image_prefix + file_name,
            "problem": REC_PROBLEM.format(caption=text),
            "normal_caption": text,
            "solution": boxes[0] if len(boxes) == 1 else boxes,
            "height": height,
            "width": width,
            "ref_id": ref.get("ref_id"),
            "ann_id": ref["ann_id"],
            "image_id": image_id,
            "sent_id": sent.get("sent_id"),
        }
        if "category_id" in ref:
            record["category_id"] = ref["category_id"]
        if segmentation:
            record["segmentation"] = outlines[0] if len(outlines) == 1 else outlines
        records.append(record)
    return records


def _box(ann: dict[str, Any], where: str, width: int, height: int, decimals: int | None) -> list[float]:
    bbox = item_field(ann, "bbox", list, where)
    if len(bbox) != 4 or not all(finite_number(v) for v in bbox):
        raise ItemError(where, f"bbox must be 4 finite numbers [x, y, w, h], got {bbox!r}"[:200])
    x, y, w, h = (float(v) for v in bbox)
    x2, y2 = x + w, y + h
    if decimals is not None:
        x2, y2 = round(x2, decimals), round(y2, decimals)
    # One pixel of slack, as the task's loader allows: annotations round edges past the border.
    if not (w > 0 and h > 0 and x >= -1 and y >= -1 and x2 <= width + 1 and y2 <= height + 1):
        raise ItemError(where, f"bbox [x, y, w, h] = {bbox} is empty or outside the {width}x{height} image")
    return [x, y, x2, y2]


def _polygons(ann: dict[str, Any], where: str) -> list[list[float]]:
    seg = ann.get("segmentation")
    if isinstance(seg, dict):
        raise ItemError(where, "segmentation is RLE (a mask); only polygon segmentation can be kept")
    if not isinstance(seg, list) or not seg:
        raise ItemError(where, "no polygon segmentation")
    for poly in seg:
        if not (isinstance(poly, list) and len(poly) >= 6 and len(poly) % 2 == 0):
            raise ItemError(where, "a segmentation polygon must be a flat list of at least 3 x, y pairs")
        if not all(finite_number(v) for v in poly):
            raise ItemError(where, "a segmentation polygon has a value that is not a finite number")
    return [[float(v) for v in poly] for poly in seg]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m data_prep.refer", description=__doc__.split("\n\n")[0])
    parser.add_argument("--refs", required=True, help="refs(unc).p, refs(umd).p, refs(google).p (or a refs .json)")
    parser.add_argument("--instances", required=True, help="instances.json beside it")
    parser.add_argument("--split", required=True, choices=SPLITS)
    parser.add_argument("--out", required=True, help="VLM-R1 REC json to write")
    parser.add_argument("--segmentation", action="store_true", help="keep the polygon segmentation of each target")
    parser.add_argument("--image-prefix", default="train2014/", help="prepended to each image file_name")
    parser.add_argument("--sentence-key", default="sent", choices=["sent", "raw"])
    parser.add_argument("--strict", action="store_true", help="stop at the first unusable ref")
    args = parser.parse_args(argv)
    try:
        result = convert_refer(
            args.refs,
            args.instances,
            args.split,
            segmentation=args.segmentation,
            image_prefix=args.image_prefix,
            sentence_key=args.sentence_key,
            strict=args.strict,
        )
    except (ItemError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for err in result.errors[:20]:
        print(f"skipped: {err}", file=sys.stderr)
    if len(result.errors) > 20:
        print(f"... and {len(result.errors) - 20} more skipped refs", file=sys.stderr)
    write_records_atomic(Path(args.out), result.records)
    print(f"wrote {len(result.records)} records ({len(result.errors)} refs skipped) to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
