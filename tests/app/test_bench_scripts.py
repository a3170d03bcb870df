"""The benchmark scripts run their whole path on CPU (the GPU ones on the tiny model), so they do not rot between sessions."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_recipe_benchmark_reports_its_timings(tiny_qwen25, capsys, monkeypatch):
    sys.path.insert(0, str(ROOT / "bench"))
    import recipe_on_gpu

    from tasks.refcoco import RefCOCO

    scenes = []  # the scene spec each synthesis drew from: the config's task options
    synthesize = RefCOCO.synthesize
    monkeypatch.setattr(RefCOCO, "synthesize", lambda self, *a: scenes.append(self.scene) or synthesize(self, *a))
    args = ["--shape", "tiny", "--device", "cpu", "--steps", "2", "trainer.prompts_per_step=2",
            "rollout.num_generations=2", "rollout.max_new_tokens=8", "model.max_pixels=12544",
            "task.options.synthetic_scene.min_side=170", "task.options.synthetic_scene.max_side=180"]  # fmt: skip
    recipe_on_gpu.main(args)
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [(s.min_side, s.max_side) for s in scenes] == [(170, 180)]
    assert report["steps_measured"] == 1 and report["prompts_per_step"] == 2 and report["max_new_tokens"] == 8
    assert report["median_step_s"] >= report["median_rollout_s"] > 0
    assert 0 < report["completion_tokens_per_step"] <= 2 * 2 * 8
    assert report["rollout_tokens_per_s"] >= report["end_to_end_tokens_per_s"] > 0
    # the HF engine's decoding: step 2's only (step 1 is warm-up), at most 7 forwards of 4 rows
    assert 0 < report["decoding_steps"] <= 7 and report["ms_per_decoding_step"] > 0
    assert 0 < report["useful_row_step_share"] <= 1 and report["decoder_weights_mb"] > 0
    assert report["attended_slot_share"] is None and report["graphs_captured"] == 0  # the dynamic loop, here
    assert report["update_tokens_per_step"] > report["completion_tokens_per_step"]  # prompts counted too
    prompts_and_completions = report["completion_tokens_per_step"] + report["prompt_tokens_per_step"]
    assert abs(report["update_tokens_per_step"] - prompts_and_completions) <= 1  # each rounded on its own
    assert 0 <= report["update_padding"] < 1
    # the update's parts within it (one measured step: its own), each run (beta > 0: a reference)
    parts = report["update_parts_s"]
    assert list(parts) == ["reference", "forward_backward", "optimizer"] and min(parts.values()) > 0
    assert sum(parts.values()) <= report["median_update_s"] + 0.01
    rollout = report["rollout_parts_s"]
    assert min(rollout.values()) > 0 and sum(rollout.values()) <= report["median_rollout_s"] + 0.01
    assert report["weights_read_ms"] is None and report["update_mfu"] is None  # no card figures on the CPU


def test_the_recipe_benchmark_reports_the_static_steps_window_and_its_reads(tiny_qwen25, capsys):
    sys.path.insert(0, str(ROOT / "bench"))
    import recipe_on_gpu

    from vlrl.rollout.decoding import DecodeStats

    args = ["--shape", "tiny", "--device", "cpu", "--steps", "2", "trainer.prompts_per_step=2",
            "rollout.num_generations=2", "rollout.max_new_tokens=8", "model.max_pixels=12544",
            "rollout.hf.static_cache=true"]  # fmt: skip
    recipe_on_gpu.main(args)
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert 0 < report["attended_slot_share"] <= 1 and report["graphs_captured"] == 0  # no graphs on the CPU
    assert report["kv_read_ms"] is None  # no bandwidth figure for a CPU
    # 1,000 decoding steps of 128 rows over 1,000 slots at Qwen2.5-VL-3B's 36,864 bytes a slot,
    # at an H200's 4.8 TB/s: 4.7 GB a step, 0.98 ms
    decoding = DecodeStats(forwards=1000, attended_slots=1000 * 128 * 1000)
    assert recipe_on_gpu.kv_read_ms(decoding, 36_864, 4.8e12) == 0.98
    assert recipe_on_gpu.kv_read_ms(DecodeStats(forwards=1000), 36_864, 4.8e12) is None  # the dynamic loop's


def test_the_recipe_benchmark_profiles_its_last_step_and_leaves_it_out_of_the_figures(tiny_qwen25, capsys, tmp_path):
    sys.path.insert(0, str(ROOT / "bench"))
    import recipe_on_gpu

    args = ["--shape", "tiny", "--device", "cpu", "--steps", "3", "--profile", str(tmp_path / "profile.json"),
            "trainer.prompts_per_step=2", "rollout.num_generations=2", "rollout.max_new_tokens=8",
            "model.max_pixels=12544"]  # fmt: skip
    recipe_on_gpu.main(args)
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    profile = json.loads((tmp_path / "profile.json").read_text())
    # step 2 alone is measured: the profiled step 3's decoding would double the forwards (7 a step at most)
    assert report["steps_measured"] == 1 and 0 < report["decoding_steps"] <= 7
    assert profile["step"] == 3 and 0 < profile["decoding_steps"] <= 7
    for phase in ("rollout", "update"):
        summary = profile[phase]
        assert summary["count"] > 0 and summary["total_ms"] > 0 and summary["wall_s"] > 0
        top = summary["top"]
        assert top == sorted(top, key=lambda e: e["ms"], reverse=True) and sum(e["share"] for e in top) <= 1.0001
    names = {e["name"] for e in profile["update"]["top"]}
    assert any("backward" in n.lower() for n in names) or "aten::mm" in names  # the update's own operators
    with pytest.raises(SystemExit, match="--steps >= 3"):
        recipe_on_gpu.main(["--shape", "tiny", "--device", "cpu", "--steps", "2", "--profile", str(tmp_path / "p")])


def test_demo_seeds_reports_the_gain_against_its_spread_over_seeds(tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "bench"))
    import demo_seeds

    gains = {0: 0.531, 1: 0.656, 2: 0.547}
    for seed, gain in gains.items():
        out = tmp_path / "runs" / f"refcoco-seed{seed}"
        out.mkdir(parents=True)
        before = {"acc@0.5": 0.3, "format_rate": 1.0, "reward": 1.0}
        after = {"acc@0.5": 0.3 + gain, "format_rate": 1.0 - 0.01 * seed, "reward": 1.5}
        summary = {"task": "refcoco", "seed": seed, "before": before, "after": after, "seconds": 300.0 + seed}
        if seed < 2:  # seed 2's summary is older than the field
            summary["cpu"] = ["AVX2", "AVX512"][seed]
        (out / "demo_summary.json").write_text(json.dumps(summary))
    assert demo_seeds.main(["--no-run", "--root", str(tmp_path / "runs"), "--seeds", "0", "1", "2"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [s["seed"] for s in report["seeds"]] == [0, 1, 2] and report["seeds"][2]["seconds"] == 302.0
    assert [s["cpu"] for s in report["seeds"]] == ["AVX2", "AVX512", None]
    acc = report["metrics"]["acc@0.5"]
    assert abs(acc["gain_mean"] - 0.578) < 1e-3 and abs(acc["gain_std"] - 0.0678) < 1e-3  # sample std
    assert abs(acc["gain_over_std"] - acc["gain_mean"] / acc["gain_std"]) < 1e-9
    assert abs(report["metrics"]["format_rate"]["gain_mean"] + 0.01) < 1e-9
    assert report["metrics"]["reward"]["gain_std"] == 0 and report["metrics"]["reward"]["gain_over_std"] is None
    with pytest.raises(SystemExit, match="seed 3"):
        demo_seeds.main(["--no-run", "--root", str(tmp_path / "runs"), "--seeds", "0", "3"])


def test_demo_seeds_run_in_the_working_directory_with_its_relative_config_and_root(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "bench"))
    import demo_seeds

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.yaml").write_text(f"extends: {ROOT / 'configs' / 'demo' / 'counting.yaml'}\n")
    calls = []
    monkeypatch.setattr(
        demo_seeds.subprocess, "run", lambda command, **kw: calls.append((command, kw)) or SimpleNamespace(returncode=0)
    )
    with pytest.raises(SystemExit, match="no demo summary"):
        demo_seeds.main(["--config", "mine.yaml", "--root", "seeds", "--seeds", "0", "1"])
    for seed, (command, kw) in enumerate(calls):
        assert "cwd" not in kw and str(ROOT) in kw["env"]["PYTHONPATH"].split(os.pathsep)
        assert command[command.index("--config") + 1] == "mine.yaml"
        assert command[command.index("--out") + 1] == str(Path("seeds") / f"counting-seed{seed}")
    assert (tmp_path / "seeds" / "counting-seed0.log").is_file()  # the seed's log, here


def test_the_demo_reads_the_checkouts_config_from_any_folder(tmp_path, monkeypatch):
    from vlrl.app.demo import DEFAULT_CONFIG, default_config

    assert default_config() == DEFAULT_CONFIG  # the repository's root: as the README runs it
    monkeypatch.chdir(tmp_path)
    assert default_config() == str(ROOT / DEFAULT_CONFIG)


def test_eval_throughput_reports_samples_per_second_per_backend_and_batch_size(tiny_qwen25, tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "bench"))
    import eval_throughput

    args = ["--task", "countbench", "--samples", "3", "--batch-sizes", "1", "3", "--workdir", str(tmp_path),
            "eval.max_new_tokens=3", "eval.image_pixels=model", "model.max_pixels=12544"]  # fmt: skip
    assert eval_throughput.main(args) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [(r["backend"], r["batch_size"], r["samples"]) for r in report["runs"]] == [("hf", 1, 3), ("hf", 3, 3)]
    for run in report["runs"]:  # samples/s is the samples over the harness's seconds (each rounded)
        rate, seconds = run["samples_per_second"], run["seconds"]
        assert seconds > 0 and abs(rate * seconds - 3) <= 6e-5 * rate + 6e-4 * seconds
    assert report["fastest"] in report["runs"] and report["max_new_tokens"] == 3 and report["task"] == "countbench"
    assert (tmp_path / "countbench" / "dataset" / "data" / "test-00000-of-00001.parquet").is_file()
    with pytest.raises(SystemExit):
        eval_throughput.main(["--backends", "no-such-engine"])


@pytest.mark.slow  # over 20 s on an idle 2-core machine
def test_parallel_benchmarks_report_bytes_per_process_and_the_plans_errors(tiny_qwen25, capsys):
    sys.path.insert(0, str(ROOT / "bench"))
    import parallel_cpu
    import plan_vs_measured

    assert parallel_cpu.main(["--processes", "2", "--strategies", "fsdp2", "--steps", "1"]) == 0
    (run,) = json.loads(capsys.readouterr().out)["runs"]
    assert run["processes"] == 2 and len(run["state_bytes_per_process"]) == 2 and run["median_step_s"] > 0
    assert plan_vs_measured.main(["--shapes", "tiny", "--processes", "2", "--strategies", "fsdp2"]) == 0
    report = json.loads(capsys.readouterr().out)
    (row,) = report["cpu"]
    assert (
        all(abs(term["error"] or 0) < 0.15 for term in row["terms"].values())
        and row["activations"]["micro_batches"] > 0
    )
    assert report["dominant_terms_within_15pct"]
    gpu = report["gpu"]
    assert [(row["token_budget"], row["peak_gb"]) for row in gpu] == [(4096, 85.6), (8192, 104.7), (12288, 123.0)]
    errors = [(r["estimate_gb"] - r["peak_gb"]) / r["peak_gb"] for r in gpu]  # of the rounded estimates
    assert [row["error"] for row in gpu] == pytest.approx(errors, abs=1e-3)
    assert gpu[0]["estimate_gb"] < gpu[1]["estimate_gb"] < gpu[2]["estimate_gb"]  # each at its own budget
    assert report["gpu_peaks_within_15pct"] == all(abs(r["error"]) <= 0.15 for r in gpu)


@pytest.fixture
def bench():
    """bench/step_vs_trl.py as a module."""
    spec = importlib.util.spec_from_file_location("step_vs_trl", ROOT / "bench" / "step_vs_trl.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class RecordedTurns:
    """The step bench's `Turns` without pipes: each wait takes a while, and when each turn
    began and ended is written down."""

    def __init__(self):
        self.events: list[tuple[str, float]] = []

    def wait(self) -> None:
        time.sleep(0.3)
        self.events.append(("begins", time.perf_counter()))

    def give_back(self) -> None:
        self.events.append(("ends", time.perf_counter()))


def test_each_round_of_the_step_bench_samples_with_a_seed_of_its_own(bench, tiny_qwen25, monkeypatch, capsys):
    """A round is a new pair of processes on the same data: with one seed for all, every round
    repeated the same steps (and their completions' lengths, 8% longer on TRL's side)."""
    seeds = []

    def run_round(args, data, s, env, logs):
        seeds.append(s["seed"])
        vlrl, trl = [9.0, 1.0, 1.0], [9.0, 4.0, 4.0]  # a warm-up step, then two measured ones
        return {
            name: {"times": times, "lengths": [4.0] * 3, "peak_rss_mb": 1.0, "peak_gpu_mb": 0.0}
            for name, times in (("vlrl", vlrl), ("trl", trl))
        }

    monkeypatch.setattr(bench, "run_round", run_round)
    argv = ["step_vs_trl.py", "--rounds", "3", "--seed", "5", "--steps", "3", "--turn-steps", "1"]
    monkeypatch.setattr(sys, "argv", argv)
    bench.main()
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert seeds == [5, 6, 7]
    assert report["steps_measured"] == {"vlrl": 6, "trl": 6} and report["ratio_vlrl_over_trl"] == 0.25


def test_the_step_bench_measures_the_steps_after_a_turns_first_and_reports_the_firsts_apart(bench, monkeypatch, capsys):
    """A turn of two steps: its first follows the other process's turn, on a CPU that has grown
    slower for this process meanwhile (docs/performance.md), the second follows this process's
    own step as every step of a run does. The first of each turn is reported apart; a process's
    very first step (warm-up) is in neither."""
    turn_steps = []

    def run_round(args, data, s, env, logs):
        turn_steps.append(s["turn_steps"])
        vlrl, trl = [9.0, 1.0, 5.0, 1.0, 7.0, 1.0], [9.0, 4.0, 6.0, 4.0, 8.0, 4.0]
        return {
            name: {"times": times, "lengths": [4.0] * 6, "peak_rss_mb": 1.0, "peak_gpu_mb": 0.0}
            for name, times in (("vlrl", vlrl), ("trl", trl))
        }

    monkeypatch.setattr(bench, "run_round", run_round)
    monkeypatch.setattr(sys, "argv", ["step_vs_trl.py", "--rounds", "2"])  # the defaults: 6 steps, turns of 2
    bench.main()
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert turn_steps == [2, 2] and report["steps_measured"] == {"vlrl": 6, "trl": 6}
    assert report["ratio_vlrl_over_trl"] == 0.25 and report["ratio_by_round"] == [0.25, 0.25]
    assert report["turn_first_median_step_s"] == {"vlrl": 6.0, "trl": 7.0} and report["turn_first_ratio"] == 0.8571
    monkeypatch.setattr(sys, "argv", ["step_vs_trl.py", "--steps", "5"])
    with pytest.raises(SystemExit):  # not a whole number of turns
        bench.main()


def test_a_step_bench_worker_waits_before_a_turns_first_step_and_gives_back_after_its_last(bench):
    """The worker's side of a turn of two steps: told before every step and after every step but
    the last, it waits for the turn only before steps 1 and 3 and gives it back after step 2 and
    at its end."""
    events = []

    class Go:
        def readline(self):
            events.append("go")
            return "go\n"

    class Done:
        def write(self, line):
            events.append("done")

        def flush(self):
            pass

    read, write = os.pipe()
    turns = bench.Turns(read, write, 2)
    turns.go.close()
    turns.done.close()
    turns.go, turns.done = Go(), Done()
    for step in range(1, 5):
        turns.wait()
        events.append(step)
        if step < 4:
            turns.give_back()
    turns.end()
    assert events == ["go", 1, 2, "done", "go", 3, 4, "done"]


@pytest.mark.parametrize("side", ["run_trl", "run_vlrl"])
def test_each_side_of_the_step_bench_runs_prompts_of_different_lengths_as_at_the_3b_shape(
    side, bench, tiny_qwen25, tmp_path, monkeypatch
):
    """At Qwen2.5-VL-3B's pixel limits the synthetic images give prompts of different lengths,
    so TRL's batch is padded: given a right-padding processor, TRL's forward shifted the image
    token types against the attention mask and Qwen2.5-VL's get_rope_index failed (issue 23;
    docs/gpu.md). The tiny model at the 3B shape's max_pixels reproduces it on CPU. vlrl's side
    runs on the bench's own data, not the demo config's synthetic held-out split. Each side
    waits for its turn before every step and gives it back after every step but the last
    (which ends with the process's work), and the time of a step is taken within its turn:
    the wait is not in it, the fetch of the step's prompts is (the HF Trainer fetches TRL's
    batch before its `on_step_begin`; here each fetch takes a further 0.2 s)."""
    import argparse

    from tasks.refcoco import RefCOCO
    from vlrl.models.tiny import SHAPES

    args = argparse.Namespace(device="cpu", prompts=4, generations=2, max_new_tokens=4, seed=0)
    data = tmp_path / "train.json"
    RefCOCO().synthesize(data, 8, 0)
    turns = RecordedTurns()
    if side == "run_trl":
        from transformers import Trainer as fetcher

        fetch = "get_batch_samples"
    else:
        from vlrl.trainer.rl import RLTrainer as fetcher

        fetch = "draw"
    fetched = getattr(fetcher, fetch)

    def slow_fetch(*a, **k):
        turns.events.append(("fetch", time.perf_counter()))
        time.sleep(0.2)
        return fetched(*a, **k)

    monkeypatch.setattr(fetcher, fetch, slow_fetch)
    times, lengths = getattr(bench, side)(
        bench.settings(args, str(tiny_qwen25), SHAPES["qwen2.5-vl-3b"].max_pixels), data, 2, tmp_path / side, turns
    )
    returned = time.perf_counter()
    assert len(times) == 2 and lengths[0] > 0
    assert [kind for kind, _ in turns.events] == ["begins", "fetch", "ends", "begins", "fetch"]
    (_, first_begins), (_, first_fetch), (_, first_ends), (_, last_begins), _ = turns.events
    assert times[0] <= first_ends - first_begins and times[1] <= returned - last_begins
    assert times[0] >= first_ends - first_fetch - 0.05  # the fetch (and its 0.2 s) is in the step


@pytest.mark.slow  # ~22 s: a process of its own and the full vocabulary
def test_update_memory_reports_the_peak_of_each_mode_and_budget(tiny_qwen25, capsys):
    sys.path.insert(0, str(ROOT / "bench"))
    import update_memory

    # One mode through the script (a process of its own, as each row is), the other in this
    # process: each such process spends ~8 s starting.
    args = ["--budgets", "200", "--modes", "chunked", "--completion", "16", "--hidden", "64", "--layers", "3"]
    assert update_memory.main(args) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["vocabulary"] == 151936 and [(r["mode"], r["budget"]) for r in report["rows"]] == [("chunked", 200)]
    rows = [*report["rows"], update_memory.one("full", 200, 16, "cpu", 64, 2)]
    assert [r["layers"] for r in rows] == [3, 2]  # the model's own, as asked
    for row in rows:
        assert "error" not in row, row
        assert row["tokens"] <= 200 and row["completions"] >= 1 and row["peak_mb"] > 0 and row["seconds"] > 0
    assert [r["chunk_tokens"] for r in rows] == [1024, 0]


def rounds_report(bench: str, capsys, *extra: str) -> dict:
    """The JSON line of a bench built on bench/lora_rollout.py's rounds (its variants sampling
    the same prompts and seeds in turn), run for one round of 2 prompts x 2 completions of up
    to 6 tokens, with `extra` arguments; its variants sampled the same tokens."""
    sys.path.insert(0, str(ROOT / "bench"))
    args = ["--shape", "tiny", "--device", "cpu", "--prompts", "2", "--max-new-tokens", "6", "--rounds", "1",
            *extra, "rollout.num_generations=2", "model.max_pixels=12544"]  # fmt: skip
    assert importlib.import_module(bench).main(args) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["same_tokens"] and 2 * 2 <= report["completion_tokens"] <= 2 * 2 * 6
    return report


def test_lora_rollout_bench_times_full_merged_and_unmerged_decoding_of_the_same_tokens(capsys):
    report = rounds_report("lora_rollout", capsys)
    assert report["rank"] == 64
    for name in ("full", "lora_merged", "lora_unmerged"):  # one measured round: its tokens over its seconds
        seconds, rate = report[f"{name}_median_s"], report[f"{name}_tokens_per_s"]
        assert seconds > 0 and abs(rate * seconds - report["completion_tokens"]) <= 1e-3 * rate + 0.1
    assert abs(report["merged_over_full"] - report["lora_merged_median_s"] / report["full_median_s"]) < 2e-3 * (
        1 + report["merged_over_full"]
    )


def test_the_cache_windows_bench_times_the_window_and_the_whole_cache_on_the_same_tokens(capsys):
    report = rounds_report("cache_windows", capsys)
    ratio = report["windowed_median_s"] / report["whole_cache_median_s"]
    assert abs(report["windowed_over_whole_cache"] - ratio) < 2e-3 * (1 + ratio)


@pytest.mark.parametrize("arch", ["qwen2_5_vl", "qwen3_5", "qwen3_vl_moe"])
def test_the_static_vs_dynamic_bench_times_both_loops_on_the_same_tokens_for_each_family(arch, capsys):
    report = rounds_report("static_vs_dynamic", capsys, "--arch", arch)
    assert report["arch"] == arch
    ratio = report["static_median_s"] / report["dynamic_median_s"]
    assert abs(report["static_over_dynamic"] - ratio) < 2e-3 * (1 + ratio)


@pytest.mark.parametrize(
    ("arch", "attention"),
    [("qwen2_5_vl", "sdpa"), ("qwen3_5", "sdpa"), ("qwen3_vl_moe", "sdpa"), ("qwen2_5_vl", "eager")],
)
def test_the_lean_vs_model_bench_times_both_forwards_on_the_same_tokens_and_says_where_the_lean_step_is_refused(
    arch, attention, capsys
):
    report = rounds_report("lean_vs_model", capsys, "--arch", arch, f"model.attn_implementation={attention}")
    assert report["arch"] == arch and report["lean_taken"] == (attention == "sdpa")  # the step computes SDPA's
    ratio = report["lean_median_s"] / report["model_median_s"]
    assert abs(report["lean_over_model"] - ratio) < 2e-3 * (1 + ratio)


def test_the_decode_step_bench_samples_the_same_tokens_with_a_revisions_step(capsys):
    """Against HEAD's step, imported from its file beside this checkout's: the same tokens and
    log-probs to the bit, both timed."""
    sys.path.insert(0, str(ROOT / "bench"))
    import decode_step_vs_revision

    assert decode_step_vs_revision.main(["--against", "HEAD", "--rounds", "1"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["same_tokens"] and report["max_logprob_diff"] == 0.0
    assert report["now_median_s"] > 0 and report["then_median_s"] > 0
    assert abs(report["now_over_then"] - report["now_median_s"] / report["then_median_s"]) < 2e-3
    assert report["pair_median_now_over_then"] == report["now_over_then"]  # one round: its own ratio


@pytest.mark.slow  # two shortened demos: ~40 s on two cores
def test_demo_against_a_revision_runs_each_side_with_its_own_code_and_removes_the_checkout(tmp_path):
    data = [f"data.train={tmp_path / 'train.json'}", f"data.eval={tmp_path / 'val.json'}", "data.synthetic=true"]
    short = ["data.synthetic_train_size=16", "data.synthetic_eval_size=4", "sft.steps=2", "trainer.steps=2"]
    command = [sys.executable, str(ROOT / "bench" / "demo_vs_revision.py"), "--against", "HEAD", "--rounds", "1"]
    done = subprocess.run([*command, *data, *short], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    assert report["against"] == head.stdout.strip() and report["overrides"][-1] == "trainer.steps=2"
    for side in ("now", "then"):
        assert report[side]["demo_s"] > report[side]["rl_step_s"] > 0 and report[side]["sft_step_s"] > 0
    assert set(report["ratio_now_over_then"]) == {"demo_s", "rl_step_s", "sft_step_s"}
    worktrees = subprocess.run(["git", "worktree", "list"], capture_output=True, text=True, cwd=ROOT).stdout
    assert str(tmp_path) not in worktrees and "then" not in worktrees


@pytest.mark.slow  # ~11 s: it pauses 2 s before each of three steps
def test_pause_penalty_times_the_workload_after_each_pause_and_a_trainers_step_without_its_pause(monkeypatch, capsys):
    """The workload's median per pause and kind; a trainer's step is timed after the pause, which
    is not in it (a 2 s pause before every step: the tiny model's step takes ~0.4 s, and 1.05 s
    once in a loaded `make test`, which failed a 1 s pause)."""
    sys.path.insert(0, str(ROOT / "bench"))
    import pause_penalty

    pause_penalty.main(["--pauses", "0", "0.05", "--repeats", "3"])
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert list(report["workload_ms"]) == ["0.0", "0.05"]
    assert all(0 < ms < 1000 for row in report["workload_ms"].values() for ms in (row["sleep"], row["spin"]))
    paused = []
    wait = pause_penalty.PausedTurns.wait

    def recorded_wait(turns):
        start = time.perf_counter()
        wait(turns)
        paused.append(time.perf_counter() - start)

    monkeypatch.setattr(pause_penalty.PausedTurns, "wait", recorded_wait)
    pause_penalty.main(["--trainer", "vlrl", "--pauses", "2", "--steps", "3"])
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert len(paused) == 3 and min(paused) >= 2  # before each step
    assert list(report["median_step_s"]) == ["2.0"] and 0 < report["median_step_s"]["2.0"] < 2


def test_the_patch_embedding_bench_times_the_convolution_and_the_product_on_the_same_patches(capsys):
    sys.path.insert(0, str(ROOT / "bench"))
    import patch_embed

    patch_embed.main(["--patches", "8", "--rounds", "1", "--repeats", "1"])
    report = json.loads(capsys.readouterr().out)
    assert report["shape"] == "tiny" and report["patches"] == 8 and report["device"] == "cpu"
    for side in ("conv", "linear"):
        assert report[f"{side}_forward_ms"] > 0 and report[f"{side}_forward_backward_ms"] > 0
    assert report["forward_speedup"] == round(report["conv_forward_ms"] / report["linear_forward_ms"], 2)
    assert report["max_abs_difference"] < 1e-4  # the same function, summed in another order


@pytest.mark.slow  # ~17 s from a cold compile cache (CI's)
def test_the_linear_attention_bench_counts_the_eager_steps_passes_over_the_states_and_times_both_sides(capsys):
    """transformers' one-token fallback at 2 rows of 4 value heads: the state decayed, read for
    the key's memory, added to, read for the output and copied back (8 reads, 6 writes); the
    compiled step gives the same output to float rounding."""
    sys.path.insert(0, str(ROOT / "bench"))
    import linear_attention_step

    linear_attention_step.main(
        ["--rows", "2", "--hidden", "64", "--key-heads", "2", "--value-heads", "4", "--head-dim", "16",
         "--rounds", "1", "--repeats", "1"]
    )  # fmt: skip
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (report["state_reads"], report["state_writes"]) == (8, 6)
    assert report["state_bytes"] == 2 * 4 * 16 * 16 * 4  # rows x value heads x key x value, float32
    assert report["eager_ms"] > 0 and report["compiled_ms"] > 0
    assert report["compiled_over_eager"] == round(report["compiled_ms"] / report["eager_ms"], 3)
    assert report["max_abs_difference"] < 1e-5


def test_the_vision_attention_bench_times_both_towers_and_counts_their_sdpa_calls(capsys):
    """Two blocks (a window layer, then one over whole images: Qwen's every 8th from index 7,
    else the last) and two 224 x 336 images: 2 x 3 windows of 8 x 8 patches each, all of one
    length, so the window layer makes 1 call for 12 windows and the full layer 1 for 2 images."""
    sys.path.insert(0, str(ROOT / "bench"))
    import vision_attention

    vision_attention.main(["--depth", "2", "--images", "2", "--size", "336x224", "--rounds", "1", "--repeats", "1"])
    report = json.loads(capsys.readouterr().out)
    assert report["patches"] == 2 * 16 * 24 and report["device"] == "cpu"
    assert report["sdpa_calls_per_forward"] == {"chunks": 12 + 2, "grouped": 1 + 1}
    for side in ("chunks", "grouped"):
        assert report[f"{side}_forward_ms"] > 0 and report[f"{side}_forward_backward_ms"] > 0
    assert report["forward_grouped_over_chunks"] == round(report["grouped_forward_ms"] / report["chunks_forward_ms"], 3)
    assert report["max_abs_difference"] == 0.0  # bit for bit on the CPU


def test_the_lean_forward_bench_times_the_update_with_the_option_on_and_off_by_turns(monkeypatch, capsys):
    """Steps 1-2 on, 3-4 off, ...: after the four warm-up steps, steps 5-6 with the lean forward
    and 7-8 without; each side's update went through its own path."""
    sys.path.insert(0, str(ROOT / "bench"))
    import lean_forward

    from vlrl.models.decode_step import DecodeStep

    hidden, tokens = DecodeStep.hidden, []
    monkeypatch.setattr(
        DecodeStep, "hidden", lambda self, ids, *a: tokens.append(ids.shape[1]) or hidden(self, ids, *a)
    )
    assert lean_forward.main(["--steps", "8"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["steps_measured"] == {"lean": 2, "model": 2}
    assert 0 < report["lean_median_s"]["update"] < report["lean_median_s"]["step"]
    assert report["update_lean_over_model"] == round(
        report["lean_median_s"]["update"] / report["model_median_s"]["update"], 3
    )
    # the decoding steps' one token, and the update's forwards of several: in steps 1-2 and 5-6 only
    assert sum(1 for t in tokens if t > 1) == 2 * 4


def test_the_packing_benchmark_counts_fewer_padded_tokens_planned_than_in_order(capsys):
    sys.path.insert(0, str(ROOT / "bench"))
    import update_packing

    assert update_packing.main(["--budgets", "2048", "8192", "--draws", "3"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [row["budget"] for row in report["rows"]] == [2048, 8192]
    for row in report["rows"]:
        assert row["completion_tokens"] < row["padded_planned"] < row["padded_in_order"]
        assert row["in_order_over_planned"] == round(row["padded_in_order"] / row["padded_planned"], 2)


def test_the_operator_bench_counts_a_static_steps_operators_per_layer_with_no_mask_converted_in_each(capsys):
    sys.path.insert(0, str(ROOT / "bench"))
    import static_step_operators

    static_step_operators.main()
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # 2026-12-01, torch 2.14.1: 31 a layer (37 before the shared cache slot and the rope of query
    # and key together) and no boolean mask for SDPA to convert in each layer (one before)
    assert report["layers"] == 2 and 0 < report["per_layer"] <= 31 and report["around_layers"] > 0
    assert report["sdpa_boolean_masks_per_layer"] == 0
    assert report["at_36_layers"] == 36 * report["per_layer"] + report["around_layers"]


def test_the_remax_rollout_bench_times_greedy_rows_mixed_in_and_decoded_apart_with_the_same_greedy_completions(capsys):
    sys.path.insert(0, str(ROOT / "bench"))
    import remax_rollout

    args = ["--shape", "tiny", "--device", "cpu", "--prompts", "2", "--max-new-tokens", "6", "--rounds", "1",
            "rollout.num_generations=2", "model.max_pixels=12544"]  # fmt: skip
    assert remax_rollout.main(args) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["same_greedy"] and 2 * 3 <= report["completion_tokens"] <= 2 * 3 * 6  # G + 1 rows a prompt
    ratio = report["mixed_median_s"] / report["separate_median_s"]
    assert abs(report["mixed_over_separate"] - ratio) < 2e-3 * (1 + ratio)
