"""vlrl.app.plan's estimates beside measurements: on CPU, what each process holds by term (tiny and a
small shape, 1, 2 and 4 gloo processes, replicated and FSDP2) and what autograd keeps for each
training micro-batch; on a GPU, the peaks bench/recipe_on_gpu.py measured for configs/refcoco.yaml
at Qwen2.5-VL-3B's shape, replicated, at three token budgets (docs/performance.md, On a GPU).

    python bench/plan_vs_measured.py [--shapes tiny small] [--processes 1 2 4]
    python bench/plan_vs_measured.py --shapes small-qwen3_5 small-qwen3_vl_moe --processes 1 --strategies replicated

Prints one JSON object: every term's estimate, measurement and relative error, whether the
dominant terms (weights, master weights, gradients, optimizer state, reference) are within 15%,
and whether each GPU peak is.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from parallel_cpu import ROOT, measure

from vlrl.app.plan import memory, variants
from vlrl.config import load_config
from vlrl.models.build import TinySpec
from vlrl.models.memory import GB, Workload, activation_bytes, model_shape
from vlrl.models.tiny import write_tiny_checkpoint
from vlrl.rollout import choose_engine

DOMINANT = ("weights", "master weights", "gradients", "optimizer", "reference")
# A small model of Qwen's proportions with Qwen's vocabulary, in bfloat16 (fp32 masters)
SMALL = TinySpec(hidden_size=256, num_layers=4, num_heads=4, num_kv_heads=2, intermediate_size=1024, vision_depth=4,
                 vision_hidden=128, vision_heads=4, vision_intermediate=512, vocab_size=151936)  # fmt: skip
SHAPES = {
    "tiny": (TinySpec(), "float32"),
    "small": (SMALL, "bfloat16"),
    # the other layer kinds (`--shapes` names them; not run by default): Qwen3.5's linear
    # attention (three layers in four), Qwen3-VL MoE's experts (the tiny build's 4, 2 routed)
    "tiny-qwen3_5": (TinySpec(arch="qwen3_5"), "float32"),
    "small-qwen3_5": (replace(SMALL, arch="qwen3_5"), "bfloat16"),
    "tiny-qwen3_vl_moe": (TinySpec(arch="qwen3_vl_moe"), "float32"),
    "small-qwen3_vl_moe": (replace(SMALL, arch="qwen3_vl_moe"), "bfloat16"),
    "tiny-qwen3_5_moe": (TinySpec(arch="qwen3_5_moe"), "float32"),
    "small-qwen3_5_moe": (replace(SMALL, arch="qwen3_5_moe"), "bfloat16"),
}
# bench/recipe_on_gpu.py trainer.token_budget=B on one H200 at 3af88f4 (2026-12-01): the peak of
# torch's allocator over two steps; 16384 ran out of the card's 139 GB
GPU_MEASURED = {"shape": "qwen2.5-vl-3b", "device": "NVIDIA H200", "image_tokens": 130}
GPU_PEAKS_GB = {4096: 85.6, 8192: 104.7, 12288: 123.0}


def run_overrides(model: Path, dtype: str, workdir: Path, strategy: str) -> list[str]:
    data = workdir / "data" / "train.json"
    return [
        f"model.path={model}", f"model.dtype={dtype}", "model.max_pixels=50176", "task.name=refcoco", f"data.train={data}",
        "data.synthetic=true", "data.synthetic_train_size=32", "rollout.num_generations=4", "rollout.max_new_tokens=48",
        "algo.beta=0.04", "trainer.prompts_per_step=4", "trainer.token_budget=512", "trainer.steps=2", "trainer.progress=false",
        f"trainer.output_dir={workdir / 'run'}", "trainer.resume=", f"trainer.parallel={strategy}",
        "trainer.halve_on_oom=false",  # the peak measured is the budget's, never a halved one's
    ]  # fmt: skip


def estimate_terms(cfg, shape, work: Workload, strategy: str, checkpointing: bool) -> dict[str, float]:
    """vlrl plan's terms for the strategy variant labelled `strategy`."""
    cls, options = next((c, o) for label, c, o in variants() if label == strategy)
    engine = choose_engine(cfg.rollout.engine, cfg.rollout.options)
    return memory(shape, work, cls.memory(shape, work, options), engine, checkpointing)


def error(estimate: float, measured: float) -> float | None:
    return round((estimate - measured) / measured, 4) if measured else None


def compare(name: str, model: Path, dtype: str, strategy: str, processes: int, workdir: Path) -> dict:
    overrides = run_overrides(model, dtype, workdir, strategy)
    ranks = measure(processes, "-", overrides, workdir)
    cfg = load_config(None, overrides)
    shape = model_shape(cfg)
    estimate = estimate_terms(cfg, shape, Workload.of(cfg, processes, 80, 0), strategy, checkpointing=False)
    measured = {term: max(r["terms"][term] for r in ranks) for term in DOMINANT}
    terms = {
        t: {"estimate": int(estimate[t]), "measured": measured[t], "error": error(estimate[t], measured[t])}
        for t in DOMINANT
    }
    activations = [
        error(activation_bytes(shape, m["prompts"], m["prompt_length"], m["rows"], m["width"], m["patches"], False, transient=False), m["bytes"])
        for r in ranks for m in r["micro_batches"]
    ]  # fmt: skip
    return {
        "shape": name, "strategy": strategy, "processes": processes, "terms": terms,
        "activations": {"micro_batches": len(activations), "median_error": statistics.median(activations),
                        "worst_error": max(activations, key=abs)},
    }  # fmt: skip


def gpu_row(budget: int, measured_gb: float) -> dict:
    cfg = load_config(
        ROOT / "configs" / "refcoco.yaml", ["rollout.max_new_tokens=1024", f"trainer.token_budget={budget}"]
    )  # as measured
    work = Workload.of(cfg, 1, 139, GPU_MEASURED["image_tokens"])
    estimate = estimate_terms(cfg, model_shape(cfg, GPU_MEASURED["shape"]), work, "replicated", False)
    peak = estimate["peak"] / GB
    return {
        **GPU_MEASURED, "token_budget": budget, "peak_gb": measured_gb, "estimate_gb": round(peak, 1),
        "error": error(peak, measured_gb),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", default=["tiny", "small"], choices=list(SHAPES))
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--strategies", nargs="+", default=["replicated", "fsdp2"])
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.shapes:
            spec, dtype = SHAPES[name]
            model = write_tiny_checkpoint(Path(tmp) / name, spec)
            for strategy in args.strategies:
                for processes in args.processes:
                    workdir = Path(tmp) / f"{name}-{strategy}-{processes}"
                    workdir.mkdir()
                    rows.append(compare(name, model, dtype, strategy, processes, workdir))
    gpu = [gpu_row(budget, peak) for budget, peak in GPU_PEAKS_GB.items()]
    errors = [row["terms"][t]["error"] for row in rows for t in DOMINANT if row["terms"][t]["error"] is not None]
    print(
        json.dumps(
            {
                "benchmark": "plan_vs_measured", "cpu": rows, "gpu": gpu,
                "dominant_terms_within_15pct": all(abs(e) <= 0.15 for e in errors),
                "gpu_peaks_within_15pct": all(abs(row["error"]) <= 0.15 for row in gpu),
            }
        )
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
