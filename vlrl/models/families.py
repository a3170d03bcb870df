"""Model families (the `ModelFamily` seam, base.py): found by name, by a checkpoint's model_type,
or as `module:Class`; families outside the package register under the entry point group
`vlrl.models.families`, as tasks do under `vlrl.tasks` (docs/model_families.md).

`model.family` picks one explicitly; `auto` (the default) goes by the checkpoint: the family of
a `tiny:NAME` build, else the one claiming config.json's model_type, else (no checkpoint to read,
as when scoring completions) the one whose name hints match model.path, else Qwen2.5-VL.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from vlrl import plugins
from vlrl.config import ConfigError, ModelConfig
from vlrl.models.base import ModelFamily
from vlrl.models.build import TinySpec
from vlrl.models.checkpoints import weights_root

DEFAULT_FAMILY = "qwen2_5_vl"  # the frame of scores made without a checkpoint to read


@functools.cache
def family_class(name: str) -> type[ModelFamily]:
    """A family registered under the entry point group `vlrl.models` (the built-in ones in
    pyproject.toml), or given as module:Class / path/to/file.py:Class."""
    return plugins.find_class(plugins.FAMILIES, name, "model.family", ModelFamily)


def family_names() -> list[str]:
    """Every registered family's name (the entry points of `vlrl.models`)."""
    return list(plugins.registered(plugins.FAMILIES))


def all_families() -> list[ModelFamily]:
    """One instance of every registered family, in registration order."""
    return [family_class(name)() for name in family_names()]


def family_for_model_type(model_type: str | None) -> ModelFamily | None:
    return next((f for f in all_families() if model_type in f.model_types), None)


def supported_model_types() -> list[str]:
    return [t for family in all_families() for t in family.model_types]


def checkpoint_model_type(path: str) -> str | None:
    """The model_type in a checkpoint's config.json (a LoRA checkpoint's: the model under its adapters);
    None where there is no config to read."""
    config = Path(weights_root(path)) / "config.json"
    return json.loads(config.read_text()).get("model_type") if config.is_file() else None


@functools.lru_cache(maxsize=64)
def _resolve(family: str, path: str) -> ModelFamily:
    if family != "auto":
        return family_class(family)()
    if path.startswith("tiny:"):
        from vlrl.models.families import tiny_spec

        return family_class(tiny_spec(path).arch)()
    found = family_for_model_type(checkpoint_model_type(path)) if path else None
    if found is not None:
        return found
    name = Path(path).name.lower()
    hinted = [f for f in all_families() if any(hint in name for hint in f.name_hints)]
    # the longest hint wins: "qwen3-vl-30b-a3b" (MoE) over "qwen3-vl"
    hinted.sort(key=lambda f: -max(len(h) for h in f.name_hints if h in name))
    return hinted[0] if hinted else family_class(DEFAULT_FAMILY)()


def model_family(cfg: ModelConfig) -> ModelFamily:
    """The family of the configured model (cached: render_prompt asks once per prompt)."""
    return _resolve(cfg.family, cfg.path)


def processor_resize(cfg: ModelConfig) -> tuple[int, int] | None:
    """The pixel limits of the processor's resize after EasyR1's (model.image_resize=easyr1):
    the family's checkpoints' own; None where vlrl's one smart_resize is all (the default)."""
    return model_family(cfg).processor_pixels if cfg.image_resize == "easyr1" else None


def family_of_model(model) -> ModelFamily:
    """The family of a loaded model: the one it was loaded as (load_model records it), else the
    one claiming its config's model_type."""
    core = model.get_base_model() if hasattr(model, "get_base_model") else model
    family = getattr(core, "vlrl_family", None) or family_for_model_type(core.config.model_type)
    if family is None:
        raise ConfigError(
            f"model of type {core.config.model_type!r} belongs to no model family; "
            f"supported: {', '.join(supported_model_types())} (or set model.family)"
        )
    return family


def tiny_builds() -> dict[str, TinySpec]:
    """The tiny builds `model.path=tiny:NAME` names, each family's (the `tiny_builds` its class
    declares: a family derived from another does not inherit the other's)."""
    return {
        name: TinySpec(arch=family.name, **fields)
        for family in all_families()
        for name, fields in type(family).__dict__.get("tiny_builds", {}).items()
    }


def tiny_spec(path: str) -> TinySpec:
    """The spec of 'tiny:NAME'."""
    name = path.split(":", 1)[1]
    builds = tiny_builds()
    if name not in builds:
        raise ConfigError(
            f"config: model.path {path!r}: unknown tiny model {name!r}; expected one of {', '.join(builds)}"
        )
    return builds[name]


__all__ = [
    "DEFAULT_FAMILY",
    "ModelFamily",
    "all_families",
    "checkpoint_model_type",
    "family_class",
    "family_for_model_type",
    "family_of_model",
    "model_family",
    "supported_model_types",
]
