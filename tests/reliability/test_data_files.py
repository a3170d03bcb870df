"""Data files from elsewhere: a bad record costs that record, never the ones after it; files stay
inside the data root; an unreadable file ends in one error line naming it."""

from __future__ import annotations

import json
import os
import struct
import zlib

import pytest
from PIL import Image

from tasks.refcoco import RefCOCO
from vlrl.cli import main
from vlrl.data.records import FrameSpec, MediaRules, load_split

SPEC = FrameSpec("absolute", 3136, 50176)


def record(i: int, **changes) -> dict:
    return {
        "id": f"r{i}",
        "image": "ok.png",
        "problem": "find it",
        "solution": [10, 10, 50, 40],
        "width": 100,
        "height": 80,
        **changes,
    }


@pytest.fixture
def root(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    Image.new("RGB", (100, 80), (1, 2, 3)).save(folder / "ok.png")
    return folder


def load(path, **media):
    return load_split(path, RefCOCO().build_sample, SPEC, media=MediaRules(**media))


@pytest.mark.parametrize(
    "bad",
    [
        "{'id': 'single quotes', 'image': 'ok.png'}",  # balanced, not JSON
        '{"id": "trailing comma", "image": "ok.png",}',
        '{"id": "a string cut", "problem": "no end}',  # an unterminated string, on its own line
        '{"id": "nested", "solution": [10, 10,, 40]}',
        "tru",
    ],
)
def test_a_malformed_list_element_costs_only_itself(root, bad):
    good = [json.dumps(record(i)) for i in range(6)]
    path = root / "train.json"
    path.write_text("[\n" + ",\n".join([*good[:3], bad, *good[3:]]) + "\n]\n")
    split = load(path)
    assert [s.id for s in split.samples] == [f"r{i}" for i in range(6)]
    (error,) = split.errors
    assert error.source == f"{path}:5" and "invalid JSON" in error.message


def test_a_missing_comma_between_records_is_reported_and_reading_goes_on(root):
    path = root / "train.json"
    path.write_text(
        "[\n" + json.dumps(record(0)) + "\n" + json.dumps(record(1)) + ",\n" + json.dumps(record(2)) + "\n]"
    )
    split = load(path)
    assert [s.id for s in split.samples] == ["r0", "r2"]
    assert split.errors[0].source == f"{path}:3" and "expected ',' or ']'" in split.errors[0].message


def test_a_record_that_never_closes_says_which_lines_were_not_read(root):
    path = root / "train.json"
    path.write_text("[\n" + json.dumps(record(0)) + ',\n{"id": [\n' + json.dumps(record(1)) + "\n]\n")
    split = load(path)
    assert [s.id for s in split.samples] == ["r0"]
    assert (
        split.errors[0].source == f"{path}:3"
        and "never closes, so lines 3-6 could not be read" in split.errors[0].message
    )


def test_json_lines_split_at_newlines_only(root):
    path = root / "train.jsonl"
    tricky = "a\u2028b\u2029c\x85d\x1ce\x1df\x1eg\x0bh\x0ci"  # raw in a JSON string; str.splitlines() splits at each
    path.write_text("\n".join(json.dumps(record(i, problem=tricky), ensure_ascii=False) for i in range(3)) + "\n")
    split = load(path)
    assert not split.errors and [s.problem for s in split.samples] == [tricky] * 3


def test_paths_stay_inside_the_data_root(root, tmp_path):
    outside = tmp_path / "outside.png"
    Image.new("RGB", (100, 80)).save(outside)
    (root / "sub").mkdir()
    (root / "sub" / "link.png").symlink_to(outside)
    (root / "inner-link.png").symlink_to(root / "ok.png")
    records = [
        record(0),
        record(1, image="../outside.png"),
        record(2, image=str(outside)),
        record(3, image="sub/link.png"),
        record(4, image="sub/../ok.png"),  # `..` that stays inside
        record(5, image=str(root / "ok.png")),  # absolute, inside
        record(6, image="inner-link.png"),  # a link that stays inside
    ]
    path = root / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    split = load(path)
    assert [s.id for s in split.samples] == ["r0", "r4", "r5", "r6"]
    assert {e.source.rsplit(":", 1)[1] for e in split.errors} == {"2", "3", "4"}
    assert all(
        "leads outside the data root" in e.message and "data.allow_outside_root=true" in e.message for e in split.errors
    )
    assert len(load(path, allow_outside_root=True).samples) == 7


def bomb_png(path, width: int, height: int) -> None:
    """A PNG whose header states width x height pixels: a few bytes that would decode to gigabytes."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b"")
    )


def test_images_over_the_pixel_limit_are_refused_per_record(root):
    bomb_png(root / "bomb.png", 30000, 30000)  # over PIL's own refusal
    Image.new("RGB", (200, 150)).save(root / "big.png")
    records = [
        record(0),
        record(1, image="bomb.png", width=30000, height=30000),
        record(2, image="big.png", width=200, height=150),
    ]
    path = root / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    split = load(path, max_image_pixels=20000)
    assert [s.id for s in split.samples] == ["r0"]
    reasons = {e.source.rsplit(":", 1)[1]: e.message for e in split.errors}
    assert "decompression-bomb" in reasons["2"]
    assert "200x150 pixels, more than the limit of 20000 (data.max_image_pixels)" in reasons["3"]
    assert [s.id for s in load(path).samples] == ["r0", "r2"]  # the default limit lets 200x150 through


@pytest.mark.parametrize(
    "content, expected",
    [
        (
            b'{"image": "ok.png", "problem": "a dict, not a list"}',
            "expected a JSON list of records, found a JSON object",
        ),
        (b"", "the file is empty"),
        (os.urandom(4096) + b"\0", "not a text file"),
        (b"[\xff\xfe]", "not UTF-8 text"),
    ],
)
def test_a_data_file_that_holds_no_records_ends_in_one_error_line(tmp_path, root, capsys, content, expected):
    data = root / "train.json"
    data.write_bytes(content)
    run_dir = tmp_path / "run"
    status = main(["train", f"data.train={data}", f"trainer.output_dir={run_dir}", "model.path=tiny:qwen2_5_vl"])
    out = capsys.readouterr().out
    assert status == 2 and out.startswith("error:") and out.count("error:") == 1, out
    assert f"{data}:" in out and expected in out
    assert not run_dir.exists()


def test_a_binary_completions_file_ends_in_one_error_line(tmp_path, root, capsys):
    data = root / "eval.jsonl"
    data.write_text(json.dumps(record(0)) + "\n")
    completions = tmp_path / "completions.jsonl"
    completions.write_bytes(b"\x00\x01binary" * 100)
    status = main(
        [
            "score",
            "--task",
            "refcoco",
            "--data",
            str(data),
            "--completions",
            str(completions),
            "--out",
            str(tmp_path / "o.jsonl"),
        ]
    )
    out = capsys.readouterr().out
    last = out.splitlines()[-1]  # after the line saying which coordinate frame completions are read in
    assert (
        status == 2
        and last.startswith("error:")
        and out.count("error:") == 1
        and f"{completions}:1: not a text file" in last
    )


@pytest.mark.parametrize(
    "override, expected",
    [
        ("model.path=tiny:qwen9", "model.path 'tiny:qwen9': unknown tiny model"),
        ("trainer.output_dir={blocker}/run", "trainer.output_dir {blocker}/run cannot be created"),
    ],
)
def test_ordinary_mistakes_end_in_one_error_line_and_leave_no_run_directory(
    tmp_path, rec_data, capsys, override, expected
):
    blocker = tmp_path / "a-file"
    blocker.write_text("in the way")
    run_dir = tmp_path / "run"
    args = ["train", f"data.train={rec_data}", f"trainer.output_dir={run_dir}", "model.path=tiny:qwen2_5_vl"]
    status = main([*args, override.format(blocker=blocker)])
    out = capsys.readouterr().out
    assert (
        status == 2 and out.startswith("error:") and out.count("\n") == 1 and expected.format(blocker=blocker) in out
    ), out
    assert not run_dir.exists()


@pytest.mark.parametrize("model, out", [("tiny:qwen9", "{tmp}/eval"), ("tiny:qwen2_5_vl", "{tmp}/a-file/eval")])
def test_eval_mistakes_end_in_one_error_line_and_leave_no_output_directory(tmp_path, rec_data, capsys, model, out):
    (tmp_path / "a-file").write_text("in the way")
    out = out.format(tmp=tmp_path)
    status = main(["eval", "--task", f"refcoco={rec_data}", "--model", model, "--out", out])
    printed = capsys.readouterr().out
    assert status == 2 and printed.startswith("error:") and printed.count("\n") == 1, printed
    assert not (tmp_path / "eval").exists()
