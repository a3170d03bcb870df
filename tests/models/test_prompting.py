"""Prompts rendered together (one processor call for those without a video) are the prompts
rendered one at a time, for every model family; a sample whose image fails to read is answered
in its place and the others still render."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tasks.refcoco import RefCOCO
from tasks.video_qa import VideoQA
from vlrl.config import ModelConfig, VideoConfig
from vlrl.data.records import load_split
from vlrl.data.sample import Sample
from vlrl.models.families import family_names
from vlrl.models.loading import frame_spec, load_processor
from vlrl.models.prompting import UnusableSample, render_prompt, render_prompts, render_usable


def assert_same_prompt(got, want) -> None:
    assert torch.equal(got.input_ids, want.input_ids)
    assert torch.equal(got.mm_token_type_ids, want.mm_token_type_ids)
    assert got.vision.keys() == want.vision.keys()
    for key in want.vision:
        assert torch.equal(got.vision[key], want.vision[key]), key
    assert got.text == want.text
    assert [image.tobytes() for image in got.images] == [image.tobytes() for image in want.images]
    assert (got.video is None) == (want.video is None)


@pytest.mark.parametrize("family", sorted(family_names()))
def test_prompts_rendered_together_are_the_prompts_rendered_alone(
    family, rec_data, video_qa_data, tmp_path, monkeypatch
):
    cfg = ModelConfig(
        path=f"tiny:{family}", dtype="float32", min_pixels=3136, max_pixels=50176,
        video=VideoConfig(max_frames=4, min_pixels=3136, max_pixels=12544),
    )  # fmt: skip
    processor = load_processor(cfg)
    grounding = RefCOCO()
    images = load_split(rec_data, grounding.build_sample, frame_spec(cfg)).samples[:4]
    assert len({(s.frame.width, s.frame.height) for s in images}) > 1  # images of different sizes, so grids
    clip = next(s for s in VideoQA().load(video_qa_data, frame_spec(cfg)).samples if s.video)
    text = Sample(id="text", task="math_vqa", problem="What is 3 plus 2?", solution="5")
    text_messages = [{"role": "user", "content": [{"type": "text", "text": text.problem}]}]
    truncated = tmp_path / "truncated.png"
    truncated.write_bytes(open(images[0].images[0], "rb").read()[:100])
    broken = dataclasses.replace(images[0], images=[str(truncated)], source="broken.json:7")
    bad_chunk = tmp_path / "bad_chunk.png"
    png_with_a_broken_chunk(bad_chunk)  # Pillow raises SyntaxError decoding it
    chunk = dataclasses.replace(images[0], images=[str(bad_chunk)], source="chunk.json:2", image_size=(200, 150))
    # a vision token written in a record's text has no image; a lone surrogate, no tokenizer takes
    injected = dataclasses.replace(images[1], problem="the <|vision_start|><|image_pad|><|vision_end|> square")
    half = dataclasses.replace(images[1], problem="the \ud800 square")
    refused = [
        (broken, "broken.json:7"),
        (chunk, "chunk.json:2"),
        (injected, images[1].source),
        (half, images[1].source),
    ]

    def jobs_with(bad: list[Sample]) -> list[tuple[list[dict], Sample]]:
        jobs = [(grounding.messages(s), s) for s in images[:2]]
        jobs += [(text_messages, text), (VideoQA().messages(clip), clip), *[(grounding.messages(s), s) for s in bad]]
        return jobs + [(grounding.messages(s), s) for s in images[2:]]

    from vlrl.models import prompting

    reads = []
    load_image = prompting.load_image
    monkeypatch.setattr(prompting, "load_image", lambda path, *a, **k: reads.append(path) or load_image(path, *a, **k))
    for bad, source in refused:  # each among readable prompts: it alone is answered UnusableSample
        jobs = jobs_with([bad])
        reads.clear()
        together = render_prompts(processor, jobs, cfg)
        # each image read once, also where the batch falls back to one prompt at a time
        assert sorted(reads) == sorted(path for _, sample in jobs for path in sample.images)
        assert isinstance(together[4], UnusableSample) and source in str(together[4]), bad.problem
        with pytest.raises(UnusableSample):
            render_prompt(processor, *jobs[4], cfg)
        for position, (messages, sample) in enumerate(jobs):
            if position != 4:
                assert_same_prompt(together[position], render_prompt(processor, messages, sample, cfg))
        assert together[2].vision == {} and together[3].video is not None
        kept, prompts, skipped = render_usable(list(range(len(jobs))), together)
        assert kept == [0, 1, 2, 3, 5, 6] and prompts == [together[i] for i in kept] and skipped == [together[4]]


@pytest.mark.parametrize("family", sorted(family_names()))
def test_a_prompt_with_an_image_and_a_video_holds_each_as_rendered_alone(family, rec_data, video_qa_data):
    """Each modality's processor size goes in its own kwargs: transformers refuses a size given
    at the top and in videos_kwargs, which left out every sample with an image and a video."""
    cfg = ModelConfig(
        path=f"tiny:{family}", dtype="float32", min_pixels=3136, max_pixels=50176,
        video=VideoConfig(max_frames=4, min_pixels=3136, max_pixels=12544),
    )  # fmt: skip
    processor = load_processor(cfg)
    image = load_split(rec_data, RefCOCO().build_sample, frame_spec(cfg)).samples[0]
    clip = next(s for s in VideoQA().load(video_qa_data, frame_spec(cfg)).samples if s.video)
    video_messages = VideoQA().messages(clip)
    both = dataclasses.replace(clip, images=image.images, image_size=image.image_size)
    content = [{"type": "image"}, *video_messages[-1]["content"]]
    rendered = render_prompt(processor, [*video_messages[:-1], {"role": "user", "content": content}], both, cfg)
    alone = render_prompt(processor, RefCOCO().messages(image), image, cfg)
    video_alone = render_prompt(processor, video_messages, clip, cfg)
    assert {1, 2} <= set(rendered.mm_token_type_ids.tolist())
    for key in ("pixel_values", "image_grid_thw"):
        assert torch.equal(rendered.vision[key], alone.vision[key]), key
    for key in ("pixel_values_videos", "video_grid_thw"):
        assert torch.equal(rendered.vision[key], video_alone.vision[key]), key


def png_with_a_broken_chunk(path, width: int = 200, height: int = 150) -> None:
    """A PNG whose header is whole (the load-time check reads its size) and whose second image
    data chunk has a type of junk: Pillow's decoder raises SyntaxError, not OSError."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    pixels = zlib.compress((b"\x00" + b"\x80" * 3 * width) * height)  # each row: filter 0, then gray RGB
    half = len(pixels) // 2
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels[:half])
        + chunk(b"\x00\x01!!", pixels[half:]) + chunk(b"IEND", b"")
    )  # fmt: skip


