"""Reading Hugging Face datasets as they are downloaded: parquet and arrow files, streamed.

A table spec is `PATH[@split]`. PATH is a parquet or arrow file, a glob of them, or a
directory as `huggingface-cli download` (data/val-00000-of-00004.parquet), `save_to_disk`
(val/data-00000-of-00001.arrow) or the datasets cache (name-val.arrow) leaves it; `@split`
picks one split's files in a directory. vlrl never downloads: the files are local.

Rows are read BATCH_ROWS at a time (parquet batches; arrow files are memory-mapped and
sliced), so memory holds a batch, not the file.
An image embedded as bytes (the `Image` feature, struct<bytes, path>; a string column of base64
a task declares `base64_image`, MME-RealWorld's; a plain binary cell a task declares
`image_bytes`, ChartQAPro's; or a list of them a task declares `list<image_bytes>`,
MMSI-Bench's) is decoded once, written to a content-addressed cache and replaced in the record
by that file's path, so tasks read it like any image path; an image stored as a path stays a
path.

A benchmark whose images are published as another config of the dataset (GQA: rows in
testdev_balanced_instructions/, images in testdev_balanced_images/, joined on `imageId`) names
them with an ImageJoin: the image config is read first into the cache, and each row gets the
path of the image its key names, as the reference's process_docs joins them.

Bad input: a file whose schema lacks a column the task reads, or holds it in another type,
fails naming the column and the expected schema (SchemaError); a row whose embedded image
does not decode is skipped and reported at "file:row N" like a bad json record.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import getpass
import glob
import hashlib
import io
import os
import re
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image

from vlrl.data.records import FrameSpec, MediaRules, RecordContext, RecordError, Split
from vlrl.data.sample import Sample
from vlrl.vision.images import DEFAULT_MAX_IMAGE_PIXELS, ImageTooLarge, open_image

TABLE_SUFFIXES = (".parquet", ".arrow")
BATCH_ROWS = 64  # rows read and turned into Python objects at a time
# A shard's name: SPLIT-00000-of-00002, with the content hash older uploads add (AI4Math/MathVista's
# data/testmini-00000-of-00001-725687bf7a18d64b.parquet).
_SHARD = re.compile(r"(.+?)-\d{5}-of-\d{5}(?:-[0-9a-f]{8,})?")
# The `Image` feature as the hub, save_to_disk and the datasets cache store it.
IMAGE_TYPE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


class SchemaError(RecordError):
    """A table file lacks a column the task reads, or holds it in another type."""


# -- column types ---------------------------------------------------------------------------
def _text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def _number(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t)


def _binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t)


def _list_of(item: Callable[[pa.DataType], bool]) -> Callable[[pa.DataType], bool]:
    def check(t: pa.DataType) -> bool:
        listed = pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
        return listed and item(t.value_type)

    return check


def float32_keys(schema: pa.Schema, rename: Mapping[str, str]) -> frozenset[str]:
    """The record keys whose column the table declares as float32 (or a list of float32): the
    type `datasets` casts a value written back into that column to (Dataset.map keeps a column's
    declared type), as lmms-eval's process_docs writes derived values back."""
    declared = {f.name for f in schema if pa.types.is_float32(f.type) or _list_of(pa.types.is_float32)(f.type)}
    return frozenset(declared | {key for key, column in rename.items() if column in declared})


def is_image_struct(t: pa.DataType) -> bool:
    """The `Image` feature: a struct holding the encoded `bytes` (and the original `path`)."""
    return pa.types.is_struct(t) and t.get_field_index("bytes") >= 0


def _image(t: pa.DataType) -> bool:
    return is_image_struct(t) or _text(t)


