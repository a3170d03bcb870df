"""Data files from elsewhere: a bad record costs that record, never the ones after it; files stay
inside the data root; an unreadable file ends in one error line naming it."""

from __future__ import annotations

import json
import os
import re
import struct
import zlib

import pytest
from conftest import tiny_run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from tasks.refcoco import RefCOCO
from vlrl.cli import main
from vlrl.data import records
from vlrl.data.records import (
    FrameSpec,
    MediaRules,
    RecordContext,
    RecordError,
    load_split,
    read_data_text,
    read_records,
)

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


DIGITS = "1" + "0" * 5000  # more digits than Python converts to an int (sys.get_int_max_str_digits)
DEEP = "[" * 100_000 + "]" * 100_000  # deeper than Python's recursion limit


@pytest.mark.parametrize(
    "bad,message",
    [
        (f'{{"id": "long", "image": "ok.png", "n": {DIGITS}}}', "unreadable JSON: Exceeds the limit"),
        (f'{{"id": "deep", "image": "ok.png", "n": {DEEP}}}', "unreadable JSON: nested deeper than Python reads"),
    ],
    ids=["a 5000-digit number", "100000 levels of nesting"],
)
@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_json_that_python_cannot_read_costs_only_its_record(root, bad, message, suffix):
    good = [json.dumps(record(i)) for i in range(4)]
    path = root / f"train{suffix}"
    lines = [*good[:2], bad, *good[2:]]
    path.write_text("[\n" + ",\n".join(lines) + "\n]\n" if suffix == ".json" else "\n".join(lines) + "\n")
    split = load(path)
    assert [s.id for s in split.samples] == [f"r{i}" for i in range(4)]
    (error,) = split.errors
    assert error.source == f"{path}:{4 if suffix == '.json' else 3}" and message in error.message


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"solution": [10, 10, 10**400, 40]}, "key 'solution' has a coordinate no float holds"),
        ({"solution": [10, 10, 50, "40"]}, "must be 4 numbers"),  # the task's own message, not wrapped again
        ({"solution": "abc"}, "got 'abc'"),  # what the record holds, not what was parsed of it
    ],
)
def test_a_value_the_task_code_cannot_convert_costs_only_its_record(root, changes, message):
    path = root / "train.jsonl"
    path.write_text("\n".join(json.dumps(record(i, **(changes if i == 1 else {}))) for i in range(3)) + "\n")
    split = load(path)
    assert [s.id for s in split.samples] == ["r0", "r2"]
    (error,) = split.errors
    assert error.source == f"{path}:2" and message in error.message
    with pytest.raises(RecordError, match=message):
        load_split(path, RefCOCO().build_sample, SPEC, strict=True)


def test_an_error_the_task_code_did_not_foresee_costs_only_its_record_named_by_its_type(root):
    """A task's build_sample raising what it did not check for (a number no float holds, here)
    is still that record's problem: reported with its place, the others read."""

    def build_sample(item, ctx):
        sample = RefCOCO().build_sample(item, ctx)
        float(item["height"] * 10**400 if item["id"] == "r1" else 0)  # OverflowError on line 2
        return sample

    path = root / "train.jsonl"
    path.write_text("\n".join(json.dumps(record(i)) for i in range(3)) + "\n")
    split = load_split(path, build_sample, SPEC)
    assert [s.id for s in split.samples] == ["r0", "r2"]
    (error,) = split.errors
    assert (error.source, error.message) == (f"{path}:2", "OverflowError: int too large to convert to float")


