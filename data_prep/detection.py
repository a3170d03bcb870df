"""Detection data in the COCO instances format: synthetic shape scenes, and a category subset.

A COCO instances file is one JSON object: ``images`` ({id, file_name, width, height}),
``annotations`` ({id, image_id, category_id, bbox [x, y, w, h] in original pixels, area,
iscrowd}) and ``categories`` ({id, name}). The synthetic writer draws scenes with
data_prep.shapes (exact boxes) and labels every object by its shape, or by color and shape.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Literal

import numpy as np

from data_prep.fields import ItemError, item_field, load_coco_instances
from data_prep.files import write_json_atomic
from data_prep.shapes import SceneSpec, make_scene

LabelBy = Literal["shape", "color_shape"]


def category_names(spec: SceneSpec, label_by: LabelBy) -> list[str]:
    if label_by == "shape":
        return list(spec.shapes)
    return [f"{color} {shape}" for color in spec.colors for shape in spec.shapes]


def write_synthetic_coco(
    path: str | Path,
    size: int,
    seed: int,
    spec: SceneSpec | None = None,
    label_by: LabelBy = "shape",
    empty_fraction: float = 0.1,
) -> Path:
    """`size` images of shape scenes in a COCO instances json at `path`; images under images/.

    About `empty_fraction` of the images hold no object (the answer is "None"). Everything
    is a function of `seed`.
    """
    path = Path(path)
    if path.suffix != ".json":
        raise ValueError(f"{path}: COCO instances are one JSON object, not records: the file name must end in .json")
    spec = spec or SceneSpec()
    rng = np.random.default_rng(seed)
    image_dir = path.parent / "images"
    image_dir.mkdir(parents=True, exist_ok=True)
    names = category_names(spec, label_by)
    category_id = {name: i + 1 for i, name in enumerate(names)}
    images: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    for index in range(size):
        empty = rng.random() < empty_fraction
        scene = make_scene(spec, rng, n_objects=0 if empty else None)
        relative = f"images/{path.stem}_{index:06d}.png"
        scene.image.save(path.parent / relative)
        image_id = index + 1
        images.append({"id": image_id, "file_name": relative, "width": scene.image.width, "height": scene.image.height})
        for obj in scene.objects:
            x1, y1, x2, y2 = obj.box
            name = obj.shape if label_by == "shape" else f"{obj.color} {obj.shape}"
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": image_id,
                    "category_id": category_id[name],
                    "bbox": [x1, y1, x2 - x1, y2 - y1],
                    "area": (x2 - x1) * (y2 - y1),
                    "iscrowd": 0,
                }
            )
    categories = [{"id": i, "name": name, "supercategory": "shape"} for name, i in category_id.items()]
    write_json_atomic(path, {"images": images, "annotations": annotations, "categories": categories})
    return path


def coco_subset(
    source: str | Path,
    out: str | Path,
    categories: list[str] | None = None,
    keep_empty: bool = False,
    max_images: int = 0,
    image_prefix: str = "",
) -> dict[str, int]:
    """Keep the named categories of a COCO instances file (all when None; ids unchanged) and
    the images that hold one of them (every image with `keep_empty`), first `max_images` only
    if > 0. `image_prefix` is put before every file_name, so that train and val files can share
    one image root (e.g. "train2017/"). Returns counts of what was written."""
    data = load_coco_instances(source, ("images", "annotations", "categories"))
    for i, category in enumerate(data["categories"]):
        item_field(category, "name", str, f"{source} categories[{i}]")
        item_field(category, "id", int, f"{source} categories[{i}]")
    for key in ("images", "annotations"):
        for i, item in enumerate(data[key]):
            if not isinstance(item, dict):
                raise ItemError(f"{source} {key}[{i}]", f"an item must be an object, got {type(item).__name__}")
            if key == "images" and image_prefix:
                item_field(item, "file_name", str, f"{source} images[{i}]")
    by_name = {c["name"]: c for c in data["categories"]}
    names = list(by_name) if categories is None else categories
    unknown = [name for name in names if name not in by_name]
    if unknown:
        raise ValueError(f"{source}: no category named {', '.join(map(repr, unknown))}")
    keep_ids = {by_name[name]["id"] for name in names}
    annotations = [a for a in data["annotations"] if a.get("category_id") in keep_ids]
    with_objects = {a.get("image_id") for a in annotations}
    images = [img for img in data["images"] if keep_empty or img.get("id") in with_objects]
    if max_images:
        images = images[:max_images]
        kept = {img.get("id") for img in images}
        annotations = [a for a in annotations if a.get("image_id") in kept]
    if image_prefix:
        images = [{**img, "file_name": image_prefix + img["file_name"]} for img in images]
    subset = {
        "images": images,
        "annotations": annotations,
        "categories": [c for c in data["categories"] if c["id"] in keep_ids],
    }
    for key in ("info", "licenses"):
        if key in data:
            subset[key] = data[key]
    write_json_atomic(Path(out), subset)
    return {"images": len(images), "annotations": len(annotations), "categories": len(subset["categories"])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Subset of a COCO instances file, by category names")
    parser.add_argument("source", help="COCO instances json, e.g. data/coco/annotations/instances_val2017.json")
    parser.add_argument("out", help="where to write the subset json")
    parser.add_argument(
        "--categories", default="", help="comma-separated category names, e.g. 'person,dog' (default: all)"
    )
    parser.add_argument("--keep-empty", action="store_true", help="keep images without any kept category")
    parser.add_argument("--max-images", type=int, default=0, help="keep only the first N images (0: all)")
    parser.add_argument("--image-prefix", default="", help="prepended to every file_name, e.g. 'val2017/'")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.categories.split(",") if n.strip()] or None
    try:
        counts = coco_subset(args.source, args.out, names, args.keep_empty, args.max_images, args.image_prefix)
    except (ValueError, OSError) as err:  # a file not there, not JSON, or an item that cannot be read
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(counts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
