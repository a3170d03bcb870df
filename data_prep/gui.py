"""GUI data: synthetic screens, and converters from the public formats into what the GUI tasks read.

- gui_grounding reads UI-R1's grounding json: `{"img_filename", "bbox": [x1, y1, x2, y2],
  "instruction", "platform"?, "data_type"?}`. ScreenSpot's files (`screenspot_{mobile,desktop,
  web}.json`, `bbox` as [x, y, w, h], `data_type` text/icon) convert with `convert_screenspot`.
- gui_action reads AndroidControl steps as UI-R1 ships them: `{"image", "task", "gt":
  {"action_type": ..., "x", "y" | "text" | "app_name" | "direction"}}`. GUI-R1's rows
  (`image`, `instruction`, `history`, `gt_action`, `gt_bbox` relative to the image,
  `gt_input_text`) convert with `convert_gui_r1`.

Synthetic screens are drawn with PIL: buttons, text fields, labels and icon-like shapes on
mobile, desktop and web layouts, every element's box exact. Everything is a function of the seed.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import re
import shutil
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from data_prep.fields import ItemError, finite_number, item_field, load_json_list
from data_prep.files import write_records_atomic
from data_prep.shapes import COLORS

PLATFORM_SIZES: dict[str, tuple[tuple[int, int], tuple[int, int]]] = {  # (width range, height range)
    "mobile": ((180, 240), (320, 420)),
    "desktop": ((360, 440), (220, 280)),
    "web": ((360, 440), (240, 300)),
}
BUTTON_LABELS = (
    "Search", "Settings", "Send", "Cancel", "Save", "Login", "Sign up", "Next", "Share", "Delete",
    "Edit", "Profile", "Help", "Cart", "Checkout", "Play", "Upload", "Download", "Menu", "Done",
)  # fmt: skip
FIELD_LABELS = ("Search", "Email", "Password", "Name", "Message", "City", "Username", "Address")
TEXT_LABELS = ("Welcome back", "Recent items", "Notifications", "Your account", "Privacy", "Today", "Favorites")
ICON_SHAPES = ("circle", "square", "triangle", "diamond")
TYPED_TEXTS = ("hello world", "pizza near me", "weather today", "john smith", "new york", "meeting at noon",
               "blue running shoes", "flight to paris")  # fmt: skip
APPS = ("Clock", "Gmail", "Maps", "Camera", "Calendar", "Chrome", "Photos", "Weather", "Notes", "Spotify")
SYNTHETIC_ACTIONS = ("click", "input_text", "scroll", "open_app", "navigate_back")  # in both UI-R1's and GUI-R1's space
PLATFORM_NAMES = ("mobile", "desktop", "web")


@dataclass
class Element:
    kind: Literal["button", "field", "label", "icon"]
    box: list[int]  # x1, y1, x2, y2 in image pixels
    label: str = ""  # text of a button / field / label
    color: str = ""
    shape: str = ""

    @property
    def data_type(self) -> str:
        return "icon" if self.kind == "icon" else "text"

    @property
    def center(self) -> tuple[int, int]:
        return (self.box[0] + self.box[2]) // 2, (self.box[1] + self.box[3]) // 2

    def phrase(self) -> str:
        if self.kind == "button":
            return f"the {self.label} button"
        if self.kind == "field":
            return f"the {self.label} input field"
        if self.kind == "label":
            return f"the text '{self.label}'"
        return f"the {self.color} {self.shape} icon"


@dataclass
class Screen:
    image: Image.Image
    platform: str
    elements: list[Element] = field(default_factory=list)


def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=size)


def _draw_element(draw: ImageDraw.ImageDraw, element: Element, font) -> None:
    x1, y1, x2, y2 = element.box
    # PIL's shapes include their last pixel: draw to x2-1/y2-1 so the box is exact.
    if element.kind == "button":
        draw.rounded_rectangle([x1, y1, x2 - 1, y2 - 1], radius=4, fill=COLORS[element.color])
        draw.text(((x1 + x2) / 2, (y1 + y2) / 2), element.label, fill=(255, 255, 255), font=font, anchor="mm")
    elif element.kind == "field":
        draw.rectangle([x1, y1, x2 - 1, y2 - 1], fill=(255, 255, 255), outline=(150, 150, 150))
        draw.text((x1 + 5, (y1 + y2) / 2), element.label, fill=(140, 140, 140), font=font, anchor="lm")
    elif element.kind == "label":
        draw.text((x1, y1), element.label, fill=(30, 30, 30), font=font, anchor="lt")
    else:
        fill = COLORS[element.color]
        cx, cy = (x1 + x2 - 1) / 2, (y1 + y2 - 1) / 2
        if element.shape == "circle":
            draw.ellipse([x1, y1, x2 - 1, y2 - 1], fill=fill)
        elif element.shape == "square":
            draw.rectangle([x1, y1, x2 - 1, y2 - 1], fill=fill)
        elif element.shape == "triangle":
            draw.polygon([(cx, y1), (x1, y2 - 1), (x2 - 1, y2 - 1)], fill=fill)
        else:
            draw.polygon([(cx, y1), (x2 - 1, cy), (cx, y2 - 1), (x1, cy)], fill=fill)


def _chrome(draw: ImageDraw.ImageDraw, platform: str, width: int, font) -> int:
    """The platform's bars (not elements); returns where the content starts."""
    if platform == "mobile":
        draw.rectangle([0, 0, width - 1, 15], fill=(40, 40, 40))
        draw.text((6, 8), "9:41", fill=(255, 255, 255), font=font, anchor="lm")
        return 22
    draw.rectangle([0, 0, width - 1, 17], fill=(210, 210, 215))
    for i, color in enumerate(((235, 90, 80), (240, 190, 60), (90, 190, 90))):
        draw.ellipse([6 + 12 * i, 5, 14 + 12 * i, 13], fill=color)
    if platform == "desktop":
        return 24
    draw.rounded_rectangle([44, 21, width - 10, 35], radius=6, fill=(255, 255, 255), outline=(180, 180, 180))
    draw.text((52, 28), "https://example.com", fill=(110, 110, 110), font=font, anchor="lm")
    return 42


