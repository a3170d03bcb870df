"""vLLM as a rollout engine end to end: `vlrl train rollout.engine=vllm`, `vlrl eval --backend
vllm` against the HF backend, and a video prompt with its metadata."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.vllm_engine.conftest import KV_CACHE, TINY_VLLM
from vlrl.cli import main
from vlrl.eval.layout import read_metrics, samples_path
from vlrl.models.loading import load_processor
from vlrl.models.prompting import render_prompt
from vlrl.rollout import EngineSetup, SamplingParams, choose_engine

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "configs" / "demo" / "refcoco.yaml"
FIXTURES = ROOT / "tests" / "fixtures"


def brief_demo(tmp_path: Path, **changes) -> list[str]:
    """configs/demo/refcoco.yaml through vLLM, shrunk to seconds, with a brevity reward beside
    IoU so that the untrained model's groups differ and every step moves the weights."""
    values = {
        "model.path": TINY_VLLM,
        "task.name": f"{FIXTURES / 'toy_task.py'}:BriefGrounding",
        "rollout.engine": "vllm",
        "rollout.vllm.kv_cache_memory_bytes": KV_CACHE,
        "rollout.num_generations": 4,
        "data.synthetic": True,
        "data.synthetic_train_size": 16,
        "data.train": str(tmp_path / "data" / "train.json"),
        "data.eval": str(tmp_path / "data" / "val.json"),
        "trainer.output_dir": str(tmp_path / "run"),
        "trainer.progress": False,
        "eval.every": 0,
        **changes,
    }
    return ["train", "--config", str(DEMO), *[f"{k}={v}" for k, v in values.items()]]


def test_train_with_the_vllm_engine(tmp_path, tiny_vllm_path):
    """Three steps: the engine follows the policy (its log-probs stay within float noise of the
    trainer's after every update; a missed weight push would leave them a step behind)."""
    run = tmp_path / "run"
    args = brief_demo(
        tmp_path,
        **{"rollout.max_new_tokens": 16, "trainer.steps": 3, "trainer.prompts_per_step": 2, "trainer.lr": 1e-3},
    )
    assert main(args) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for row in rows:  # same float32 policy, other kernels: mismatch at float noise, weights ~1
        assert row["rollout/logp_diff"] < 1e-4 and abs(row["rollout/kl"]) < 1e-6
        assert abs(row["rollout/is_weight"] - 1) < 1e-3
    assert all(row["grad_norm"] > 0 for row in rows) and "entropy" not in rows[0]  # vLLM gives no entropies
    assert (run / "checkpoints" / "step-0000003").is_dir()


def test_train_with_vllm_under_remax_a_repetition_penalty_and_min_new_tokens(tmp_path, tiny_vllm_path):
    """ReMax's greedy rows as requests beside each group's (one call a step), a repetition
    penalty and a shortest completion: the trainer's view of vLLM's draw, penalty and banned
    end tokens included, keeps the mismatch at float noise (the penalty left out of it measures
    above 1e-3, the end tokens' ban above 1e-4)."""
    run = tmp_path / "run"
    changes = {"rollout.max_new_tokens": 16, "trainer.steps": 2, "trainer.prompts_per_step": 2, "trainer.lr": 1e-3}
    changes |= {"algo.advantage": "remax", "rollout.repetition_penalty": 1.5, "rollout.min_new_tokens": 3}
    assert main(brief_demo(tmp_path, **changes)) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert row["rollout/logp_diff"] < 1e-4 and "greedy_reward" in row


