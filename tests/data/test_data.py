"""Bad data records are reported with file and line, and skipped (default) or fatal (strict)."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from tasks.refcoco import RefCOCO
from vlrl.cli import main
from vlrl.data.records import FrameSpec, RecordError, Split, load_split
from vlrl.tasking.registry import builtin_training_tasks, task_class

SPEC = FrameSpec("absolute", 3136, 50176)


def _record(**changes):
    record = {"image": "ok.png", "problem": "find it", "solution": [10, 10, 50, 40], "width": 100, "height": 80}
    record.update(changes)
    return {k: v for k, v in record.items() if v is not None}


@pytest.fixture
def folder(tmp_path):
    Image.new("RGB", (100, 80), (1, 2, 3)).save(tmp_path / "ok.png")
    (tmp_path / "broken.png").write_bytes(b"not a png at all")
    return tmp_path


def _load(path, strict=False):
    return load_split(path, RefCOCO().build_sample, SPEC, strict=strict)


def test_each_bad_record_is_reported_with_its_line_and_skipped(folder):
    lines = [
        json.dumps(_record()),
        json.dumps(_record(image="missing.png")),
        json.dumps(_record(image="broken.png")),
        json.dumps(_record(solution=[10, 10, 500, 40])),
        json.dumps(_record(solution="left corner")),
        json.dumps(_record(problem=None)),
        '{"image": "ok.png", "problem": ',
        json.dumps(_record(problem=7)),
        json.dumps(_record(width=99)),
        json.dumps([1, 2]),
        json.dumps(_record(problem="the \ud800 square")),  # JSON's escape of half a UTF-16 pair
        json.dumps(_record(solution=[10, 10, 10**400, 40])),
        json.dumps(_record(id="last")),
    ]
    path = folder / "data.jsonl"
    path.write_text("\n".join(lines) + "\n")
    split = _load(path)
    assert [s.id for s in split.samples] == ["0", "last"]  # ids: the record's id, else its position
    reasons = {err.source: err.message for err in split.errors}
    assert len(split.errors) == 11
    assert "image not found" in reasons[f"{path}:2"]
    assert "image unreadable" in reasons[f"{path}:3"]
    assert "outside the 100x80 image" in reasons[f"{path}:4"]
    assert "key 'solution' must be 4 numbers" in reasons[f"{path}:5"]
    assert "missing key 'problem'" in reasons[f"{path}:6"]
    assert "invalid JSON" in reasons[f"{path}:7"]
    assert "key 'problem' must be the question text, got int" in reasons[f"{path}:8"]
    assert "key 'width' says 99" in reasons[f"{path}:9"]
    assert "must be a JSON object" in reasons[f"{path}:10"]
    assert reasons[f"{path}:11"] == "key 'problem' holds '\\ud800', half of a UTF-16 pair: not text"
    assert reasons[f"{path}:12"].startswith("key 'solution' has a coordinate no float holds: [10, 10, 1000")


def test_strict_mode_stops_at_the_first_bad_record(folder):
    path = folder / "data.jsonl"
    path.write_text(json.dumps(_record()) + "\n" + json.dumps(_record(image="missing.png")) + "\n")
    with pytest.raises(RecordError, match=r"data.jsonl:2: image not found"):
        _load(path, strict=True)


def test_json_list_records_carry_the_line_they_start_on(folder):
    path = folder / "data.json"
    path.write_text(json.dumps([_record(), _record(image="missing.png"), _record()], indent=1))
    split = _load(path)
    assert len(split.samples) == 2
    (error,) = split.errors
    first_lines = [i + 1 for i, line in enumerate(path.read_text().splitlines()) if line == " {"]
    assert [s.source for s in split.samples] == [f"{path}:{first_lines[0]}", f"{path}:{first_lines[2]}"]
    assert error.source == f"{path}:{first_lines[1]}"


def test_a_json_list_that_breaks_off_keeps_the_records_before_the_break(folder):
    path = folder / "data.json"
    path.write_text("[\n" + json.dumps(_record()) + ",\n" + json.dumps(_record()) + ",\n{broken\n")
    split = _load(path)
    assert len(split.samples) == 2
    assert split.errors[0].source == f"{path}:4"
    with pytest.raises(RecordError):
        _load(path, strict=True)


def test_scoring_without_images_trusts_the_recorded_size(folder):
    path = folder / "data.jsonl"
    path.write_text(json.dumps(_record(image="not-here.png")) + "\n")
    split = load_split(path, RefCOCO().build_sample, SPEC, require_images=False)
    assert len(split.samples) == 1 and split.samples[0].frame.width == 100


def test_a_recorded_size_the_image_does_not_have_is_named_as_written(folder):
    path = folder / "data.jsonl"
    path.write_text(json.dumps(_record(width="100")) + "\n" + json.dumps(_record(height=81)) + "\n")
    split = load_split(path, RefCOCO().build_sample, SPEC)
    assert not split.samples
    assert [e.message.split(" but ")[0] for e in split.errors] == ["key 'width' says '100'", "key 'height' says 81"]


@pytest.mark.parametrize("size", [{"width": 0}, {"height": -80}, {"width": True}, {"width": 100.0}])
def test_a_recorded_size_that_is_no_image_size_stands_for_nothing(folder, size):
    path = folder / "data.jsonl"
    path.write_text(json.dumps(_record(image="not-here.png", **size)) + "\n")
    split = load_split(path, RefCOCO().build_sample, SPEC, require_images=False)
    assert not split.samples and "image not found" in split.errors[0].message


def test_synthetic_data_follows_data_synthetic_seed_not_the_training_seed(tmp_path):
    from vlrl.config import load_config
    from vlrl.tasking.registry import make_task
    from vlrl.tasking.sources import load_task_split

    def written(name: str, *extra: str) -> list[dict]:
        path = tmp_path / name / "train.json"
        cfg = load_config(None, [f"data.train={path}", "data.synthetic=true", "data.synthetic_train_size=4", *extra])
        load_task_split(make_task(cfg.task), cfg, "train")
        return [{k: v for k, v in r.items() if k != "image"} for r in json.loads(path.read_text())]

    base = written("a", "trainer.seed=1")
    assert written("b", "trainer.seed=2") == base
    assert written("c", "trainer.seed=1", "data.synthetic_seed=5") != base


def test_synthetic_data_already_written_at_another_size_is_read_and_said(tmp_path):
    """data.synthetic writes only a missing file: one written at another size is read as it is,
    and the console says so (a run asked for 8 records would otherwise train on 4 unaware)."""
    from rich.console import Console

    from vlrl.config import load_config
    from vlrl.tasking.registry import make_task
    from vlrl.tasking.sources import load_task_split

    path = tmp_path / "train.json"

    def read(size: int, *extra: str) -> tuple[int, str]:
        cfg = load_config(
            None, [f"data.train={path}", "data.synthetic=true", f"data.synthetic_train_size={size}", *extra]
        )
        console = Console(record=True, width=400)
        split = load_task_split(make_task(cfg.task), cfg, "train", console)
        return len(split.samples), console.export_text()

    assert read(4) == (4, f"wrote synthetic refcoco train data: {path} (4 records)\n")
    assert read(4) == (4, "")
    assert read(8) == (
        4,
        f"{path} exists, so data.synthetic read it: 4 records, not data.synthetic_train_size=8 (delete it to write a new one)\n",
    )
    assert read(4, "data.limit=2") == (2, "")  # data.limit stopped reading: the file's size is not known
    assert read(8, "data.limit=6")[1].startswith(f"{path} exists, so data.synthetic read it: 4 records")


@pytest.mark.parametrize("name", sorted(builtin_training_tasks()))
@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_data_synth_writes_the_format_its_file_name_says(name, suffix, tmp_path, capsys):
    out = tmp_path / f"d{suffix}"
    code = main(["data", "synth", "--task", name, "--out", str(out), "--size", "2"])
    printed = capsys.readouterr().out
    if name == "detection" and suffix == ".jsonl":  # COCO instances: one object, not records
        assert code == 2 and "must end in .json" in printed and not out.exists()
        return
    assert code == 0, printed
    text = out.read_text()
    if suffix == ".jsonl":
        assert [type(json.loads(line)) for line in text.splitlines()] == [dict, dict]
    else:
        assert isinstance(json.loads(text), (list, dict))
    split = task_class(name)().load(out, FrameSpec("absolute", 3136, 50176))
    assert len(split.samples) >= 1 and not split.errors  # what vlrl wrote, vlrl reads


def test_data_synth_replaces_no_file_that_is_there(tmp_path, capsys):
    mine = tmp_path / "my_rec.json"
    mine.write_text("[]")
    assert main(["data", "synth", "--task", "refcoco", "--out", str(mine), "--size", "2"]) == 2
    assert f"{mine} exists: vlrl data synth writes a new data file" in capsys.readouterr().out
    assert mine.read_text() == "[]" and list(tmp_path.iterdir()) == [mine]


def test_data_synth_refuses_a_file_name_of_no_data_format(tmp_path, capsys):
    assert main(["data", "synth", "--task", "jigsaw", "--out", str(tmp_path / "d.txt"), "--size", "2"]) == 2
    assert f"{tmp_path / 'd.txt'}: a data file's name ends in .json or .jsonl" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []  # nothing written, not even the images


def test_a_limit_stops_reading_once_that_many_samples_are_read(folder):
    path = folder / "data.jsonl"
    path.write_text("".join(json.dumps(_record(id=f"r{i}")) + "\n" for i in range(4)))
    split = load_split(path, RefCOCO().build_sample, SPEC, limit=2)
    assert [s.id for s in split.samples] == ["r0", "r1"]


def test_images_are_found_under_the_image_root_when_one_is_given(folder, tmp_path_factory):
    data = tmp_path_factory.mktemp("elsewhere") / "data.jsonl"
    data.write_text(json.dumps(_record()) + "\n")
    split = load_split(data, RefCOCO().build_sample, SPEC, image_root=folder)
    assert not split.errors and [s.source for s in split.samples] == [f"{data}:1"]
    assert "image not found" in load_split(data, RefCOCO().build_sample, SPEC).errors[0].message


def test_a_splits_record_count_is_what_it_says_it_holds_else_its_samples_and_errors():
    assert Split("a.json", unit="images", held=7).records == 7
    assert Split("a.json", errors=[RecordError("a.json:1", "bad")]).records == 1


def test_a_jsonlines_file_is_not_read_as_json_lines_but_refused_with_the_hint_to_name_it_jsonl(folder):
    """Records are a .json list or .jsonl lines (docs/architecture.md); any other name is read as
    a JSON list, and JSON Lines under it are refused whole, saying the fix."""
    path = folder / "data.jsonlines"
    path.write_text("".join(json.dumps(_record(id=f"r{i}")) + "\n" for i in range(2)))
    with pytest.raises(RecordError) as caught:
        _load(path)
    assert str(caught.value) == (
        f"{path}:1: expected a JSON list of records, found one JSON object per line (JSON Lines): name the file .jsonl"
    )
    renamed = path.rename(folder / "data.jsonl")
    assert [s.id for s in _load(renamed).samples] == ["r0", "r1"]
