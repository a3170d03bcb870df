"""A task written outside vlrl: "what color is the largest shape?" — the worked example of
docs/custom_task.md. Load it by path: task.name=docs/examples/largest_color.py:LargestColor."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from data_prep.files import write_records_atomic
from data_prep.shapes import SceneSpec, make_scene
from rewards.format import think_answer
from rewards.text import answer_text
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.tasking.task import RewardFn, Task

QUESTION = "What color is the largest shape in the image?"


def color_match(completion: str, color: str) -> float:
    """1 if the <answer> names the color (case and surrounding spaces ignored)."""
    answer = answer_text(completion)
    return 1.0 if answer is not None and answer.strip().lower() == color else 0.0


@dataclass
class LargestColorOptions:
    template: str = "{question} Think in <think> </think>, then answer with one color word in <answer> </answer>."


class LargestColor(Task):
    name = "largest_color"
    description = "Name the color of the largest shape (docs example)"
    Options = LargestColorOptions
    option_templates = {"template": ("question",)}  # a misspelt {placeholder} is a config error
    default_rewards = {"format": 0.5, "color": 1.0}
    data_suffix = ".jsonl"
    states_coordinates = False  # its answers are color words: `vlrl score` says nothing of coordinate frames

    # Data: one JSON object per line, {"image": "images/0.png", "answer": "red"}.
    def build_sample(self, record: dict[str, Any], ctx: RecordContext) -> Sample:
        image = ctx.get(record, "image", str, "an image path")
        answer = ctx.get(record, "answer", str, "the color word").strip().lower()
        path, width, height = ctx.image(image)
        return Sample(
            id=ctx.record_id(record),
            task=self.name,
            problem=QUESTION,
            solution=answer,
            images=[path],
            frame=ctx.frame_spec.frame(width, height),
            source=ctx.source,
        )

    def synthesize(self, path: str | Path, size: int, seed: int) -> None:
        path = Path(path)
        (path.parent / "images").mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(seed)
        records: list[dict[str, str]] = []
        while len(records) < size:
            scene = make_scene(SceneSpec(min_objects=2, max_objects=3, sizes=("small", "large")), rng)
            areas = sorted(((o.box[2] - o.box[0]) * (o.box[3] - o.box[1]), o.color) for o in scene.objects)
            if len(areas) < 2 or areas[-1][0] == areas[-2][0]:
                continue  # no single largest shape
            image = f"images/{path.stem}_{len(records):05d}.png"
            scene.image.save(path.parent / image)
            records.append({"image": image, "answer": areas[-1][1]})
        write_records_atomic(path, records)  # .jsonl: one per line; .json: a list

    def messages(self, sample: Sample) -> list[dict[str, Any]]:
        text = self.options.template.format(question=sample.problem)
        return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]

    def target(self, sample: Sample) -> str:
        return f"<think>The largest shape is {sample.solution}.</think><answer>{sample.solution}</answer>"

    def reward_functions(self) -> dict[str, RewardFn]:
        return {
            "format": lambda completions, samples: [think_answer(c) for c in completions],
            "color": lambda completions, samples: [
                color_match(c, s.solution) for c, s in zip(completions, samples, strict=False)
            ],
        }

    def predict(self, completion: str, sample: Sample) -> str | None:
        answer = answer_text(completion)
        return None if answer is None else answer.strip().lower()

    def metrics(self, samples: Sequence[Sample], completions: Sequence[str]) -> dict[str, float]:
        n = len(samples)
        return {
            "accuracy": sum(color_match(c, s.solution) for c, s in zip(completions, samples, strict=False)) / n,
            "format_rate": sum(think_answer(c) for c in completions) / n,
        }
