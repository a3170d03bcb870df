"""The run directory's logs: metrics.jsonl (one line per step), samples.jsonl, a progress bar."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN; a null says "not a number" without breaking readers
    return value


class JsonlLog:
    """Append-only JSON lines, flushed per line so a killed run keeps what it logged. The file is
    created by the first line written."""

    def __init__(self, path: Path):
        self.path = path
        self._handle = None

    def write(self, record: dict[str, Any]) -> None:
        if self._handle is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = open(self.path, "a", encoding="utf-8")
        self._handle.write(json.dumps({k: _clean(v) for k, v in record.items()}) + "\n")
        self._handle.flush()

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()


class NullLog(JsonlLog):
    """The logs of a process other than 0 in data-parallel training: process 0 writes them."""

    def __init__(self) -> None:
        pass

    def write(self, record: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


def drop_steps_after(path: Path, step: int) -> list[str]:
    """Forget lines logged after `step` (a resumed run logs those steps again) and lines that are
    not whole JSON records (a run killed mid-write, or a full disk, leaves a torn last line).
    Returns one "file:line: ..." report per torn line dropped."""
    if not path.is_file():
        return []
    kept, torn = [], []
    # JSON lines end at "\n" only: str.splitlines() would also split at characters that JSON
    # allows raw inside strings (U+2028, \x1c, ...).
    for lineno, line in enumerate(path.read_text(encoding="utf-8", errors="replace").split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if not isinstance(record, dict):
            torn.append(f"{path}:{lineno}: dropped a line that is not a whole JSON record (torn by a stop mid-write?)")
            continue
        if record.get("step", 0) <= step:
            kept.append(line)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
    tmp.replace(path)  # a stop during the repair leaves the old file, never half of it
    return torn


def progress_bar(console: Console, enabled: bool) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        disable=not enabled,
    )
