"""Object counting on PixMo-Count and CountBench records: exact count and Perception-R1's
point-matching reward.

Records (json list or jsonl; data_prep/counting.py writes both kinds):

- PixMo-Count: `image` (local path; `image_path` also read), `label` (what to count),
  `count` (integer >= 0), optional `points` in original pixels as a list of {"x", "y"},
  a columnar {"x": [...], "y": [...]} (how the Hugging Face export stores them) or a list of
  [x, y]; when given, there must be `count` of them, all inside the image. An empty list
  with count > 0 means "no points" (PixMo-Count's eval splits have none).
- CountBench / CountBenchQA: `image`, `question`, `number` (integer >= 0), optional `text`.
- Perception-R1's evaluation jsonl (linkangheng/PR1 48d5558, eval/evaluate_counting.py):
  `image_path`, `question` (what to count, its prompt's `{question}`: here the label),
  `ground_truth` (integer >= 0).

Exactly one of `count` / `number` / `ground_truth`, and a `label` or a `question`, must be present; optional
`width` / `height` must match the image. The ground truth is kept in original pixels:
Sample.solution = {"count": n, "points": [[x, y], ...] or None}.

Variants (task.options.variant):

- `points` (default): R1-style <think>/<answer>; the answer is Qwen2.5-VL's pointing JSON,
  [{"point_2d": [x, y], "label": ...}, ...] in the model's frame; the count is the number of
  points (a bare number is read too).
- `number`: R1-style, the answer is the count (R1-V's counting template, as Perception-R1's
  "r1v" question template writes it).
- `perception_r1`: Perception-R1's own task: prompt "Output all the bounding boxes of the
  {label}" after its system message (Qwen's default text with a trailing space), answer `<|object_ref_start|>label<|object_ref_end|><|box_start|>(x1,y1),(x2,y2)
  <|box_end|>...<|im_end|>`, count = number of boxes, points = box centers, and `count_points`
  is 0 unless that format matches (pr1_counting_reward). Those are special tokens: the
  completions must be decoded with them kept (PR1 runs with skip_special_tokens=False); the
  built-in HF rollout drops special tokens, so use this variant to score outputs with
  `vlrl score`, not to train.

Rewards: `format`, `count_exact`, `count_points` (rewards/counting.py). `count_points`
compares points in the 0-1000 frame of the original image with scale 1000*sqrt(2), which is
Perception-R1's frame (Qwen2-VL) whatever frame the model writes in; `point_distance:
original` compares original pixels against the image's diagonal instead. When the ground
truth has no points (CountBench), `count_points` is the count ratio min/max alone.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from data_prep.counting import COUNT_QUESTION, counting_spec, write_synthetic_counting
from data_prep.shapes import SceneSpec
from rewards.counting import (
    MAX_POINTS,
    NORM1000_DIAGONAL,
    count_exact,
    count_points,
    count_ratio,
    parse_answer,
    pr1_box_centers,
    pr1_format,
)
from rewards.format import think_answer
from tasks.records import optional_text, record_image
from vlrl.config import ConfigError, build
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.tasking.task import RewardFn, Task
from vlrl.vision.frames import Frame

_ANSWER_INSTRUCTION = (
    "First output the thinking process in <think> </think> tags and then output the final answer in "
    "<answer> </answer> tags."
)
TEMPLATES = {
    "points": (
        "{Question} Point to each of them. " + _ANSWER_INSTRUCTION + " The final answer is a JSON list with one "
        '{{"point_2d": [x, y], "label": "{label}"}} per object.'
    ),
    # R1-V's counting template ("r1v" in Perception-R1's constants.py).
    "number": (
        "{Question} Output the thinking process in <think> </think> and final answer (number) in "
        "<answer> </answer> tags."
    ),
    # Perception-R1's "pr1_counting" question template; its question is the object label.
    "perception_r1": "Output all the bounding boxes of the {label}",
}
DEFAULT_LABEL = "objects"  # what CountBench records (which name no label) count, in prompts
# Perception-R1 always sends a system message; its counting script's ("qwen", src/open_r1/
# constants.py QWEN2_SYS at accb7cb) is Qwen's default text with a trailing space.
PR1_SYSTEM = "You are a helpful assistant. "


@dataclass
class CountingOptions:
    variant: Literal["points", "number", "perception_r1"] = "points"
    prompt_template: str = ""  # "" = the variant's template; placeholders {Question} and {label}
    count_parse: Literal["strict", "last_number"] = "strict"  # how a stated number is read
    number_words: bool = True  # "seven", "twenty-one", "a dozen" count as numbers
    point_distance: Literal["norm1000", "original"] = "norm1000"
    synthetic_scene: dict[str, Any] = field(default_factory=dict)  # SceneSpec fields over counting_spec()'s
    # The SFT target states the true count plus this (never below 0): 0 is the ground truth;
    # 1 imitates a teacher that counts one too many (the counting demo's cold start). Only
    # for answers that are numbers (the `number` variant).
    target_count_offset: int = 0


@dataclass
class Prediction:
    count: int | None
    points: list[tuple[float, float]] | None  # in the model's frame


# PR1 trains counting with its pr1_counting reward alone (--reward_funcs pr1_counting), which
# already scores 0 outside its format: a format term beside it would count the format twice.
PR1_REWARDS = {"count_points": 1.0}


class Counting(Task):
    name = "counting"
    description = "Object counting (PixMo-Count / CountBench records): exact count and Perception-R1's point reward"
    Options = CountingOptions
    option_templates = {"prompt_template": ("Question", "label")}
    default_rewards = {"format": 1.0, "count_points": 1.0}
    headline = ("accuracy", "mae", "format_rate")
    data_source = "PixMo-Count or CountBench records in a json list, images downloaded beside them (docs/tasks.md)"
    data_suffix = ".json"

    def __init__(self, options: dict[str, Any] | None = None, rewards: dict[str, float] | None = None):
        super().__init__(options, rewards)
        if self.options.target_count_offset and self.options.variant != "number":
            raise ConfigError(
                "config: task.options.target_count_offset applies to the 'number' variant, "
                f"not {self.options.variant!r}: its answers are not a stated count"
            )

    def default_weights(self) -> dict[str, float]:
        return PR1_REWARDS if self.options.variant == "perception_r1" else self.default_rewards

    # -- data -----------------------------------------------------------------------------
    def build_sample(self, record: dict[str, Any], ctx: RecordContext) -> Sample:
        image_key = "image_path" if "image" not in record and "image_path" in record else "image"
        present = [k for k in ("count", "number", "ground_truth") if k in record]
        if len(present) != 1:
            raise ctx.error(
                "needs exactly one of 'count' (PixMo-Count), 'number' (CountBench) or 'ground_truth' "
                f"(Perception-R1's evaluation), got {' and '.join(present) if present else 'none'}"
            )
        count = ctx.get(record, present[0], int, "a non-negative integer count")
        if count < 0:
            raise ctx.error(f"key '{present[0]}' must be >= 0, got {count}")
        if present[0] == "ground_truth":  # Perception-R1's evaluate_counting.py: its `question` names the objects
            label, question = ctx.get(record, "question", str, "the name of the objects to count"), None
        else:
            label = optional_text(record, ctx, "label", "the name of the objects to count")
            question = optional_text(record, ctx, "question", "the counting question")
        if label is None and question is None:
            raise ctx.error("needs 'label' (PixMo-Count) or 'question' (CountBench) to say what to count")
        path, width, height = record_image(record, ctx, (image_key,))
        points = _points(record, ctx, count, width, height)
        return Sample(
            id=ctx.record_id(record),
            task=self.name,
            problem=question if question is not None else COUNT_QUESTION.format(label=label),
            solution={"count": count, "points": points},
            images=[path],
            frame=ctx.frame_spec.frame(width, height),
            meta={"label": label or DEFAULT_LABEL},
            source=ctx.source,
        )

    def synthesize(self, path: str | Path, size: int, seed: int) -> None:
        scene = {**asdict(counting_spec()), **self.options.synthetic_scene}
        write_synthetic_counting(path, size, seed, build(SceneSpec, scene, prefix="task.options.synthetic_scene."))

    # -- prompting ------------------------------------------------------------------------
    def messages(self, sample: Sample) -> list[dict[str, Any]]:
        template = self.options.prompt_template or TEMPLATES[self.options.variant]
        text = template.format(Question=sample.problem, label=sample.meta["label"])
        user = {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}
        if self.options.variant == "perception_r1":
            return [{"role": "system", "content": PR1_SYSTEM}, user]
        return [user]

    def target(self, sample: Sample) -> str:
        count, points = sample.solution["count"], sample.solution["points"]
        label = sample.meta["label"]
        model_points = [sample.frame.point_to_model(p) for p in points or []]
        if self.options.variant == "perception_r1":
            boxes = "".join(f"<|box_start|>({x},{y}),({x},{y})<|box_end|>" for x, y in model_points)
            return f"<|object_ref_start|>{label}<|object_ref_end|>{boxes}<|im_end|>"
        if self.options.variant == "number":
            count = max(0, count + self.options.target_count_offset)
        think = f"There are {count} {label}."
        if self.options.variant == "points" and points is not None:
            answer = json.dumps([{"point_2d": p, "label": label} for p in model_points])
        else:
            answer = str(count)
        return f"<think>{think}</think>\n<answer>{answer}</answer>"

    # -- scoring --------------------------------------------------------------------------
    def reward_functions(self) -> dict[str, RewardFn]:
        return {
            "format": lambda completions, samples: [self._format(c) for c in completions],
            "count_exact": lambda completions, samples: [
                count_exact(self.predict(c, s), s.solution["count"]) for c, s in zip(completions, samples, strict=True)
            ],
            "count_points": lambda completions, samples: [
                self._points_score(c, s) for c, s in zip(completions, samples, strict=True)
            ],
        }

    def _format(self, completion: str) -> float:
        return pr1_format(completion) if self.options.variant == "perception_r1" else think_answer(completion)

    def _parse(self, completion: str) -> Prediction:
        if self.options.variant == "perception_r1":
            centers = pr1_box_centers(completion)
            return Prediction(None if centers is None else len(centers), centers)
        count, points = parse_answer(completion, self.options.count_parse, self.options.number_words)
        return Prediction(count, points)

    def predict(self, completion: str, sample: Sample) -> int | None:
        return self._parse(completion).count

    def _points_score(self, completion: str, sample: Sample) -> float:
        if self.options.variant == "perception_r1" and not pr1_format(completion):
            return 0.0  # pr1_counting_reward scores only completions in its format
        pred = self._parse(completion)
        truth_count, truth_points = sample.solution["count"], sample.solution["points"]
        if pred.count is None:
            return 0.0
        if truth_points is None:
            return count_ratio(pred.count, truth_count)
        if pred.points is None:  # a bare number where points were asked for: only "0" for nothing
            return 1.0 if pred.count == 0 == truth_count else 0.0
        frame, scale = self._distance_frame(sample)
        pred_points = [frame.point_to_model(sample.frame.point_to_original(p), integer=False) for p in pred.points]
        true_points = [frame.point_to_model(p, integer=False) for p in truth_points]
        return count_points(pred_points, true_points, scale)

    def _distance_frame(self, sample: Sample) -> tuple[Frame, float]:
        """The frame points are compared in, and the distance that scores 0 in it."""
        width, height = sample.frame.width, sample.frame.height
        if self.options.point_distance == "norm1000":
            return Frame.for_image("norm1000", width, height, 0, 0), NORM1000_DIAGONAL
        return Frame.for_image("original", width, height, 0, 0), math.hypot(width, height)

    def metrics(self, samples: Sequence[Sample], completions: Sequence[str]) -> dict[str, float]:
        """accuracy: exact count (PR1 / CountBench); mae: mean |predicted - true| with an
        unparseable answer counted as 0; point_score: mean count_points; format and parse rates."""
        n = len(samples)
        if n == 0:
            return {}
        correct, errors, parsed, formatted, point_scores = 0, 0.0, 0, 0.0, 0.0
        for completion, sample in zip(completions, samples, strict=True):
            truth = sample.solution["count"]
            predicted = self.predict(completion, sample)
            parsed += predicted is not None
            correct += predicted == truth
            errors += abs((predicted or 0) - truth)
            formatted += self._format(completion)
            point_scores += self._points_score(completion, sample)
        return {
            "accuracy": correct / n,
            "mae": errors / n,
            "point_score": point_scores / n,
            "format_rate": formatted / n,
            "parse_rate": parsed / n,
        }


def _points(
    record: dict[str, Any], ctx: RecordContext, count: int, width: int, height: int
) -> list[list[float]] | None:
    """The record's points as [[x, y], ...] in original pixels, checked; None when it has none."""
    value = record.get("points")
    if value is None:
        return None
    if isinstance(value, dict):  # columnar: {"x": [...], "y": [...]}
        xs, ys = value.get("x"), value.get("y")
        if not isinstance(xs, list) or not isinstance(ys, list) or len(xs) != len(ys):
            raise ctx.error("key 'points' as a mapping must be {'x': [...], 'y': [...]} of equal length")
        value = [[x, y] for x, y in zip(xs, ys, strict=False)]
    if not isinstance(value, list):
        raise ctx.error(f"key 'points' must be a list of points, got {type(value).__name__}")
    if not value and count > 0:
        return None  # PixMo-Count's eval splits: a count, no points
    if len(value) > MAX_POINTS:
        raise ctx.error(f"key 'points' has {len(value)} points; at most {MAX_POINTS} are supported")
    points = []
    for i, item in enumerate(value):
        if isinstance(item, dict):
            item = [item.get("x"), item.get("y")]
        if not (
            isinstance(item, list)
            and len(item) == 2
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in item)
        ):
            raise ctx.error(f"point {i} must be {{'x': number, 'y': number}} or [x, y], got {item!r}"[:200])
        x, y = float(item[0]), float(item[1])
        if not (0 <= x <= width and 0 <= y <= height):
            raise ctx.error(f"point {i} ({x:g}, {y:g}) is outside the {width}x{height} image")
        points.append([x, y])
    if len(points) != count:
        raise ctx.error(f"'points' has {len(points)} points but the count is {count}")
    return points
