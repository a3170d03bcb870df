"""A KL reference that moves (algo.ref_sync_every): TR-DPO's update of the reference, as TRL's
sync_ref_model makes it (trl/trainer/callbacks.py, SyncRefModelCallback), and its weights as
part of the checkpoints, since a resumed run could not rebuild them from the model it started
from."""

from __future__ import annotations

from pathlib import Path

import torch
from torch.distributed.tensor import DTensor

from vlrl.trainer.checkpoint import CheckpointError, process_file


def local(tensor: torch.Tensor) -> torch.Tensor:
    """What this process holds of `tensor`: its shard (FSDP2's DTensor) or the whole of it."""
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


@torch.no_grad()
def mix_into(reference: torch.nn.Module, policy: torch.nn.Module, alpha: float) -> None:
    """reference <- alpha x policy + (1 - alpha) x reference, parameter by parameter, as TRL's
    `_sync_target_model` (every parameter, frozen ones too; buffers stay). Each process mixes
    its own shards (both models are sharded alike); the policy's float32 master shards are
    rounded to the reference's dtype first, as a replicated policy's weights are."""
    policy_parameters = dict(policy.named_parameters())
    for name, target in reference.named_parameters():
        source = local(policy_parameters[name])
        target = local(target)
        target.mul_(1.0 - alpha).add_(source.to(target.device, target.dtype), alpha=alpha)


def reference_state(reference: torch.nn.Module, main: bool) -> dict[str, torch.Tensor]:
    """This process's part of the reference's weights in a checkpoint: its shards of sharded
    parameters, and, on process 0 only, the whole ones (every process holds the same)."""
    return {name: local(p).detach() for name, p in reference.named_parameters() if isinstance(p, DTensor) or main}


@torch.no_grad()
def load_reference_state(reference: torch.nn.Module, checkpoint: Path, rank: int, own: dict, main: dict) -> None:
    """The reference's weights from `checkpoint`: this process's shards from its own file
    (`own`), whole parameters from process 0's (`main`); a parameter missing or of another
    shape (another model, another number of processes) is refused, naming the file."""
    for name, p in reference.named_parameters():
        sharded = isinstance(p, DTensor)
        saved, holder = (own, rank) if sharded else (main, 0)
        target = local(p)
        value = saved.get(name)
        if not isinstance(value, torch.Tensor) or value.shape != target.shape:
            found = "nothing" if value is None else f"{type(value).__name__} {tuple(getattr(value, 'shape', ()))}"
            raise CheckpointError(
                f"{process_file(checkpoint, 'reference', holder)}: the reference's {name} should be a tensor of shape "
                f"{tuple(target.shape)}, found {found} (written for another model or number of processes?)"
            )
        target.copy_(value)
