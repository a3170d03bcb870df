"""Reading task data files: records with their file and line, bad records reported, not fatal.

A record that cannot become a Sample raises RecordError naming the place and the problem;
`load_split` skips it (counting and keeping the reason) unless `strict` is set. In a JSON
list, a malformed element costs only itself, also one whose brackets never balance (cut off,
a missing '}'): reading resumes at the next record (`_json_list`), and a file where that
cannot be done safely is refused, never cut short in silence.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

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
    then_within: tuple[int, int] | None = None  # EasyR1's resize: its processor's limits (model.image_resize)

    def frame(self, width: int, height: int) -> Frame:
        return Frame.for_image(
            self.kind, width, height, self.min_pixels, self.max_pixels, self.factor, self.then_within
        )


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
        if isinstance(value, str) and not value.isascii():
            try:  # JSON's "\ud800" reads as a lone surrogate, which no tokenizer takes
                value.encode("utf-8")
            except UnicodeEncodeError as err:
                raise self.error(f"key '{key}' holds {value[err.start]!r}, half of a UTF-16 pair: not text") from None
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
        record's width/height (when present, whole and positive) stand in for the file's."""
        stated = all(type(record.get(key)) is int and record[key] > 0 for key in ("width", "height"))
        if not self.require_images and stated and not self.resolve(relative).is_file():
            return str(self.resolve(relative)), record["width"], record["height"]
        return self.image(relative)

    def image_as_stated(self, relative: str, record: dict[str, Any]) -> tuple[str, int, int]:
        """Like `image_with_size`, and a width/height the record states must be the image's."""
        path, width, height = self.image_with_size(relative, record)
        for key, actual in (("width", width), ("height", height)):
            if record.get(key) is not None and record[key] != actual:
                raise self.error(f"key '{key}' says {record[key]!r} but image {path} has {key} {actual}")
        return path, width, height


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def read_data_text(path: str | Path) -> str:
    """A data file's text; a binary file (a NUL byte) or one that is not UTF-8 is refused by
    position, a byte-order mark dropped."""
    data = _data_bytes(path)
    _refuse_unless_text(path, data)
    return data.decode("utf-8").removeprefix("\ufeff")


def _refuse_unless_text(path: str | Path, data: bytes) -> None:
    """A RecordError at the file's first byte that is not text (`_not_text`), by line."""
    problem = _not_text(data, "file")
    if problem:
        offset, message = problem
        line = data.count(b"\n", 0, offset) + 1
        raise RecordError(f"{path}:{line}", f"{message}; expected JSON or JSON Lines")


def _data_bytes(path: str | Path) -> bytes:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"data file not found: {path}" + (" (it is a directory)" if path.is_dir() else ""))
    return path.read_bytes()


def _not_text(data: bytes, of: str) -> tuple[int, str] | None:
    """Where and why bytes are not text, or None: the first NUL byte (binary) or byte that is
    not UTF-8, whichever comes first; `of` says what they are in the message ("file", "line")."""
    nul = data.find(b"\0")
    try:
        data[: nul if nul >= 0 else len(data)].decode("utf-8")
    except UnicodeDecodeError as err:
        return err.start, f"not UTF-8 text (byte {err.start} of the {of})"
    if nul >= 0:
        return nul, f"not a text {of} (it holds a NUL byte, byte {nul} of the {of})"
    return None


def read_records(path: str | Path) -> Iterator[tuple[str, int, dict[str, Any] | RecordError]]:
    """(source, index, record-or-error) for each record of a .jsonl file or a .json list of
    records. A file that cannot hold records at all (binary, not UTF-8, empty, not a list) is
    refused here, before any record is read. In JSON Lines a line that is not text costs only
    itself (a completions file with one garbled model output, say), unless most lines are not:
    such a file is binary, refused whole."""
    path = Path(path)
    if path.suffix == ".jsonl":
        return _json_lines(path, _text_lines(path))
    text = read_data_text(path)
    return _json_list(path, text, _list_start(path, text))


