"""A rerun never drops a changed setting silently, and config.yaml states only what was used."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import copy_run, tiny_run

from vlrl.cli import main
from vlrl.config import load_config


def metrics_rows(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().split("\n") if line]


def test_a_changed_setting_applies_from_the_resumed_step_and_is_recorded(tmp_path, finished_run, capsys):
    run_dir, overrides = copy_run(finished_run, tmp_path / "run", **{"trainer.steps": 3, "trainer.lr": 5e-4})
    assert main(["train", *overrides]) == 0
    assert "changed from step 3: trainer.lr: 0.001 -> 0.0005" in capsys.readouterr().out
    history = [json.loads(line) for line in (run_dir / "config_history.jsonl").read_text().splitlines()]
    changes = {"trainer.lr": {"from": 0.001, "to": 0.0005}, "trainer.steps": {"from": 2, "to": 3}}
    assert history == [{"step": 3, "changes": changes, "data_changed": {}}]
    assert [row["lr"] for row in metrics_rows(run_dir)] == [0.001, 0.001, 0.0005]  # used from step 3 on
    text = (run_dir / "config.yaml").read_text()
    assert text.startswith("# the settings in effect from step 3")
    assert yaml.safe_load(text)["trainer"]["lr"] == 0.0005


@pytest.mark.parametrize(
    "key, value", [("trainer.seed", 7), ("model.path", "tiny:qwen2_vl"), ("trainer.parallel", "fsdp2")]
)
def test_a_setting_a_resume_cannot_honour_is_refused_by_name(tmp_path, finished_run, capsys, key, value):
    run_dir, overrides = copy_run(finished_run, tmp_path / "run", **{"trainer.steps": 3, key: value})
    before = (run_dir / "config.yaml").read_text()
    assert main(["train", *overrides]) == 2
    out = capsys.readouterr().out
    assert out.startswith("error:") and f"config: {key} is" in out and "another trainer.output_dir" in out
    assert (run_dir / "config.yaml").read_text() == before  # it states what the run used, still


def test_resuming_after_the_data_changed_warns_and_records_it(tmp_path, finished_run, capsys):
    data = tmp_path / "data" / "train.json"
    data.parent.mkdir()
    original = finished_run[1]
    source = next(o.split("=", 1)[1] for o in original if o.startswith("data.train="))
    records = json.loads(Path(source).read_text())
    records[0]["problem"] += " (edited)"
    data.write_text(json.dumps(records))
    changes = {"trainer.steps": 3, "data.train": data, "data.image_root": Path(source).parent}
    run_dir, overrides = copy_run(finished_run, tmp_path / "run", **changes)
    assert main(["train", *overrides]) == 0
    out = capsys.readouterr().out
    assert f"the training data {data} changed since the checkpoint of step 2" in out
    history = json.loads((run_dir / "config_history.jsonl").read_text())
    assert history["step"] == 3 and str(data) in history["data_changed"] and "data.train" in history["changes"]


def test_resuming_after_records_were_added_or_removed_is_refused(tmp_path, finished_run, capsys):
    source = Path(next(o.split("=", 1)[1] for o in finished_run[1] if o.startswith("data.train=")))
    data = tmp_path / "fewer.json"
    data.write_text(json.dumps(json.loads(source.read_text())[:-1]))
    changes = {"trainer.steps": 3, "data.train": data, "data.image_root": source.parent}
    _run_dir, overrides = copy_run(finished_run, tmp_path / "run", **changes)
    assert main(["train", *overrides]) == 2
    out = capsys.readouterr().out
    assert out.startswith("error: cannot resume from") and "had 12 samples" in out and "this run has 11" in out


def test_a_checkpoint_of_the_other_command_is_not_continued(tmp_path, finished_run, capsys):
    checkpoint = finished_run[0] / "checkpoints" / "step-0000002"
    _, overrides = copy_run(finished_run, tmp_path / "run")
    assert main(["sft", *overrides, f"sft.resume={checkpoint}", f"sft.output_dir={tmp_path / 'sft'}"]) == 2
    assert (
        f"was written by `vlrl train`, so sft.resume cannot continue it; start a new run from its weights with model.path={checkpoint}"
        in capsys.readouterr().out
    )


def test_config_yaml_holds_only_the_sections_the_command_used(tmp_path, rec_data, tiny_qwen25, finished_run):
    from vlrl.trainer.sft import train_sft

    run_dir = tmp_path / "sft"
    train_sft(load_config(None, tiny_run(run_dir, rec_data, "sft", **{"sft.steps": 1})))
    # rollout and eval: how `vlrl eval --model` evaluates the run's checkpoints (history.USED_SECTIONS)
    assert set(yaml.safe_load((run_dir / "config.yaml").read_text())) == {
        "model",
        "data",
        "task",
        "mixture",
        "sft",
        "rollout",
        "eval",
    }
    rl = yaml.safe_load((finished_run[0] / "config.yaml").read_text())
    assert "sft" not in rl and {"trainer", "algo", "rollout"} <= set(rl)


def test_rerunning_a_finished_run_says_so_before_loading_anything(tmp_path, finished_run, capsys, monkeypatch):
    run_dir, overrides = copy_run(finished_run, tmp_path / "run")  # trainer.steps=2, checkpointed at step 2
    before = (run_dir / "metrics.jsonl").read_text()

    def nothing(*args, **kwargs):
        raise AssertionError("a finished run loaded its data or model again")

    monkeypatch.setattr("vlrl.trainer.rl.task_sources", nothing)
    monkeypatch.setattr("vlrl.trainer.run.load_model", nothing)
    assert main(["train", *overrides]) == 0
    out = capsys.readouterr().out
    checkpoint = run_dir / "checkpoints" / "step-0000002"
    assert out.startswith(f"{run_dir} already finished: its checkpoint {checkpoint} is step 2 of trainer.steps=2")
    assert "raise trainer.steps to go on" in out and "resumed" not in out
    assert f"checkpoint:    {checkpoint}" in out
    assert (run_dir / "metrics.jsonl").read_text() == before
