"""Activation checkpointing of decoder layers and vision blocks that keeps vlrl's KV cache.

vlrl's training forward runs each prompt once into a KV cache and the completions on top,
with gradients through the cache (vlrl/models/policy.py). transformers' own gradient checkpointing
turns the cache off in every layer it checkpoints (it would append the recomputed keys a
second time), and only in train mode, which RL never enters (dropout stays off): it would
silently change nothing or break the shared prefix. Here each layer's forward runs under
torch.utils.checkpoint (non-reentrant), and its recomputation in the backward pass sees the
cache exactly as the forward saw it: the cache layers' attributes are set back to their
state before the call for the recomputation and restored after it. That needs cache layers
that replace their tensors when they grow (transformers' DynamicLayer concatenates); a cache
updated in place is refused. The layers are the model's `_no_split_modules` classes, so new
model families need no code here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from vlrl.models.blocks import layer_class_names


def checkpoint_layers(model: torch.nn.Module) -> int:
    """Make every decoder layer and vision block of `model` recompute its activations in the
    backward pass; returns how many. Done before FSDP wraps the layers, so its hooks stay
    outside the recomputed forward."""
    names = layer_class_names(model)
    layers = [m for m in model.modules() if type(m).__name__ in names]
    for layer in layers:
        layer.forward = recomputed(layer.forward)
    return len(layers)


CacheState = tuple[list[Any], list[dict[str, Any]]]


def _cache_state(cache: Any) -> CacheState | None:
    if cache is None or not hasattr(cache, "layers"):
        return None
    from transformers.cache_utils import DynamicLayer

    for layer in cache.layers:
        if not isinstance(layer, DynamicLayer):
            raise RuntimeError(
                f"trainer.gradient_checkpointing: the model's cache layer {type(layer).__name__} is updated in place, "
                "which a recomputed layer cannot replay; turn gradient checkpointing off for this model"
            )
    return list(cache.layers), [dict(layer.__dict__) for layer in cache.layers]


def _set_cache_state(cache: Any, state: CacheState) -> None:
    layers, attributes = state
    cache.layers[:] = layers
    for layer, saved in zip(layers, attributes, strict=True):
        layer.__dict__.clear()
        layer.__dict__.update(saved)


def recomputed(forward: Callable[..., Any]) -> Callable[..., Any]:
    """`forward` run under non-reentrant checkpointing when gradients are on; its replay in the
    backward pass sees the KV cache (kwarg past_key_values) as the forward saw it."""

    @functools.wraps(forward)
    def run(*args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():
            return forward(*args, **kwargs)
        cache = kwargs.get("past_key_values")
        before = _cache_state(cache)
        calls = 0

        def replay(*a: Any, **k: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls == 1 or before is None:  # the forward itself, or nothing to set back
                return forward(*a, **k)
            after = _cache_state(cache)
            _set_cache_state(cache, before)
            try:
                return forward(*a, **k)
            finally:  # also when the recomputation stops early, having what backward needs
                _set_cache_state(cache, after)

        return checkpoint(replay, *args, use_reentrant=False, **kwargs)

    return run
