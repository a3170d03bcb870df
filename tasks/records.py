"""Record fields and prompt pieces several tasks share: the image a record names, optional text,
the `<image>` placeholders of a prompt, a benchmark row's one sample."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample

IMAGE = "<image>"  # the image placeholder of EasyR1-style prompts


def split_images(text: str, n_images: int) -> list[dict[str, Any]]:
    """EasyR1's _build_messages: an image slot at each `<image>`, the text pieces between them
    (empty pieces dropped); without placeholders the images go first."""
    if IMAGE not in text:
        return [*({"type": "image"} for _ in range(n_images)), {"type": "text", "text": text}]
    content: list[dict[str, Any]] = []
    for i, piece in enumerate(text.split(IMAGE)):
        if i:
            content.append({"type": "image"})
        if piece:
            content.append({"type": "text", "text": piece})
    return content


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


def vlm_r1_conversation(record: dict[str, Any], ctx: RecordContext) -> tuple[str, Any]:
    """(problem, answer) of a VLM-R1 grpo_jsonl record (om-ai-lab/VLM-R1 90052f4,
    src/open-r1-multimodal/src/open_r1/grpo_jsonl.py): the first turn's value without
    `<image>`, and the second's value (grpo_jsonl.py strips its `<answer>` tags; the task reads
    the answer as it reads a `solution`, tags or not)."""
    turns = ctx.get(record, "conversations", list, "a list of turns [{'from', 'value'}]")
    if len(turns) < 2 or not all(isinstance(t, dict) and "value" in t for t in turns[:2]):
        raise ctx.error("key 'conversations' must open with a question turn and an answer turn, each with a 'value'")
    question, answer = turns[0]["value"], turns[1]["value"]
    if not isinstance(question, str):
        raise ctx.error(f"conversations[0].value must be the question text, got {type(question).__name__}")
    return question.replace(IMAGE, ""), answer


def record_image_list(record: dict[str, Any], ctx: RecordContext, key: str, what: str) -> list[tuple[str, int, int]]:
    """`record_image` of each image a record lists under `key` (a question's images, a video's
    frames), in order; an empty or missing list is refused, saying `what` it should hold."""
    paths = record.get(key) or []
    if not paths:
        raise ctx.error(f"'{key}' is empty: it holds {what}")
    return [record_image({"image": path}, ctx) for path in paths]


def row_sample(
    task: str, ctx: RecordContext, problem: str, solution: Any, images: Sequence[tuple[str, int, int]]
) -> list[Sample]:
    """A benchmark row as its one sample: `problem` and `solution` over the row's images
    (`record_image`'s), framed by the first; a row without one is text only (no frame)."""
    frame = ctx.frame_spec.frame(*images[0][1:]) if images else None
    return [Sample(id=str(ctx.index), task=task, problem=problem, solution=solution,
                   images=[path for path, _, _ in images], frame=frame, source=ctx.source)]  # fmt: skip


def optional_text(record: dict[str, Any], ctx: RecordContext, key: str, what: str) -> str | None:
    """record[key] as non-empty text, or None when the key is absent or null."""
    if record.get(key) is None:
        return None
    value = ctx.get(record, key, str, what)
    if not value.strip():
        raise ctx.error(f"key '{key}' is empty (expected {what})")
    return value
