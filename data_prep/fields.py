"""Reading the items of a public dataset file: an item that lacks a key, or holds a value of
the wrong kind, is an error naming the file, the item and the key, never a bare KeyError."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


class ItemError(ValueError):
    """One unusable item of a source file; `where` names the file and the item."""

    def __init__(self, where: str, message: str):
        super().__init__(f"{where}: {message}")
        self.where = where
        self.message = message


def item_field(item: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    """`item[key]`, which must be a `kind` (a bool is never a number)."""
    if not isinstance(item, dict):
        raise ItemError(where, f"an item must be an object, got {type(item).__name__}")
    if key not in item:
        raise ItemError(where, f"missing key '{key}'")
    value = item[key]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ItemError(where, f"key '{key}' has the wrong type {type(value).__name__}")
    return value


def finite_number(value: Any) -> bool:
    """An int or float (never a bool) that is finite: what a coordinate in a JSON file may be."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def load_json_list(path: str | Path, what: str) -> list[Any]:
    """A json file holding a list of `what` (named in the error when it holds something else)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ItemError(str(path), f"invalid JSON: {err}") from err
    if not isinstance(data, list):
        raise ItemError(str(path), f"expected a list of {what}, got {type(data).__name__}")
    return data


def load_coco_instances(path: str | Path, keys: tuple[str, ...] = ("images", "annotations")) -> dict[str, Any]:
    """A COCO instances file, which must hold a list under each of `keys`."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"instances file not found: {path}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ItemError(str(path), f"invalid JSON: {err}") from err
    for key in keys:
        if not isinstance(data, dict) or not isinstance(data.get(key), list):
            raise ItemError(str(path), f"expected a COCO instances object with a list '{key}'")
    return data
