"""Published tables (parquet / arrow as downloaded): file layouts, schema errors, bad images,
streaming, and training data read through a column mapping."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image, ImageFile
from rich.console import Console

from vlrl.cli import main
from vlrl.config import ConfigError, load_config
from vlrl.data.records import FrameSpec, MediaRules, RecordError, load_split
from vlrl.data.sample import Sample
from vlrl.data.tables import (
    IMAGE_TYPE,
    Column,
    ImageJoin,
    SchemaError,
    hub_file,
    image_cell,
    is_table_spec,
    load_table_split,
    spec_exists,
    table_files,
    write_parquet,
)
from vlrl.eval.harness import run_eval
from vlrl.tasking.registry import make_task
from vlrl.tasking.sources import held_out, load_task_split, task_sources

SCHEMA = pa.schema([("id", pa.string()), ("image", IMAGE_TYPE), ("answer", pa.list_(pa.string()))])
SPEC = FrameSpec("absolute", 3136, 50176)


def _rows(n: int, start: int = 0) -> list[dict]:
    colors = ["red", "green", "blue", "white", "black"]
    return [
        {
            "id": str(start + i),
            "image": image_cell(Image.new("RGB", (20 + i, 10), colors[i % 5]), f"{i}.png"),
            "answer": ["a"] * (i % 3),
        }
        for i in range(n)
    ]


def _keep(record: dict, ctx) -> list[Sample]:
    return [
        Sample(
            id=record["id"],
            task="t",
            problem="",
            solution=record["answer"],
            images=[record["image"]],
            source=ctx.source,
        )
    ]


def _write_stream(path: Path, rows: list[dict]) -> None:
    """An arrow file as `datasets` writes it (IPC stream format)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, SCHEMA) as writer:
        writer.write_table(table, max_chunksize=2)


def test_a_directory_as_downloaded_is_read_split_by_split(tmp_path):
    for name, rows in [("val-00000-of-00002", _rows(3)), ("val-00001-of-00002", _rows(2, 3)), ("test-00000-of-00001", _rows(1, 9)),
                       ("testA-00000-of-00001", _rows(1, 7))]:  # fmt: skip
        write_parquet(tmp_path / "hub" / "data" / f"{name}.parquet", rows, SCHEMA)
    hub = tmp_path / "hub"
    assert [p.name for p in table_files(f"{hub}@val")] == ["val-00000-of-00002.parquet", "val-00001-of-00002.parquet"]
    assert [p.name for p in table_files(str(hub), default_split="test")] == ["test-00000-of-00001.parquet"]
    with pytest.raises(FileNotFoundError, match=r"several splits \(test, testA, val\)"):
        table_files(str(hub))
    with pytest.raises(FileNotFoundError, match="no files of split 'train'; splits found: test, testA, val"):
        table_files(f"{hub}@train")
    # Older uploads add a content hash to a shard's name (AI4Math/MathVista): still its split's
    for name in ("testmini-00000-of-00001-725687bf7a18d64b", "test-00000-of-00002-6b81bd7f7e2065e6"):
        write_parquet(tmp_path / "hashed" / "data" / f"{name}.parquet", _rows(1), SCHEMA)
    assert [p.name for p in table_files(f"{tmp_path / 'hashed'}@testmini")] == [
        "testmini-00000-of-00001-725687bf7a18d64b.parquet"
    ]
    with pytest.raises(FileNotFoundError, match=r"several splits \(test, testmini\)"):
        table_files(str(tmp_path / "hashed"))
    # The datasets cache's sharded files (BUILDER-SPLIT-00000-of-00002.arrow): named as @split selects them
    for name in ("parquet-train-00000-of-00002", "parquet-train-00001-of-00002", "parquet-test-00000-of-00001"):
        _write_stream(tmp_path / "datasets" / f"{name}.arrow", _rows(1))
    with pytest.raises(FileNotFoundError, match=r"several splits \(test, train\)"):
        table_files(str(tmp_path / "datasets"))
    with pytest.raises(FileNotFoundError, match="no files of split 'val'; splits found: test, train"):
        table_files(f"{tmp_path / 'datasets'}@val")
    assert len(table_files(f"{tmp_path / 'datasets'}@train")) == 2
    split = load_table_split(f"{hub}@val", _keep, SPEC, image_cache=tmp_path / "cache")
    assert [s.id for s in split.samples] == ["0", "1", "2", "3", "4"] and not split.errors
    assert split.samples[3].source.endswith("val-00001-of-00002.parquet:row 0")
    # Embedded images become files in the cache, byte for byte.
    first = Path(split.samples[0].images[0])
    assert first.parent.parent == tmp_path / "cache"
    assert first.read_bytes() == _rows(1)[0]["image"]["bytes"]
    with Image.open(first) as image:
        assert image.size == (20, 10)


def test_save_to_disk_and_cache_arrow_files_read_the_same_rows(tmp_path):
    rows = _rows(5)
    _write_stream(tmp_path / "saved" / "train" / "data-00000-of-00001.arrow", rows)
    _write_stream(tmp_path / "saved" / "test" / "data-00000-of-00001.arrow", _rows(2))
    _write_stream(tmp_path / "cache" / "parquet-train.arrow", rows)
    write_parquet(tmp_path / "hub.parquet", rows, SCHEMA)
    read = [load_table_split(spec, _keep, SPEC, image_cache=tmp_path / "img").samples
            for spec in (f"{tmp_path / 'saved'}@train", f"{tmp_path / 'cache'}@train", str(tmp_path / "hub.parquet"))]  # fmt: skip
    for samples in read:
        assert [(s.id, s.solution) for s in samples] == [(r["id"], r["answer"]) for r in rows]
        assert [s.images for s in samples] == [s.images for s in read[0]]  # same bytes, same cached file
    assert len({s.images[0] for s in read[0]}) == 5


