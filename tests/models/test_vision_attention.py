"""model.vision_attention: the vision tower's attention within each image, frame or window in
one SDPA call per chunk length (models/vision_attention.py), bit for bit transformers' call per
chunk on the CPU, forward and backward, in every family vlrl loads; the chunks' grouping read
once per cu_seqlens tensor and read again when the tensor changes."""

from __future__ import annotations

import pytest
import torch

from vlrl.config import ModelConfig
from vlrl.models.families import family_names, model_family
from vlrl.models.loading import load_model
from vlrl.models.vision_attention import Groups, GroupsCache, attend_in_chunks, grouped_vision_attention

# Images of several sizes, one twice, and a two-frame video: in Qwen2.5-VL's tiny tower (112-pixel
# windows of 8 x 8 patches) the 16 x 24 image is six full windows, the 10 x 14 one has edge windows.
GRIDS = {14: [[1, 16, 24], [1, 10, 14], [1, 16, 24], [2, 6, 8]], 16: [[1, 4, 6], [2, 4, 6], [1, 8, 8], [1, 4, 6]]}


def tower_run(name: str, dtype: str, vision_attention: str) -> tuple[torch.Tensor, list[torch.Tensor], int]:
    """The tower's features of GRIDS' patches, its parameters' gradients of a weighted sum of
    them, and its SDPA calls."""
    cfg = ModelConfig(path=f"tiny:{name}", dtype=dtype, vision_attention=vision_attention)
    model = load_model(cfg)
    vision = model_family(cfg).vision_module(model)
    grid = torch.tensor(GRIDS[vision.patch_embed.patch_size])
    x = torch.randn(int(grid.prod(dim=1).sum()), vision.patch_embed.proj.weight[0].numel(), generator=seeded(1))
    calls = []
    original = torch.nn.functional.scaled_dot_product_attention
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            torch.nn.functional, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or original(*a, **k)
        )
        features = torch.cat(
            model.model.get_image_features(pixel_values=x.to(model.dtype), image_grid_thw=grid).pooler_output
        )
    (features * torch.randn(features.shape, generator=seeded(2)).to(features.dtype)).sum().backward()
    return features.detach(), [p.grad for p in vision.parameters() if p.grad is not None], len(calls)


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", sorted(family_names()))
def test_grouped_vision_attention_is_transformers_call_per_chunk_bit_for_bit_forward_and_backward(name, dtype):
    features, grads, calls = tower_run(name, dtype, "grouped")
    want_features, want_grads, chunk_calls = tower_run(name, dtype, "chunks")
    assert torch.equal(features, want_features)
    assert len(grads) == len(want_grads) > 0 and all(torch.equal(a, b) for a, b in zip(grads, want_grads, strict=True))
    assert calls < chunk_calls  # and fewer calls did it


def test_each_chunk_length_is_one_sdpa_call():
    """Qwen2.5-VL's tiny tower: a window layer and a full-attention layer. Its windows of GRIDS
    (8 x 8 patches, counted by hand) are 6 + 4 + 6 + 2 = 18 chunks of 4 lengths: 64, and at the
    10 x 14 image's edges 48, 16 and 12, and one window of 48 in each 6 x 8 frame; its images
    and frames are 5 chunks of 3 lengths (384, 140, 48)."""
    *_, grouped = tower_run("qwen2_5_vl", "float32", "grouped")
    *_, chunks = tower_run("qwen2_5_vl", "float32", "chunks")
    assert (grouped, chunks) == (4 + 3, 18 + 5)


def test_groups_put_each_lengths_chunks_together_and_skip_empty_ones():
    cu = torch.tensor([0, 3, 5, 8, 8, 10, 13])  # lengths 3, 2, 3, 0, 2, 3
    groups = Groups.of(cu)
    assert groups.sizes == ((3, 3), (2, 2))
    assert groups.order.tolist() == [0, 1, 2, 5, 6, 7, 10, 11, 12, 3, 4, 8, 9]
    assert torch.equal(groups.order[groups.inverse], torch.arange(13))
    # the tokens already in groups' order: one length; each chunk of its own; runs of lengths
    for cu, sizes in (
        ([0, 4, 8, 12], ((3, 4),)),
        ([0, 4, 6, 7], ((1, 4), (1, 2), (1, 1))),
        ([0, 3, 6, 8], ((2, 3), (1, 2))),
    ):
        kept = Groups.of(torch.tensor(cu))
        assert kept.sizes == sizes and kept.order is None and kept.inverse is None


