"""Object detection (COCO instances data, VLM-R1 open-vocabulary prompt), alias `coco`.

Data: a COCO instances json (images / annotations with bbox [x, y, w, h] in original pixels /
categories); one Sample per image. The prompt names categories (VLM-R1's OVD prompt); the
model answers a ```json list of {"bbox_2d": [x1, y1, x2, y2], "label": ...} in its own frame,
or "None". Rewards and metrics map the boxes back to original pixels before comparing.

Rewards (rewards/detection.py holds the definitions and their sources): `format`, `map`
(VLM-R1 per-image COCO AP@[.50:.95]), `ap50`, `od_length` (VLM-R1 odLength), `weighted_sum`
(VLM-R1 detection_score), `hungarian` (Perception-R1's detection reward / 3).
Metrics: pycocotools COCOeval over the whole split, every predicted box scored 1.0.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from data_prep.detection import write_synthetic_coco
from rewards.detection import (
    IOU_CONVENTIONS,
    Detections,
    GroundTruth,
    answer_well_formed,
    ap50_reward,
    hungarian_reward,
    map_reward,
    od_length_reward,
    parse_detections,
    parse_weighted_sum,
    weighted_sum_reward,
)
from rewards.format import think_answer
from vlrl.config import ConfigError
from vlrl.data.records import (
    JSON_FAULTS,
    FrameSpec,
    MediaRules,
    RecordContext,
    RecordError,
    Split,
    json_problem,
    read_data_text,
    record_faults,
)
from vlrl.data.sample import Sample
from vlrl.tasking.task import RewardFn, Task

# The OVD prompt of VLM-R1's OVD inference demo (examples/ovd/infer_ovd.py build_prompt, in its
# pull request #359 at bc96924, not merged); {categories} becomes the Python list of names, as
# written there. VLM-R1's own OVD training prompt (its odLength question template around questions
# from its OVD data) is not public.
VLM_R1_OVD_TEMPLATE = (
    "First think about the reasoning process in the mind and then provide the user with the answer. "
    "The reasoning process and answer are enclosed within <think></think> and <answer></answer> tags, "
    "respectively. Please carefully check the image and detect the following objects: {categories}. "
    "Output the bbox coordinates of detected objects in <answer></answer>. "
    "The bbox coordinates in Markdown format should be:\n"
    "```json\n"
    '[{"bbox_2d": [x1, y1, x2, y2], "label": "object name"}]\n'
    "```\n"
    'If no targets are detected in the image, simply respond with "None".'
)
BOX_SLACK = 1.0  # public annotations round box edges a little past the border


@dataclass
class DetectionOptions:
    # Prompt text; "{categories}" is replaced (plain text replacement, so JSON braces need no escaping).
    prompt_template: str = VLM_R1_OVD_TEMPLATE
    # Which categories a prompt names: those present in the image, or every category of the file.
    prompt_categories: Literal["present", "all"] = "present"
    # With "present": this many absent categories are named too (drawn per image from its id),
    # so that "None" and restraint are rewarded; an image with no object always gets at least one.
    negative_categories: int = 0
    # How an answer is read: "vlm_r1" exactly as VLM-R1's rewards (only a ```json fence counts;
    # no fence means an empty prediction), or "lenient" (bare JSON or any fence; non-JSON scores 0).
    answer_parse: Literal["vlm_r1", "lenient"] = "vlm_r1"
    # "think_answer": VLM-R1's format reward; "think_answer_json": that, and the answer is "None"
    # or a list of well-formed entries (in a ```json fence when answer_parse is "vlm_r1").
    format: Literal["think_answer", "think_answer_json"] = "think_answer"
    iou_convention: Literal["vlm_r1", "continuous"] = "vlm_r1"  # the IoU of `weighted_sum`
    # Labels `hungarian` accepts: every category of the data file (Perception-R1 accepts any COCO
    # category name, whatever the prompt named), or only those the prompt named.
    hungarian_labels: Literal["categories", "prompted"] = "categories"
    # `hungarian`'s fp / fn penalty: off, as Perception-R1's detection recipe trains
    # (DO_PENAIlty=False in train_qwen2_2b_vl_detection.sh); true is its code's default.
    hungarian_penalty: bool = False
    iou_threshold: float = 0.5  # the matching threshold of `weighted_sum`
    target_think: str = "The image shows {summary}."  # reasoning text of the SFT target

    def __post_init__(self) -> None:
        if self.negative_categories < 0:
            raise ConfigError(f"config: task.options.negative_categories must be >= 0, got {self.negative_categories}")
        if not 0.0 <= self.iou_threshold <= 1.0:
            raise ConfigError(f"config: task.options.iou_threshold must be in [0, 1], got {self.iou_threshold}")
        if "{categories}" not in self.prompt_template:
            raise ConfigError("config: task.options.prompt_template must contain {categories}")


class Detection(Task):
    name = "detection"
    description = (
        "Object detection on COCO instances json (VLM-R1 OVD prompt): per-image COCO mAP rewards, COCOeval metrics"
    )
    Options = DetectionOptions
    option_templates = {"target_think": ("summary",)}
    default_rewards = {"format": 1.0, "map": 1.0}
    data_suffix = ".json"
    accuracy_metric = "image_acc@0.5"
    headline = ("map", "ap50", "image_acc@0.5", "format_rate")
    data_source = (
        "a COCO instances json as published (annotations/instances_train2017.json), or some of its categories: "
        "python -m data_prep.detection instances_train2017.json {path} --categories person,dog"
    )

    # -- data -----------------------------------------------------------------------------
    def load(
        self,
        path: str | Path,
        frame_spec: FrameSpec,
        image_root: str | Path = "",
        strict: bool = False,
        limit: int = 0,
        require_images: bool = True,
        media: MediaRules = MediaRules(),
    ) -> Split:
        """One Sample per image of a COCO instances file. A bad category, image or annotation
        is reported at "file:line key[i]"; an image with a bad annotation is skipped whole,
        since a reward against part of its objects would be wrong."""
        path = Path(path)
        text = read_data_text(path)
        try:
            data = json.loads(text)
        except JSON_FAULTS as err:  # one JSON object: no record of it can be read apart
            line = err.lineno if isinstance(err, json.JSONDecodeError) else 1
            raise RecordError(f"{path}:{line}", json_problem(err)) from err
        if not isinstance(data, dict):
            raise RecordError(
                f"{path}:1", "expected a COCO instances object with 'images', 'annotations', 'categories'"
            )
        for key in ("images", "annotations", "categories"):
            if not isinstance(data.get(key), list):
                raise RecordError(f"{path}:1", f"key '{key}' must be a list (COCO instances format)")
        root = Path(image_root) if image_root else path.parent
        reader = _CocoReader(self, path, text, root, frame_spec, require_images, media)
        split = Split(str(path), unit="images", held=len(data["images"]))
        for item in reader.samples(data):
            if isinstance(item, RecordError):
                if strict:
                    raise item
                split.errors.append(item)
                continue
            split.samples.append(item)
            if limit and len(split.samples) >= limit:
                break
        return split

    def synthesize(self, path: str | Path, size: int, seed: int) -> None:
        write_synthetic_coco(path, size, seed)

    def prompt_categories(
        self, present: list[str], all_names: list[str], image_id: Any, crowd_only: frozenset[str]
    ) -> list[str]:
        """Category names a prompt asks for, in the file's category order. A category the image
        holds only as crowd regions is never named as absent (a "None" would score 1 where a
        right box scores 0): with `present`, it is not asked at all."""
        if self.options.prompt_categories == "all":
            return list(all_names)
        absent = [n for n in all_names if n not in present and n not in crowd_only]
        wanted = self.options.negative_categories if present else max(1, self.options.negative_categories)
        negatives = random.Random(f"detection-negatives-{image_id}").sample(absent, min(wanted, len(absent)))
        chosen = set(present) | set(negatives)
        return [n for n in all_names if n in chosen]

    # -- prompting ------------------------------------------------------------------------
    def messages(self, sample: Sample) -> list[dict[str, Any]]:
        text = self.options.prompt_template.replace("{categories}", str(list(sample.meta["prompt_categories"])))
        return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]

    def target(self, sample: Sample) -> str:
        entries = [{"bbox_2d": sample.frame.box_to_model(o["box"]), "label": o["label"]} for o in sample.solution]
        answer = f"```json\n{json.dumps(entries)}\n```" if entries else "None"
        counts: dict[str, int] = {}
        for o in sample.solution:
            counts[o["label"]] = counts.get(o["label"], 0) + 1
        summary = ", ".join(f"{n} {label}" for label, n in counts.items()) or "none of the requested objects"
        think = self.options.target_think.format(summary=summary)
        return f"<think>{think}</think>\n<answer>{answer}</answer>"

    # -- scoring --------------------------------------------------------------------------
    def reward_functions(self) -> dict[str, RewardFn]:
        iou = IOU_CONVENTIONS[self.options.iou_convention]
        return {
            "format": self._format_reward,
            "map": self._scorer(map_reward),
            "ap50": self._scorer(ap50_reward),
            "od_length": self._scorer(od_length_reward),
            "weighted_sum": lambda completions, samples: [
                weighted_sum_reward(
                    self._weighted_sum_detections(c, s),
                    _ground_truth(s),
                    iou_threshold=self.options.iou_threshold,
                    iou=iou,
                )
                for c, s in zip(completions, samples, strict=True)
            ],
            "hungarian": lambda completions, samples: [
                hungarian_reward(
                    self._detections(c, s), _ground_truth(s), self._hungarian_labels(s), self.options.hungarian_penalty
                )
                for c, s in zip(completions, samples, strict=True)
            ],
        }

    def _weighted_sum_detections(self, completion: str, sample: Sample) -> Detections | None:
        """VLM-R1's own reading for `weighted_sum` (answer_parse vlm_r1); the lenient parse otherwise."""
        if self.options.answer_parse == "lenient":
            return self._detections(completion, sample)
        parsed = parse_weighted_sum(completion)
        return None if parsed is None else parsed.map_boxes(sample.frame.box_to_original)

    def _hungarian_labels(self, sample: Sample) -> list[str]:
        key = "categories" if self.options.hungarian_labels == "categories" else "prompt_categories"
        return sample.meta[key]

    def _scorer(self, fn) -> RewardFn:
        def score(completions: Sequence[str], samples: Sequence[Sample]) -> list[float]:
            return [fn(self._detections(c, s), _ground_truth(s)) for c, s in zip(completions, samples, strict=True)]

        return score

    def _format_reward(self, completions: Sequence[str], samples: Sequence[Sample]) -> list[float]:
        out = []
        for completion in completions:
            ok = think_answer(completion)
            if ok and self.options.format == "think_answer_json":
                ok = 1.0 if answer_well_formed(completion, self.options.answer_parse) else 0.0
            out.append(ok)
        return out

    def _detections(self, completion: str, sample: Sample) -> Detections | None:
        parsed = _parse(completion, self.options.answer_parse)
        return None if parsed is None else parsed.map_boxes(sample.frame.box_to_original)

    def predict(self, completion: str, sample: Sample) -> list[dict[str, Any]] | None:
        """[{"box": [x1, y1, x2, y2] in original pixels, "label": ...}] of the well-formed entries."""
        parsed = self._detections(completion, sample)
        if parsed is None:
            return None
        return [{"box": list(b), "label": lab} for b, lab in zip(parsed.boxes, parsed.labels, strict=True)]

    def metrics(self, samples: Sequence[Sample], completions: Sequence[str]) -> dict[str, float]:
        """pycocotools COCOeval ("bbox") over the split, every predicted box scored 1.0: ties
        keep image order, then answer order (COCOeval's stable sort). -1 means undefined, as
        pycocotools reports it (no ground truth of that kind in the split)."""
        n = len(samples)
        if n == 0:
            return {}
        predictions = [self.predict(c, s) for c, s in zip(completions, samples, strict=True)]
        stats = coco_eval_stats(samples, predictions)
        out = {
            "map": stats[0],
            "ap50": stats[1],
            "ap75": stats[2],
            "ap_small": stats[3],
            "ap_medium": stats[4],
            "ap_large": stats[5],
            "ar100": stats[8],
        }
        out["image_acc@0.5"] = sum(self.correct(completions, samples)) / n
        out["format_rate"] = sum(self._format_reward(completions, samples)) / n
        out["parse_rate"] = sum(p is not None for p in predictions) / n
        return out

    def correct(self, completions: Sequence[str], samples: Sequence[Sample]) -> list[float]:
        """An image is right when the answer finds every object of it (its label, IoU >= 0.5 as
        COCO matches them: AP50 of the image 1) and states nothing else (no more entries than
        objects); an image without objects, when the answer states none."""
        out = []
        for completion, sample in zip(completions, samples, strict=True):
            pred, truth = self._detections(completion, sample), _ground_truth(sample)
            found_all = pred is not None and ap50_reward(pred, truth) >= 1 - 1e-9  # COCO's eps: 1 / (1 + 2e-16)
            out.append(float(found_all and pred.raw_count <= len(truth.boxes)))
        return out


