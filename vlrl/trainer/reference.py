"""A KL reference that moves (algo.ref_sync_every): TR-DPO's update of the reference, as TRL's
sync_ref_model makes it (trl/trainer/callbacks.py, SyncRefModelCallback), and its weights as
part of the checkpoints, since a resumed run could not rebuild them from the model it started
from."""

from __future__ import annotations

import torch
from torch.distributed.tensor import DTensor


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


class ReferenceWeights:
    """The reference's weights as a part of each process's checkpoints (`RLTrainer.restore_part`
    with `shared`): its shards of sharded parameters, and on process 0 the whole ones (every
    process holds the same), read back from its own part merged over process 0's."""

    def __init__(self, model: torch.nn.Module, main: bool):
        self.model, self.main = model, main

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {
            name: local(p).detach() for name, p in self.model.named_parameters() if isinstance(p, DTensor) or self.main
        }

    @torch.no_grad()
    def load_state_dict(self, saved: dict) -> None:
        """A parameter missing or of another shape (another model, another number of processes)
        is refused, naming it, before any is written."""
        targets = [(name, local(p)) for name, p in self.model.named_parameters()]
        for name, target in targets:
            value = saved.get(name)
            if not isinstance(value, torch.Tensor) or value.shape != target.shape:
                found = "nothing" if value is None else f"{type(value).__name__} {tuple(getattr(value, 'shape', ()))}"
                raise ValueError(
                    f"the reference's {name} should be a tensor of shape {tuple(target.shape)}, found {found} "
                    "(written for another model or number of processes?)"
                )
        for name, target in targets:
            target.copy_(saved[name])
