"""Finding a task class by name.

Every task, built-in or third-party, is an entry point of the group `vlrl.tasks`
(pyproject.toml): a Task subclass under its name (a second name for the same class is an
alias), or a collection, a mapping of names to Task subclasses (a benchmark family's published
variants). A task may also be given as `module:Class` or `path/to/file.py:Class`.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint

from vlrl import plugins
from vlrl.config import Config, ConfigError, MixtureEntry, TaskConfig
from vlrl.tasking.benchmark import Benchmark
from vlrl.tasking.lmms_eval_model import lmms_eval_model_class
from vlrl.tasking.task import Task

PACKAGE = "vlrl"  # the distribution whose entry points are the built-in tasks


@dataclass(frozen=True)
class Registered:
    name: str
    cls: type[Task]
    entry_point: EntryPoint

    @property
    def builtin(self) -> bool:
        return self.entry_point.dist is not None and self.entry_point.dist.name == PACKAGE

    @property
    def alias(self) -> bool:
        return self.name != self.cls.name


def _entries() -> Iterator[tuple[str, object, EntryPoint]]:
    """(name, loaded object or the error loading it, entry point) of every `vlrl.tasks` entry."""
    for name, ep in plugins.registered(plugins.TASKS).items():
        try:
            yield name, ep.load(), ep
        except Exception as err:  # a broken third-party plugin must not hide the others
            yield name, err, ep


def registered_tasks() -> list[Registered]:
    """Every task the entry points name, collections expanded, in registration order."""
    out = []
    for name, obj, ep in _entries():
        if isinstance(obj, Mapping):
            out += [Registered(n, cls, ep) for n, cls in obj.items()]
        elif isinstance(obj, type):
            out.append(Registered(name, obj, ep))
    return out


def builtin_training_tasks() -> list[str]:
    """The names of vlrl's own trainable tasks (no aliases, no benchmarks)."""
    return [r.name for r in registered_tasks() if r.builtin and not r.alias and not issubclass(r.cls, Benchmark)]


def benchmark_names() -> list[str]:
    """The names of vlrl's own benchmarks (evaluation-only tasks)."""
    return [r.name for r in registered_tasks() if r.builtin and not r.alias and issubclass(r.cls, Benchmark)]


def task_class(name: str) -> type[Task]:
    ep = plugins.registered(plugins.TASKS).get(name)
    obj = ep.load() if ep is not None else None
    if obj is None or isinstance(obj, Mapping):
        found = next((r.cls for r in registered_tasks() if r.name == name), None)
        if found is not None:
            obj = found
        elif ":" in name:
            obj = plugins.import_object(name)
        else:
            raise ConfigError(unknown_task(name))
    if not (isinstance(obj, type) and issubclass(obj, Task)):
        raise ConfigError(f"task {name!r} resolves to {obj!r}, which is not a vlrl.tasking.task.Task subclass")
    return obj


def unknown_task(name: str) -> str:
    """The error for a name no task has: the closest names first, then the training tasks and
    the benchmarks (evaluation only) apart."""
    tasks = registered_tasks()
    names = [r.name for r in tasks]
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(repr(n) for n in close)}? " if close else ""
    training = sorted(r.name for r in tasks if not issubclass(r.cls, Benchmark))
    benchmarks = sorted(r.name for r in tasks if issubclass(r.cls, Benchmark))
    return (
        f"config: task.name {name!r} is not a registered task; {hint}training tasks: {', '.join(training)}; "
        f"and {len(benchmarks)} evaluation-only benchmarks (`vlrl tasks list` names them); "
        "or give module:Class or path/to/file.py:Class"
    )


def make_task(cfg: TaskConfig, family: str = "") -> Task:
    """The task `cfg` names, for a model of `family` (its `family_options` under cfg.options)."""
    cls = task_class(cfg.name)
    return cls(options={**cls.family_options.get(family, {}), **cfg.options}, rewards=cfg.rewards)


# The keys a task names its settings by, as a single task's config holds them (not the same
# words inside a value: a reward file my_task.rewards.py).
TASK_KEYS = re.compile(r"(?<![\w.])task\.(options|rewards)\.")


def entry_task(entry: MixtureEntry, family: str, cfg: Config) -> Task:
    """The task of one of `cfg`'s tasks (`Config.tasks`), with its rewards and options; a bad
    reward or option is named by the key that gave it (`Config.entry_key`: mixture[i] for a
    mixture's entry)."""
    key = cfg.entry_key(entry.name)
    try:
        return make_task(TaskConfig(name=entry.name, rewards=entry.rewards, options=entry.options), family)
    except ConfigError as err:
        if key != "task":
            raise ConfigError(TASK_KEYS.sub(rf"{key}.\1.", str(err))) from err
        if "task.options." in str(err) and (hint := options_set_apart(cfg)):
            raise ConfigError(f"{err}\n{hint}") from err
        raise


