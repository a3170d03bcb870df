"""A parallelism strategy written outside vlrl: the replicated strategy with plain SGD (with
momentum) instead of AdamW, which holds no moments per weight. The worked example of
docs/plugins.md. Choose it by path, with its options under trainer.sgd:

    vlrl train ... trainer.parallel=docs/examples/sgd_strategy.py:SGDReplicated trainer.sgd.momentum=0.9
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from vlrl.config import ConfigError, TrainerConfig
from vlrl.models.memory import ModelShape, StrategyMemory, Workload
from vlrl.parallel.distributed import Processes
from vlrl.parallel.replicated import Replicated


@dataclass
class SGDOptions:
    momentum: float = 0.0

    def validate(self, key: str) -> None:
        if not 0 <= self.momentum < 1:
            raise ConfigError(f"config: {key}.momentum must be in [0, 1), got {self.momentum}")


class SGDReplicated(Replicated):
    name = "sgd_replicated"
    Options = SGDOptions
    options_key = "sgd"

    def __init__(self, procs: Processes, t: TrainerConfig, options: SGDOptions):
        super().__init__(procs, t)
        self.momentum = options.momentum

    @staticmethod
    def plan_variants() -> dict[str, SGDOptions]:
        return {"sgd": SGDOptions(), "sgd + momentum": SGDOptions(momentum=0.9)}

    @staticmethod
    def memory(shape: ModelShape, work: Workload, options: SGDOptions) -> StrategyMemory:
        """AdamW's two moments become one momentum buffer, or none."""
        held = Replicated.memory(shape, work, None)
        return dataclasses.replace(held, optimizer=held.optimizer / 2 if options.momentum else 0.0)

    def build_optimizer(self, lr: float, weight_decay: float) -> torch.optim.Optimizer:
        self.optimizer = torch.optim.SGD(self.parameters, lr=lr, momentum=self.momentum, weight_decay=weight_decay)
        return self.optimizer