def _text_lines(path: Path) -> list[tuple[int, str | RecordError]]:
    """A JSON Lines file's non-blank lines by number, each decoded on its own (a line that is not
    text is that line's RecordError). JSON Lines end at "\\n" only: str.splitlines() also
    splits at characters that JSON allows raw inside strings (U+2028, U+2029, U+0085,
    \\x1c-\\x1e, \\v, \\f); in UTF-8 the byte 0x0a is that character and nothing else."""
    data = _data_bytes(path)
    lines: list[tuple[int, str | RecordError]] = []
    for lineno, raw in enumerate(data.removeprefix(b"\xef\xbb\xbf").split(b"\n"), start=1):
        problem = _not_text(raw, "line")
        if problem:
            lines.append((lineno, RecordError(f"{path}:{lineno}", f"{problem[1]}; expected a JSON object")))
        elif raw.strip():
            lines.append((lineno, raw.decode("utf-8")))
    if 2 * sum(isinstance(line, RecordError) for _, line in lines) > len(lines):
        _refuse_unless_text(path, data)  # most lines are not text: a binary file, refused whole
    return lines


def _json_lines(
    path: Path, lines: list[tuple[int, str | RecordError]]
) -> Iterator[tuple[str, int, dict[str, Any] | RecordError]]:
    for index, (lineno, line) in enumerate(lines):
        source = f"{path}:{lineno}"
        if isinstance(line, RecordError):
            yield source, index, line
            continue
        try:
            record = json.loads(line)
        except JSON_FAULTS as err:
            yield source, index, RecordError(source, json_problem(err))
        else:
            if isinstance(record, dict):
                yield source, index, record
            else:
                yield source, index, RecordError(source, f"record must be a JSON object, got {type(record).__name__}")


def _list_start(path: Path, text: str) -> int:
    """Position just inside the top-level '['."""
    pos = _skip_ws(text, 0)
    if pos >= len(text):
        raise RecordError(f"{path}:1", "the file is empty; expected a JSON list of records")
    if text[pos] != "[":
        where = f"{path}:{text.count(chr(10), 0, pos) + 1}"
        raise RecordError(where, f"expected a JSON list of records, found {_found_instead(text, pos)}")
    return pos + 1


KEYS_READ_MAX_CHARS = 1 << 26  # a file this long is not parsed whole to name what it holds


def _found_instead(text: str, pos: int) -> str:
    """What a .json file holds in place of a list, said so that the fix is clear: JSON Lines
    (rename it), one object (its keys: another format, a COCO file say), or the text itself."""
    if text[pos] != "{":
        return repr(text[pos : pos + 20])
    end = text.find("\n", pos)
    try:
        first = json.loads(text[pos : end if end >= 0 else len(text)])
    except JSON_FAULTS:
        first = None
    if isinstance(first, dict) and end >= 0 and text[_skip_ws(text, end) : _skip_ws(text, end) + 1] == "{":
        return "one JSON object per line (JSON Lines): name the file .jsonl"
    whole = first if end < 0 else None
    if whole is None and len(text) <= KEYS_READ_MAX_CHARS:
        with suppress(*JSON_FAULTS):
            whole = json.loads(text)
    if not isinstance(whole, dict):
        return "a JSON object"
    keys = ", ".join(repr(k)[:40] for k in list(whole)[:6]) + (", ..." if len(whole) > 6 else "")
    return f"one JSON object, with keys {keys or '(none)'}: another format than this task reads"


# What JSON that is well formed may still raise when read: an integer of more digits than Python
# converts (ValueError, as JSONDecodeError is one) or nesting deeper than its recursion limit.
JSON_FAULTS = (ValueError, RecursionError)
# What a task's code may raise on a value of a shape it did not foresee: still that record's problem.
RECORD_FAULTS = (TypeError, ValueError, KeyError, IndexError, AttributeError, ArithmeticError, RecursionError)


def json_problem(err: Exception, line: bool = False) -> str:
    """What is wrong with a JSON text, as said of its record."""
    if isinstance(err, json.JSONDecodeError):
        return f"invalid JSON: {err.msg} ({f'line {err.lineno}, ' if line else ''}column {err.colno})"
    if isinstance(err, RecursionError):
        return "unreadable JSON: nested deeper than Python reads"
    return f"unreadable JSON: {err}"


