"""A model's repeated blocks and its embeddings, read off the model: the decoder layers and
vision blocks transformers keeps whole (`_no_split_modules`). Gradient checkpointing
recomputes them, FSDP2 shards the decoder layers and the embeddings unit by unit, and
`vlrl plan` counts them."""

from __future__ import annotations

import torch

from vlrl.models.loading import core_model


def layer_class_names(model: torch.nn.Module) -> set[str]:
    """The classes transformers keeps whole when splitting a model: decoder layers, vision blocks."""
    names = set(getattr(core_model(model), "_no_split_modules", None) or [])
    if not names:
        raise RuntimeError(f"{type(core_model(model)).__name__} names no layer classes (_no_split_modules)")
    return names


def unit_modules(model: torch.nn.Module) -> list[list[torch.nn.Module]]:
    """The FSDP units below the root, in the order they are wrapped: each decoder layer (modules
    of the `_no_split_modules` classes outside the vision tower), then the input embeddings and
    the output layer, together when they share their weight."""
    core = core_model(model)
    vision = core.get_encoder(modality="image")
    in_vision = set() if vision is core else {id(m) for m in vision.modules()}
    names = layer_class_names(model)
    layers = [[m] for m in model.modules() if type(m).__name__ in names and id(m) not in in_vision]
    if not layers:
        raise RuntimeError(f"found no decoder layers ({', '.join(sorted(names))}) in {type(core).__name__}")
    embed, head = core.get_input_embeddings(), core.get_output_embeddings()
    if head is None:
        return [*layers, [embed]]
    if head.weight is embed.weight:
        return [*layers, [embed, head]]
    return [*layers, [embed], [head]]
