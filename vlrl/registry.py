"""Finding a task class by name: built-in, a benchmark (tasks/benchmarks), entry point (group
`vlrl.tasks`), `module:Class` or `path/to/file.py:Class`."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from importlib.metadata import entry_points
from pathlib import Path

from vlrl.config import ConfigError, TaskConfig
from vlrl.task import Task

ENTRY_POINT_GROUP = "vlrl.tasks"


def _builtin() -> dict[str, str]:
    from tasks import BUILTIN_TASKS

    return BUILTIN_TASKS


def _aliases() -> dict[str, str]:
    from tasks import TASK_ALIASES

    return TASK_ALIASES


def _benchmarks() -> dict[str, type]:
    from tasks.benchmarks import benchmark_classes

    return benchmark_classes()


def _entry_points() -> dict[str, object]:
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def import_object(spec: str) -> object:
    """'pkg.module:Class' or 'path/to/file.py:Class' -> the object."""
    target, _, attr = spec.rpartition(":")
    if target.endswith(".py") or "/" in target or "\\" in target:
        path = Path(target).resolve()
        if not path.is_file():
            raise ConfigError(f"file not found: {path} (from {spec!r})")
        module_name = f"vlrl_user_task_{abs(hash(str(path)))}"
        module_spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_name] = module
        module_spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as err:
            raise ConfigError(f"cannot import module {target!r}: {err}") from err
    try:
        return getattr(module, attr)
    except AttributeError as err:
        raise ConfigError(f"{target!r} has no attribute {attr!r}") from err


def task_class(name: str) -> type[Task]:
    builtin = _builtin()
    name = _aliases().get(name, name)
    if name in builtin:
        obj = import_object(builtin[name])
    elif name in (benchmarks := _benchmarks()):
        obj = benchmarks[name]
    elif (ep := _entry_points().get(name)) is not None:
        obj = ep.load()
    elif ":" in name:
        obj = import_object(name)
    else:
        known = sorted(set(builtin) | set(_aliases()) | set(benchmarks) | set(_entry_points()))
        raise ConfigError(
            f"config: task.name {name!r} is not a registered task; available: {', '.join(known)} "
            "(or give module:Class or path/to/file.py:Class)"
        )
    if not (isinstance(obj, type) and issubclass(obj, Task)):
        raise ConfigError(f"task {name!r} resolves to {obj!r}, which is not a vlrl.task.Task subclass")
    return obj


def make_task(cfg: TaskConfig, family: str = "") -> Task:
    """The task `cfg` names, for a model of `family` (its `family_options` under cfg.options)."""
    cls = task_class(cfg.name)
    return cls(options={**cls.family_options.get(family, {}), **cfg.options}, rewards=cfg.rewards)


def list_tasks() -> list[tuple[str, str, str]]:
    """(name, origin, description) of every registered task."""
    rows = []
    aliases = _aliases()
    for name in sorted(_builtin()):
        cls = task_class(name)
        also = [alias for alias, target in aliases.items() if target == name]
        origin = f"built-in (alias: {', '.join(also)})" if also else "built-in"
        rows.append((name, origin, cls.description))
    for name, cls in sorted(_benchmarks().items()):
        rows.append((name, "benchmark (evaluation only)", cls.description))
    for name, ep in sorted(_entry_points().items()):
        if name in _builtin():
            continue
        try:
            cls = ep.load()
            description = getattr(cls, "description", "")
        except Exception as err:  # a broken third-party plugin must not hide the others
            description = f"(failed to load: {err})"
        rows.append((name, f"entry point {ep.value}", description))
    return rows
