"""Video: frames sampled and sized as qwen-vl-utils does, Video-R1's rewards and task, T-GRPO."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from data_prep.video import write_clip, write_synthetic_video_qa
from rewards.ocr import video_r1_answer
from rewards.video import accuracy
from tasks.video_qa import VideoQA
from vlrl.config import VideoConfig
from vlrl.data.records import FrameSpec, MediaRules
from vlrl.eval.layout import read_metrics
from vlrl.vision.video import Video, frame_count, load_video, shuffle_frames

ROOT = Path(__file__).resolve().parents[2]


def clip(path: Path, n_frames: int, width: int, height: int, fps: int) -> Path:
    """A clip whose frames differ: frame t has a bar at column t and a brightness of its own."""
    frames = []
    for t in range(n_frames):
        pixels = np.full((height, width, 3), 40 + (t * 7) % 180, np.uint8)
        pixels[:, (t * 5) % width : (t * 5) % width + 4] = (250, 30, 30)
        frames.append(Image.fromarray(pixels))
    write_clip(path, frames, fps)
    return path


def gray_clip(path: Path, codec: str, n_frames: int, rate: int, step: int, options: dict | None = None) -> Path:
    """A 64 x 48 clip in `codec` whose frame t is the gray step * t (container `options`)."""
    import av

    with av.open(str(path), "w", options=options or {}) as container:
        stream = container.add_stream(codec, rate=rate)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        for t in range(n_frames):
            frame = av.VideoFrame.from_ndarray(np.full((48, 64, 3), step * t, np.uint8), format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("clips")
    return [
        clip(root / "a.mp4", 32, 112, 112, 8),
        clip(root / "b.mp4", 45, 160, 96, 15),
        clip(root / "c.mp4", 7, 64, 48, 4),
        clip(
            root / "d.mp4", 8, 640, 480, 4
        ),  # 4:3, as VSI-Bench's: 280 x 364 under Video-R1's rule, 252 x 364 at most 128 tokens
    ]


def qwen_vl_utils_video(
    path: Path, spec: VideoConfig, monkeypatch, backend: str = "torchvision"
) -> tuple[torch.Tensor, float]:
    """qwen-vl-utils' fetch_video on the file with its `backend` reader, its torchvision reader
    (also where its decord reader fails) fed by a plain PyAV decode of every frame (torchvision
    no longer reads video)."""
    import av
    import qwen_vl_utils.vision_process as vp

    def read_video(path, start_pts=0.0, end_pts=None, pts_unit="sec", output_format="TCHW"):
        with av.open(path) as container:
            fps = float(container.streams.video[0].average_rate)
            frames = [
                torch.from_numpy(f.to_ndarray(format="rgb24")).permute(2, 0, 1) for f in container.decode(video=0)
            ]
        return torch.stack(frames), None, {"video_fps": fps}

    monkeypatch.setattr(vp.io, "read_video", read_video, raising=False)
    monkeypatch.setattr(vp, "get_video_reader_backend", lambda: backend)
    return vp.fetch_video(qwen_vl_utils_element(path, spec, monkeypatch), return_video_sample_fps=True)


def qwen_vl_utils_element(path: Path, spec: VideoConfig, monkeypatch) -> dict:
    """The message's video element that `spec` stands for. max_pixels_from=video_r1: Video-R1's
    vendored qwen-vl-utils, VIDEO_MAX_PIXELS = max_pixels and no max_pixels in the message (its
    src/eval_bench.py and trainer name none), as 0.0.14 computes it with VIDEO_MAX_TOKEN_NUM set so."""
    import qwen_vl_utils.vision_process as vp

    element = {"video": str(path), "fps": spec.fps, "min_frames": spec.min_frames, "max_frames": spec.max_frames}
    element |= {"min_pixels": spec.min_pixels, "total_pixels": spec.total_pixels}
    if spec.max_pixels_from == "message":
        return element | {"max_pixels": spec.max_pixels}
    assert spec.max_pixels % (28 * 28) == 0  # a whole number of tokens: VIDEO_MAX_TOKEN_NUM
    monkeypatch.setattr(vp, "VIDEO_MAX_TOKEN_NUM", spec.max_pixels // (28 * 28))
    return element


SPECS = [
    VideoConfig(),  # Video-R1's settings: 128 x 28 x 28 pixels, the 1.05 x min_pixels floor over it
    VideoConfig(max_pixels_from="message"),  # frames at most 128 x 28 x 28 pixels
    VideoConfig(min_pixels=56 * 56, max_pixels=112 * 112, max_pixels_from="message"),
    VideoConfig(min_pixels=56 * 56, max_pixels=112 * 112),
    VideoConfig(fps=1.0, min_frames=2, max_frames=8, min_pixels=4 * 28 * 28, max_pixels=80 * 90, max_pixels_from="message"),
    VideoConfig(fps=4.0, max_frames=64, min_pixels=28 * 28, max_pixels=768 * 28 * 28, total_pixels=20 * 28 * 28 * 10),
    VideoConfig(max_pixels=256 * 28 * 28, max_frames=32),  # Video-R1's README evaluation setting
]  # fmt: skip


@pytest.mark.parametrize("spec", SPECS, ids=range(len(SPECS)))
def test_frames_equal_qwen_vl_utils_fetch_video(clips, spec, monkeypatch):
    for path in clips:
        expected, expected_fps = qwen_vl_utils_video(path, spec, monkeypatch)
        video = load_video(path, spec, 28)
        assert video.frames.shape == expected.shape
        assert torch.equal(video.frames, expected)  # same frames, same bicubic resize, same rounding
        assert video.sampled_fps == pytest.approx(expected_fps)


@pytest.mark.parametrize("spec", SPECS[:2], ids=range(2))
def test_decord_samples_the_frames_pyav_does_and_that_qwen_vl_utils_reads_with_it(clips, spec, monkeypatch):
    """model.video.backend=decord: qwen-vl-utils' decord reader (what Video-R1 trains with)
    gives these frames, and they are PyAV's to the pixel on the test clips."""
    import dataclasses

    import qwen_vl_utils.vision_process as vp

    monkeypatch.setattr(vp, "get_video_reader_backend", lambda: "decord")
    decord = dataclasses.replace(spec, backend="decord")
    for path in clips:
        video = load_video(path, decord, 28)
        element = qwen_vl_utils_element(path, spec, monkeypatch)
        expected, expected_fps = vp.fetch_video(element, return_video_sample_fps=True)
        assert torch.equal(video.frames, expected) and video.sampled_fps == pytest.approx(expected_fps)
        pyav = load_video(path, spec, 28)
        assert (pyav.indices, pyav.total_frames, pyav.video_fps) == (video.indices, video.total_frames, video.video_fps)
        assert torch.equal(pyav.frames, video.frames)


