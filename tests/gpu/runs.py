"""Runs the GPU tier compares: a few RL or SFT steps in this process, and what they leave
(logged loss and grad norm, the trained fp32 weights, the peak memory)."""

from __future__ import annotations

import contextlib
import gc
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from rich.console import Console
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
)

from tests.fixtures.fsdp_worker import kept_run
from vlrl.config import load_config
from vlrl.trainer.rl import RLTrainer
from vlrl.trainer.sft import train_sft

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SCRIPTED = f"{FIXTURES / 'scripted_engine.py'}:ScriptedEngine"  # completions independent of weights and device


@dataclass
class Outcome:
    rows: list[dict]  # metrics.jsonl
    start: dict[str, torch.Tensor]  # the trained parameters before the first step (fp32, CPU)
    end: dict[str, torch.Tensor]  # and after the last
    peak_bytes: int  # torch's allocator on the GPU (0 on the CPU)

    def update(self) -> dict[str, torch.Tensor]:
        return {name: self.end[name] - self.start[name] for name in self.end}


def trained_fp32(run) -> dict[str, torch.Tensor]:
    """The trained parameters as the optimizer steps them (fp32 masters or shards), gathered."""
    strategy = run.strategy
    if strategy.name == "replicated":
        return {
            n: m.detach().float().cpu().clone()
            for n, m in zip(strategy.weights.names, strategy.weights.masters, strict=True)
        }
    options = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=True)
    return {n: t.float().clone() for n, t in get_model_state_dict(run.model, options=options).items()}


def rl_overrides(model: Path, data: Path, out: Path, **extra) -> list[str]:
    """Two RL steps of 4 prompts x 4 completions, a KL term, token budget 512 (several micro-batches)."""
    values = {
        "model.path": str(model),
        "model.dtype": "auto",
        "model.max_pixels": 200704,
        "data.train": str(data),
        "task.name": "refcoco",
        "rollout.engine": SCRIPTED,
        "rollout.num_generations": 4,
        "rollout.max_new_tokens": 64,
        "algo.beta": 0.04,
        "trainer.prompts_per_step": 4,
        "trainer.steps": 2,
        "trainer.lr": 1e-4,
        "trainer.token_budget": 512,
        "trainer.save_every": 100,
        "trainer.progress": False,
        "trainer.output_dir": str(out),
        "trainer.resume": "",
        **extra,
    }
    return [f"{k}={v}" for k, v in values.items()]


def free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def rl_run(model: Path, data: Path, out: Path, **extra) -> Outcome:
    trainer = RLTrainer(load_config(None, rl_overrides(model, data, out, **extra)), Console(quiet=True))
    start = trained_fp32(trainer.run)
    trainer.train()
    outcome = Outcome(rows(out), start, trained_fp32(trainer.run), peak(trainer.run.device))
    del trainer
    free(torch.device("cuda" if torch.cuda.is_available() else "cpu"))
    return outcome


def sft_run(model: Path, data: Path, out: Path, **extra) -> Outcome:
    values = {
        "model.path": str(model), "model.dtype": "float32", "model.max_pixels": 50176, "data.train": str(data),
        "task.name": "refcoco", "sft.prompts_per_step": 4, "sft.steps": 2, "sft.lr": 1e-4, "sft.token_budget": 512,
        "sft.save_every": 100, "sft.progress": False, "sft.output_dir": str(out), "sft.resume": "", **extra,
    }  # fmt: skip
    with kept_run() as kept:
        train_sft(load_config(None, [f"{k}={v}" for k, v in values.items()]), Console(quiet=True))
    run = kept["run"]
    return Outcome(rows(out), {}, trained_fp32(run), peak(run.device))


def rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def peak(device: torch.device) -> int:
    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0


def relative_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """||a - b|| / ||b|| over all tensors: how far one update is from another."""
    assert a.keys() == b.keys()
    num = sum(float((a[n] - b[n]).double().pow(2).sum()) for n in b)
    den = sum(float(b[n].double().pow(2).sum()) for n in b)
    return (num / den) ** 0.5 if den else float("inf")


@contextlib.contextmanager
def on_cpu() -> Iterator[None]:
    """Runs inside pick the CPU although CUDA is there (the reference side of a comparison)."""
    available = torch.cuda.is_available
    torch.cuda.is_available = lambda: False
    try:
        yield
    finally:
        torch.cuda.is_available = available