def test_a_wrong_schema_names_the_column_and_the_expected_schema(tmp_path):
    path = write_parquet(tmp_path / "x.parquet", _rows(2), SCHEMA)
    columns = (Column("image", "image"), Column("answer", "list<string>|string"), Column("bbox", "list<number>"))
    with pytest.raises(SchemaError, match=r"x.parquet: missing column 'bbox'; the file has: id, image, answer; expected: "
                       r"image: image \(struct<bytes, path> or a path string\); answer: list<string> or string; bbox: list<number>"):  # fmt: skip
        load_table_split(str(path), _keep, SPEC, columns=columns)
    wrong = (Column("image", "image"), Column("id", "list<number>"))
    with pytest.raises(SchemaError, match=r"column 'id' is string, expected id: list<number>; expected schema: "):
        load_table_split(str(path), _keep, SPEC, columns=wrong)
    optional = (
        Column("id", "string"),
        Column("image", "image"),
        Column("answer", "list<string>"),
        Column("bbox", "list<number>", required=False),
    )
    assert len(load_table_split(str(path), _keep, SPEC, columns=optional, image_cache=tmp_path / "c").samples) == 2
    with pytest.raises(SchemaError, match=r"missing column 'question' \(data.columns.problem\)"):
        load_table_split(str(path), _keep, SPEC, rename={"problem": "question"})


def test_an_undecodable_embedded_image_costs_its_row_only(tmp_path):
    rows = _rows(4)
    rows[1]["image"] = {"bytes": b"\x89PNG\r\n\x1a\n not really", "path": "broken.png"}
    rows[2]["image"] = {"bytes": rows[2]["image"]["bytes"][:-30], "path": "truncated.png"}
    path = write_parquet(tmp_path / "x.parquet", rows, SCHEMA)
    split = load_table_split(str(path), _keep, SPEC, image_cache=tmp_path / "c")
    assert [s.id for s in split.samples] == ["0", "3"]
    assert [e.source for e in split.errors] == [f"{path}:row 1 image", f"{path}:row 2 image"]
    assert all("embedded image does not decode" in str(e) for e in split.errors)
    assert not any(p.name.endswith(".partial") for p in (tmp_path / "c").rglob("*"))
    with pytest.raises(RecordError, match="row 1 image: embedded image does not decode"):
        load_table_split(str(path), _keep, SPEC, image_cache=tmp_path / "c", strict=True)


def test_a_damaged_row_group_costs_its_own_rows_and_names_them(tmp_path):
    path = write_parquet(tmp_path / "x.parquet", _rows(8), SCHEMA, row_group_rows=2)
    column = pq.ParquetFile(path).metadata.row_group(2).column(0)  # rows 4-5's ids
    data = bytearray(path.read_bytes())
    start = column.dictionary_page_offset or column.data_page_offset
    data[start : start + column.total_compressed_size] = b"A" * column.total_compressed_size
    path.write_bytes(bytes(data))
    split = load_table_split(str(path), _keep, SPEC, image_cache=tmp_path / "c")
    assert [s.id for s in split.samples] == ["0", "1", "2", "3", "6", "7"]
    assert [s.source for s in split.samples][-2:] == [f"{path}:row 6", f"{path}:row 7"]
    (error,) = split.errors
    assert error.source == f"{path}:row 4" and "rows 4-5 do not read" in error.message
    with pytest.raises(RecordError, match="rows 4-5 do not read"):
        load_table_split(str(path), _keep, SPEC, image_cache=tmp_path / "c", strict=True)


def test_an_arrow_stream_cut_short_keeps_its_rows_before_the_cut_and_names_where(tmp_path):
    path = tmp_path / "data-00000-of-00001.arrow"
    _write_stream(path, _rows(6))  # batches of 2 rows
    path.write_bytes(path.read_bytes()[:-300])  # into the last batch
    split = load_table_split(str(path), _keep, SPEC, image_cache=tmp_path / "c")
    assert [s.id for s in split.samples] == ["0", "1", "2", "3"]
    (error,) = split.errors
    assert error.source == f"{path}:row 4" and "the file does not read from this row on" in error.message


def test_an_embedded_image_over_the_pixel_limit_is_refused_before_it_is_decoded(tmp_path, monkeypatch):
    rows = _rows(3)
    rows[1]["image"] = image_cell(Image.new("RGB", (3000, 3000)), "huge.png")  # 9 M pixels in a few KB
    path = write_parquet(tmp_path / "x.parquet", rows, SCHEMA)
    decoded = []
    load = ImageFile.ImageFile.load
    monkeypatch.setattr(ImageFile.ImageFile, "load", lambda im: decoded.append(im.size) or load(im))
    media = MediaRules(max_image_pixels=1_000_000)
    split = load_table_split(str(path), _keep, SPEC, image_cache=tmp_path / "c", media=media)
    assert [s.id for s in split.samples] == ["0", "2"]
    (error,) = split.errors
    assert error.source == f"{path}:row 1 image"
    assert (
        "embedded image has 3000x3000 pixels, more than the limit of 1000000 (data.max_image_pixels)" in error.message
    )
    assert (3000, 3000) not in decoded and decoded  # the others were decoded (checked)


