"""A policy that prefers some tokens (its end tokens, banned ones) without training one."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import torch

from vlrl.models.loading import core_model


@contextlib.contextmanager
def raised_logits(model: torch.nn.Module, ids: Sequence[int] | torch.Tensor, by: float) -> Iterator[None]:
    """While entered, the output layer's logits at `ids` are raised `by` (a forward hook: the
    engines' decoding steps and the model's forward call the layer; the update's chunks read
    its weight and do not see it)."""

    def raise_them(module, inputs, output):
        output = output.clone()
        output[..., ids] += by
        return output

    handle = core_model(model).get_output_embeddings().register_forward_hook(raise_them)
    try:
        yield
    finally:
        handle.remove()
