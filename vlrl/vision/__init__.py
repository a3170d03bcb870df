"""Image loading, smart_resize and coordinate frames: the geometry every task shares."""

from vlrl.vision.frames import Frame, FrameKind
from vlrl.vision.resize import smart_resize

__all__ = ["Frame", "FrameKind", "smart_resize"]
