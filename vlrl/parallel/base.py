"""The parallelism seam: how a run spreads its model, gradients and optimizer over the processes.

`Run` (vlrl/trainer/run.py) composes a strategy and the RL and SFT loops never ask which one it
is. A strategy wraps the loaded policy (and the reference model), builds the optimizer over
what each process holds, reduces and clips the gradients, writes and reads the model's part
of a checkpoint, and hands out the policy's full weights (to a rollout engine that keeps its
own copy, and to HF-format checkpoints). Implementations: `replicated` (every process holds
everything, gradients averaged by hand) and `fsdp2` (PyTorch's FSDP2: weights, gradients and
AdamW's state sharded). Adding one (tensor parallelism, DeepSpeed) is one module registered in
the entry point group `vlrl.strategies` (pyproject.toml).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, ClassVar, Protocol

import torch

from vlrl.models.memory import ModelShape, StrategyMemory, Workload


def adamw(parameters: list[torch.nn.Parameter], lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW with its fused kernel: one call per parameter, in place (on a CPU the default steps
    each parameter in about ten small operations: 5-6 ms of the step bench's tiny model's step
    against 1.2-1.5 ms fused; on a GPU its foreach kernels hold a copy of what they step). The
    HF Trainer, so TRL, steps with it by default (adamw_torch_fused, from torch 2.8)."""
    return torch.optim.AdamW(parameters, lr=lr, weight_decay=weight_decay, fused=True)


class Strategy(Protocol):
    """`load_device`: where `load_model` puts the weights before `wrap` (FSDP2 shards from the
    CPU copy onto the device)."""

    name: ClassVar[str]
    # Its options: a dataclass read from trainer.<options_key> (vlrl/plugins.py), or None;
    # built as Strategy(procs, trainer_config, options)
    Options: ClassVar[type | None]
    options_key: ClassVar[str]
    load_device: torch.device
    # Whether `wrap` and `wrap_reference` copy the weights they are given into memory of their
    # own (FSDP2: into its shards). If not, `load_model` copies them out of the checkpoint file
    # it read (models/loading.py, `in_own_memory`).
    copies_weights: ClassVar[bool]
    parameters: list[torch.nn.Parameter]  # what the optimizer steps (set by `wrap`)

    @staticmethod
    def plan_variants() -> dict[str, Any]:
        """The configurations `vlrl plan` shows, by label: its options for each."""
        ...

    @staticmethod
    def memory(shape: ModelShape, work: Workload, options: Any) -> StrategyMemory:
        """What one GPU holds under this strategy with `options`, on paper (vlrl/models/memory.py)."""
        ...

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        """The trained policy, distributed; `parameters` are set."""
        ...

    def wrap_reference(self, model: torch.nn.Module) -> torch.nn.Module:
        """A frozen model (the KL reference), distributed the same way; no optimizer state."""
        ...

    def build_optimizer(self, lr: float, weight_decay: float) -> torch.optim.Optimizer:
        """AdamW over `parameters` (this process's shards under FSDP2)."""
        ...

    def micro_batches(self, planned: list[list[int]]) -> list[list[int]]:
        """This process's micro-batches (row positions), with empty ones where every forward is
        a collective (FSDP2 all-gathers each layer) and another process has more: all processes
        must then run the same number of forwards. The loops run `idle_pass` for an empty one."""
        ...

    def idle_pass(self, model: torch.nn.Module, pad_id: int, backward: bool) -> None:
        """The forwards (and, with `backward`, a backward of zero) of a micro-batch that moves nothing."""
        ...

    def clip_gradients(self, max_norm: float) -> float:
        """Reduce the gradients across processes (if not done in backward), clip them to
        `max_norm` by their global norm, and return that norm (the same on every process)."""
        ...

    def after_step(self) -> None:
        """After optimizer.step(): bring the model's weights up to date (replicated: the rounded masters)."""
        ...

    def zero_grad(self) -> None: ...

    def recovers(self) -> bool:
        """Whether a forward or backward that raised (the GPU out of memory) can be discarded and the
        update go on (trainer/budget.py): not where another process would wait inside the failed
        pass's collectives, nor where the backend cannot reset what the pass left. After `wrap`."""
        ...

    def discard_pass(self, model: torch.nn.Module) -> None:
        """After a forward or backward of `model` (the policy or the reference) raised: drop what it
        left (gathered shards, pending reductions) and the policy's gradients since the last
        optimizer step (none where a no-gradient pass runs, between optimizer steps)."""
        ...

    def trainer_state(self) -> dict[str, Any]:
        """Entries of trainer_state.pt (tensors and plain values only: loaded with weights_only)."""
        ...

    def save(self, directory: Path, main: bool) -> None:
        """Write the model's part of a checkpoint into `directory`, on every process (a
        collective under FSDP2): the HF-format model or LoRA adapter by process 0 (`main`),
        plus whatever the strategy needs besides `trainer_state` (FSDP2: sharded state)."""
        ...

    def load(self, checkpoint: Path, state: dict[str, Any]) -> None:
        """Restore the optimizer and the exact trained weights from a checkpoint (the model was
        loaded from its HF files). Raises ValueError when the checkpoint does not fit this run."""
        ...

    def full_weights(self, device: torch.device | str | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        """The policy's full weights by transformers names, LoRA merged, in the model's dtype; on
        `device` (None: where they are). Every process must iterate to the end (a collective
        under FSDP2); the tensors are the caller's to keep."""
        ...

    def gathered(self) -> AbstractContextManager[None]:
        """While entered (by every process at once), forwards of the policy need no collective:
        the rollout engine that samples with the policy may run any number of them."""
        ...