@pytest.mark.parametrize(
    "text,line,held",
    [
        ("[\n{r0}\n]\n[\n{r1},\n{r2},\n{r3}\n]\n", 3, "3 records follow it (line 4 on)"),  # two lists
        ("[\n{r0},\n{r1}]\n{r2},\n{r3}\n]\n", 3, "2 records follow it (line 4 on)"),  # a stray ']'
    ],
    ids=["two lists in one file", "a stray closing bracket"],
)
def test_records_after_the_lists_end_refuse_the_file_rather_than_be_lost(root, text, line, held):
    for i in range(4):
        text = text.replace(f"{{r{i}}}", json.dumps(record(i)))
    path = root / "train.json"
    path.write_text(text)
    with pytest.raises(RecordError, match=re.escape(held)) as refused:
        load(path)
    assert refused.value.source == f"{path}:{line}"
    path.write_text(f"[\n{json.dumps(record(0))}\n]\ntrailing words\n")  # no record after it: read
    assert [s.id for s in load(path).samples] == ["r0"]


def test_a_missing_comma_between_records_is_reported_and_reading_goes_on(root):
    path = root / "train.json"
    path.write_text(
        "[\n" + json.dumps(record(0)) + "\n" + json.dumps(record(1)) + ",\n" + json.dumps(record(2)) + "\n]"
    )
    split = load(path)
    assert [s.id for s in split.samples] == ["r0", "r1", "r2"]  # the record after the missing ',' is read
    (error,) = split.errors
    assert error.source == f"{path}:3" and error.message == "expected ',' or ']' after a record (a missing ','?)"


def test_a_record_that_never_closes_costs_only_itself(root):
    path = root / "train.json"
    path.write_text("[\n" + json.dumps(record(0)) + ',\n{"id": [\n' + json.dumps(record(1)) + "\n]\n")
    split = load(path)
    assert [s.id for s in split.samples] == ["r0", "r1"]
    (error,) = split.errors
    assert error.source == f"{path}:3"
    assert error.message == (
        "invalid JSON: Expecting ',' delimiter (line 6, column 1); the record never closes (its brackets do not "
        "balance): skipped line 3, columns 1-8 (1 record); reading resumed at line 4"
    )


def test_text_after_a_record_that_never_balances_is_skipped_up_to_the_next_record(root):
    """Text between records (no record of its own) whose brackets do not balance: skipped up to
    the next record, holding none, and the records after it keep their places."""
    path = root / "train.json"
    r0, r1, r2 = (json.dumps(record(i)) for i in range(3))
    path.write_text(f"[\n{r0} x[1,\n{r1},\n{r2}\n]\n")
    split = load(path)
    assert [(s.id, s.source) for s in split.samples] == [("r0", f"{path}:2"), ("r1", f"{path}:3"), ("r2", f"{path}:4")]
    (error,) = split.errors
    assert str(error) == (
        f"{path}:2: expected ',' or ']' after a record: skipped line 2, columns {len(r0) + 2}-{len(r0) + 5} (0 records); "
        "reading resumed at line 3"
    )


@pytest.mark.parametrize("comma", ["", ","], ids=["text after a record", "an element of its own"])
def test_unbalanced_text_within_a_line_resumes_at_the_record_beginning_the_next_line(root, comma):
    """Text that opens a bracket after a record on the record's line, then the next record on a
    line of its own, with no ',' between them: that record is read (it followed no ',', so
    only its beginning a line tells it apart), and no record is counted as lost."""
    path = root / "train.json"
    r0, r1, r2 = (json.dumps(record(i)) for i in range(3))
    path.write_text(f"[\n{r0}{comma} x[\n{r1},\n{r2}\n]\n")
    split = load(path)
    first = f"{path}:2" + (" (record 0)" if comma else "")  # (an element shares its line)
    assert [(s.id, s.source) for s in split.samples] == [("r0", first), ("r1", f"{path}:3"), ("r2", f"{path}:4")]
    (error,) = split.errors
    start = len(r0) + len(comma) + 2
    held = "1 record" if comma else "0 records"
    assert f"skipped line 2, columns {start}-{start + 1} ({held}); reading resumed at line 3" in str(error)


GOOD = [record(i) for i in range(6)]
CUT = record(99)  # written cut off before its box's third number: its brackets never balance


def text_of(item: dict, indent: int | None = None) -> str:
    text = json.dumps(item, indent=indent)
    return text[: text.index("50")].rstrip(", \n") if item is CUT else text