def test_attention_in_groups_equals_attention_chunk_by_chunk():
    cu = torch.tensor([0, 3, 5, 8, 8, 10, 13])
    q, k, v = (torch.randn(13, 2, 4, generator=seeded(i)) for i in range(3))
    out = attend_in_chunks(q, k, v, Groups.of(cu), scale=0.3, dropout=0.0)
    for start, end in zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True):
        chunk = [t[start:end].transpose(0, 1)[None] for t in (q, k, v)]
        want = torch.nn.functional.scaled_dot_product_attention(*chunk, scale=0.3)[0].transpose(0, 1)
        assert torch.equal(out[start:end], want)


def test_the_cache_reads_a_tensor_again_when_it_changes_in_place():
    cache = GroupsCache()
    cu = torch.tensor([0, 2, 4])
    first = cache(cu)
    assert cache(cu) is first  # kept: read off the device once
    cu[2] = 5  # lengths 2, 3 now
    assert cache(cu).sizes == ((1, 2), (1, 3))
    other = torch.tensor([0, 2, 4])  # equal values, another tensor: its own entry
    assert cache(other) is not first and cache(other).sizes == first.sizes


def test_under_inference_mode_the_tower_is_the_same_and_reads_each_cu_seqlens_once():
    """Rollouts and reference forwards run under torch.inference_mode, whose tensors have no
    version counter: a cu_seqlens made there is read once and kept by identity alone."""
    features = {}
    for vision_attention in ("grouped", "chunks"):
        model = load_model(ModelConfig(path="tiny:qwen2_5_vl", dtype="float32", vision_attention=vision_attention))
        grid = torch.tensor(GRIDS[14])
        x = torch.randn(
            int(grid.prod(dim=1).sum()), model.model.visual.patch_embed.proj.weight[0].numel(), generator=seeded(1)
        )
        with torch.inference_mode():
            features[vision_attention] = torch.cat(
                model.model.get_image_features(pixel_values=x, image_grid_thw=grid).pooler_output
            )
    assert torch.equal(features["grouped"], features["chunks"])
    cache = GroupsCache()
    with torch.inference_mode():
        cu = torch.tensor([0, 2, 4])
        first = cache(cu)
    assert cache(cu) is first


def test_chunks_and_eager_attention_keep_transformers_forward():
    chunks = load_model(ModelConfig(path="tiny:qwen2_5_vl", dtype="float32", vision_attention="chunks"))
    assert not any("forward" in vars(m) for m in chunks.modules() if type(m).__name__.endswith("VisionAttention"))
    eager = load_model(ModelConfig(path="tiny:qwen2_5_vl", dtype="float32", attn_implementation="eager"))
    attention = eager.model.visual.blocks[0].attn
    assert "forward" in vars(attention)  # replaced, and hands over to the module's own forward
    x, cu = torch.randn(16, attention.qkv.in_features, generator=seeded(3)), torch.tensor([0, 8, 16])
    cos, sin = torch.randn(16, attention.qkv.out_features // 3 // attention.num_heads, generator=seeded(4)).chunk(2, 1)
    rope = (torch.cat((cos, cos), -1), torch.cat((sin, sin), -1))
    assert torch.equal(
        attention(x, cu_seqlens=cu, position_embeddings=rope), type(attention).forward(attention, x, cu, rope)
    )


def test_only_the_loaded_families_vision_attention_is_replaced():
    class VisionAttention(torch.nn.Module):  # the name and attributes, a forward vlrl does not know
        def __init__(self):
            super().__init__()
            self.qkv, self.proj = torch.nn.Linear(8, 24), torch.nn.Linear(8, 8)

    from transformers.models.qwen3_omni_moe.configuration_qwen3_omni_moe import Qwen3OmniMoeVisionEncoderConfig
    from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import Qwen3OmniMoeVisionAttention

    model = load_model(ModelConfig(path="tiny:qwen2_5_vl", dtype="float32", vision_attention="chunks"))
    # the same attributes in the modeling file of a model vlrl does not load: its forward is not compared
    unloaded = Qwen3OmniMoeVisionAttention(Qwen3OmniMoeVisionEncoderConfig(hidden_size=32, num_heads=2))
    foreign = torch.nn.ModuleList([VisionAttention(), unloaded, model.model.visual.blocks[0].attn])
    assert grouped_vision_attention(foreign) == 1 and [("forward" in vars(m)) for m in foreign] == [False, False, True]
