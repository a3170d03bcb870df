"""Reading task data files: records with their file and line, bad records reported, not fatal.

A record that cannot become a Sample raises RecordError naming the place and the problem;
`load_split` skips it (counting and keeping the reason) unless `strict` is set.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PIL import UnidentifiedImageError

from vlrl.data.sample import Sample
from vlrl.vision.frames import Frame, FrameKind
from vlrl.vision.images import DEFAULT_MAX_IMAGE_PIXELS, ImageTooLarge, image_size


class RecordError(ValueError):
    """A data record that cannot be used; `source` is "file:line"."""

    def __init__(self, source: str, message: str):
        super().__init__(f"{source}: {message}")
        self.source = source
        self.message = message


@dataclass(frozen=True)
class FrameSpec:
    """How to build a sample's Frame: the model's coordinate frame, resize limits and resize
    factor (its family's patch x merge size). The defaults are Qwen2.5-VL's."""

    kind: FrameKind = "absolute"
    min_pixels: int = 3136
    max_pixels: int = 12845056
    factor: int = 28

    def frame(self, width: int, height: int) -> Frame:
        return Frame.for_image(self.kind, width, height, self.min_pixels, self.max_pixels, self.factor)


@dataclass(frozen=True)
class MediaRules:
    """Which files a record may name and how large an image may be. Files stay inside the data
    root (data.image_root, else the data file's folder) unless `allow_outside_root`: a dataset
    from elsewhere must not make a run read /etc or a home directory through `../` or a link."""

    allow_outside_root: bool = False
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS
    written_here: tuple[Path, ...] = ()  # folders vlrl fills itself (the embedded-image cache): allowed too


@dataclass
class RecordContext:
    """What a task needs to turn one record into a Sample."""

    source: str  # "file:line"
    index: int  # 0-based position of the record in its file
    image_root: Path
    frame_spec: FrameSpec
    require_images: bool = True
    media: MediaRules = MediaRules()
    # Keys whose table column is declared float32 (vlrl.data.tables.float32_keys): where a task
    # writes a derived value back as its reference does, it is rounded to float32 there too.
    float32: frozenset[str] = frozenset()

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
        """A file the record names (relative to image_root, or absolute). When files are to be read,
        one outside the data root (links followed) is refused unless media.allow_outside_root."""
        path = Path(relative)
        full = path if path.is_absolute() else self.image_root / path
        if self.require_images and not self.media.allow_outside_root:
            root = self.image_root.resolve()
            target = full.resolve()
            if not any(target.is_relative_to(r) for r in (root, *self.media.written_here)):
                raise self.error(
                    f"path {relative!r} leads outside the data root {root}; set data.allow_outside_root=true "
                    "if the dataset really keeps its files elsewhere"
                )
        return full

    def image(self, relative: str) -> tuple[str, int, int]:
        """(path, width, height) of an image the record names; checks that its header can be read
        and that it is within media.max_image_pixels."""
        path = self.resolve(relative)
        if not path.is_file():
            raise self.error(f"image not found: {path}")
        try:
            width, height = image_size(path, self.media.max_image_pixels)
        except ImageTooLarge as err:
            raise self.error(f"{err} (data.max_image_pixels)") from err
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


def read_data_text(path: str | Path) -> str:
    """A data file's text; a binary file (a NUL byte) or one that is not UTF-8 is refused by
    position, a byte-order mark dropped."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"data file not found: {path}" + (" (it is a directory)" if path.is_dir() else ""))
    data = path.read_bytes()
    if b"\0" in data:
        line = data.count(b"\n", 0, data.index(b"\0")) + 1
        raise RecordError(f"{path}:{line}", "not a text file (it holds a NUL byte); expected JSON or JSON Lines")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise RecordError(
            f"{path}:{line}", f"not UTF-8 text (byte {err.start} of the file); expected JSON or JSON Lines"
        ) from err
    return text.removeprefix("\ufeff")


def read_records(path: str | Path) -> Iterator[tuple[str, int, dict[str, Any] | RecordError]]:
    """(source, index, record-or-error) for each record of a .jsonl file or a .json list of
    records. A file that cannot hold records at all (binary, not UTF-8, empty, not a list) is
    refused here, before any record is read."""
    path = Path(path)
    text = read_data_text(path)
    if path.suffix == ".jsonl":
        return _json_lines(path, text)
    return _json_list(path, text, _list_start(path, text))


def _json_lines(path: Path, text: str) -> Iterator[tuple[str, int, dict[str, Any] | RecordError]]:
    index = 0
    # JSON Lines end at "\n" only: str.splitlines() also splits at characters that JSON
    # allows raw inside strings (U+2028, U+2029, U+0085, \x1c-\x1e, \v, \f).
    for lineno, line in enumerate(text.split("\n"), start=1):
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


def _list_start(path: Path, text: str) -> int:
    """Position just inside the top-level '['."""
    pos = _skip_ws(text, 0)
    if pos >= len(text):
        raise RecordError(f"{path}:1", "the file is empty; expected a JSON list of records")
    if text[pos] != "[":
        found = "a JSON object" if text[pos] == "{" else repr(text[pos : pos + 20])
        raise RecordError(
            f"{path}:{text.count(chr(10), 0, pos) + 1}",
            f"expected a JSON list of records, found {found} (for one record per line, name the file .jsonl)",
        )
    return pos + 1


def _json_list(path: Path, text: str, pos: int) -> Iterator[tuple[str, int, dict[str, Any] | RecordError]]:
    """Records of a top-level JSON list, each with the line it starts on. A malformed record is
    reported and skipped: reading resumes at the next record, so none after it is lost. Only a
    record that never closes (unbalanced brackets to the end) leaves nowhere to resume: it ends
    the list, reported with the lines that could not be read."""
    decoder = json.JSONDecoder()
    pos = _skip_ws(text, pos)
    line, counted = 1, 0
    index = 0
    if pos < len(text) and text[pos] == "]":
        return
    while True:
        line += text.count("\n", counted, pos)
        counted = pos
        source = f"{path}:{line}"
        try:
            record, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as err:
            end = _record_end(text, pos)
            if end is None:
                raise RecordError(
                    source,
                    f"invalid JSON: {err.msg} (line {err.lineno}, column {err.colno}); the record never closes, so "
                    f"lines {line}-{text.count(chr(10)) + 1} could not be read",
                ) from err
            yield source, index, RecordError(source, f"invalid JSON: {err.msg} (line {err.lineno}, column {err.colno})")
        else:
            if isinstance(record, dict):
                yield source, index, record
            else:
                yield source, index, RecordError(source, f"record must be a JSON object, got {type(record).__name__}")
        index += 1
        pos = _skip_ws(text, end)
        if pos < len(text) and text[pos] == ",":
            pos = _skip_ws(text, pos + 1)
            continue
        if pos < len(text) and text[pos] == "]":
            rest = _skip_ws(text, pos + 1)
            if rest < len(text):
                where = f"{path}:{text.count(chr(10), 0, rest) + 1}"
                yield where, index, RecordError(where, "text after the list's closing ']' was ignored")
            return
        where = f"{path}:{text.count(chr(10), 0, pos) + 1}"
        if pos >= len(text):
            raise RecordError(where, "the list never closes (no ']'): the file is cut short")
        # Neither ',' nor ']' after a record: skip to the next record, reporting what was skipped.
        end = _record_end(text, pos)
        if end is None:
            raise RecordError(where, "expected ',' or ']' after a record; the list cannot be read past this point")
        yield (
            where,
            index,
            RecordError(where, "expected ',' or ']' after a record; the text up to the next record was skipped"),
        )
        index += 1
        pos = end
        if text[pos] == "]":
            return
        pos = _skip_ws(text, pos + 1)
        counted = 0
        line = 1


_TOKENS = re.compile(r'"(?:[^"\\\n]|\\.)*"|[\[\]{},]')


def _record_end(text: str, pos: int) -> int | None:
    """Where the list element starting at `pos` ends: the position of the ',' or ']' that follows
    it at the list's depth (strings skipped, a string never spans lines); None if there is none."""
    depth = 0
    for token in _TOKENS.finditer(text, pos):
        kind = token.group()
        if kind in "[{":
            depth += 1
        elif kind in "]}":
            if depth == 0 and kind == "]":
                return token.start()
            depth = max(0, depth - 1)
        elif kind == "," and depth == 0:
            return token.start()
    return None


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
    media: MediaRules = MediaRules(),
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
            ctx = RecordContext(source, index, root, frame_spec, require_images, media)
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