def one_per_line(items: list[dict]) -> str:
    return "[\n" + ",\n".join(text_of(i) for i in items) + "\n]\n"


def indented(items: list[dict]) -> str:
    """As json.dumps(items, indent=2) writes the list."""
    return "[\n" + ",\n".join("  " + text_of(i, 2).replace("\n", "\n  ") for i in items) + "\n]\n"


def one_line(items: list[dict | str]) -> str:
    return "[" + ", ".join(i if isinstance(i, str) else text_of(i) for i in items) + "]"


LAYOUTS = {  # layout -> (the file's text, where the cut-off record is, JSON's error, what was skipped)
    "one per line": (one_per_line, ":4", "Expecting ',' delimiter (line 10, column 1)", "skipped line 4, columns 1-75 (1 record); reading resumed at line 5"),
    "indented": (indented, ":28", "Expecting ',' delimiter (line 88, column 1)", "skipped lines 28-34 (1 record); reading resumed at line 35"),
    "one line": (one_line, ":1 (record 2)", "Expecting ',' delimiter (line 1, column 755)", "skipped line 1, columns 228-302 (1 record); reading resumed at line 1, column 304"),
}  # fmt: skip


def cut_list(path, layout: str) -> str:
    """6 good records with a cut-off element after the second, in `layout`; the expected report."""
    text, where, decoding, skipped = LAYOUTS[layout]
    path.write_text(text([*GOOD[:2], CUT, *GOOD[2:]]))
    return f"{path}{where}: invalid JSON: {decoding}; the record never closes (its brackets do not balance): {skipped}"


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_cut_off_record_costs_only_itself_in_any_layout(root, layout):
    path = root / "train.json"
    report = cut_list(path, layout)
    split = load(path)
    assert [s.id for s in split.samples] == [f"r{i}" for i in range(6)]
    assert [str(e) for e in split.errors] == [report]
    if layout == "one line":  # records on one line are named by their index in the list
        assert [s.source for s in split.samples] == [f"{path}:1 (record {i})" for i in (0, 1, 3, 4, 5, 6)]


def test_every_bad_record_of_a_one_line_list_is_named_by_its_index(root):
    path = root / "train.json"
    items = [
        json.dumps(record(0)),
        "{'id': 'single quotes'}",
        json.dumps(record(1)),
        "tru",
        "[1, 2]",
        json.dumps(record(2)),
    ]
    path.write_text("[" + ", ".join(items) + "]")
    split = load(path)
    assert [s.id for s in split.samples] == ["r0", "r1", "r2"]
    assert [e.source for e in split.errors] == [f"{path}:1 (record {i})" for i in (1, 3, 4)]
    assert [s.source for s in split.samples] == [f"{path}:1 (record {i})" for i in (0, 2, 5)]


def test_a_record_cut_off_at_the_end_of_the_file_is_reported_and_the_rest_kept(root):
    path = root / "train.json"
    path.write_text("[\n" + ",\n".join([json.dumps(record(0)), json.dumps(record(1)), text_of(CUT)]))
    split = load(path)
    assert [s.id for s in split.samples] == ["r0", "r1"]
    assert [str(e) for e in split.errors] == [
        f"{path}:4: invalid JSON: Expecting ',' delimiter (line 4, column 75); the record never closes (its "
        "brackets do not balance): line 4, columns 1-74 (1 record) could not be read"
    ]


def test_a_list_whose_next_record_cannot_be_told_apart_is_refused_naming_the_place(root, tmp_path, capsys):
    """A cut-off record followed by one that parses but not as part of a list (text after it):
    reading on could take a record for part of another, so the file is refused, not cut."""
    path = root / "train.json"
    path.write_text("[\n" + json.dumps(record(0)) + ",\n" + text_of(CUT) + "\n" + json.dumps(record(1)) + " oops\n]\n")
    with pytest.raises(RecordError) as refused:
        load(path)
    assert refused.value.source == f"{path}:3" and "so the file is refused" in refused.value.message
    status = main(
        ["train", f"data.train={path}", f"trainer.output_dir={tmp_path / 'run'}", "model.path=tiny:qwen2_5_vl"]
    )
    out = capsys.readouterr().out
    assert status == 2 and out.startswith(f"error: {path}:3: invalid JSON") and out.count("error:") == 1, out