ATOMS: dict[str, Callable[[pa.DataType], bool]] = {
    "string": _text,
    "int": pa.types.is_integer,
    "number": _number,
    "list<string>": _list_of(_text),
    "list<number>": _list_of(_number),
    "image": _image,
    "base64_image": _text,
    "image_bytes": _binary,
    "list<image_bytes>": _list_of(_binary),
    "list<image>": _list_of(_image),
    "list<struct>": _list_of(pa.types.is_struct),
}
ATOM_WORDS = {"image": "image (struct<bytes, path> or a path string)", "list<image>": "a list of images",
              "list<struct>": "a list of records", "base64_image": "an image's bytes in base64 (a string)",
              "image_bytes": "an image's bytes (binary)", "list<image_bytes>": "a list of images' bytes (binary)"}  # fmt: skip


@dataclass(frozen=True)
class Column:
    """A column a task reads: its name and type, e.g. "list<number>" or "string|list<string>"."""

    name: str
    kind: str
    required: bool = True

    def __post_init__(self) -> None:
        unknown = [atom for atom in self.kind.split("|") if atom not in ATOMS]
        if unknown:
            raise ValueError(f"column {self.name!r}: unknown type {unknown}; known: {', '.join(ATOMS)}")

    def accepts(self, t: pa.DataType) -> bool:
        return any(ATOMS[atom](t) for atom in self.kind.split("|"))

    def describe(self) -> str:
        kind = " or ".join(ATOM_WORDS.get(atom, atom) for atom in self.kind.split("|"))
        return f"{self.name}: {kind}" + ("" if self.required else " (optional)")


def describe_schema(columns: Sequence[Column]) -> str:
    return "; ".join(column.describe() for column in columns)


def check_schema(path: Path, schema: pa.Schema, columns: Sequence[Column], rename: Mapping[str, str]) -> None:
    """Every column the task reads is there (under its mapped name) in a type the task reads;
    a column mapped by data.columns for a task without a declared schema must be there."""
    expected = describe_schema(columns) if columns else ", ".join(f"{k} <- {v}" for k, v in rename.items())
    declared = {column.name for column in columns}
    wanted = [(column, rename.get(column.name, column.name)) for column in columns]
    wanted += [(None, name) for key, name in rename.items() if key not in declared]
    for column, name in wanted:
        if name not in schema.names:
            if column is not None and not column.required:
                continue
            key = next((k for k, v in rename.items() if v == name), None)
            mapped = f" (data.columns.{key})" if key else ""
            raise SchemaError(
                str(path),
                f"missing column {name!r}{mapped}; the file has: {', '.join(schema.names)}; expected: {expected}",
            )
        actual = schema.field(name).type
        if column is not None and not column.accepts(actual):
            raise SchemaError(
                str(path), f"column {name!r} is {actual}, expected {column.describe()}; expected schema: {expected}"
            )


# -- files ----------------------------------------------------------------------------------
def split_spec(spec: str) -> tuple[str, str]:
    """'DIR@val' -> ('DIR', 'val'); a path that exists as written keeps its '@'."""
    head, at, tail = spec.rpartition("@")
    if at and head and tail and "/" not in tail and not Path(spec).exists():
        return head, tail
    return spec, ""


def _has_glob(path: str) -> bool:
    return any(char in path for char in "*?[")


def spec_exists(spec: str) -> bool:
    """The file or directory exists, or the glob matches something."""
    path, _ = split_spec(spec)
    return Path(path).exists() or (_has_glob(path) and bool(glob.glob(path)))


def is_table_spec(spec: str) -> bool:
    """A parquet / arrow file, a glob of them, or a directory (a dataset as downloaded)."""
    path, _ = split_spec(spec)
    if Path(path).suffix in TABLE_SUFFIXES or Path(path).is_dir():
        return True
    return _has_glob(path) and any(Path(p).suffix in TABLE_SUFFIXES for p in glob.glob(path))


def file_split(path: Path) -> str:
    """The split a file holds, by the names the hub (val-00000-of-00004.parquet), save_to_disk
    (val/data-00000-of-00001.arrow) and the datasets cache (builder-val.arrow, and its shards
    builder-val-00000-of-00002.arrow) give files: what `DIR@split` selects (`_belongs`; a
    split's name holds no '-', as datasets requires)."""
    stem = path.name.split(".")[0]
    match = _SHARD.fullmatch(stem)
    base = match.group(1) if match else stem
    if base == "data" or base.isdigit():
        return path.parent.name
    return base.rsplit("-", 1)[-1]