def rotated(path: Path, a: int, b: int, c: int, d: int) -> Path:
    """`path` with its track header's display matrix set to [a b; c d] (16.16 fixed point), as a
    phone writes a portrait video's rotation; the pixels stay as they were encoded."""
    data = bytearray(path.read_bytes())
    at = data.index(b"tkhd") + 4
    assert data[at] == 0  # version 0: the matrix 40 bytes past the version and flags
    matrix = [a << 16, b << 16, 0, c << 16, d << 16, 0, 0, 0, 1 << 30]
    data[at + 40 : at + 76] = b"".join(v.to_bytes(4, "big", signed=True) for v in matrix)
    out = path.with_name(f"{path.stem}_{a}{b}{c}{d}.mp4")
    out.write_bytes(bytes(data))
    return out


@pytest.mark.parametrize("matrix", [(0, 1, -1, 0), (-1, 0, 0, -1), (0, -1, 1, 0)])
def test_a_rotated_video_is_read_upright_as_decord_reads_it(clips, matrix):
    """Video-R1 reads with decord, which turns a frame by its display matrix's rotation; PyAV
    hands the frame as encoded and vlrl turns it the same way."""
    import dataclasses

    spec = VideoConfig()
    path = rotated(clips[1], *matrix)  # 160 x 96: a quarter turn swaps the sides
    pyav = load_video(path, spec, 28)
    decord = load_video(path, dataclasses.replace(spec, backend="decord"), 28)
    assert torch.equal(pyav.frames, decord.frames) and pyav.indices == decord.indices
    upright = load_video(clips[1], spec, 28)
    quarter = matrix[0] == 0
    assert (pyav.frames.shape[2] > pyav.frames.shape[3]) == quarter  # portrait after a quarter turn
    if not quarter:  # a half turn: the frames upside down, sized as before
        torch.testing.assert_close(pyav.frames, upright.frames.flip(2, 3), atol=1.0, rtol=0)


def test_a_file_decord_cannot_read_is_read_with_pyav_as_qwen_vl_utils_falls_back(tmp_path, video_data, monkeypatch):
    """decord 0.6.0 has no AV1 decoder; PyAV reads AV1. qwen-vl-utils' fetch_video reads a file
    its decord reader fails on with torchvision's reader: the decord backend reads it with PyAV,
    and the record is usable under both backends."""
    import av
    import decord

    from vlrl.config import load_config
    from vlrl.tasking.validate import validate_split

    if "libsvtav1" not in av.codecs_available:
        pytest.skip("this PyAV build has no AV1 encoder to write the test clip with")
    (tmp_path / "videos").mkdir()
    av1 = gray_clip(tmp_path / "videos" / "av1.mp4", "libsvtav1", 8, rate=8, step=30)
    with pytest.raises(decord.DECORDError):  # what the decord backend meets
        decord.VideoReader(str(av1))
    spec = VideoConfig(max_frames=4)
    expected, expected_fps = qwen_vl_utils_video(av1, spec, monkeypatch, backend="decord")
    video = load_video(av1, VideoConfig(max_frames=4, backend="decord"), 28)
    assert torch.equal(video.frames, expected) and video.sampled_fps == pytest.approx(expected_fps)
    records = [r for r in json.loads(video_data.read_text()) if r["data_type"] == "video"][:2]
    for record in records:
        (tmp_path / record["path"]).write_bytes((video_data.parent / record["path"]).read_bytes())
    records.append({**records[0], "problem_id": 99, "path": "videos/av1.mp4"})
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps(records))
    overrides = ["task.name=video_qa", "model.video.max_frames=4"]
    for backend in ("pyav", "decord"):
        validation = validate_split(
            VideoQA(), str(path), load_config(None, [*overrides, f"model.video.backend={backend}"])
        )
        assert validation.usable == 3 and not validation.problems


