"""The output folder of `vlrl eval`: what a re-evaluation into it leaves there."""

from __future__ import annotations

import json

import pytest

import vlrl
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


def test_results_json_holds_lmms_eval_keys_with_exact_values_and_the_first_twenty_skipped_reasons(tmp_path):
    records = [
        {
            "doc_id": 0,
            "id": "a",
            "target": [0.5, 1],
            "resps": ["<think>x</think> 3"],
            "filtered_resps": ["3"],
            "acc": 1.0,
        },
        {"doc_id": 1, "id": "b", "target": 7, "resps": ["4"], "filtered_resps": ["4"], "acc": 0.0},
        {"doc_id": 2, "id": "c", "target": "t", "resps": ["p", "q"], "filtered_resps": ["p", "q"], "acc": 0.0},
    ]
    skipped = [f"eval.json:{i}: no image" for i in range(25)]
    counted = TaskResult(
        "counting", "eval.json", {"acc": 1 / 3, "reward": 0.5}, records, 7.0, {"task": "counting"}, skipped
    )
    plain = TaskResult("refcoco", "val.json", {"acc@0.5": 0.25}, [records[1]], 0.0004)
    write_outputs(tmp_path, [counted, plain], "my/model", Config())

    results = json.loads((tmp_path / "results.json").read_text())
    assert results["results"] == {
        "counting": {"alias": "counting", "acc,none": 1 / 3, "acc_stderr,none": "N/A", "reward,none": 0.5,
                     "reward_stderr,none": "N/A"},
        "refcoco": {"alias": "refcoco", "acc@0.5,none": 0.25, "acc@0.5_stderr,none": "N/A"},
    }  # fmt: skip
    assert results["n-samples"] == {
        "counting": {"original": 28, "effective": 3},
        "refcoco": {"original": 1, "effective": 1},
    }
    assert results["configs"] == {"counting": {"task": "counting"}, "refcoco": {}}
    assert results["n-shot"] == {"counting": 0, "refcoco": 0}
    assert results["group_subtasks"] == {"counting": [], "refcoco": []}
    assert results["versions"] == {"counting": vlrl.__version__, "refcoco": vlrl.__version__}
    assert results["model_name"] == "my/model"
    assert results["total_evaluation_time_seconds"] == "7.0"  # a string, as lmms-eval writes it
    assert results["samples_per_second"] == {"counting": 0.429, "refcoco": 2500.0}  # rounded to 3 places
    assert results["skipped"] == {"counting": skipped[:20]}  # none for a task that skipped nothing
    lines = [json.loads(line) for line in samples_path(tmp_path, "counting").read_text().splitlines()]
    assert lines == [
        {
            "doc_id": 0,
            "id": "a",
            "target": "[0.5, 1]",
            "resps": "<think>x</think> 3",
            "filtered_resps": "3",
            "acc": 1.0,
        },
        {"doc_id": 1, "id": "b", "target": "7", "filtered_resps": "4", "acc": 0.0},  # resps dropped: the same
        {"doc_id": 2, "id": "c", "target": "t", "filtered_resps": ["p", "q"], "acc": 0.0},  # lists kept whole
    ]
    assert read_metrics(tmp_path) == {"counting": {"acc": 1 / 3, "reward": 0.5}, "refcoco": {"acc@0.5": 0.25}}


def test_read_metrics_keeps_numbers_and_leaves_out_errors_aliases_and_values_that_are_not_numbers(tmp_path):
    (tmp_path / "results.json").write_text(json.dumps({"results": {
        "mathvista": {"alias": "mathvista", "llm_as_judge_eval,none": None, "llm_as_judge_eval_stderr,none": "N/A",
                      "submission,none": "file.json", "acc,flexible": 0.5, "acc_stderr,flexible": 0.1, "count,none": 3},
        "group": "not a task",
    }}))  # fmt: skip
    assert read_metrics(tmp_path) == {"mathvista": {"acc,flexible": 0.5, "count": 3}}


def test_a_metric_under_two_lmms_eval_filters_is_read_as_two_metrics(tmp_path):
    """lmms-eval names a value `metric,filter`; the filter `none` (vlrl's) is left out of the name."""
    (tmp_path / "results.json").write_text(json.dumps({"results": {"gsm8k": {
        "exact_match,strict-match": 0.4, "exact_match,flexible-extract": 0.7, "exact_match_stderr,strict-match": 0.1,
        "acc,none": 0.5,
    }}}))  # fmt: skip
    assert read_metrics(tmp_path) == {
        "gsm8k": {"exact_match,strict-match": 0.4, "exact_match,flexible-extract": 0.7, "acc": 0.5}
    }