class _Lines:
    """Line numbers (1-based) and columns of positions in a text; lines are counted on from the
    last position asked (a file is read front to back)."""

    def __init__(self, text: str):
        self.text, self.pos, self.line = text, 0, 1

    def __call__(self, pos: int) -> int:
        if pos < self.pos:
            self.pos, self.line = 0, 1
        self.line += self.text.count("\n", self.pos, pos)
        self.pos = pos
        return self.line

    def column(self, pos: int) -> int:
        return pos - (self.text.rfind("\n", 0, pos) + 1)

    def begins(self, pos: int) -> bool:
        """Only whitespace precedes `pos` on its line (looked at back to the first other
        character, not the line's start: a one-line list asks this at every '{')."""
        start = pos
        while start and self.text[start - 1] != "\n" and self.text[start - 1].isspace():
            start -= 1
        return start == 0 or self.text[start - 1] == "\n"


@dataclass
class _Element:
    """What the list holds at `start`: a record, a bad record (`item` says what is wrong), or a
    flaw between records (`own` false: no record of its own). `index` is the record's 0-based
    position in the list (for a flaw, the next record's)."""

    start: int
    index: int
    item: dict[str, Any] | str
    own: bool = True


def _json_list(path: Path, text: str, pos: int) -> Iterator[tuple[str, int, dict[str, Any] | RecordError]]:
    """Records of a top-level JSON list, each named by the line it starts on, and by its 0-based
    index where another record starts on the same line (`file:1 (record 3)`: a one-line list).
    A malformed record is reported and skipped and reading resumes at the next record, so none
    after it is lost: after a balanced element at the ',' that ends it; after one whose brackets
    never balance (cut off, a missing '}') at the next record's start (`_resume`), reporting the
    lines skipped and the records they held. Where no later record can be told apart from the
    broken one's text, the file is refused (RecordError raised): never a silent cut."""
    lines = _Lines(text)
    elements = _list_elements(path, text, _skip_ws(text, pos), _Lines(text))
    previous_line, element = 0, next(elements, None)
    while element is not None:
        following = next(elements, None)
        line = lines(element.start)
        shared = element.own and (
            line == previous_line or (following is not None and following.own and lines(following.start) == line)
        )
        if element.own:
            previous_line = line
        source = f"{path}:{line}" + (f" (record {element.index})" if shared else "")
        item = element.item
        yield source, element.index, item if isinstance(item, dict) else RecordError(source, item)
        element = following


def _list_elements(path: Path, text: str, pos: int, lines: _Lines) -> Iterator[_Element]:
    """The elements of the list whose first element is at `pos`, and the flaws between them."""
    decoder = json.JSONDecoder()
    index = 0
    if pos < len(text) and text[pos] == "]":
        yield from _after_list(path, text, pos, index, lines)
        return
    while True:
        try:
            record, end = decoder.raw_decode(text, pos)
        except JSON_FAULTS as err:
            what = json_problem(err, line=True)
            end, resume = _past(text, pos, lines)
            if end is None:  # its brackets never balance, or do only past the next record
                what += "; the record never closes (its brackets do not balance)"
                element, resumed = _unbalanced(path, text, pos, index, resume, what, lines, own=True)
                yield element
                if resumed is None:
                    return
                index, pos = index + resume.held, resumed
                continue
            yield _Element(pos, index, what)
        else:
            wrong = f"record must be a JSON object, got {type(record).__name__}"
            yield _Element(pos, index, record if isinstance(record, dict) else wrong)
        index += 1
        pos = _skip_ws(text, end)
        if pos < len(text) and text[pos] == ",":
            pos = _skip_ws(text, pos + 1)
            continue
        if pos < len(text) and text[pos] == "]":
            yield from _after_list(path, text, pos, index, lines)
            return
        if pos >= len(text):
            yield _Element(pos, index, "the list never closes (no ']'): the file is cut short", own=False)
            return
        if text[pos] == "{":  # a missing ',' between two records: the next one is read
            yield _Element(pos, index, "expected ',' or ']' after a record (a missing ','?)", own=False)
            continue
        # Neither ',' nor ']' after a record: go on at the next element, reporting what was skipped.
        skip, resume = _past(text, pos, lines)
        if skip is not None:
            yield _Element(pos, index, "expected ',' or ']' after a record; the text up to the next record was skipped", own=False)  # fmt: skip
            if text[skip] == "]":
                yield from _after_list(path, text, skip, index, lines)
                return
            pos = _skip_ws(text, skip + 1)
            continue
        what = "expected ',' or ']' after a record"
        element, resumed = _unbalanced(path, text, pos, index, resume, what, lines, own=False)
        yield element
        if resumed is None:
            return
        index, pos = index + resume.held - 1, resumed