def _belongs(path: Path, split: str) -> bool:
    stem = path.name.split(".")[0]
    match = _SHARD.fullmatch(stem)
    base = match.group(1) if match else stem
    if base == "data" or base.isdigit():
        return path.parent.name == split
    return base == split or base.endswith(f"-{split}")


def table_files(spec: str, default_split: str = "") -> list[Path]:
    """The files of a table spec, shards in order. A directory holding several splits needs
    one named (`DIR@split`, or the benchmark's own split)."""
    path, split = split_spec(spec)
    split = split or default_split
    if _has_glob(path):
        files = sorted(Path(p) for p in glob.glob(path) if Path(p).suffix in TABLE_SUFFIXES)
        if not files:
            raise FileNotFoundError(f"data: no parquet or arrow file matches {path}")
        return files
    root = Path(path)
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise FileNotFoundError(f"data: {path} does not exist")
    files = sorted(p for p in root.rglob("*") if p.suffix in TABLE_SUFFIXES and not p.name.startswith(("cache-", ".")))
    if not files:
        raise FileNotFoundError(f"data: {root} holds no parquet or arrow file")
    if split:
        chosen = [p for p in files if _belongs(p, split)]
        if not chosen:
            found = sorted({file_split(p) for p in files})
            raise FileNotFoundError(f"data: {root} has no files of split {split!r}; splits found: {', '.join(found)}")
        return chosen
    splits = sorted({file_split(p) for p in files})
    if len(splits) > 1:
        raise FileNotFoundError(f"data: {root} holds several splits ({', '.join(splits)}); name one: {root}@SPLIT")
    return files


class Rows(NamedTuple):
    """Rows `first` to `first + count - 1` of a file, as read: a record batch, or the RecordError
    of rows that do not read (a damaged row group or page; count 0: the rest of the file)."""

    first: int
    count: int
    read: pa.RecordBatch | RecordError


def _record_batches(path: Path, columns: list[str] | None, rows: int = BATCH_ROWS) -> tuple[pa.Schema, Iterator[Rows]]:
    """The file's schema and its rows in record batches of at most `rows`, read one at a time."""
    try:
        if path.suffix == ".parquet":
            parquet = pq.ParquetFile(path, pre_buffer=False)
            return parquet.schema_arrow, _row_groups(parquet, path, columns, rows)
        source = pa.memory_map(str(path))
        try:
            stream = pa.ipc.open_stream(source)  # what `datasets` writes
            return stream.schema, _arrow_rows(_sliced(iter(stream), columns, rows), path)
        except pa.ArrowInvalid:
            source.seek(0)
            reader = pa.ipc.open_file(source)
            whole = (reader.get_batch(i) for i in range(reader.num_record_batches))
            return reader.schema, _arrow_rows(_sliced(whole, columns, rows), path)
    except (pa.ArrowInvalid, OSError) as err:
        kind = "parquet" if path.suffix == ".parquet" else "arrow"  # what it was read as
        raise RecordError(
            str(path), f"not a readable {kind} table ({err}); a table is read from parquet or arrow files"
        ) from err


def _row_groups(parquet: pq.ParquetFile, path: Path, columns: list[str] | None, rows: int) -> Iterator[Rows]:
    """A parquet file's rows, a row group at a time, so that a damaged one costs its own rows
    (from the first that does not read to its end), not the file's rest. No pre-buffering, no
    reading threads: either reads row groups ahead of the consumer."""
    first = 0
    for group in range(parquet.num_row_groups):
        end = first + parquet.metadata.row_group(group).num_rows
        try:
            for batch in parquet.iter_batches(batch_size=rows, row_groups=[group], columns=columns, use_threads=False):
                yield Rows(first, batch.num_rows, batch)
                first += batch.num_rows
        except (pa.ArrowException, OSError) as err:
            where = f"{path}:row {first}"
            yield Rows(first, end - first, RecordError(where, f"rows {first}-{end - 1} do not read ({err})"[:300]))
        first = end


