"""The vision tower's attention over a batch's images, frames or windows in a few SDPA calls
(model.vision_attention).

Every Qwen vision tower vlrl loads (Qwen2-VL to Qwen3.5) attends within chunks of its packed
patches: each image, each video frame, and in Qwen2.5-VL's window layers each 112-pixel window
(`cu_seqlens` bounds them). With FlashAttention transformers hands the chunks to one
variable-length kernel; with SDPA, the default and the only attention vlrl's static decoding
step takes, it reads the chunk lengths off the device (a host synchronization in every layer)
and calls SDPA once per chunk. A 640 x 480 COCO image at Qwen2.5-VL's pixel limits is about 30
windows: for 16 prompts, some 480 calls in each of 28 window layers, each with its Python, its
transposes and a small kernel, in the rollout's prefill, the reference's forward and the
policy's forward and backward alike.

Here the chunks of equal length are one batch (n, heads, length, head_dim) of one SDPA call: a
tower's calls per layer are its distinct chunk lengths (interior windows share one length, video
frames another). Each chunk is still attended alone, by the same kernel with the same scale, so
the features equal transformers' bit for bit on the CPU, forward and backward
(tests/models/test_vision_attention.py); on a GPU a kernel may split its work otherwise for a
larger batch, which can round otherwise. The grouping is read once per `cu_seqlens` tensor (the
tower passes one tensor to all its full-attention layers and one to all its window layers) and
kept while that tensor is alive and unchanged (`Groups.of`).

Only the vision attention modules of the families vlrl loads are replaced, whose forward is
known (the qkv projection, the vision rope, attention per chunk, the output projection), and
only under SDPA; with eager attention or FlashAttention the module's own forward runs.
"""

from __future__ import annotations

import itertools
import sys
import types
from collections import defaultdict
from dataclasses import dataclass

import torch
import torch.nn.functional as F

REMEMBERED = 4  # cu_seqlens tensors whose groups are kept (a tower's forward passes two)
# transformers' modeling files of the families vlrl loads, whose vision attention forwards are
# the one `grouped_forward` stands in for (each compared in tests/models/test_vision_attention.py)
KNOWN = tuple(
    f"transformers.models.{name}.modeling_{name}"
    for name in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe")
)


@dataclass(frozen=True)
class Groups:
    """A packed sequence's chunks grouped by length: `sizes` (chunks, length) per group, and
    `order`, the token indices that put each group's chunks next to each other, group after
    group, with its `inverse` (None for both where the tokens are already in that order: every
    chunk of one length, or each of its own)."""

    sizes: tuple[tuple[int, int], ...]
    order: torch.Tensor | None
    inverse: torch.Tensor | None

    @classmethod
    def of(cls, cu_seqlens: torch.Tensor) -> Groups:
        starts = cu_seqlens.tolist()  # the tower's one look at the host per cu_seqlens tensor
        by_length: defaultdict[int, list[int]] = defaultdict(list)  # in order of first appearance
        for start, end in itertools.pairwise(starts):
            if end > start:
                by_length[end - start].append(start)
        sizes = tuple((len(chunk_starts), length) for length, chunk_starts in by_length.items())
        grouped = [start for chunk_starts in by_length.values() for start in chunk_starts]
        if sorted(grouped) == grouped:  # each group's chunks next to each other already, in order
            return cls(sizes, None, None)
        order = torch.cat(
            [
                (torch.tensor(chunk_starts)[:, None] + torch.arange(length)).flatten()
                for length, chunk_starts in by_length.items()
            ]
        ).to(cu_seqlens.device)
        return cls(sizes, order, torch.argsort(order))


