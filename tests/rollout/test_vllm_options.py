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
        self.llm_engine = SimpleNamespace(model_config=config)

    def sleep(self, level: int) -> None:
        self.calls.append(f"sleep {level}")

    def wake_up(self, tags=None) -> None:
        self.calls.append("wake")


def engine(monkeypatch, checkpoint, cuda: bool, **options) -> VLLMEngine:
    monkeypatch.setattr(vllm_engine, "_import_vllm", lambda: SimpleNamespace(LLM=RecordingLLM))
    model = ModelConfig(path=str(checkpoint), dtype="float32")
    processor = load_processor(model)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    return VLLMEngine(str(checkpoint), processor, model, VLLMOptions(**options), seed=0)


def test_on_a_gpu_each_option_reaches_vllm(monkeypatch, tiny_qwen25):
    options = {"gpu_memory_utilization": 0.55, "tensor_parallel_size": 2, "max_model_len": 777, "enforce_eager": True}
    asked = engine(monkeypatch, tiny_qwen25, True, sleep=False, **options).llm.kwargs
    assert {k: asked[k] for k in options} == options and asked["enable_sleep_mode"] is False
    defaults = engine(monkeypatch, tiny_qwen25, True).llm.kwargs
    assert {k: defaults[k] for k in ("gpu_memory_utilization", "tensor_parallel_size", "enforce_eager")} == {
        "gpu_memory_utilization": 0.3, "tensor_parallel_size": 1, "enforce_eager": False}  # fmt: skip
    assert defaults["enable_sleep_mode"] is True and "max_model_len" not in defaults  # 0: the model's own


def test_on_cpu_the_kv_cache_size_reaches_vllm_and_it_runs_eager(monkeypatch, tiny_qwen25):
    asked = engine(monkeypatch, tiny_qwen25, False, kv_cache_memory_bytes=123 << 20, max_model_len=512).llm.kwargs
    assert (asked["kv_cache_memory_bytes"], asked["max_model_len"], asked["enforce_eager"]) == (123 << 20, 512, True)
    assert (
        "gpu_memory_utilization" not in asked
        and "kv_cache_memory_bytes" not in engine(monkeypatch, tiny_qwen25, False).llm.kwargs
    )


@pytest.mark.parametrize("sleep, calls", [(True, ["sleep 1", "wake"]), (False, [])])
def test_sleep_frees_the_engines_gpu_memory_during_the_update(monkeypatch, tiny_qwen25, sleep, calls):
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
