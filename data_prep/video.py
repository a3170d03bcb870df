"""Video-R1's data format and a synthetic generator of short clips of moving shapes.

Record (as in Video-R1-260k.json): {"problem_id": 3, "problem": "...", "data_type": "video",
"problem_type": "multiple choice", "options": ["A. left", "B. right", "C. up", "D. down"],
"solution": "<answer>B</answer>", "path": "videos/x.mp4", "data_source": "synthetic"};
`data_type` "image" records point `path` at an image.

Synthetic questions, all a function of the seed:

- motion (multiple choice): one shape crosses the clip; "In which direction does the red
  circle move?". Only the order of the frames tells, so on shuffled frames (T-GRPO's
  contrast) a model can only guess.
- count (numerical): "How many shapes are in the video?", 1 to 4 still shapes; order-free.
- still images (data_type "image", numerical count), the image data Video-R1 mixes in.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from data_prep.files import write_records_atomic
from data_prep.shapes import COLORS, SHAPES, SceneObject, SceneSpec, background, draw_object, make_scene

DIRECTIONS = ("left", "right", "up", "down")
MOTION_OPTIONS = [f"{letter}. {direction}" for letter, direction in zip("ABCD", DIRECTIONS, strict=True)]


def write_clip(path: Path, frames: list[Image.Image], fps: int) -> None:
    """An MPEG-4 Part 2 file (FFmpeg's mpeg4 encoder, which every PyAV build carries)."""
    import av

    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=fps)
        stream.width, stream.height = frames[0].size
        stream.pix_fmt = "yuv420p"
        stream.bit_rate = 2_000_000  # sharp enough that colors survive
        for image in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(np.asarray(image), format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def motion_clip(rng: np.random.Generator, side: int, n_frames: int) -> tuple[list[Image.Image], str, str, str]:
    """A shape moving across the frame: (frames, direction, color, shape)."""
    direction = str(rng.choice(DIRECTIONS))
    color, shape = str(rng.choice(list(COLORS))), str(rng.choice(SHAPES))
    size = int(side * rng.uniform(0.25, 0.35))
    across = int(rng.integers(0, side - size))  # the fixed coordinate
    start, end = int(side * 0.02), side - size - int(side * 0.02)
    if direction in ("left", "up"):
        start, end = end, start
    backdrop = background(str(rng.choice(["solid", "gradient"])), side, side, rng)
    frames = []
    for t in range(n_frames):
        along = round(start + (end - start) * t / (n_frames - 1))
        x, y = (along, across) if direction in ("left", "right") else (across, along)
        image = backdrop.copy()
        draw_object(ImageDraw.Draw(image), SceneObject(shape, color, "large", [x, y, x + size, y + size]))
        frames.append(image)
    return frames, direction, color, shape


def write_synthetic_video_qa(
    path: str | Path, size: int, seed: int, side: int = 112, n_frames: int = 16, fps: int = 8
) -> Path:
    """`size` Video-R1 records: half motion questions, a third count clips, the rest still images."""
    path = Path(path)
    rng = np.random.default_rng(seed)
    (path.parent / "videos").mkdir(parents=True, exist_ok=True)
    (path.parent / "images").mkdir(parents=True, exist_ok=True)
    scenes = SceneSpec(min_objects=1, max_objects=4, min_side=side, max_side=side, sizes=("large",))
    records = []
    for index in range(size):
        kind = rng.choice(["motion", "count", "image"], p=[0.5, 0.3, 0.2])
        record = {"problem_id": index, "data_source": "synthetic"}
        if kind == "motion":
            frames, direction, color, shape = motion_clip(rng, side, n_frames)
            relative = f"videos/{path.stem}_{index:06d}.mp4"
            write_clip(path.parent / relative, frames, fps)
            letter = "ABCD"[DIRECTIONS.index(direction)]
            record |= {
                "problem": f"In which direction does the {color} {shape} move?\n",
                "data_type": "video",
                "problem_type": "multiple choice",
                "options": MOTION_OPTIONS,
                "solution": f"<answer>{letter}</answer>",
                "path": relative,
            }
        else:
            scene = make_scene(scenes, rng)
            count = len(scene.objects)
            if kind == "count":
                relative = f"videos/{path.stem}_{index:06d}.mp4"
                write_clip(path.parent / relative, [scene.image] * n_frames, fps)
                medium, data_type = "video", "video"
            else:
                relative = f"images/{path.stem}_{index:06d}.png"
                scene.image.save(path.parent / relative)
                medium, data_type = "image", "image"
            record |= {
                "problem": f"How many shapes are in the {medium}?",
                "data_type": data_type,
                "problem_type": "numerical",
                "solution": f"<answer>{count}</answer>",
                "path": relative,
            }
        records.append(record)
    write_records_atomic(path, records)
    return path


def write_synthetic_image_qa(path: str | Path, size: int, seed: int, side: int = 112) -> Path:
    """`size` records of Video-R1's format over still images (as SophiaVL-R1-130k's): shape
    counts asked as multiple choice (options "A. 1" to "D. 4") or as a number."""
    path = Path(path)
    rng = np.random.default_rng(seed)
    (path.parent / "images").mkdir(parents=True, exist_ok=True)
    scenes = SceneSpec(min_objects=1, max_objects=4, min_side=side, max_side=side, sizes=("large",))
    records = []
    for index in range(size):
        scene = make_scene(scenes, rng)
        count = len(scene.objects)
        relative = f"images/{path.stem}_{index:06d}.png"
        scene.image.save(path.parent / relative)
        record = {"problem_id": index, "problem": "How many shapes are in the image?", "data_type": "image"}
        if rng.random() < 0.5:
            options = [f"{letter}. {n}" for letter, n in zip("ABCD", range(1, 5), strict=True)]
            record |= {
                "problem_type": "multiple choice",
                "options": options,
                "solution": f"<answer>{'ABCD'[count - 1]}</answer>",
            }
        else:
            record |= {"problem_type": "numerical", "options": [], "solution": f"<answer>{count}</answer>"}
        records.append(record | {"path": relative, "data_source": "synthetic"})
    write_records_atomic(path, records)
    return path