def test_train_eval_and_score_use_every_good_record_of_a_list_with_a_cut_off_one(root, tmp_path, tiny_qwen25, capsys):
    """`vlrl train`, `vlrl eval` and `vlrl score` on 6 good records with a cut-off element after
    the second: all 6 are used, and the report names the element, the lines skipped and the
    records they held."""
    path = root / "train.json"
    report = cut_list(path, "one per line")
    said = f"skipped 1 bad record(s) in {path}; 6 sample(s) read\n  {report}\n"
    run = tmp_path / "run"
    args = ["train", *tiny_run(run, path), "trainer.steps=1", "trainer.prompts_per_step=6", "rollout.max_new_tokens=4"]
    assert main(args) == 0
    assert said in capsys.readouterr().out
    metrics = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    assert metrics["data_skipped_records"] == 1
    out = tmp_path / "eval"
    assert main(["eval", "--task", f"refcoco={path}", "--model", "tiny:qwen2_5_vl", "--out", str(out),
                 "model.max_pixels=12544", "eval.max_new_tokens=4"]) == 0  # fmt: skip
    assert said in capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    assert results["n-samples"]["refcoco"] == {"original": 7, "effective": 6}
    assert results["skipped"]["refcoco"] == [report]
    completions = tmp_path / "completions.jsonl"
    completions.write_text(
        "".join(json.dumps({"id": f"r{i}", "completion": "[10, 10, 50, 40]"}) + "\n" for i in range(6))
    )
    scored = tmp_path / "scored.jsonl"
    main(["score", "--task", "refcoco", "--data", str(path), "--completions", str(completions), "--out", str(scored)])
    printed = capsys.readouterr().out
    assert said in printed and "6 completions scored" in printed
    assert [json.loads(line)["id"] for line in scored.read_text().splitlines()] == [f"r{i}" for i in range(6)]


VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 99) | st.text(alphabet='ab{}[],:" \\\n', max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["id", "x"]), inner, max_size=3),
    max_leaves=8,
)


def damaged(text: str, where: float, cut: bool) -> str:
    """The record's text cut off at `where`, or without one of its closing brackets."""
    if cut:
        return text[: max(1, int(where * len(text)))]
    closers = [k for k, c in enumerate(text) if c in "}]"]
    k = closers[int(where * len(closers))]
    return text[:k] + text[k + 1 :]


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    records=st.lists(st.dictionaries(st.sampled_from(["b", "c"]), VALUES, max_size=3), min_size=1, max_size=8),
    damage=st.lists(st.tuples(st.integers(0, 7), st.floats(0, 0.999), st.booleans()), max_size=3),
    layout=st.sampled_from([None, 2, "one line"]),
)
def test_no_intact_record_is_lost_to_damaged_neighbours(tmp_path_factory, records, damage, layout):
    """Records of nested values (strings holding brackets, commas, quotes), some cut off or
    missing a closing bracket, one per line, indented or on one line: every intact record is
    read, whatever its neighbours' brackets do."""
    items = [{"id": i, **r} for i, r in enumerate(records)]
    texts = [json.dumps(item, indent=layout if layout == 2 else None) for item in items]
    broken = set()
    for i, where, cut in damage:
        if i < len(texts) and (cut or any(c in "}]" for c in texts[i])):
            text = damaged(texts[i], where, cut)
            try:
                json.loads(text)  # a bracket inside a string: still a record, not damage
            except ValueError:
                texts[i] = text
                broken.add(i)
    if layout == 2:
        text = "[\n" + ",\n".join("  " + t.replace("\n", "\n  ") for t in texts) + "\n]\n"
    else:
        text = one_line(texts) if layout else "[\n" + ",\n".join(texts) + "\n]\n"
    path = tmp_path_factory.mktemp("list") / "train.json"
    path.write_text(text)
    read = [item for _, _, item in read_records(path) if isinstance(item, dict)]
    assert [item for i, item in enumerate(items) if i not in broken and item not in read] == []


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


