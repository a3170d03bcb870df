"""The worked example of docs/custom_task.md: a task outside the package, loaded by path,
trained, evaluated and scored, with nothing in the engine changed."""

from __future__ import annotations

import json
from pathlib import Path

from vlrl.cli import main
from vlrl.eval.layout import read_metrics
from vlrl.tasking.registry import task_class

TASK = f"{Path(__file__).resolve().parents[2] / 'docs' / 'examples' / 'largest_color.py'}:LargestColor"


def test_the_docs_example_task_trains_evaluates_and_scores(tmp_path, tiny_qwen25):
    run = tmp_path / "run"
    train_args = [
        "train",
        "--task",
        TASK,
        "model.path=tiny:qwen2_5_vl",
        "model.max_pixels=50176",
        f"data.train={tmp_path / 'train.jsonl'}",
        "data.synthetic=true",
        "data.synthetic_train_size=8",
        "rollout.num_generations=2",
        "rollout.max_new_tokens=8",
        "trainer.prompts_per_step=2",
        "trainer.steps=2",
        "trainer.progress=false",
        f"trainer.output_dir={run}",
    ]
    assert main(train_args) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert {"reward/format", "reward/color"} <= rows[0].keys()

    val = tmp_path / "val.jsonl"
    task_class(TASK)().synthesize(val, 4, seed=5)
    out = tmp_path / "eval"
    checkpoint = run / "checkpoints" / "step-0000002"
    assert (
        main(
            [
                "eval",
                "--task",
                f"{TASK}={val}",
                "--model",
                str(checkpoint),
                "--out",
                str(out),
                "model.max_pixels=50176",
                "eval.max_new_tokens=8",
            ]
        )
        == 0
    )
    results = read_metrics(out)["largest_color"]
    assert {"accuracy", "format_rate", "reward"} <= results.keys()

    answers = [json.loads(line)["answer"] for line in val.read_text().splitlines()]
    completions = tmp_path / "c.jsonl"
    completions.write_text(
        "".join(
            json.dumps({"id": i, "completion": f"<think>x</think><answer>{a}</answer>"}) + "\n"
            for i, a in enumerate(answers)
        )
    )
    assert (
        main(
            [
                "score",
                "--task",
                TASK,
                "--data",
                str(val),
                "--completions",
                str(completions),
                "--out",
                str(tmp_path / "s.jsonl"),
            ]
        )
        == 0
    )
    scored = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert all(s["rewards"] == {"format": 1.0, "color": 1.0} and s["reward"] == 1.5 for s in scored)
