"""configs/refcoco.yaml, VLM-R1's RefCOCO recipe, for a few RL steps on one GPU at a real size.

The model is a random-weight Qwen2.5-VL-3B (vlrl.models.tiny.SHAPES: real shapes, nothing
downloaded), so its completions run to max_new_tokens: the worst case of the recipe's
16 prompts x 8 completions x 1024 tokens. The data is synthetic RefCOCO. Prints one JSON line:
median rollout, update and step seconds (step 1 is warm-up and not counted), completion
tokens per second of the rollout and end to end, peak GPU memory (torch's allocator: vLLM's
KV cache is not in it), and the settings.

    python bench/recipe_on_gpu.py [--shape qwen2.5-vl-3b] [--steps 3] [key.sub=value ...]
    python bench/recipe_on_gpu.py rollout.engine=vllm trainer.parallel=fsdp2 trainer.gradient_checkpointing=true

`--shape tiny --device cpu` runs the same path on the tiny model (a check of the script).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
from pathlib import Path

import torch
from rich.console import Console

from tasks.refcoco import RefCOCO
from vlrl.config import load_config
from vlrl.models.build import TinySpec
from vlrl.models.tiny import SHAPES, write_tiny_checkpoint
from vlrl.trainer.rl import RLTrainer

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="qwen2.5-vl-3b", choices=[*SHAPES, "tiny"])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("overrides", nargs="*", help="config overrides, key.sub=value")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU here; --device cpu --shape tiny checks the script")
    with tempfile.TemporaryDirectory() as tmp:
        model = write_tiny_checkpoint(Path(tmp) / "model", SHAPES.get(args.shape, TinySpec()), args.device)
        data = Path(tmp) / "train.json"
        RefCOCO().synthesize(data, 64, 0)
        overrides = [
            f"model.path={model}",
            f"data.train={data}",
            "data.eval=",
            "data.image_root=",
            f"trainer.steps={args.steps}",
            f"trainer.output_dir={Path(tmp) / 'run'}",
            "trainer.progress=false",
            *args.overrides,
        ]
        cfg = load_config(ROOT / "configs" / "refcoco.yaml", overrides)
        trainer = RLTrainer(cfg, Console(quiet=True))
        # No checkpoint at the last step: weights, fp32 masters and AdamW state are tens of GB.
        trainer.run.t = dataclasses.replace(cfg.trainer, steps=10**9, save_every=10**9)
        result = trainer.train()
        rows = [json.loads(line) for line in result.metrics.read_text().splitlines()][1:]
    rows_per_step = cfg.trainer.prompts_per_step * cfg.rollout.num_generations
    median = {key: statistics.median(r[key] for r in rows) for key in ("time_rollout", "time_update", "time_step")}
    tokens = statistics.median(r["completion_length"] for r in rows) * rows_per_step
    print(
        json.dumps(
            {
                "benchmark": "refcoco_recipe_on_gpu",
                "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
                "model": args.shape,
                "dtype": cfg.model.dtype,
                "prompts_per_step": cfg.trainer.prompts_per_step,
                "num_generations": cfg.rollout.num_generations,
                "max_new_tokens": cfg.rollout.max_new_tokens,
                "beta": cfg.algo.beta,
                "token_budget": cfg.trainer.token_budget,
                "overrides": args.overrides,
                "steps_measured": len(rows),
                "median_rollout_s": round(median["time_rollout"], 2),
                "median_update_s": round(median["time_update"], 2),
                "median_step_s": round(median["time_step"], 2),
                "completion_tokens_per_step": round(tokens),
                "rollout_tokens_per_s": round(tokens / median["time_rollout"]),
                "end_to_end_tokens_per_s": round(tokens / median["time_step"]),  # issue 14's goal: >= 2000 per GPU
                "peak_gpu_gb": round(torch.cuda.max_memory_allocated() / 2**30, 1) if args.device == "cuda" else 0.0,
            }
        )
    )


if __name__ == "__main__":
    main()
