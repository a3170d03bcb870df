"""Every process holds the whole model, its fp32 master weights and AdamW's state.

Gradients are averaged by hand before each optimizer step (Processes.average_gradients), not
through DistributedDataParallel: processes run different numbers of token-budgeted
micro-batches, and DDP needs every process to run the same number of backward passes. The
optimizer steps the fp32 masters of low-precision weights (vlrl/parallel/precision.py) and the
model's weights are those masters rounded. The master weights and the optimizer's state go
into trainer_state.pt; process 0 writes the HF-format model.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from vlrl.config import TrainerConfig
from vlrl.models.loading import full_weights, save_model
from vlrl.models.memory import ModelShape, StrategyMemory, Workload
from vlrl.parallel.base import adamw
from vlrl.parallel.distributed import Processes
from vlrl.parallel.precision import MasterWeights
from vlrl.parallel.recompute import checkpoint_layers


class Replicated:
    name = "replicated"
    Options = None
    options_key = "replicated"
    copies_weights = False  # it computes with the weights load_model gives it

    def __init__(self, procs: Processes, t: TrainerConfig, options: None = None):
        self.procs = procs
        self.load_device = procs.device()
        self.master_weights = t.master_weights
        self.gradient_checkpointing = t.gradient_checkpointing
        self.model: torch.nn.Module | None = None
        self.weights: MasterWeights | None = None
        self.parameters: list[torch.nn.Parameter] = []
        self.optimizer: torch.optim.Optimizer | None = None

    @staticmethod
    def plan_variants() -> dict[str, None]:
        return {"replicated": None}

    @staticmethod
    def memory(shape: ModelShape, work: Workload, options: None) -> StrategyMemory:
        """Everything on every GPU: the model's weights, fp32 masters of low-precision ones, AdamW's
        moments, the reference; gradients in the model's dtype in backward, moved onto the fp32
        masters for the step."""
        b, T, P = shape.dtype_bytes, shape.trainable, shape.params
        stepped = 4 if shape.upcast else shape.trainable_bytes  # the optimizer's weights, gradients and moments
        return StrategyMemory(
            weights=P * b,
            master_weights=shape.upcast * 4,
            optimizer=T * 2 * stepped,
            reference=P * b if work.beta > 0 and not work.lora else 0.0,
            gradients_update=T * shape.trainable_bytes,
            gradients_step=T * stepped,
            gathered=0.0,
        )

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        if self.gradient_checkpointing:
            checkpoint_layers(model)
        self.model = model
        trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        self.weights = MasterWeights(trainable, self.master_weights)
        self.parameters = self.weights.masters
        return model

    def wrap_reference(self, model: torch.nn.Module) -> torch.nn.Module:
        return model

    def build_optimizer(self, lr: float, weight_decay: float) -> torch.optim.Optimizer:
        self.optimizer = adamw(self.parameters, lr, weight_decay)
        return self.optimizer

    def micro_batches(self, planned: list[list[int]]) -> list[list[int]]:
        """Forwards are no collectives here: each process runs its own micro-batches."""
        return planned

    def idle_pass(self, model: torch.nn.Module, pad_id: int, backward: bool) -> None:
        raise RuntimeError("the replicated strategy plans no empty micro-batches")

    def clip_gradients(self, max_norm: float) -> float:
        self.weights.gradients_to_masters()
        self.procs.average_gradients(self.parameters)
        return float(torch.nn.utils.clip_grad_norm_(self.parameters, max_norm))

    def after_step(self) -> None:
        self.weights.masters_to_model()

    def zero_grad(self) -> None:
        self.weights.zero_grad()

    def recovers(self) -> bool:
        return True  # forwards are each process's own; gradients are averaged after the backwards

    def discard_pass(self, model: torch.nn.Module) -> None:
        self.zero_grad()  # a failed pass leaves nothing else: its tensors go with its traceback

    def trainer_state(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "master_weights": self.weights.state_dict()}

    def save(self, directory: Path, main: bool) -> None:
        if main:
            save_model(self.model, directory)

    def load(self, checkpoint: Path, state: dict[str, Any]) -> None:
        if "master_weights" not in state:
            raise ValueError(
                f"it holds no fp32 master weights; it was written with {state.get('parallel', {}).get('strategy')}"
            )
        self.weights.load_state_dict(state["master_weights"])
        self.optimizer.load_state_dict(state["optimizer"])

    def full_weights(self, device: torch.device | str | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in full_weights(self.model):
            yield name, tensor if device is None else tensor.to(device)

    def gathered(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()