def test_a_file_found_under_an_images_name_in_the_cache_is_used_only_if_it_holds_the_image(tmp_path):
    rows = _rows(1)
    data = rows[0]["image"]["bytes"]
    digest = hashlib.sha256(data).hexdigest()
    planted = tmp_path / "c" / digest[:2] / digest
    planted.parent.mkdir(parents=True)
    Image.new("RGB", (999, 111), "red").save(planted, format="PNG")  # another user's, or half a write
    path = write_parquet(tmp_path / "x.parquet", rows, SCHEMA)
    (sample,) = load_table_split(str(path), _keep, SPEC, image_cache=tmp_path / "c").samples
    assert Path(sample.images[0]).read_bytes() == data
    with Image.open(sample.images[0]) as image:
        assert image.size == (20, 10)


@pytest.mark.parametrize(
    "error", [TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError, RecursionError]
)
def test_a_row_of_a_shape_the_task_did_not_foresee_costs_itself_in_tables_and_json(error, tmp_path):
    """A task's builder that raises on a value it did not foresee (not a RecordError): that row
    or record is skipped, named by its place, or raised as a RecordError when strict."""

    def build(record: dict, ctx) -> list[Sample]:
        if record["id"] == "1":
            raise error("odd value")
        return _keep(record, ctx)

    path = write_parquet(tmp_path / "x.parquet", _rows(3), SCHEMA)
    lines = tmp_path / "x.jsonl"
    lines.write_text("".join(json.dumps({"id": str(i), "answer": [], "image": "a.png"}) + "\n" for i in range(3)))
    for read, where in [
        (lambda **kw: load_table_split(str(path), build, SPEC, image_cache=tmp_path / "c", **kw), f"{path}:row 1"),
        (
            lambda **kw: load_split(lines, lambda r, ctx: build(r, ctx)[0], SPEC, require_images=False, **kw),
            f"{lines}:2",
        ),
    ]:
        split = read()
        assert [s.id for s in split.samples] == ["0", "2"]
        assert [str(e) for e in split.errors] == [f"{where}: {error.__name__}: {error('odd value')}"]
        with pytest.raises(RecordError, match=f"{error.__name__}: ") as raised:
            read(strict=True)
        assert raised.value.source == where and isinstance(raised.value.__cause__, error)


def _peak_reading(path: Path) -> int:
    """The most arrow memory held at any row while reading the file."""
    peak = 0

    def build(record, ctx):
        nonlocal peak
        peak = max(peak, pa.total_allocated_bytes())
        return [Sample(id=record["id"], task="t", problem="", solution=None)]

    base = pa.total_allocated_bytes()
    assert len(load_table_split(str(path), build, SPEC, batch_rows=8).samples) == pq.ParquetFile(path).metadata.num_rows
    return peak - base


def test_large_files_stream_memory_does_not_grow_with_the_file(tmp_path):
    rng = np.random.default_rng(0)
    schema = pa.schema([("id", pa.string()), ("blob", pa.binary())])
    paths = {}
    for rows in (40, 200):  # 4 MB and 20 MB of bytes that do not compress
        data = [{"id": str(i), "blob": rng.bytes(100_000)} for i in range(rows)]
        paths[rows] = write_parquet(tmp_path / f"{rows}.parquet", data, schema, row_group_rows=8)
    small, large = _peak_reading(paths[40]), _peak_reading(paths[200])
    assert large < 8_000_000 and large <= 1.5 * small + 1_000_000  # bounded by the batch, not the file
    base = pa.total_allocated_bytes()
    whole = pq.read_table(paths[200])  # what reading the file at once holds
    assert pa.total_allocated_bytes() - base > 19_000_000
    del whole


