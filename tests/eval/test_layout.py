"""The output folder of `vlrl eval`: what a re-evaluation into it leaves there."""

from __future__ import annotations

import json

import pytest

from vlrl.config import Config
from vlrl.eval.layout import TaskResult, read_metrics, samples_path, write_outputs


def result(task: str, score: float, responses: list[object]) -> TaskResult:
    records = [
        {"doc_id": i, "target": "t", "resps": [r], "filtered_resps": [r], "id": str(i)} for i, r in enumerate(responses)
    ]
    return TaskResult(task, "eval", {"accuracy": score}, records, seconds=1.0)


def test_a_reevaluation_of_fewer_tasks_leaves_no_samples_of_the_tasks_it_left_out(tmp_path):
    write_outputs(tmp_path, [result("counting", 0.5, ["1"]), result("refcoco", 0.25, ["2"])], "m", Config())
    write_outputs(tmp_path, [result("counting", 0.75, ["3"])], "m", Config())

    assert read_metrics(tmp_path) == {"counting": {"accuracy": 0.75}}
    assert not samples_path(tmp_path, "refcoco").exists()
    assert json.loads(samples_path(tmp_path, "counting").read_text())["filtered_resps"] == "3"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json", "samples_counting.jsonl"]


def test_an_evaluation_that_fails_while_writing_leaves_no_results_of_the_one_before(tmp_path):
    write_outputs(tmp_path, [result("counting", 0.5, ["1"])], "m", Config())

    class Unwritable:
        def __str__(self):
            raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        write_outputs(tmp_path, [result("counting", 0.75, [Unwritable()])], "m", Config())
    assert not (tmp_path / "results.json").exists()  # it would describe samples that are no longer beside it
    assert not any(p.name.endswith(".partial") for p in tmp_path.iterdir())


def test_an_earlier_results_json_from_elsewhere_removes_nothing_outside_its_folder(tmp_path):
    folder = tmp_path / "out"
    (folder / "samples_").mkdir(parents=True)  # so that samples_/../.. is a path the system follows
    victim = tmp_path / "victim.jsonl"
    victim.write_text("keep\n")
    (folder / "results.json").write_text(json.dumps({"results": {"/../../victim": {}, "\\..\\victim": {}}}))

    write_outputs(folder, [result("counting", 0.5, ["1"])], "m", Config())

    assert victim.read_text() == "keep\n"
    assert read_metrics(folder) == {"counting": {"accuracy": 0.5}}
