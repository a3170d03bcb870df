"""One process of a measured RL run, for bench/parallel_cpu.py and bench/plan_vs_measured.py.

    python -m torch.distributed.run --nproc_per_node N bench/parallel_probe.py OUT.json CONFIG|- [key=value ...]

Runs `vlrl train` with the config file (- for none) and overrides (under torchrun: one
process of N) and writes, per process, OUT.json.<rank>: the bytes this process holds by term
as vlrl.models.memory names them (weights, master weights, gradients at their largest, optimizer
state, reference), its largest total of parameters, gradients and optimizer state, what
autograd kept for the backward pass of each training micro-batch with that micro-batch's
size (prompts, their padded length, completion rows and width, vision patches), and each
step's seconds.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from rich.console import Console

from vlrl.config import load_config
from vlrl.models.batch import collate
from vlrl.trainer import update
from vlrl.trainer.rl import RLTrainer
from vlrl.trainer.run import Run


def local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def nbytes(tensors) -> int:
    return sum(local(t).numel() * local(t).element_size() for t in tensors if t is not None)


class Probe:
    def __init__(self) -> None:
        self.gradients = 0
        self.state_peak = 0
        self.micro_batches: list[dict] = []

    def watch(self) -> None:
        """Wrap the update's training forward and the optimizer step to measure them."""
        probe, forward, step = self, update.rows_logprobs, Run.optimizer_step

        def measured_forward(model, batch, rows, *args, **kwargs):
            if not torch.is_grad_enabled():
                return forward(model, batch, rows, *args, **kwargs)
            storages: dict[int, int] = {}

            def pack(t: torch.Tensor) -> torch.Tensor:
                if not isinstance(t, torch.nn.Parameter) and not isinstance(t._base, torch.nn.Parameter):
                    storage = local(t).untyped_storage()
                    storages[storage.data_ptr()] = storage.nbytes()
                return t

            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                out = forward(model, batch, rows, *args, **kwargs)
            owners = sorted({int(batch.prompt_index[r]) for r in rows})
            prompts = collate([batch.groups[p].prompt for p in owners], 0)
            width = out[-1]  # rows_logprobs returns (log-probs, width)
            probe.micro_batches.append(
                {
                    "bytes": sum(storages.values()),
                    "prompts": len(owners),
                    "prompt_length": prompts.input_ids.shape[1],
                    "rows": len(rows),
                    "width": width,
                    "patches": int(prompts.vision["pixel_values"].shape[0]) if "pixel_values" in prompts.vision else 0,
                }
            )
            return out

        def measured_step(run: Run, loss_is_finite: bool):
            strategy = run.strategy
            clip = strategy.clip_gradients

            def measured_clip(max_norm: float) -> float:
                before = nbytes(p.grad for p in run.model.parameters())
                norm = clip(max_norm)
                after = nbytes(p.grad for p in strategy.parameters)  # replicated: moved onto the masters
                probe.gradients = max(probe.gradients, before, after)
                held = nbytes(run.model.parameters()) + nbytes(copies(run)) + max(before, after)
                probe.state_peak = max(probe.state_peak, held + nbytes(optimizer_tensors(run)))
                return norm

            strategy.clip_gradients = measured_clip
            try:
                return step(run, loss_is_finite)
            finally:
                strategy.clip_gradients = clip

        update.rows_logprobs = measured_forward
        Run.optimizer_step = measured_step


def copies(run: Run) -> list[torch.Tensor]:
    """The replicated strategy's fp32 masters of low-precision weights (FSDP2 has none apart)."""
    weights = getattr(run.strategy, "weights", None)
    return [m for _, _, m in weights.copies] if weights is not None else []


def optimizer_tensors(run: Run) -> list[torch.Tensor]:
    return [t for state in run.optimizer.state.values() for t in state.values() if isinstance(t, torch.Tensor)]


def terms(trainer: RLTrainer, probe: Probe) -> dict[str, int]:
    """This process's bytes by vlrl plan's terms (FSDP2: its shards)."""
    run = trainer.run
    stepped = {id(p) for p in run.strategy.parameters}
    model = list(run.model.parameters())
    if run.strategy.name == "replicated":
        weights, masters = nbytes(model), nbytes(copies(run))
    else:  # the trained weights are the optimizer's (fp32 under mixed precision): FSDP2's masters
        weights = nbytes(p for p in model if id(p) not in stepped)
        masters = nbytes(p for p in model if id(p) in stepped)
    return {
        "weights": weights,
        "master weights": masters,
        "gradients": probe.gradients,
        "optimizer": nbytes(optimizer_tensors(run)),
        "reference": nbytes(trainer.updater.reference.parameters()) if trainer.updater.reference is not None else 0,
    }


def main() -> None:
    out, config, overrides = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
    probe = Probe()
    probe.watch()
    trainer = RLTrainer(load_config(None if config == "-" else config, overrides), Console(quiet=True))
    result = trainer.train()
    rows = [json.loads(line) for line in result.metrics.read_text().splitlines()]
    report = {
        "terms": terms(trainer, probe),
        "state_peak": probe.state_peak,
        "micro_batches": probe.micro_batches,
        "step_seconds": [row["time_step"] for row in rows],
    }
    Path(f"{out}.{trainer.run.procs.rank}").write_text(json.dumps(report))


if __name__ == "__main__":
    main()