def test_by_default_an_image_of_more_pixels_than_pils_default_limit_is_refused_per_record(root):
    """The default data.max_image_pixels is PIL's MAX_IMAGE_PIXELS (89,478,485): an image just
    over it, which PIL itself would still open, is refused; one just under it is read."""
    bomb_png(root / "under.png", 9459, 9459)  # 89,472,681 pixels
    bomb_png(root / "over.png", 9459, 9460)  # 89,482,140 pixels
    records = [
        record(0, image="under.png", width=9459, height=9459),
        record(1, image="over.png", width=9459, height=9460),
    ]
    path = root / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    split = load_split(path, RefCOCO().build_sample, SPEC)
    assert [s.id for s in split.samples] == ["r0"]
    assert [e.message for e in split.errors] == [
        f"image {root / 'over.png'} has 9459x9460 pixels, more than the limit of 89478485 (data.max_image_pixels)"
    ]


def test_an_image_too_thin_for_the_models_pixel_limit_or_over_200_to_1_is_refused_per_record_saying_so(root):
    Image.new("RGB", (5000, 30)).save(root / "thin.png")  # qwen-vl-utils resizes it to 2884x0 at 50176 pixels
    Image.new("RGB", (6030, 30)).save(root / "wide.png")  # 201:1
    thin = record(1, image="thin.png", width=5000, height=30, solution=[10, 5, 200, 20])
    wide = record(2, image="wide.png", width=6030, height=30, solution=[10, 5, 200, 20])
    path = root / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [record(0), thin, wide]))
    split = load(path)
    assert [s.id for s in split.samples] == ["r0"]
    reasons = [(e.source.rsplit(":", 1)[1], e.message) for e in split.errors]
    assert reasons == [
        ("2", "ValueError: a 5000x30 image resizes to 2884x0 under max_pixels 50176 (smart_resize, as qwen-vl-utils): "
              "too thin for a side of 28 pixels"),
        ("3", "ValueError: absolute aspect ratio must be smaller than 200, got 201.0"),
    ]  # fmt: skip