def test_training_reads_a_published_table_through_the_column_mapping(tmp_path, rec_data, capsys, monkeypatch):
    """VLM-R1's REC records as an EasyR1-style parquet (a list of embedded images, other
    column names): mapped back by data.columns, they give the json's samples."""
    records = json.loads(rec_data.read_text())
    schema = pa.schema([("images", pa.list_(IMAGE_TYPE)), ("question", pa.string()), ("answer", pa.string()),
                        ("caption", pa.string()), ("id", pa.int64())])  # fmt: skip
    rows = []
    for i, r in enumerate(records):
        with Image.open(rec_data.parent / r["image"]) as image:
            rows.append({"images": [image_cell(image.convert("RGB"))], "question": r["problem"], "answer": json.dumps(r["solution"]),
                         "caption": r["normal_caption"], "id": i})  # fmt: skip
    write_parquet(tmp_path / "ds" / "data" / "train-00000-of-00001.parquet", rows, schema)
    write_parquet(tmp_path / "ds" / "data" / "test-00000-of-00001.parquet", rows[:2], schema)
    overrides = [f"data.train={tmp_path / 'ds'}@train", f"data.image_cache={tmp_path / 'cache'}", "model.max_pixels=50176",
                 "data.columns.image=images", "data.columns.problem=question", "data.columns.solution=answer",
                 "data.columns.normal_caption=caption"]  # fmt: skip
    cfg = load_config(None, overrides, {"task.name": "refcoco"})
    task = make_task(cfg.task)
    table = load_task_split(task, cfg, "train").samples
    reference = task.load(rec_data, SPEC).samples
    # a recipe's data.image_root (configs/refcoco.yaml: data/coco), which embedded images never read
    recipe = load_config(None, [*overrides, f"data.image_root={tmp_path / 'nowhere'}"], {"task.name": "refcoco"})
    assert len(load_task_split(task, recipe, "train").samples) == len(records)
    assert len(table) == len(records) == len(reference)
    for got, want in zip(table, reference, strict=True):
        assert (got.problem, got.solution, got.meta, got.frame) == (want.problem, want.solution, want.meta, want.frame)
        with Image.open(got.images[0]) as a, Image.open(want.images[0]) as b:
            assert np.array_equal(np.asarray(a.convert("RGB")), np.asarray(b.convert("RGB")))
    mixture = (f"mixture=[{{name: refcoco, train: '{tmp_path / 'ds'}@train', eval: '{tmp_path / 'ds'}@test', "
               "columns: {image: images, problem: question, solution: answer, normal_caption: caption}}]")  # fmt: skip
    mixed = load_config(None, [mixture, *overrides[1:3]])
    (source,) = task_sources(mixed)
    assert [s.problem for s in source.train.samples] == [s.problem for s in reference]
    ((_, _, evaluated),) = held_out(mixed, [source], Console(quiet=True))  # its held-out table, by its columns
    assert [s.problem for s in evaluated] == [s.problem for s in reference[:2]]
    json_eval = load_config(None, [mixture.replace(f"'{tmp_path / 'ds'}@test'", f"'{rec_data}'"), *overrides[1:3]])
    ((_, _, evaluated),) = held_out(json_eval, task_sources(json_eval), Console(quiet=True))  # a json: no columns
    assert [s.problem for s in evaluated] == [s.problem for s in reference]
    json_eval.model.path, json_eval.eval.max_new_tokens, json_eval.data.limit = "tiny:qwen2_5_vl", 4, 2
    (result,) = run_eval(json_eval, ["refcoco"], "eval", tmp_path / "mixed-eval", Console(quiet=True), False)
    assert (result.split, len(result.records)) == (str(rec_data), 2)  # vlrl eval reads that entry's json the same way
    # Columns given for a json training file are refused, naming the key that gave them
    json_train = load_config(None, [mixture.replace(f"'{tmp_path / 'ds'}@train'", f"'{rec_data}'"), *overrides[1:3]])
    with pytest.raises(ConfigError, match=rf"mixture\[0\]\.columns maps table columns, but {rec_data} is not"):
        task_sources(json_train)
    with pytest.raises(ConfigError, match=r"config: data\.columns maps table columns"):
        task_sources(load_config(None, [f"data.train={rec_data}", *overrides[1:]], {"task.name": "refcoco"}))
    # A run trains on the table (a folder @split) and resumes; a changed shard is said on resume
    run = [f"trainer.output_dir={tmp_path / 'run'}", "model.path=tiny:qwen2_5_vl", "rollout.num_generations=2",
           "rollout.max_new_tokens=4", "trainer.prompts_per_step=2", "trainer.progress=false"]  # fmt: skip
    assert main(["train", "--task", "refcoco", *overrides, *run, "trainer.steps=1"]) == 0
    assert main(["train", "--task", "refcoco", *overrides, *run, "trainer.steps=2"]) == 0
    assert "changed since" not in capsys.readouterr().out
    changed = [{**rows[0], "question": rows[0]["question"] + " (reworded)"}, *rows[1:]]
    write_parquet(tmp_path / "ds" / "data" / "train-00000-of-00001.parquet", changed, schema)
    assert main(["train", "--task", "refcoco", *overrides, *run, "trainer.steps=3"]) == 0
    assert f"{tmp_path / 'ds'}@train changed since" in " ".join(capsys.readouterr().out.split())
    # Its checkpoint evaluates on a json file of the task: the run's columns map tables only
    checkpoint = tmp_path / "run" / "checkpoints" / "step-0000003"
    evaluated = ["eval", "--model", str(checkpoint), "--task", f"refcoco={rec_data}", "--limit", "2"]
    assert main([*evaluated, "--out", str(tmp_path / "eval"), "eval.max_new_tokens=4"]) == 0
    cfg.data.columns = {}  # unmapped, every row lacks the keys the task reads: each is reported
    with pytest.raises(ConfigError, match="no usable records"):
        load_task_split(task, cfg, "train")
    # `vlrl data validate` reads the table as the run does
    validate = ["data", "validate", "--task", "refcoco", f"{tmp_path / 'ds'}@train", "trainer.progress=false"]
    assert main([*validate, *overrides[1:]]) == 0
    assert f"{len(records)} records, all usable" in capsys.readouterr().out
    assert main([*validate, *overrides[1:3]]) == 1  # without the mapping, as load_task_split above
    assert f"{len(records)} records, 0 usable" in capsys.readouterr().out
    monkeypatch.chdir(tmp_path)  # a relative image cache is where the command runs, not the data's folder
    assert main([*validate, "data.image_cache=relative", *overrides[2:]]) == 0
    assert f"{len(records)} records, all usable" in capsys.readouterr().out and (tmp_path / "relative").is_dir()


def _context(record: dict, ctx) -> list[Sample]:
    """A sample that records what the reader handed the task: the record and its context."""
    return [
        Sample(
            id=ctx.record_id(record),
            task="t",
            problem=str(ctx.image_root),
            solution=record.get("answer"),
            images=record.get("images") or [],
            source=ctx.source,
            meta={"index": ctx.index, "float32": sorted(ctx.float32)},
        )
    ]


def test_rows_without_an_id_are_numbered_by_their_place_in_the_splits_files(tmp_path):
    schema = pa.schema([("answer", pa.string())])
    for shard, answers in enumerate((["a", "b", "c"], ["d", "e"])):
        write_parquet(tmp_path / "data" / f"val-0000{shard}-of-00002.parquet", [{"answer": a} for a in answers], schema)
    samples = load_table_split(f"{tmp_path}@val", _context, SPEC).samples
    # the second shard's rows follow the first's: ids stay unique across the split
    assert [(s.id, s.meta["index"], s.solution) for s in samples] == [
        ("0", 0, "a"), ("1", 1, "b"), ("2", 2, "c"), ("3", 3, "d"), ("4", 4, "e")
    ]  # fmt: skip
    assert samples[3].source == f"{tmp_path / 'data' / 'val-00001-of-00002.parquet'}:row 0"


