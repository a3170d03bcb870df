"""`without_grad`: the rollout's and the no-gradient log-probs' forwards run in inference mode,
except under FSDP2, where a forward in inference mode would leave the unsharded parameters
that the training forwards reuse as inference tensors, and among several processes (an abort
at exit under torchrun, models/loading.py). `load_model`: CPU weights copied out of the
checkpoint file, except where the strategy's wrapping copies them (FSDP2's shards)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from vlrl.config import ModelConfig
from vlrl.models.build import TinySpec
from vlrl.models.families import family_names
from vlrl.models.loading import load_model, without_grad
from vlrl.models.tiny import write_tiny_checkpoint


@contextlib.contextmanager
def sharded_in_one_process(model: torch.nn.Module, store: Path) -> Iterator[torch.nn.Module]:
    """`model` sharded by FSDP2 (each decoder layer a unit, then the whole) in a one-process
    gloo group, which is left on exit."""
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    try:
        for layer in model.model.language_model.layers:
            fully_shard(layer)
        fully_shard(model)
        yield model
    finally:
        dist.destroy_process_group()


def forward_then_train(model: torch.nn.Module) -> None:
    ids = torch.arange(3, 11)[None]
    with without_grad(model):
        model(input_ids=ids)
    model(input_ids=ids).logits.sum().backward()


def test_without_fsdp2_the_no_gradient_forwards_run_in_inference_mode(tiny_qwen25):
    model = load_model(ModelConfig(path=str(tiny_qwen25), dtype="float32"))
    with without_grad(model):
        assert torch.is_inference_mode_enabled()
    forward_then_train(model)


def test_an_fsdp2_policy_trains_after_a_forward_without_gradient(tmp_path, tiny_qwen25):
    model = load_model(ModelConfig(path=str(tiny_qwen25), dtype="float32"))
    with sharded_in_one_process(model, tmp_path / "store"):
        with without_grad(model):
            assert not torch.is_inference_mode_enabled() and not torch.is_grad_enabled()
        forward_then_train(model)  # in inference mode: "Inference tensors do not track version counter"
        assert model.model.language_model.layers[0].mlp.down_proj.weight.grad is not None


def test_among_several_processes_the_no_gradient_forwards_run_without_inference_mode(tiny_qwen25, monkeypatch):
    model = load_model(ModelConfig(path=str(tiny_qwen25), dtype="float32"))
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda *a: 2)
    with without_grad(model):
        assert not torch.is_inference_mode_enabled() and not torch.is_grad_enabled()


def test_a_model_read_on_the_cpu_holds_its_own_weights_not_views_of_the_file(tmp_path):
    """transformers maps a safetensors file and hands out views of it where the dtype is the
    file's: such weights start wherever the file puts them (a one-row product then sums in
    another order than with the same weights read from another file: a resumed run drifted from
    the uninterrupted one) and follow the file if it changes. load_model copies them; the output
    layer tied to the embeddings stays tied."""
    checkpoint = tmp_path / "model"
    write_tiny_checkpoint(checkpoint, TinySpec(dtype="float32", tie_embeddings=True))
    model = load_model(ModelConfig(path=str(checkpoint), dtype="float32"))
    tensors = [*model.parameters(), *model.buffers()]
    assert [t.data_ptr() % 64 for t in tensors] == [0] * len(tensors)
    # what the alignment changes: a one-row product (a prompt's last-token logits) computes as
    # with the same weight anywhere else in memory
    row, weight = (
        torch.randn(1, model.lm_head.in_features, generator=torch.Generator().manual_seed(0)),
        model.lm_head.weight,
    )
    assert torch.equal(torch.nn.functional.linear(row, weight), torch.nn.functional.linear(row, weight.clone()))
    assert model.lm_head.weight is model.model.language_model.embed_tokens.weight
    before = [t.clone() for t in tensors]
    zero_in_place(checkpoint / "model.safetensors")
    assert all(torch.equal(a, b) for a, b in zip(tensors, before, strict=True))


def test_fsdp2_loads_without_the_copy_and_its_shards_are_copies(tmp_path):
    """Under FSDP2 (`copies_weights`) load_model leaves the views of the file, which every
    process shares, and the shards are the copies: they no longer follow the file."""
    checkpoint = tmp_path / "model"
    write_tiny_checkpoint(checkpoint, TinySpec(dtype="float32"))
    cfg = ModelConfig(path=str(checkpoint), dtype="float32")
    views, sharded = load_model(cfg, own_memory=False), load_model(cfg, own_memory=False)
    before = [t.clone() for t in views.parameters()]
    with sharded_in_one_process(sharded, tmp_path / "store"):
        zero_in_place(checkpoint / "model.safetensors")
        assert not all(torch.equal(a, b) for a, b in zip(views.parameters(), before, strict=True))  # views follow
        shards = [p.to_local() for p in sharded.parameters()]
        assert all(torch.equal(a, b) for a, b in zip(shards, before, strict=True))


def test_a_run_reads_its_models_as_its_strategy_wraps_them(tmp_path):
    """`Run.load`: copied out of the file for the replicated strategy, which computes with what
    it is given; left as views for FSDP2, whose shards are the copies (the test above)."""
    from types import SimpleNamespace

    from vlrl.parallel.fsdp2 import FSDP2
    from vlrl.parallel.replicated import Replicated
    from vlrl.trainer.run import Run

    checkpoint = tmp_path / "model"
    write_tiny_checkpoint(checkpoint, TinySpec(dtype="float32"))
    cfg = ModelConfig(path=str(checkpoint), dtype="float32")
    models = {
        strategy: Run.load(SimpleNamespace(strategy=SimpleNamespace(load_device="cpu", copies_weights=strategy.copies_weights)), cfg, None)
        for strategy in (Replicated, FSDP2)
    }  # fmt: skip
    before = {strategy: [t.clone() for t in model.parameters()] for strategy, model in models.items()}
    zero_in_place(checkpoint / "model.safetensors")
    unchanged = {
        strategy: all(torch.equal(a, b) for a, b in zip(model.parameters(), before[strategy], strict=True))
        for strategy, model in models.items()
    }
    assert unchanged == {Replicated: True, FSDP2: False}


def zero_in_place(weights: Path) -> None:
    """A safetensors file's tensors overwritten with zeros in place, as copying over it would."""
    header = 8 + int.from_bytes(weights.read_bytes()[:8], "little")
    with weights.open("r+b") as f:
        f.seek(header)
        f.write(bytes(weights.stat().st_size - header))


