"""lmms-eval's output layout, so that tools that read lmms-eval's output read vlrl's.

`results.json` holds what lmms-eval's `<date>_results.json` holds: `results` (per task
`alias` and `<metric>,none` with its `<metric>_stderr,none`, "N/A" here: no bootstrap),
`configs` (per task: its name, data, split, reference and options, and for a benchmark the
coordinate convention its prompt used), `versions`, `n-shot`, `group_subtasks`, `n-samples`
({"original", "effective"}: rows read, samples evaluated), `model_name`,
`total_evaluation_time_seconds`, plus vlrl's own: the run's `config`, `environment`
(package versions), `date`, `samples_per_second` and `skipped` (the first reasons records
were skipped). `samples_<task>.jsonl` holds what lmms-eval's `<date>_samples_<task>.jsonl`
holds, one line per sample: `doc_id`, `target` (as a string: a benchmark's doc_to_target of the
row, a task's solution), `filtered_resps` (what was
scored: a benchmark's response with its reasoning and whitespace stripped, a task's parsed
prediction), `resps` (the raw response, only when it differs, as lmms-eval drops it), `input`
(the prompt text) and the sample's per-metric values (a benchmark's, by metric name), plus
vlrl's `id` and, for a task with rewards, `rewards` and `reward`. `configs.<task>.reasoning_tags`
records the tags a benchmark's responses were stripped of (null: none).
"""

from __future__ import annotations

import json
import os
import platform
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

import vlrl
from vlrl.config import Config, ConfigError, to_dict


@dataclass
class TaskResult:
    task: str
    split: str
    metrics: dict[str, float]
    records: list[dict[str, Any]]
    seconds: float
    config: dict[str, Any] = field(default_factory=dict)  # what results.json records of the task's run
    skipped: list[str] = field(default_factory=list)  # "file:line: reason" of the data that could not be evaluated
    notes: list[str] = field(default_factory=list)  # what was left out of the task's metrics, and why

    @property
    def samples_per_second(self) -> float:
        return len(self.records) / self.seconds if self.seconds > 0 else 0.0


FILTER = "none"  # lmms-eval's filter name for an unfiltered response
SKIPPED_SHOWN = 20  # reasons kept per task in results.json


def environment() -> dict[str, str]:
    import transformers

    return {"vlrl": vlrl.__version__, "torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version()}  # fmt: skip


def task_results(metrics: dict[str, float], task: str) -> dict[str, Any]:
    out: dict[str, Any] = {"alias": task}
    for name, value in metrics.items():
        out[f"{name},{FILTER}"] = value
        out[f"{name}_stderr,{FILTER}"] = "N/A"
    return out


def samples_line(record: dict[str, Any]) -> dict[str, Any]:
    """lmms-eval's saved sample (loggers/evaluation_tracker.py save_results_samples): one-element
    lists unwrapped, `resps` (the raw response) dropped when it equals `filtered_resps` (what was
    scored: the filter and the reasoning strip left it unchanged), `target` as a string."""
    line = dict(record)
    for key in ("resps", "filtered_resps"):
        value = line[key]
        line[key] = value[0] if isinstance(value, list) and len(value) == 1 else value
    if line["resps"] == line["filtered_resps"]:
        del line["resps"]
    line["target"] = str(line["target"])
    return line


def write_outputs(out_dir: Path, results: list[TaskResult], model: str, cfg: Config) -> Path:
    """The results and samples files of `results` in `out_dir`. results.json is written last and
    any earlier one removed first, so a results.json found there always describes the samples
    files beside it, even after a kill mid-write; the samples files of an earlier evaluation's
    tasks that this one left out are removed with it (lmms-eval dates its files instead)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    replaced = set(_tasks_of(out_dir / "results.json")) - {r.task for r in results}
    (out_dir / "results.json").unlink(missing_ok=True)
    for task in replaced:
        samples_path(out_dir, task).unlink(missing_ok=True)
    for r in results:
        _write_whole(
            samples_path(out_dir, r.task),
            "".join(json.dumps(samples_line(record), default=str, ensure_ascii=False) + "\n" for record in r.records),
        )
    summary = {
        "results": {r.task: task_results(r.metrics, r.task) for r in results},
        "group_subtasks": {r.task: [] for r in results},
        "configs": {r.task: r.config for r in results},
        "versions": {r.task: vlrl.__version__ for r in results},
        "n-shot": {r.task: 0 for r in results},
        "n-samples": {
            r.task: {"original": len(r.records) + len(r.skipped), "effective": len(r.records)} for r in results
        },
        "model_name": model,
        "total_evaluation_time_seconds": str(round(sum(r.seconds for r in results), 3)),
        "config": to_dict(cfg),
        "environment": environment(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "samples_per_second": {r.task: round(r.samples_per_second, 3) for r in results},
        "skipped": {r.task: r.skipped[:SKIPPED_SHOWN] for r in results if r.skipped},
    }
    _write_whole(out_dir / "results.json", json.dumps(summary, indent=1, default=str) + "\n")
    return out_dir / "results.json"


def _write_whole(path: Path, text: str) -> None:
    """`text` as `path`, replaced whole: a kill mid-write leaves no torn file."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)


def _tasks_of(results_file: Path) -> list[str]:
    """The tasks an earlier evaluation's results.json names, those whose samples file would lie
    in its folder (the file may come from elsewhere); none where it is not one."""
    try:
        results = json.loads(results_file.read_text(encoding="utf-8")).get("results")
    except (OSError, ValueError, UnicodeDecodeError, RecursionError, AttributeError):
        return []
    if not isinstance(results, dict):
        return []
    return [task for task in results if isinstance(task, str) and not {"/", "\\", "\0"} & set(task)]


def samples_path(out_dir: Path, task: str) -> Path:
    return out_dir / f"samples_{task}.jsonl"


def samples_file_task(path: str | Path) -> str | None:
    """The task a samples file is named for: vlrl eval's samples_<task>.jsonl, lmms-eval's
    <date>_samples_<task>.jsonl (evaluation_tracker.py); None for another name."""
    named = re.search(r"(?:^|_)samples_(.+?)\.jsonl$", Path(path).name)
    return named.group(1) if named else None


def read_results(out_dir: Path) -> dict[str, Any]:
    """An output directory's results.json (lmms-eval's or vlrl's; the file itself may be given)
    as data; one that is not (torn, or not an evaluation's) is a ConfigError naming it."""
    path = out_dir if out_dir.is_file() else out_dir / "results.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: is {out_dir} the output directory of vlrl eval?")
    try:
        results = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as err:
        raise ConfigError(f"{path} is not readable JSON ({err})") from err
    if not isinstance(results, dict) or not isinstance(results.get("results"), dict):
        raise ConfigError(f"{path} holds no 'results' mapping of task -> metrics, as an evaluation writes")
    return results


def read_metrics(out_dir: Path) -> dict[str, dict[str, float]]:
    """Task -> metric -> value of a results.json (lmms-eval's or vlrl's), errors left out. A
    metric is named alone under lmms-eval's filter `none` (vlrl's only one), else as lmms-eval
    writes it, `metric,filter`: one metric under two filters is two values."""
    out: dict[str, dict[str, float]] = {}
    for task, values in read_results(out_dir)["results"].items():
        if not isinstance(values, dict):
            continue
        out[task] = {}
        for key, value in values.items():
            metric, comma, kept_by = key.rpartition(",")
            if comma and "_stderr" not in metric and isinstance(value, (int, float)):
                out[task][metric if kept_by == "none" else key] = value
    return out