def test_the_decord_backend_without_decord_is_refused_by_the_config(monkeypatch):
    import importlib.util

    from vlrl.config import ConfigError, load_config

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "decord" else real(name, *a))
    with pytest.raises(ConfigError, match="model.video.backend=decord needs the decord package"):
        load_config(None, ["model.video.backend=decord"])


def test_frame_count_equals_smart_nframes():
    from qwen_vl_utils.vision_process import smart_nframes

    for total in (2, 3, 7, 16, 45, 300, 5000):
        for video_fps in (1.0, 4.0, 24.0, 29.97, 60.0):
            for spec in (
                VideoConfig(),
                VideoConfig(fps=0.5, min_frames=3, max_frames=9),
                VideoConfig(fps=8, max_frames=768),
            ):
                element = {"fps": spec.fps, "min_frames": spec.min_frames, "max_frames": spec.max_frames}
                try:
                    expected = smart_nframes(element, total, video_fps)
                except ValueError:
                    with pytest.raises(ValueError):
                        frame_count(total, video_fps, spec)
                    continue
                assert frame_count(total, video_fps, spec) == expected, (total, video_fps, spec)


def test_shuffled_frames_are_the_same_frames_in_a_seeded_order(clips):
    spec = VideoConfig(min_pixels=56 * 56, max_pixels=112 * 112)
    ordered = load_video(clips[0], spec, 28)
    shuffled = shuffle_frames(ordered, 5)
    assert shuffled.indices != ordered.indices and sorted(shuffled.indices) == ordered.indices
    for frame, index in zip(shuffled.frames, shuffled.indices, strict=True):
        assert torch.equal(frame, ordered.frames[ordered.indices.index(index)])
    assert shuffle_frames(load_video(clips[0], spec, 28), 5).indices == shuffled.indices


def video_r1_accuracy(content: str, sol: str, question_type: str) -> float:
    """Video-R1's accuracy_reward for one completion, transcribed from its grpo.py (WER through
    rewards.ocr, which tests/rewards/test_ocr_rewards.py checks against the same source)."""
    import re

    from rewards.ocr import wer_score
    from rewards.video import free_form

    def extract_answer(text):
        match = re.search(r"<answer>\s*(.*?)\s*</answer>", text, re.DOTALL)
        return match.group(1).strip() if match else ""

    def normalize_number(num_str):
        try:
            return float(num_str.replace(",", ""))
        except Exception:
            return None

    try:
        output_ans, gt_ans = extract_answer(content), extract_answer(sol)
        if question_type == "multiple choice":
            return 1.0 if output_ans.strip() == gt_ans.strip() else 0.0
        if question_type == "numerical":
            if (("." in gt_ans) or ("," in gt_ans)) != (("." in output_ans) or ("," in output_ans)):
                return 0.0
            gt_number, out_number = normalize_number(gt_ans), normalize_number(output_ans)
            if gt_number is None or out_number is None:
                return 0.0
            return 1.0 if round(gt_number, 2) == round(out_number, 2) else 0.0
        if question_type == "OCR":
            return wer_score(output_ans, gt_ans)
        if question_type == "free-form":
            return free_form(output_ans, gt_ans)
        if question_type == "regression":
            gt_number, out_number = normalize_number(gt_ans), normalize_number(output_ans)
            rel_diff = (abs(out_number - gt_number) + 1e-9) / (abs(gt_number) + 1e-9)
            return 1 - min(1.0, max(0.0, rel_diff))
    except Exception:
        return 0.0
    return 0.0


CASES = [
    ("multiple choice", "B", ["B", " B ", "b", "B.", "(B)", "A", "", "B C"]),
    ("numerical", "3", ["3", "3.0", "03", "3,0", "4", "three", "nan", "inf", "1e0", "3_0"]),
    ("numerical", "2.50", ["2.5", "2.499", "2.494", "2,5", "2", "2.5.1", "-2.5"]),
    ("numerical", "1,000", ["1000", "1,000", "1.000", "1,000.001"]),
    ("regression", "10", ["10", "8", "12.5", "-10", "0", "30", "abc", "inf", "1e400"]),
    ("regression", "0", ["0", "0.0000000001", "1"]),
    ("OCR", "open 24 hours", ["open 24 hours", "open 24", "OPEN 24 HOURS", "", "open 24 hours now"]),
    (
        "free-form",
        "the red ball rolls to the left",
        ["the red ball rolls to the left", "a red ball rolling left", "blue", ""],
    ),
]


