"""Public benchmarks as evaluation-only tasks, one module per benchmark family, each with a
table of its published variants (`BENCHMARKS`: task name -> class), named as lmms-eval names
them (or, for Video-R1's evaluator, `video_r1_<benchmark>`)."""

from __future__ import annotations

import importlib

FAMILIES = (
    "tasks.benchmarks.refcoco",
    "tasks.benchmarks.counting",
    "tasks.benchmarks.screenspot",
    "tasks.benchmarks.video_r1",
)


def benchmark_classes() -> dict[str, type]:
    """Every benchmark by task name (imports the family modules)."""
    out: dict[str, type] = {}
    for module in FAMILIES:
        out.update(importlib.import_module(module).BENCHMARKS)
    return out
