"""How a run spreads its model over processes: the `Strategy` seam (base.py) and its
implementations, chosen by `trainer.parallel` (`sft.parallel`)."""

from __future__ import annotations

from vlrl.config import TrainerConfig
from vlrl.parallel.base import Strategy
from vlrl.trainer.distributed import Processes

STRATEGIES = ("replicated", "fsdp2")


def make_strategy(t: TrainerConfig, procs: Processes) -> Strategy:
    if t.parallel == "fsdp2":
        from vlrl.parallel.fsdp2 import FSDP2

        return FSDP2(procs, t)
    from vlrl.parallel.replicated import Replicated

    return Replicated(procs, t)


__all__ = ["STRATEGIES", "Strategy", "make_strategy"]
