"""Reading videos for the model: frames sampled and sized exactly as qwen-vl-utils does.

qwen-vl-utils (vision_process.py) is the reference: `frame_count` is its smart_nframes (fps
frames per second of video, at least min_frames and at most max_frames, an even number),
the frames are the rounded `linspace(0, total - 1, n)` indices, the sampled fps is
n / total * video fps, and every frame is smart-resized with fetch_video's pixel budget
(which scales with the model family's factor), bicubic with antialiasing.

Decoding (`model.video.backend`): PyAV (FFmpeg), frame by frame, keeping only the sampled
frames in memory; or decord, qwen-vl-utils' and Video-R1's reader, which seeks to the sampled
frames. Each backend reads the frame count and fps itself, as qwen-vl-utils does with decord;
a stream PyAV finds ending before the frames its header counts is sampled again over the
frames it has, as decord counts them (`StreamEndsEarly`), and a file decord fails on is read
with PyAV, as qwen-vl-utils falls back to torchvision's reader (`DecordFailed`).

Where the frames are in time (`model.video.time_from`): where they were sampled from, or, as
Video-R1 trains, as if consecutive frames of a 2-fps clip.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch

from vlrl.config import VideoConfig
from vlrl.vision.resize import model_size

FRAME_FACTOR = 2  # qwen-vl-utils samples an even number of frames (two make a temporal patch)
VIDEO_MAX_TOKENS = 768  # qwen-vl-utils' VIDEO_MAX_TOKEN_NUM: a frame's pixels stay below this x factor^2
# The fps transformers 4.49's Qwen2.5-VL processor assumes when a call passes none (processing_
# qwen2_5_vl.py: videos_kwargs.pop("fps", 2.0)), as every call of Video-R1's trainer does
# (src/r1-v/src/open_r1/trainer/grpo_trainer.py at 59d65c3, lines 430-438 and 459-467).
VIDEO_R1_FPS = 2.0


@dataclass
class Video:
    """Sampled frames (T, 3, H, W), float 0..255 as qwen-vl-utils leaves them after resizing, and
    what the processor needs to place them in time."""

    frames: torch.Tensor
    video_fps: float  # of the file
    total_frames: int
    indices: list[int]  # which frames of the file, in the order given to the model

    @property
    def sampled_fps(self) -> float:
        return len(self.indices) / max(self.total_frames, 1e-6) * self.video_fps


def frame_count(total_frames: int, video_fps: float, spec: VideoConfig) -> int:
    """qwen-vl-utils' smart_nframes with `fps`, `min_frames` and `max_frames`."""
    min_frames = math.ceil(spec.min_frames / FRAME_FACTOR) * FRAME_FACTOR
    max_frames = math.floor(min(spec.max_frames, total_frames) / FRAME_FACTOR) * FRAME_FACTOR
    n = total_frames / video_fps * spec.fps
    n = min(min(max(n, min_frames), max_frames), total_frames)
    n = math.floor(n / FRAME_FACTOR) * FRAME_FACTOR
    if not FRAME_FACTOR <= n <= total_frames:
        raise ValueError(
            f"a video of {total_frames} frames gives {n} frames to sample; at least {FRAME_FACTOR} are needed"
        )
    return n


def frame_indices(total_frames: int, n: int) -> list[int]:
    return torch.linspace(0, total_frames - 1, n).round().long().tolist()


def frame_size(height: int, width: int, n_frames: int, spec: VideoConfig, factor: int) -> tuple[int, int]:
    """(height, width) of each frame after fetch_video's resize (`factor`: the family's)."""
    limit = frame_pixel_limit(spec, factor, spec.total_pixels / n_frames * FRAME_FACTOR)
    return model_size(height, width, factor, spec.min_pixels, limit)


def frame_pixel_limit(spec: VideoConfig, factor: int, share: float = math.inf) -> float:
    """fetch_video's max_pixels for a frame, `share` being the frame's part of the video's total
    budget (none: the most any frame gets), as `spec.max_pixels_from` says: VIDEO_MAX_PIXELS, or a
    max_pixels in the message; floored at 1.05 x min_pixels either way."""
    floor = int(spec.min_pixels * 1.05)
    if spec.max_pixels_from == "video_r1":
        return max(min(spec.max_pixels, share), floor)
    return min(spec.max_pixels, max(min(VIDEO_MAX_TOKENS * factor * factor, share), floor))


class VideoInfo(NamedTuple):
    frames: int
    fps: float
    width: int  # of a frame, as the stream's header states it (before any rotation)
    height: int


def video_info(path: str | Path) -> VideoInfo:
    """A video file's frames, fps and frame size as PyAV reads them, from its header where it
    says them (the frames counted from its packets where it does not)."""
    import av

    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            fps = float(stream.average_rate or stream.guessed_rate or 0)
            width, height = stream.width, stream.height
            total = stream.frames or sum(1 for packet in container.demux(stream) if packet.size)
    except av.error.FFmpegError as err:
        raise ValueError(f"video {path}: {err}") from err
    except IndexError as err:  # no video stream
        raise ValueError(f"video {path} holds no video stream") from err
    if total <= 0 or fps <= 0:
        raise ValueError(f"video {path} reports {total} frames at {fps} fps")
    return VideoInfo(total, fps, width, height)


def probe(path: str | Path) -> tuple[int, float]:
    """(frames, fps) of a video file as PyAV reads them (`video_info`)."""
    info = video_info(path)
    return info.frames, info.fps


