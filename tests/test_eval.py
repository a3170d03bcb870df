"""`vlrl eval` on every task with the tiny model, comparing runs, evaluation during training, plots."""

from __future__ import annotations

import json

import pytest

from tasks import BUILTIN_TASKS
from vlrl.cli import main
from vlrl.data import FrameSpec
from vlrl.eval.layout import read_metrics, samples_path
from vlrl.registry import task_class


@pytest.mark.parametrize("name", sorted(BUILTIN_TASKS))
def test_eval_writes_lmms_eval_style_results_for_every_task(name, tmp_path, tiny_qwen25, capsys):
    data = tmp_path / f"val{task_class(name).data_suffix}"
    task_class(name)().synthesize(data, 5, seed=3)
    out = tmp_path / "out"
    args = ["eval", "--task", f"{name}={data}", "--model", "tiny:qwen2_5_vl", "--out", str(out), "--batch-size", "2"]
    assert main([*args, "model.max_pixels=50176", "eval.max_new_tokens=12"]) == 0
    results = json.loads((out / "results.json").read_text())
    metrics = read_metrics(out)[name]
    assert results["n-samples"][name] == {"original": 5, "effective": 5}
    assert results["results"][name]["alias"] == name and results["configs"][name]["task"] == name
    assert {"model_name", "config", "environment", "date", "total_evaluation_time_seconds", "samples_per_second"} <= results.keys()
    lines = [json.loads(line) for line in samples_path(out, name).read_text().splitlines()]
    assert [line["doc_id"] for line in lines] == list(range(5))
    assert {"id", "input", "target", "filtered_resps", "rewards"} <= lines[0].keys()
    # The reported metrics are the task's metrics of the recorded responses, plus mean rewards.
    task = task_class(name)()
    split = task.load(data, FrameSpec("absolute", 3136, 50176))
    responses = [line.get("resps", [line["filtered_resps"]])[0] for line in lines]
    recomputed = task.metrics(split.samples, responses)
    assert recomputed == {k: v for k, v in metrics.items() if not k.startswith("reward")}
    assert metrics["reward"] == pytest.approx(sum(line["reward"] for line in lines) / 5)
    assert "results.json" in capsys.readouterr().out


def test_eval_is_deterministic_and_compare_prints_differences(tmp_path, rec_data, tiny_qwen25, capsys):
    outs = []
    for name in ("a", "b"):
        out = tmp_path / name
        args = ["eval", "--task", f"refcoco={rec_data}", "--model", "tiny:qwen2_5_vl", "--out", str(out), "--limit", "4"]
        assert main([*args, "model.max_pixels=50176", "eval.max_new_tokens=10"]) == 0
        outs.append(out)
    a, b = (read_metrics(o) for o in outs)
    assert a == b and a["refcoco"]["acc@0.5"] >= 0
    assert samples_path(outs[0], "refcoco").read_text() == samples_path(outs[1], "refcoco").read_text()
    capsys.readouterr()
    assert main(["eval", "--compare", str(outs[0]), str(outs[1])]) == 0
    printed = capsys.readouterr().out
    assert "acc@0.5" in printed and "+0.0000" in printed


def test_eval_during_training_and_plots(tmp_path, rec_data, tiny_qwen25, capsys):
    run_dir = tmp_path / "run"
    overrides = {
        "model.path": "tiny:qwen2_5_vl",
        "model.max_pixels": 50176,
        "data.train": str(rec_data),
        "data.eval": str(rec_data),
        "rollout.num_generations": 2,
        "rollout.max_new_tokens": 8,
        "trainer.output_dir": str(run_dir),
        "trainer.prompts_per_step": 2,
        "trainer.steps": 3,
        "trainer.progress": False,
        "eval.every": 2,
        "eval.limit": 3,
    }
    assert main(["train", "--task", "refcoco", *[f"{k}={v}" for k, v in overrides.items()]]) == 0
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert ["eval/acc@0.5" in r for r in rows] == [False, True, True]  # every 2 steps, and at the end
    capsys.readouterr()
    assert main(["plot", str(run_dir)]) == 0
    printed = capsys.readouterr().out
    for topic in ("rewards", "lengths", "kl_entropy", "eval"):
        png = run_dir / "plots" / f"{topic}.png"
        assert png.is_file() and png.read_bytes()[:4] == b"\x89PNG" and str(png) in printed
