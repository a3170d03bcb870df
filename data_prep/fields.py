"""Reading the items of a public dataset file: an item that lacks a key, or holds a value of
the wrong kind, is an error naming the file, the item and the key, never a bare KeyError."""

from __future__ import annotations

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
