"""`vlrl eval` on every task with the tiny model, comparing runs, evaluation during training, plots."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vlrl.cli import main, settings_of_checkpoint
from vlrl.config import Config, load_config
from vlrl.data.records import FrameSpec
from vlrl.eval.harness import EvalSettings
from vlrl.eval.layout import read_metrics, samples_path
from vlrl.tasking.registry import builtin_training_tasks, task_class

ROOT = Path(__file__).resolve().parents[2]


PLOTTED_RL_TOPICS = ("headline", "rewards", "lengths", "kl_entropy", "loss", "time", "eval")


@pytest.mark.parametrize("name", sorted(builtin_training_tasks()))
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
    assert {
        "model_name",
        "config",
        "environment",
        "date",
        "total_evaluation_time_seconds",
        "samples_per_second",
    } <= results.keys()
    lines = [json.loads(line) for line in samples_path(out, name).read_text().splitlines()]
    assert [line["doc_id"] for line in lines] == list(range(5))
    assert {"id", "input", "target", "filtered_resps", "rewards"} <= lines[0].keys()
    # The reported metrics are the task's metrics of the recorded responses, plus mean rewards.
    task = task_class(name)()
    split = task.load(data, FrameSpec("absolute", 3136, 50176))
    responses = [line.get("resps", line["filtered_resps"]) for line in lines]  # the raw response
    recomputed = task.metrics(split.samples, responses)
    assert recomputed == {k: v for k, v in metrics.items() if not k.startswith("reward")}
    assert metrics["reward"] == pytest.approx(sum(line["reward"] for line in lines) / 5)
    assert "results.json" in capsys.readouterr().out


@pytest.mark.parametrize("asked", [None, "video_r1"])
def test_eval_places_video_frames_where_they_were_sampled_whatever_timing_the_run_trained_with(
    asked, tmp_path, video_qa_data, tiny_qwen25, monkeypatch
):
    """Video-R1 trains with its frames a second a temporal patch apart (model.video.time_from
    video_r1) and evaluates them where they were sampled from: so does vlrl eval, unless
    eval.video_time_from says otherwise; results.json records the timing the prompts had."""
    import vlrl.models.prompting as prompting

    timings = []

    def load_video(path, spec, factor):
        timings.append(spec.time_from)
        return real(path, spec, factor)

    real = prompting.load_video
    monkeypatch.setattr(prompting, "load_video", load_video)
    out = tmp_path / "out"
    args = ["eval", "--task", f"video_qa={video_qa_data}", "--model", "tiny:qwen2_5_vl", "--out", str(out)]
    overrides = ["--limit", "2", "model.video.time_from=video_r1", "eval.max_new_tokens=2"]
    assert main([*args, *overrides, *([f"eval.video_time_from={asked}"] if asked else [])]) == 0
    expected = asked or "sampled"
    assert timings and set(timings) == {expected}
    assert json.loads((out / "results.json").read_text())["config"]["model"]["video"]["time_from"] == expected


def test_evaluation_during_training_times_videos_as_eval_video_time_from_says():
    cfg = Config()
    cfg.model.video.time_from = "video_r1"
    assert EvalSettings.of(cfg).model.video.time_from == "sampled"
    cfg.eval.video_time_from = "video_r1"
    assert EvalSettings.of(cfg).model.video.time_from == "video_r1"


def evaluate_four(out: Path, data: Path, *overrides: str, model: str = "tiny:qwen2_5_vl") -> Path:
    """`vlrl eval` of `model` (the tiny one) on the first 4 refcoco records of `data`, into `out`."""
    args = ["eval", "--task", f"refcoco={data}", "--model", model, "--out", str(out), "--limit", "4"]
    assert main([*args, "model.max_pixels=50176", "eval.max_new_tokens=10", *overrides]) == 0
    return out


def test_eval_is_deterministic_and_compare_prints_differences(tmp_path, rec_data, tiny_qwen25, capsys):
    outs = [evaluate_four(tmp_path / name, rec_data) for name in ("a", "b")]
    a, b = (read_metrics(o) for o in outs)
    assert a == b and a["refcoco"]["acc@0.5"] >= 0
    assert samples_path(outs[0], "refcoco").read_text() == samples_path(outs[1], "refcoco").read_text()
    printed = capsys.readouterr().out
    assert printed.count("eval refcoco 4/4 | ") == 2 and "done in" in printed  # a progress line: stdout is no terminal
    assert main(["eval", "--compare", str(outs[0]), str(outs[1])]) == 0
    printed = capsys.readouterr().out
    assert "acc@0.5" in printed and "+0.0000" in printed
    assert "different settings" not in printed


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
    # Each held-out evaluation prints one line of the task's headline metrics (stdout is no terminal here).
    held_out = [line for line in capsys.readouterr().out.splitlines() if line.startswith("held-out")]
    assert [line.split(" | ")[0] for line in held_out] == ["held-out step 2", "held-out step 3"]
    for line, row in zip(held_out, rows[1:], strict=True):
        shown = dict(part.rsplit(" ", 1) for part in line.split(" | ")[2:])
        assert list(shown) == ["acc@0.5", "mean_iou", "format_rate", "reward"]  # refcoco's headline, then the reward
        assert all(float(value) == pytest.approx(row[f"eval/{k}"], abs=1e-4) for k, value in shown.items())
    assert main(["plot", str(run_dir)]) == 0
    printed = capsys.readouterr().out.splitlines()
    written = [run_dir / "plots" / f"rl_{topic}.png" for topic in PLOTTED_RL_TOPICS]
    assert printed == [f"wrote {png}" for png in written]  # the headline first
    assert all(png.read_bytes()[:4] == b"\x89PNG" for png in written)
    assert sorted(p.name for p in (run_dir / "plots").iterdir()) == sorted(png.name for png in written)


def test_eval_of_a_run_checkpoint_reads_the_runs_config(tmp_path, rec_data, tiny_qwen25, capsys, monkeypatch):
    """Without --config, library defaults would evaluate with a 1000x larger image budget and
    20x more new tokens than the run used: the run's own config.yaml applies instead."""
    from tests.trainer.test_sft import sft_overrides

    monkeypatch.chdir(tmp_path)  # the default output folder is relative: runs/eval/...
    run = tmp_path / "my-run"
    extra = {
        "sft.steps": 2,
        "data.eval": str(rec_data),
        "eval.max_new_tokens": 6,
        "task.options.iou_convention": "continuous",
    }
    assert main(["sft", *sft_overrides(run, rec_data, **extra)]) == 0
    checkpoint = run / "checkpoints" / "step-0000002"
    capsys.readouterr()
    assert main(["eval", "--model", str(checkpoint), "--limit", "2"]) == 0
    assert f"config: {run / 'config.yaml'} (the run that wrote this checkpoint" in capsys.readouterr().out
    out = tmp_path / "runs" / "eval" / "refcoco-my-run-step-0000002"  # named after the run and step
    results = json.loads((out / "results.json").read_text())
    assert results["n-samples"] == {"refcoco": {"original": 2, "effective": 2}}
    assert results["configs"]["refcoco"]["data"] == str(rec_data)
    config = results["config"]
    assert config["model"]["max_pixels"] == 50176 and config["eval"]["max_new_tokens"] == 6
    assert config["model"]["path"] == str(checkpoint) and config["task"]["options"] == {"iou_convention": "continuous"}

    # Another task on the same checkpoint: the run's settings, without its task's options or data.
    counting = tmp_path / "counting.json"
    task_class("counting")().synthesize(counting, 2, seed=1)
    assert main(["eval", "--model", str(checkpoint), "--task", f"counting={counting}", "--out", "c"]) == 0
    config = json.loads((tmp_path / "c" / "results.json").read_text())["config"]
    assert (
        config["task"] == {"name": "counting", "rewards": {}, "options": {}} and config["model"]["max_pixels"] == 50176
    )
    capsys.readouterr()
    assert main(["eval", "--model", str(checkpoint), "--task", "counting", "--out", "d"]) == 2
    printed = " ".join(capsys.readouterr().out.split())  # not the refcoco run's held-out file:
    assert (
        f"the run {run} trained refcoco, so none of its data files is counting's: give them with --task counting=FILE"
        in printed
    )
    assert main(["eval", "--model", str(checkpoint), "--task", "countng", "--out", "d"]) == 2
    assert "task.name 'countng' is not a registered task; did you mean 'counting'" in capsys.readouterr().out


