"""Public benchmarks as evaluation-only tasks, one module per benchmark family, each with a
table of its published variants (`BENCHMARKS`: task name -> class, registered as one entry of
the group `vlrl.tasks` in pyproject.toml), named as lmms-eval names them (or, for Video-R1's
evaluator, `video_r1_<benchmark>`)."""

from collections.abc import Callable
from typing import Any

# The lmms-eval the benchmarks follow: its commit, and the PyPI release holding the same task code.
LMMS_EVAL = "lmms-eval 75571cf (0.7.3)"


def lettered(options: list[str]) -> str:
    """Options as lmms-eval's multiple-choice prompts write them: "A. first", a line each."""
    return "\n".join(f"{chr(ord('A') + i)}. {option}" for i, option in enumerate(options))


def share_where(key: str, value: Any) -> Callable[[list[dict[str, Any]]], float]:
    """The aggregation lmms-eval's per-category metrics share (3DSRBench, ViewSpatial, OmniSpatial):
    the mean `score` of the items whose `key` is `value`, 0 where there are none."""

    def share(items: list[dict[str, Any]]) -> float:
        scores = [item["score"] for item in items if item[key] == value]
        return sum(scores) / len(scores) if scores else 0.0

    return share
