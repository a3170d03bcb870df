"""Rollout engines: turn rendered prompts into n completions each (the `RolloutEngine` seam,
base.py). Engines are plugins of the entry point group `vlrl.engines` (hf, vllm: one module
each), or `module:Class`; an engine's options are its `Options` dataclass, read from
`rollout.<options_key>`. Every engine class has the constructor `create(setup, options)`, so
the trainer and the evaluation harness build any of them the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vlrl import plugins
from vlrl.config import RolloutConfig
from vlrl.rollout.base import Completion, EngineSetup, Generation, RolloutEngine, SamplingParams


@dataclass(frozen=True)
class EngineChoice:
    """An engine class with its options read and checked: resolved before any model loads."""

    cls: type
    options: Any

    def build(self, setup: EngineSetup) -> RolloutEngine:
        return self.cls.create(setup, self.options)


def choose_engine(name: str, sections: dict[str, dict[str, Any]], key: str = "rollout.engine") -> EngineChoice:
    """The engine `name` (named by config `key`) with its options from `sections` (rollout's)."""
    cls = plugins.find_class(plugins.ENGINES, name, key)
    return EngineChoice(cls, plugins.plugin_options(cls, sections, "rollout"))


def configured_engines(rollout: RolloutConfig, eval_backend: str) -> tuple[EngineChoice, EngineChoice]:
    """The engines a config names, rollout.engine (training) and eval.backend (`vlrl eval`),
    each with its options; every option section under rollout must be one of theirs."""
    chosen = (
        choose_engine(rollout.engine, rollout.options),
        choose_engine(eval_backend, rollout.options, "eval.backend"),
    )
    plugins.check_sections(rollout.options, [choice.cls for choice in chosen], plugins.ENGINES, "rollout")
    return chosen


__all__ = [
    "Completion",
    "EngineChoice",
    "EngineSetup",
    "Generation",
    "RolloutEngine",
    "SamplingParams",
    "choose_engine",
    "configured_engines",
]
