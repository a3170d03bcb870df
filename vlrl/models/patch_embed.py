"""The vision tower's patch embedding computed as the matrix product it is (model.patch_embedding).

Every Qwen vision tower vlrl loads (Qwen2-VL to Qwen3.5) embeds its patches with an nn.Conv3d
whose stride is its kernel: the patches do not overlap, and each output is one flattened patch
times the flattened weight, a linear layer. Convolution libraries do not all treat it as one: on
CUDA, PyTorch 2.9 falls back to a slow kernel for it (pytorch#174051: vision forwards 10-20x
slower), cuDNN takes a path ~50,000x slower than the product on Blackwell in bfloat16
(transformers#45750), and on this project's 2-core CPU the convolution's forward and backward
take three to four times the product's. vLLM computes it as a product (its Conv3dLayer), and
transformers offers that as a fusion which renames the weight (`fusion_config={"patch_embeddings":
True}`). Here the module keeps its Conv3d and its weight under their names, so checkpoints, FSDP2's
units, freezing and vLLM's weight sync see the model as it was; only its forward changes, to
`F.linear` of the flattened patches and a view of the same weight (a trained weight's gradient
flows through the view). The sums run in another order than the convolution's: equal up to
rounding (tests/models/test_patch_embed.py). Only transformers' Qwen modules are replaced, whose
forward is known to take flat patches: another family's module of the same shape might take whole
images, which the product would read as patches without a word.
"""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F


def tiles(conv: torch.nn.Conv3d) -> bool:
    """Whether the convolution's windows tile its input: stride equal to kernel, nothing between
    or around them, one group."""
    return (
        conv.stride == conv.kernel_size
        and conv.padding == (0, 0, 0)
        and conv.dilation == (1, 1, 1)
        and conv.groups == 1
    )


def is_patch_embedding(module: torch.nn.Module) -> bool:
    """A transformers Qwen patch embedding (its forward: the input as flat patches through `proj`,
    viewed as (patches, embed_dim)) whose convolution's windows tile its input."""
    proj = getattr(module, "proj", None)
    return (
        type(module).__module__.startswith("transformers.models.qwen")
        and hasattr(module, "embed_dim")
        and isinstance(proj, torch.nn.Conv3d)
        and tiles(proj)
    )


def patch_product(self: torch.nn.Module, hidden_states: torch.Tensor) -> torch.Tensor:
    """What the patch embedding's own forward computes (its patches, cast to the weight's dtype,
    through `proj`, as (patches, embed_dim)), as one matrix product."""
    weight = self.proj.weight.flatten(1)  # (embed_dim, channels x frames x height x width): a view
    patches = hidden_states.reshape(-1, weight.shape[1]).to(weight.dtype)
    return F.linear(patches, weight, self.proj.bias).view(-1, self.embed_dim)


def linear_patch_embedding(model: torch.nn.Module) -> int:
    """Each patch embedding of `model` (`is_patch_embedding`) computed by `patch_product`;
    returns how many there are."""
    count = 0
    for module in model.modules():
        if is_patch_embedding(module):
            module.forward = types.MethodType(patch_product, module)
            count += 1
    return count
