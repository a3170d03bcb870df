"""model.patch_embedding: the vision tower's non-overlapping Conv3d computed as the matrix product
it is (models/patch_embed.py), equal to the convolution up to rounding, forward and backward, in
every family vlrl loads, with the model's weights and their names as they were."""

from __future__ import annotations

import pytest
import torch

from vlrl.config import ModelConfig
from vlrl.models.families import model_family
from vlrl.models.loading import load_model
from vlrl.models.patch_embed import linear_patch_embedding

FAMILIES = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5"]


def loaded(name: str, patch_embedding: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    cfg = ModelConfig(path=f"tiny:{name}", dtype="float32", patch_embedding=patch_embedding)
    model = load_model(cfg)
    return model, model_family(cfg).vision_module(model).patch_embed


def convolution_calls(module: torch.nn.Module) -> list[int]:
    calls: list[int] = []
    module.proj.register_forward_hook(lambda *_: calls.append(1))
    return calls


def patches(embed: torch.nn.Module) -> torch.Tensor:
    """Pixel patches as the processor flattens them: 12 of them."""
    return torch.randn(12, embed.proj.weight[0].numel(), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("name", FAMILIES)
def test_the_linear_patch_embedding_equals_the_convolution_forward_and_backward(name):
    _, embed = loaded(name, "linear")
    calls = convolution_calls(embed)
    x = patches(embed)
    out = embed(x)
    assert not calls  # the product computed it, not the convolution
    reference = type(embed).forward(embed, x)  # the class's forward: the Conv3d
    assert calls and out.shape == reference.shape == (12, embed.embed_dim)
    torch.testing.assert_close(out, reference, rtol=1e-5, atol=1e-5)
    upstream = torch.randn_like(out)
    params = [p for p in (embed.proj.weight, embed.proj.bias) if p is not None]
    for mine, theirs in zip(
        torch.autograd.grad(out, params, upstream), torch.autograd.grad(reference, params, upstream), strict=True
    ):
        torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", FAMILIES)
def test_conv_keeps_transformers_convolution(name):
    _, embed = loaded(name, "conv")
    calls = convolution_calls(embed)
    x = patches(embed)
    assert torch.equal(embed(x), type(embed).forward(embed, x)) and len(calls) == 2


def test_the_weights_keep_their_names_and_shapes():
    linear, _ = loaded("qwen2_5_vl", "linear")
    conv, _ = loaded("qwen2_5_vl", "conv")
    mine, theirs = linear.state_dict(), conv.state_dict()
    assert list(mine) == list(theirs)
    assert all(mine[k].shape == theirs[k].shape and torch.equal(mine[k], theirs[k]) for k in mine)


def test_the_vision_tower_gives_the_convolutions_features():
    """The whole tower on an image's patches, as the model's forward calls it."""
    features, convolutions = [], []
    for patch_embedding in ("linear", "conv"):
        model, embed = loaded("qwen2_5_vl", patch_embedding)
        convolutions.append(convolution_calls(embed))
        grid = torch.tensor([[1, 4, 4]])  # one image of 4 x 4 patches
        x = torch.randn(16, embed.proj.weight[0].numel(), generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            out = model.model.get_image_features(pixel_values=x, image_grid_thw=grid)
        features.append(torch.cat(out.pooler_output))
    assert [len(calls) for calls in convolutions] == [0, 1]  # the product, then the convolution
    torch.testing.assert_close(features[0], features[1], rtol=1e-5, atol=1e-5)


def test_only_transformers_qwen_patch_embeddings_whose_windows_tile_their_input_are_replaced():
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VisionPatchEmbed

    class Foreign(torch.nn.Module):  # the same attributes, a forward vlrl does not know
        def __init__(self):
            super().__init__()
            self.embed_dim = 8
            self.proj = torch.nn.Conv3d(3, 8, kernel_size=(2, 4, 4), stride=(2, 4, 4))

    overlapping = Qwen2_5_VisionPatchEmbed(4, 2, 3, 8)
    overlapping.proj = torch.nn.Conv3d(3, 8, kernel_size=(2, 4, 4), stride=(1, 2, 2))
    model = torch.nn.ModuleList([Qwen2_5_VisionPatchEmbed(4, 2, 3, 8), overlapping, Foreign()])
    assert linear_patch_embedding(model) == 1
    assert ["forward" in vars(m) for m in model] == [True, False, False]
