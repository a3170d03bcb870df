"""LoRA decoding against full fine-tuning's, side by side in one process (issue 25: a LoRA
rollout within 10% of full fine-tuning's). Prints one JSON line.

The HF engine samples the same prompts with the same seeds from three policies, in turn within
each round: the full model, as a full fine-tuning run samples; a LoRA model (the config's target
modules, `--rank`) with its adapters merged for decoding (`rollout.hf.merge_lora`, the default);
and the same LoRA model with them unmerged (three products per adapted layer). New adapters
start at B = 0, so the three compute the same function: from the same seeds they sample the same
tokens (`same_tokens`) and the times compare the same work. Engine options are the config's
(on CUDA: the static step in CUDA graphs).

    python bench/lora_rollout.py --shape tiny --device cpu              # the script's check; CPU figures
    python bench/lora_rollout.py --max-new-tokens 256                   # a GPU at Qwen2.5-VL-3B's shape
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from tasks.refcoco import RefCOCO
from vlrl.config import load_config
from vlrl.data.records import load_split
from vlrl.models.batch import Prompt
from vlrl.models.build import TinySpec
from vlrl.models.families import family_names
from vlrl.models.loading import frame_spec, load_model, load_processor
from vlrl.models.prompting import render_prompt
from vlrl.models.tiny import SHAPES, tiny_checkpoint, write_tiny_checkpoint
from vlrl.rollout import EngineSetup, Generation, SamplingParams, choose_engine

ROOT = Path(__file__).resolve().parent.parent

# A variant's rollout: its engine, the prompts, the sampling parameters and the round's generator
Rollout = Callable[[Any, list[Prompt], SamplingParams, torch.Generator], list[Generation]]

# Each policy's config overrides: full fine-tuning's model, or LoRA adapters (of --rank) decoded
# merged or unmerged. The two LoRA engines sample with one model.
POLICIES = {
    "full": ["model.lora.r=0"],
    "lora_merged": ["model.lora.r={rank}", "rollout.hf.merge_lora=true"],
    "lora_unmerged": ["model.lora.r={rank}", "rollout.hf.merge_lora=false"],
}


def arguments(description: str, argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="qwen2.5-vl-3b", choices=[*SHAPES, "tiny"])
    parser.add_argument(
        "--arch",
        choices=sorted(family_names()),
        help="the model family built at --shape's sizes (default: the shape's own)",
    )
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--rank", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds, after one warm-up round")
    parser.add_argument("--prompts", type=int, help="default: the config's trainer.prompts_per_step")
    parser.add_argument("--max-new-tokens", type=int, help="default: the config's rollout.max_new_tokens")
    parser.add_argument("overrides", nargs="*", help="config overrides, key.sub=value")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU here; --device cpu --shape tiny checks the script")
    return args


@dataclass
class Rounds:
    """What `alternate` measured: each variant's (tokens, seconds) per measured round and the
    tokens it sampled in every round, with the settings they ran at."""

    settings: dict
    measured: dict[str, list[tuple[int, float]]]
    sampled: dict[str, list[list[int]]]

    def summary(self) -> dict:
        median = {name: statistics.median(s for _, s in rows) for name, rows in self.measured.items()}
        rate = {name: statistics.median(t / s for t, s in rows) for name, rows in self.measured.items()}
        first = next(iter(self.measured))
        return {
            **self.settings,
            "completion_tokens": round(statistics.mean(t for t, _ in self.measured[first]), 1),  # a round's
            "same_tokens": all(tokens == self.sampled[first] for tokens in self.sampled.values()),
            **{f"{name}_median_s": round(median[name], 6) for name in self.measured},  # a tiny one takes ms
            **{f"{name}_tokens_per_s": round(rate[name], 1) for name in self.measured},
        }


def alternate(
    args: argparse.Namespace,
    variants: dict[str, list[str]],
    check: Callable[[dict], None] = lambda engines: None,
    rollouts: dict[str, Rollout] | None = None,
) -> Rounds:
    """The HF engine of each variant (config overrides over configs/refcoco.yaml at --shape)
    samples the same prompts with the same seeds, the variants in turn within each round, after
    one warm-up round; `check` sees the engines before (and may stop the bench). Variants of one
    LoRA rank share one model. A variant's rollout is its engine's `generate` unless `rollouts`
    names another way."""
    device = torch.device(args.device)
    with tempfile.TemporaryDirectory() as tmp:
        spec = TinySpec() if args.shape == "tiny" else SHAPES[args.shape]
        spec = replace(spec, arch=args.arch or spec.arch)
        if args.shape == "tiny":
            path = tiny_checkpoint(spec)
        else:  # built on the device: drawing billions of weights on the CPU takes minutes
            path = write_tiny_checkpoint(Path(tmp) / "model", spec, args.device)
        data = Path(tmp) / "train.json"
        task = RefCOCO()
        task.synthesize(data, 64, 0)
        overrides = [f"model.path={path}", f"data.train={data}", *args.overrides]
        if args.device == "cpu":
            overrides.append("model.dtype=float32")  # bfloat16 matmuls on this CPU are emulated
        configs = {
            name: load_config(
                ROOT / "configs" / "refcoco.yaml", [*overrides, *(o.format(rank=args.rank) for o in extra)]
            )
            for name, extra in variants.items()
        }
        cfg = next(iter(configs.values()))
        B = args.prompts or cfg.trainer.prompts_per_step
        tokens = args.max_new_tokens or cfg.rollout.max_new_tokens
        processor = load_processor(cfg.model)
        samples = load_split(data, task.build_sample, frame_spec(cfg.model)).samples[:B]
        prompts = [render_prompt(processor, task.messages(s), s, cfg.model) for s in samples]
        params = SamplingParams(cfg.rollout.num_generations, tokens, cfg.rollout.temperature)
        models: dict[int, torch.nn.Module] = {}  # by LoRA rank
        for c in configs.values():
            if c.model.lora.r not in models:
                models[c.model.lora.r] = load_model(c.model, str(path), device).eval()
        engines = {
            name: choose_engine("hf", c.rollout.options).build(
                EngineSetup(c.model, str(path), processor, 0, lambda r=c.model.lora.r: (models[r], device))
            )
            for name, c in configs.items()
        }
        check(engines)
        measured: dict[str, list[tuple[int, float]]] = {name: [] for name in variants}  # (tokens, seconds)
        sampled: dict[str, list[list[int]]] = {name: [] for name in variants}  # every round's tokens
        # One generator per variant, reseeded each round: the engine keeps its static buffers and
        # CUDA graphs for one generator, so a new one every round would capture them every round.
        generators = {name: torch.Generator(device=device) for name in variants}
        for round_ in range(args.rounds + 1):  # round 0: warm-up (allocation, CUDA graph capture)
            for name in variants:
                generator = generators[name].manual_seed(round_)
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                start = time.perf_counter()
                groups = (rollouts or {}).get(name, generate)(engines[name], prompts, params, generator)
                elapsed = time.perf_counter() - start  # generate ends looking at the tokens
                ids = [c.token_ids for g in groups for c in g.completions]
                sampled[name] += ids
                if round_:
                    measured[name].append((sum(len(i) for i in ids), elapsed))
    settings = {
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "model": args.shape,
        "arch": spec.arch,
        "dtype": cfg.model.dtype,
        "prompts": B,
        "num_generations": params.n,
        "max_new_tokens": tokens,
        "rounds": args.rounds,
        "overrides": args.overrides,
    }
    return Rounds(settings, measured, sampled)


def generate(engine, prompts: list[Prompt], params: SamplingParams, generator: torch.Generator) -> list[Generation]:
    return engine.generate(prompts, params, generator)


def pair(
    description: str, argv: list[str] | None, benchmark: str, variants: dict[str, list[str]], ratio: str,
    check: Callable[[dict], dict] = lambda engines: {},
) -> int:  # fmt: skip
    """A bench of two variants: prints their rounds' summary, what `check` says of the engines
    (it sees them before the rounds, and may stop the bench) and the first one's median seconds
    over the second's, as `ratio`."""
    seen: dict = {}
    summary = alternate(arguments(description, argv), variants, lambda engines: seen.update(check(engines))).summary()
    print(json.dumps({"benchmark": benchmark, **summary, **seen, ratio: over(summary, *variants)}))
    return 0


def over(summary: dict, variant: str, other: str) -> float:
    """`variant`'s median seconds over `other`'s, to three places."""
    return round(summary[f"{variant}_median_s"] / summary[f"{other}_median_s"], 3)


def merged_and_unmerged(engines: dict) -> None:
    if engines["lora_merged"].lora is None or engines["lora_unmerged"].lora is not None:
        raise SystemExit("rollout.hf.merge_lora did not reach the engines: nothing merged and unmerged to compare")


def main(argv: list[str] | None = None) -> int:
    args = arguments(__doc__, argv)
    summary = alternate(args, POLICIES, merged_and_unmerged).summary()
    print(
        json.dumps(
            {
                "benchmark": "lora_rollout",
                "rank": args.rank,
                **summary,
                "merged_over_full": over(summary, "lora_merged", "full"),
                "unmerged_over_full": over(summary, "lora_unmerged", "full"),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
