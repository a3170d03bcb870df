"""RefCOCO referring-expression grounding, as VLM-R1 trains and evaluates it.

Data: VLM-R1's REC json (`image`, `problem`, `normal_caption`, `solution` box in original
pixels, `height`, `width`). The model answers a box in its own frame; rewards and metrics
map it back to original pixels before comparing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from data_prep.refcoco import write_synthetic_rec
from rewards.format import FORMATS
from rewards.grounding import IOU_CONVENTIONS, box_center_inside, parse_answer_box
from rewards.text import answer_text, compile_pattern, findall
from vlrl.data import RecordContext
from vlrl.sample import Sample
from vlrl.task import RewardFn, Task

# VLM-R1's question template for REC.
VLM_R1_REC_TEMPLATE = (
    "{Question} First output the thinking process in <think> </think> tags and then output "
    "the final answer in <answer> </answer> tags. Output the final answer in JSON format."
)
ACC_THRESHOLDS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
_NUMBER = compile_pattern(r"-?\d+(?:\.\d+)?")


@dataclass
class GroundingOptions:
    prompt_template: str = VLM_R1_REC_TEMPLATE
    format: Literal["vlm_r1_rec", "think_answer"] = "vlm_r1_rec"
    iou_convention: Literal["vlm_r1", "continuous"] = "vlm_r1"
    iou_threshold: float = 0.5  # for the thresholded reward `iou_threshold` (1 if IoU > t)
    target_think: str = "{caption}"  # reasoning text of the SFT target


class RefCOCO(Task):
    name = "refcoco"
    description = "Referring-expression grounding (RefCOCO, VLM-R1 REC json): one box per expression, IoU rewards"
    Options = GroundingOptions
    default_rewards = {"format": 1.0, "iou": 1.0}

    # -- data -----------------------------------------------------------------------------
    def build_sample(self, record: dict[str, Any], ctx: RecordContext) -> Sample:
        image = ctx.get(record, "image", (str, list), "an image path")
        if isinstance(image, list):
            if len(image) != 1 or not isinstance(image[0], str):
                raise ctx.error(f"key 'image' must be one image path, got {len(image)} entries")
            image = image[0]
        problem = ctx.get(record, "problem", str, "the question text")
        box = _solution_box(record, ctx)
        path, width, height = ctx.image_with_size(image, record)
        for key, actual in (("width", width), ("height", height)):
            stated = record.get(key)
            if stated is not None and ctx.require_images and stated != actual:
                raise ctx.error(f"key '{key}' says {stated} but image {path} has {key} {actual}")
        x1, y1, x2, y2 = box
        # One pixel of slack: public annotations round box edges past the border.
        if not (-1 <= x1 < x2 <= width + 1 and -1 <= y1 < y2 <= height + 1):
            raise ctx.error(f"box {box} is empty or outside the {width}x{height} image")
        return Sample(
            id=ctx.record_id(record),
            task=self.name,
            problem=problem,
            solution=box,
            images=[path],
            frame=ctx.frame_spec.frame(width, height),
            meta={"caption": record.get("normal_caption", "")},
            source=ctx.source,
        )

    def synthesize(self, path: str | Path, size: int, seed: int) -> None:
        write_synthetic_rec(path, size, seed)

    # -- prompting ------------------------------------------------------------------------
    def messages(self, sample: Sample) -> list[dict[str, Any]]:
        text = self.options.prompt_template.format(Question=sample.problem)
        return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]

    def target(self, sample: Sample) -> str:
        x1, y1, x2, y2 = sample.frame.box_to_model(sample.solution)
        think = self.options.target_think.format(caption=sample.meta.get("caption", ""), problem=sample.problem)
        return f'<think>{think}</think>\n<answer>{{"bbox_2d": [{x1}, {y1}, {x2}, {y2}]}}</answer>'

    # -- scoring --------------------------------------------------------------------------
    def reward_functions(self) -> dict[str, RewardFn]:
        return {
            "format": self._format_reward,
            "iou": self._iou_reward,
            "iou_squared": lambda c, s: [v * v for v in self._iou_reward(c, s)],
            "iou_threshold": lambda c, s: [
                1.0 if v > self.options.iou_threshold else 0.0 for v in self._iou_reward(c, s)
            ],
        }

    def _format_reward(self, completions: Sequence[str], samples: Sequence[Sample]) -> list[float]:
        check = FORMATS[self.options.format]
        return [check(c) for c in completions]

    def _iou_reward(self, completions: Sequence[str], samples: Sequence[Sample]) -> list[float]:
        return [self._iou(c, s) for c, s in zip(completions, samples, strict=True)]

    def _iou(self, completion: str, sample: Sample) -> float:
        box = self.predict(completion, sample)
        return 0.0 if box is None else IOU_CONVENTIONS[self.options.iou_convention](box, sample.solution)

    def predict(self, completion: str, sample: Sample) -> list[float] | None:
        box = parse_answer_box(completion)
        return None if box is None else sample.frame.box_to_original(box)

    def metrics(self, samples: Sequence[Sample], completions: Sequence[str]) -> dict[str, float]:
        n = len(samples)
        if n == 0:
            return {}
        ious, centers, parsed = [], [], 0
        for completion, sample in zip(completions, samples, strict=True):
            box = self.predict(completion, sample)
            if box is None:
                ious.append(0.0)
                centers.append(False)
                continue
            parsed += 1
            ious.append(IOU_CONVENTIONS[self.options.iou_convention](box, sample.solution))
            centers.append(box_center_inside(box, sample.solution))
        out = {f"acc@{t:.1f}": sum(v > t for v in ious) / n for t in ACC_THRESHOLDS}
        out["mean_iou"] = sum(ious) / n
        out["center_acc"] = sum(centers) / n
        out["format_rate"] = sum(self._format_reward(completions, samples)) / n
        out["parse_rate"] = parsed / n
        return out


def _solution_box(record: dict[str, Any], ctx: RecordContext) -> list[float]:
    """The ground-truth box: a list of 4 numbers, or VLM-R1's "<answer>[x1,y1,x2,y2]</answer>"."""
    value = ctx.get(record, "solution", (list, str), "a box [x1, y1, x2, y2] in original pixels")
    if isinstance(value, str):
        inner = answer_text(value)
        numbers = findall(_NUMBER, inner if inner is not None else value)
        value = [float(v) for v in numbers]
    if len(value) != 4 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        raise ctx.error(f"key 'solution' must be 4 numbers [x1, y1, x2, y2], got {value!r}"[:200])
    box = [float(v) for v in value]
    if not all(math.isfinite(v) for v in box):
        raise ctx.error(f"key 'solution' has a non-finite coordinate: {box}")
    return box
