"""How a run spreads its model over processes: the `Strategy` seam (base.py). Strategies are
plugins of the entry point group `vlrl.strategies` (replicated, fsdp2: one module each), or
`module:Class`, chosen by `trainer.parallel` (`sft.parallel`); a strategy's options are its
`Options` dataclass, read from `trainer.<options_key>` (`trainer.fsdp`).

Importing the package imports neither torch nor the models: a process of several imports
`vlrl.parallel.distributed` to end (vlrl.cli.main), also after a usage error."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vlrl import plugins
from vlrl.config import TrainerConfig

if TYPE_CHECKING:
    from vlrl.parallel.base import Strategy
    from vlrl.parallel.distributed import Processes


def strategy_class(name: str, key: str) -> type:
    return plugins.find_class(plugins.STRATEGIES, name, key)


def configured_strategy(t: TrainerConfig, section: str) -> tuple[type, Any]:
    """The strategy class `{section}.parallel` names and its options from `{section}.<options_key>`,
    checked (every option section under `section` must be a strategy's): before any model loads."""
    cls = strategy_class(t.parallel, f"{section}.parallel")
    plugins.check_sections(t.options, [cls], plugins.STRATEGIES, section)
    return cls, plugins.plugin_options(cls, t.options, section)


def make_strategy(t: TrainerConfig, section: str, procs: Processes) -> Strategy:
    """The strategy `{section}.parallel` names, with its options."""
    cls, options = configured_strategy(t, section)
    return cls(procs, t, options)


__all__ = ["configured_strategy", "make_strategy", "strategy_class"]
