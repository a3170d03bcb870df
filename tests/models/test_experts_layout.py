"""Qwen3-VL MoE's checkpoints store the fused experts as the released ones do (gate_up_proj
experts x hidden x 2*intermediate, down_proj experts x intermediate x hidden), which vLLM,
llama.cpp and transformers 4 read, where transformers 5 holds them transposed and saves them so
(models/qwen3_vl.py, `saving_released_experts`). The tiny build's experts are 96 wide in a
64-wide model, so no expert tensor is square and each layout has its own shape."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from safetensors.torch import load_file

from vlrl.config import ModelConfig
from vlrl.models.families import tiny_spec
from vlrl.models.loading import export_full_model, load_model, save_model
from vlrl.models.tiny import tiny_checkpoint

RELEASED = {"gate_up_proj": (4, 64, 192), "down_proj": (4, 96, 64)}  # experts, in, out: as bmm reads them
HELD = {"gate_up_proj": (4, 192, 64), "down_proj": (4, 64, 96)}  # what transformers 5's modules hold


def saved(path) -> dict[str, torch.Tensor]:
    return {name: t for file in sorted(path.glob("*.safetensors")) for name, t in load_file(file).items()}


def experts_shapes(tensors: dict[str, torch.Tensor]) -> dict[str, tuple[int, ...]]:
    return {name.rpartition(".")[2]: tuple(t.shape) for name, t in tensors.items() if ".experts." in name}


def parameters(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return dict(model.state_dict())


def test_a_qwen3_vl_moe_checkpoint_stores_its_experts_as_the_released_ones_and_a_run_saves_them_so(tmp_path):
    path = tiny_checkpoint(tiny_spec("tiny:qwen3_vl_moe"))
    assert experts_shapes(saved(path)) == RELEASED
    model = load_model(ModelConfig(path=str(path), dtype="float32"))
    assert experts_shapes(parameters(model)) == HELD
    save_model(model, tmp_path / "step")
    again = saved(tmp_path / "step")
    assert experts_shapes(again) == RELEASED
    assert all(torch.equal(again[name], t) for name, t in saved(path).items())
    reloaded = parameters(load_model(ModelConfig(path=str(tmp_path / "step"), dtype="float32")))
    assert all(torch.equal(reloaded[name], t) for name, t in parameters(model).items())


def test_a_checkpoint_transformers_5_saved_in_its_own_layout_loads_the_same_model_and_exports_as_released(tmp_path):
    """transformers' own save keeps its layout (its reverse compares with the parameter, which
    has the tensor's shape); such a checkpoint (a run's before vlrl saved the released layout)
    loads to the same model, and `vlrl export` rewrites it in the released layout."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    path = tiny_checkpoint(tiny_spec("tiny:qwen3_vl_moe"))
    AutoModelForImageTextToText.from_pretrained(path).save_pretrained(tmp_path / "held")
    AutoProcessor.from_pretrained(path).save_pretrained(tmp_path / "held")
    assert experts_shapes(saved(tmp_path / "held")) == HELD
    cfg = ModelConfig(path=str(tmp_path / "held"), dtype="float32")
    loaded, expected = parameters(load_model(cfg)), parameters(load_model(ModelConfig(path=str(path), dtype="float32")))
    assert all(torch.equal(loaded[name], t) for name, t in expected.items())
    out, _ = export_full_model(str(tmp_path / "held"), tmp_path / "exported")
    exported = saved(out)
    assert all(torch.equal(exported[name], t) for name, t in saved(path).items())


def test_square_experts_keep_transformers_layout_which_alone_loads_back_the_same_weights():
    """With the experts half the model's width, gate_up_proj is 64 x 64 in both layouts, and a
    load that transposes only where the shape differs could not tell: it is saved as held (the
    non-square down_proj as released), and loads back to the model that was built."""
    from vlrl.models.build import build_tokenizer
    from vlrl.models.families import family_class
    from vlrl.models.tiny import build_model

    spec = dataclasses.replace(tiny_spec("tiny:qwen3_vl_moe"), expert_intermediate=32)
    path = tiny_checkpoint(spec)
    assert experts_shapes(saved(path)) == {"gate_up_proj": (4, 64, 64), "down_proj": (4, 32, 64)}
    built = parameters(build_model(spec, build_tokenizer(spec, family_class(spec.arch).chat_template)))
    loaded = parameters(load_model(ModelConfig(path=str(path), dtype="float32")))
    assert all(torch.equal(loaded[name], t) for name, t in built.items())


def test_vllm_refuses_to_start_from_experts_stored_as_transformers_holds_them_and_says_how_to_rewrite_them(
    tmp_path, monkeypatch
):
    """vLLM reads any Qwen3-VL MoE checkpoint as the released layout: one saved by transformers
    5 (an SFT elsewhere, a run before vlrl saved the released layout) would be read transposed,
    a shape error deep in its loader or, square, other weights. Refused at the engine's start,
    naming the folder and `vlrl export`, which rewrites it; the released and square ones start."""
    from transformers import AutoModelForImageTextToText

    import vlrl.rollout.vllm as engine_module
    from vlrl.config import ConfigError
    from vlrl.models.qwen3_vl import experts_saved_as_held

    path = tiny_checkpoint(tiny_spec("tiny:qwen3_vl_moe"))
    square = tiny_checkpoint(dataclasses.replace(tiny_spec("tiny:qwen3_vl_moe"), expert_intermediate=32))
    held = tmp_path / "held"
    AutoModelForImageTextToText.from_pretrained(path).save_pretrained(held)
    (held / "generation_config.json").unlink()  # the folder is refused before anything else is read
    assert [experts_saved_as_held(str(p)) for p in (path, square, held)] == [False, False, True]
    on_cpu = dataclasses.replace(engine_module.ON_VLLM["qwen3_vl_moe"], refusal=lambda dtype, cuda: "")
    monkeypatch.setitem(engine_module.ON_VLLM, "qwen3_vl_moe", on_cpu)
    cfg = ModelConfig(path=str(held), family="qwen3_vl_moe")
    with pytest.raises(
        ConfigError, match=rf"cannot start: {held} stores its experts as transformers 5 holds them.*vlrl export"
    ):
        engine_module.VLLMEngine(str(held), None, cfg, engine_module.VLLMOptions(), 0)
