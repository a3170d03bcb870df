"""Rollout throughput: vlrl's vLLM engine, plain vllm.LLM.generate, and vlrl's HF engine, on the
same prompts, side by side in one process. Prints one JSON line.

    .venv-vllm/bin/python bench/rollout_engines.py [--prompts 8] [--generations 8] [--tokens 64]

Each round runs the three in turn (so a slow patch of the machine hits all of them) on B
synthetic RefCOCO prompts rendered by vlrl, G completions each of up to --tokens tokens, with
the same per-prompt seeds. "standalone" is what a vLLM user writes: the same token-id prompts
and media handed to `LLM.generate`, vLLM detokenizing; the engine adds vlrl's request building
(pad collapse, per-request seeds, banned tokens) and decoding. Goal: engine >= 0.9 x standalone.
The tiny model says nothing about real sizes (vLLM's per-step overhead dominates it); pass
`--model` (a local checkpoint) or `--shape qwen2.5-vl-3b` on a GPU for those.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", default="", help="local checkpoint (default: the tiny head-size-32 model)")
    parser.add_argument("--shape", default="", help="a real checkpoint's shape with random weights, e.g. qwen2.5-vl-3b")
    parser.add_argument("--no-hf", action="store_true", help="skip the HF engine (slow at real sizes on CPU)")
    args = parser.parse_args()

    from data_prep.refcoco import write_synthetic_rec
    from vlrl.config import load_config
    from vlrl.models.families import tiny_spec
    from vlrl.models.loading import load_model, load_processor
    from vlrl.models.prompting import render_prompt
    from vlrl.models.tiny import SHAPES, tiny_checkpoint
    from vlrl.rollout import EngineSetup, SamplingParams, choose_engine
    from vlrl.tasking.registry import make_task

    if args.shape:
        path = str(tiny_checkpoint(SHAPES[args.shape]))
    else:
        path = args.model or str(tiny_checkpoint(tiny_spec("tiny:qwen2_5_vl-h32")))
    cuda = torch.cuda.is_available()
    scratch = tempfile.TemporaryDirectory(prefix="vlrl-bench-")  # removed when the bench exits
    work = Path(scratch.name)
    data = write_synthetic_rec(work / "rec.json", size=args.prompts, seed=0)
    overrides = {
        "model.path": path,
        "model.dtype": "bfloat16" if cuda else "float32",
        "model.max_pixels": 200704,
        "data.train": str(data),
        "rollout.vllm.kv_cache_memory_bytes": 0 if cuda else 512 << 20,
    }
    cfg = load_config(None, [f"{k}={v}" for k, v in overrides.items()])
    processor = load_processor(cfg.model)
    task = make_task(cfg.task)
    from vlrl.tasking.sources import load_task_split

    samples = load_task_split(task, cfg, "train").samples
    prompts = [render_prompt(processor, task.messages(s), s, cfg.model) for s in samples]
    params = SamplingParams(n=args.generations, max_new_tokens=args.tokens, temperature=1.0)

    device = torch.device("cuda" if cuda else "cpu")
    engine = choose_engine("vllm", cfg.rollout.options).build(
        EngineSetup(cfg.model, path, processor, cfg.trainer.seed, lambda: None)
    )
    hf = (
        None
        if args.no_hf
        else choose_engine("hf", cfg.rollout.options).build(
            EngineSetup(
                cfg.model,
                path,
                processor,
                cfg.trainer.seed,
                lambda: (load_model(cfg.model, path, device).eval(), device),
            )
        )
    )

    def run_engine(which) -> int:
        generations = which.generate(prompts, params, torch.Generator(device=which.device).manual_seed(0))
        return sum(len(c.token_ids) for g in generations for c in g.completions)

    def run_standalone() -> int:
        seeds = torch.randint(0, 2**31 - 1, (len(prompts),), generator=torch.Generator().manual_seed(0)).tolist()
        requests = [engine.request(p) for p in prompts]  # built once, outside the clock: a user's own prompts
        sampling = []
        for seed in seeds:
            s = engine.sampling(params, seed)
            s.detokenize = True  # a plain user lets vLLM decode
            sampling.append(s)
        start = time.perf_counter()
        outputs = engine.llm.generate(requests, sampling, use_tqdm=False)
        run_standalone.seconds = time.perf_counter() - start
        return sum(len(c.token_ids) for o in outputs for c in o.outputs)

    timings: dict[str, list[tuple[int, float]]] = {"vllm_engine": [], "vllm_standalone": [], "hf": []}
    run_engine(engine)  # warm-up: compilation, allocator
    run_standalone()
    for _ in range(args.rounds):
        start = time.perf_counter()
        tokens = run_engine(engine)
        timings["vllm_engine"].append((tokens, time.perf_counter() - start))
        tokens = run_standalone()
        timings["vllm_standalone"].append((tokens, run_standalone.seconds))
        if hf is not None:
            start = time.perf_counter()
            tokens = run_engine(hf)
            timings["hf"].append((tokens, time.perf_counter() - start))

    def summary(rows: list[tuple[int, float]]) -> dict:
        rates = [tokens / seconds for tokens, seconds in rows]
        return {
            "tokens_per_s": round(statistics.median(rates), 1),
            "median_s": round(statistics.median(s for _, s in rows), 4),
            "tokens": [t for t, _ in rows],
        }

    engines = {name: summary(rows) for name, rows in timings.items() if rows}
    out = {
        "bench": "rollout_engines",
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "model": args.shape or args.model or "tiny:qwen2_5_vl-h32",
        "prompts": args.prompts,
        "generations": args.generations,
        "max_new_tokens": args.tokens,
        "rounds": args.rounds,
        "engines": engines,
        "ratio_engine_vs_standalone": round(
            engines["vllm_engine"]["tokens_per_s"] / engines["vllm_standalone"]["tokens_per_s"], 3
        ),
    }
    if "hf" in engines:
        out["ratio_vllm_engine_vs_hf"] = round(
            engines["vllm_engine"]["tokens_per_s"] / engines["hf"]["tokens_per_s"], 3
        )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