def test_a_mapped_column_wins_over_a_table_column_of_the_tasks_own_key(tmp_path):
    schema = pa.schema([("id", pa.string()), ("answer", pa.string()), ("label", pa.string())])
    path = write_parquet(tmp_path / "x.parquet", [{"id": "0", "answer": "unused", "label": "wanted"}], schema)
    (sample,) = load_table_split(str(path), _context, SPEC, rename={"answer": "label"}).samples
    assert sample.solution == "wanted"


def test_an_image_stored_as_a_path_stays_that_path_and_an_empty_image_list_stays_empty(tmp_path):
    schema = pa.schema([("id", pa.string()), ("images", pa.list_(IMAGE_TYPE))])
    rows = [
        {"id": "0", "images": [{"bytes": None, "path": "pics/a.png"}]},
        {"id": "1", "images": []},
        {"id": "2", "images": None},
    ]
    path = write_parquet(tmp_path / "x.parquet", rows, schema)
    split = load_table_split(str(path), _context, SPEC, image_cache=tmp_path / "c")
    assert not split.errors
    assert [s.images for s in split.samples] == [["pics/a.png"], [], []]
    assert not (tmp_path / "c").exists()  # nothing embedded, nothing cached


def test_records_are_read_under_the_image_root_given_else_their_files_folder(tmp_path):
    path = write_parquet(tmp_path / "tables" / "x.parquet", [{"id": "0"}], pa.schema([("id", pa.string())]))
    assert load_table_split(str(path), _context, SPEC).samples[0].problem == str(tmp_path / "tables")
    given = load_table_split(str(path), _context, SPEC, image_root=tmp_path / "images").samples
    assert given[0].problem == str(tmp_path / "images")


def test_float32_columns_are_known_by_their_own_and_their_mapped_keys(tmp_path):
    schema = pa.schema(
        [
            ("id", pa.string()),
            ("bbox", pa.list_(pa.float32(), 4)),  # a fixed-size list, as `Sequence(length=4)` stores it
            ("score", pa.float32()),
            ("area", pa.float64()),
        ]
    )
    row = {"id": "0", "bbox": [1.5, 2.5, 3.5, 4.5], "score": 0.5, "area": 2.0}
    path = write_parquet(tmp_path / "x.parquet", [row], schema)
    columns = (Column("id", "string"), Column("box", "list<number>"))
    (sample,) = load_table_split(str(path), _context, SPEC, columns=columns, rename={"box": "bbox"}).samples
    assert sample.meta["float32"] == ["bbox", "box", "score"]


def test_large_strings_and_large_lists_read_as_their_plain_types(tmp_path):
    schema = pa.schema([("id", pa.large_string()), ("answer", pa.large_list(pa.large_string()))])
    path = write_parquet(tmp_path / "x.parquet", [{"id": "7", "answer": ["a", "b"]}], schema)
    columns = (Column("id", "string"), Column("answer", "list<string>"))
    (sample,) = load_table_split(str(path), _context, SPEC, columns=columns).samples
    assert (sample.id, sample.solution) == ("7", ["a", "b"])


def test_a_column_the_task_does_not_read_is_not_read_its_bad_images_cost_nothing(tmp_path):
    schema = pa.schema([("id", pa.string()), ("image", IMAGE_TYPE), ("thumbnail", IMAGE_TYPE), ("answer", pa.list_(pa.string()))])  # fmt: skip
    rows = [{**row, "thumbnail": {"bytes": b"not an image", "path": "t.png"}} for row in _rows(2)]
    path = write_parquet(tmp_path / "x.parquet", rows, schema)
    columns = (Column("id", "string"), Column("image", "image"), Column("answer", "list<string>"))
    split = load_table_split(str(path), _keep, SPEC, columns=columns, image_cache=tmp_path / "c")
    assert [s.id for s in split.samples] == ["0", "1"] and not split.errors


def test_the_datasets_caches_own_files_are_no_split_and_an_existing_path_keeps_its_at_sign(tmp_path):
    _write_stream(tmp_path / "cache" / "parquet-train.arrow", _rows(2))
    _write_stream(tmp_path / "cache" / "cache-0123456789abcdef.arrow", _rows(3, 10))  # a Dataset.map result
    assert [p.name for p in table_files(str(tmp_path / "cache"))] == ["parquet-train.arrow"]
    exact = write_parquet(tmp_path / "rows@v2.parquet", _rows(1), SCHEMA)  # a file named with an @
    assert table_files(str(exact)) == [exact]
    folder = write_parquet(tmp_path / "snap@v1" / "x.parquet", _rows(1), SCHEMA)  # a folder named with an @
    assert table_files(str(folder)) == [folder]
    assert table_files(f"{tmp_path / 'snap@v1'}") == [folder]
    assert table_files(f"{tmp_path / 'snap@v1'}/*.parquet") == [folder]  # a glob under it: no split named