def _pick(rng: np.random.Generator, pool: tuple[str, ...], used: set[str]) -> str | None:
    free = [p for p in pool if p not in used]
    if not free:
        return None
    choice = free[int(rng.integers(len(free)))]
    used.add(choice)
    return choice


def _new_element(kind: str, x: int, y: int, width: int, draw: ImageDraw.ImageDraw, font,
                 rng: np.random.Generator, used: set[str]) -> Element | None:  # fmt: skip
    """An element of `kind` at (x, y), or None when its pool of names is used up."""
    colors = tuple(COLORS)
    if kind == "icon":
        pairs = [f"{c} {s}" for c in colors for s in ICON_SHAPES]
        pair = _pick(rng, tuple(pairs), used)
        if pair is None:
            return None
        side = int(rng.integers(18, 27))
        color, shape = pair.split(" ")
        return Element("icon", [x, y, x + side, y + side], color=color, shape=shape)
    pool = {"button": BUTTON_LABELS, "field": FIELD_LABELS, "label": TEXT_LABELS}[kind]
    label = _pick(rng, pool, used)
    if label is None:
        return None
    text_w = int(draw.textlength(label, font=font))
    if kind == "button":
        return Element("button", [x, y, x + text_w + 16, y + int(rng.integers(20, 27))], label, str(rng.choice(colors)))
    if kind == "field":
        w = max(text_w + 20, int(width * rng.uniform(0.4, 0.7)))
        return Element("field", [x, y, x + w, y + int(rng.integers(20, 25))], label)
    return Element("label", [x, y, x + text_w, y + 13], label)


def make_screen(platform: str, rng: np.random.Generator) -> Screen:
    """A screen of rows of elements; elements never overlap, every box is exact."""
    (w_lo, w_hi), (h_lo, h_hi) = PLATFORM_SIZES[platform]
    width, height = int(rng.integers(w_lo, w_hi + 1)), int(rng.integers(h_lo, h_hi + 1))
    tint = rng.integers(232, 256, size=3)
    image = Image.new("RGB", (width, height), tuple(int(c) for c in tint))
    draw = ImageDraw.Draw(image)
    font = _font(11)
    y = _chrome(draw, platform, width, font) + 4
    elements: list[Element] = []
    used: set[str] = set()
    per_row = 2 if platform == "mobile" else 3
    while True:
        x, row_bottom = 8, y
        for _ in range(int(rng.integers(1, per_row + 1))):
            kind = str(rng.choice(("button", "field", "label", "icon"), p=(0.35, 0.2, 0.15, 0.3)))
            element = _new_element(kind, x, y, width, draw, font, rng, used)
            if element is None or element.box[2] > width - 8 or element.box[3] > height - 6:
                continue
            elements.append(element)
            x = element.box[2] + int(rng.integers(8, 20))
            row_bottom = max(row_bottom, element.box[3])
        if row_bottom == y:  # nothing fitted: the screen is full
            break
        y = row_bottom + int(rng.integers(8, 16))
    for element in elements:
        _draw_element(draw, element, font)
    return Screen(image, platform, elements)