def _arrow_rows(batches: Iterator[pa.RecordBatch], path: Path) -> Iterator[Rows]:
    """An arrow file's rows; a batch that does not read ends it, as the RecordError of the rest
    (its batches cannot be told apart from there on)."""
    first = 0
    try:
        for batch in batches:
            yield Rows(first, batch.num_rows, batch)
            first += batch.num_rows
    except (pa.ArrowException, OSError) as err:
        yield Rows(
            first, 0, RecordError(f"{path}:row {first}", f"the file does not read from this row on ({err})"[:300])
        )


def _sliced(batches: Iterator[pa.RecordBatch], columns: list[str] | None, rows: int) -> Iterator[pa.RecordBatch]:
    """Memory-mapped batches in slices of `rows` (zero-copy), restricted to `columns`."""
    for batch in batches:
        if columns is not None:
            batch = batch.select(columns)
        for start in range(0, batch.num_rows, rows):
            yield batch.slice(start, rows)


# -- images ---------------------------------------------------------------------------------
def default_image_cache() -> Path:
    return Path(tempfile.gettempdir()) / f"vlrl-images-{getpass.getuser()}"


class ImageCache:
    """Embedded images as files named by the hash of their bytes: each is decoded (checked)
    once, however many rows, runs or processes read it. A file found under an image's name is
    used only when it holds the image's bytes: the default folder is in the shared temp dir,
    where anyone may have put a file under that name (or a crash half of one)."""

    def __init__(self, root: str | Path = "", max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS):
        self.root = Path(root).absolute() if root else default_image_cache()  # rows name it from their own folder
        self.max_pixels = max_pixels

    def store(self, data: bytes, where: str) -> str:
        digest = hashlib.sha256(data).hexdigest()
        target = self.root / digest[:2] / digest
        if target.is_file() and target.read_bytes() == data:
            return str(target)
        try:  # the header's size is checked before a pixel is decoded
            with open_image(io.BytesIO(data), self.max_pixels, name="embedded image") as image:
                image.load()
        except ImageTooLarge as err:
            raise RecordError(where, f"{err} (data.max_image_pixels)") from err
        except Exception as err:
            raise RecordError(where, f"embedded image does not decode ({type(err).__name__}: {err})"[:300]) from err
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f"{digest}.{os.getpid()}.partial")
        partial.write_bytes(data)
        os.replace(partial, target)  # atomic: a reader never sees half a file
        return str(target)

    def path_of_base64(self, text: str | None, where: str) -> str | None:
        """A base64 string of an image's bytes (decoded as base64.b64decode does by default:
        characters outside the alphabet skipped) -> the path of a file holding the image."""
        if text is None:
            return None
        try:
            data = base64.b64decode(text)
        except (binascii.Error, ValueError) as err:
            raise RecordError(where, f"not an image in base64 ({err})") from err
        return self.store(data, where)

    def path_of(self, cell: Any, where: str) -> str | None:
        """A cell of the `Image` feature -> the path of a file holding the image."""
        if cell is None:
            return None
        if cell.get("bytes"):
            return self.store(cell["bytes"], where)
        if cell.get("path"):
            return cell["path"]
        raise RecordError(where, "image holds neither bytes nor a path")


def _materialize(
    row: dict[str, Any], image_columns: dict[str, bool], encoded: Mapping[str, str], cache: ImageCache, where: str
) -> None:
    """Embedded images (a column, or a list column of them; in the `encoded` columns, base64 or
    lists of plain bytes, by their kind) -> paths, in place."""
    for name, listed in image_columns.items():
        value = row.get(name)
        if listed and value is not None:
            row[name] = [cache.path_of(cell, f"{where} {name}[{i}]") for i, cell in enumerate(value)]
        else:
            row[name] = cache.path_of(value, f"{where} {name}")
    for name, kind in encoded.items():
        value = row.get(name)
        if value is None:
            continue
        if kind == "base64_image":
            row[name] = cache.path_of_base64(value, f"{where} {name}")
        elif kind == "image_bytes":
            row[name] = cache.store(value, f"{where} {name}")
        else:
            row[name] = [cache.store(cell, f"{where} {name}[{i}]") for i, cell in enumerate(value)]


