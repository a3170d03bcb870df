"""`vlrl eval --compare A B`: two eval outputs metric by metric, and the settings that differ.

A difference between two results says something about the models only when everything else
that decides the numbers was the same: the data, how images are sized, how long and how
greedily answers are generated, the task's variant and reward weights (each task's own, as
it ran: a mixture's entry's), the reasoning a benchmark's scoring stripped. Those settings are read from each results.json and every one
that differs is named.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.table import Table

from vlrl.config import dotted
from vlrl.eval.layout import read_metrics, read_results

# Config keys (and key prefixes, ending in ".") that decide an eval's numbers besides the model.
SETTINGS = (
    "model.dtype",
    "model.attn_implementation",
    "model.coord_frame",
    "model.min_pixels",
    "model.max_pixels",
    "model.video.",
    "data.image_root",
    "data.limit",
    "eval.temperature",
    "eval.top_p",
    "eval.lmms_eval_model",
    "eval.image_pixels",
    "eval.repetition_penalty",
)


def settings(results: dict[str, Any]) -> dict[str, Any]:
    """The settings behind one results.json, by name."""
    config = dotted(results.get("config", {}))
    out = {
        key: value
        for key, value in config.items()
        if any(key == s or (key.startswith(s) and s.endswith(".")) for s in SETTINGS)
    }
    # eval.max_new_tokens 0 means rollout.max_new_tokens: compare what generation used.
    out["max new tokens"] = config.get("eval.max_new_tokens") or config.get("rollout.max_new_tokens")
    if config.get("eval.temperature", 0.0) > 0:
        out["sampling seed (trainer.seed)"] = config.get("trainer.seed")
    for task, config in results.get("configs", {}).items():  # what each task ran with (a mixture's entry's)
        out[f"{task}: data"] = config.get("data")
        out |= {f"{task}: options.{key}": value for key, value in dotted(config.get("options") or {}).items()}
        out[f"{task}: rewards"] = config.get("rewards")
        if "reasoning_tags" in config:  # a benchmark's: what was stripped before scoring (None: nothing)
            out[f"{task}: reasoning_tags"] = config["reasoning_tags"]
    for task, count in results.get("n-samples", {}).items():
        out[f"{task}: samples"] = count.get("effective") if isinstance(count, dict) else count
    return out


def setting_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """'key: A's value vs B's value' for every setting that differs."""
    sa, sb = settings(a), settings(b)
    keys = sorted(sa.keys() | sb.keys())
    return [f"{key}: {sa.get(key, '-')} vs {sb.get(key, '-')}" for key in keys if sa.get(key) != sb.get(key)]


def compare(dir_a: Path, dir_b: Path) -> tuple[Table, list[str]]:
    """Metric by metric: A, B and B - A, for every task in either results.json; and the
    settings that differ between the two."""
    results_a, results_b = read_results(dir_a), read_results(dir_b)
    a, b = read_metrics(dir_a), read_metrics(dir_b)
    table = Table(title=f"{dir_a} (A) vs {dir_b} (B)")
    for column in ("task", "metric", "A", "B", "B - A"):
        table.add_column(column, justify="left" if column in ("task", "metric") else "right")
    for task in sorted(set(a) | set(b)):
        metrics = sorted(set(a.get(task, {})) | set(b.get(task, {})))
        for metric in metrics:
            va, vb = a.get(task, {}).get(metric), b.get(task, {}).get(metric)
            diff = f"{vb - va:+.4f}" if va is not None and vb is not None else "-"
            table.add_row(task, metric, "-" if va is None else f"{va:.4f}", "-" if vb is None else f"{vb:.4f}", diff)
    return table, setting_differences(results_a, results_b)