@lru_cache(maxsize=256)
def _parse(completion: str, mode: str) -> Detections | None:
    """Parsed once per completion although several rewards read it (immutable result)."""
    return parse_detections(completion, mode)  # type: ignore[arg-type]


def _ground_truth(sample: Sample) -> GroundTruth:
    crowd = sample.meta.get("crowd", ())
    return GroundTruth(
        tuple(tuple(o["box"]) for o in sample.solution),
        tuple(o["label"] for o in sample.solution),
        tuple(tuple(o["box"]) for o in crowd),
        tuple(o["label"] for o in crowd),
    )


def coco_eval_stats(samples: Sequence[Sample], predictions: Sequence[list[dict[str, Any]] | None]) -> list[float]:
    """COCOeval("bbox").stats over the samples, each under its COCO image id (positions where
    the ids are missing or repeat); predictions scored 1.0. The ids matter: COCOeval sorts them,
    and with equal scores that order breaks the ties of the precision-recall curve."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    names: list[str] = []
    for sample in samples:
        for name in sample.meta.get("categories", ()):
            if name not in names:
                names.append(name)
    category_id = {name: i + 1 for i, name in enumerate(names)}
    ids = [sample.meta.get("image_id") for sample in samples]
    if not all(isinstance(i, int) for i in ids) or len(set(ids)) < len(ids):
        ids = list(range(1, len(samples) + 1))
    images, annotations = [], []
    for i, sample in zip(ids, samples, strict=True):
        images.append({"id": i, "width": sample.frame.width, "height": sample.frame.height})
        objects = [(o, 0) for o in sample.solution] + [(o, 1) for o in sample.meta.get("crowd", ())]
        for o, crowd in objects:
            x1, y1, x2, y2 = o["box"]
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": i,
                    "category_id": category_id[o["label"]],
                    "bbox": [x1, y1, x2 - x1, y2 - y1],
                    "area": o.get("area", (x2 - x1) * (y2 - y1)),
                    "iscrowd": crowd,
                }
            )
    categories = [{"id": i, "name": name} for name, i in category_id.items()]
    results = []
    for i, boxes in zip(ids, predictions, strict=True):
        for o in boxes or ():
            if o["label"] in category_id:
                x1, y1, x2, y2 = o["box"]
                results.append(
                    {
                        "image_id": i,
                        "category_id": category_id[o["label"]],
                        "bbox": [x1, y1, x2 - x1, y2 - y1],
                        "score": 1.0,
                    }
                )
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = {"images": images, "annotations": annotations, "categories": categories}
        gt.createIndex()
        if results:
            dt = gt.loadRes(results)
        else:  # loadRes cannot take an empty list
            dt = COCO()
            dt.dataset = {"images": images, "annotations": [], "categories": categories}
            dt.createIndex()
        evaluator = COCOeval(gt, dt, "bbox")
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    return [float(v) for v in evaluator.stats]


# -- reading COCO instances ---------------------------------------------------------------


class _CocoReader:
    """Validates a parsed COCO instances object and turns each image into a Sample."""

    def __init__(
        self,
        task: Detection,
        path: Path,
        text: str,
        root: Path,
        frame_spec: FrameSpec,
        require_images: bool,
        media: MediaRules,
    ):
        self.task = task
        self.path = path
        self.root = root
        self.frame_spec = frame_spec
        self.require_images = require_images
        self.media = media
        self.lines = _element_lines(text)

    def where(self, key: str, index: int) -> str:
        lines = self.lines.get(key, ())
        line = lines[index] if index < len(lines) else 1
        return f"{self.path}:{line} {key}[{index}]"

    def ctx(self, key: str, index: int) -> RecordContext:
        return RecordContext(self.where(key, index), index, self.root, self.frame_spec, self.require_images, self.media)

    def samples(self, data: dict[str, Any]):
        """Yield a Sample per usable image, or a RecordError per bad record, in file order."""
        categories: dict[int, str] = {}
        for i, record in enumerate(data["categories"]):
            ctx = self.ctx("categories", i)
            try:
                with record_faults(ctx.source):
                    cid, name = _category(record, ctx, categories)
                categories[cid] = name
            except RecordError as err:
                yield err
        names = list(categories.values())
        images: dict[int, int] = {}  # image id -> index in "images"
        for i, record in enumerate(data["images"]):
            ctx = self.ctx("images", i)
            if not isinstance(record, dict):
                yield ctx.error(f"image must be a JSON object, got {type(record).__name__}")
                continue
            image_id = record.get("id")
            if isinstance(image_id, bool) or not isinstance(image_id, int):
                yield ctx.error(f"key 'id' must be an integer image id, got {image_id!r}"[:200])
            elif image_id in images:
                yield ctx.error(f"duplicate image id {image_id} (first at images[{images[image_id]}])")
            else:
                images[image_id] = i
        objects: dict[int, list[tuple[int, dict[str, Any]]]] = {image_id: [] for image_id in images}
        broken: set[int] = set()
        for i, record in enumerate(data["annotations"]):
            ctx = self.ctx("annotations", i)
            try:
                with record_faults(ctx.source):
                    image_id, obj = _annotation(record, ctx, images, categories)
            except RecordError as err:
                image_id = record.get("image_id") if isinstance(record, dict) else None
                if isinstance(image_id, int) and image_id in images:
                    broken.add(image_id)
                    err = RecordError(err.source, f"{err.message}; image {image_id} skipped")
                yield err
                continue
            objects[image_id].append((i, obj))
        for image_id, index in images.items():
            if image_id in broken:
                continue
            ctx = self.ctx("images", index)
            try:
                with record_faults(ctx.source):
                    sample = self.sample(data["images"][index], ctx, objects[image_id], names)
            except RecordError as err:
                yield err
            else:
                yield sample

    def sample(self, record: dict[str, Any], ctx: RecordContext, objects, names: list[str]) -> Sample:
        image_id = record["id"]
        file_name = ctx.get(record, "file_name", str, "the image file name")
        path, width, height = ctx.image_as_stated(file_name, record)
        solution, crowd = [], []
        for index, obj in objects:
            x1, y1, x2, y2 = obj["box"]
            if not (x1 >= -BOX_SLACK and x2 <= width + BOX_SLACK and y1 >= -BOX_SLACK and y2 <= height + BOX_SLACK):
                raise RecordError(
                    self.where("annotations", index),
                    f"bbox {obj['bbox']} lies outside the {width}x{height} image {image_id}; image {image_id} skipped",
                )
            (crowd if obj["iscrowd"] else solution).append(
                {"box": obj["box"], "label": obj["label"], "area": obj["area"]}
            )
        present = [n for n in names if any(o["label"] == n for o in solution)]
        crowd_only = frozenset(o["label"] for o in crowd) - set(present)
        asked = self.task.prompt_categories(present, names, image_id, crowd_only)
        return Sample(
            id=str(image_id),
            task=self.task.name,
            problem="detect: " + ", ".join(asked),
            solution=solution,
            images=[path],
            frame=ctx.frame_spec.frame(width, height),
            meta={
                "image_id": image_id,
                "file_name": file_name,
                "categories": names,
                "prompt_categories": asked,
                "crowd": crowd,
            },
            source=ctx.source,
        )


def _category(record: Any, ctx: RecordContext, known: dict[int, str]) -> tuple[int, str]:
    if not isinstance(record, dict):
        raise ctx.error(f"category must be a JSON object, got {type(record).__name__}")
    cid = ctx.get(record, "id", int, "an integer category id")
    name = ctx.get(record, "name", str, "the category name")
    if cid in known:
        raise ctx.error(f"duplicate category id {cid}")
    if not name.strip():
        raise ctx.error("empty category name")
    if name in known.values():
        raise ctx.error(f"duplicate category name {name!r}")
    return cid, name


def _annotation(
    record: Any, ctx: RecordContext, images: dict[int, int], categories: dict[int, str]
) -> tuple[int, dict[str, Any]]:
    """(image id, {"box", "bbox", "label", "area", "iscrowd"}) of a valid annotation."""
    if not isinstance(record, dict):
        raise ctx.error(f"annotation must be a JSON object, got {type(record).__name__}")
    image_id = ctx.get(record, "image_id", int, "the integer id of an image")
    if image_id not in images:
        raise ctx.error(f"image_id {image_id} is not an id in 'images'")
    category_id = ctx.get(record, "category_id", int, "the integer id of a category")
    if category_id not in categories:
        raise ctx.error(f"category_id {category_id} is not an id in 'categories'")
    bbox = ctx.get(record, "bbox", list, "[x, y, width, height] in original pixels")
    if len(bbox) != 4 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in bbox):
        raise ctx.error(f"key 'bbox' must be 4 numbers [x, y, width, height], got {bbox!r}"[:200])
    if not all(math.isfinite(v) for v in bbox):
        raise ctx.error(f"key 'bbox' has a non-finite value: {bbox}")
    x, y, w, h = (float(v) for v in bbox)
    if w <= 0 or h <= 0:
        raise ctx.error(f"bbox {bbox} has {'negative' if min(w, h) < 0 else 'zero'} size")
    crowd = record.get("iscrowd", 0)
    if isinstance(crowd, bool) or not isinstance(crowd, int) or crowd not in (0, 1):
        raise ctx.error(f"key 'iscrowd' must be 0 or 1, got {crowd!r}"[:200])
    area = record.get("area", w * h)
    if isinstance(area, bool) or not isinstance(area, (int, float)) or not math.isfinite(area) or area < 0:
        raise ctx.error(f"key 'area' must be a non-negative number, got {area!r}"[:200])
    return image_id, {
        "box": [x, y, x + w, y + h],
        "bbox": bbox,
        "label": categories[category_id],
        "area": float(area),
        "iscrowd": int(crowd),
    }


def _element_lines(text: str) -> dict[str, list[int]]:
    """1-based line of each element of the top-level images / annotations / categories lists."""
    if "\n" not in text.strip():
        return {}  # a one-line file (as COCO ships): every element is on line 1
    decoder = json.JSONDecoder()
    lines: dict[str, list[int]] = {}
    state = {"line": 1, "counted": 0}

    def line_at(pos: int) -> int:
        state["line"] += text.count("\n", state["counted"], pos)
        state["counted"] = pos
        return state["line"]

    def ws(pos: int) -> int:
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
        return pos

    try:
        pos = ws(0) + 1  # past "{"
        while True:
            pos = ws(pos)
            if text[pos] == "}":
                break
            key, pos = decoder.raw_decode(text, pos)
            pos = ws(ws(pos) + 1)  # past ":"
            if key in ("images", "annotations", "categories") and text[pos] == "[":
                found = lines.setdefault(key, [])
                pos = ws(pos + 1)
                while text[pos] != "]":
                    found.append(line_at(pos))
                    _, pos = decoder.raw_decode(text, pos)
                    pos = ws(pos)
                    if text[pos] == ",":
                        pos = ws(pos + 1)
                pos += 1
            else:
                _, pos = decoder.raw_decode(text, pos)
            pos = ws(pos)
            if text[pos] == ",":
                pos += 1
    except (ValueError, IndexError):  # the file parsed as a whole, so this is only a guard
        pass
    return lines