def _encoded_images(schema: pa.Schema, columns: Sequence[Column], rename: Mapping[str, str]) -> dict[str, str]:
    """The columns whose images come as the task declares, not as `Image` features: name -> the
    kind the file holds (base64 strings, plain bytes, or lists of them)."""
    out = {}
    for column in columns:
        name = rename.get(column.name, column.name)
        if name not in schema.names:
            continue
        for kind in ("base64_image", "image_bytes", "list<image_bytes>"):
            if kind in column.kind.split("|") and ATOMS[kind](schema.field(name).type):
                out[name] = kind
    return out


def _image_columns(schema: pa.Schema) -> dict[str, bool]:
    """Columns of embedded images: name -> whether the column holds a list of them."""
    out = {}
    for field in schema:
        if is_image_struct(field.type):
            out[field.name] = False
        elif _list_of(is_image_struct)(field.type):
            out[field.name] = True
    return out


# -- images published as a config of their own -----------------------------------------------
@dataclass(frozen=True)
class ImageJoin:
    """The rows are in config folder `rows`, their images in config folder `images` (columns
    `id` and `image`), and a row's `key` names its image's id; the image's path goes under
    `into` in the record."""

    rows: str
    images: str
    key: str
    into: str = "image"

    def specs(self, spec: str) -> tuple[str, str]:
        """(rows spec, images spec) of a spec naming the dataset folder or its rows' config folder."""
        path, split = split_spec(spec)
        base = Path(path)
        if (base / self.rows).is_dir():
            rows, images = base / self.rows, base / self.images
        elif base.name == self.rows:
            rows, images = base, base.parent / self.images
        else:
            raise FileNotFoundError(
                f"data: {path} is not a dataset folder holding {self.rows}/ and {self.images}/ (its configs, as "
                "`huggingface-cli download` writes them), nor its rows' folder"
            )
        if not images.is_dir():
            raise FileNotFoundError(f"data: the images of {rows} are read from {images}, which does not exist")
        at = f"@{split}" if split else ""
        return f"{rows}{at}", f"{images}{at}"

    def lookup(self, spec: str, default_split: str, cache: ImageCache, batch_rows: int) -> JoinedImages:
        """Every image of the image config, each decoded once into the cache. An image that does
        not decode, or rows of the file that do not read, cost the rows naming them only."""
        columns = (Column("id", "string"), Column("image", "image"))
        joined = JoinedImages(spec)
        for path in table_files(spec, default_split):
            schema, _ = _record_batches(path, None)
            check_schema(path, schema, columns, {})
            _, batches = _record_batches(path, ["id", "image"], batch_rows)
            for part in batches:
                if isinstance(part.read, RecordError):
                    joined.unread.append(part.read)  # whose ids they hold is unknown
                    continue
                for in_file, row in enumerate(part.read.to_pylist(), start=part.first):
                    try:
                        joined.paths[row["id"]] = cache.path_of(row["image"], f"{path}:row {in_file} image")
                    except RecordError as err:
                        joined.paths[row["id"]] = err
        return joined

    def join(self, record: dict[str, Any], joined: JoinedImages, source: str) -> None:
        """The record's image path under `into`, in place."""
        key = record.get(self.key)
        found = joined.paths.get(key) if isinstance(key, str) else None
        if isinstance(found, str):
            record[self.into] = found
            return
        if isinstance(found, RecordError):
            raise RecordError(source, f"{self.key} {key!r}: {found}")
        unread = f" (some of its rows do not read: {joined.unread[0]})" if joined.unread else ""
        raise RecordError(source, f"{self.key} {key!r} names no image in {joined.spec}{unread}")