@pytest.mark.parametrize(("problem_type", "truth", "answers"), CASES)
def test_accuracy_equals_video_r1_on_each_problem_type(problem_type, truth, answers):
    for answer in answers:
        for completion in (f"<think>hm</think><answer>{answer}</answer>", f"<answer> {answer} </answer>", answer):
            expected = video_r1_accuracy(completion, f"<answer>{truth}</answer>", problem_type)
            got = accuracy(video_r1_answer(completion), truth, problem_type)
            assert got == pytest.approx(expected, abs=1e-12), (problem_type, truth, completion)


def test_accuracy_by_hand():
    assert accuracy("B", "B", "multiple choice") == 1.0 and accuracy("B.", "B", "multiple choice") == 0.0
    assert accuracy("3.0", "3", "numerical") == 0.0  # a decimal point where the truth has none
    assert accuracy("2.504", "2.50", "numerical") == 1.0  # equal to two decimals
    assert accuracy("8", "10", "regression") == pytest.approx(0.8)
    assert accuracy("30", "10", "regression") == 0.0
    assert accuracy("open 24", "open 24 hours", "OCR") == pytest.approx(2 / 3)  # one word missing of three
    assert accuracy("B", " B\n", "multiple choice") == 1.0  # both sides stripped, as Video-R1's .strip()s
    # free-form: ROUGE with the Porter stemmer ("cats" is "cat"), F-measures (not precision) averaged
    assert accuracy("the cats ran", "the cat ran", "free-form") == pytest.approx(1.0)
    expected = (6 / 7 + 4 / 5 + 6 / 7) / 3  # ROUGE-1 and ROUGE-L: P 1, R 3/4; ROUGE-2: P 1, R 2/3
    assert accuracy("the red ball", "the red ball rolls", "free-form") == pytest.approx(expected)


def test_a_nan_regression_answer_scores_zero_unless_video_r1s_code_is_asked_for():
    assert (
        video_r1_accuracy("<answer>nan</answer>", "<answer>10</answer>", "regression") == 1.0
    )  # the public code's hole
    assert accuracy("nan", "10", "regression") == 0.0
    assert accuracy("nan", "10", "regression", nonfinite="video_r1") == 1.0
    assert accuracy("nan", "10", "numerical") == 0.0  # NaN equals nothing there anyway


@pytest.fixture(scope="module")
def video_data(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("video_qa") / "train.json"
    write_synthetic_video_qa(path, 24, seed=0)
    return path


def test_a_problem_type_of_one_sample_has_its_own_accuracy(video_data):
    samples = VideoQA().load(video_data, FrameSpec()).samples
    choice = [s for s in samples if s.meta["problem_type"] == "multiple choice"][:2]
    other = next(s for s in samples if s.meta["problem_type"] != "multiple choice")
    completions = [f"<answer>{s.solution}</answer>" for s in choice] + ["<answer>no</answer>"]
    metrics = VideoQA().metrics([*choice, other], completions)
    assert metrics["accuracy/multiple choice"] == 1.0 and metrics[f"accuracy/{other.meta['problem_type']}"] == 0.0


def test_synthetic_records_are_video_r1_records_and_load(video_data):
    records = json.loads(video_data.read_text())
    assert {r["data_type"] for r in records} == {"video", "image"}
    assert {r["problem_type"] for r in records} == {"multiple choice", "numerical"}
    for r in records:
        assert r["solution"].startswith("<answer>") and (video_data.parent / r["path"]).is_file()
    split = VideoQA().load(video_data, FrameSpec())
    assert not split.errors and len(split.samples) == 24
    motion = next(s for s in split.samples if s.meta["problem_type"] == "multiple choice")
    assert motion.video and not motion.images and "Options:\nA. left\nB. right\nC. up\nD. down\n" in motion.problem
    assert motion.solution in "ABCD"
    spaced = [{**records[0], "solution": "<answer> 4 \n</answer>"}]  # Video-R1's extract_answer strips it
    (video_data.parent / "spaced.json").write_text(json.dumps(spaced))
    assert VideoQA().load(video_data.parent / "spaced.json", FrameSpec()).samples[0].solution == "4"


def test_bad_records_are_reported_with_their_place(tmp_path, video_data):
    good = json.loads(video_data.read_text())[0]
    bad = [
        {**good, "path": "videos/missing.mp4", "data_type": "video"},
        {**good, "problem_type": "yes/no"},
        {**good, "problem_type": "numerical", "solution": "<answer>many</answer>"},
        # a nan truth would score every regression answer 1 (Video-R1's clamp reads nan as 0)
        {**good, "problem_type": "regression", "solution": "<answer>nan</answer>"},
        {**good, "problem_type": "numerical", "solution": "<answer>1e400</answer>"},
        {**good, "problem_type": "multiple choice", "options": []},
        {**good, "solution": "<answer> </answer>"},
    ]
    (tmp_path / "videos").mkdir()
    (tmp_path / "videos" / "broken.mp4").write_bytes(b"not a video")
    bad.append({**good, "path": "videos/broken.mp4", "data_type": "video"})
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad, indent=1))
    split = VideoQA().load(path, FrameSpec(), image_root=video_data.parent)
    assert not split.samples and len(split.errors) == len(bad)
    messages = [str(e) for e in split.errors]
    assert all(str(path) in m for m in messages)
    for needle in ("video not found", "yes/no", "'many' of a numerical problem is not a finite number",
                   "'nan' of a regression problem", "'1e400' of a numerical problem", "options", "empty answer"):  # fmt: skip
        assert any(needle in m for m in messages), needle
    clip(tmp_path / "videos" / "still.mp4", 1, 32, 32, 2)
    path.write_text(json.dumps([*bad, {**good, "path": "videos/still.mp4", "data_type": "video"}], indent=1))
    split = VideoQA().load(path, FrameSpec())  # relative to the data file: the broken file is found, and unreadable
    assert any("video unreadable" in str(e) for e in split.errors)
    assert any("still.mp4 has 1 frame(s); at least 2 are needed" in str(e) for e in split.errors)
    # frames over data.max_image_pixels: each sampled one would be decoded whole (4096x4096: 5 GB)
    clip(tmp_path / "videos" / "wide.mp4", 4, 64, 48, 2)
    path.write_text(json.dumps([{**good, "path": "videos/wide.mp4", "data_type": "video"}]))
    assert len(VideoQA().load(path, FrameSpec(), media=MediaRules(max_image_pixels=64 * 48)).samples) == 1
    split = VideoQA().load(path, FrameSpec(), media=MediaRules(max_image_pixels=64 * 48 - 1))
    assert [e.message for e in split.errors] == [
        f"video {tmp_path / 'videos' / 'wide.mp4'} has frames of 64x48 = 3072 pixels, over data.max_image_pixels "
        "(3071), the limit an image's has"
    ]