def test_eval_with_vllm_equals_the_hf_backend_under_greedy_decoding(tmp_path, tiny_vllm_path, rec_data):
    """With eval.repetition_penalty, which moves the HF backend's answers: vLLM's own penalty
    answers as the HF engine's does (which tests/rollout/test_hf_engine.py holds to transformers'
    generate), so vLLM was given it. One vLLM engine start (the suite's time)."""
    outs, answers = {}, {}
    for backend, penalty in (("hf", 1.6), ("vllm", 1.6), ("hf", 1.0)):
        out = tmp_path / f"{backend}-{penalty}"
        args = ["eval", "--task", f"refcoco={rec_data}", "--model", TINY_VLLM, "--backend", backend, "--out", str(out)]
        extra = [
            "model.max_pixels=50176",
            "eval.max_new_tokens=12",
            f"eval.repetition_penalty={penalty}",
            "model.dtype=float32",
            f"rollout.vllm.kv_cache_memory_bytes={KV_CACHE}",
        ]
        assert main([*args, *extra]) == 0
        outs[backend, penalty] = out
        answers[backend, penalty] = [
            json.loads(line)["resps"] for line in samples_path(out, "refcoco").read_text().splitlines()
        ]  # the raw answer (a task's filtered_resps is null: its rewards read the answer)
    assert read_metrics(outs["hf", 1.6]) == read_metrics(outs["vllm", 1.6])
    assert answers["hf", 1.6] == answers["vllm", 1.6] and len(answers["hf", 1.6]) == 12 and all(answers["hf", 1.6])
    assert answers["hf", 1.0] != answers["hf", 1.6]


def test_a_video_prompt_with_its_metadata_runs_and_matches_the_hf_prompt(tmp_path, tiny_vllm_path, vllm_config):
    from data_prep.video import write_synthetic_video_qa
    from tasks.video_qa import VideoQA
    from vlrl.data.records import FrameSpec

    data = write_synthetic_video_qa(tmp_path / "video" / "train.json", 4, seed=0)
    video = {"model.video.max_frames": 4, "model.video.min_pixels": 3136, "model.video.max_pixels": 3136}
    cfg = vllm_config(**video)
    processor = load_processor(cfg.model)
    task = VideoQA()
    samples = [s for s in task.load(data, FrameSpec()).samples if s.video][:2]
    prompts = [render_prompt(processor, task.messages(s), s, cfg.model) for s in samples]
    assert all(p.video is not None for p in prompts)
    engine = choose_engine("vllm", cfg.rollout.options).build(
        EngineSetup(cfg.model, cfg.model.path, processor, cfg.trainer.seed, lambda: None)
    )
    from vllm import SamplingParams as VLLMSampling

    outputs = engine.llm.generate([engine.request(p) for p in prompts], VLLMSampling(max_tokens=1), use_tqdm=False)
    assert [len(o.prompt_token_ids) for o in outputs] == [len(p) for p in prompts]
    generations = engine.generate(prompts, SamplingParams(n=2, max_new_tokens=6), torch.Generator().manual_seed(0))
    assert all(len(g.completions) == 2 and not g.rejected for g in generations)


@pytest.mark.slow  # two vLLM engines under torchrun: 57-65 s in make test (2026-12-02)
def test_each_data_parallel_process_owns_its_vllm_engine(tmp_path, tiny_vllm_path):
    """torchrun, two CPU processes: each runs vLLM inside the launcher's process group
    (external_launcher) on its share of the prompts and follows the shared weights; the run ends
    without a teardown traceback. Under FSDP2, so the weights each engine gets are gathered from
    the shards unit by unit (the replicated push is the one-process runs' above)."""
    import subprocess

    from tests.parallel.test_distributed import TORCHRUN, torchrun_env

    run = tmp_path / "run"
    args = brief_demo(
        tmp_path,
        **{"rollout.max_new_tokens": 8, "trainer.steps": 2, "trainer.prompts_per_step": 4, "trainer.parallel": "fsdp2"},
    )
    command = [*TORCHRUN, "-m", "vlrl.cli", *args]
    done = subprocess.run(command, cwd=ROOT, env=torchrun_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["rollout/logp_diff"] < 1e-4 and r["grad_norm"] > 0 for r in rows)  # averaged over both processes
