"""`vlrl data validate` reports every problem of a dataset before a run, and exits non-zero if any."""

from __future__ import annotations

import json

import numpy as np
from PIL import Image
from test_bad_media import truncated_jpeg

from vlrl.cli import main


def test_every_problem_is_reported_with_a_summary_and_status_1(tmp_path, capsys):
    root = tmp_path / "images"
    root.mkdir()
    Image.fromarray(np.zeros((80, 100, 3), dtype=np.uint8)).save(root / "ok.png")
    truncated_jpeg(root / "cut.jpg", 100, 80)

    def record(i, **changes):
        return {
            "id": f"r{i}",
            "image": "ok.png",
            "problem": f"q{i}",
            "solution": [1, 1, 20, 20],
            "width": 100,
            "height": 80,
            **changes,
        }

    records = [
        record(0),
        record(1, image="cut.jpg"),  # undecodable: only a full decode finds it
        record(2, image="../escape.png"),  # leaves the data root
        record(3, width=640),  # the record's size disagrees with the file's
        record(0, problem="another"),  # an id again
        record(5, problem="q0"),  # the same image and question as r0
        record(6, solution="nowhere"),  # a bad field
        record(7, problem="q7 <|image_pad|>"),  # a vision token in the text: the processor refuses the prompt
    ]
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    status = main(
        ["data", "validate", "--task", "refcoco", str(data), "--image-root", str(root), "trainer.progress=false"]
    )
    out = capsys.readouterr().out
    assert status == 1
    for line, what in [
        (2, "cannot read"),
        (3, "path '../escape.png' leads outside the data root"),
        (4, "key 'width' says 640"),
        (5, "id 'r0' repeats the record at"),
        (6, "same media and question as the record at"),
        (7, "key 'solution'"),
        (8, "its prompt's text holds <|image_pad|>, which the processor refuses"),
    ]:
        assert f"{data}:{line}: {what}" in " ".join(out.split()), (line, out)
    assert f"{data}: 8 records, 3 usable; 7 problems" in out


def test_a_clean_dataset_passes(tmp_path, rec_data, capsys):
    assert main(["data", "validate", "--task", "refcoco", str(rec_data), "trainer.progress=false"]) == 0
    assert "12 records, all usable" in capsys.readouterr().out


def test_a_file_of_no_records_fails_as_the_run_would(tmp_path, capsys):
    for name, text in [("empty.jsonl", ""), ("blank.jsonl", "\n\n"), ("none.json", "[]")]:
        data = tmp_path / name
        data.write_text(text)
        assert main(["data", "validate", "--task", "refcoco", str(data), "trainer.progress=false"]) == 1
        assert f"{data}: no records (a run refuses it: no usable records)" in capsys.readouterr().out


def test_a_coco_file_is_counted_in_images_whatever_its_bad_annotations_and_categories(tmp_path, capsys):
    from data_prep.detection import write_synthetic_coco

    data = write_synthetic_coco(tmp_path / "instances.json", 4, seed=0, empty_fraction=0.0)
    coco = json.loads(data.read_text())
    first = coco["images"][0]["id"]
    coco["annotations"] += [{"id": 900 + k, "image_id": first, "category_id": 1, "bbox": "wide"} for k in range(2)]
    coco["categories"].append({"id": "x", "name": "nameless"})
    data.write_text(json.dumps(coco, indent=1))
    assert main(["data", "validate", "--task", "detection", str(data), "trainer.progress=false"]) == 1
    # two bad annotations (their image skipped) and a bad category: 4 images, 3 usable, 3 problems
    assert f"{data}: 4 images, 3 usable; 3 problems (3 bad records)" in capsys.readouterr().out


def test_validation_reads_every_record_whatever_the_runs_limit_and_strictness(rec_data, tmp_path, capsys):
    command = ["data", "validate", "--task", "refcoco", str(rec_data), "trainer.progress=false"]
    assert main([*command, "data.limit=3", "data.strict=true"]) == 0
    assert f"{rec_data}: 12 records, all usable" in capsys.readouterr().out
    records = json.loads(rec_data.read_text())
    records[1]["solution"] = "nowhere"
    records[5]["solution"] = "nowhere"
    data = tmp_path / "two_bad.json"
    data.write_text(json.dumps(records))
    command = ["data", "validate", "--task", "refcoco", str(data), "--image-root", str(rec_data.parent)]
    assert main([*command, "trainer.progress=false", "data.limit=3", "data.strict=true"]) == 1
    assert f"{data}: 12 records, 10 usable; 2 problems (2 bad records)" in capsys.readouterr().out


def test_an_id_repeated_twice_names_the_first_record_each_time(rec_data, tmp_path, capsys):
    records = json.loads(rec_data.read_text())
    for i in (0, 4, 7):
        records[i]["id"] = "dup"
    data = tmp_path / "repeats.json"
    data.write_text(json.dumps(records, indent=None))
    command = ["data", "validate", "--task", "refcoco", str(data), "--image-root", str(rec_data.parent)]
    assert main([*command, "trainer.progress=false"]) == 1
    out = " ".join(capsys.readouterr().out.split())
    for i in (4, 7):
        assert f"{data}:1 (record {i}): id 'dup' repeats the record at {data}:1 (record 0)" in out, out