class GroupsCache:
    """The groups of the last few `cu_seqlens` tensors, by identity: a tensor kept here stays
    alive, so another cannot take its identity, and a change in place moves its version. A
    tensor made under torch.inference_mode (rollouts, reference forwards) has no version: it is
    taken as unchanged (the tower makes new ones at every forward; it could change in place only
    inside inference mode, which nothing does)."""

    def __init__(self):
        self.entries: list[tuple[torch.Tensor, int | None, Groups]] = []

    def __call__(self, cu_seqlens: torch.Tensor) -> Groups:
        version = version_of(cu_seqlens)
        for tensor, kept, groups in self.entries:
            if tensor is cu_seqlens and kept == version:
                return groups
        groups = Groups.of(cu_seqlens)
        self.entries = [(cu_seqlens, version, groups), *self.entries[: REMEMBERED - 1]]
        return groups


def version_of(tensor: torch.Tensor) -> int | None:
    return None if tensor.is_inference() else tensor._version


def attend_in_chunks(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, groups: Groups, scale: float, dropout: float
) -> torch.Tensor:
    """SDPA within each chunk of the packed (tokens, heads, head_dim) `q`, `k`, `v`, one call per
    chunk length; the output packed as the input (tokens, heads, head_dim)."""
    heads, dim = q.shape[1:]
    if groups.order is not None:
        q, k, v = (t.index_select(0, groups.order) for t in (q, k, v))
    outputs, offset = [], 0
    for chunks, length in groups.sizes:
        size = chunks * length
        batch = [t[offset : offset + size].view(chunks, length, heads, dim).transpose(1, 2) for t in (q, k, v)]
        out = F.scaled_dot_product_attention(*batch, dropout_p=dropout, scale=scale)
        outputs.append(out.transpose(1, 2).reshape(size, heads, dim))
        offset += size
    out = outputs[0] if len(outputs) == 1 else torch.cat(outputs)
    return out if groups.inverse is None else out.index_select(0, groups.inverse)


def grouped_forward(
    self: torch.nn.Module,
    hidden_states: torch.Tensor,
    cu_seqlens: torch.Tensor,
    position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
    max_seqlen: int | None = None,
    **kwargs,
) -> torch.Tensor:
    """The vision attention module's own forward (transformers 5: qkv, the vision rope, SDPA per
    chunk, proj), its chunks attended in groups (`attend_in_chunks`)."""
    if self.config._attn_implementation != "sdpa":  # eager attention, FlashAttention: theirs
        return type(self).forward(self, hidden_states, cu_seqlens, position_embeddings, max_seqlen, **kwargs)
    tokens = hidden_states.shape[0]
    q, k, v = self.qkv(hidden_states).reshape(tokens, 3, self.num_heads, -1).permute(1, 0, 2, 3).unbind(0)
    cos, sin = position_embeddings
    q, k = self.vlrl_rotary(q, k, cos, sin)
    dropout = 0.0 if not self.training else self.attention_dropout
    out = attend_in_chunks(q, k, v, self.vlrl_groups(cu_seqlens), self.scaling, dropout)
    return self.proj(out.reshape(tokens, -1).contiguous())


def is_vision_attention(module: torch.nn.Module) -> bool:
    """A vision attention module of a KNOWN modeling file (a fused qkv projection, the vision
    rope of that file); the other Qwen models' (Omni's) are left as they are."""
    modeling = sys.modules.get(type(module).__module__)
    return (
        type(module).__module__ in KNOWN
        and type(module).__name__.endswith("VisionAttention")
        and isinstance(getattr(module, "qkv", None), torch.nn.Linear)
        and hasattr(module, "proj")
        and hasattr(modeling, "apply_rotary_pos_emb_vision")
    )


def grouped_vision_attention(model: torch.nn.Module) -> int:
    """Each vision attention module of `model` (`is_vision_attention`) computed by
    `grouped_forward`, all sharing one cache of groups; returns how many there are."""
    cache = GroupsCache()
    count = 0
    for module in model.modules():
        if is_vision_attention(module):
            module.vlrl_rotary = sys.modules[type(module).__module__].apply_rotary_pos_emb_vision
            module.vlrl_groups = cache
            module.forward = types.MethodType(grouped_forward, module)
            count += 1
    return count