def _save(screen: Screen, path: Path, index: int) -> str:
    relative = f"images/{path.stem}_{index:06d}.png"
    screen.image.save(path.parent / relative)
    return relative


def write_synthetic_grounding(path: str | Path, size: int, seed: int) -> Path:
    """`size` UI-R1 grounding records (with ScreenSpot's platform and data_type) over synthetic
    screens of the three platforms; images under images/ beside `path`."""
    path = Path(path)
    rng = np.random.default_rng(seed)
    (path.parent / "images").mkdir(parents=True, exist_ok=True)
    records = []
    while len(records) < size:
        screen = make_screen(PLATFORM_NAMES[len(records) % len(PLATFORM_NAMES)], rng)
        if not screen.elements:
            continue
        element = screen.elements[int(rng.integers(len(screen.elements)))]
        records.append(
            {
                "img_filename": _save(screen, path, len(records)),
                "bbox": element.box,
                "instruction": f"click {element.phrase()}",
                "platform": screen.platform,
                "data_type": element.data_type,
                "width": screen.image.width,
                "height": screen.image.height,
            }
        )
    write_records_atomic(path, records)
    return path


def _step(screen: Screen, kind: str, rng: np.random.Generator) -> tuple[str, dict[str, Any]] | None:
    """(instruction, AndroidControl gt) of one step of `kind` on the screen, or None if it has no fit."""
    if kind == "click":
        targets = [e for e in screen.elements if e.kind in ("button", "icon")]
        if not targets:
            return None
        target = targets[int(rng.integers(len(targets)))]
        x, y = target.center
        return f"Click on {target.phrase()}.", {"action_type": "click", "x": x, "y": y}
    if kind == "input_text":
        fields = [e for e in screen.elements if e.kind == "field"]
        if not fields:
            return None
        text = str(rng.choice(TYPED_TEXTS))
        field_phrase = fields[int(rng.integers(len(fields)))].phrase()
        return f'Type "{text}" in {field_phrase}.', {"action_type": "input_text", "text": text}
    if kind == "scroll":
        direction = str(rng.choice(("up", "down", "left", "right")))
        return f"Scroll {direction} to see more.", {"action_type": "scroll", "direction": direction}
    if kind == "open_app":
        app = str(rng.choice(APPS))
        return f"Open the {app} app.", {"action_type": "open_app", "app_name": app}
    return "Go back to the previous screen.", {"action_type": "navigate_back"}


def write_synthetic_actions(path: str | Path, size: int, seed: int) -> Path:
    """`size` AndroidControl steps (UI-R1's format) on synthetic mobile screens, cycling through
    the action types both UI-R1 and GUI-R1 offer; images under images/ beside `path`."""
    path = Path(path)
    rng = np.random.default_rng(seed)
    (path.parent / "images").mkdir(parents=True, exist_ok=True)
    records = []
    while len(records) < size:
        screen = make_screen("mobile", rng)
        step = _step(screen, SYNTHETIC_ACTIONS[len(records) % len(SYNTHETIC_ACTIONS)], rng)
        if step is None:
            continue
        task, gt = step
        records.append(
            {
                "image": _save(screen, path, len(records)),
                "task": task,
                "gt": gt,
                "width": screen.image.width,
                "height": screen.image.height,
            }
        )
    write_records_atomic(path, records)
    return path


