"""fp32 master weights for a policy held in bfloat16 or float16.

At the recipes' learning rates (VLM-R1 and Video-R1 use 1e-6) an AdamW step moves a weight by
about 1e-6, while bfloat16 resolves about 1/256 of a weight's magnitude: stepped in place, most
updates round away and the model barely trains. So the optimizer steps fp32 copies of the
low-precision trainable weights, and the model's weights are those copies rounded after each
step (mixed-precision training as DeepSpeed and Megatron do it). Rollouts and forwards keep
running in the model's own dtype. fp32 weights (CPU default, LoRA adapters) are their own masters.
"""

from __future__ import annotations

import torch


class MasterWeights:
    def __init__(self, named_params: list[tuple[str, torch.nn.Parameter]], enabled: bool = True):
        self.names = [name for name, _ in named_params]
        self.params = [p for _, p in named_params]
        self.masters = [
            p.detach().float().clone().requires_grad_(True) if enabled and p.dtype != torch.float32 else p
            for p in self.params
        ]

    @property
    def copies(self) -> list[tuple[str, torch.nn.Parameter, torch.Tensor]]:
        """(name, model weight, its fp32 copy) for the weights that have one."""
        return [(n, p, m) for n, p, m in zip(self.names, self.params, self.masters, strict=True) if m is not p]

    def gradients_to_masters(self) -> None:
        """Move the model's gradients onto the masters, in fp32 (before averaging and clipping)."""
        for _, p, m in self.copies:
            m.grad = None if p.grad is None else p.grad.float()
            p.grad = None

    @torch.no_grad()
    def masters_to_model(self) -> None:
        for _, p, m in self.copies:
            p.copy_(m)

    def zero_grad(self) -> None:
        for tensor in (*self.params, *self.masters):
            tensor.grad = None

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The fp32 copies by parameter name: a resumed run continues from them, not from the
        rounded weights."""
        return {n: m.detach() for n, _, m in self.copies}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        copies = self.copies
        if set(state) != {n for n, _, _ in copies}:
            raise ValueError(
                f"checkpoint holds fp32 master weights for {len(state)} parameters, this run keeps {len(copies)}: "
                "model.dtype, the trained parameters or trainer.master_weights changed since it was saved"
            )
        with torch.no_grad():
            for n, p, m in copies:
                m.copy_(state[n])
                p.copy_(state[n])
