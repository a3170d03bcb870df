"""Every built-in task has a demo config that trains on the tiny model with synthetic data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vlrl.config import load_config
from vlrl.tasking.registry import builtin_training_tasks, task_class
from vlrl.trainer.rl import train

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "demo"


@pytest.mark.parametrize("name", sorted(builtin_training_tasks()))
def test_demo_config_trains_a_few_steps(name, tmp_path, tiny_qwen25):
    config = CONFIGS / f"{name}.yaml"
    assert config.is_file(), f"task {name} has no demo config at {config}"
    suffix = task_class(name).data_suffix
    cfg = load_config(
        config,
        [
            f"data.train={tmp_path / 'data' / ('train' + suffix)}",
            f"data.eval={tmp_path / 'data' / ('val' + suffix)}",  # not the demo's own: nothing is written there
            "data.synthetic=true",
            "data.synthetic_train_size=6",
            "data.synthetic_eval_size=2",
            f"trainer.output_dir={tmp_path / 'run'}",
            "trainer.steps=2",
            "trainer.prompts_per_step=2",
            "trainer.progress=false",
            "rollout.num_generations=2",
            "rollout.max_new_tokens=8",
        ],
    )
    assert cfg.task.name == name
    result = train(cfg)
    rows = [json.loads(line) for line in result.metrics.read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert result.checkpoint is not None and result.checkpoint.is_dir()