# -- converters --------------------------------------------------------------------------------
def screenspot_to_grounding(
    items: Iterable[dict[str, Any]], platform: str, source: str = "ScreenSpot"
) -> list[dict[str, Any]]:
    """ScreenSpot records (`bbox` [x, y, w, h] in pixels) -> UI-R1 grounding records ([x1, y1, x2, y2]).
    A benchmark's item is never dropped: one that cannot be read stops the conversion, named
    by its place in `source`."""
    out = []
    for index, item in enumerate(items):
        where = f"{source} item {index}"
        box = item_field(item, "bbox", list, where)
        if len(box) != 4 or not all(finite_number(v) for v in box):
            raise ItemError(where, f"bbox must be 4 finite numbers [x, y, w, h] in pixels, got {box!r}"[:200])
        x, y, w, h = box
        record = {
            "img_filename": item_field(item, "img_filename", str, where),
            "bbox": [x, y, x + w, y + h],
            "instruction": item_field(item, "instruction", str, where),
            "platform": platform,
        }
        for key in ("data_type", "data_source", "id"):
            if key in item:
                record[key] = item[key]
        out.append(record)
    return out


def _float(value: Any) -> float | None:
    """`value` as float() reads it (GUI-R1's numbers, or their text), None if it is no finite number."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def convert_screenspot(src: str | Path, dst: str | Path, platform: str | None = None) -> Path:
    """Convert one ScreenSpot file; the platform defaults to the one its name says (screenspot_mobile.json)."""
    src = Path(src)
    if platform is None:
        found = re.search(r"(mobile|desktop|web)", src.stem)
        if found is None:
            raise ValueError(f"{src}: cannot tell the platform from the file name; pass platform=")
        platform = found.group(1)
    items = load_json_list(src, "ScreenSpot items")
    write_records_atomic(Path(dst), screenspot_to_grounding(items, platform, str(src)))
    return Path(dst)


# GUI-R1's action names -> AndroidControl's (the names gui_action reads); GUI-R1's own extra
# actions (complete, select, enter, close/delete) have no AndroidControl step and are skipped.
GUI_R1_TO_ANDROIDCONTROL = {
    "click": "click", "long_press": "long_press", "scroll": "scroll", "open_app": "open_app",
    "type": "input_text", "press_back": "navigate_back", "press_home": "navigate_home", "wait": "wait",
}  # fmt: skip


def _image_file(image: Any, src_dir: Path, image_dir: Path, index: int) -> tuple[str, int, int]:
    """(path relative to the output, width, height) of a row's image: a path, or {"bytes": ...}."""
    if isinstance(image, dict) and image.get("bytes"):
        data = image["bytes"]
        with Image.open(io.BytesIO(data)) as im:
            suffix = (im.format or "png").lower()
            width, height = im.size
        image_dir.mkdir(parents=True, exist_ok=True)
        (image_dir / f"{index:06d}.{suffix}").write_bytes(data)
        return f"{image_dir.name}/{index:06d}.{suffix}", width, height
    relative = image.get("path") if isinstance(image, dict) else image
    if not isinstance(relative, str):
        raise ItemError(f"row {index}", "image must be a path or {'bytes': ...}")
    source = src_dir / relative
    with Image.open(source) as im:
        width, height = im.size
    # Under images/ beside the output too (a hard link where it can be, else a copy): the
    # converted data keeps its files inside its data root, which vlrl requires by default.
    image_dir.mkdir(parents=True, exist_ok=True)
    target = image_dir / f"{index:06d}{source.suffix.lower()}"
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
    return f"{image_dir.name}/{target.name}", width, height


BboxUnit = Literal["relative", "pixels"]


def gui_r1_to_action(
    rows: Iterable[dict[str, Any]], src_dir: Path, image_dir: Path, bbox_unit: BboxUnit = "relative"
) -> tuple[list[dict], list[str]]:
    """GUI-R1 rows -> gui_action records, and the reasons rows were skipped (an action with no
    AndroidControl step, a missing key, an image that cannot be read). `gt_bbox` is a point
    [x, y] or a box [x1, y1, x2, y2], relative to the image (GUI-R1's training data) or in
    pixels."""
    records, skipped = [], []
    for index, row in enumerate(rows):
        if not isinstance(row, dict):
            skipped.append(f"row {index}: a row must be an object, got {type(row).__name__}")
            continue
        kind = GUI_R1_TO_ANDROIDCONTROL.get(str(row.get("gt_action", "")).lower())
        if kind is None:
            skipped.append(f"row {index}: action {row.get('gt_action')!r} has no AndroidControl equivalent")
            continue
        try:
            records.append(_gui_r1_record(row, kind, index, src_dir, image_dir, bbox_unit))
        except ItemError as err:
            skipped.append(str(err))
    return records, skipped