def test_a_video_prompt_renders_its_frames_and_t_grpo_shuffles_them(video_data, tiny_qwen25, monkeypatch):
    from transformers.models.qwen2_vl import video_processing_qwen2_vl

    from vlrl.config import ModelConfig
    from vlrl.models.loading import load_processor
    from vlrl.models.prompting import render_prompt

    task = VideoQA()
    sample = next(s for s in task.load(video_data, FrameSpec()).samples if s.meta["problem_type"] == "multiple choice")
    video = VideoConfig(max_frames=4, min_pixels=3136, max_pixels=12544)
    model = ModelConfig(path=str(tiny_qwen25), min_pixels=3136, max_pixels=12544, video=video)
    processor = load_processor(model)
    warned = []  # the processor's frames are ours: it is told not to cap them again, and so does not warn
    monkeypatch.setattr(video_processing_qwen2_vl.logger, "warning_once", lambda *args: warned.append(args))
    prompt = render_prompt(processor, task.messages(sample), sample, model)
    assert not warned
    assert prompt.text.count("<|video_pad|>") == 1 and prompt.vision["video_grid_thw"].tolist() == [[2, 8, 8]]
    assert int((prompt.mm_token_type_ids == 2).sum()) == 2 * 8 * 8 // 4  # two frame pairs of 4 x 4 merged patches
    assert prompt.vision["second_per_grid_ts"].tolist() == [1.0]  # 2 frames a temporal patch at 2 fps
    variant = task.temporal_variant(sample)
    assert variant.shuffle_frames is not None and task.temporal_variant(sample) == variant
    shuffled = render_prompt(processor, task.messages(variant), variant, model)
    assert torch.equal(shuffled.input_ids, prompt.input_ids)
    assert not torch.equal(shuffled.vision["pixel_values_videos"], prompt.vision["pixel_values_videos"])
    image_sample = next(s for s in task.load(video_data, FrameSpec()).samples if not s.video)
    assert task.temporal_variant(image_sample) is None


def test_frames_upscaled_past_max_pixels_reach_the_model_at_their_size(video_data, tiny_qwen25):
    """qwen-vl-utils rounds an upscale up to whole patches, past max_pixels; the processor must
    not shrink such frames again."""
    from vlrl.config import ModelConfig
    from vlrl.models.loading import load_processor
    from vlrl.models.prompting import render_prompt

    task = VideoQA()
    sample = next(s for s in task.load(video_data, FrameSpec()).samples if s.video)
    spec = VideoConfig(max_frames=4, min_pixels=20000, max_pixels=20000)
    frames = load_video(sample.video, spec, 28).frames
    assert frames.shape[2] * frames.shape[3] > spec.max_pixels
    model = ModelConfig(path=str(tiny_qwen25), min_pixels=3136, max_pixels=12544, video=spec)
    prompt = render_prompt(load_processor(model), task.messages(sample), sample, model)
    _, h, w = prompt.vision["video_grid_thw"][0].tolist()
    assert (h * 14, w * 14) == tuple(frames.shape[2:])