def test_a_saved_processor_states_the_pixel_limits_keeping_its_own_larger_minimum():
    from types import SimpleNamespace

    from vlrl.models.loading import with_pixel_limits

    processor = SimpleNamespace(image_processor=SimpleNamespace(size={"shortest_edge": 3136, "longest_edge": 12845056}))
    with_pixel_limits(processor, 50176)
    assert processor.image_processor.size == {"shortest_edge": 3136, "longest_edge": 50176}
    with_pixel_limits(processor, 50176, min_pixels=6272)
    assert processor.image_processor.size == {"shortest_edge": 6272, "longest_edge": 50176}


def test_a_processors_own_minimum_is_kept_over_a_smaller_configured_one():
    from types import SimpleNamespace

    from vlrl.models.loading import with_pixel_limits

    processor = SimpleNamespace(image_processor=SimpleNamespace(size={"shortest_edge": 3136, "longest_edge": 12845056}))
    with_pixel_limits(processor, 50176, min_pixels=1568)  # below it the processor would enlarge images itself
    assert processor.image_processor.size == {"shortest_edge": 3136, "longest_edge": 50176}


def test_an_exported_full_checkpoint_keeps_its_saved_dtype_and_states_the_runs_image_and_video_limits(tmp_path):
    """`vlrl export` of a full (not LoRA) bfloat16 checkpoint: the weights stay bfloat16, nothing is
    merged, and the processor states the trained run's image minimum and maximum and its video sampling
    (Qwen2-VL's video `size` is per frame)."""
    import json

    from safetensors.torch import load_file

    from vlrl.config import VideoConfig
    from vlrl.models.loading import export_full_model
    from vlrl.models.tiny import tiny_checkpoint

    checkpoint = tiny_checkpoint(TinySpec(arch="qwen2_vl", dtype="bfloat16"))
    video = VideoConfig(fps=1.0, min_frames=2, max_frames=8, min_pixels=3136, max_pixels=12544)
    trained = ModelConfig(min_pixels=6272, max_pixels=50176, video=video)
    out, merged = export_full_model(str(checkpoint), tmp_path / "exported", trained)
    assert (out, merged) == (tmp_path / "exported", False)
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    assert {weight.dtype for weight in load_file(out / "model.safetensors").values()} == {torch.bfloat16}
    saved = json.loads((out / "processor_config.json").read_text())
    assert saved["image_processor"]["size"] == {"shortest_edge": 6272, "longest_edge": 50176}
    videos = saved["video_processor"]
    assert {key: videos[key] for key in ("fps", "min_frames", "max_frames", "size")} == {
        "fps": 1.0,
        "min_frames": 2,
        "max_frames": 8,
        "size": {"shortest_edge": 3136, "longest_edge": 12544},
    }


def test_a_loaded_processor_states_the_configured_image_maximum_and_keeps_its_own_minimum():
    """The tiny Qwen2.5-VL build's processor allows 56*56 to 448*448 pixels (TinySpec); loaded
    for a run, its maximum is the run's model.max_pixels."""
    from vlrl.models.loading import load_processor

    processor = load_processor(ModelConfig(path="tiny:qwen2_5_vl", min_pixels=6272, max_pixels=50176))
    assert processor.image_processor.size == {"shortest_edge": 56 * 56, "longest_edge": 50176}


@pytest.mark.parametrize("family", sorted(family_names()))
def test_an_engine_is_pushed_the_weights_as_the_checkpoint_stores_them(family):
    """What an engine that loaded the checkpoint takes after an update (vLLM) is what
    save_pretrained wrote, name for name and tensor for tensor: Qwen3.5 MoE's experts fused in
    memory are each expert's projections on disk, Qwen3-VL MoE's are transposed there (the
    released layout), and Qwen2(.5)-VL's language model is `model.`."""
    from safetensors.torch import load_file

    from vlrl.models.families import tiny_spec
    from vlrl.models.loading import checkpoint_layout, full_weights
    from vlrl.models.tiny import tiny_checkpoint

    path = tiny_checkpoint(tiny_spec(f"tiny:{family}"))
    saved = {name: t for file in sorted(path.glob("*.safetensors")) for name, t in load_file(file).items()}
    model = load_model(ModelConfig(path=str(path), dtype="float32"))
    pushed = dict(checkpoint_layout(model, full_weights(model)))
    assert sorted(pushed) == sorted(saved)
    assert all(torch.equal(pushed[name], saved[name].float()) for name in saved), family