def test_the_hubs_parquet_conversion_folders_globs_and_path_columns_read_as_tables(tmp_path):
    # the hub's parquet conversion (refs/convert/parquet): CONFIG/SPLIT/0000.parquet
    for split, rows in (("train", _rows(2)), ("test", _rows(1, 5))):
        write_parquet(tmp_path / "converted" / "default" / split / "0000.parquet", rows, SCHEMA)
    assert table_files(f"{tmp_path / 'converted'}@test") == [
        tmp_path / "converted" / "default" / "test" / "0000.parquet"
    ]
    # a glob of tables is a table spec that exists; a glob of other files is neither
    (tmp_path / "notes.json").write_text("[]")
    pattern = f"{tmp_path / 'converted' / 'default'}/*/*.parquet"
    assert is_table_spec(pattern) and spec_exists(pattern)
    assert is_table_spec(f"{tmp_path / 'converted' / 'default'}/*/0000.*")  # by the files it matches
    assert table_files(pattern) == [
        tmp_path / "converted" / "default" / split / "0000.parquet" for split in ("test", "train")
    ]
    assert not is_table_spec(f"{tmp_path}/*.json") and not spec_exists(f"{tmp_path}/*.parquet")
    with pytest.raises(ValueError, match=r"column 'bbox': unknown type \['float'\]; known: string, int, number"):
        Column("bbox", "list<number>|float")  # a task's schema is checked when it is declared
    # images given as path strings, and an Image cell that holds neither bytes nor a path
    schema = pa.schema([("id", pa.string()), ("image", pa.string()), ("answer", pa.list_(pa.string()))])
    path = write_parquet(tmp_path / "paths.parquet", [{"id": "0", "image": "a.png", "answer": []}], schema)
    columns = (Column("id", "string"), Column("image", "image"), Column("answer", "list<string>"))
    assert load_table_split(str(path), _keep, SPEC, columns=columns).samples[0].images == ["a.png"]
    rows = _rows(2)
    rows[1]["image"] = {"bytes": None, "path": None}
    path = write_parquet(tmp_path / "empty.parquet", rows, SCHEMA)
    split = load_table_split(str(path), _keep, SPEC, image_cache=tmp_path / "c")
    assert [s.id for s in split.samples] == ["0"]
    assert [str(e) for e in split.errors] == [f"{path}:row 1 image: image holds neither bytes nor a path"]


def test_a_split_is_told_apart_from_one_whose_name_ends_like_it_and_converted_splits_are_named_by_folder(tmp_path):
    for name in ("val-00000-of-00001", "minival-00000-of-00001"):
        write_parquet(tmp_path / "hub" / "data" / f"{name}.parquet", _rows(1), SCHEMA)
    assert [p.name for p in table_files(f"{tmp_path / 'hub'}@val")] == ["val-00000-of-00001.parquet"]
    assert [p.name for p in table_files(f"{tmp_path / 'hub'}@minival")] == ["minival-00000-of-00001.parquet"]
    for split in ("train", "test"):  # the hub's parquet conversion: CONFIG/SPLIT/0000.parquet
        write_parquet(tmp_path / "converted" / "default" / split / "0000.parquet", _rows(1), SCHEMA)
    with pytest.raises(FileNotFoundError, match=r"holds several splits \(test, train\); name one"):
        table_files(str(tmp_path / "converted"))
    with pytest.raises(FileNotFoundError, match="no files of split 'val'; splits found: test, train$"):
        table_files(f"{tmp_path / 'converted'}@val")


def test_a_glob_or_folder_reads_only_table_files_and_no_hidden_ones(tmp_path):
    table = write_parquet(tmp_path / "data" / "train-00000-of-00001.parquet", _rows(1), SCHEMA)
    write_parquet(tmp_path / "data" / ".train-00000-of-00001.parquet", _rows(1), SCHEMA)  # hidden: a partial copy
    (tmp_path / "data" / "README.md").write_text("# a dataset card")
    assert table_files(str(tmp_path / "data")) == [table]
    assert table_files(f"{tmp_path / 'data'}/*") == [table]


def test_a_limit_counts_samples_even_where_one_row_gives_several(tmp_path):
    path = write_parquet(tmp_path / "t.parquet", _rows(4), SCHEMA)

    def twice(record: dict, ctx) -> list[Sample]:
        return [
            dataclasses.replace(sample, id=f"{sample.id}{suffix}") for sample in _keep(record, ctx) for suffix in "ab"
        ]

    split = load_table_split(str(path), twice, SPEC, image_cache=tmp_path / "cache", limit=3)
    assert [s.id for s in split.samples] == ["0a", "0b", "1a"]


@pytest.mark.parametrize("suffix", [".parquet", ".arrow"])
def test_a_task_with_a_schema_is_given_only_the_columns_it_reads_from_parquet_and_arrow(tmp_path, suffix):
    schema = pa.schema([("id", pa.string()), ("image", IMAGE_TYPE), ("thumbnail", IMAGE_TYPE), ("answer", pa.list_(pa.string()))])  # fmt: skip
    rows = [{**row, "thumbnail": row["image"]} for row in _rows(3)]
    path = tmp_path / f"x{suffix}"
    if suffix == ".parquet":
        write_parquet(path, rows, schema)
    else:
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
            writer.write_table(pa.Table.from_pylist(rows, schema=schema), max_chunksize=2)
    keys = []

    def build(record: dict, ctx) -> list[Sample]:
        keys.append(sorted(record))
        return _keep(record, ctx)

    columns = (Column("id", "string"), Column("image", "image"), Column("answer", "list<string>"))
    split = load_table_split(str(path), build, SPEC, columns=columns, image_cache=tmp_path / "c", batch_rows=2)
    assert [s.id for s in split.samples] == ["0", "1", "2"] and not split.errors
    assert keys == [["answer", "id", "image"]] * 3