def test_video_qa_trains_with_t_grpo_then_evaluates_and_scores(tmp_path, tiny_qwen25, capsys):
    from vlrl.cli import main

    data = tmp_path / "data"
    common = [
        "--config", str(ROOT / "configs" / "demo" / "video_qa.yaml"),
        f"data.train={data / 'train.json'}", f"data.eval={data / 'val.json'}", "data.synthetic=true",
        "data.synthetic_train_size=8", "data.synthetic_eval_size=4",
    ]  # fmt: skip
    run = tmp_path / "run"
    options = [f"trainer.output_dir={run}", "trainer.steps=2", "trainer.prompts_per_step=2", "rollout.num_generations=4",
               "rollout.max_new_tokens=12", "trainer.progress=false", "algo.length_control.enabled=true",
               "algo.length_control.min_tokens=1"]  # fmt: skip
    assert main(["train", *common, *options]) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all({"reward/format", "reward/accuracy", "reward/temporal", "reward/length"} <= r.keys() for r in rows)
    assert all(math.isfinite(r["loss"]) for r in rows)
    out = tmp_path / "eval"
    checkpoint = run / "checkpoints" / "step-0000002"
    assert (
        main(
            [
                "eval",
                *common,
                "--task",
                "video_qa",
                "--model",
                str(checkpoint),
                "--out",
                str(out),
                "eval.max_new_tokens=12",
            ]
        )
        == 0
    )
    metrics = read_metrics(out)["video_qa"]
    assert {"accuracy", "format_rate"} <= metrics.keys() and 0 <= metrics["accuracy"] <= 1
    completions = tmp_path / "completions.jsonl"
    completions.write_text(
        "".join(json.dumps({"id": i, "completion": "<think>x</think><answer>B</answer>"}) + "\n" for i in range(4))
    )
    scored = tmp_path / "scored.jsonl"
    assert main(["score", *common, "--task", "video_qa", "--data", str(data / "val.json"),
                 "--completions", str(completions), "--out", str(scored)]) == 0  # fmt: skip
    lines = [json.loads(line) for line in scored.read_text().splitlines()]
    assert len(lines) == 4 and all(line["rewards"]["format"] == 1.0 for line in lines)


def test_t_grpo_decodes_each_video_once_a_step(tmp_path, tiny_qwen25, monkeypatch):
    """The shuffled-frame variant reuses the ordered prompt's decoded frames: decoding (every
    frame up to the last sampled one) is the costly part of a video prompt."""
    import vlrl.models.prompting
    from vlrl.cli import main

    decoded: list[str] = []
    real = vlrl.models.prompting.load_video
    monkeypatch.setattr(
        vlrl.models.prompting, "load_video", lambda path, *args: decoded.append(path) or real(path, *args)
    )
    data = tmp_path / "data"
    assert main([
        "train", "--config", str(ROOT / "configs" / "demo" / "video_qa.yaml"),
        f"data.train={data / 'train.json'}", f"data.eval={data / 'val.json'}", "data.synthetic=true",
        "data.synthetic_train_size=8",
        f"trainer.output_dir={tmp_path / 'run'}", "trainer.steps=1", "trainer.prompts_per_step=4", "eval.every=0",
        "rollout.num_generations=2", "rollout.max_new_tokens=4", "trainer.progress=false",
    ]) == 0  # fmt: skip
    assert decoded and len(decoded) == len(set(decoded)), decoded


def test_a_judge_model_reads_the_video_of_a_video_sample_once_per_call(video_data, tiny_qwen25, monkeypatch):
    """Trust-GRPO's local judge (algo.trust.scorer=judge:PATH) shows the judge the sample's
    video as well as its images; the G completions of one prompt share one decode."""
    import vlrl.models.prompting
    from vlrl.config import ModelConfig
    from vlrl.trainer.thinking import judge_scorer

    decoded: list[str] = []
    real = vlrl.models.prompting.load_video
    monkeypatch.setattr(
        vlrl.models.prompting, "load_video", lambda path, *args: decoded.append(path) or real(path, *args)
    )
    video = VideoConfig(max_frames=4, min_pixels=3136, max_pixels=12544)
    judge = judge_scorer(str(tiny_qwen25), ModelConfig(path=str(tiny_qwen25), max_pixels=12544, video=video), 4)
    sample = next(s for s in VideoQA().load(video_data, FrameSpec()).samples if s.video)
    scores = judge([sample] * 3, ["<think>it moves left</think><answer>A</answer>"] * 3)
    assert len(scores) == 3 and all(s is None or 0 <= s <= 1 for s in scores)
    assert decoded == [sample.video]


