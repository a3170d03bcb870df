"""Synthetic scenes of colored shapes on varied backgrounds, with exact boxes.

Grounding, detection and counting data for tests and demos come from here, so that every
task trains and evaluates offline. Everything is a function of the seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from PIL import Image, ImageDraw

COLORS: dict[str, tuple[int, int, int]] = {
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 80, 220),
    "yellow": (235, 200, 30),
    "purple": (140, 60, 180),
    "orange": (240, 130, 20),
}
SHAPES: tuple[str, ...] = ("circle", "square", "triangle")
SIZES: dict[str, tuple[float, float]] = {"small": (0.12, 0.18), "large": (0.26, 0.36)}  # of the short side
BACKGROUNDS: tuple[str, ...] = ("solid", "gradient", "noise")
MIN_SIDE = 8  # the least object side (make_scene), which an image side must hold


@dataclass
class SceneSpec:
    """What scenes look like; the knobs that set a synthetic task's difficulty."""

    min_objects: int = 1
    max_objects: int = 4
    min_side: int = 160
    max_side: int = 320
    colors: tuple[str, ...] = tuple(COLORS)
    shapes: tuple[str, ...] = SHAPES
    sizes: tuple[str, ...] = tuple(SIZES)
    backgrounds: tuple[str, ...] = BACKGROUNDS

    def __post_init__(self) -> None:
        if not 0 <= self.min_objects <= self.max_objects:
            raise ValueError(f"needs 0 <= min_objects <= max_objects, got {self.min_objects} and {self.max_objects}")
        if not MIN_SIDE <= self.min_side <= self.max_side:
            raise ValueError(f"needs {MIN_SIDE} <= min_side <= max_side, got {self.min_side} and {self.max_side}")
        for name, known in (("colors", COLORS), ("shapes", SHAPES), ("sizes", SIZES), ("backgrounds", BACKGROUNDS)):
            chosen = getattr(self, name)
            if not chosen or not set(chosen) <= set(known):
                raise ValueError(f"{name} must be some of {', '.join(known)}, got {list(chosen)}")


@dataclass
class SceneObject:
    shape: str
    color: str
    size: str
    box: list[int]  # x1, y1, x2, y2 in image pixels

    @property
    def center(self) -> tuple[float, float]:
        return (self.box[0] + self.box[2]) / 2, (self.box[1] + self.box[3]) / 2

    def polygon(self, circle_vertices: int = 64) -> list[float]:
        """The shape's outline as one COCO polygon (flat [x1, y1, x2, y2, ...]), in the same
        continuous convention as `box` (a square is its box; a circle is a regular
        `circle_vertices`-gon inscribed in its box)."""
        x1, y1, x2, y2 = self.box
        if self.shape == "square":
            points = [(x1, y1), (x2, y1), (x2, y2), (x1, y2)]
        elif self.shape == "triangle":
            points = [((x1 + x2) / 2, y1), (x2, y2), (x1, y2)]
        elif self.shape == "circle":
            (cx, cy), r = self.center, (x2 - x1) / 2
            steps = [2 * math.pi * k / circle_vertices for k in range(circle_vertices)]
            points = [(round(cx + r * math.cos(t), 2), round(cy + r * math.sin(t), 2)) for t in steps]
        else:
            raise ValueError(f"unknown shape {self.shape!r}")
        return [float(v) for point in points for v in point]


@dataclass
class Scene:
    image: Image.Image
    objects: list[SceneObject] = field(default_factory=list)


def background(kind: str, width: int, height: int, rng: np.random.Generator) -> Image.Image:
    """A light background ("solid", "gradient" or "noise"): dark marks on it stay legible."""
    base = rng.integers(150, 256, size=3)
    if kind == "solid":
        return Image.new("RGB", (width, height), tuple(int(c) for c in base))
    if kind == "gradient":
        other = rng.integers(120, 256, size=3)
        t = np.linspace(0.0, 1.0, height)[:, None, None]
        rows = (1 - t) * base[None, None, :] + t * other[None, None, :]
        pixels = np.broadcast_to(rows, (height, width, 3))
        return Image.fromarray(pixels.astype(np.uint8), "RGB")
    noise = rng.normal(0, 18, size=(height, width, 3))
    pixels = np.clip(base[None, None, :] + noise, 0, 255)
    return Image.fromarray(pixels.astype(np.uint8), "RGB")


def draw_object(draw: ImageDraw.ImageDraw, obj: SceneObject) -> None:
    x1, y1, x2, y2 = obj.box
    fill = COLORS[obj.color]
    # PIL's shapes include their last pixel: draw to x2-1/y2-1 so the box is exact.
    if obj.shape == "circle":
        draw.ellipse([x1, y1, x2 - 1, y2 - 1], fill=fill)
    elif obj.shape == "square":
        draw.rectangle([x1, y1, x2 - 1, y2 - 1], fill=fill)
    elif obj.shape == "triangle":
        draw.polygon([((x1 + x2 - 1) / 2, y1), (x1, y2 - 1), (x2 - 1, y2 - 1)], fill=fill)
    else:
        raise ValueError(f"unknown shape {obj.shape!r}")


def _overlaps(box: list[int], others: list[SceneObject], margin: int) -> bool:
    return any(
        box[0] < o.box[2] + margin
        and o.box[0] < box[2] + margin
        and box[1] < o.box[3] + margin
        and o.box[1] < box[3] + margin
        for o in others
    )