def test_a_struct_column_without_bytes_is_no_image_and_reads_as_its_fields(tmp_path):
    schema = SCHEMA.append(pa.field("meta", pa.struct([("path", pa.string()), ("source", pa.string())])))
    rows = [{**row, "meta": {"path": None, "source": "coco"}} for row in _rows(2)]
    path = write_parquet(tmp_path / "x.parquet", rows, schema)
    metas = []

    def build(record: dict, ctx) -> list[Sample]:
        metas.append(record["meta"])
        return _keep(record, ctx)

    split = load_table_split(str(path), build, SPEC, image_cache=tmp_path / "c")
    assert [s.id for s in split.samples] == ["0", "1"] and not split.errors
    assert metas == [{"path": None, "source": "coco"}] * 2


def test_an_embedded_image_already_in_the_cache_is_not_decoded_again(tmp_path, monkeypatch):
    from vlrl.data import tables

    data = _rows(1)[0]["image"]["bytes"]
    cache = tables.ImageCache(tmp_path / "c")
    stored = cache.store(data, "x.parquet:row 0")

    def no_decoding(*args, **kwargs):
        raise AssertionError("decoded again")

    monkeypatch.setattr(tables, "open_image", no_decoding)
    assert cache.store(data, "y.parquet:row 5") == stored
    assert Path(stored).read_bytes() == data


# -- images published as a config of their own (GQA) ----------------------------------------------------
JOIN = ImageJoin(rows="questions", images="pictures", key="imageId")
QUESTIONS = pa.schema([("id", pa.string()), ("imageId", pa.string()), ("answer", pa.list_(pa.string()))])
PICTURES = pa.schema([("id", pa.string()), ("image", IMAGE_TYPE)])


def _joined_dataset(root: Path, pictures: list[dict], image_ids: list[str]) -> Path:
    write_parquet(hub_file(root, "testdev", "pictures"), pictures, PICTURES)
    rows = [{"id": f"q{i}", "imageId": image_id, "answer": []} for i, image_id in enumerate(image_ids)]
    write_parquet(hub_file(root, "testdev", "questions"), rows, QUESTIONS)
    return root


def _pictures(colors: list[str]) -> list[dict]:
    return [
        {"id": f"n{i}", "image": image_cell(Image.new("RGB", (16, 16), c), f"n{i}.jpg")} for i, c in enumerate(colors)
    ]


def test_images_of_another_config_are_joined_to_the_rows_by_id_not_by_place(tmp_path):
    pictures = _pictures(["red", "green", "blue"])
    root = _joined_dataset(tmp_path / "GQA", pictures[::-1], ["n1", "n0", "n1", "n2"])
    for spec in (str(root), str(root / "questions"), f"{root}@testdev"):
        split = load_table_split(
            spec, _keep, SPEC, default_split="testdev", image_cache=tmp_path / "c", image_join=JOIN
        )
        assert not split.errors
        colors = [Image.open(s.images[0]).getpixel((0, 0)) for s in split.samples]
        assert colors == [(0, 128, 0), (255, 0, 0), (0, 128, 0), (0, 0, 255)], spec
        assert [s.source for s in split.samples] == [
            f"{root}/questions/testdev-00000-of-00001.parquet:row {i}" for i in range(4)
        ]


def test_a_row_whose_image_is_missing_or_does_not_decode_costs_that_row_only(tmp_path):
    pictures = _pictures(["red", "green"])
    pictures[1]["image"] = {"bytes": b"not an image", "path": "n1.jpg"}
    root = _joined_dataset(tmp_path / "GQA", pictures, ["n0", "n1", "n9", "n0"])
    split = load_table_split(
        str(root), _keep, SPEC, default_split="testdev", image_cache=tmp_path / "c", image_join=JOIN
    )
    assert [s.id for s in split.samples] == ["q0", "q3"]
    rows = f"{root}/questions/testdev-00000-of-00001.parquet"
    assert [e.source for e in split.errors] == [f"{rows}:row 1", f"{rows}:row 2"]
    assert "imageId 'n1': " in str(split.errors[0]) and "pictures/testdev-00000-of-00001.parquet:row 1 image" in str(
        split.errors[0]
    )
    assert "embedded image does not decode" in str(split.errors[0])
    assert f"imageId 'n9' names no image in {root}/pictures" in str(split.errors[1])


def test_a_folder_without_the_joined_configs_is_refused_naming_them(tmp_path):
    write_parquet(hub_file(tmp_path / "flat", "testdev"), [], QUESTIONS)
    with pytest.raises(FileNotFoundError, match=r"not a dataset folder holding questions/ and pictures/"):
        load_table_split(str(tmp_path / "flat"), _keep, SPEC, default_split="testdev", image_join=JOIN)
    write_parquet(hub_file(tmp_path / "half", "testdev", "questions"), [], QUESTIONS)
    with pytest.raises(FileNotFoundError, match=r"half/pictures, which does not exist"):
        load_table_split(str(tmp_path / "half"), _keep, SPEC, default_split="testdev", image_join=JOIN)
    _joined_dataset(tmp_path / "bad", [{"id": "n0", "image": None}], ["n0"])
    pq.write_table(pa.table({"id": ["n0"], "picture": ["x"]}), hub_file(tmp_path / "bad", "testdev", "pictures"))
    with pytest.raises(SchemaError, match=r"missing column 'image'"):
        load_table_split(str(tmp_path / "bad"), _keep, SPEC, default_split="testdev", image_join=JOIN)


# -- images in base64 strings (MME-RealWorld's `bytes`) ---------------------------------------------------
ENCODED = pa.schema([("id", pa.string()), ("bytes", pa.string())])


def _encoded(color: str) -> str:
    return base64.b64encode(image_cell(Image.new("RGB", (12, 12), color))["bytes"]).decode()


