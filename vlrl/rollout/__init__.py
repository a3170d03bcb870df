"""Rollout engines: turn rendered prompts into n completions each (the `RolloutEngine` seam).

An engine is found by name in ENGINES (imported only when chosen: vLLM is a heavy, optional
install) or given as `module:Class`. Every engine class has the constructor `create`
below, so the trainer and the evaluation harness build any of them the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from vlrl.config import Config, ConfigError
from vlrl.rollout.base import Completion, Generation, RolloutEngine, SamplingParams

if TYPE_CHECKING:
    import torch

ENGINES = {"hf": "vlrl.rollout.hf:HFEngine", "vllm": "vlrl.rollout.vllm:VLLMEngine"}


def engine_class(name: str) -> type:
    from vlrl.registry import import_object

    spec = ENGINES.get(name, name)
    if ":" not in spec:
        raise ConfigError(f"config: rollout engine {name!r} is unknown; available: {', '.join(ENGINES)} (or module:Class)")
    return import_object(spec)  # type: ignore[return-value]


def make_engine(
    name: str,
    cfg: Config,
    processor,
    checkpoint: str,
    load_policy: Callable[[], tuple[torch.nn.Module, torch.device]],
) -> RolloutEngine:
    """The engine `name`, for the policy stored at `checkpoint`. `load_policy` returns the
    policy module and the device its forwards compute on (not always where its parameters are
    stored: FSDP2 with CPU offload keeps them on the CPU); only engines that sample with it
    (`shares_policy`) call it, so evaluating with vLLM never loads the model twice."""
    return engine_class(name).create(cfg, processor, checkpoint, load_policy)


__all__ = ["ENGINES", "Completion", "Generation", "RolloutEngine", "SamplingParams", "engine_class", "make_engine"]