def _gui_r1_record(
    row: dict[str, Any], kind: str, index: int, src_dir: Path, image_dir: Path, bbox_unit: BboxUnit
) -> dict[str, Any]:
    where = f"row {index}"
    instruction = item_field(row, "instruction", str, where)
    if "image" not in row:
        raise ItemError(where, "missing key 'image'")
    try:
        image, width, height = _image_file(row["image"], src_dir, image_dir, index)
    except OSError as err:  # not there, or not an image (PIL's UnidentifiedImageError is one)
        raise ItemError(where, f"image cannot be read: {err}") from err
    gt: dict[str, Any] = {"action_type": kind}
    text = str(row.get("gt_input_text", ""))
    if kind in ("click", "long_press"):
        given = item_field(row, "gt_bbox", (list, tuple), where)
        values = [_float(v) for v in given]
        if len(values) not in (2, 4) or None in values:
            raise ItemError(where, f"gt_bbox must be a point [x, y] or a box [x1, y1, x2, y2], got {given!r}"[:200])
        scale = (width, height) if bbox_unit == "relative" else (1, 1)
        bbox = [v * scale[i % 2] for i, v in enumerate(values)]
        if len(bbox) == 4:
            gt["bbox"] = bbox
            bbox = [(bbox[0] + bbox[2]) / 2, (bbox[1] + bbox[3]) / 2]
        gt["x"], gt["y"] = bbox[0], bbox[1]
    elif kind in ("input_text", "open_app", "scroll"):
        gt[{"input_text": "text", "open_app": "app_name", "scroll": "direction"}[kind]] = text
    history = row.get("history")  # as GUI-R1 formats it: an empty history stays '', a missing one 'None'
    record = {"image": image, "instruction": instruction, "history": "None" if history is None else history,
              "gt": gt, "width": width, "height": height}  # fmt: skip
    for key in ("id", "task_type"):  # task_type decides GUI-R1's training prompt (high: actions, else grounding)
        if row.get(key) is not None:
            record[key] = row[key]
    return record


def read_rows(path: Path) -> tuple[list[Any], list[str]]:
    """Rows of a .parquet (needs pyarrow), .jsonl or .json file, and the reasons lines of a
    .jsonl were skipped (each names the file and line)."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq  # optional: only GUI-R1's parquet files need it

        return pq.read_table(path).to_pylist(), []
    if path.suffix != ".jsonl":
        return load_json_list(path, "GUI-R1 rows"), []
    rows, skipped = [], []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                skipped.append(f"{path}:{number}: invalid JSON: {err}")
    return rows, skipped


def convert_gui_r1(src: str | Path, dst: str | Path, bbox_unit: BboxUnit = "relative") -> list[str]:
    """Convert a GUI-R1 file; its images (embedded or named) are placed under images/ beside `dst`.
    Returns the reasons rows were skipped."""
    src, dst = Path(src), Path(dst)
    rows, unread = read_rows(src)
    records, skipped = gui_r1_to_action(rows, src.parent, dst.parent / "images", bbox_unit)
    write_records_atomic(dst, records)
    return unread + skipped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m data_prep.gui", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="format", required=True)
    screenspot = sub.add_parser("screenspot", help="ScreenSpot json -> gui_grounding json")
    screenspot.add_argument("src")
    screenspot.add_argument("dst")
    screenspot.add_argument("--platform", choices=PLATFORM_NAMES)
    gui_r1 = sub.add_parser("gui_r1", help="GUI-R1 parquet/json/jsonl -> gui_action json")
    gui_r1.add_argument("src")
    gui_r1.add_argument("dst")
    gui_r1.add_argument("--bbox-unit", choices=("relative", "pixels"), default="relative")
    args = parser.parse_args(argv)
    try:
        if args.format == "screenspot":
            print(f"wrote {convert_screenspot(args.src, args.dst, args.platform)}")
            return 0
        skipped = convert_gui_r1(args.src, args.dst, args.bbox_unit)
    except (ValueError, OSError) as err:  # a file not there, not JSON, or an item that cannot be read
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {args.dst}; skipped {len(skipped)} row(s) of {args.src}")
    for reason in skipped[:10]:
        print(f"  {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
