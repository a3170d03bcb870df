"""One RL step of vlrl against one of TRL's GRPOTrainer, same work, same machine, alternately.

Both train the same tiny local Qwen2.5-VL checkpoint on the same synthetic RefCOCO data with
the same B prompts x G completions, completion length, learning rate, GRPO loss, KL weight,
temperature and seed, on CPU, with the same reward (refcoco's format + IoU). Each trainer
runs in its own process for a few steps; the processes alternate for several rounds so both
see the same machine conditions. The first step of each process is warm-up and not counted.

Prints one JSON line: median step time of each, their ratio, mean completion length of each
(the same work: both sample up to max_new_tokens), and each process's peak RSS.

    python bench/step_vs_trl.py [--rounds 3] [--steps 4] [--generations 8] [--prompts 4]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEMO_CONFIG = ROOT / "configs" / "demo" / "refcoco.yaml"


def settings(args: argparse.Namespace) -> dict:
    return {
        "prompts": args.prompts,
        "generations": args.generations,
        "max_new_tokens": args.max_new_tokens,
        "lr": 1e-4,
        "beta": 0.04,
        "epsilon": 0.2,
        "temperature": 1.0,
        "seed": args.seed,
    }


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_vlrl(s: dict, data: Path, steps: int, out_dir: Path) -> tuple[list[float], list[float]]:
    from rich.console import Console

    from vlrl.config import load_config
    from vlrl.trainer.rl import train

    overrides = {
        "data.train": str(data),
        "rollout.num_generations": s["generations"],
        "rollout.max_new_tokens": s["max_new_tokens"],
        "rollout.temperature": s["temperature"],
        "algo.beta": s["beta"],
        "algo.epsilon": s["epsilon"],
        "algo.aggregation": "seq_mean_token_mean",  # TRL's loss_type="grpo"
        "trainer.prompts_per_step": s["prompts"],
        "trainer.lr": s["lr"],
        "trainer.seed": s["seed"],
        "trainer.steps": steps,
        "trainer.save_every": 10**6,
        "trainer.progress": False,
        "trainer.output_dir": str(out_dir),
        "trainer.resume": "",
    }
    cfg = load_config(DEMO_CONFIG, [f"{k}={v}" for k, v in overrides.items()])
    result = train(cfg, Console(quiet=True))
    rows = [json.loads(line) for line in result.metrics.read_text().splitlines()]
    return [r["time_step"] for r in rows], [r["completion_length"] for r in rows]


def run_trl(s: dict, data: Path, steps: int, out_dir: Path) -> tuple[list[float], list[float]]:
    from datasets import Dataset
    from transformers import AutoModelForImageTextToText, AutoProcessor, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from tasks.refcoco import RefCOCO
    from vlrl.config import load_config
    from vlrl.datasets import load_task_split
    from vlrl.modeling import checkpoint_path
    from vlrl.vision.images import load_image

    cfg = load_config(DEMO_CONFIG, [f"data.train={data}"])
    task = RefCOCO()
    samples = load_task_split(task, cfg, "train").samples
    m = cfg.model
    # The same prompt text and the same smart-resized image as vlrl renders.
    rows = [
        {
            "prompt": [{"role": "user", "content": task.messages(sample)[0]["content"][1]["text"]}],
            "image": load_image(sample.images[0], m.min_pixels, m.max_pixels),
            "index": i,
        }
        for i, sample in enumerate(samples)
    ]
    dataset = Dataset.from_list(rows)
    rewards = task.reward_functions()

    def make_reward(name):
        def reward(completions, index, **kwargs):
            texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
            return rewards[name](texts, [samples[i] for i in index])

        reward.__name__ = name
        return reward

    path = checkpoint_path(cfg.model)
    processor = AutoProcessor.from_pretrained(path)
    model = AutoModelForImageTextToText.from_pretrained(path)
    config = GRPOConfig(
        output_dir=str(out_dir),
        per_device_train_batch_size=s["prompts"] * s["generations"],
        gradient_accumulation_steps=1,
        num_generations=s["generations"],
        max_completion_length=s["max_new_tokens"],
        learning_rate=s["lr"],
        beta=s["beta"],
        epsilon=s["epsilon"],
        loss_type="grpo",
        temperature=s["temperature"],
        max_steps=steps,
        seed=s["seed"],
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        dataloader_num_workers=0,
        lr_scheduler_type="constant",
        max_grad_norm=1.0,
    )

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.times: list[float] = []
            self._start = 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            self._start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.times.append(time.perf_counter() - self._start)

    timer = StepTimer()
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[make_reward("format"), make_reward("iou")],
        args=config,
        train_dataset=dataset,
        processing_class=processor,
        callbacks=[timer],
    )
    trainer.train()
    lengths = [row["completions/mean_length"] for row in trainer.state.log_history if "completions/mean_length" in row]
    return timer.times, lengths


def worker(args: argparse.Namespace) -> None:
    s = json.loads(args.settings)
    with tempfile.TemporaryDirectory() as tmp:
        start_rss = peak_rss_mb()
        run = run_vlrl if args.worker == "vlrl" else run_trl
        times, lengths = run(s, Path(args.data), args.steps, Path(tmp) / "run")
    print(json.dumps({"times": times, "lengths": lengths, "peak_rss_mb": peak_rss_mb(), "rss_at_start_mb": start_rss}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4, help="steps per process (the first is warm-up)")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--worker", choices=["vlrl", "trl"], help=argparse.SUPPRESS)
    parser.add_argument("--data", help=argparse.SUPPRESS)
    parser.add_argument("--settings", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return

    from tasks.refcoco import RefCOCO
    from vlrl.testing import tiny_checkpoint

    tiny_checkpoint()  # built once, outside the timed processes
    s = settings(args)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    results: dict[str, dict] = {name: {"times": [], "lengths": [], "peak_rss_mb": 0.0} for name in ("vlrl", "trl")}
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "train.json"
        RefCOCO().synthesize(data, 64, args.seed)
        for _ in range(args.rounds):
            for name in ("vlrl", "trl"):
                command = [sys.executable, __file__, "--worker", name, "--data", str(data), "--steps", str(args.steps), "--settings", json.dumps(s)]
                done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
                if done.returncode != 0:
                    sys.stderr.write(done.stderr[-4000:])
                    raise SystemExit(f"{name} worker failed")
                report = json.loads(done.stdout.strip().splitlines()[-1])
                results[name]["times"].extend(report["times"][1:])  # step 1 of each process is warm-up
                results[name]["lengths"].extend(report["lengths"])
                results[name]["peak_rss_mb"] = max(results[name]["peak_rss_mb"], report["peak_rss_mb"])
    vlrl_median = statistics.median(results["vlrl"]["times"])
    trl_median = statistics.median(results["trl"]["times"])
    print(
        json.dumps(
            {
                "benchmark": "rl_step_vs_trl",
                "device": "cpu",
                "torch_threads": __import__("torch").get_num_threads(),
                **{k: v for k, v in s.items()},
                "steps_measured": {k: len(v["times"]) for k, v in results.items()},
                "vlrl_median_step_s": round(vlrl_median, 4),
                "trl_median_step_s": round(trl_median, 4),
                "ratio_vlrl_over_trl": round(vlrl_median / trl_median, 4),
                "vlrl_mean_completion_tokens": round(statistics.mean(results["vlrl"]["lengths"]), 2),
                "trl_mean_completion_tokens": round(statistics.mean(results["trl"]["lengths"]), 2),
                "vlrl_peak_rss_mb": round(results["vlrl"]["peak_rss_mb"], 1),
                "trl_peak_rss_mb": round(results["trl"]["peak_rss_mb"], 1),
            }
        )
    )


if __name__ == "__main__":
    main()