def test_default_eval_folders_have_no_colons_or_nested_paths():
    from vlrl.cli import default_eval_dir

    example = f"{ROOT / 'docs' / 'examples' / 'largest_color.py'}:LargestColor"
    assert default_eval_dir([example], "tiny:qwen2_5_vl") == Path("runs/eval/largest_color-tiny_qwen2_5_vl")
    assert default_eval_dir(["coco", "refcoco+"], "/models/Qwen2.5-VL-3B-Instruct") == Path(
        "runs/eval/detection+refcoco+-Qwen2.5-VL-3B-Instruct"
    )


def write_results(folder, options=None, rewards=None, ran=None, **changes):
    from vlrl.config import Config, to_dict

    config = to_dict(Config())
    for dotted_key, value in changes.items():
        section, key = dotted_key.split(".", 1)
        config[section][key] = value
    folder.mkdir()
    ran = {"task": "refcoco", "data": "val.json", "options": options or {"iou_convention": "vlm_r1"}, **(ran or {})}
    results = {  # lmms-eval's layout, as vlrl/eval/layout.py writes it
        "results": {"refcoco": {"alias": "refcoco", "acc@0.5,none": 0.5, "acc@0.5_stderr,none": "N/A"}},
        "n-samples": {"refcoco": {"original": 8, "effective": 8}},
        "configs": {"refcoco": {**ran, "rewards": rewards or {"format": 1.0, "iou": 1.0}}},
    }
    (folder / "results.json").write_text(json.dumps({**results, "config": config}))
    return folder


