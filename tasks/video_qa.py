"""Question answering over videos and images in Video-R1's format, with its rewards and T-GRPO.

Records (Video-R1's json list, e.g. Video-R1-260k.json; data_prep/video.py): `problem`,
`data_type` ("video" or "image"), `problem_type` (multiple choice, numerical, OCR, free-form,
regression), `options` (for multiple choice, e.g. ["A. left", "B. right"]), `solution`
("<answer>B</answer>", or the bare answer) and `path` (the video or image, relative to
data.image_root or the data file's folder); `problem_id` is the id when there is no `id`.
A video must be readable (PyAV) with at least two frames; numerical and regression answers
must be numbers.

Prompt: Video-R1's QUESTION_TEMPLATE with its TYPE_TEMPLATE for the problem type; a
multiple-choice question is followed by "Options:\\n" and one option per line, as there.
Frames are sampled and sized by `model.video` (qwen-vl-utils' rules, vlrl/vision/video.py).

Rewards: `format` (<think>...</think>\\s*<answer>...</answer>, full match) and `accuracy`
(rewards/video.py, by problem type; task.options.nonfinite says how "nan" answers score).
`temporal_variant` gives a video sample its frames shuffled (seeded by the sample's id, which
the trainer mixes with a draw of each visit's) for T-GRPO (algo.temporal); an image sample has none. Metrics: `accuracy` (the mean training
accuracy reward; Video-R1's evaluation numbers are the `video_r1_*` benchmarks'),
`accuracy/<problem type>`, `format_rate`.
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from data_prep.video import write_synthetic_video_qa
from rewards.format import think_answer
from rewards.ocr import video_r1_answer
from rewards.text import ANSWER_TAG, search
from rewards.video import PROBLEM_TYPES, accuracy, to_number
from tasks.records import record_image
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.tasking.task import RewardFn, Task

# Video-R1 (src/r1-v/src/open_r1/grpo.py): QUESTION_TEMPLATE and TYPE_TEMPLATE.
QUESTION_TEMPLATE = (
    "{Question}\n"
    "Please think about this question as if you were a human pondering deeply. "
    "Engage in an internal dialogue using expressions such as 'let me think', 'wait', 'Hmm', 'oh, I see', "
    "'let's break it down', etc, or other natural language thought expressions "
    "It's encouraged to include self-reflection or verification in the reasoning process. "
    "Provide your detailed reasoning between the <think> </think> tags, and then give your final answer "
    "between the <answer> </answer> tags."
)
TYPE_TEMPLATE = {
    "multiple choice": " Please provide only the single option letter (e.g., A, B, C, D, etc.) within the <answer> </answer> tags.",
    "numerical": " Please provide the numerical value (e.g., 42 or 3.14) within the <answer> </answer> tags.",
    "OCR": " Please transcribe text from the image/video clearly and provide your text answer within the <answer> </answer> tags.",
    "free-form": " Please provide your text answer within the <answer> </answer> tags.",
    "regression": " Please provide the numerical value (e.g., 42 or 3.14) within the <answer> </answer> tags.",
}


@dataclass
class VideoQAOptions:
    nonfinite: Literal["zero", "video_r1"] = "zero"  # how "nan"/"inf" answers score (rewards/video.py)
    target_think: str = "Let me look at the {data_type} carefully."  # reasoning text of the SFT target
    synthetic_side: int = 112  # synthetic clips: frame side in pixels
    synthetic_frames: int = 16  # ... frames per clip, at 8 fps


class VideoQA(Task):
    name = "video_qa"
    states_coordinates = False
    description = "Video and image QA in Video-R1's format: its five answer types, rewards and T-GRPO"
    headline = ("accuracy", "format_rate")
    data_source = (
        "Video-R1-260k.json with its videos and images as Video-R1 publishes them (data.image_root: their folder)"
    )
    Options = VideoQAOptions
    option_templates = {"target_think": ("data_type",)}
    default_rewards = {"format": 1.0, "accuracy": 1.0}

    # -- data -----------------------------------------------------------------------------
    def build_sample(self, record: dict[str, Any], ctx: RecordContext) -> Sample:
        return video_r1_sample(record, ctx, self.name)

    def synthesize(self, path: str | Path, size: int, seed: int) -> None:
        o = self.options
        write_synthetic_video_qa(path, size, seed, side=o.synthetic_side, n_frames=o.synthetic_frames)

    # -- prompting ------------------------------------------------------------------------
    def messages(self, sample: Sample) -> list[dict[str, Any]]:
        text = QUESTION_TEMPLATE.format(Question=sample.problem) + TYPE_TEMPLATE[sample.meta["problem_type"]]
        return [{"role": "user", "content": [{"type": sample.meta["data_type"]}, {"type": "text", "text": text}]}]

    def target(self, sample: Sample) -> str:
        think = self.options.target_think.format(data_type=sample.meta["data_type"])
        return f"<think>{think}</think>\n<answer>{sample.solution}</answer>"

    def temporal_variant(self, sample: Sample) -> Sample | None:
        if not sample.video:
            return None
        return dataclasses.replace(sample, shuffle_frames=zlib.crc32(sample.id.encode()))

    # -- scoring --------------------------------------------------------------------------
    def reward_functions(self) -> dict[str, RewardFn]:
        return {
            "format": lambda completions, samples: [think_answer(c) for c in completions],
            "accuracy": lambda completions, samples: [
                self._accuracy(c, s) for c, s in zip(completions, samples, strict=True)
            ],
        }

    def _accuracy(self, completion: str, sample: Sample) -> float:
        return accuracy(
            video_r1_answer(completion), sample.solution, sample.meta["problem_type"], self.options.nonfinite
        )

    def predict(self, completion: str, sample: Sample) -> str | None:
        return video_r1_answer(completion) or None

    def metrics(self, samples: Sequence[Sample], completions: Sequence[str]) -> dict[str, float]:
        if not samples:
            return {}
        scores = [self._accuracy(c, s) for c, s in zip(completions, samples, strict=True)]
        formatted = [think_answer(c) for c in completions]
        return accuracy_by_type(scores, formatted, samples, PROBLEM_TYPES)


def accuracy_by_type(
    scores: Sequence[float], formatted: Sequence[float], samples: Sequence[Sample], types: Sequence[str]
) -> dict[str, float]:
    """`accuracy` (the mean score), `format_rate`, and `accuracy/<problem type>` of each type present."""
    out = {"accuracy": sum(scores) / len(scores), "format_rate": sum(formatted) / len(formatted)}
    for problem_type in types:
        mine = [v for v, s in zip(scores, samples, strict=True) if s.meta["problem_type"] == problem_type]
        if mine:
            out[f"accuracy/{problem_type}"] = sum(mine) / len(mine)
    return out


def video_r1_sample(record: dict[str, Any], ctx: RecordContext, task: str) -> Sample:
    """One record of Video-R1's format -> Sample (also the format of Video-R1's benchmark files)."""
    problem = ctx.get(record, "problem", str, "the question text")
    problem_type = ctx.get(record, "problem_type", str, "one of " + ", ".join(PROBLEM_TYPES))
    if problem_type not in PROBLEM_TYPES:
        raise ctx.error(f"problem_type {problem_type!r} is not one of {', '.join(PROBLEM_TYPES)}"[:200])
    data_type = ctx.get(record, "data_type", str, '"video" or "image"')
    if data_type not in ("video", "image"):
        raise ctx.error(f'data_type {data_type!r} must be "video" or "image"'[:200])
    answer = record_answer(record, ctx)
    if problem_type in ("numerical", "regression"):
        number = to_number(answer)
        if number is None or not math.isfinite(number):  # a nan truth: every regression answer would score 1
            raise ctx.error(f"solution {answer!r} of a {problem_type} problem is not a finite number"[:200])
    question = problem
    if problem_type == "multiple choice":
        options = ctx.get(record, "options", list, 'the options, like ["A. red", "B. blue"]')
        if not options or not all(isinstance(o, str) for o in options):
            raise ctx.error("options must be a non-empty list of strings")
        question = problem + "Options:\n" + "".join(f"{option}\n" for option in options)
    images, video = [], ""
    if data_type == "image":
        images = [record_image(record, ctx, keys=("path", "image"))[0]]
    else:
        video = _video_path(record, ctx)
    return Sample(
        id=record_id(record, ctx),
        task=task,
        problem=question,
        solution=answer,
        images=images,
        meta={"problem_type": problem_type, "data_type": data_type},
        source=ctx.source,
        video=video,
    )


def record_answer(record: dict[str, Any], ctx: RecordContext, stripped: bool = True) -> str:
    """A Video-R1-format record's answer: its solution's first <answer>'s content, or the whole
    solution, stripped (Video-R1's reading) or as written (SophiaVL-R1's custom.py); an empty one
    is refused."""
    solution = ctx.get(record, "solution", str, 'the answer, as "<answer>...</answer>"')
    tagged = search(ANSWER_TAG, solution)
    answer = tagged.group(1) if tagged else solution
    if not answer.strip():
        raise ctx.error("solution holds an empty answer")
    return answer.strip() if stripped else answer


def record_id(record: dict[str, Any], ctx: RecordContext) -> str:
    """`id`, else Video-R1's `problem_id`, else the record's position."""
    return str(record["id"] if "id" in record else record.get("problem_id", ctx.index))


def _video_path(record: dict[str, Any], ctx: RecordContext) -> str:
    path = ctx.resolve(ctx.get(record, "path", str, "the video's path"))
    if not ctx.require_images:
        return str(path)
    if not path.is_file():
        raise ctx.error(f"video not found: {path}")
    from vlrl.vision.video import video_info  # imports torch: here, not when `vlrl tasks list` imports this module

    try:
        info = video_info(path)
    except Exception as err:  # any decoder error is this record's problem
        raise ctx.error(f"video unreadable: {path} ({err})"[:300]) from err
    if info.frames < 2:
        raise ctx.error(f"video {path} has {info.frames} frame(s); at least 2 are needed")
    if info.width * info.height > ctx.media.max_image_pixels:  # every sampled frame is decoded whole
        raise ctx.error(
            f"video {path} has frames of {info.width}x{info.height} = {info.width * info.height} pixels, over "
            f"data.max_image_pixels ({ctx.media.max_image_pixels}), the limit an image's has"
        )
    return str(path)
