"""Writing data files whole or not at all, in the format their name says."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

RECORD_FORMATS = {".json": "a JSON list of records", ".jsonl": "JSON Lines, one record per line"}


def write_text_atomic(path: Path, text: str) -> None:
    """Write through a temporary file and rename it, so that a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write_json_atomic(path: Path, data: object) -> None:
    write_text_atomic(path, json.dumps(data, indent=1, ensure_ascii=False) + "\n")


def write_records_atomic(path: Path, records: Sequence[dict]) -> None:
    """Records as the file name says: a JSON list for .json, one object per line for .jsonl
    (what every reader of vlrl expects of that name)."""
    if path.suffix == ".jsonl":
        write_text_atomic(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    elif path.suffix == ".json":
        write_json_atomic(path, list(records))
    else:
        formats = "; ".join(f"{suffix}: {what}" for suffix, what in RECORD_FORMATS.items())
        raise ValueError(f"{path}: a data file's name ends in .json or .jsonl ({formats})")
