"""Reward functions named in the config (task.rewards FILE.py:FUNCTION or module:FUNCTION), as
EasyR1's reward_function and TRL's reward_funcs take them: resolved before any model loads,
scored as a task's own components, logged, recorded, and held to on resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tasks.classification import Classification
from tasks.counting import Counting
from tasks.refcoco import RefCOCO
from vlrl.cli import main
from vlrl.config import ConfigError, load_config
from vlrl.data.records import FrameSpec, load_split
from vlrl.tasking.scoring import score
from vlrl.trainer import rl  # noqa: F401 - imported before any test patches what it imports

LENGTH = '''
def length_bonus(completions, samples):
    """Longer answers score higher: 0 to 1 over 40 characters."""
    return [min(1.0, len(c) / 40) for c in completions]


def fragile(completions, samples):
    return [1.0 if c == "ok" else 1 / 0 for c in completions]


def trl_style(completions, samples):  # TRL's conversational completions: lists of messages, not strings
    return [float(len(c[0]["content"])) for c in completions]


def wordy(completions, samples):
    return ["high" if c == "ok" else 10**400 if c == "huge" else 1.0 for c in completions]


def one_argument(completions):
    return [0.0 for _ in completions]


NOT_A_FUNCTION = 3
'''


@pytest.fixture
def reward_file(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)  # a relative FILE.py is read from the working directory
    path = tmp_path / "my_rewards.py"
    path.write_text(LENGTH)
    return path


@pytest.fixture(scope="module")
def samples(rec_data: Path):
    return load_split(rec_data, RefCOCO().build_sample, FrameSpec("absolute", 3136, 50176)).samples


def test_a_reward_function_joins_the_defaults_of_the_variant_chosen(reward_file):
    task = Counting(options={"variant": "perception_r1"}, rewards={"my_rewards.py:length_bonus": 0.5})
    assert task.reward_weights == {"count_points": 1.0, "length_bonus": 0.5}  # PR1's recipe, not the task's
    task = Classification(options={"variant": "no_thinking"}, rewards={"my_rewards.py:length_bonus": 0.5})
    assert task.reward_weights == {"label": 1.0, "length_bonus": 0.5}


def test_a_reward_function_joins_the_tasks_defaults_by_its_name(reward_file, samples, monkeypatch):
    task = RefCOCO(rewards={"my_rewards.py:length_bonus": 0.5})
    assert task.reward_weights == {"format": 1.0, "iou": 1.0, "length_bonus": 0.5}
    completions = ["x" * 10, '<think>a</think><answer>{"bbox_2d": [1, 2, 3, 4]}</answer>']
    scores = score(task, completions, samples[:2])
    assert scores.components["length_bonus"] == [0.25, 1.0]
    expected = [1.0 * f + 1.0 * i + 0.5 * b for f, i, b in zip(*scores.components.values(), strict=True)]
    assert scores.total == pytest.approx(expected)
    # Named with the task's components, only those are used; an absolute path and a module work too.
    alone = RefCOCO(rewards={"format": 0.0, f"{reward_file}:length_bonus": 1.0})
    assert alone.reward_weights == {"format": 0.0, "length_bonus": 1.0}
    monkeypatch.syspath_prepend(str(reward_file.parent))
    module = RefCOCO(rewards={"my_rewards:length_bonus": 1.0}).config_rewards["length_bonus"]
    assert module.spec == "my_rewards:length_bonus" and module.file == str(reward_file)


def test_a_reward_function_that_raises_scores_zero_and_is_counted(reward_file, samples):
    task = RefCOCO(rewards={"format": 1.0, "my_rewards.py:fragile": 1.0})
    scores = score(task, ["ok", "boom", "ok"], samples[:3])
    assert scores.components["fragile"] == [1.0, 0.0, 1.0] and scores.failures == {"fragile": 1}
    assert scores.reasons == {"fragile": "ZeroDivisionError: division by zero"}  # said, so that it can be fixed
    task = RefCOCO(rewards={"format": 1.0, "my_rewards.py:wordy": 1.0})
    scores = score(task, ["huge", "ok", "fine"], samples[:3])  # a number no float holds, then a word
    assert scores.components["wordy"] == [0.0, 0.0, 1.0] and scores.failures == {"wordy": 2}
    assert scores.reasons["wordy"].endswith("not a finite number") and scores.reasons["wordy"].startswith(
        "returned '1000"
    )


@pytest.mark.parametrize(
    "key, message",
    [
        ("my_rewards.py:lenght_bonus", "task.rewards.my_rewards.py:lenght_bonus: 'my_rewards.py' has no attribute"),
        ("missing.py:length_bonus", "task.rewards.missing.py:length_bonus: file not found"),
        ("no_such_module:fn", "task.rewards.no_such_module:fn: cannot import module"),
        ("my_rewards.py:NOT_A_FUNCTION", "task.rewards.my_rewards.py:NOT_A_FUNCTION is a int, not a function"),
        ("my_rewards.py:one_argument", "cannot be called as fn(completions, samples)"),
    ],
)
def test_a_wrong_reward_function_fails_naming_it_before_any_model_loads(reward_file, monkeypatch, capsys, key, message):
    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded before the reward functions were resolved")

    monkeypatch.setattr("vlrl.trainer.run.load_model", no_model)
    data = reward_file.parent / "train.json"
    args = ["train", "--task", "refcoco", "model.path=tiny:qwen2_5_vl", f"data.train={data}", f"task.rewards.{key}=1"]
    assert main(args) == 2
    out = capsys.readouterr().out
    assert out.startswith("error: config: ") and message in out
    assert not data.exists()  # refused before any data was read or written


def test_a_file_that_fails_to_import_is_named_with_its_error_and_a_folder_may_hold_a_colon(reward_file):
    from vlrl.tasking.config_rewards import load_reward

    (reward_file.parent / "broken.py").write_text("x = 1\nraise RuntimeError('no GPU here')\n")
    with pytest.raises(
        ConfigError, match=r"^config: task.rewards.broken.py:fn: importing it raised RuntimeError: no GPU here$"
    ):
        load_reward("broken.py:fn")
    folder = reward_file.parent / "run:3"  # the function is named after the last colon
    folder.mkdir()
    (folder / "rewards.py").write_text(LENGTH)
    reward = load_reward(f"{folder / 'rewards.py'}:length_bonus")
    assert (reward.name, reward.file) == ("length_bonus", str(folder / "rewards.py"))
    assert reward.fn(["x" * 20], [None]) == [0.5]


def test_a_function_named_as_a_component_of_the_task_is_refused(reward_file):
    reward_file.write_text(LENGTH + "\n\ndef iou(completions, samples):\n    return [1.0] * len(completions)\n")
    with pytest.raises(ConfigError, match="its name 'iou' is already a reward of refcoco"):
        RefCOCO(rewards={"my_rewards.py:iou": 1.0})


def test_dotted_overrides_take_a_file_name_as_one_key():
    cfg = load_config(None, ["task.rewards.rewards/mine.py:brevity=0.5", "task.rewards.iou=2"])
    assert cfg.task.rewards == {"rewards/mine.py:brevity": 0.5, "iou": 2.0}


def test_a_reward_failing_at_every_step_is_said_once_and_logged_at_each(reward_file, rec_data, tiny_qwen25, capsys):
    run = reward_file.parent / "run"
    assert main(["train", "--task", "refcoco", "model.path=tiny:qwen2_5_vl", "model.max_pixels=12544",
                 f"data.train={rec_data}", "task.rewards.my_rewards.py:trl_style=0.1", "rollout.num_generations=2",
                 "rollout.max_new_tokens=4", f"trainer.output_dir={run}", "trainer.prompts_per_step=2",
                 "trainer.steps=3", "trainer.progress=false"]) == 0  # fmt: skip
    assert capsys.readouterr().out.count("warning: reward trl_style raised or gave no finite number") == 1
    failed = [json.loads(line) for line in (run / "reward_failures.jsonl").read_text().splitlines()]
    assert [(f["step"], f["reward"], f["failures"], f["of"]) for f in failed] == [
        (s, "trl_style", 4, 4) for s in (1, 2, 3)
    ]


def test_a_run_trains_logs_records_and_resumes_with_the_configured_function(reward_file, rec_data, tiny_qwen25, capsys):
    run = reward_file.parent / "run"
    common = ["train", "--task", "refcoco", "model.path=tiny:qwen2_5_vl", "model.max_pixels=12544",
              f"data.train={rec_data}", "task.rewards.my_rewards.py:length_bonus=0.5",
              "task.rewards.my_rewards.py:trl_style=0.1", "rollout.num_generations=2",
              "rollout.max_new_tokens=8", f"trainer.output_dir={run}", "trainer.prompts_per_step=2",
              "trainer.save_every=1", "trainer.progress=false"]  # fmt: skip
    assert main([*common, "trainer.steps=1"]) == 0
    # A function that raises on every completion trains at 0 on it, and says so once, with why.
    warning = (
        "warning: reward trl_style raised or gave no finite number on 4 of 4 completions at step 1; they score 0 "
        "on it. The first: TypeError: string indices must be integers"
    )
    assert capsys.readouterr().out.count(warning) == 1
    failed = [json.loads(line) for line in (run / "reward_failures.jsonl").read_text().splitlines()]
    assert [(f["step"], f["reward"], f["failures"], f["of"]) for f in failed] == [(1, "trl_style", 4, 4)]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["reward_failures/trl_style"] == 4.0 and rows[0]["reward/trl_style"] == 0.0
    assert rows[0]["reward/length_bonus"] > 0  # 8 tokens of a random model: some characters
    assert rows[0]["reward"] == pytest.approx(
        rows[0]["reward/format"] + rows[0]["reward/iou"] + 0.5 * rows[0]["reward/length_bonus"]
    )
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert samples[0]["rewards"]["length_bonus"] == min(1.0, len(samples[0]["completion"]) / 40)
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["task"]["rewards"] == {"my_rewards.py:length_bonus": 0.5, "my_rewards.py:trl_style": 0.1}

    assert main([*common, "trainer.steps=2"]) == 0  # the same file: the run goes on
    assert "resumed from" in capsys.readouterr().out
    reward_file.write_text(LENGTH.replace("len(c) / 40", "len(c) / 80"))
    assert main([*common, "trainer.steps=3"]) == 2  # a resumed run must score as its steps so far did
    out = capsys.readouterr().out
    assert f"the reward function file {reward_file} changed since the checkpoint" in out
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2]
