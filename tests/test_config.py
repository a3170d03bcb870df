"""Config errors name the key and what was expected, and surface before any model loads."""

from __future__ import annotations

import pytest

from vlrl.cli import main
from vlrl.config import Config, ConfigError, load_config


def test_defaults_then_file_then_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("trainer:\n  lr: 0.5\n  steps: 7\nrollout:\n  num_generations: 4\n")
    cfg = load_config(path, ["trainer.lr=1e-5", "algo.epsilon_high=0.28", "task.rewards={format: 1, iou: 2}"])
    assert isinstance(cfg, Config)
    assert cfg.trainer.lr == 1e-5 and cfg.trainer.steps == 7
    assert cfg.rollout.num_generations == 4
    assert cfg.algo.epsilon_high == 0.28
    assert cfg.task.rewards == {"format": 1.0, "iou": 2.0}
    assert cfg.model.path == "Qwen/Qwen2.5-VL-3B-Instruct"


@pytest.mark.parametrize(
    "override,message",
    [
        ("trainer.lrr=1", "unknown key 'trainer.lrr'"),
        ("traner.lr=1", "unknown key 'traner'"),
        ("trainer.steps=many", "trainer.steps expects an integer"),
        ("trainer.steps=1.5", "trainer.steps expects an integer"),
        ("rollout.engine=tgi", "rollout.engine must be one of 'hf', 'vllm'"),
        ("model.dtype=fp8", "model.dtype must be one of"),
        ("trainer.progress=maybe", "trainer.progress expects true or false"),
        ("rollout.num_generations=0", "rollout.num_generations must be > 0"),
        ("algo.epsilon_high=0.1", "algo.epsilon_high (0.1) must be >= algo.epsilon (0.2)"),
        ("trainer", "must look like key.sub=value"),
        ("algo.length_control.min_tokens=600", "algo.length_control needs 0 <= min_tokens <= max_tokens, got 600 and 512"),
        ("model.video.max_frames=1", "model.video needs fps > 0, min_frames >= 1, max_frames >= 2"),
    ],
)
def test_bad_keys_and_values_are_named(override, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_config(None, [override])


def test_unknown_config_file_is_reported(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")


def test_train_rejects_a_bad_config_before_loading_a_model(capsys, monkeypatch):
    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded before the config was validated")

    monkeypatch.setattr("vlrl.modeling.load_model", no_model)
    assert main(["train", "--task", "refcoco", "algo.beta=-1"]) == 2
    assert "algo.beta must be >= 0" in capsys.readouterr().out


def test_unknown_task_and_reward_names_list_the_choices(capsys):
    assert main(["train", "--task", "nonsense", "model.path=tiny:qwen2_5_vl"]) == 2
    out = capsys.readouterr().out
    assert "is not a registered task; available: " in out and "refcoco" in out.split("available:")[1]
    assert main(["train", "--task", "refcoco", "task.rewards={iuo: 1}"]) == 2
    out = capsys.readouterr().out
    assert "task.rewards.iuo" in out and "available:" in out and "iou" in out


def test_task_options_are_validated_by_the_task(capsys):
    assert main(["train", "--task", "refcoco", "task.options.iou_convention=exactish"]) == 2
    assert "task.options.iou_convention must be one of 'vlm_r1', 'continuous'" in capsys.readouterr().out


def test_overrides_may_follow_options_on_the_command_line(capsys):
    from vlrl.cli import parse

    args = parse(["eval", "--task", "refcoco", "model.max_pixels=12544", "--out", "x", "eval.limit=3"])
    assert args.overrides == ["model.max_pixels=12544", "eval.limit=3"] and args.out == "x"
    with pytest.raises(SystemExit):
        parse(["tasks", "list", "trainer.lr=1"])
    assert "unrecognized arguments" in capsys.readouterr().err
