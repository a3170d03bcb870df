"""An image or video that fails to decode during a step costs that sample, not the run: it is
reported with its record's file:line, counted, and the step goes on (train, sft, eval)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import tiny_run
from PIL import Image
from rich.console import Console

from vlrl.cli import main
from vlrl.config import load_config
from vlrl.parallel.distributed import Processes


def truncated_jpeg(path, width: int = 112, height: int = 112) -> None:
    """A JPEG whose header is whole (the load-time check reads it) but whose pixels stop halfway."""
    noise = np.random.default_rng(0).integers(0, 255, (height, width, 3), dtype=np.uint8)
    Image.fromarray(noise).save(path, quality=95)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.fixture
def data_with_a_bad_image(tmp_path):
    """train.jsonl: line 1 a good record, line 2 one whose JPEG is truncated."""
    folder = tmp_path / "data"
    folder.mkdir()
    Image.fromarray(np.full((112, 112, 3), 200, dtype=np.uint8)).save(folder / "good.png")
    truncated_jpeg(folder / "bad.jpg")
    records = [
        {
            "id": "good",
            "image": "good.png",
            "problem": "the square",
            "solution": [10, 10, 60, 60],
            "width": 112,
            "height": 112,
        },
        {
            "id": "bad",
            "image": "bad.jpg",
            "problem": "the square",
            "solution": [10, 10, 60, 60],
            "width": 112,
            "height": 112,
        },
    ]
    path = folder / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def rows(path):
    return [json.loads(line) for line in path.read_text().split("\n") if line]


def test_rl_training_skips_the_sample_and_goes_on(tmp_path, data_with_a_bad_image, tiny_qwen25, capsys):
    run_dir = tmp_path / "run"
    # One prompt a step: one of the two steps draws only the bad sample, and has no group at all.
    args = tiny_run(run_dir, data_with_a_bad_image, **{"trainer.prompts_per_step": 1, "trainer.steps": 2})
    assert main(["train", *args]) == 0
    out = capsys.readouterr().out
    metrics = rows(run_dir / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2]
    assert sorted(m["skipped_samples"] for m in metrics) == [0, 1]
    assert [("reward" in m) for m in metrics] == [m["skipped_samples"] == 0 for m in metrics]
    (skipped,) = rows(run_dir / "skipped_samples.jsonl")
    assert skipped["source"] == f"{data_with_a_bad_image}:2" and "bad.jpg" in skipped["reason"]
    assert f"skipped sample {data_with_a_bad_image}:2: cannot read" in out
    assert (run_dir / "checkpoints" / "step-0000002").is_dir()
    # No group at all: no optimizer step (an empty one applied weight decay and was counted)
    assert [m["optimizer_steps"] for m in metrics] == [float(m["skipped_samples"] == 0) for m in metrics]


def test_a_step_and_its_held_out_evaluation_count_and_log_the_samples_they_skipped(
    tmp_path, data_with_a_bad_image, tiny_qwen25
):
    run_dir = tmp_path / "run"
    options = {"data.eval": data_with_a_bad_image, "eval.every": 1, "trainer.steps": 1, "eval.max_new_tokens": 4}
    assert main(["train", *tiny_run(run_dir, data_with_a_bad_image, **options)]) == 0
    (metrics,) = rows(run_dir / "metrics.jsonl")
    assert metrics["eval/skipped_samples"] == 1.0 and "eval/acc@0.5" in metrics and metrics["time_eval"] > 0
    # the step drew both records: its own skipped sample is logged at its step
    assert metrics["skipped_samples"] == 1
    (skipped,) = rows(run_dir / "skipped_samples.jsonl")
    assert (skipped["step"], skipped["source"]) == (1, f"{data_with_a_bad_image}:2")


def test_a_mini_batch_left_without_a_group_takes_no_optimizer_step(tmp_path, data_with_a_bad_image, tiny_qwen25):
    run_dir = tmp_path / "run"
    # Both samples each step, one unreadable: one group for algo.mini_batches=2, so one optimizer step.
    options = {"trainer.prompts_per_step": 2, "trainer.steps": 1, "algo.mini_batches": 2}
    assert main(["train", *tiny_run(run_dir, data_with_a_bad_image, **options)]) == 0
    (metrics,) = rows(run_dir / "metrics.jsonl")
    assert metrics["skipped_samples"] == 1 and metrics["optimizer_steps"] == 1.0


def test_sft_skips_the_sample_and_trains_on_the_others(tmp_path, data_with_a_bad_image, tiny_qwen25):
    from vlrl.trainer.sft import train_sft

    run_dir = tmp_path / "sft"
    train_sft(
        load_config(None, tiny_run(run_dir, data_with_a_bad_image, "sft", **{"sft.steps": 1})), Console(quiet=True)
    )
    (metrics,) = rows(run_dir / "metrics.jsonl")
    assert metrics["skipped_samples"] == 1 and metrics["loss"] > 0 and metrics["target_tokens"] > 0


def test_eval_scores_the_readable_samples_and_lists_the_skipped_ones(tmp_path, data_with_a_bad_image, tiny_qwen25):
    out = tmp_path / "eval"
    args = ["eval", "--task", f"refcoco={data_with_a_bad_image}", "--model", "tiny:qwen2_5_vl", "--out", str(out)]
    assert main([*args, "model.max_pixels=12544", "eval.max_new_tokens=4"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert (
        results["n-samples"]["refcoco"] == {"original": 2, "effective": 1}
        and len(rows(out / "samples_refcoco.jsonl")) == 1
    )
    (skipped,) = results["skipped"]["refcoco"]
    assert skipped.startswith(f"{data_with_a_bad_image}:2: cannot read")


def test_a_video_whose_frames_do_not_decode_is_skipped(tmp_path, tiny_qwen25):
    from data_prep.video import write_synthetic_video_qa

    data = tmp_path / "video" / "eval.json"
    write_synthetic_video_qa(data, 2, 0)
    first = data.parent / json.loads(data.read_text())[0]["path"]
    content = bytearray(first.read_bytes())
    start, end = content.find(b"mdat") + 4, content.find(b"moov") - 8
    content[start:end] = bytes(end - start)  # the frames are zeros; the header (moov) still says 16 frames
    first.write_bytes(bytes(content))
    out = tmp_path / "eval"
    args = [
        "eval",
        "--task",
        f"video_qa={data}",
        "--model",
        "tiny:qwen2_5_vl",
        "--out",
        str(out),
        "eval.max_new_tokens=4",
    ]
    assert main([*args, "model.video.max_frames=4", "model.video.max_pixels=3136", "model.video.min_pixels=3136"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["n-samples"]["video_qa"] == {"original": 2, "effective": 1}
    (skipped,) = results["skipped"]["video_qa"]
    assert skipped.startswith(f"{data}:") and "Invalid data" in skipped


class CountingProcesses(Processes):
    """One process, recording each collective call it makes and the values it gives `max`; given
    `peer`, the values another process gave (a run of its own recorded them), `max` returns the
    two processes' maximum, so that the decisions it makes are theirs together."""

    def __init__(self, calls: list[str], peer: list[int] | None = None):
        super().__init__()
        object.__setattr__(self, "calls", calls)
        object.__setattr__(self, "given", [])
        object.__setattr__(self, "peer", list(peer or []))

    def max(self, value: int) -> int:
        self.given.append(value)
        return max(value, self.peer.pop(0)) if self.peer else value

    def __getattribute__(self, name):
        if name in ("mean", "max", "all_true", "average_gradients", "mean_metrics", "gather", "barrier"):
            object.__getattribute__(self, "calls").append(name)
        return object.__getattribute__(self, name)


