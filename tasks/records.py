"""Record fields several tasks read the same way: the image a record names, optional text."""

from __future__ import annotations

from typing import Any

from vlrl.data.records import RecordContext


def record_image(
    record: dict[str, Any], ctx: RecordContext, keys: tuple[str, ...] = ("image",)
) -> tuple[str, int, int]:
    """(absolute path, width, height) of the one image a record names under the first of `keys`
    it has; a stated "width" / "height" must agree with the image whenever the file is there."""
    key = next((k for k in keys if k in record), keys[0])
    if key not in record and "image_url" in record:
        raise ctx.error("record has only 'image_url': download the image and give its local path in 'image'")
    image = ctx.get(record, key, (str, list), "an image path")
    if isinstance(image, list):
        if len(image) != 1 or not isinstance(image[0], str):
            raise ctx.error(f"key '{key}' must be one image path, got {len(image)} entries")
        image = image[0]
    if not image.strip():
        raise ctx.error(f"key '{key}' is an empty path")
    return ctx.image_as_stated(image, record)


def optional_text(record: dict[str, Any], ctx: RecordContext, key: str, what: str) -> str | None:
    """record[key] as non-empty text, or None when the key is absent or null."""
    if record.get(key) is None:
        return None
    value = ctx.get(record, key, str, what)
    if not value.strip():
        raise ctx.error(f"key '{key}' is empty (expected {what})")
    return value
