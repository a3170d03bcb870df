"""rollout.vllm's options reach vllm.LLM under vLLM's own argument names, and `sleep` decides
whether the engine frees its memory during the update and what `vlrl plan` counts for it. A
stand-in for the vllm package records what the engine asks of it (here vLLM is not installed:
the real engine's tests run in .venv-vllm, tests/vllm_engine/)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import vlrl.rollout.vllm as vllm_engine
from vlrl.config import ModelConfig
from vlrl.models.loading import load_processor
from vlrl.models.memory import Workload
from vlrl.rollout.vllm import VLLMEngine, VLLMOptions


class RecordingLLM:
    """vllm.LLM as far as the engine's constructor, sleep and wake use it."""

    def __init__(self, **kwargs):
        self.kwargs, self.calls = kwargs, []
        vocab = 151936
        config = SimpleNamespace(max_model_len=kwargs.get("max_model_len", 4096), get_vocab_size=lambda: vocab)
        self.llm_engine = SimpleNamespace(
            model_config=config, reset_encoder_cache=lambda: self.calls.append("reset encoder cache")
        )

    def sleep(self, level: int) -> None:
        self.calls.append(f"sleep {level}")

    def wake_up(self, tags=None) -> None:
        self.calls.append("wake" if tags is None else f"wake {' '.join(tags)}")

    def collective_rpc(self, method: str, kwargs) -> None:
        self.calls.append(f"{method} {[name for name, _ in kwargs['weights_iterator']]}")

    def reset_prefix_cache(self) -> None:
        self.calls.append("reset prefix cache")


def engine(monkeypatch, checkpoint, cuda: bool, dtype: str = "float32", **options) -> VLLMEngine:
    monkeypatch.setattr(vllm_engine, "_import_vllm", lambda: SimpleNamespace(LLM=RecordingLLM))
    model = ModelConfig(path=str(checkpoint), dtype=dtype)
    processor = load_processor(model)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    e = VLLMEngine(str(checkpoint), processor, model, VLLMOptions(**options), seed=0)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: e.llm.calls.append("empty cache"))
    return e


def test_on_a_gpu_each_option_reaches_vllm(monkeypatch, tiny_qwen25):
    options = {"gpu_memory_utilization": 0.55, "tensor_parallel_size": 2, "max_model_len": 777, "enforce_eager": True}
    asked = engine(monkeypatch, tiny_qwen25, True, sleep=False, **options).llm.kwargs
    assert {k: asked[k] for k in options} == options and asked["enable_sleep_mode"] is False
    defaults = engine(monkeypatch, tiny_qwen25, True).llm.kwargs
    assert {k: defaults[k] for k in ("gpu_memory_utilization", "tensor_parallel_size", "enforce_eager")} == {
        "gpu_memory_utilization": 0.3, "tensor_parallel_size": 1, "enforce_eager": False}  # fmt: skip
    assert defaults["enable_sleep_mode"] is True and defaults["max_model_len"] == -1  # vLLM's auto-fit
    assert "max_model_len" not in engine(monkeypatch, tiny_qwen25, True, max_model_len=0).llm.kwargs  # the model's


def test_on_cpu_the_kv_cache_size_reaches_vllm_and_it_runs_eager(monkeypatch, tiny_qwen25):
    asked = engine(monkeypatch, tiny_qwen25, False, kv_cache_memory_bytes=123 << 20, max_model_len=512).llm.kwargs
    assert (asked["kv_cache_memory_bytes"], asked["max_model_len"], asked["enforce_eager"]) == (123 << 20, 512, True)
    assert (
        "gpu_memory_utilization" not in asked
        and "kv_cache_memory_bytes" not in engine(monkeypatch, tiny_qwen25, False).llm.kwargs
    )


@pytest.mark.parametrize("sleep, calls", [(True, ["sleep 1", "empty cache", "wake"]), (False, [])])
def test_sleep_frees_the_engines_gpu_memory_during_the_update(monkeypatch, tiny_qwen25, sleep, calls):
    """Before vLLM maps its memory back from the driver, torch's allocator gives the driver the
    blocks the update freed and it still caches (TRL's colocated vLLM does the same)."""
    e = engine(monkeypatch, tiny_qwen25, True, sleep=sleep)
    e.sleep()
    e.wake()
    assert e.llm.calls == calls
    work = Workload(
        gpus=1, gpu_memory=1000.0, token_budget=1, image_tokens=0, rows=1, max_new_tokens=1, beta=0.0, lora=False
    )
    # what `vlrl plan` counts: its share while sampling, and during the update unless it sleeps
    assert VLLMEngine.memory(None, work, VLLMOptions(gpu_memory_utilization=0.4, sleep=sleep)) == (
        400.0,
        0.0 if sleep else 400.0,
    )


