"""Per-image COCO mAP: vlrl's coco_ap against pycocotools COCOeval on the same samples.

The pycocotools side builds one COCOeval per sample as VLM-R1's calculate_map does (ground
truth COCO from a dict, loadRes with every score 1.0, evaluate, accumulate, summarize; its
printing sent to a buffer) and reads stats[0]. Both sides see the same random samples (1-10
objects of 1-3 categories, predictions near objects plus misses and false alarms); the
answers must agree, and the line says by how much at most.

    python bench/ap_vs_pycocotools.py [--samples 500] [--seed 0] [--repeats 3]

Prints one JSON line: samples, vlrl_ms_per_sample, pycocotools_ms_per_sample, speedup,
max_abs_diff (times are the best of `repeats` passes over all samples).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rewards.detection import coco_ap

Sample = tuple[list[list[float]], list[str], list[list[float]], list[str]]


def make_samples(n: int, seed: int) -> list[Sample]:
    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(n):
        labels = ["person", "car", "dog"][: int(rng.integers(1, 4))]
        gts, gt_labels = [], []
        for _ in range(int(rng.integers(1, 11))):
            x, y = rng.uniform(0, 600, size=2)
            w, h = rng.uniform(8, 200, size=2)
            gts.append([float(x), float(y), float(x + w), float(y + h)])
            gt_labels.append(str(rng.choice(labels)))
        dts, dt_labels = [], []
        for box, label in zip(gts, gt_labels, strict=False):
            if rng.random() < 0.8:  # found, a few pixels off, sometimes with the wrong label
                noise = rng.normal(0, 4, size=4)
                dts.append([float(v + e) for v, e in zip(box, noise, strict=False)])
                dt_labels.append(label if rng.random() < 0.9 else str(rng.choice(labels)))
        for _ in range(int(rng.integers(0, 4))):  # false alarms
            x, y = rng.uniform(0, 600, size=2)
            dts.append([float(x), float(y), float(x + 50), float(y + 50)])
            dt_labels.append(str(rng.choice(labels)))
        order = rng.permutation(len(dts))
        samples.append((gts, gt_labels, [dts[i] for i in order], [dt_labels[i] for i in order]))
    return samples


def pycocotools_map(gts, gt_labels, dts, dt_labels) -> float:
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    category = {}
    for label in gt_labels:
        category.setdefault(label, len(category))
    annotations = []
    for i, (b, label) in enumerate(zip(gts, gt_labels, strict=False)):
        w, h = b[2] - b[0], b[3] - b[1]
        annotations.append(
            {
                "id": i + 1,
                "image_id": 0,
                "category_id": category[label],
                "bbox": [b[0], b[1], w, h],
                "area": w * h,
                "iscrowd": 0,
            }
        )
    results = [
        {"image_id": 0, "category_id": category[label], "bbox": [b[0], b[1], b[2] - b[0], b[3] - b[1]], "score": 1.0}
        for b, label in zip(dts, dt_labels, strict=False)
        if label in category
    ]
    if not results:
        return 0.0
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = {
            "images": [{"id": 0, "width": 2048, "height": 2048}],
            "annotations": annotations,
            "categories": [{"id": i, "name": name} for name, i in category.items()],
        }
        gt.createIndex()
        evaluator = COCOeval(gt, gt.loadRes(results), "bbox")
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    return max(0.0, float(evaluator.stats[0]))


def vlrl_map(gts, gt_labels, dts, dt_labels) -> float:
    value = coco_ap(gts, gt_labels, dts, dt_labels)
    return 0.0 if value is None else value


def best_time(fn, samples: list[Sample], repeats: int) -> tuple[float, list[float]]:
    best, values = float("inf"), []
    for _ in range(repeats):
        start = time.perf_counter()
        values = [fn(*s) for s in samples]
        best = min(best, time.perf_counter() - start)
    return best, values


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    samples = make_samples(args.samples, args.seed)
    pycocotools_map(*samples[0])  # imports and first-call costs out of the timing
    ours, ours_values = best_time(vlrl_map, samples, args.repeats)
    theirs, their_values = best_time(pycocotools_map, samples, args.repeats)
    diff = max(abs(a - b) for a, b in zip(ours_values, their_values, strict=False))
    print(
        json.dumps(
            {
                "samples": len(samples),
                "vlrl_ms_per_sample": round(ours / len(samples) * 1e3, 4),
                "pycocotools_ms_per_sample": round(theirs / len(samples) * 1e3, 4),
                "speedup": round(theirs / ours, 1),
                "max_abs_diff": diff,
            }
        )
    )


if __name__ == "__main__":
    main()
