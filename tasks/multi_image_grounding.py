"""Grounding over several images in one prompt, as UniVG-R1 trains it (alias `univg`).

Records (UniVG-R1's json list; data_prep/multi_image.py): `images` (paths, shown in order),
`question` (its `<image>` markers removed; it names the image to search), `answer` (the one
box, [x1, y1, x2, y2], by default in Qwen2-VL's 0-1000 frame of that image, as UniVG-R1's
data states it; `task.options.answer_frame=pixels` reads original pixels of that image), and
one key of vlrl's, optional: `target_image`, the 0-based index of that image. The answer
states only the box (never the image), in the model's frame of the target image.

Without `target_image` a record is usable only where the answer needs no conversion (0-1000
data for a model that answers in 0-1000: Qwen2-VL, Qwen3-VL, Qwen3.5); the sample's frame is
then the 0-1000 square itself, so `predict` gives 0-1000 coordinates.

Rewards (AMAP-ML/UniVG-R1 at 44868ea, src/open-r1-multimodal/src/open_r1/vlm_modules/
qwen_module.py): `iou` (`iou_reward`: VLM-R1's inclusive-pixel IoU of the first
`(x1,y1),(x2,y2)` in the first <answer>, in the model's frame of the target image, as UniVG-R1
compares the parsed integers with the record's answer) and `format` (`format_reward_rec`:
<think>, then an <answer> that is exactly one such box, at the end). UniVG-R1's released run
(`--single_img_with_cot False`) treats a record whose first image path holds
`dataset/coco/train2014/COCO` as plain single-image grounding: the prompt loses its reasoning
sentence and gains a prefix, the box is read anywhere and the format is any box
(`single_image_cot`, `single_image_marker`). Its difficulty-aware weighting is a trainer
option: `algo.difficulty` (vlrl/algos/difficulty.py).

Metrics (MIG-Bench's, eval/MIG_bench/MIG_bench_eval.py): the box its `extract_bbox` reads
(the first `(x1,y1),(x2,y2)` anywhere, reasoning included, else its other patterns), its IoU
with the answer in the model's frame (continuous, as MIG-Bench compares the parsed integers
with the record's), ACC@0.3/0.5/0.7 (IoU >= t) and mean IoU, over all samples and per MIG-Bench
subset (the record's `task` key: `acc@0.5/common_object`, ...); format and parse rates.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from data_prep.multi_image import ORDINALS, write_synthetic_multi_image
from rewards.format import univg_r1, univg_r1_plain
from rewards.grounding import (
    iou_continuous,
    iou_vlm_r1,
    parse_answer_pair_box,
    parse_mig_bench_box,
    parse_pair_box,
)
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.tasking.task import RewardFn, Task
from vlrl.vision.frames import Frame

# UniVG-R1's question template (qwen_module.py get_question_template, task "rec").
UNIVG_R1_TEMPLATE = (
    "{Question} First output the thinking process in <think> </think> tags and then output the bounding box in "
    "<answer> </answer> tags."
)
# ... and its single-image variant without reasoning (grpo_univg.py LazySupervisedDataset).
UNIVG_R1_PLAIN_TEMPLATE = "This is a single image grounding task with simple reference. {Question}"
ACC_THRESHOLDS = (0.3, 0.5, 0.7)
BOX_SLACK = 1.0  # boxes may round a unit past the border


@dataclass
class MultiImageGroundingOptions:
    answer_frame: Literal["norm1000", "pixels"] = "norm1000"  # the frame records state `answer` in
    prompt_template: str = UNIVG_R1_TEMPLATE  # {Question}: the question, <image> markers removed
    # UniVG-R1's single_img_with_cot: false (its released script) makes records whose first image
    # path holds `single_image_marker` plain single-image grounding (no reasoning asked or scored).
    single_image_cot: bool = False
    single_image_marker: str = "dataset/coco/train2014/COCO"
    target_think: str = "The question asks about the {ordinal} image."  # reasoning text of the SFT target
    synthetic_max_images: int = 3  # synthetic records: 2 to this many images each


class MultiImageGrounding(Task):
    name = "multi_image_grounding"
    description = "Grounding over several images in one prompt (UniVG-R1): one box in the image the question names"
    accuracy_metric = "acc@0.5"
    headline = ("acc@0.5", "mean_iou", "format_rate")
    Options = MultiImageGroundingOptions
    option_templates = {"prompt_template": ("Question",), "target_think": ("ordinal",)}
    default_rewards = {"iou": 1.0, "format": 1.0}

    # -- data -----------------------------------------------------------------------------
    def build_sample(self, record: dict[str, Any], ctx: RecordContext) -> Sample:
        names = ctx.get(record, "images", list, "a list of image paths")
        if not names or not all(isinstance(n, str) and n.strip() for n in names):
            raise ctx.error("key 'images' must be a non-empty list of image paths")
        question = ctx.get(record, "question", str, "the question text").replace("<image>", "").strip()
        answer = ctx.get(record, "answer", list, "the box [x1, y1, x2, y2]")
        if len(answer) != 4 or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in answer
        ):
            raise ctx.error(f"key 'answer' must be 4 finite numbers [x1, y1, x2, y2], got {answer!r}"[:200])
        images = [ctx.image(n) for n in names]
        target = record.get("target_image")
        if target is not None and (isinstance(target, bool) or not isinstance(target, int)):
            raise ctx.error(f"key 'target_image' must be an image index, got {target!r}"[:200])
        if target is not None and not 0 <= target < len(images):
            raise ctx.error(f"target_image {target} is not an index of the record's {len(images)} images")
        norm1000 = self.options.answer_frame == "norm1000"
        if target is None:
            if not (norm1000 and ctx.frame_spec.kind == "norm1000"):
                raise ctx.error(
                    "record has no 'target_image': its answer cannot be converted into the model's "
                    f"{ctx.frame_spec.kind} frame without knowing which image it is in"
                )
            frame = Frame.for_image("norm1000", 1000, 1000, 0, 0)
        else:
            frame = ctx.frame_spec.frame(images[target][1], images[target][2])
        stated = [float(v) for v in answer]
        solution = Frame.for_image("norm1000", frame.width, frame.height, 0, 0).box_to_original(stated)
        if not norm1000:
            solution = stated
        x1, y1, x2, y2 = solution
        if not (-BOX_SLACK <= x1 < x2 <= frame.width + BOX_SLACK and -BOX_SLACK <= y1 < y2 <= frame.height + BOX_SLACK):
            raise ctx.error(f"answer {answer} is empty or outside its image ({self.options.answer_frame} frame)")
        # UniVG-R1 compares the stated numbers with the model's as they are: so does vlrl where
        # the two frames are the same; elsewhere the answer is put in the model's frame.
        same = norm1000 and frame.kind == "norm1000"
        in_model = answer if same else frame.box_to_model(solution, integer=False)
        plain = not self.options.single_image_cot and self.options.single_image_marker in names[0]
        subset = record.get("task")
        if subset is not None and not (isinstance(subset, str) and subset.strip()):
            raise ctx.error(f"key 'task' must name the MIG-Bench subset, got {subset!r}"[:200])
        return Sample(
            id=ctx.record_id(record),
            task=self.name,
            problem=question,
            solution=solution,
            images=[path for path, _, _ in images],
            frame=frame,
            meta={"answer_in_model_frame": in_model, "target_image": target, "plain": plain, "subset": subset},
            source=ctx.source,
        )

    def synthesize(self, path: str | Path, size: int, seed: int) -> None:
        write_synthetic_multi_image(path, size, seed, max_images=self.options.synthetic_max_images)

    # -- prompting ------------------------------------------------------------------------
    def messages(self, sample: Sample) -> list[dict[str, Any]]:
        template = UNIVG_R1_PLAIN_TEMPLATE if sample.meta["plain"] else self.options.prompt_template
        images = [{"type": "image"} for _ in sample.images]
        return [
            {"role": "user", "content": [*images, {"type": "text", "text": template.format(Question=sample.problem)}]}
        ]

    def target(self, sample: Sample) -> str:
        x1, y1, x2, y2 = sample.frame.box_to_model(sample.solution)
        box = f"({x1},{y1}),({x2},{y2})"
        if sample.meta["plain"]:
            return box
        index = sample.meta["target_image"]
        ordinal = ORDINALS[index] if index is not None and index < len(ORDINALS) else "named"
        return f"<think>{self.options.target_think.format(ordinal=ordinal)}</think>\n<answer>{box}</answer>"

    # -- scoring --------------------------------------------------------------------------
    def reward_functions(self) -> dict[str, RewardFn]:
        return {
            "iou": lambda completions, samples: [self._iou(c, s) for c, s in zip(completions, samples, strict=True)],
            "format": lambda completions, samples: [
                self._format(c, s) for c, s in zip(completions, samples, strict=True)
            ],
        }

    def _stated_box(self, completion: str, sample: Sample) -> list[int] | None:
        """The box the completion states, in the model's frame (anywhere in plain records)."""
        return parse_pair_box(completion) if sample.meta["plain"] else parse_answer_pair_box(completion)

    def _iou(self, completion: str, sample: Sample) -> float:
        box = self._stated_box(completion, sample)
        return 0.0 if box is None else iou_vlm_r1(box, sample.meta["answer_in_model_frame"])

    def _format(self, completion: str, sample: Sample) -> float:
        return univg_r1_plain(completion) if sample.meta["plain"] else univg_r1(completion)

    def predict(self, completion: str, sample: Sample) -> list[float] | None:
        """The box MIG-Bench's evaluation reads, in the target image's original pixels (None if
        none, or not finite)."""
        box = parse_mig_bench_box(completion)
        if box is None:
            return None
        out = sample.frame.box_to_original(box)
        return out if all(math.isfinite(v) for v in out) else None

    def metrics(self, samples: Sequence[Sample], completions: Sequence[str]) -> dict[str, float]:
        n = len(samples)
        if n == 0:
            return {}
        pairs = list(zip(completions, samples, strict=True))
        boxes = [parse_mig_bench_box(c) for c, _ in pairs]
        ious = [0.0 if b is None else _mig_bench_iou(b, s) for b, (_, s) in zip(boxes, pairs, strict=True)]
        out = _accuracies(ious)
        out["format_rate"] = sum(self._format(c, s) for c, s in pairs) / n
        out["parse_rate"] = sum(b is not None for b in boxes) / n
        for subset in dict.fromkeys(s.meta["subset"] for s in samples if s.meta["subset"] is not None):
            mine = [v for v, s in zip(ious, samples, strict=True) if s.meta["subset"] == subset]
            out.update({f"{key}/{subset}": value for key, value in _accuracies(mine).items()})
        return out


def _mig_bench_iou(box: list[int], sample: Sample) -> float:
    """MIG-Bench's calculate_iou of the answer and the parsed box, both in the model's frame; 0
    where its union is 0 or the areas pass the floats (it raises there)."""
    value = iou_continuous(box, sample.meta["answer_in_model_frame"])
    return value if math.isfinite(value) else 0.0


def _accuracies(ious: list[float]) -> dict[str, float]:
    """MIG-Bench's compute_iou counters over a group: IoU >= t, and the mean IoU."""
    out = {f"acc@{t}": sum(v >= t for v in ious) / len(ious) for t in ACC_THRESHOLDS}
    out["mean_iou"] = sum(ious) / len(ious)
    return out
