"""Reward functions the config names, as EasyR1's `reward_function=file.py:fn` and TRL's
`reward_funcs` take them: a `task.rewards` key `FILE.py:FUNCTION` (relative to the working
directory, or absolute) or `package.module:FUNCTION`, valued by its weight.

The function has a task's reward component's signature, `fn(completions, samples) ->
list[float]`, and is scored as one (vlrl/tasking/scoring.py: never raising, bounded in
length), logged as `reward/FUNCTION`. It is resolved when the task is made, before any model
loads; the file that defines it is fingerprinted, so that a resumed run refuses a changed one.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

from vlrl.config import ConfigError
from vlrl.plugins import call_refused, import_object


@dataclass(frozen=True)
class ConfigReward:
    spec: str  # as the config names it: FILE.py:FUNCTION or package.module:FUNCTION
    name: str  # FUNCTION: the component's name in weights and logs (reward/FUNCTION)
    fn: Callable[..., list[float]]  # fn(completions, samples), as a task's RewardFn
    file: str  # the file that defines it ("" when there is none, a builtin)


def is_reward_spec(key: str) -> bool:
    """A `task.rewards` key naming a function rather than one of the task's components."""
    return ":" in key


def load_reward(spec: str) -> ConfigReward:
    """The function `spec` names, checked to take (completions, samples); fails naming the key."""
    key = f"config: task.rewards.{spec}"
    try:
        fn = import_object(spec)
    except ConfigError as err:
        raise ConfigError(f"{key}: {err}") from err
    except Exception as err:  # the user's file fails to run: its own error, in one line
        raise ConfigError(f"{key}: importing it raised {type(err).__name__}: {err}") from err
    if not callable(fn):
        raise ConfigError(f"{key} is a {type(fn).__name__}, not a function fn(completions, samples) -> list[float]")
    if (refused := call_refused(fn, [], [])) is not None:
        raise ConfigError(
            f"{key} cannot be called as fn(completions, samples): {refused} (vlrl passes the completions as "
            "strings and their Samples, sample.solution the ground truth: TRL's fn(completions, **kwargs) "
            "becomes fn(completions, samples))"
        ) from refused
    try:
        file = inspect.getsourcefile(fn) or ""
    except TypeError:
        file = ""
    return ConfigReward(spec, spec.rpartition(":")[2], fn, file)
