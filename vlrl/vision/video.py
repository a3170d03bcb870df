"""Reading videos for the model: frames sampled and sized exactly as qwen-vl-utils does.

qwen-vl-utils (vision_process.py) is the reference: `frame_count` is its smart_nframes (fps
frames per second of video, at least min_frames and at most max_frames, an even number),
the frames are the rounded `linspace(0, total - 1, n)` indices, the sampled fps is
n / total * video fps, and every frame is smart-resized with fetch_video's pixel budget,
bicubic with antialiasing. Decoding is PyAV's (FFmpeg), frame by frame, keeping only the
sampled frames in memory.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path

import torch

from vlrl.config import VideoConfig
from vlrl.vision.resize import IMAGE_FACTOR, smart_resize

FRAME_FACTOR = 2  # Qwen-VL merges two frames into one temporal patch
VIDEO_FRAME_MAX_PIXELS = 768 * IMAGE_FACTOR * IMAGE_FACTOR  # qwen-vl-utils' VIDEO_MAX_TOKEN_NUM


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
        raise ValueError(f"a video of {total_frames} frames gives {n} frames to sample; at least {FRAME_FACTOR} are needed")
    return n


def frame_indices(total_frames: int, n: int) -> list[int]:
    return torch.linspace(0, total_frames - 1, n).round().long().tolist()


def frame_size(height: int, width: int, n_frames: int, spec: VideoConfig) -> tuple[int, int]:
    """(height, width) of each frame after fetch_video's resize."""
    budget = max(min(VIDEO_FRAME_MAX_PIXELS, spec.total_pixels / n_frames * FRAME_FACTOR), int(spec.min_pixels * 1.05))
    return smart_resize(height, width, IMAGE_FACTOR, spec.min_pixels, min(spec.max_pixels, budget))


def probe(path: str | Path) -> tuple[int, float]:
    """(frames, fps) of a video file, from its header where it says them."""
    import av

    try:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            fps = float(stream.average_rate or stream.guessed_rate or 0)
            total = stream.frames or sum(1 for packet in container.demux(stream) if packet.size)
    except av.error.FFmpegError as err:
        raise ValueError(f"video {path}: {err}") from err
    except IndexError as err:  # no video stream
        raise ValueError(f"video {path} holds no video stream") from err
    if total <= 0 or fps <= 0:
        raise ValueError(f"video {path} reports {total} frames at {fps} fps")
    return total, fps


def load_video(path: str | Path, spec: VideoConfig) -> Video:
    """Sample, decode and resize a video's frames. A file that fails to decode raises ValueError
    (FFmpeg's errors included) or OSError."""
    import av

    total, fps = probe(path)
    n = frame_count(total, fps, spec)
    indices = frame_indices(total, n)
    position = {index: i for i, index in enumerate(indices)}  # distinct: n <= total
    frames: list[torch.Tensor | None] = [None] * n
    try:
        with av.open(str(path)) as container:
            for number, frame in enumerate(container.decode(video=0)):
                if number in position:
                    frames[position[number]] = torch.from_numpy(frame.to_ndarray(format="rgb24")).permute(2, 0, 1)
                if number >= indices[-1]:
                    break
    except av.error.FFmpegError as err:
        raise ValueError(f"video {path}: {err}") from err
    missing = [indices[i] for i, f in enumerate(frames) if f is None]
    if missing:
        raise ValueError(f"video {path}: frames {missing[:5]} of {total} could not be decoded")
    video = torch.stack(frames)  # type: ignore[arg-type]
    height, width = frame_size(video.shape[2], video.shape[3], n, spec)
    if (height, width) != tuple(video.shape[2:]):
        from torchvision.transforms import InterpolationMode
        from torchvision.transforms.functional import resize

        video = resize(video, [height, width], interpolation=InterpolationMode.BICUBIC, antialias=True)
    video = video.float()  # resized as uint8 (rounded), then float, as fetch_video does
    return Video(video, fps, total, indices)


def shuffle_frames(video: Video, seed: int) -> Video:
    """The same frames in an order shuffled by `seed` (T-GRPO's temporal contrast); each keeps
    its index in the file."""
    order = list(range(len(video.indices)))
    random.Random(seed).shuffle(order)
    return Video(video.frames[order], video.video_fps, video.total_frames, [video.indices[i] for i in order])