class StreamEndsEarly(ValueError):
    """A stream that ends, without an error, before frames its header counts: the count stated
    too high (a file cut at a packet's end), a start an edit list trims, an opening without a
    keyframe. `decoded` frames are all it has."""

    def __init__(self, path: str | Path, missing: list[int], decoded: int):
        super().__init__(f"video {path}: frames {missing[:5]} could not be decoded")
        self.decoded = decoded


def _pyav_frames(path: str | Path, indices: list[int]) -> list[torch.Tensor]:
    """The frames at `indices` (sorted, distinct), uint8 (3, H, W), decoded in order, each turned
    upright by its display matrix's rotation (a phone's portrait video), as decord and FFmpeg's
    autorotate turn it."""
    import av

    position = {index: i for i, index in enumerate(indices)}
    frames: list[torch.Tensor | None] = [None] * len(indices)
    decoded = 0
    try:
        with av.open(str(path)) as container:
            for number, frame in enumerate(container.decode(video=0)):
                decoded = number + 1
                if number in position:
                    pixels = np.rot90(frame.to_ndarray(format="rgb24"), round(frame.rotation / 90) % 4)
                    frames[position[number]] = torch.from_numpy(np.ascontiguousarray(pixels)).permute(2, 0, 1)
                if number >= indices[-1]:
                    break
    except av.error.FFmpegError as err:
        raise ValueError(f"video {path}: {err}") from err
    missing = [indices[i] for i, f in enumerate(frames) if f is None]
    if missing:
        raise StreamEndsEarly(path, missing, decoded)
    return frames  # type: ignore[return-value]


class DecordFailed(ValueError):
    """decord cannot read a file, or not its frame count and fps, or not the frames sampled."""


def _decord_reader(path: str | Path):
    import decord

    try:
        return decord.VideoReader(str(path), num_threads=1)
    except Exception as err:  # decord raises its own DECORDError (and RuntimeError) on unreadable files
        raise DecordFailed(f"video {path}: decord cannot read it: {err}") from err


def _decord_probe(path: str | Path) -> tuple[int, float]:
    reader = _decord_reader(path)
    total, fps = len(reader), float(reader.get_avg_fps())
    if total <= 0 or fps <= 0:
        raise DecordFailed(f"video {path} reports {total} frames at {fps} fps (decord)")
    return total, fps


def _decord_frames(path: str | Path, indices: list[int]) -> list[torch.Tensor]:
    reader = _decord_reader(path)
    try:
        batch = reader.get_batch(indices).asnumpy()
    except Exception as err:
        raise DecordFailed(f"video {path}: decord could not decode frames {indices[:5]}...: {err}") from err
    return list(torch.from_numpy(batch).permute(0, 3, 1, 2))


BACKENDS = {"pyav": (probe, _pyav_frames), "decord": (_decord_probe, _decord_frames)}


def load_video(path: str | Path, spec: VideoConfig, factor: int) -> Video:
    """Sample, decode and resize a video's frames for a model family with resize `factor`. A
    file decord fails on is read with PyAV, as qwen-vl-utils' fetch_video reads it with
    torchvision's reader (PyAV's frames, by their timestamps) where its decord reader raises. A
    file that fails to decode raises ValueError (the backend's errors included) or OSError."""
    try:
        total, fps, indices, video = _decoded(path, spec, spec.backend)
    except DecordFailed:
        total, fps, indices, video = _decoded(path, spec, "pyav")
    n = len(indices)
    height, width = frame_size(video.shape[2], video.shape[3], n, spec, factor)
    if (height, width) != tuple(video.shape[2:]):
        from torchvision.transforms import InterpolationMode
        from torchvision.transforms.functional import resize

        video = resize(video, [height, width], interpolation=InterpolationMode.BICUBIC, antialias=True)
    video = video.float()  # resized as uint8 (rounded), then float, as fetch_video does
    if spec.time_from == "video_r1":  # consecutive frames of a 2-fps clip: a temporal patch a second
        return Video(video, VIDEO_R1_FPS, n, list(range(n)))
    return Video(video, fps, total, indices)


def _decoded(path: str | Path, spec: VideoConfig, backend: str) -> tuple[int, float, list[int], torch.Tensor]:
    """The file's frame count and fps as `backend` reads them, the indices qwen-vl-utils samples
    of them, and those frames (T, 3, H, W) as it decodes them. A stream that ends before its
    header's count is sampled again over the frames it has (decoded a second time: the rare
    file), as decord and torchvision's reader (qwen-vl-utils' two) count them, rather than the
    record lost."""
    read_info, read_frames = BACKENDS[backend]
    total, fps = read_info(path)

    def sampled(frames: int) -> tuple[int, float, list[int], torch.Tensor]:
        indices = frame_indices(frames, frame_count(frames, fps, spec))  # distinct: n <= frames
        return frames, fps, indices, torch.stack(read_frames(path, indices))

    try:
        return sampled(total)
    except StreamEndsEarly as short:
        if short.decoded < FRAME_FACTOR:
            raise
        return sampled(short.decoded)


def shuffle_frames(video: Video, seed: int) -> Video:
    """The same frames in an order shuffled by `seed` (T-GRPO's temporal contrast); each keeps
    its index in the file."""
    order = list(range(len(video.indices)))
    random.Random(seed).shuffle(order)
    return Video(video.frames[order], video.video_fps, video.total_frames, [video.indices[i] for i in order])