def _keep_encoded(record: dict, ctx) -> list[Sample]:
    return [Sample(id=record["id"], task="t", problem="", solution=None, images=[record["bytes"]], source=ctx.source)]


def test_a_base64_image_column_is_decoded_into_the_cache_and_a_bad_one_costs_its_row(tmp_path):
    rows = [{"id": "0", "bytes": _encoded("red")}, {"id": "1", "bytes": "not base64!"},
            {"id": "2", "bytes": base64.b64encode(b"no image").decode()}, {"id": "3", "bytes": _encoded("blue")}]  # fmt: skip
    path = write_parquet(tmp_path / "x.parquet", rows, ENCODED)
    columns = (Column("id", "string"), Column("bytes", "base64_image"))
    split = load_table_split(str(path), _keep_encoded, SPEC, columns=columns, image_cache=tmp_path / "c")
    assert [s.id for s in split.samples] == ["0", "3"]
    assert [Image.open(s.images[0]).getpixel((0, 0)) for s in split.samples] == [(255, 0, 0), (0, 0, 255)]
    assert all(Path(s.images[0]).is_relative_to(tmp_path / "c") for s in split.samples)
    assert [e.source for e in split.errors] == [f"{path}:row 1 bytes", f"{path}:row 2 bytes"]
    assert "not an image in base64" in str(split.errors[0]) and "embedded image does not decode" in str(split.errors[1])
    plain = load_table_split(
        str(path), _keep_encoded, SPEC, columns=(Column("id", "string"), Column("bytes", "string"))
    )
    assert [s.images[0] for s in plain.samples] == [r["bytes"] for r in rows]  # a plain string column stays text


def test_a_damaged_row_group_of_the_image_config_costs_the_rows_naming_its_images_only(tmp_path):
    root = _joined_dataset(tmp_path / "GQA", _pictures(["red", "green", "blue", "white"]), ["n0", "n2", "n3", "n1"])
    images = hub_file(root, "testdev", "pictures")
    write_parquet(images, _pictures(["red", "green", "blue", "white"]), PICTURES, row_group_rows=2)
    column = pq.ParquetFile(images).metadata.row_group(1).column(0)  # the ids of n2 and n3
    data = bytearray(images.read_bytes())
    start = column.dictionary_page_offset or column.data_page_offset
    data[start : start + column.total_compressed_size] = b"A" * column.total_compressed_size
    images.write_bytes(bytes(data))
    split = load_table_split(
        str(root), _keep, SPEC, default_split="testdev", image_cache=tmp_path / "c", image_join=JOIN
    )
    assert [s.id for s in split.samples] == ["q0", "q3"]
    assert all("names no image" in str(e) and "rows 2-3 do not read" in str(e) for e in split.errors)
    assert [e.source.rsplit(":", 1)[1] for e in split.errors] == ["row 1", "row 2"]


def test_a_list_of_plain_image_bytes_is_decoded_when_declared_and_an_image_list_reads_as_ever(tmp_path):
    def png(color: str) -> bytes:
        return image_cell(Image.new("RGB", (12, 12), color))["bytes"]

    columns = (Column("id", "string"), Column("images", "list<image>|list<image_bytes>"))
    plain = pa.schema([("id", pa.string()), ("images", pa.list_(pa.binary()))])
    rows = [{"id": "0", "images": [png("red"), png("blue")]}, {"id": "1", "images": [png("red"), b"no image"]}]
    path = write_parquet(tmp_path / "plain.parquet", rows, plain)
    split = load_table_split(str(path), _keep_list, SPEC, columns=columns, image_cache=tmp_path / "c")
    assert [s.id for s in split.samples] == ["0"] and split.errors[0].source == f"{path}:row 1 images[1]"
    assert [Image.open(p).getpixel((0, 0)) for p in split.samples[0].images] == [(255, 0, 0), (0, 0, 255)]
    featured = pa.schema([("id", pa.string()), ("images", pa.list_(IMAGE_TYPE))])
    cells = [{"id": "0", "images": [image_cell(Image.new("RGB", (12, 12), "green"))]}]
    path = write_parquet(tmp_path / "featured.parquet", cells, featured)
    split = load_table_split(str(path), _keep_list, SPEC, columns=columns, image_cache=tmp_path / "c")
    assert [Image.open(p).getpixel((0, 0)) for p in split.samples[0].images] == [(0, 128, 0)]


def test_one_image_as_plain_bytes_is_decoded_when_declared_and_a_broken_one_costs_its_row(tmp_path):
    columns = (Column("id", "string"), Column("image", "image|image_bytes"))
    plain = pa.schema([("id", pa.string()), ("image", pa.binary())])
    rows = [{"id": "0", "image": image_cell(Image.new("RGB", (12, 12), "red"))["bytes"]}, {"id": "1", "image": b"no"}]
    path = write_parquet(tmp_path / "plain.parquet", rows, plain)
    split = load_table_split(str(path), _keep_one, SPEC, columns=columns, image_cache=tmp_path / "c")
    assert [s.id for s in split.samples] == ["0"] and split.errors[0].source == f"{path}:row 1 image"
    assert Image.open(split.samples[0].images[0]).getpixel((0, 0)) == (255, 0, 0)


def _keep_one(record: dict, ctx) -> list[Sample]:
    return [Sample(id=record["id"], task="t", problem="", solution=None, images=[record["image"]], source=ctx.source)]


def _keep_list(record: dict, ctx) -> list[Sample]:
    return [Sample(id=record["id"], task="t", problem="", solution=None, images=record["images"], source=ctx.source)]