def test_a_step_without_any_readable_sample_makes_the_same_collective_calls(
    tmp_path, data_with_a_bad_image, tiny_qwen25
):
    """Under data parallelism a process whose samples all failed must still join every collective."""
    from vlrl.trainer.rl import RLTrainer

    lines = data_with_a_bad_image.read_text().splitlines()
    calls, peer = {}, []
    for name, line in (("readable", lines[0]), ("unreadable", lines[1])):
        data = data_with_a_bad_image.with_name(f"{name}.jsonl")
        data.write_text(line + "\n")
        overrides = tiny_run(
            tmp_path / name, data, **{"trainer.prompts_per_step": 1, "trainer.steps": 1, "algo.beta": 0.04}
        )
        trainer = RLTrainer(load_config(None, overrides), Console(quiet=True))
        calls[name] = []
        procs = CountingProcesses(calls[name], peer)  # the unreadable one beside the readable one
        trainer.run.procs = trainer.run.strategy.procs = procs
        trainer.train()
        peer = procs.given
    assert "average_gradients" in calls["readable"]
    assert calls["unreadable"] == calls["readable"]


def test_a_prompt_over_max_prompt_tokens_costs_its_sample_in_training_and_evaluation(tmp_path, tiny_qwen25, capsys):
    """model.max_prompt_tokens (verl's filter_overlong_prompts): a record whose question runs
    to hundreds of tokens is skipped and reported where a step or an evaluation draws it; the
    short one trains and is scored."""
    folder = tmp_path / "data"
    folder.mkdir()
    Image.fromarray(np.full((112, 112, 3), 200, dtype=np.uint8)).save(folder / "good.png")
    record = {"image": "good.png", "solution": [10, 10, 60, 60], "width": 112, "height": 112}
    records = [
        {**record, "id": "short", "problem": "the square"},
        {**record, "id": "long", "problem": "the square " * 200},
    ]
    data = folder / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    run_dir = tmp_path / "run"
    limit = {"model.max_prompt_tokens": 300}
    assert main(["train", *tiny_run(run_dir, data, **{"trainer.steps": 1, **limit})]) == 0
    (metrics,) = rows(run_dir / "metrics.jsonl")
    assert metrics["skipped_samples"] == 1 and "reward" in metrics
    (skipped,) = rows(run_dir / "skipped_samples.jsonl")
    assert skipped["source"] == f"{data}:2" and "over model.max_prompt_tokens (300)" in skipped["reason"]
    out = tmp_path / "eval"
    args = ["eval", "--task", f"refcoco={data}", "--model", str(tiny_qwen25), "--out", str(out)]
    assert main([*args, "model.max_pixels=12544", "eval.max_new_tokens=4", "model.max_prompt_tokens=300"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["n-samples"]["refcoco"] == {"original": 2, "effective": 1}