def test_an_engine_sleeps_once_however_often_asked_and_sleeps_again_after_waking(monkeypatch, tiny_qwen25):
    e = engine(monkeypatch, tiny_qwen25, True)
    for _ in range(2):
        e.sleep()
        e.sleep()
        e.wake()
        e.wake()
    assert e.llm.calls == ["sleep 1", "empty cache", "wake"] * 2


def test_a_weight_push_to_a_sleeping_engine_maps_its_weights_first_and_then_resets_both_caches(
    monkeypatch, tiny_qwen25
):
    e = engine(monkeypatch, tiny_qwen25, True)
    weight = torch.zeros(2)
    e.sync_weights(iter([("a.weight", weight), ("b.weight", weight)]))
    pushed = ["reload_weights ['a.weight', 'b.weight']", "reset encoder cache", "reset prefix cache"]
    assert e.llm.calls == pushed
    e.llm.calls.clear()
    e.sleep()
    e.sync_weights(iter([("a.weight", weight), ("b.weight", weight)]))
    e.wake()  # the KV cache too, for the next rollout
    assert e.llm.calls == ["sleep 1", "empty cache", "wake weights", *pushed, "empty cache", "wake"]


def test_under_torchrun_each_process_runs_its_engine_in_the_launchers_group_and_cpu_prefills_are_never_split(
    monkeypatch, tiny_qwen25
):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    alone = engine(monkeypatch, tiny_qwen25, False).llm.kwargs
    assert (alone["distributed_executor_backend"], alone["enable_chunked_prefill"]) == ("uni", False)
    monkeypatch.setenv("WORLD_SIZE", "2")
    launched = engine(monkeypatch, tiny_qwen25, True).llm.kwargs
    assert launched["distributed_executor_backend"] == "external_launcher" and "enable_chunked_prefill" not in launched


def test_qwen3_5_on_cpu_runs_without_vllms_prefix_cache(monkeypatch):
    from vlrl.models.families import tiny_spec
    from vlrl.models.tiny import tiny_checkpoint

    checkpoint = tiny_checkpoint(tiny_spec("tiny:qwen3_5"))
    assert engine(monkeypatch, checkpoint, False, dtype="bfloat16").llm.kwargs["enable_prefix_caching"] is False
    assert "enable_prefix_caching" not in engine(monkeypatch, checkpoint, True, dtype="bfloat16").llm.kwargs


@pytest.mark.parametrize(
    "options, message",
    [
        ({"tensor_parallel_size": 0}, "tensor_parallel_size >= 1"),
        ({"gpu_memory_utilization": 0.0}, "0 < gpu_memory_utilization <= 1"),
        ({"max_model_len": -2}, "max_model_len must be >= -1"),
        ({"kv_cache_memory_bytes": -1}, "kv_cache_memory_bytes >= 0"),
    ],
)
def test_vllm_options_out_of_range_are_refused_and_a_whole_gpu_is_not(options, message):
    from vlrl.config import ConfigError

    with pytest.raises(ConfigError, match=message):
        VLLMOptions(**options).validate("rollout.vllm")
    VLLMOptions(gpu_memory_utilization=1.0, max_model_len=-1, kv_cache_memory_bytes=0).validate("rollout.vllm")


def test_vllm_keeps_images_vlrl_sized_within_a_budget_beyond_the_engines():
    """A Qwen3-VL benchmark's images (lmms-eval's budget, up to 16,777,216 pixels) reach an engine
    started at 12,845,056: the processor's limits widen to hold them, so it resizes nothing."""
    from PIL import Image

    from vlrl.models.prompting import covering

    engine = {"shortest_edge": 3136, "longest_edge": 12845056}
    big, small = Image.new("RGB", (4096, 4096)), Image.new("RGB", (32, 64))
    assert covering(engine, [Image.new("RGB", (280, 280))]) == engine
    assert covering(engine, [big, small]) == {"shortest_edge": 2048, "longest_edge": 16777216}


def test_a_temperature_vllm_would_refuse_or_raise_is_the_calls_error_said_once():
    """vLLM 0.32 refuses a temperature above 2 per request (every prompt then 'refused') and
    raises one below 0.01 to 0.01, whose draws and log-probs are not the trainer's."""
    from vlrl.rollout.vllm import temperature_refusal

    for refused in (2.5, 0.005, 1e-9):
        assert temperature_refusal(refused).startswith(
            f"vLLM samples greedily (temperature 0) or at a temperature from 0.01 to 2, not {refused:g}"
        )
    assert [temperature_refusal(t) for t in (0.0, 0.01, 0.7, 1.0, 2.0)] == [""] * 5