def test_the_default_frames_are_the_size_video_r1s_trainer_and_evaluator_give(clips):
    """Video-R1's messages name no max_pixels, so its vendored qwen-vl-utils floors a frame's limit
    at 1.05 x 128 x 28 x 28 = 105,369 pixels: a 640 x 480 video's frames are 280 x 364 there, not
    the 252 x 364 a limit of 128 x 28 x 28 gives."""
    video = load_video(clips[3], VideoConfig(), 28)
    assert tuple(video.frames.shape[2:]) == (280, 364)
    assert tuple(load_video(clips[3], VideoConfig(max_pixels_from="message"), 28).frames.shape[2:]) == (252, 364)


def _palette_objects(image: np.ndarray) -> int:
    """Shapes in a synthetic still: regions of exactly a palette color (backgrounds never are one)."""
    from scipy import ndimage

    from data_prep.shapes import COLORS

    mask = np.zeros(image.shape[:2], dtype=bool)
    for color in COLORS.values():
        mask |= (image == np.array(color, dtype=np.uint8)).all(axis=-1)
    return int(ndimage.label(mask)[1])


def test_synthetic_video_answers_match_what_the_clip_and_the_image_show(tmp_path):
    import av

    from data_prep.shapes import COLORS

    path = write_synthetic_video_qa(tmp_path / "v.json", 14, seed=0, side=64, n_frames=6)
    records = json.loads(path.read_text())
    assert {r["problem_type"] for r in records} == {"multiple choice", "numerical"}
    for r in records:
        answer = r["solution"].removeprefix("<answer>").removesuffix("</answer>")
        if r["problem_type"] == "multiple choice":
            color = r["problem"].split()[5]  # "In which direction does the red circle move?"
            with av.open(str(tmp_path / r["path"])) as container:
                frames = [f.to_ndarray(format="rgb24").astype(int) for f in container.decode(video=0)]
            centers = []
            for frame in (frames[0], frames[-1]):
                ys, xs = np.nonzero(np.abs(frame - np.array(COLORS[color])).sum(axis=-1) < 90)
                centers.append((xs.mean(), ys.mean()))
            dx, dy = centers[1][0] - centers[0][0], centers[1][1] - centers[0][1]
            moved = ("right" if dx > 0 else "left") if abs(dx) > abs(dy) else ("down" if dy > 0 else "up")
            assert r["options"]["ABCD".index(answer)] == f"{answer}. {moved}"
        elif r["data_type"] == "image":
            assert r["problem"] == "How many shapes are in the image?"
            assert int(answer) == _palette_objects(np.asarray(Image.open(tmp_path / r["path"]).convert("RGB")))
        else:
            assert r["problem"] == "How many shapes are in the video?" and r["path"].endswith(".mp4")
    assert {r["data_type"] for r in records} == {"video", "image"}


def test_a_video_whose_header_states_no_frame_count_is_counted_by_its_packets(tmp_path):
    """Matroska states no frame count: the frames are its packets that hold data (not the
    empty one the demuxer gives at the end)."""
    import av

    from vlrl.vision.video import probe

    path = tmp_path / "clip.mkv"
    write_clip(path, [Image.new("RGB", (64, 48), (30 * t,) * 3) for t in range(8)], fps=4)
    with av.open(str(path)) as container:
        assert container.streams.video[0].frames == 0
    assert probe(path) == (8, 4.0)


def test_a_file_without_a_video_stream_is_refused_saying_so(tmp_path):
    import av

    from vlrl.vision.video import probe

    path = tmp_path / "sound.wav"
    with av.open(str(path), "w") as container:
        stream = container.add_stream("pcm_s16le", rate=8000)
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 800), np.int16), format="s16", layout="mono")
        frame.sample_rate = 8000
        for packet in [*stream.encode(frame), *stream.encode()]:
            container.mux(packet)
    with pytest.raises(ValueError, match=f"^video {path} holds no video stream$"):
        probe(path)


def test_frames_past_the_end_of_what_decodes_are_named(clips):
    from vlrl.vision.video import _pyav_frames

    assert len(_pyav_frames(clips[2], [0, 6])) == 2  # 7 frames
    with pytest.raises(ValueError, match=rf"^video {clips[2]}: frames \[7, 9\] could not be decoded$"):
        _pyav_frames(clips[2], [0, 6, 7, 9])


def test_a_file_whose_header_counts_more_frames_than_it_holds_is_sampled_over_those_it_holds(tmp_path):
    """An mp4 cut at a packet's end keeps its header's count (moov first: faststart). decord and
    torchvision's reader count the frames there are, and PyAV samples over those too, the
    same frames; before, the record was lost ("frames [...] could not be decoded")."""
    import av

    spec = VideoConfig()  # Video-R1's: 2 fps, 4 to 16 frames
    whole = gray_clip(tmp_path / "whole.mp4", "mpeg4", 40, rate=10, step=6, options={"movflags": "faststart"})
    with av.open(str(whole)) as container:
        ends = [p.pos + p.size for p in container.demux(video=0) if p.size]
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(whole.read_bytes()[: ends[24]])  # 25 frames kept
    with av.open(str(cut)) as container:
        assert container.streams.video[0].frames == 40
    pyav = load_video(cut, spec, 28)
    decord = load_video(cut, VideoConfig(backend="decord"), 28)
    assert pyav.total_frames == decord.total_frames == 25 and pyav.indices == decord.indices == [0, 8, 16, 24]
    assert torch.equal(pyav.frames, decord.frames)
    one = tmp_path / "one.mp4"  # one frame is too few to sample at all
    one.write_bytes(whole.read_bytes()[: ends[0]])
    with pytest.raises(ValueError, match=r"frames \[6, 11, 17, 22, 28\] could not be decoded$"):
        load_video(one, spec, 28)


