"""A rerun never drops a changed setting silently, and config.yaml states only what was used."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import copy_run, tiny_run

from vlrl.cli import main
from vlrl.config import load_config
from vlrl.trainer.run import resume_hint


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
    "key, value",
    [
        ("trainer.seed", 7),
        ("model.path", "tiny:qwen2_vl"),
        ("trainer.parallel", "fsdp2"),
        ("model.freeze_vision", True),
    ],
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


def test_a_resume_to_more_steps_under_a_decaying_schedule_is_told_the_lr_it_resumes_with(
    tmp_path, finished_run, capsys
):
    _, overrides = copy_run(finished_run, tmp_path / "run", **{"trainer.steps": 3, "trainer.lr_schedule": "linear"})
    assert main(["train", *overrides]) == 0
    assert "trainer.steps changed from 2 to 3: the linear lr schedule now spans the new total, so step 3" in (
        capsys.readouterr().out
    )


def test_resuming_after_records_were_added_or_removed_is_refused(tmp_path, finished_run, capsys):
    source = Path(next(o.split("=", 1)[1] for o in finished_run[1] if o.startswith("data.train=")))
    data = tmp_path / "fewer.json"
    data.write_text(json.dumps(json.loads(source.read_text())[:-1]))
    changes = {"trainer.steps": 3, "data.train": data, "data.image_root": source.parent}
    _run_dir, overrides = copy_run(finished_run, tmp_path / "run", **changes)
    assert main(["train", *overrides]) == 2
    out = capsys.readouterr().out
    assert out.startswith("error: cannot resume from") and "had 12 samples" in out and "this run has 11" in out


@pytest.mark.parametrize("steps", [10, 1], ids=["steps after it", "steps it already took"])
def test_a_checkpoint_of_the_other_command_is_not_continued(tmp_path, finished_run, capsys, steps):
    """Whatever sft.steps says (a step count the checkpoint reached is not "finished": it is
    another command's run)."""
    checkpoint = finished_run[0] / "checkpoints" / "step-0000002"
    _, overrides = copy_run(finished_run, tmp_path / "run")
    resume = [f"sft.resume={checkpoint}", f"sft.output_dir={tmp_path / 'sft'}", f"sft.steps={steps}"]
    assert main(["sft", *overrides, *resume]) == 2
    assert (
        f"was written by `vlrl train`, so sft.resume cannot continue it; start a new run from its weights in another "
        f"sft.output_dir with model.path={checkpoint}" in capsys.readouterr().out
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
    for older in ("step-0000000", "step-0000001"):  # killed after its last save, before that save's pruning
        shutil.copytree(run_dir / "checkpoints" / "step-0000002", run_dir / "checkpoints" / older)

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
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step-0000001", "step-0000002"]  # keep_last


def test_a_finished_rerun_from_an_earlier_checkpoint_of_its_own_prunes_nothing(tmp_path, finished_run, capsys):
    """Pruning keeps the last checkpoints; a rerun told to resume from an earlier one (which is
    finished too) must not delete the very checkpoint it names."""
    run_dir, overrides = copy_run(finished_run, tmp_path / "run", **{"trainer.keep_last": 1})
    checkpoints = run_dir / "checkpoints"
    shutil.copytree(checkpoints / "step-0000002", checkpoints / "step-0000003")
    assert main(["train", *overrides, f"trainer.resume={checkpoints / 'step-0000002'}"]) == 0
    assert "is step 2 of trainer.steps=2" in capsys.readouterr().out
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-0000002", "step-0000003"]


def test_a_finished_checkpoint_given_to_a_new_run_is_not_called_that_runs_end(tmp_path, finished_run, capsys):
    run_dir, overrides = finished_run
    checkpoint = run_dir / "checkpoints" / "step-0000002"
    new = tmp_path / "new"
    assert main(["train", *overrides, f"trainer.output_dir={new}", f"trainer.resume={checkpoint}"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"the checkpoint to resume from, {checkpoint} is step 2 of trainer.steps=2")
    assert "already finished" not in out and "another trainer.output_dir" not in out


@pytest.mark.parametrize(
    "gone", ["model.safetensors", "config.json", "trainer_state.json", "trainer_state.pt", "model.safetensors cut"]
)
def test_a_checkpoint_missing_a_file_is_refused_in_one_line_naming_it(tmp_path, finished_run, capsys, gone):
    """Never passed over for an earlier checkpoint (or none, training over its steps and deleting it)."""
    run_dir, overrides = copy_run(finished_run, tmp_path / "run", **{"trainer.steps": 3})
    checkpoint = run_dir / "checkpoints" / "step-0000002"
    name, _, cut = gone.partition(" ")
    if cut:
        with open(checkpoint / name, "r+b") as weights:
            weights.truncate(5000)
    else:
        (checkpoint / name).unlink()
    assert main(["train", *overrides]) == 2
    out = capsys.readouterr().out
    assert f"error: {checkpoint}" in out and "Traceback" not in out
    if name.startswith("trainer_state"):
        assert f"is not a complete vlrl checkpoint (no {name})" in out and "pickle" not in out
    else:
        assert "has its trainer state but its model does not load" in out
    assert (checkpoint / "config.json").exists() or name == "config.json"  # left for the user to look at


def test_a_resume_refuses_a_different_model_put_at_model_path(tmp_path, rec_data, capsys):
    base = tmp_path / "base"
    assert main(["tiny-model", str(base), "--arch", "qwen2_5_vl"]) == 0
    run_dir = tmp_path / "run"
    overrides = tiny_run(run_dir, rec_data, **{"model.path": base, "trainer.steps": 1, "trainer.save_every": 1})
    assert main(["train", *overrides]) == 0
    kept = {p.name: p.read_bytes() for p in base.iterdir() if p.is_file()}
    assert main(["tiny-model", str(base), "--arch", "qwen2_5_vl", "--seed", "3"]) == 0  # same config and sizes
    capsys.readouterr()
    assert main(["train", *overrides, "trainer.steps=2"]) == 2  # a fine-tune's weights, under the same path
    out = capsys.readouterr().out
    assert f"the model at model.path {base}" in out and "is not the one" in out and "Traceback" not in out
    for name, content in kept.items():
        (base / name).write_bytes(content)
    assert main(["train", *overrides, "trainer.steps=2"]) == 0  # the model put back
    config = json.loads((base / "config.json").read_text())
    config["text_config"]["rms_norm_eps"] = 1e-6  # another model of the same kind under the same path
    (base / "config.json").write_text(json.dumps(config))
    capsys.readouterr()
    assert main(["train", *overrides, "trainer.steps=3"]) == 2
    out = capsys.readouterr().out
    assert f"the model at model.path {base}" in out and "is not the one" in out and "Traceback" not in out


def test_a_checkpoint_fingerprinted_before_weight_samples_resumes_on_its_configs_and_sizes(tmp_path):
    from vlrl.trainer.history import model_fingerprint, same_model

    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(bytes(range(256)) * 8192)  # 2 MiB: sampled in windows
    now = model_fingerprint(tmp_path)
    older = {key: now[key] for key in ("configs", "weights")}
    assert same_model(older, now) and same_model(now, now)
    with open(tmp_path / "model.safetensors", "r+b") as weights:
        weights.seek(-1, 2)
        weights.write(b"\x00")  # the last byte, in the last window: another model of the same size
    assert not same_model(now, model_fingerprint(tmp_path)) and same_model(older, model_fingerprint(tmp_path))
    small = tmp_path / "adapter_model.safetensors"  # 1 MiB or less: read whole
    small.write_bytes(bytes(1000))
    before = model_fingerprint(tmp_path)["weight_samples"][small.name]
    small.write_bytes(bytes(500) + b"\x01" + bytes(499))
    assert model_fingerprint(tmp_path)["weight_samples"][small.name] != before


def test_rewinding_a_run_to_an_earlier_checkpoint_sets_its_later_ones_aside_and_goes_on_from_the_new(
    tmp_path, rec_data, tiny_qwen25, capsys
):
    run_dir = tmp_path / "run"
    first = tiny_run(run_dir, rec_data, **{"trainer.steps": 4, "trainer.save_every": 1, "trainer.keep_last": 5})
    assert main(["train", *first]) == 0
    step2 = run_dir / "checkpoints" / "step-0000002"
    rewind = [*first, "trainer.steps=3", "trainer.keep_last=1", f"trainer.resume={step2}", "trainer.lr=5e-4"]
    assert main(["train", *rewind]) == 0
    assert "the run's later checkpoints (step-0000003, step-0000004) moved to" in capsys.readouterr().out
    # the step just written is the run's (keep_last=1 pruned what came before it, not it)
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == ["step-0000003"]
    (aside,) = (run_dir / "rewound").iterdir()
    assert sorted(p.name for p in aside.iterdir()) == ["step-0000003", "step-0000004"]  # kept, whole
    assert (aside / "step-0000004" / "trainer_state.pt").is_file()
    assert [row["step"] for row in metrics_rows(run_dir)] == [1, 2, 3]
    on = [*first, "trainer.steps=4", "trainer.lr=5e-4", "trainer.keep_last=1"]
    assert main(["train", *on]) == 0  # auto: the new timeline's step 3, not the one left behind
    assert f"resumed from {run_dir / 'checkpoints' / 'step-0000003'} (step 3)" in capsys.readouterr().out
    assert [row["step"] for row in metrics_rows(run_dir)] == [1, 2, 3, 4]
    assert [row["lr"] for row in metrics_rows(run_dir)] == [0.001, 0.001, 0.0005, 0.0005]
    # The timeline left behind is not resumed in this folder, where it would mix with the new
    # one's logs and checkpoints: the folder's run goes on from its own latest, and says so; in
    # a folder of its own the old timeline goes on. A typo in the path is not taken for a finished run.
    back = [*on, "trainer.steps=5", f"trainer.resume={aside / 'step-0000004'}"]
    assert main(["train", *back]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"resumed from {run_dir / 'checkpoints' / 'step-0000004'} (step 4)" in out
    assert f"is not a checkpoint of the run in {run_dir}, which has its own: it goes on from its latest" in out
    assert [row["step"] for row in metrics_rows(run_dir)] == [1, 2, 3, 4, 5]
    assert main(["train", *on, "trainer.steps=5", f"trainer.output_dir={tmp_path / 'old'}", back[-1]]) == 0
    assert [row["step"] for row in metrics_rows(tmp_path / "old")] == [5]  # from the old step 4
    shutil.rmtree(aside / "step-0000004")  # its source gone (a run prunes its checkpoints): the same
    again = [*on, "trainer.steps=6", f"trainer.output_dir={tmp_path / 'old'}", back[-1]]  # command goes on
    assert main(["train", *again]) == 0
    assert [row["step"] for row in metrics_rows(tmp_path / "old")] == [5, 6]
    # After a stop, a rewind's own command would rewind again: the way to go on is resume=auto
    rewinding = load_config(None, [*first, f"trainer.resume={step2}"]).trainer
    assert resume_hint(rewinding, "trainer").startswith("run the command again with trainer.resume=auto")
    assert resume_hint(load_config(None, first).trainer, "trainer") == "run the same command again to resume"
    typo = [*on, "trainer.steps=6", f"trainer.resume={run_dir / 'checkpoints' / 'step-0000099'}"]
    assert main(["train", *typo]) == 2
    missing = typo[-1].split("=", 1)[1]
    out = " ".join(capsys.readouterr().out.split())
    assert f"trainer.resume {missing} does not exist ({run_dir / 'checkpoints'} holds step-0000005)" in out


def test_a_fresh_start_over_checkpoints_is_refused_and_a_resume_from_another_run_goes_on_by_the_same_command(
    tmp_path,
):
    from vlrl.config import ConfigError, TrainerConfig
    from vlrl.trainer.run import resume_checkpoint

    (tmp_path / "run" / "checkpoints" / "step-0000002").mkdir(parents=True)
    fresh = TrainerConfig(output_dir=str(tmp_path / "run"), resume="")
    with pytest.raises(ConfigError, match="already holds checkpoints; set trainer.resume=auto"):
        resume_checkpoint(fresh, "trainer")
    other = tmp_path / "other" / "checkpoints" / "step-0000001"
    foreign = TrainerConfig(output_dir=str(tmp_path / "run"), resume=str(other))
    assert resume_hint(foreign, "trainer") == "run the same command again to resume"  # it goes on from its own


def test_a_new_run_started_from_its_own_kept_base_trains_on_it_and_leaves_it_whole(
    tmp_path, rec_data, tiny_qwen25, capsys
):
    """A run's RUN/base outlives its checkpoints; a new run in that folder given it as
    model.path must read it, not clear it as an earlier start's base (which deletes the very
    model it is about to load)."""
    import hashlib
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(tiny_qwen25, run_dir / "base")
    digests = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (run_dir / "base").iterdir()}
    overrides = tiny_run(run_dir, rec_data, **{"model.path": str(run_dir / "base"), "trainer.steps": 1})
    assert main(["train", *overrides]) == 0
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (run_dir / "base").iterdir()} == digests
    assert (run_dir / "checkpoints" / "step-0000001").is_dir()


def test_stages_added_on_resume_are_recorded_as_the_entries_they_are(tmp_path):
    """rollout.stages from [] to two stages: recorded as 'stages.length 0 -> 2' and each entry's
    keys, not as 'rollout.stages: [] -> None' beside them."""
    from vlrl.trainer.history import resume_changes

    saved = {"trainer": {"lr": 1.0, "parallel": "replicated"}, "rollout": {"stages": []}}
    stages = [{"steps": 2, "max_new_tokens": 8}, {"max_new_tokens": 16}]
    changes = resume_changes(
        {"trainer": {"lr": 1.0, "parallel": "replicated"}, "rollout": {"stages": stages}}, saved, "trainer", tmp_path
    )
    assert changes == {
        "rollout.stages.length": {"from": 0, "to": 2},
        "rollout.stages[0].steps": {"from": None, "to": 2},
        "rollout.stages[0].max_new_tokens": {"from": None, "to": 8},
        "rollout.stages[1].max_new_tokens": {"from": None, "to": 16},
    }
    back = resume_changes(
        {"trainer": {"lr": 1.0, "parallel": "replicated"}, "rollout": {"stages": []}},
        {**saved, "rollout": {"stages": stages}},
        "trainer",
        tmp_path,
    )
    assert back["rollout.stages.length"] == {"from": 2, "to": 0} and "rollout.stages" not in back


def test_a_checkpoint_older_than_a_setting_resumes_as_if_it_had_the_settings_default(tmp_path):
    """A key vlrl added after the checkpoint was written (model.lora.use_rslora, 2026-12-03) is
    its default there: a resume keeping the default changes nothing, even where the key could
    not change on resume, and one setting it records the change from the default."""
    from vlrl.config import ConfigError, load_config
    from vlrl.trainer.history import resume_changes, used_config

    new = json.loads(json.dumps(used_config(load_config(None, []), "trainer"), default=str))
    saved = json.loads(json.dumps(new))
    del saved["model"]["lora"]["use_rslora"], saved["algo"]["advantage_std"]
    assert resume_changes(new, saved, "trainer", tmp_path) == {}
    new["algo"]["advantage_std"] = "none"
    assert resume_changes(new, saved, "trainer", tmp_path) == {"algo.advantage_std": {"from": "group", "to": "none"}}
    new["model"]["lora"]["use_rslora"] = True
    with pytest.raises(ConfigError, match="model.lora.use_rslora is True, but .* was trained with False"):
        resume_changes(new, saved, "trainer", tmp_path)


def test_a_lora_setting_a_resume_cannot_change_is_refused_with_its_own_reason(tmp_path):
    """Each LoRA setting's own reason (PEFT reads them from the checkpoint's adapter_config.json);
    a dropout change is taken by RL, which runs without dropout, and refused by SFT."""
    from vlrl.config import ConfigError
    from vlrl.trainer.history import resume_changes

    def resumed(section, lora_before, lora_after):
        before = {
            section: {"lr": 1.0, "parallel": "replicated"},
            "model": {"lora": {"r": 4, "alpha": 32, "dropout": 0.0, **lora_before}},
        }
        after = {
            section: {"lr": 1.0, "parallel": "replicated"},
            "model": {"lora": {"r": 4, "alpha": 32, "dropout": 0.0, **lora_after}},
        }
        return resume_changes(after, before, section, tmp_path)

    for change, reason in (({"r": 8}, "the rank is the checkpoint's"), ({"r": 0}, "its weights are full, or"),
                           ({"alpha": 16}, "keep the scale \\(alpha / r\\)"),
                           ({"target_modules": ["q_proj"]}, "on the layers it names")):  # fmt: skip
        with pytest.raises(ConfigError, match=f"resumed run cannot change it \\(.*{reason}"):
            resumed("trainer", {}, change)
    assert resumed("trainer", {}, {"dropout": 0.1}) == {"model.lora.dropout": {"from": 0.0, "to": 0.1}}
    with pytest.raises(ConfigError, match="keep the dropout they were saved with"):
        resumed("sft", {}, {"dropout": 0.1})


def test_the_settings_a_checkpoint_was_trained_with_are_those_before_the_first_change_after_it(tmp_path):
    from vlrl.trainer.history import HISTORY_FILE, settings_at

    changes = [(10, 1e-5, 2e-5), (21, 2e-5, 3e-5)]  # each applies from its step: step 10 trained at 2e-5
    (tmp_path / HISTORY_FILE).write_text(
        "".join(json.dumps({"step": s, "changes": {"trainer.lr": {"from": a, "to": b}}}) + "\n" for s, a, b in changes)
        + "not json\n"
    )
    assert settings_at(tmp_path, 5) == {"trainer.lr": 1e-5}
    assert settings_at(tmp_path, 10) == {"trainer.lr": 2e-5}
    assert settings_at(tmp_path, 21) == {}


def test_history_lines_without_a_whole_step_or_a_from_value_are_passed_over(tmp_path):
    from vlrl.trainer.history import HISTORY_FILE, settings_at

    lines = [
        {"changes": {"trainer.lr": {"from": 1.0, "to": 2.0}}},  # no step
        {"step": "7", "changes": {"trainer.lr": {"from": 3.0, "to": 4.0}}},  # a step that is not a number
        {"step": 8, "changes": {"trainer.lr": {"to": 5.0}, "trainer.beta": "0.1"}},  # no "from"; not a change
        {"step": 9, "changes": ["trainer.lr"]},
        {"step": 9, "changes": {"eval.limit": {"from": 16, "to": 32}}},
    ]
    (tmp_path / HISTORY_FILE).write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert settings_at(tmp_path, 5) == {"eval.limit": 16}


def test_a_local_model_path_is_recorded_absolute_whatever_directory_the_run_started_in(tmp_path, monkeypatch):
    from vlrl.trainer.history import used_config

    (tmp_path / "base").mkdir()
    monkeypatch.chdir(tmp_path)
    recorded = used_config(load_config(None, ["model.path=base"]), "trainer")
    assert recorded["model"]["path"] == str(tmp_path / "base")
    assert used_config(load_config(None, ["model.path=org/not-here"]), "trainer")["model"]["path"] == "org/not-here"


def test_only_model_path_is_the_same_setting_however_spelled_and_only_where_it_exists(tmp_path, monkeypatch):
    from vlrl.trainer.history import same_setting

    (tmp_path / "base").mkdir()
    (tmp_path / "train.json").write_text("[]")
    monkeypatch.chdir(tmp_path)
    assert same_setting("model.path", "base", str(tmp_path / "base"))
    assert same_setting("model.path", "./base/", "base")
    assert not same_setting("data.train", "train.json", str(tmp_path / "train.json"))  # a recorded change
    assert not same_setting("model.path", "gone/../elsewhere", "elsewhere")  # no directory to be the same
    assert not same_setting("model.path", "base", 3)


@pytest.mark.parametrize(
    "section, saved, new, key",
    [
        ("trainer", {"model": {"lora": {"r": 8, "alpha": 16}}}, {"model": {"lora": {"r": 8, "alpha": 32}}}, "model.lora.alpha"),
        ("trainer", {"mixture": [{"name": "a"}]}, {"mixture": [{"name": "a"}, {"name": "b"}]}, "mixture.length"),
        ("trainer", {"mixture": [{"name": "a"}, {"name": "b"}]}, {"mixture": [{"name": "a"}, {"name": "c"}]}, "mixture[1].name"),
        ("sft", {"sft": {"master_weights": True}}, {"sft": {"master_weights": False}}, "sft.master_weights"),
        ("sft", {"sft": {"seed": 1}}, {"sft": {"seed": 2}}, "sft.seed"),
        ("sft", {"sft": {"parallel": "replicated"}}, {"sft": {"parallel": "fsdp2"}}, "sft.parallel"),
        ("trainer", {"task": {"name": "refcoco"}}, {"task": {"name": "counting"}}, "task.name"),
    ],
)  # fmt: skip
def test_each_setting_a_resume_cannot_honour_is_refused_naming_it(tmp_path, section, saved, new, key):
    import re

    from vlrl.config import ConfigError
    from vlrl.trainer.history import resume_changes

    base = {section: {"lr": 1.0, "parallel": "replicated"}}
    saved, new = {**base, **saved}, {**base, **new}
    saved[section], new[section] = {**base[section], **saved[section]}, {**base[section], **new[section]}
    with pytest.raises(ConfigError, match=f"^config: {re.escape(key)} is "):
        resume_changes(new, saved, section, tmp_path)


def test_where_and_how_a_run_is_shown_are_not_changes_and_a_mixtures_weights_are(tmp_path):
    from vlrl.trainer.history import resume_changes

    saved = {
        "trainer": {"output_dir": "a", "resume": "auto", "progress": True, "parallel": "replicated"},
        "mixture": [{"name": "a", "weight": 1.0}],
    }
    new = {
        "trainer": {"output_dir": "b", "resume": "", "progress": False, "parallel": "replicated"},
        "mixture": [{"name": "a", "weight": 2.0}],
    }
    assert resume_changes(new, saved, "trainer", tmp_path) == {"mixture[0].weight": {"from": 1.0, "to": 2.0}}


def test_a_models_fingerprint_leaves_out_the_transformers_version_and_counts_bin_weights(tmp_path):
    from vlrl.trainer.history import model_fingerprint

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2_5_vl", "transformers_version": "4.57.0"}))
    (tmp_path / "pytorch_model.bin").write_bytes(bytes(300))
    before = model_fingerprint(tmp_path)
    assert before["weights"] == {"pytorch_model.bin": 300}
    (tmp_path / "config.json").write_text(json.dumps({"transformers_version": "5.0.0", "model_type": "qwen2_5_vl"}))
    assert model_fingerprint(tmp_path) == before  # saved again by a newer transformers: the same model
    (tmp_path / "pytorch_model.bin").write_bytes(bytes(299) + b"\x01")
    assert model_fingerprint(tmp_path)["weight_samples"] != before["weight_samples"]


def test_a_data_file_changed_in_place_is_told_by_its_contents_and_a_new_file_is_not_a_content_change(tmp_path):
    import hashlib

    from vlrl.trainer.history import data_changes, file_changes, split_fingerprints

    data = tmp_path / "train.json"
    data.write_text("[1]")
    saved = split_fingerprints([(str(data), "train")])
    assert saved == [{"path": str(data), "sha256": hashlib.sha256(b"[1]").hexdigest()}]  # a file's own sha256
    assert data_changes(split_fingerprints([(str(data), "train")]), saved) == {}
    data.write_text("[2]")
    changed = {str(data): {"from": hashlib.sha256(b"[1]").hexdigest(), "to": hashlib.sha256(b"[2]").hexdigest()}}
    assert data_changes(split_fingerprints([(str(data), "train")]), saved) == changed
    assert file_changes(split_fingerprints([(str(data), "train")]), saved) == changed
    other = tmp_path / "reward.py"
    other.write_text("")
    assert file_changes(split_fingerprints([(str(data), ""), (str(other), "")]), saved) == changed


def test_settings_flatten_to_dotted_keys_lists_of_mappings_by_entry_and_other_values_whole():
    from vlrl.trainer.history import flatten

    tree = {"a": {"b": 1, "e": {}}, "m": [{"n": "x"}], "r": ["jsonl", "tensorboard"], "mixed": [{"n": 1}, 2], "s": []}
    assert flatten(tree) == {
        "a.b": 1,
        "a.e": {},
        "m.length": 1,
        "m[0].n": "x",
        "r": ["jsonl", "tensorboard"],
        "mixed": [{"n": 1}, 2],
        "s": [],
    }


def test_a_history_line_torn_into_bytes_that_are_not_text_is_passed_over(tmp_path):
    from vlrl.trainer.history import HISTORY_FILE, settings_at

    good = json.dumps({"step": 9, "changes": {"eval.limit": {"from": 16, "to": 32}}}).encode()
    (tmp_path / HISTORY_FILE).write_bytes(b'{"step": 7, "chan\xff\xfe\n' + good + b"\n")
    assert settings_at(tmp_path, 5) == {"eval.limit": 16}