@dataclass
class JoinedImages:
    """An image config as read: id -> the cached image's path, or why it is not there."""

    spec: str
    paths: dict[str, str | RecordError] = dataclasses.field(default_factory=dict)
    unread: list[RecordError] = dataclasses.field(default_factory=list)


# -- reading --------------------------------------------------------------------------------
Build = Callable[[dict[str, Any], RecordContext], list[Sample]]


def load_table_split(
    spec: str,
    build: Build,
    frame_spec: FrameSpec,
    *,
    columns: Sequence[Column] = (),
    rename: Mapping[str, str] | None = None,
    default_split: str = "",
    image_root: str | Path = "",
    image_cache: str | Path = "",
    strict: bool = False,
    limit: int = 0,
    require_images: bool = True,
    media: MediaRules = MediaRules(),
    batch_rows: int = BATCH_ROWS,
    image_join: ImageJoin | None = None,
) -> Split:
    """Rows of a table spec -> Samples. `columns` is the schema the task reads (checked on
    every file); `rename` maps the task's record keys to the table's columns (data.columns);
    `image_join`: the images are another config of the dataset the spec names."""
    rename = dict(rename or {})
    cache = ImageCache(image_cache, media.max_image_pixels)
    media = dataclasses.replace(media, written_here=(*media.written_here, cache.root.resolve()))
    split = Split(spec)
    rows_spec, joined = spec, None
    if image_join is not None:
        rows_spec, images_spec = image_join.specs(spec)
        joined = image_join.lookup(images_spec, default_split, cache, batch_rows)
    row_index = 0
    for path in table_files(rows_spec, default_split):
        wanted = [rename.get(c.name, c.name) for c in columns] + list(rename.values())
        schema, _ = _record_batches(path, None)
        check_schema(path, schema, columns, rename)
        read = sorted({name for name in wanted if name in schema.names}) if columns else None
        _, batches = _record_batches(path, read, batch_rows)
        images = {k: v for k, v in _image_columns(schema).items() if read is None or k in read}
        encoded = _encoded_images(schema, columns, rename)
        root = Path(image_root) if image_root else path.parent
        float32 = float32_keys(schema, rename)
        offset = row_index  # a row's index is its place in the spec's files, read or not
        for part in batches:
            row_index = offset + part.first + part.count
            if isinstance(part.read, RecordError):
                with split.reading(part.read.source, strict):
                    raise part.read
                continue
            for in_file, row in enumerate(part.read.to_pylist(), start=part.first):
                source = f"{path}:row {in_file}"
                with split.reading(source, strict):
                    _materialize(row, images, encoded, cache, source)
                    record = {**row, **{key: row[column] for key, column in rename.items()}}
                    if image_join is not None and joined is not None:
                        image_join.join(record, joined, source)
                    ctx = RecordContext(source, offset + in_file, root, frame_spec, require_images, media, float32)
                    split.samples.extend(build(record, ctx))
                if limit and len(split.samples) >= limit:
                    del split.samples[limit:]
                    return split
    return split


# -- writing (synthetic data in a published schema) -----------------------------------------
def image_cell(image: Image.Image, name: str = "") -> dict[str, Any]:
    """An `Image` feature cell: the PNG bytes and a file name, as the hub stores them."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return {"bytes": buffer.getvalue(), "path": name}


def write_parquet(path: str | Path, rows: list[dict[str, Any]], schema: pa.Schema, row_group_rows: int = 100) -> Path:
    """Rows in `schema` as one parquet file (row groups of `row_group_rows`, as the hub's)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows, schema=schema)
    pq.write_table(table, path, row_group_size=row_group_rows)
    return path


def hub_file(root: str | Path, split: str, config: str = "data") -> Path:
    """Where the hub puts a one-shard split: ROOT/data/SPLIT-00000-of-00001.parquet, or
    ROOT/CONFIG/... for a dataset of several configs kept in folders of their own."""
    return Path(root) / config / f"{split}-00000-of-00001.parquet"