def make_scene(spec: SceneSpec, rng: np.random.Generator, n_objects: int | None = None) -> Scene:
    """A random scene; objects never overlap, so every box is exactly its object's extent."""
    width = int(rng.integers(spec.min_side, spec.max_side + 1))
    height = int(rng.integers(spec.min_side, spec.max_side + 1))
    image = background(str(rng.choice(spec.backgrounds)), width, height, rng)
    draw = ImageDraw.Draw(image)
    wanted = n_objects if n_objects is not None else int(rng.integers(spec.min_objects, spec.max_objects + 1))
    objects: list[SceneObject] = []
    short = min(width, height)
    for _ in range(200 * max(wanted, 1)):
        if len(objects) == wanted:
            break
        size = str(rng.choice(spec.sizes))
        lo, hi = SIZES[size]
        side = max(8, int(short * rng.uniform(lo, hi)))
        x1 = int(rng.integers(0, width - side + 1))
        y1 = int(rng.integers(0, height - side + 1))
        box = [x1, y1, x1 + side, y1 + side]
        if _overlaps(box, objects, margin=4):
            continue
        objects.append(SceneObject(str(rng.choice(spec.shapes)), str(rng.choice(spec.colors)), size, box))
    for obj in objects:
        draw_object(draw, obj)
    return Scene(image, objects)


def spatial_relation(target: SceneObject, anchor: SceneObject) -> str:
    """Where `target` is relative to `anchor`, along the axis their centers differ most on."""
    (tx, ty), (ax, ay) = target.center, anchor.center
    if abs(tx - ax) >= abs(ty - ay):
        return "left of" if tx < ax else "right of"
    return "above" if ty < ay else "below"


ExpressionStyle = Literal["refcoco", "refcoco+", "refcocog"]


def _unique_by(scene: Scene, index: int, attributes: tuple[str, ...]) -> bool:
    target = scene.objects[index]
    words = tuple(getattr(target, a) for a in attributes)
    return all(tuple(getattr(o, a) for a in attributes) != words for i, o in enumerate(scene.objects) if i != index)


def _anchor_relation(scene: Scene, index: int) -> tuple[SceneObject, str] | None:
    """An anchor nameable by color and shape alone, and the target's relation to it that no
    twin of the target (same size, color and shape) shares."""
    target = scene.objects[index]
    others = [o for i, o in enumerate(scene.objects) if i != index]
    twins = [o for o in others if (o.size, o.color, o.shape) == (target.size, target.color, target.shape)]
    for anchor in others:
        if sum(1 for o in scene.objects if (o.color, o.shape) == (anchor.color, anchor.shape)) != 1:
            continue
        relation = spatial_relation(target, anchor)
        if all(spatial_relation(twin, anchor) != relation for twin in twins):
            return anchor, relation
    return None


def referring_expression(scene: Scene, index: int, style: ExpressionStyle = "refcoco") -> str | None:
    """A phrase that singles out object `index`, or None when this grammar cannot.

    - ``refcoco``: the shortest of "the red circle", "the small red circle", "the small red
      circle left of the blue square".
    - ``refcoco+``: appearance only, never a location word (RefCOCO+ forbids them): "the red
      circle", "the small red circle"; None when appearance does not single the object out.
    - ``refcocog``: longer, sentence-like descriptions (RefCOCOg's are about twice as long):
      "a small red circle which is left of the large blue square", "the large green
      triangle, the only triangle in the picture".
    """
    target = scene.objects[index]
    if style == "refcocog":
        return _long_expression(scene, index)
    for attributes in (("color", "shape"), ("size", "color", "shape")):
        if _unique_by(scene, index, attributes):
            return "the " + " ".join(getattr(target, a) for a in attributes)
    if style == "refcoco+":
        return None
    found = _anchor_relation(scene, index)
    if found is None:
        return None
    anchor, relation = found
    return f"the {target.size} {target.color} {target.shape} {relation} the {anchor.color} {anchor.shape}"


def _long_expression(scene: Scene, index: int) -> str | None:
    target = scene.objects[index]
    name = f"{target.size} {target.color} {target.shape}"
    found = _anchor_relation(scene, index)
    if found is not None:
        anchor, relation = found
        return f"a {name} which is {relation} the {anchor.size} {anchor.color} {anchor.shape}"
    if _unique_by(scene, index, ("shape",)):
        return f"the {name}, the only {target.shape} in the picture"
    if _unique_by(scene, index, ("size", "color", "shape")):
        return f"the {name} that you can see in the picture"
    return None


def group_expression(scene: Scene, style: ExpressionStyle, rng: np.random.Generator) -> tuple[str, list[int]] | None:
    """A phrase naming every object that shares an attribute (two at least), e.g. "all the
    red shapes", "all the circles", "both green triangles", and those objects' indices;
    None when no two objects share a color or a shape. No style uses location words here."""
    groups: list[tuple[str, list[int]]] = []
    for attributes in (("color",), ("shape",), ("color", "shape")):
        keys: dict[tuple[str, ...], list[int]] = {}
        for i, obj in enumerate(scene.objects):
            keys.setdefault(tuple(getattr(obj, a) for a in attributes), []).append(i)
        for key, members in keys.items():
            if len(members) < 2:
                continue
            color = key[0] if "color" in attributes else ""
            shape = key[-1] if "shape" in attributes else "shape"
            noun = (f"{color} {shape}s" if color else f"{shape}s").strip()
            groups.append((noun, members))
    if not groups:
        return None
    noun, members = groups[int(rng.integers(len(groups)))]
    if style == "refcocog":
        phrase = f"every one of the {noun} that can be seen in the picture"
    elif len(members) == 2:
        phrase = f"both {noun}"
    else:
        phrase = f"all the {noun}"
    return phrase, members