def _unbalanced(
    path: Path, text: str, pos: int, index: int, resume: _Resume, what: str, lines: _Lines, own: bool
) -> tuple[_Element, int | None]:
    """The report of the bad text at `pos`, which does not balance its brackets before the next
    record: skipped up to that record, naming the lines and the records they held, and where
    reading goes on; at the end of the list (None), what could not be read. `own`: the text is a
    record of its own (else text between records). Where records follow that cannot be placed,
    the file is refused (RecordError): reading on could lose them."""
    span = _span(text, pos, resume.at, resume.held if own else resume.held - 1, lines)
    if resume.at is None and resume.unplaced:
        raise RecordError(
            f"{path}:{lines(pos)}",
            f"{what}, and the records after it cannot be told apart from its text: {span} cannot be read, so "
            "the file is refused; fix it",
        )
    if resume.at is None:
        return _Element(pos, index, f"{what}: {span} could not be read", own), None
    return _Element(pos, index, f"{what}: skipped {span}; reading resumed at {_at(resume.at, lines)}", own), resume.at


def _past(text: str, pos: int, lines: _Lines) -> tuple[int | None, _Resume]:
    """How to get past the bad text at `pos`: the ',' or ']' that ends it, where its brackets
    balance before the next record begins (`_resume`); else (None) the next record."""
    end, resume = _record_end(text, pos), _resume(text, pos, lines)
    if end is None:
        return None, resume
    if resume.at is None and not resume.unplaced:
        return end, resume
    if resume.at is not None and text[end] == "," and _skip_ws(text, end + 1) <= resume.at:
        return end, resume
    return None, resume


def _span(text: str, start: int, stop: int | None, records: int, lines: _Lines) -> str:
    """'lines A-B (N records)' of the text from `start` up to `stop` (None: the end); within
    one line, its columns (1-based)."""
    last = start + max(0, len(text[start:stop].rstrip()) - 1)
    held = f"{records} record{'' if records == 1 else 's'}"
    first, end = lines(start), lines(last)
    if first == end:
        return f"line {first}, columns {lines.column(start) + 1}-{lines.column(last) + 1} ({held})"
    return f"lines {first}-{end} ({held})"


def _at(pos: int, lines: _Lines) -> str:
    """'line L' where `pos` begins its line, else 'line L, column C'."""
    return f"line {lines(pos)}" + ("" if lines.begins(pos) else f", column {lines.column(pos) + 1}")


def _after_list(path: Path, text: str, pos: int, index: int, lines: _Lines) -> Iterator[_Element]:
    """The list closes at `pos`: text after it is reported, not read; when records follow (a
    stray ']', two lists in one file), the file is refused, since reading on would be a guess
    and stopping would lose them."""
    rest = _skip_ws(text, pos + 1)
    if rest >= len(text):
        return
    decoder, found, at = json.JSONDecoder(), 0, rest
    while (at := text.find("{", at)) != -1:
        try:
            at = decoder.raw_decode(text, at)[1]
            found += 1
        except JSON_FAULTS:
            at += 1
    if found:
        raise RecordError(
            f"{path}:{lines(pos)}",
            f"the list closes here, but {found} record{'' if found == 1 else 's'} follow{'s' if found == 1 else ''} "
            f"it ({_at(rest, lines)} on): a stray ']', or two lists in one file? Fix the file",
        )
    yield _Element(rest, index, "text after the list's closing ']' was ignored", own=False)


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


_FIRST_KEY = re.compile(r'\{\s*("(?:[^"\\\n]|\\.)*")\s*:')


class _Resume(NamedTuple):
    at: int | None  # where the next record begins (None: nowhere)
    held: int  # records the skipped text held, the broken one included
    unplaced: int  # records in it that parse but are not followed by the rest of a list