def test_a_frames_pixel_limit_under_a_message_max_pixels_scales_with_the_familys_factor():
    """qwen-vl-utils 0.0.14: VIDEO_MAX_TOKEN_NUM tokens of the family's factor squared (32 for
    Qwen3-VL), the message's max_pixels below it."""
    import qwen_vl_utils.vision_process as vp

    from vlrl.vision.video import frame_pixel_limit

    spec = VideoConfig(max_pixels=10**7, max_pixels_from="message")
    for factor in (28, 32):
        assert frame_pixel_limit(spec, factor) == vp.VIDEO_MAX_TOKEN_NUM * factor * factor
    assert frame_pixel_limit(VideoConfig(max_pixels=200_000, max_pixels_from="message"), 32) == 200_000


def test_shuffled_frames_keep_the_files_frame_count_and_rates():
    """T-GRPO's shuffled variant is placed in time as the ordered one: same file fps, frame count
    and sampled fps."""
    video = Video(torch.arange(4.0).view(4, 1, 1, 1), 30.0, 300, [0, 100, 199, 299])
    shuffled = shuffle_frames(video, 1)
    assert (shuffled.video_fps, shuffled.total_frames) == (30.0, 300)
    assert shuffled.sampled_fps == pytest.approx(0.4)  # 4 frames of 300 at 30 fps
    assert [int(f) for f in shuffled.frames.flatten()] == [video.indices.index(i) for i in shuffled.indices]


class _Stream:
    """A video stream header as PyAV gives it: rates that may be missing (None), a frame count."""

    def __init__(self, average_rate, guessed_rate, frames):
        self.average_rate, self.guessed_rate, self.frames = average_rate, guessed_rate, frames
        self.width, self.height = 64, 48


class _Container:
    def __init__(self, stream):
        self.streams = type("Streams", (), {"video": [stream]})()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize(
    "average, guessed, frames, expected",
    [
        (None, None, 8, "reports 8 frames at 0.0 fps"),  # no rate at all
        (0, 0, 8, "reports 8 frames at 0.0 fps"),  # a rate of 0
        (-5, None, 8, "reports 8 frames at -5.0 fps"),
        (4, None, -1, "reports -1 frames at 4.0 fps"),
    ],
)
def test_a_video_of_no_fps_or_no_frames_is_refused_saying_what_it_reports(
    tmp_path, monkeypatch, average, guessed, frames, expected
):
    """A clip whose header states 0 fps would divide by zero when its frames are counted: refused."""
    import av

    from vlrl.vision.video import probe

    path = tmp_path / "v.mp4"
    monkeypatch.setattr(av, "open", lambda path: _Container(_Stream(average, guessed, frames)))
    with pytest.raises(ValueError, match=f"^{re.escape(f'video {path} {expected}')}$"):
        probe(path)


def test_a_video_without_an_average_rate_is_read_at_its_guessed_rate(tmp_path, monkeypatch):
    from fractions import Fraction

    import av

    from vlrl.vision.video import probe

    monkeypatch.setattr(av, "open", lambda path: _Container(_Stream(None, Fraction(25, 2), 30)))
    assert probe(tmp_path / "v.mp4") == (30, 12.5)


@pytest.mark.parametrize("frames, fps", [(8, 0.0), (0, 4.0)])
def test_decord_reporting_no_fps_or_no_frames_is_refused_saying_so(tmp_path, monkeypatch, frames, fps):
    import sys
    import types

    from vlrl.vision.video import _decord_probe

    class VideoReader:
        def __init__(self, path, num_threads=0):
            pass

        def __len__(self):
            return frames

        def get_avg_fps(self):
            return fps

    monkeypatch.setitem(sys.modules, "decord", types.SimpleNamespace(VideoReader=VideoReader))
    path = tmp_path / "v.mp4"
    with pytest.raises(
        ValueError, match=f"^{re.escape(f'video {path} reports {frames} frames at {fps} fps (decord)')}$"
    ):
        _decord_probe(path)


def test_a_clip_too_thin_for_its_frames_pixel_limit_is_refused_saying_so():
    from vlrl.vision.video import frame_size

    spec = VideoConfig(min_pixels=3136, max_pixels=3136, max_pixels_from="message")
    with pytest.raises(ValueError, match=r"^a 5000x30 image resizes to 700x0 under max_pixels .*too thin"):
        frame_size(30, 5000, 4, spec, 28)
    assert frame_size(56, 56, 4, spec, 28) == (56, 56)
