"""Evaluation throughput: samples/s of `vlrl eval` on a benchmark-shaped synthetic set, per
generation backend and batch size.

    python bench/eval_throughput.py [--task refcoco_bbox_rec_val] [--samples 64]
        [--batch-sizes 1 2 4 8 16] [--backends hf] [--model tiny:qwen2_5_vl] [key=value ...]
    .venv-vllm/bin/python bench/eval_throughput.py --backends hf vllm --model tiny:qwen2_5_vl-h32

Writes the benchmark's synthetic data in its published schema (parquet with embedded
images, or Video-R1's json and clips), then runs the evaluation harness, the code `vlrl eval`
runs, once per (backend, batch size) after one warm-up batch. The time is the harness's own:
rendering prompts and generating, not loading the model nor scoring. Prints one JSON object:
the task, model, device, samples, max_new_tokens, one entry per run {backend, batch_size,
seconds, samples_per_second} and the fastest. A backend is one entry of BACKENDS (the config
overrides that select it). vLLM needs its environment (.venv-vllm) and, on CPU, a model whose
head size its attention supports (tiny:qwen2_5_vl-h32).
Timings mean something only on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch
from rich.console import Console
from transformers.utils import logging as hf_logging

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vlrl.config import TaskConfig, load_config
from vlrl.eval.harness import EvalSettings, run_eval, sampling_params
from vlrl.models.families import model_family
from vlrl.tasking.registry import eval_task, make_task

# backend name -> the config overrides that select it (`vlrl eval --backend NAME`)
BACKENDS: dict[str, list[str]] = {
    "hf": ["eval.backend=hf"],
    "vllm": [
        "eval.backend=vllm",
        f"rollout.vllm.kv_cache_memory_bytes={256 << 20}",
    ],  # the KV cache size counts on CPU only
}


def synthetic_benchmark(task_name: str, size: int, workdir: Path) -> str:
    """The benchmark's synthetic data in its published format; returns its path."""
    task = make_task(TaskConfig(name=task_name))
    path = workdir / task_name / ("dataset" if task.columns else f"eval{task.data_suffix}")
    task.synthesize(path, size, seed=0)
    return str(path)


def measure(task: str, data: str, backend: str, batch_size: int, samples: int, model: str, overrides: list[str],
            workdir: Path) -> dict:  # fmt: skip
    settings = [f"model.path={model}", f"eval.batch_size={batch_size}", "trainer.progress=false",
                f"data.image_cache={workdir / 'images'}", *BACKENDS[backend], *overrides]  # fmt: skip
    quiet = Console(quiet=True)
    warm = load_config(None, [*settings, f"data.limit={batch_size}"], {"task.name": task})
    run_eval(warm, [f"{task}={data}"], "eval", workdir / "out", quiet, show_table=False)
    cfg = load_config(None, [*settings, f"data.limit={samples}"], {"task.name": task})
    result = run_eval(cfg, [f"{task}={data}"], "eval", workdir / "out", quiet, show_table=False)[0]
    return {"backend": backend, "batch_size": batch_size, "samples": len(result.records),
            "seconds": round(result.seconds, 4), "samples_per_second": round(result.samples_per_second, 3)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="refcoco_bbox_rec_val", help="a benchmark (or any task with synthetic data)")
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--backends", nargs="+", default=["hf"], help=f"of: {', '.join(BACKENDS)}")
    parser.add_argument("--model", default="tiny:qwen2_5_vl")
    parser.add_argument("--workdir", default="", help="where the synthetic data goes (default: a temporary folder)")
    parser.add_argument(
        "overrides",
        nargs="*",
        help="config overrides, e.g. eval.max_new_tokens=64 (a benchmark's images: eval.image_pixels=model model.max_pixels=401408)",
    )
    args = parser.parse_args(argv)
    unknown = [b for b in args.backends if b not in BACKENDS]
    if unknown:
        parser.error(f"unknown backend(s) {unknown}; known: {', '.join(BACKENDS)}")
    hf_logging.disable_progress_bar()  # a model loads per backend and batch size: its bars drown the report
    with tempfile.TemporaryDirectory() as scratch:
        workdir = Path(args.workdir or scratch)
        data = synthetic_benchmark(args.task, args.samples, workdir)
        runs = [
            measure(args.task, data, backend, batch_size, args.samples, args.model, args.overrides, workdir)
            for backend in args.backends
            for batch_size in args.batch_sizes
        ]
    cfg = load_config(None, [f"model.path={args.model}", *args.overrides], {"task.name": args.task})
    task = eval_task(cfg.tasks()[0], model_family(cfg.model).name, cfg)  # as run_eval builds it
    report = {
        "task": args.task,
        "model": args.model,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "max_new_tokens": sampling_params(EvalSettings.of(cfg), task).max_new_tokens,
        "runs": runs,
        "fastest": max(runs, key=lambda run: run["samples_per_second"]),
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