def _resume(text: str, start: int, lines: _Lines) -> _Resume:
    """Where reading goes on after the bad text at `start`. The next record begins at a later
    '{': first choice, one on a line of its own at the column of `start` (when `start` begins
    its line: a list of one record per line, or indented), or at any column (when `start` is
    within a line: text after a record, a list's first record after its '['); else one right
    after a ',' whose first key is that of the text at `start` (records of a list share their
    keys; a nested object seldom has its record's first key), or any one right after a ','
    when that key is unknown. It is taken when it parses and what follows reads as the rest of
    the list (`_reads_as_tail`); the ones passed over that are not nested in another are
    counted (`held`, `unplaced`), as the first choice counts them when `start` begins its line,
    else as the second (a one-line list has no record beginning a line)."""
    key = _FIRST_KEY.match(text, start)
    column = lines.column(start) if lines.begins(start) else None
    kinds = ["line", "key" if key is not None else "comma"]
    decoder = json.JSONDecoder()
    known: dict[int, str] = {}
    tried = []
    for kind in kinds:
        held, unplaced = 1, 0
        p = start
        while (p := text.find("{", p + 1)) != -1:
            if kind == "line":
                begins = lines.begins(p) and column in (None, lines.column(p))
            else:
                before = _skip_ws_back(text, p)
                begins = before > 0 and text[before - 1] == ","
                if begins and key is not None:
                    other = _FIRST_KEY.match(text, p)
                    begins = other is not None and other.group(1) == key.group(1)
            if not begins:
                continue
            reads = _reads_as_tail(text, p, known)
            if reads == "tail":
                return _Resume(p, held, unplaced)
            if reads == "nested":
                continue
            held += 1
            try:
                unplaced += isinstance(decoder.raw_decode(text, p)[0], dict)
            except JSON_FAULTS:
                pass
        tried.append(_Resume(None, held, unplaced))
    return tried[0] if column is not None else tried[1]


def _reads_as_tail(text: str, pos: int, known: dict[int, str]) -> str:
    """Whether the text from the '{' at `pos` reads as the rest of a list of records: "tail"
    when a record, then elements that parse, separated by ',', reach the closing ']' at the end
    of the file, the end of the text (a file cut short), or an element that does not parse (a
    malformed record, read in its turn); "nested" when they reach another closing bracket or a
    ':' (the '{' is inside a list or an object); else "no". `known` holds the answers for the
    elements walked before (each is walked once)."""
    decoder = json.JSONDecoder()
    walked: list[int] = []
    answer = "no"
    while True:
        if pos in known:
            answer = known[pos]
            break
        try:
            _, end = decoder.raw_decode(text, pos)
        except JSON_FAULTS:
            answer = "tail" if walked else "no"
            break
        walked.append(pos)
        pos = _skip_ws(text, end)
        if pos >= len(text):
            answer = "tail"
            break
        if text[pos] in "]}:":
            answer = "tail" if text[pos] == "]" and _skip_ws(text, pos + 1) >= len(text) else "nested"
            break
        if text[pos] == ",":
            pos = _skip_ws(text, pos + 1)
        elif text[pos] != "{":  # (a '{' goes on: a missing ',' between records, reported in its turn)
            break
    known.update(dict.fromkeys(walked, answer))
    return answer


def _skip_ws_back(text: str, pos: int) -> int:
    """The position after the last non-whitespace character before `pos`."""
    while pos > 0 and text[pos - 1] in " \t\r\n":
        pos -= 1
    return pos


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
    # What a sample is read from, where errors are not one per such record (a COCO file's
    # images, whose categories and annotations have errors of their own): their name and count.
    unit: str = "records"
    held: int | None = None

    @property
    def records(self) -> int:
        """How many records (`unit`) the file holds, usable or not."""
        return self.held if self.held is not None else len(self.samples) + len(self.errors)

    @contextmanager
    def reading(self, source: str, strict: bool) -> Iterator[None]:
        """Around the reading of one record: a RecordError it raises is kept in `errors`, and so
        is any of RECORD_FAULTS (a value of a shape the task did not foresee, a number no float
        holds, is still this record's problem), named by `source`; with `strict`, raised."""
        try:
            with record_faults(source):
                yield
        except RecordError as err:
            if strict:
                raise
            self.errors.append(err)


@contextmanager
def record_faults(source: str) -> Iterator[None]:
    """Any of RECORD_FAULTS raised inside, raised as the RecordError of the record at `source`."""
    try:
        yield
    except RecordError:  # a ValueError, said already
        raise
    except RECORD_FAULTS as err:
        raise RecordError(source, f"{type(err).__name__}: {err}") from err


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
    for source, index, item in read_records(path):  # a RecordError raised here refuses the file
        with split.reading(source, strict):
            if isinstance(item, RecordError):
                raise item
            split.samples.append(
                build_sample(item, RecordContext(source, index, root, frame_spec, require_images, media))
            )
        if limit and len(split.samples) >= limit:
            break
    return split