def test_compare_warns_when_the_results_were_produced_with_different_settings(tmp_path, capsys):
    a = write_results(tmp_path / "a", **{"eval.max_new_tokens": 48, "model.max_pixels": 12544})
    b = write_results(
        tmp_path / "b",
        **{"rollout.max_new_tokens": 48, "model.max_pixels": 12544, "model.path": "x", "trainer.lr": 0.5},
    )
    assert main(["eval", "--compare", str(a), str(b)]) == 0
    assert "different settings" not in capsys.readouterr().out  # same effective length; path and lr do not count
    c = write_results(tmp_path / "c", **{"model.max_pixels": 50176, "eval.temperature": 1.0})
    assert main(["eval", "--compare", str(a), str(c)]) == 0
    out = capsys.readouterr().out
    assert "warning: A and B were evaluated with different settings" in out
    assert "model.max_pixels: 12544 vs 50176" in out and "eval.temperature: 0.0 vs 1.0" in out
    assert "max new tokens: 48 vs 1024" in out and "sampling seed (trainer.seed): - vs 42" in out
    assert main(["eval", "--compare", str(a / "results.json"), str(c)]) == 0  # the file itself, as well as its folder
    assert "model.max_pixels: 12544 vs 50176" in capsys.readouterr().out
    # The task's variant and reward weights as each task ran (a mixture entry's are not in task.*)
    d = write_results(tmp_path / "d", {"iou_convention": "continuous"}, {"iou": 2.0}, **{"eval.max_new_tokens": 48})
    assert main(["eval", "--compare", str(a), str(d)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "refcoco: options.iou_convention: vlm_r1 vs continuous" in out
    assert "refcoco: rewards: {'format': 1.0, 'iou': 1.0} vs {'iou': 2.0}" in out
    # A benchmark's scoring with and without stripping the reasoning (eval.reasoning_tags)
    e, f = (
        write_results(tmp_path / n, ran={"reasoning_tags": tags})
        for n, tags in (("e", [["<think>", "</think>"]]), ("f", None))
    )
    assert main(["eval", "--compare", str(e), str(f)]) == 0
    assert "refcoco: reasoning_tags: [['<think>', '</think>']] vs None" in " ".join(capsys.readouterr().out.split())


def test_compare_names_a_changed_video_setting_top_p_task_data_and_effective_sample_count(tmp_path):
    """Settings under a prefix (model.video.*) count key by key; a task's data file and the
    samples it scored (n-samples' effective count) are part of what decides the numbers."""
    from vlrl.eval.compare import setting_differences

    a = json.loads((write_results(tmp_path / "a") / "results.json").read_text())
    b = json.loads((write_results(tmp_path / "b", ran={"data": "other.json"}) / "results.json").read_text())
    b["config"]["model"]["video"]["fps"] = a["config"]["model"]["video"]["fps"] / 2
    b["config"]["eval"]["top_p"] = 0.9
    b["n-samples"]["refcoco"]["effective"] = 6
    assert setting_differences(a, a) == []
    assert setting_differences(a, b) == [
        "eval.top_p: 1.0 vs 0.9",
        "model.video.fps: 2.0 vs 1.0",
        "refcoco: data: val.json vs other.json",
        "refcoco: samples: 8 vs 6",
    ]


def test_compare_of_two_lmms_eval_results_shows_b_minus_a_of_the_metrics_not_their_stderr(tmp_path):
    from rich.console import Console

    from vlrl.eval.compare import compare
    from vlrl.eval.layout import read_metrics

    for name, acc, stderr in (("a", 0.5, 0.01), ("b", 0.75, 0.02)):
        (tmp_path / name).mkdir()
        results = {"results": {"mmbench": {"alias": "mmbench", "acc,none": acc, "acc_stderr,none": stderr}}}
        (tmp_path / name / "results.json").write_text(json.dumps(results))
    assert read_metrics(tmp_path / "a") == {"mmbench": {"acc": 0.5}}
    table, _ = compare(tmp_path / "a", tmp_path / "b")
    console = Console(record=True, width=200)
    console.print(table)
    rows = [line.split() for line in console.export_text().splitlines() if "mmbench" in line]
    assert rows == [["│", "mmbench", "│", "acc", "│", "0.5000", "│", "0.7500", "│", "+0.2500", "│"]]


def test_shards_are_whole_batches_in_order_and_cover_every_sample():
    from vlrl.eval.harness import shard
    from vlrl.parallel.distributed import Processes

    for n, batch, world in [(7, 2, 2), (16, 8, 2), (5, 8, 4), (0, 4, 2), (33, 4, 3)]:
        parts = [shard(n, batch, Processes(rank, world)) for rank in range(world)]
        assert [i for part in parts for i in part] == list(range(n))  # gathered in process order: the order
        assert all(part.start % batch == 0 for part in parts if part)  # each batch is one process's


def test_eval_under_torchrun_shares_the_samples_and_writes_the_single_process_results(tmp_path, tiny_qwen25):
    from tests.parallel.test_distributed import torchrun

    data = tmp_path / "val.json"
    task_class("refcoco")().synthesize(data, 7, seed=3)
    args = ["--task", f"refcoco={data}", "--model", "tiny:qwen2_5_vl", "--batch-size", "2",
            "model.max_pixels=12544", "eval.max_new_tokens=10", "trainer.progress=false"]  # fmt: skip
    assert main(["eval", *args, "--out", str(tmp_path / "one")]) == 0
    two = torchrun(["-m", "vlrl.cli", "eval", *args, "--out", str(tmp_path / "two")], tmp_path)
    assert two.returncode == 0, two.stderr[-3000:]
    assert two.stdout.count("results:") == 1  # process 0 writes and says so
    timing = ("date", "total_evaluation_time_seconds", "samples_per_second")

    def results(name: str) -> dict:
        return {k: v for k, v in json.loads((tmp_path / name / "results.json").read_text()).items() if k not in timing}

    assert results("two") == results("one") and results("one")["n-samples"]["refcoco"]["effective"] == 7
    assert (
        samples_path(tmp_path / "two", "refcoco").read_text() == samples_path(tmp_path / "one", "refcoco").read_text()
    )


def test_eval_reports_what_a_reward_failed_to_score(tmp_path, rec_data, tiny_qwen25, capsys):
    """A reward function that raises scores 0, as in training, and the results count it
    (reward_failures/NAME), as a training step's metrics do; the console says why."""
    (tmp_path / "fragile.py").write_text("def fragile(completions, samples):\n    raise ValueError('no')\n")
    out = tmp_path / "out"
    args = ["eval", "--task", f"refcoco={rec_data}", "--model", "tiny:qwen2_5_vl", "--out", str(out), "--limit", "3"]
    fragile = f"task.rewards.{tmp_path / 'fragile.py'}:fragile=1"
    assert main([*args, "model.max_pixels=12544", "eval.max_new_tokens=4", fragile]) == 0
    metrics = read_metrics(out)["refcoco"]
    assert metrics["reward/fragile"] == 0.0 and metrics["reward_failures/fragile"] == 3.0
    printed = " ".join(capsys.readouterr().out.split())
    assert (
        "reward fragile on 3 of 3 completions: it raised or gave no finite number (the first: ValueError: no)"
        in printed
    )
    assert "oversized_completions" not in metrics  # four tokens: nothing too long to read


def test_score_of_an_evaluations_samples_says_where_they_answer_other_data_or_another_task(
    tmp_path, rec_data, tiny_qwen25, capsys
):
    """vlrl eval's samples file scored against its own data states each record's target; against
    other data whose ids match (or named for another task) it is scored and said to be foreign."""
    out = tmp_path / "out"
    args = ["eval", "--task", f"refcoco={rec_data}", "--model", "tiny:qwen2_5_vl", "--out", str(out), "--limit", "3"]
    assert main([*args, "model.max_pixels=12544", "eval.max_new_tokens=4"]) == 0
    records = json.loads(rec_data.read_text())
    for record in records:  # the same ids and images, other boxes
        record["solution"] = [v + 1 for v in record["solution"]]
    other = rec_data.parent / "other.json"
    other.write_text(json.dumps(records))
    renamed = tmp_path / "2026_samples_counting.jsonl"  # lmms-eval's name of another task's samples
    renamed.write_bytes(samples_path(out, "refcoco").read_bytes())
    capsys.readouterr()

    def score(data: Path, completions: Path) -> str:
        scored = ["score", "--task", "refcoco", "--data", str(data), "--completions", str(completions)]
        assert main([*scored, "--out", str(tmp_path / "scored.jsonl")]) == 0
        return " ".join(capsys.readouterr().out.split())

    assert "another target" not in score(rec_data, samples_path(out, "refcoco"))
    printed = score(other, samples_path(out, "refcoco"))
    assert [f"samples_refcoco.jsonl:{n}: its target" in printed for n in (1, 2, 3)] == [True] * 3
    assert "is not that of the data record it names" in printed and "named as the samples" not in printed
    printed = score(rec_data, renamed)
    assert "another target" not in printed
    assert f"--completions {renamed} is named as the samples of task counting; scored as refcoco" in printed


@pytest.mark.parametrize(
    "text, message",
    [('{"results": {"refcoco": {"acc@0.5,none"', "is not readable JSON"), ("{}", "holds no 'results' mapping")],
    ids=["torn", "not an evaluation's"],
)
def test_compare_of_a_results_json_that_is_not_one_says_so_in_one_line(tmp_path, capsys, text, message):
    a = write_results(tmp_path / "a")
    b = tmp_path / "b"
    b.mkdir()
    (b / "results.json").write_text(text)
    assert main(["eval", "--compare", str(a), str(b)]) == 2
    assert f"error: {b / 'results.json'} {message}" in capsys.readouterr().out


def test_compare_given_a_model_or_settings_to_evaluate_refuses_them_by_name(tmp_path, capsys):
    a, b = write_results(tmp_path / "a"), write_results(tmp_path / "b")
    assert main(["eval", "--compare", str(a), str(b), "--model", "runs/x", "--limit", "0", "eval.top_p=0.5"]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "error: vlrl eval --compare DIR1 DIR2 reads two earlier evaluations and runs none: --model, --limit, " \
        "overrides would do nothing" in out  # fmt: skip
    assert main(["eval", "--compare", str(a), str(b)]) == 0


def test_export_into_a_file_is_refused_before_anything_loads(tmp_path, capsys, monkeypatch):
    target = tmp_path / "model.bin"
    target.write_text("not a folder")
    monkeypatch.setattr("vlrl.models.loading.export_full_model", lambda *a: pytest.fail("exported into a file"))
    assert main(["export", str(tmp_path / "ckpt"), str(target)]) == 2
    assert f"error: vlrl export OUT {target} is a file; give the folder to write" in capsys.readouterr().out


def test_export_into_a_folder_that_holds_files_is_refused_before_anything_loads(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("vlrl.models.loading.export_full_model", lambda *a: pytest.fail("exported among other files"))
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "adapter_model.safetensors").write_bytes(b"")
    assert main(["export", str(checkpoint), str(checkpoint)]) == 2  # a LoRA checkpoint's adapters beside the model
    assert f"error: vlrl export OUT {checkpoint} holds files already; give a new or empty folder" in (
        capsys.readouterr().out
    )


def test_export_and_eval_of_a_checkpoint_from_before_a_change_use_the_settings_it_trained_with(
    tmp_path, rec_data, capsys
):
    """config.yaml states a run's latest settings; an earlier checkpoint trained with those that
    config_history.jsonl says were changed after it (where a dotted key restores them)."""
    import json
    import os

    run = tmp_path / "run"
    for step in (2, 4):
        assert main(["tiny-model", str(run / "checkpoints" / f"step-{step:07d}")]) == 0
    os.symlink(run / "checkpoints" / "step-0000002", run / "checkpoints" / "final")  # no step in its name
    (run / "config.yaml").write_text(
        "model: {path: tiny:qwen2_5_vl, max_pixels: 25088}\neval: {limit: 0}\n"
        "task: {name: refcoco, rewards: {iou: 1.0, format: 0.5}}\n"
        "rollout: {stages: [{steps: 5, max_new_tokens: 32}, {max_new_tokens: 64}]}\n"
    )
    changes = {
        "model.max_pixels": {"from": 12544, "to": 25088},
        "eval.limit": {"from": 3, "to": 0},
        "task.rewards.format": {"from": None, "to": 0.5},  # added since: no dotted key removes it
        "rollout.stages.length": {"from": 0, "to": 2},  # a list of mappings
        "rollout.stages[0].steps": {"from": None, "to": 5},
    }
    (run / "config_history.jsonl").write_text(json.dumps({"step": 3, "changes": changes, "data_changed": {}}) + "\n")
    for name, pixels in (("step-0000002", 12544), ("step-0000004", 25088), ("final", 25088)):
        out = tmp_path / f"export-{name}"
        assert main(["export", str(run / "checkpoints" / name), str(out)]) == 0
        processor = json.loads((out / "processor_config.json").read_text())
        assert processor["image_processor"]["size"]["longest_edge"] == pixels, name
    printed = capsys.readouterr().out
    assert "the run changed settings after step-0000002" in printed and "model.max_pixels=12544" in printed
    restored = settings_of_checkpoint(str(run / "checkpoints" / "step-0000002"), run / "config.yaml")
    assert restored.origin == f"{run / 'config_history.jsonl'} at step 2"  # where messages say they were set
    assert restored.settings == {"model.max_pixels": 12544, "eval.limit": 3}
    evaluated = tmp_path / "eval"
    checkpoint = run / "checkpoints" / "step-0000002"
    eval_args = ["eval", "--model", str(checkpoint), "--task", f"refcoco={rec_data}", "--out", str(evaluated)]
    assert main([*eval_args, "--limit", "1"]) == 0
    results = json.loads((evaluated / "results.json").read_text())
    assert results["config"]["model"]["max_pixels"] == 12544
    assert results["config"]["eval"]["limit"] == 1  # the flag given wins over the checkpoint's 3
    printed = " ".join(capsys.readouterr().out.split())
    assert "the run also changed task.rewards.format, rollout.stages.length, rollout.stages[0].steps" in printed


def test_eval_into_a_file_says_it_is_one(tmp_path, capsys):
    target = tmp_path / "results"
    target.write_text("a file")
    assert main(["eval", "--model", "tiny:qwen2_5_vl", "--task", "refcoco", "--out", str(target)]) == 2
    assert f"eval output directory {target} cannot be created: it is a file; give a folder" in capsys.readouterr().out
    assert target.read_text() == "a file"


# -- the harness on a scripted engine: records, skipped samples, processes -------------------------
class _AnswerEngine:
    """Answers each prompt with the text its problem names after 'say ' ('reject' refuses it)."""

    device = __import__("torch").device("cpu")

    def generate(self, prompts, params, generator=None):
        from vlrl.rollout.base import Completion, Generation

        out = []
        for prompt in prompts:
            said = prompt.text.split("say ", 1)[1]
            out.append(Generation([], "too long") if said == "reject" else Generation([Completion([1], said, False)]))
        return out


def _render(processor, jobs, model):
    """render_prompts without a processor: a prompt of the problem's text, or the failure of a
    sample whose media are 'broken'."""
    import torch

    from vlrl.models.batch import Prompt
    from vlrl.models.prompting import UnusableSample

    return [
        UnusableSample(sample.source, "media unreadable")
        if sample.images == ["broken"]
        else Prompt(
            torch.zeros(1, dtype=torch.long), torch.zeros(1, dtype=torch.long), {}, sample.problem, prefill="<think>"
        )
        for _, sample in jobs
    ]


def _scripted_eval(
    monkeypatch, said: list[str], procs=None, progress=None, task=None, truth=3, engine=None, rows=None, **eval_settings
):
    """countbenchqa (a benchmark: the stripped response must be the number; or `task`) on samples
    whose truth is `truth` and whose responses are `said` ('broken': the media fail; 'reject': the
    engine refuses); every prompt's chat template prefilled '<think>'."""
    import vlrl.eval.harness as harness
    from vlrl.config import EvalConfig, ModelConfig, TaskConfig
    from vlrl.data.sample import Sample
    from vlrl.parallel.distributed import Processes
    from vlrl.tasking.registry import make_task

    monkeypatch.setattr(harness, "render_prompts", _render)
    task = task or make_task(TaskConfig(name="countbenchqa"))
    samples = [
        Sample(
            id=f"s{i}",
            task=task.name,
            problem=f"say {text}",
            solution=truth,
            source=f"cb.parquet:{i}",
            images=["broken" if text == "broken" else "ok.png"],
            meta={"label": "dots"},
        )
        for i, text in enumerate(said)
    ]
    settings = harness.EvalSettings(EvalConfig(batch_size=2, **eval_settings), ModelConfig(), 8, 0)
    return harness.evaluate(
        engine or _AnswerEngine(), None, task, samples, settings, "cb.parquet", progress, procs or Processes(), rows
    )


class _OnePromptAtATime(_AnswerEngine):
    """Runs the GPU out of memory in a call of more than one prompt."""

    def generate(self, prompts, params, generator=None):
        import torch

        if len(prompts) > 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return super().generate(prompts, params, generator)

    def sleep(self):
        pass

    def wake(self):
        pass


def test_an_evaluation_batch_that_runs_out_of_memory_is_answered_one_prompt_a_call_where_halve_on_oom_says(
    monkeypatch,
):
    import torch

    from vlrl.rollout.parts import RolloutRows

    said = ["3", "4", "broken", "reject", "3"]
    expected = _scripted_eval(monkeypatch, said)
    warnings = []
    got = _scripted_eval(monkeypatch, said, engine=_OnePromptAtATime(), rows=RolloutRows(True, warn=warnings.append))
    assert (got.records, got.skipped, got.metrics) == (expected.records, expected.skipped, expected.metrics)
    assert len(warnings) == 1 and "in parts of at most 1 rows" in warnings[0]
    with pytest.raises(torch.OutOfMemoryError):  # evaluate's default RolloutRows(): the error ends it
        _scripted_eval(monkeypatch, said, engine=_OnePromptAtATime())


def test_a_benchmarks_records_are_the_answered_samples_in_order_and_the_rest_are_skipped(monkeypatch):
    said = ["3", "<think>maybe 4</think> 3 ", "broken", "4", "reject", "\n3"]
    batches = []
    result = _scripted_eval(monkeypatch, said, progress=batches.append)
    assert batches == [2, 2, 2]  # each batch, whatever it kept
    # A benchmark scores the completion alone, as lmms-eval decodes it: not the prefilled '<think>'

    assert result.skipped == ["cb.parquet:2: media unreadable", "cb.parquet:4: too long"]
    assert [r["id"] for r in result.records] == ["s0", "s1", "s3", "s5"]
    assert [r["doc_id"] for r in result.records] == [0, 1, 2, 3]
    assert [r["resps"] for r in result.records] == [["3"], ["<think>maybe 4</think> 3 "], ["4"], ["\n3"]]
    assert [r["filtered_resps"] for r in result.records] == [["3"], ["3"], ["4"], ["3"]]  # reasoning, whitespace gone
    assert [r["acc"] for r in result.records] == [1.0, 1.0, 0.0, 1.0]
    assert {r["target"] for r in result.records} == {3} and result.records[0]["input"] == "say 3"
    assert result.metrics == {"acc": 0.75}  # over the answered samples, the skipped counted in none
    assert result.config["reasoning_tags"] == [["<think>", "</think>"], ["<analysis>", "</analysis>"]]
    none = _scripted_eval(monkeypatch, said, reasoning_tags=None)
    assert [r["filtered_resps"] for r in none.records] == [r["resps"] for r in none.records]
    assert none.metrics == {"acc": 0.5} and none.config["reasoning_tags"] is None  # countbenchqa strips "\n3"


def test_samples_shared_among_processes_give_every_process_the_single_process_result(monkeypatch):
    """Each of three processes answers its share (whole batches of 2); every process then holds
    every sample once, in order, and every skipped one, as one process would."""
    import threading

    said = ["3", "broken", "4", "3", "reject", "3", "broken", "3", "4"]
    single = _scripted_eval(monkeypatch, said)

    class Shared:
        def __init__(self, world):
            self.world, self.posts, self.barrier = world, {}, threading.Barrier(world)

    class Proc:
        def __init__(self, shared, rank):
            self.shared, self.rank, self.world, self.calls = shared, rank, shared.world, 0

        def gather(self, items):
            key, self.calls = self.calls, self.calls + 1
            self.shared.posts[key, self.rank] = list(items)
            self.shared.barrier.wait(timeout=30)
            return [item for rank in range(self.world) for item in self.shared.posts[key, rank]]

    shared, results, answered = Shared(3), {}, {}

    def run(rank):
        counted = []
        results[rank] = _scripted_eval(monkeypatch, said, procs=Proc(shared, rank), progress=counted.append)
        answered[rank] = sum(counted)

    threads = [threading.Thread(target=run, args=(rank,)) for rank in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert answered == {0: 4, 1: 4, 2: 1}  # ceil(5 batches / 3) = 2 batches each, the last one's share
    for rank in range(3):
        r = results[rank]
        assert (r.metrics, r.records, r.skipped) == (single.metrics, single.records, single.skipped), rank
    assert single.skipped == [
        "cb.parquet:1: media unreadable",
        "cb.parquet:4: too long",
        "cb.parquet:6: media unreadable",
    ]
    assert [r["id"] for r in single.records] == ["s0", "s2", "s3", "s5", "s7", "s8"]


def test_compare_shows_every_metric_of_either_result_with_b_minus_a_and_a_dash_where_one_lacks_it(tmp_path):
    from rich.console import Console

    from vlrl.eval.compare import compare, setting_differences

    a = write_results(tmp_path / "a", **{"data.limit": 0})
    b = write_results(tmp_path / "b", **{"data.limit": 50})
    for folder, metrics in ((a, {"refcoco": {"acc": 0.75, "iou": 0.5}, "counting": {"acc": 0.5}}),
                            (b, {"refcoco": {"acc": 0.5, "reward": 1.25}, "screenspot_v2": {"acc": 0.125}})):  # fmt: skip
        results = json.loads((folder / "results.json").read_text())
        results["results"] = {
            task: {f"{name},none": value for name, value in values.items()} for task, values in metrics.items()
        }
        if folder == b:  # a task only B ran: its settings are named against '-'
            results["configs"]["screenspot_v2"] = {"task": "screenspot_v2", "data": "ss.parquet"}
        (folder / "results.json").write_text(json.dumps(results))
    table, differences = compare(a, b)
    console = Console(record=True, width=200)
    console.print(table)
    lines = [line for line in console.export_text().splitlines() if "│" in line]  # the rows, not the header
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in lines]
    assert rows == [
        ["counting", "acc", "0.5000", "-", "-"],
        ["refcoco", "acc", "0.7500", "0.5000", "-0.2500"],
        ["refcoco", "iou", "0.5000", "-", "-"],
        ["refcoco", "reward", "-", "1.2500", "-"],
        ["screenspot_v2", "acc", "-", "0.1250", "-"],
    ]
    assert differences == [
        "data.limit: 0 vs 50",
        "screenspot_v2: data: - vs ss.parquet",
    ]  # a subset is another evaluation
    assert (
        setting_differences(json.loads((a / "results.json").read_text()), json.loads((a / "results.json").read_text()))
        == []
    )


def test_a_task_with_rewards_reports_the_mean_of_each_samples_own_rewards(monkeypatch):
    from vlrl.config import TaskConfig
    from vlrl.tasking.registry import make_task

    task = make_task(TaskConfig(name="counting", rewards={"format": 1.0, "count_exact": 2.0}))
    said = ["r</think>\n<answer>3</answer>", "broken", "r</think>\n<answer>4</answer>", "<answer>3</answer>"]
    result = _scripted_eval(monkeypatch, said, task=task, truth={"count": 3, "points": None})
    records = result.records
    assert [r["resps"] for r in records] == [["<think>" + said[0]], ["<think>" + said[2]], ["<think>" + said[3]]]
    assert [r["rewards"] for r in records] == [
        {"format": 1.0, "count_exact": 1.0},
        {"format": 1.0, "count_exact": 0.0},
        {"format": 0.0, "count_exact": 1.0},
    ]
    assert [r["reward"] for r in records] == [3.0, 1.0, 2.0]  # each sample's own, weighted
    assert result.metrics["reward"] == 2.0 and result.metrics["reward/format"] == pytest.approx(2 / 3)
    assert result.metrics["reward/count_exact"] == pytest.approx(2 / 3)
    assert result.config["rewards"] == {"format": 1.0, "count_exact": 2.0} and "reasoning_tags" not in result.config
    assert result.skipped == ["cb.parquet:1: media unreadable"]


def test_a_task_with_rewards_whose_every_sample_was_skipped_reports_no_metric(monkeypatch):
    from vlrl.config import TaskConfig
    from vlrl.tasking.registry import make_task

    task = make_task(TaskConfig(name="counting"))
    result = _scripted_eval(monkeypatch, ["broken", "reject"], task=task, truth={"count": 3, "points": None})
    assert (result.metrics, result.records) == ({}, [])
    assert result.skipped == ["cb.parquet:0: media unreadable", "cb.parquet:1: too long"]


def test_results_record_no_reasoning_tags_for_a_benchmark_whose_reference_strips_none():
    from vlrl.config import EvalConfig, ModelConfig, TaskConfig
    from vlrl.eval.harness import EvalSettings, task_config
    from vlrl.tasking.registry import make_task

    settings = EvalSettings(EvalConfig(), ModelConfig(), 8, 0)
    video = task_config(make_task(TaskConfig(name="video_r1_mvbench")), settings, "eval_mvbench.json")
    assert video == {"task": "video_r1_mvbench", "data": "eval_mvbench.json", "options": {},
                     "dataset_path": "Video-R1/Video-R1-eval eval_mvbench.json", "test_split": "",
                     "reference": "Video-R1 59d65c3 src/eval_bench.py", "reasoning_tags": None}  # fmt: skip
    counted = task_config(make_task(TaskConfig(name="countbench")), settings, "cb")
    assert counted["reasoning_tags"] == [["<think>", "</think>"], ["<analysis>", "</analysis>"]]


def test_a_headline_line_shows_the_chosen_metrics_in_order_to_four_significant_digits():
    from vlrl.config import TaskConfig
    from vlrl.eval.harness import headline_line, headline_names
    from vlrl.tasking.registry import make_task

    counting = make_task(TaskConfig(name="counting"))
    assert headline_names(counting) == ["accuracy", "mae", "format_rate", "reward"]
    assert headline_names(counting, ["reward", "mae", "mae"]) == ["reward", "mae"]
    metrics = {"mae": 12.34567, "accuracy": 0.523449, "reward": 0.000123456, "format_rate": 1.0}
    assert headline_line("held-out step 2", metrics, ["accuracy", "mae", "missing", "reward"]) == (
        "held-out step 2 | accuracy 0.5234 | mae 12.35 | reward 0.0001235"
    )


def test_a_process_reports_progress_over_its_own_share_and_says_bad_records_before_bad_media(monkeypatch):
    import io
    from types import SimpleNamespace

    from rich.console import Console

    import vlrl.eval.harness as harness
    from vlrl.config import EvalConfig, ModelConfig, TaskConfig, TrainerConfig
    from vlrl.eval.layout import TaskResult
    from vlrl.parallel.distributed import Processes
    from vlrl.tasking.registry import make_task

    def evaluate(engine, processor, task, samples, settings, split, progress, procs, rows):
        assert rows.halve_on_oom  # trainer.halve_on_oom's default
        share = harness.shard(len(samples), settings.eval.batch_size, procs)
        for start in range(share.start, share.stop, 2):
            progress(min(2, share.stop - start))
        return TaskResult(task.name, split, {}, [], 1.0, skipped=["cb:5: too long"])

    monkeypatch.setattr(harness, "evaluate", evaluate)
    loaded = SimpleNamespace(samples=list(range(9)), errors=["cb:1: no image"])
    out = io.StringIO()
    settings = harness.EvalSettings(EvalConfig(batch_size=2), ModelConfig(), 8, 0)
    result = harness.evaluate_logged(None, None, make_task(TaskConfig(name="countbenchqa")), loaded, settings,
                                     TrainerConfig(log_every=1), "cb", Console(file=out, width=300), Processes(1, 3))  # fmt: skip
    lines = out.getvalue().splitlines()
    assert [line.split(" | ")[0] for line in lines] == [
        "eval countbenchqa 2/4",
        "eval countbenchqa 4/4",
        "skipped cb:1: no image",
        "skipped cb:5: too long",
    ]  # process 1 of 3 answers samples 4-7 of 9
    assert result.skipped == ["cb:1: no image", "cb:5: too long"]


def test_eval_decodes_with_eval_repetition_penalty_or_the_checkpoints(tmp_path, rec_data, tiny_qwen25):
    """eval.repetition_penalty reaches the engine: the same greedy evaluation with and without
    it answers otherwise (what the penalty computes: tests/rollout/test_hf_engine.py). null takes
    the checkpoint's generation_config.json's, as transformers' generate does."""
    import shutil

    named = tmp_path / "named"
    shutil.copytree(tiny_qwen25, named)
    config = json.loads((named / "generation_config.json").read_text())
    (named / "generation_config.json").write_text(json.dumps({**config, "repetition_penalty": 1.6}))
    answers = {}
    for penalty in ("1.0", "1.6", "null"):
        out = evaluate_four(tmp_path / penalty, rec_data, f"eval.repetition_penalty={penalty}", model=str(named))
        answers[penalty] = [json.loads(line)["resps"] for line in samples_path(out, "refcoco").read_text().splitlines()]
    assert len(answers["1.0"]) == 4 and answers["1.6"] != answers["1.0"]
    assert answers["null"] == answers["1.6"]


def test_a_checkpoints_repetition_penalty_is_read_as_data_and_a_bad_one_named(tmp_path, tiny_qwen25):
    """A generation_config.json from elsewhere: no penalty named is 1.0; a value that is no
    positive number, or a file that is no JSON object, is refused naming the file."""
    import shutil

    from vlrl.config import ConfigError, ModelConfig
    from vlrl.models.loading import checkpoint_repetition_penalty

    shutil.copytree(tiny_qwen25, tmp_path / "m")
    path, cfg = tmp_path / "m" / "generation_config.json", ModelConfig(path=str(tmp_path / "m"))
    path.write_text(json.dumps({"eos_token_id": [1, 2]}))
    assert checkpoint_repetition_penalty(cfg) == 1.0
    for text in (json.dumps({"repetition_penalty": "1.05"}), json.dumps({"repetition_penalty": -1}), "[1, 2]", "{"):
        path.write_text(text)
        with pytest.raises(ConfigError, match="generation_config.json"):
            checkpoint_repetition_penalty(cfg)
    path.unlink()
    assert checkpoint_repetition_penalty(cfg) == 1.0


def test_by_default_an_lmms_eval_benchmark_decodes_with_the_checkpoints_penalty_and_other_tasks_without(
    tmp_path, tiny_qwen25
):
    """eval.repetition_penalty `reference`: lmms-eval's HF classes call generate without one, so
    the checkpoint's generation_config.json decides; Video-R1's evaluator (vLLM) and a task's own
    evaluation use none; a number or null says so for every task."""
    import shutil

    from vlrl.eval.harness import task_run_config
    from vlrl.tasking.registry import eval_task

    named = tmp_path / "named"
    shutil.copytree(tiny_qwen25, named)
    config = json.loads((named / "generation_config.json").read_text())
    (named / "generation_config.json").write_text(json.dumps({**config, "repetition_penalty": 1.6}))
    expected = {
        "reference": {"mmstar": 1.6, "video_r1_mvbench": 1.0, "refcoco": 1.0},
        "1.2": {"mmstar": 1.2, "video_r1_mvbench": 1.2, "refcoco": 1.2},
        "null": {"mmstar": 1.6, "video_r1_mvbench": 1.6, "refcoco": 1.6},
    }
    for setting, by_task in expected.items():
        for name, penalty in by_task.items():
            cfg = load_config(None, [f"model.path={named}", f"eval.repetition_penalty={setting}"], {"task.name": name})
            task = eval_task(cfg.tasks()[0], "qwen2_5_vl", cfg)
            assert EvalSettings.of(task_run_config(cfg, task)).repetition_penalty == penalty, (setting, name)


def test_a_split_named_neither_eval_nor_train_nor_a_file_is_said_to_be_so():
    from tasks.refcoco import RefCOCO
    from vlrl.config import ConfigError, MixtureEntry
    from vlrl.eval.harness import split_path

    entry = MixtureEntry("refcoco", train="train.json", eval="val.json")
    with pytest.raises(
        ConfigError, match=r"--split\) is eval \(data.eval\), train \(data.train\) or a data file; 'test'"
    ):
        split_path(entry, "test", RefCOCO(), "data")
    assert [split_path(entry, split, RefCOCO(), "data") for split in ("eval", "train", "x.json")] == [
        "val.json", "train.json", "x.json"]  # fmt: skip