def options_set_apart(cfg: Config) -> str:
    """The likely cause of options a task does not have: task.name set apart from them (a demo
    config of another task, task.name=... on the command line). "" when they were set together."""
    named = cfg.origin("task.name")
    places = sorted({cfg.where(k) for k in cfg.origins if k.startswith("task.options.") and cfg.origin(k) != named})
    if not places:
        return ""
    return (
        f"task.name {cfg.task.name} was set {cfg.where('task.name')} and its options {', '.join(places)}, perhaps "
        f"for another task: clear them with task.options='{{}}', or start from a config of {cfg.task.name}'s"
    )


def eval_task(entry: MixtureEntry, family: str, cfg: Config) -> Task:
    """`entry_task`, a benchmark run through the lmms-eval model class of `family`
    (eval.lmms_eval_model; Qwen3.5's thinking as model.chat_template_kwargs sets it)."""
    task = entry_task(entry, family, cfg)
    if not isinstance(task, Benchmark):
        return task
    thinking = cfg.model.chat_template_kwargs.get("enable_thinking")
    return task.for_model(lmms_eval_model_class(family, cfg.eval.lmms_eval_model, thinking))


def check_algo_tasks(cfg: Config, tasks: list[Task]) -> None:
    """What the algorithm asks of the run's tasks: a reward that counts, its reward components by
    name (algo.accuracy_reward, algo.difficulty.reward), and a shuffled variant for T-GRPO."""
    algo = cfg.algo
    if algo.temporal.enabled and not any(task.has_temporal_variant() for task in tasks):
        raise ConfigError(
            f"config: algo.temporal.enabled (T-GRPO) contrasts a video with its frames shuffled, and "
            f"{', '.join(task.name for task in tasks)} gives no shuffled variant (Task.temporal_variant): a video "
            "task does (video_qa)"
        )
    for task in tasks:
        if task.reward_weights and not any(task.reward_weights.values()):
            raise ConfigError(
                f"config: every reward of task {task.name!r} weighs 0 "
                f"({', '.join(f'{name}: 0' for name in task.reward_weights)}): every completion would score 0, so "
                "every advantage would be 0 and nothing learned; give one of them a weight > 0"
            )
    for key, name in (("accuracy_reward", algo.accuracy_reward), ("difficulty.reward", algo.difficulty.reward)):
        for task in tasks:
            if name and name not in task.reward_weights:
                raise ConfigError(
                    f"config: algo.{key} {name!r} is not one of task {task.name!r}'s rewards: "
                    f"{', '.join(task.reward_weights)}"
                )


def trust_outcome_warnings(cfg: Config, tasks: list[Task]) -> list[str]:
    """Trust-GRPO reads each answer's outcome as SophiaVL-R1's format-gated [0, 1] accuracy (its
    thresholds 0.1, 0.2, 0.5, 0.9): with algo.accuracy_reward empty that is the weighted total,
    which a second reward (a format term) moves, so that well-formatted wrong answers can pass
    for right ones. One line per task where it does."""
    if not cfg.algo.trust.scorer or cfg.algo.accuracy_reward:
        return []
    out = []
    for task in tasks:
        weighted = {name: weight for name, weight in task.reward_weights.items() if weight}
        if len(weighted) > 1:
            terms = ", ".join(f"{name}: {weight:g}" for name, weight in weighted.items())
            out.append(
                f"algo.trust reads each answer's outcome as a [0, 1] accuracy (SophiaVL-R1's thresholds 0.1, 0.2, "
                f"0.5, 0.9), and with algo.accuracy_reward empty that is task {task.name}'s weighted total ({terms}): "
                "name the reward that says an answer is right in algo.accuracy_reward"
            )
    return out


def list_tasks() -> list[tuple[str, str, str]]:
    """(name, origin, description) of every registered task: vlrl's own training tasks (with
    their aliases), its benchmarks, then other packages' tasks."""
    tasks = registered_tasks()
    rows = []
    for r in tasks:
        if r.alias and r.builtin:  # listed beside the task it names
            continue
        if r.builtin:
            also = [a.name for a in tasks if a.alias and a.cls is r.cls]
            origin = "benchmark (evaluation only)" if issubclass(r.cls, Benchmark) else "built-in"
            origin += f" (alias: {', '.join(also)})" if also else ""
        else:
            origin = f"entry point {r.entry_point.value}"
        rows.append((r.name, origin, r.cls.description))
    failed = [
        (name, f"entry point {ep.value}", f"(failed to load: {err})")
        for name, err, ep in _entries()
        if isinstance(err, Exception)
    ]
    order = {"built-in": 0, "benchmark": 1}
    return sorted(rows, key=lambda row: (order.get(row[1].split(" (")[0].split(" ")[0], 2), row[0])) + failed
