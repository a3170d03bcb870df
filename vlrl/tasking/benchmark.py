"""Evaluation-only tasks: public benchmarks, read as published and scored as their reference
evaluation scores them.

A Benchmark is a Task without rewards (`eval_only`): training on one is refused. Scoring
keeps lmms-eval's shape, so that each step can be compared with it: `process` turns one
response into the per-sample values lmms-eval's `process_results` returns, by metric name,
and `aggregations` turn each metric's list of values into the number its aggregation
function reports. The harness logs each sample's values in the samples file and reports the
metrics under the reference's names.

Where a benchmark's prompt states a coordinate convention, `task.options.coords` picks it:
`lmms_eval` (the reference prompt, numbers read as the reference reads them) or `model`
(the model's own frame, vlrl.models.loading.frame_kind: Qwen2.5-VL pixels of the resized image,
Qwen2-VL / Qwen3-VL 0-1000; predictions are mapped back before the reference's scoring).
The results file records the convention used (`describe`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from vlrl.config import ConfigError
from vlrl.data.sample import Sample
from vlrl.tasking.task import RewardFn, Task
from vlrl.vision.frames import FrameKind

Coords = Literal["lmms_eval", "model"]
# What the model is asked to write, by convention: recorded in the results file.
CONVENTIONS = {
    "lmms_eval": "the reference prompt's convention (lmms-eval: floats normalized to [0, 1])",
    "absolute": "pixels of the smart-resized image (Qwen2.5-VL)",
    "norm1000": "0-1000 normalized (Qwen2-VL, Qwen3-VL)",
    "original": "pixels of the original image",
}


@dataclass
class CoordsOptions:
    coords: Coords = "lmms_eval"  # the reference prompt, or the model's own coordinate frame


class Benchmark(Task):
    eval_only = True
    dataset: ClassVar[str] = ""  # where it is published (a Hugging Face dataset id, or a file)
    reference: ClassVar[str] = ""  # the evaluation its prompt, parsing and metrics follow (file @ commit)

    def reward_functions(self) -> dict[str, RewardFn]:
        return {}

    def target(self, sample: Sample) -> str:
        raise ConfigError(f"task {self.name!r} is an evaluation-only benchmark: it has no training targets")

    def predict(self, completion: str, sample: Sample) -> str:
        """The response as the reference's filter leaves it (lmms-eval's "none": unchanged)."""
        return completion

    # -- scoring, as lmms-eval's process_results and aggregation functions --------------------
    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        """Per-sample values by metric name (what the samples file logs)."""
        raise NotImplementedError

    def aggregations(self) -> dict[str, Callable[[list[Any]], float]]:
        """Metric name -> the function of its per-sample values that the results report."""
        raise NotImplementedError

    def metrics(self, samples: Sequence[Sample], completions: Sequence[str]) -> dict[str, float]:
        if not samples:
            return {}
        processed = [self.process(c, s) for c, s in zip(completions, samples, strict=True)]
        return {name: fn([p[name] for p in processed]) for name, fn in self.aggregations().items()}

    def describe(self, frame: FrameKind) -> dict[str, Any]:
        """What the results file records about the run of this benchmark."""
        out = {"dataset": self.dataset, "split": self.split, "reference": self.reference}
        coords = getattr(self.options, "coords", None)
        if coords is not None:
            out["coords"] = CONVENTIONS["lmms_eval" if coords == "lmms_eval" else frame]
        return out


def variants(base: type[Benchmark], rows: Sequence[dict[str, Any]]) -> dict[str, type[Benchmark]]:
    """One class per row of a family's table (name, split, dataset...): benchmarks that differ
    only in those fields share every line of code."""
    return {row["name"]: type(row["name"], (base,), dict(row)) for row in rows}


def mean(values: Sequence[float]) -> float:
    """lmms-eval's `mean` aggregation."""
    return sum(values) / len(values)
