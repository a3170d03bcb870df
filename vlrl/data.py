"""Reading task data files: records with their file and line, bad records reported, not fatal.

A record that cannot become a Sample raises RecordError naming the place and the problem;
`load_split` skips it (counting and keeping the reason) unless `strict` is set.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import Image, UnidentifiedImageError

from vlrl.sample import Sample
from vlrl.vision.frames import Frame, FrameKind


class RecordError(ValueError):
    """A data record that cannot be used; `source` is "file:line"."""

    def __init__(self, source: str, message: str):
        super().__init__(f"{source}: {message}")
        self.source = source
        self.message = message


@dataclass(frozen=True)
class FrameSpec:
    """How to build a sample's Frame: the model's coordinate frame and its resize limits."""

    kind: FrameKind = "absolute"
    min_pixels: int = 3136
    max_pixels: int = 12845056

    def frame(self, width: int, height: int) -> Frame:
        return Frame.for_image(self.kind, width, height, self.min_pixels, self.max_pixels)


@dataclass
class RecordContext:
    """What a task needs to turn one record into a Sample."""

    source: str  # "file:line"
    index: int  # 0-based position of the record in its file
    image_root: Path
    frame_spec: FrameSpec
    require_images: bool = True

    def error(self, message: str) -> RecordError:
        return RecordError(self.source, message)

    def get(self, record: dict[str, Any], key: str, expected: type | tuple[type, ...], what: str) -> Any:
        """record[key], checked to be of type `expected` (`what` says it in words)."""
        if key not in record:
            raise self.error(f"missing key '{key}' (expected {what})")
        value = record[key]
        if isinstance(value, bool) or not isinstance(value, expected):
            raise self.error(f"key '{key}' must be {what}, got {type(value).__name__} {_short(value)}")
        return value

    def record_id(self, record: dict[str, Any]) -> str:
        """The record's `id`, or its 0-based position in the file when it has none."""
        value = record.get("id")
        return str(self.index) if value is None else str(value)

    def resolve(self, relative: str) -> Path:
        """A file the record names: an absolute path, or one under image_root."""
        path = Path(relative)
        return path if path.is_absolute() else self.image_root / path

    def image(self, relative: str) -> tuple[str, int, int]:
        """(absolute path, width, height) of an image the record names; checks it can be read."""
        path = self.resolve(relative)
        if not path.is_file():
            raise self.error(f"image not found: {path}")
        try:
            with Image.open(path) as im:
                width, height = im.size
        except (UnidentifiedImageError, OSError) as err:
            raise self.error(f"image unreadable: {path} ({err})") from err
        return str(path), width, height

    def image_with_size(self, relative: str, record: dict[str, Any]) -> tuple[str, int, int]:
        """Like `image`; only when images are not required and the file is absent does the
        record's width/height (when present) stand in for the file's."""
        stated = isinstance(record.get("width"), int) and isinstance(record.get("height"), int)
        if not self.require_images and stated and not self.resolve(relative).is_file():
            return str(self.resolve(relative)), record["width"], record["height"]
        return self.image(relative)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def read_records(path: str | Path) -> Iterator[tuple[str, int, dict[str, Any] | RecordError]]:
    """Yield (source, index, record-or-error) for a .jsonl file or a .json list of records."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"data file not found: {path}")
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        index = 0
        for lineno, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            source = f"{path}:{lineno}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                yield source, index, RecordError(source, f"invalid JSON: {err.msg} (column {err.colno})")
            else:
                if isinstance(record, dict):
                    yield source, index, record
                else:
                    yield source, index, RecordError(source, f"record must be a JSON object, got {type(record).__name__}")
            index += 1
        return
    yield from _read_json_array(path, text)


def _read_json_array(path: Path, text: str) -> Iterator[tuple[str, int, dict[str, Any] | RecordError]]:
    """Records of a top-level JSON list, each with the line it starts on."""
    decoder = json.JSONDecoder()
    pos = _skip_ws(text, 0)
    if pos >= len(text) or text[pos] != "[":
        raise ValueError(f"{path}:1: expected a JSON list of records (or use .jsonl, one record per line)")
    pos = _skip_ws(text, pos + 1)
    line, counted = 1, 0
    index = 0
    if pos < len(text) and text[pos] == "]":
        return
    while True:
        line += text.count("\n", counted, pos)
        counted = pos
        source = f"{path}:{line}"
        try:
            record, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as err:
            # A broken element leaves no safe place to resume: the rest of the file is unreadable.
            raise RecordError(f"{path}:{err.lineno}", f"invalid JSON: {err.msg} (column {err.colno})") from err
        if isinstance(record, dict):
            yield source, index, record
        else:
            yield source, index, RecordError(source, f"record must be a JSON object, got {type(record).__name__}")
        index += 1
        pos = _skip_ws(text, pos)
        if pos < len(text) and text[pos] == ",":
            pos = _skip_ws(text, pos + 1)
            continue
        if pos < len(text) and text[pos] == "]":
            return
        line += text.count("\n", counted, pos)
        raise RecordError(f"{path}:{line}", "expected ',' or ']' after a record")


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


@dataclass
class Split:
    """The usable samples of one data file and the records that were skipped, with reasons."""

    path: str
    samples: list[Sample] = field(default_factory=list)
    errors: list[RecordError] = field(default_factory=list)


def load_split(
    path: str | Path,
    build_sample: Callable[[dict[str, Any], RecordContext], Sample],
    frame_spec: FrameSpec,
    image_root: str | Path = "",
    strict: bool = False,
    limit: int = 0,
    require_images: bool = True,
) -> Split:
    """Read a data file into Samples; bad records are skipped and kept in `errors` (or raised if strict)."""
    path = Path(path)
    root = Path(image_root) if image_root else path.parent
    split = Split(str(path))
    records = read_records(path)
    while not (limit and len(split.samples) >= limit):
        try:
            source, index, item = next(records)
        except StopIteration:
            break
        except RecordError as err:  # the file breaks off mid-list: keep what was read
            if strict:
                raise
            split.errors.append(err)
            break
        try:
            if isinstance(item, RecordError):
                raise item
            ctx = RecordContext(source, index, root, frame_spec, require_images)
            split.samples.append(build_sample(item, ctx))
        except RecordError as err:
            if strict:
                raise
            split.errors.append(err)
        except (TypeError, ValueError, KeyError, IndexError) as err:
            # A value of a shape the task did not foresee is still this record's problem.
            wrapped = RecordError(source, f"{type(err).__name__}: {err}")
            if strict:
                raise wrapped from err
            split.errors.append(wrapped)
    return split
