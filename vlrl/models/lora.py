"""LoRA adapters merged out of place: W + scale * B A computed into a copy of W.

Merging in place (PEFT's merge_adapter / unmerge_adapter, as TRL's GRPOTrainer does around each
vLLM weight sync) rounds: (W + d) - d is not W, by up to about 0.01 in bf16 after one cycle and
in the last bits in float32 (tests/models/test_lora.py shows it), and the policy would drift a
little at every rollout. Here
the base weights are never written. `merged_weight` is what `loading.transformers_weights` gives
an engine that holds its own copy; `MergedLoRA` lets the HF engine decode with the merged
weights: each adapted Linear computes x W'^T with its copy W' instead of x W^T + s (x A^T) B^T,
one matrix product instead of three per layer and step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


def merged_weight(module: torch.nn.Module, weight: torch.Tensor) -> torch.Tensor:
    """`weight` (a LoRA layer's base weight) plus the layer's active adapters, summed in
    float32, in the weight's dtype."""
    delta = sum(module.get_delta_weight(a).float() for a in module.active_adapters if a in module.lora_A)
    return (weight.float() + delta).to(weight.dtype)


def lora_linears(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The LoRA-adapted Linear layers of `model` whose adapters are on."""
    from peft.tuners.lora import LoraLayer

    return [
        m
        for m in model.modules()
        if isinstance(m, LoraLayer) and isinstance(m.get_base_layer(), torch.nn.Linear) and not m.disable_adapters
    ]


def targeted_parameters(model: torch.nn.Module, names: list[str]) -> list[tuple[str, torch.nn.Parameter]]:
    """The parameters `names` (model.lora.target_parameters) pick, as PEFT's target_parameters
    match them: by the whole name or a dotted suffix of it (mlp.experts.down_proj)."""
    return [(n, p) for n, p in model.named_parameters() if any(n == t or n.endswith(f".{t}") for t in names)]


@contextlib.contextmanager
def adapters_dropping_out(model: torch.nn.Module, seed: int) -> Iterator[None]:
    """The adapters' dropout (`model.lora.dropout`, PEFT's lora_dropout, which only training mode
    turns on) active while entered, forwards and backward passes alike, its masks drawn from
    torch's generators seeded with `seed` (and set back after): a resumed run draws the masks
    an uninterrupted one did. With no dropout on the adapters, nothing changes."""
    dropouts = [d for m in lora_linears(model) for d in m.lora_dropout.values() if isinstance(d, torch.nn.Dropout)]
    if not dropouts:
        yield
        return
    # The GPU the forwards run on, not the parameters' device: FSDP2's CPU offload keeps those on
    # the CPU while the masks are drawn on the current CUDA device.
    with torch.random.fork_rng(devices=[torch.cuda.current_device()] if torch.cuda.is_initialized() else []):
        torch.manual_seed(seed)
        for dropout in dropouts:
            dropout.train()
        try:
            yield
        finally:
            for dropout in dropouts:
                dropout.eval()


class MergedLoRA:
    """The adapted layers of a model computing with merged copies of their weights while
    `merged()` is entered. The copies are kept between entries and refreshed in place, so that
    what reads them by address (a CUDA graph) reads the current merge; `release` frees them."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.copies: dict[torch.nn.Module, torch.Tensor] = {}

    @contextlib.contextmanager
    def merged(self) -> Iterator[None]:
        patched = []  # a merge that runs out of memory half-way unpatches those it patched
        try:
            for layer in lora_linears(self.model):
                base = layer.get_base_layer()
                with torch.no_grad():
                    weight = merged_weight(layer, base.weight)
                    copy = self.copies.get(layer)
                    if copy is None or copy.shape != weight.shape or copy.device != weight.device:
                        copy = self.copies[layer] = weight
                    else:
                        copy.copy_(weight)
                layer.forward = _merged_forward(copy, base.bias)  # an instance attribute: the class's is back on delete
                patched.append(layer)
            yield
        finally:
            for layer in patched:
                del layer.forward

    def release(self) -> None:
        self.copies.clear()


def _merged_forward(weight: torch.Tensor, bias: torch.Tensor | None):
    def forward(x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        return torch.nn.functional.linear(x, weight, bias)

    return forward
