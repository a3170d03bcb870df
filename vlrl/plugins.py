"""Finding plugins: tasks, model families, rollout engines and parallelism strategies.

Every plugin, built-in or third-party, is registered the same way: an entry point of its group
(pyproject.toml's `[project.entry-points."vlrl.engines"]`, say), so adding one is one module
and one line there. A plugin may also be given as code, `package.module:Class` or
`path/to/file.py:Class`, without registering it. The engine never imports a plugin module
by name: plugins are resolved here, at run time, from what the config names.

A plugin that takes options declares them as a dataclass, `Options`, read from the config
section under its `options_key` (`rollout.vllm`, `trainer.fsdp`): `plugin_options`.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import inspect
import sys
from importlib.metadata import EntryPoint, EntryPoints, PackageNotFoundError, distribution, entry_points
from pathlib import Path
from typing import Any

from vlrl.config import ConfigError, build

TASKS = "vlrl.tasks"
FAMILIES = "vlrl.models"
ENGINES = "vlrl.engines"
STRATEGIES = "vlrl.strategies"


@functools.cache
def installed_entry_points() -> EntryPoints:
    """Every installed distribution's entry points, read once per process: reading them scans
    every distribution's metadata (~20 ms here), and a run looks plugins up dozens of times."""
    return entry_points()


@functools.cache
def checkout_entry_points() -> EntryPoints:
    """This checkout's own entry points when it runs without being installed (on PYTHONPATH, as
    on a GPU machine without network), read from its pyproject.toml as installing writes them;
    none when vlrl is installed (its metadata holds them)."""
    try:
        distribution("vlrl")
        return EntryPoints(())
    except PackageNotFoundError:
        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        return EntryPoints(project_entry_points(pyproject)) if pyproject.is_file() else EntryPoints(())


def project_entry_points(pyproject: Path) -> list[EntryPoint]:
    """The `[project.entry-points.GROUP]` tables of a pyproject.toml."""
    try:
        import tomllib
    except ModuleNotFoundError as err:  # Python 3.10
        raise ConfigError(f"vlrl is not installed, and Python 3.10 cannot read {pyproject}: pip install -e .") from err
    groups = tomllib.loads(pyproject.read_text()).get("project", {}).get("entry-points", {})
    return [EntryPoint(name, value, group) for group, table in groups.items() for name, value in table.items()]


def registered(group: str) -> dict[str, EntryPoint]:
    """The entry points of `group` by name (this package's and every installed one's)."""
    found = [*checkout_entry_points().select(group=group), *installed_entry_points().select(group=group)]
    return {ep.name: ep for ep in found}


def import_object(spec: str) -> object:
    """'pkg.module:Class' or 'path/to/file.py:Class' -> the object."""
    target, _, attr = spec.rpartition(":")
    if target.endswith(".py") or "/" in target or "\\" in target:
        path = Path(target).resolve()
        if not path.is_file():
            raise ConfigError(f"file not found: {path} (from {spec!r})")
        module_name = f"vlrl_user_{path.stem}_{abs(hash(str(path)))}"
        if module_name not in sys.modules:
            module_spec = importlib.util.spec_from_file_location(module_name, path)
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[module_name] = module
            try:
                module_spec.loader.exec_module(module)
            except BaseException:  # a file that fails to run is not kept half-imported
                del sys.modules[module_name]
                raise
        module = sys.modules[module_name]
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as err:
            raise ConfigError(f"cannot import module {target!r}: {err}") from err
    try:
        return getattr(module, attr)
    except AttributeError as err:
        raise ConfigError(f"{target!r} has no attribute {attr!r}") from err


def call_refused(fn: object, *args: object) -> TypeError | None:
    """Why `fn` cannot be called with `args`, said before a run calls it on every step; None when
    it can, or when its signature cannot be read (a builtin: called as it is)."""
    try:
        inspect.signature(fn).bind(*args)  # type: ignore[arg-type]
    except TypeError as err:
        return err
    except ValueError:
        return None
    return None


def find(group: str, name: str, key: str) -> object:
    """The plugin `name` of `group`: a registered entry point, or `module:Class` /
    `file.py:Class`. `key` is the config key that named it, for the error."""
    if (ep := registered(group).get(name)) is not None:
        return ep.load()
    if ":" in name:
        return import_object(name)
    known = ", ".join(sorted(registered(group)))
    raise ConfigError(
        f"config: {key} {name!r} is unknown; available: {known} (or module:Class, or path/to/file.py:Class)"
    )


def find_class(group: str, name: str, key: str, base: type | None = None) -> type:
    """`find`, checked to be a class (a subclass of `base` when given)."""
    obj = find(group, name, key)
    if not isinstance(obj, type) or (base is not None and not issubclass(obj, base)):
        expected = f"a subclass of {base.__module__}.{base.__qualname__}" if base is not None else "a class"
        raise ConfigError(f"config: {key} {name!r} resolves to {obj!r}, which is not {expected}")
    return obj


def plugin_options(plugin: type, sections: dict[str, dict[str, Any]], where: str) -> Any:
    """The plugin's `Options` dataclass built from its section of the config (`where` is the
    parent key, `rollout` or `trainer`), None for a plugin without options. Unknown keys and
    wrong types fail naming the key."""
    options = getattr(plugin, "Options", None)
    if options is None:
        return None
    if not dataclasses.is_dataclass(options):
        raise ConfigError(f"{plugin.__name__}.Options must be a dataclass")
    key = plugin.options_key
    built = build(options, sections.get(key, {}), prefix=f"{where}.{key}.")
    if hasattr(built, "validate"):
        built.validate(f"{where}.{key}")
    return built


def check_sections(sections: dict[str, dict[str, Any]], chosen: list[type], group: str, where: str) -> None:
    """Every option section under `where` belongs to a plugin: one the run uses, or another
    registered one of `group` (a config may carry vLLM's options while this command samples
    with the HF engine), and is valid for it. A misspelt or stray section fails instead of
    being ignored."""
    readers = {p.options_key: p for p in chosen if getattr(p, "Options", None) is not None}
    for name in sections:
        if name in readers:
            continue
        owner = next(
            (c for c in (find_class(group, n, where) for n in registered(group)) if c.options_key == name), None
        )
        if owner is None or getattr(owner, "Options", None) is None:
            names = ", ".join(dict.fromkeys(getattr(p, "name", p.__name__) for p in chosen))
            reads = ", ".join(f"{where}.{key}" for key in readers) or "nothing"
            raise ConfigError(f"config: unknown key '{where}.{name}': the run's plugins ({names}) read {reads}")
        plugin_options(owner, sections, where)
