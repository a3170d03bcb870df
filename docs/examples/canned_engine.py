"""A rollout engine written outside vlrl: every prompt gets the same canned completions, for a
dry run of a task's rewards and the update without sampling anything. The worked example of
docs/plugins.md. Choose it by path, with its options under rollout.canned:

    vlrl train ... rollout.engine=docs/examples/canned_engine.py:CannedEngine \
        'rollout.canned.answers=["<answer>[1, 2, 3, 4]</answer>", "no"]'
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import torch

from vlrl.config import ConfigError
from vlrl.models.batch import Prompt
from vlrl.models.memory import ModelShape, Workload
from vlrl.rollout import Completion, EngineSetup, Generation, SamplingParams


@dataclass
class CannedOptions:
    answers: list[str] = field(default_factory=lambda: ["<answer>none</answer>"])  # cycled over each prompt's n

    def validate(self, key: str) -> None:
        if not self.answers:
            raise ConfigError(f"config: {key}.answers needs at least one answer")


class CannedEngine:
    name = "canned"
    shares_policy = False  # it holds no policy: the trainer recomputes old log-probs itself
    gives_entropy = False
    Options = CannedOptions
    options_key = "canned"
    device = torch.device("cpu")

    def __init__(self, tokenizer, options: CannedOptions):
        self.tokenizer = tokenizer
        self.answers = [
            tokenizer(a, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for a in options.answers
        ]

    @classmethod
    def create(cls, setup: EngineSetup, options: CannedOptions) -> CannedEngine:
        return cls(setup.processor.tokenizer, options)

    @staticmethod
    def memory(shape: ModelShape, work: Workload, options: CannedOptions) -> tuple[float, float]:
        return 0.0, 0.0

    def generate(
        self, prompts: Sequence[Prompt], params: SamplingParams, generator: torch.Generator | None = None
    ) -> list[Generation]:
        out = []
        for _ in prompts:
            ids = [self.answers[g % len(self.answers)][: params.max_new_tokens] for g in range(params.n)]
            completions = [
                Completion(t, self.tokenizer.decode(t, skip_special_tokens=True), t[-1] != self.tokenizer.eos_token_id)
                for t in ids
            ]
            out.append(Generation(completions))
        return out

    def sync_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        for _ in weights:  # a collective under FSDP2: every process walks them
            pass

    def sleep(self) -> None:
        pass

    def wake(self) -> None:
        pass

    def close(self) -> None:
        pass
