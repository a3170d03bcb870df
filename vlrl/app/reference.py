"""The configuration reference (docs/config.md), written from the dataclasses themselves: every
key with its type, default and the comment beside it in the source, and every registered
plugin's options. `vlrl config reference` prints it; tests/app/test_reference.py fails when the
page and the code differ."""

from __future__ import annotations

import dataclasses
import inspect
import re
import types
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from vlrl import plugins
from vlrl.config import Config

INTRO = """# Configuration reference

Generated from the code by `vlrl config reference > docs/config.md` (a test fails when this
page and the code differ). A config file is YAML with these sections; any key can be set on
the command line as `section.key=value` (README: your own data). `extends: other.yaml` in a
file merges it over another. The chosen plugins' options (rollout engine, parallelism
strategy) sit in a section under their own key, listed at the end. A key given twice in one
mapping of a file is refused (YAML would keep the last silently); `<<: *anchor` merges. `none`
(or `null`) sets a key that may be null to null, in a file as on the command line; where
`'none'`, `'off'` or `'on'` is a choice, `none`, `off` and `on` are that choice (YAML reads
them as null, false, true). Integers are read as YAML 1.2 reads them (`010` is ten, `0o10`
eight, `1:30` no number, where PyYAML's YAML 1.1 reads 8 and 90); numbers must be finite.
"""


def type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return " \\| ".join(f"`{a!r}`" for a in get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(type_name(a) for a in get_args(tp))
    if origin in (list, dict, tuple):
        return f"{origin.__name__}[{', '.join(type_name(a) for a in get_args(tp))}]"
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


def comments(cls: type) -> dict[str, str]:
    """Each field's comment in the source: on its line, else the comment lines just above it;
    a field a subclass redeclares without one keeps its base class's."""
    out: dict[str, str] = {}
    for klass in reversed([c for c in cls.__mro__ if dataclasses.is_dataclass(c)]):
        out |= {name: text for name, text in own_comments(klass).items() if text or name not in out}
    return out


def own_comments(cls: type) -> dict[str, str]:
    lines = inspect.getsource(cls).splitlines()
    out: dict[str, str] = {}
    above: list[str] = []
    for line in lines:
        stripped = line.strip()
        match = re.match(r"(\w+)\s*:", stripped)
        if stripped.startswith("#"):
            above.append(stripped.lstrip("# "))
        elif match and line.startswith("    ") and not line.startswith("     "):
            name = match.group(1)
            trailing = re.search(r"#\s?(.*)$", stripped)
            text = " ".join([*above, trailing.group(1)] if trailing else above)
            out[name] = text.replace("|", "\\|")
            above = []
        else:
            above = []
    return out


def default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return ""
    if dataclasses.is_dataclass(value):
        return ""
    return f"`{value!r}`".replace("|", "\\|")


def section(cls: type, key: str) -> list[str]:
    """The table of `cls` under `key`, then its nested sections."""
    hints, notes = get_type_hints(cls), comments(cls)
    doc = inspect.getdoc(cls)
    lines = [f"## `{key}`", ""]
    if doc and not doc.startswith(f"{cls.__name__}("):  # its own docstring, not dataclass's signature
        lines += [doc.replace("\n", " "), ""]
    lines += ["| key | type | default | |", "| --- | --- | --- | --- |"]
    nested = []
    for f in dataclasses.fields(cls):
        if f.metadata.get("plugin_sections"):
            continue
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            nested.append((tp, f"{key}.{f.name}"))
            lines.append(f"| `{f.name}` | section | | `{key}.{f.name}` below |")
            continue
        if get_origin(tp) is list and dataclasses.is_dataclass(get_args(tp)[0]):
            nested.append((get_args(tp)[0], f"{key}.{f.name}[i]"))
        lines.append(f"| `{f.name}` | {type_name(tp)} | {default(f)} | {notes.get(f.name, '')} |")
    out = [*lines, ""]
    for tp, child in nested:
        out += section(tp, child)
    return out


def reference() -> str:
    lines = [*INTRO.splitlines(), ""]
    hints = get_type_hints(Config)
    for f in dataclasses.fields(Config):
        tp = hints[f.name]
        if get_origin(tp) is list:
            lines += section(get_args(tp)[0], f"{f.name}[i]")
        else:
            lines += section(tp, f.name)
    lines += ["# Plugins' options", ""]
    for group, where in ((plugins.ENGINES, "rollout"), (plugins.STRATEGIES, "trainer")):
        for name in plugins.registered(group):
            cls = plugins.find_class(group, name, f"{where} plugin")
            if getattr(cls, "Options", None) is not None:
                lines += section(cls.Options, f"{where}.{cls.options_key}")
    return "\n".join(lines).rstrip() + "\n"