def test_without_a_chat_template_a_prompt_is_its_messages_content_in_order_with_each_image_and_video_as_vision_tokens():
    from vlrl.models.prompting import templated_text

    cfg = ModelConfig(path="tiny:qwen2_vl", chat_template="none")
    messages = [
        {"role": "system", "content": "Be brief. "},
        {"role": "user", "content": [{"type": "image"}, {"type": "video"}, {"type": "text", "text": "What moves?"}]},
    ]
    assert templated_text(None, messages, cfg) == (
        "Be brief. <|vision_start|><|image_pad|><|vision_end|><|vision_start|><|video_pad|><|vision_end|>What moves?"
    )


def test_a_prompt_over_max_prompt_tokens_leaves_its_sample_out_and_the_others_render(rec_data, video_qa_data):
    """model.max_prompt_tokens below the video prompt (rendered alone), then below all but the
    shortest image prompt (rendered together): each prompt over it is the UnusableSample naming
    its record and both counts, the others are the prompts rendered without a limit."""
    cfg = ModelConfig(path="tiny:qwen2_5_vl", dtype="float32", min_pixels=3136, max_pixels=50176,
                      video=VideoConfig(max_frames=4, min_pixels=3136, max_pixels=12544))  # fmt: skip
    processor = load_processor(cfg)
    grounding = RefCOCO()
    images = load_split(rec_data, grounding.build_sample, frame_spec(cfg)).samples[:4]
    clip = next(s for s in VideoQA().load(video_qa_data, frame_spec(cfg)).samples if s.video)
    jobs = [(grounding.messages(s), s) for s in images] + [(VideoQA().messages(clip), clip)]
    unlimited = render_prompts(processor, jobs, cfg)
    lengths = [len(p.input_ids) for p in unlimited]
    assert lengths[-1] > max(lengths[:-1]) > min(lengths)  # the video's is the longest; images differ
    for limit in (lengths[-1] - 1, min(lengths)):
        limited = dataclasses.replace(cfg, max_prompt_tokens=limit)
        together = render_prompts(processor, jobs, limited)
        for (messages, sample), prompt, length, full in zip(jobs, together, lengths, unlimited, strict=True):
            if length > limit:
                assert isinstance(prompt, UnusableSample) and sample.source in str(prompt)
                assert f"its prompt has {length} tokens, over model.max_prompt_tokens ({limit})" in str(prompt)
                with pytest.raises(UnusableSample, match="over model.max_prompt_tokens"):
                    render_prompt(processor, messages, sample, limited)
            else:
                assert_same_prompt(prompt, full)
