"""Polygon targets: a predicted box or polygon scored by area IoU against a ground-truth shape.

Ground-truth shapes come from COCO-style segmentation (a list of polygons, each a flat
``[x1, y1, x2, y2, ...]`` in original pixels; the object is their union, as pycocotools
merges the masks of an annotation's polygons). IoU here is geometric (shapely areas), not
the rasterized mask IoU of pycocotools: the two differ by the pixels along the border.

A prediction states a polygon as ``"polygon": [[x, y], [x, y], ...]`` or
``"polygon": [x1, y1, x2, y2, ...]`` inside ``<answer>``, and a box as VLM-R1 does
(``[x1, y1, x2, y2]`` integers). Neither VLM-R1 nor Perception-R1 defines a polygon
reward; this one is named ``polygon_iou``.

Invalid polygons (self-intersecting, repeated points) are repaired with GEOS's
`make_valid(method="structure")` (a bow-tie keeps both lobes), and only their areal part
counts; a shape of zero area scores 0. Repair costs grow quickly with the number of
crossings (seconds for a random 1024-gon), so a predicted invalid polygon of more than
MAX_REPAIR_VERTICES vertices is not repaired but scores 0; ground-truth polygons are
always repaired.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import shapely
from shapely.errors import GEOSException
from shapely.geometry import GeometryCollection, MultiPolygon, Polygon
from shapely.geometry import box as shapely_box
from shapely.geometry.base import BaseGeometry

from rewards.grounding import INT_BOX, MAX_BOXES
from rewards.text import answer_text, compile_pattern, findall, finditer

_NUM = r"\d+(?:\.\d+)?"
# A polygon in the answer: a list of [x, y] pairs (at least 3) or a flat list (at least 6 numbers).
ANSWER_POLYGON = compile_pattern(
    rf'"polygon"\s*:\s*(\[\s*(?:\[\s*{_NUM}\s*,\s*{_NUM}\s*\]\s*,?\s*){{3,}}\]|\[\s*{_NUM}(?:\s*,\s*{_NUM}){{5,}}\s*\])'
)
NUMBER = compile_pattern(_NUM)
MAX_VERTICES = 1024  # over all the polygons of one answer
MAX_REPAIR_VERTICES = 64

Point = tuple[float, float]
# A predicted shape in the model's frame: ("box", [x1, y1, x2, y2]) or ("polygon", [(x, y), ...]).
Shape = tuple[str, list]


def parse_answer_shapes(completion: str) -> list[Shape] | None:
    """Polygons and boxes inside <answer>, in the order they appear; None without an answer,
    with more than MAX_BOXES shapes, or with more than MAX_VERTICES polygon vertices in all."""
    content = answer_text(completion)
    if content is None:
        return None
    found: list[tuple[int, Shape]] = []
    spans: list[tuple[int, int]] = []
    vertices = 0
    for match in finditer(ANSWER_POLYGON, content):
        numbers = [float(v) for v in findall(NUMBER, match.group(1))]
        vertices += len(numbers) // 2
        if len(numbers) % 2 or vertices > MAX_VERTICES or not all(math.isfinite(v) for v in numbers):
            return None
        found.append((match.start(), ("polygon", list(zip(numbers[0::2], numbers[1::2], strict=True)))))
        spans.append(match.span())
    for match in finditer(INT_BOX, content):
        if any(start <= match.start() < end for start, end in spans):
            continue
        try:
            found.append((match.start(), ("box", [int(g) for g in match.groups()])))
        except ValueError:  # more digits than Python will convert: not a coordinate
            return None
    if len(found) > MAX_BOXES:
        return None
    return [shape for _, shape in sorted(found, key=lambda item: item[0])]


def box_geometry(box: Sequence[float]) -> BaseGeometry:
    """The box as a polygon; a box with x2 <= x1 or y2 <= y1 has no area (as in `iou_continuous`)."""
    x1, y1, x2, y2 = box
    return shapely_box(x1, y1, x2, y2) if x1 < x2 and y1 < y2 else Polygon()


def polygon_geometry(points: Sequence[Point], repair_limit: int | None = MAX_REPAIR_VERTICES) -> BaseGeometry:
    """A polygon from its vertices, repaired if invalid (up to `repair_limit` vertices; None:
    any size); only its areal part is kept. Unrepairable or degenerate: an empty polygon."""
    if len(points) < 3:
        return Polygon()
    polygon = Polygon(points)
    if polygon.is_valid:
        return polygon
    if repair_limit is not None and len(points) > repair_limit:
        return Polygon()
    try:
        return _areal(shapely.make_valid(polygon, method="structure"))
    except (GEOSException, ValueError):
        return Polygon()


def coco_geometry(segmentation: Sequence[Sequence[float]]) -> BaseGeometry:
    """The union of a COCO annotation's polygons (each a flat [x1, y1, x2, y2, ...])."""
    parts = [polygon_geometry(list(zip(flat[0::2], flat[1::2], strict=True)), None) for flat in segmentation]
    parts = [p for p in parts if not p.is_empty]
    if not parts:
        return Polygon()
    return _areal(shapely.union_all(parts))


def _areal(geometry: BaseGeometry) -> BaseGeometry:
    if isinstance(geometry, (Polygon, MultiPolygon)):
        return geometry
    if isinstance(geometry, GeometryCollection):
        polygons = [g for g in geometry.geoms if isinstance(g, (Polygon, MultiPolygon))]
        return shapely.union_all(polygons) if polygons else Polygon()
    return Polygon()


def geometry_iou(a: BaseGeometry, b: BaseGeometry) -> float:
    """Area of the intersection over area of the union; 0 when the union has no area."""
    try:
        inter = a.intersection(b).area
    except (GEOSException, ValueError):
        return 0.0
    union = a.area + b.area - inter
    return float(inter / union) if union > 0 else 0.0