@pytest.mark.parametrize(
    "content, expected",
    [
        (
            b'{"image": "ok.png", "problem": "a dict, not a list"}',
            "expected a JSON list of records, found one JSON object, with keys 'image', 'problem': another format",
        ),
        (  # JSON Lines named .json: renaming it is the fix
            b'{"image": "ok.png", "problem": "one"}\n{"image": "ok.png", "problem": "two"}\n',
            "found one JSON object per line (JSON Lines): name the file .jsonl",
        ),
        (  # a COCO instances file given to refcoco: never told to rename it
            b'{\n "images": [],\n "annotations": [],\n "categories": []\n}\n',
            "found one JSON object, with keys 'images', 'annotations', 'categories': another format",
        ),
        (b"id,image,problem\n0,a.png,q\n", "found 'id,image,problem\\n0,a'\n"),  # a CSV: its start, no hint
        (b"", "the file is empty"),
        (b"PAR1\0\x15\x04" + os.urandom(4096), "not a text file (it holds a NUL byte, byte 4 of the file)"),
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


def context(root, require_images: bool = True, index: int = 5, **media) -> RecordContext:
    return RecordContext("f.jsonl:7", index, root, SPEC, require_images, MediaRules(**media))


def test_a_boolean_is_no_number_where_a_record_key_wants_one(root):
    with pytest.raises(RecordError) as refused:
        context(root).get({"n": True}, "n", int, "a count")
    assert str(refused.value) == "f.jsonl:7: key 'n' must be a count, got bool True"


def test_a_wrong_value_is_quoted_in_full_up_to_60_characters_and_cut_with_dots_beyond(root):
    with pytest.raises(RecordError) as full:
        context(root).get({"n": "a" * 58}, "n", int, "a count")  # its repr: 60 characters
    assert full.value.message == f"key 'n' must be a count, got str '{'a' * 58}'"
    with pytest.raises(RecordError) as cut:
        context(root).get({"n": "a" * 59}, "n", int, "a count")  # its repr: 61 characters
    assert cut.value.message == f"key 'n' must be a count, got str '{'a' * 56}..."


@pytest.mark.parametrize("value, expected", [(0, "0"), ("", ""), (None, "5"), ("x", "x")])
def test_a_record_id_that_is_zero_or_empty_is_still_its_id_only_a_missing_one_is_its_position(root, value, expected):
    assert context(root, index=5).record_id({"id": value}) == expected
    assert context(root, index=5).record_id({}) == "5"


def test_a_path_outside_the_data_root_is_not_refused_when_no_image_is_read(root, tmp_path):
    assert context(root, require_images=False).resolve("../elsewhere.png") == root / "../elsewhere.png"
    with pytest.raises(RecordError, match="leads outside the data root"):
        context(root).resolve("../elsewhere.png")


def test_a_folder_vlrl_writes_itself_is_allowed_beside_the_data_root(root, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    Image.new("RGB", (30, 20)).save(cache / "img.png")
    assert context(root, written_here=(cache.resolve(),)).image(str(cache / "img.png")) == (
        str(cache / "img.png"),
        30,
        20,
    )
    with pytest.raises(RecordError, match="leads outside the data root"):
        context(root).image(str(cache / "img.png"))


def test_without_required_images_a_present_image_still_gives_its_own_size(root):
    stated = {"width": 50, "height": 40}
    assert context(root, require_images=False).image_with_size("ok.png", stated) == (str(root / "ok.png"), 100, 80)
    absent = context(root, require_images=False).image_with_size("gone.png", stated)
    assert absent == (str(root / "gone.png"), 50, 40)


def test_a_stated_width_of_zero_that_the_image_does_not_have_is_an_error(root):
    with pytest.raises(RecordError) as refused:
        context(root).image_as_stated("ok.png", {"width": 0})
    assert refused.value.message == f"key 'width' says 0 but image {root / 'ok.png'} has width 100"


def test_a_directory_given_as_data_file_is_named_a_directory(root):
    with pytest.raises(FileNotFoundError) as missing:
        read_data_text(root)
    assert str(missing.value) == f"data file not found: {root} (it is a directory)"


def test_a_byte_that_is_not_utf8_is_named_by_its_line_and_byte_offset(root):
    path = root / "train.json"
    path.write_bytes(b'[\n"a\xff"]')
    with pytest.raises(RecordError) as refused:
        read_data_text(path)
    assert str(refused.value) == f"{path}:2: not UTF-8 text (byte 4 of the file); expected JSON or JSON Lines"


def test_a_json_lines_line_that_is_not_text_is_that_records_error_unless_most_lines_are(root):
    path = root / "train.jsonl"
    good = [json.dumps(record(i)).encode() for i in range(3)]
    path.write_bytes(b"\xef\xbb\xbf" + b"\n".join([good[0], b"\xff\xfe", good[1], b"", b"a\0", good[2]]) + b"\n")
    read = [(source, item if isinstance(item, dict) else item.message) for source, _, item in read_records(path)]
    assert read == [
        (f"{path}:1", record(0)),
        (f"{path}:2", "not UTF-8 text (byte 0 of the line); expected a JSON object"),
        (f"{path}:3", record(1)),
        (f"{path}:5", "not a text line (it holds a NUL byte, byte 1 of the line); expected a JSON object"),
        (f"{path}:6", record(2)),
    ]
    path.write_bytes(b"\n".join([good[0], b"\xff", b"\x00"]))  # most lines are not text: a binary file
    with pytest.raises(RecordError) as refused:
        read_records(path)
    assert (
        str(refused.value)
        == f"{path}:2: not UTF-8 text (byte {len(good[0]) + 1} of the file); expected JSON or JSON Lines"
    )


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_a_byte_order_mark_at_the_start_is_dropped(root, suffix):
    path = root / f"train{suffix}"
    body = "[" + json.dumps(record(0)) + "]" if suffix == ".json" else json.dumps(record(0)) + "\n"
    path.write_bytes(b"\xef\xbb\xbf" + body.encode())
    assert [item for _, _, item in read_records(path)] == [record(0)]


def test_json_lines_skip_whitespace_only_lines_and_count_every_other_line_as_a_record(root):
    path = root / "train.jsonl"
    path.write_text(f"{json.dumps(record(0))}\n   \t\n[1, 2]\n\n{json.dumps(record(1))}\n")
    read = [
        (source, index, item if isinstance(item, dict) else item.message) for source, index, item in read_records(path)
    ]
    assert read == [
        (f"{path}:1", 0, record(0)),
        (f"{path}:3", 1, "record must be a JSON object, got list"),
        (f"{path}:5", 2, record(1)),
    ]


@pytest.mark.parametrize(
    "text, line, message",
    [
        ("", 1, "the file is empty; expected a JSON list of records"),
        ("\n\n  \n", 1, "the file is empty; expected a JSON list of records"),
        ('\n\n  "words"\n', 3, "expected a JSON list of records, found '\"words\"\\n'"),
        ('{"a": 1}\n[1]\n', 1, "expected a JSON list of records, found a JSON object"),
        (
            "{}",
            1,
            "expected a JSON list of records, found one JSON object, with keys (none): another format than this task reads",
        ),
        (
            json.dumps({k: 1 for k in "abcdef"}),
            1,
            "expected a JSON list of records, found one JSON object, with keys 'a', 'b', 'c', 'd', 'e', 'f': another "
            "format than this task reads",
        ),
        (
            json.dumps({k: 1 for k in "abcdefg"}),
            1,
            "expected a JSON list of records, found one JSON object, with keys 'a', 'b', 'c', 'd', 'e', 'f', ...: "
            "another format than this task reads",
        ),
        (
            json.dumps({"k" * 50: 1}),
            1,
            f"expected a JSON list of records, found one JSON object, with keys '{'k' * 39}: another format than this "
            "task reads",
        ),
    ],
    ids=[
        "empty",
        "only whitespace",
        "a string on line 3",
        "an object then a list",
        "{}",
        "6 keys",
        "7 keys",
        "a long key",
    ],
)
def test_a_json_file_that_is_no_list_is_refused_naming_its_line_and_what_it_holds(root, text, line, message):
    path = root / "train.json"
    path.write_text(text)
    with pytest.raises(RecordError) as refused:
        read_records(path)
    assert (refused.value.source, refused.value.message) == (f"{path}:{line}", message)


def test_a_json_object_longer_than_the_keys_read_limit_is_not_parsed_to_name_its_keys(root, monkeypatch):
    monkeypatch.setattr(records, "KEYS_READ_MAX_CHARS", 10)
    path = root / "train.json"
    path.write_text('{\n "images": [],\n "annotations": []\n}\n')
    with pytest.raises(RecordError) as refused:
        read_records(path)
    assert refused.value.message == "expected a JSON list of records, found a JSON object"


def reads(path) -> list[tuple[str, int, object]]:
    """What read_records gives: (source with the path as P, index, the record's id or the error's message)."""
    return [
        (source.replace(str(path), "P"), index, item["id"] if isinstance(item, dict) else item.message)
        for source, index, item in read_records(path)
    ]


R0, R1, R2, R3 = (json.dumps(record(i)) for i in range(4))
SKIPPED = "expected ',' or ']' after a record; the text up to the next record was skipped"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("[]\n", []),
        ("[\t" + R0 + ",\t" + R1 + "\t]", [("P:1 (record 0)", 0, "r0"), ("P:1 (record 1)", 1, "r1")]),
        (
            "[\n" + R0 + ",\n" + R1,
            [("P:2", 0, "r0"), ("P:3", 1, "r1"), ("P:3", 2, "the list never closes (no ']'): the file is cut short")],
        ),
        ("[\n" + R0 + "\njunk, " + R1 + "\n]\n", [("P:2", 0, "r0"), ("P:3", 1, SKIPPED), ("P:3", 1, "r1")]),
        ("[\n" + R0 + " junk]\n", [("P:2", 0, "r0"), ("P:2", 1, SKIPPED)]),
        ("[\n" + R0 + "},\n" + R1 + "\n]\n", [("P:2", 0, "r0"), ("P:2", 1, SKIPPED), ("P:3", 1, "r1")]),
        (
            "[\n" + R0 + ",\n{'id': 1},\n" + R1 + "\n]\n",
            [
                ("P:2", 0, "r0"),
                ("P:3", 1, "invalid JSON: Expecting property name enclosed in double quotes (line 3, column 2)"),
                ("P:4", 2, "r1"),
            ],
        ),
        (
            "[\n" + R0 + " x[\n" + R1 + " oops\n" + R2 + ",\n" + R3 + "\n]\n",
            [
                ("P:2", 0, "r0"),
                (
                    "P:2",
                    1,
                    "expected ',' or ']' after a record: skipped lines 2-3 (1 record); reading resumed at line 4",
                ),
                ("P:4", 2, "r2"),
                ("P:5", 3, "r3"),
            ],
        ),
        (
            "[\n\t" + R0 + ",\n\t" + text_of(CUT) + ",\n\t" + R1 + "\n]\n",
            [
                ("P:2", 0, "r0"),
                (
                    "P:3",
                    1,
                    "invalid JSON: Expecting ',' delimiter (line 6, column 1); the record never closes (its brackets do "
                    "not balance): skipped line 3, columns 2-76 (1 record); reading resumed at line 4",
                ),
                ("P:4", 2, "r1"),
            ],
        ),
        (
            "[\n" + R0 + ",\n" + text_of(CUT) + "\n" + text_of(CUT) + "\n" + R1 + "\n]\n",
            [
                ("P:2", 0, "r0"),
                (
                    "P:3",
                    1,
                    "invalid JSON: Expecting ',' delimiter (line 4, column 1); the record never closes (its brackets do "
                    "not balance): skipped lines 3-4 (2 records); reading resumed at line 5",
                ),
                ("P:5", 3, "r1"),
            ],
        ),
    ],
    ids=[
        "an empty list",
        "tabs between records",
        "no closing bracket after a record's line",
        "junk before a record on its line",
        "junk before the closing bracket",
        "an extra closing brace",
        "single quotes, the next record right after the comma",
        "unbalanced junk passing over a record that is no list element",
        "a cut-off record in a tab-indented list",
        "two cut-off records in a row",
    ],
)
def test_each_list_flaw_is_reported_at_its_line_with_the_records_index_kept(root, text, expected):
    path = root / "train.json"
    path.write_text(text)
    assert reads(path) == expected


def test_a_one_line_list_resumes_at_a_record_with_the_cut_records_first_key_not_at_a_nested_object(root):
    path = root / "train.json"
    path.write_text("[" + R0 + ", " + text_of(CUT) + ', {"x": 1}, ' + R1 + "]")
    assert [item["id"] for _, _, item in read_records(path) if isinstance(item, dict)] == ["r0", "r1"]


def test_one_record_after_the_lists_end_is_named_in_the_singular(root):
    path = root / "train.json"
    path.write_text("[\n" + R0 + "\n]\n" + R1 + "\n")
    with pytest.raises(RecordError) as refused:
        list(read_records(path))
    assert str(refused.value) == (
        f"{path}:3: the list closes here, but 1 record follows it (line 4 on): a stray ']', or two lists in one "
        "file? Fix the file"
    )
