"""Model families (vlrl/models/): found as configured, each with its frame, factor, processor,
video handling and tiny build; every family with every built-in task through rendering,
rewards, one SFT step, one RL step and an evaluation (tests/models/test_policy.py checks each
family's shared-prefix forward against full forwards)."""

from __future__ import annotations

import contextlib
import json
import math
import random
import re
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import yaml
from PIL import Image

from tasks.refcoco import QWEN3_REC_TEMPLATE, VLM_R1_REC_TEMPLATE
from tasks.video_qa import VideoQA
from tests.families import decoder_families
from vlrl import plugins
from vlrl.config import ConfigError, ModelConfig, TaskConfig, VideoConfig
from vlrl.data.stream import MixtureStream
from vlrl.models.base import ModelFamily
from vlrl.models.families import family_class, family_names, model_family, tiny_builds
from vlrl.models.loading import checkpoint_path, frame_kind, frame_spec, load_processor
from vlrl.models.prompting import render_prompt
from vlrl.models.tiny import tiny_checkpoint
from vlrl.tasking.registry import builtin_training_tasks, make_task, task_class
from vlrl.tasking.scoring import score
from vlrl.vision import smart_resize

ROOT = Path(__file__).resolve().parents[2]
FRAMES = {
    "qwen2_vl": "norm1000",
    "qwen2_5_vl": "absolute",
    "qwen3_vl": "norm1000",
    "qwen3_vl_moe": "norm1000",
    "qwen3_5": "norm1000",
    "qwen3_5_moe": "norm1000",
}
FACTORS = {"qwen2_vl": 28, "qwen2_5_vl": 28, "qwen3_vl": 32, "qwen3_vl_moe": 32, "qwen3_5": 32, "qwen3_5_moe": 32}
VIDEO = VideoConfig(max_frames=4, min_pixels=3136, max_pixels=12544)


def model_cfg(family: str, **fields) -> ModelConfig:
    fields = {"video": VIDEO, **fields}
    return ModelConfig(path=f"tiny:{family}", dtype="float32", min_pixels=3136, max_pixels=50176, **fields)


@contextlib.contextmanager
def registered_family(monkeypatch, name: str, family: type) -> Iterator[None]:
    """`family` registered under the entry point `name`, as an installed package's would be, for
    the block (the family lookup's cache cleared on both sides)."""
    entry = SimpleNamespace(name=name, value=f"plugin:{family.__name__}", load=lambda: family)
    registered = plugins.registered
    monkeypatch.setattr(
        plugins,
        "registered",
        lambda group: {**registered(group), **({name: entry} if group == plugins.FAMILIES else {})},
    )
    family_class.cache_clear()
    try:
        yield
    finally:
        family_class.cache_clear()


# -- finding a family ------------------------------------------------------------------------------
def test_every_family_has_a_tiny_build_of_its_own_model_type():
    from transformers import AutoConfig

    builds = tiny_builds()
    assert {spec.arch for spec in builds.values()} == set(family_names())
    for name in family_names():
        family = model_family(model_cfg(name))
        assert family.name == name and FRAMES[name] == family.coord_frame and FACTORS[name] == family.factor
        assert AutoConfig.from_pretrained(tiny_checkpoint(builds[name])).model_type in family.model_types


def test_a_checkpoint_goes_by_its_model_type_and_a_bare_name_by_its_hints(tmp_path):
    for model_type in ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe"):
        folder = tmp_path / model_type
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"model_type": model_type}))
        assert model_family(ModelConfig(path=str(folder))).name == model_type
    # an RL LoRA adapter added to an SFT LoRA adapter of a Qwen3-VL model: the base's family
    sft, rl = tmp_path / "sft-adapter", tmp_path / "rl-adapter"
    for adapter, base in ((sft, tmp_path / "qwen3_vl"), (rl, sft)):
        adapter.mkdir()
        (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(base)}))
    assert model_family(ModelConfig(path=str(rl))).name == "qwen3_vl"
    hinted = {
        "/models/Qwen2-VL-2B-Instruct": "qwen2_vl",
        "/models/Qwen2.5-VL-7B-Instruct": "qwen2_5_vl",
        "/models/Qwen3-VL-8B-Instruct": "qwen3_vl",
        "/models/Qwen3-VL-30B-A3B-Instruct": "qwen3_vl_moe",  # the longer hint wins
        "/models/Qwen3.5-9B": "qwen3_5",
        "/models/Qwen3.5-35B-A3B": "qwen3_5_moe",
        "/models/Qwen3.5-397B-A17B-FP8": "qwen3_5_moe",
        "/models/Qwen3-VL-235B-A22B-Instruct": "qwen3_vl_moe",
        "/runs/my_qwen2_vl_sft": "qwen2_vl",
        "/models/some-model": "qwen2_5_vl",  # nothing to go by: Qwen2.5-VL, as before families
        "": "qwen2_5_vl",
    }
    for path, name in hinted.items():
        assert model_family(ModelConfig(path=path)).name == name, path


EXAMPLE = f"{ROOT / 'docs' / 'examples' / 'qwen25_norm1000.py'}:Qwen25Norm1000"  # docs/model_families.md


def test_model_family_names_a_family_an_entry_point_or_a_class(monkeypatch, tiny_qwen25):
    import vlrl.models.families

    assert model_family(ModelConfig(path=str(tiny_qwen25), family="qwen2_vl")).name == "qwen2_vl"
    custom = ModelConfig(path=str(tiny_qwen25), family=EXAMPLE)
    assert model_family(custom).coord_frame == "norm1000" and frame_kind(custom) == "norm1000"
    assert checkpoint_path(custom) == str(tiny_qwen25)  # it claims qwen2_5_vl checkpoints
    FrameLessQwen25 = family_class(EXAMPLE)
    with registered_family(monkeypatch, "qwen_plugin", FrameLessQwen25):
        assert family_class("qwen_plugin") is FrameLessQwen25
        assert any(isinstance(f, FrameLessQwen25) for f in vlrl.models.families.all_families())
        assert tiny_builds()["qwen2_5_vl"].arch == "qwen2_5_vl"  # a subclass does not take over its parent's builds
    with pytest.raises(ConfigError, match=r"model.family 'qwen9_vl' is unknown; available: .*qwen3_5"):
        family_class("qwen9_vl")
    with pytest.raises(ConfigError, match="not a subclass of vlrl.models.base.ModelFamily"):
        family_class("tests.models.test_model_families:model_cfg")


def test_a_loaded_model_keeps_the_family_it_was_loaded_as_not_its_model_types(tiny_qwen25):
    from vlrl.models.loading import family_of_model, pretrained

    cfg = ModelConfig(path=str(tiny_qwen25), family=EXAMPLE, dtype="float32")
    model = pretrained(cfg, str(tiny_qwen25))
    assert model.config.model_type == "qwen2_5_vl"  # which Qwen2.5-VL claims by its model_types
    family = family_of_model(model)
    assert type(family) is family_class(EXAMPLE) and family.coord_frame == "norm1000"


def test_a_checkpoint_of_another_family_is_refused_by_name(tiny_qwen25, tmp_path):
    with pytest.raises(
        ConfigError, match=r"is a 'qwen2_5_vl' model; the 'qwen3_vl' family \(model.family\) loads qwen3_vl"
    ):
        checkpoint_path(ModelConfig(path=str(tiny_qwen25), family="qwen3_vl"))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llava"}))
    with pytest.raises(
        ConfigError,
        match=r"is a 'llava' model; supported: qwen2_5_vl, qwen2_vl, qwen3_5, qwen3_5_moe, qwen3_vl, qwen3_vl_moe",
    ):
        checkpoint_path(ModelConfig(path=str(tmp_path)))


def test_coord_frame_auto_is_the_familys_and_an_explicit_frame_overrides_it():
    for name, frame in FRAMES.items():
        assert frame_kind(model_cfg(name)) == frame
        assert frame_kind(model_cfg(name, coord_frame="absolute")) == "absolute"
        spec = frame_spec(model_cfg(name, coord_frame="absolute"))
        # Qwen3-VL fine-tuned to answer in resized pixels: its own factor sizes the frame
        assert (spec.kind, spec.factor) == ("absolute", FACTORS[name])
        assert spec.frame(640, 427).model_width == smart_resize(427, 640, FACTORS[name], 3136, 50176)[1]


def test_qwen3_answers_convert_both_ways_in_thousandths_of_the_image():
    """Qwen3-VL's relative coordinates: x / width * 1000 (its ODinW evaluation maps answers back
    with bbox / 1000 * [w, h, w, h]), rounded in SFT targets."""
    frame = frame_spec(model_cfg("qwen3_vl")).frame(640, 427)
    assert frame.box_to_model([64, 42.7, 320, 213.5]) == [100, 100, 500, 500]
    assert frame.box_to_original([100, 100, 500, 500]) == pytest.approx([64.0, 42.7, 320.0, 213.5])
    assert frame.point_to_original([500, 1000]) == pytest.approx([320.0, 427.0])


# -- sizes -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(family_names()))
def test_smart_resize_equals_the_familys_processor_on_many_sizes(name):
    from qwen_vl_utils.vision_process import smart_resize as reference

    cfg = model_cfg(name)
    processor = load_processor(cfg)
    family = model_family(cfg)
    rng = random.Random(0)
    sizes = [(rng.randint(family.factor, 700), rng.randint(family.factor, 700)) for _ in range(40)]
    sizes += [(family.factor, family.factor), (223, 224), (1000, 37), (37, 1000)]
    for height, width in sizes:
        image = Image.new("RGB", (width, height))
        out = processor.image_processor(images=[image], size={"shortest_edge": 3136, "longest_edge": 50176})
        _, h, w = out["image_grid_thw"][0].tolist()
        expected = smart_resize(height, width, family.factor, 3136, 50176)
        assert (h * family.patch_size, w * family.patch_size) == expected, (height, width)
        assert expected == reference(height, width, family.factor, min_pixels=3136, max_pixels=50176)


def test_each_familys_processor_normalizes_pixels_as_its_released_checkpoints_do():
    """image_mean / image_std of the released preprocessor_config.json: Qwen2-VL's and Qwen2.5-VL's
    are CLIP's, Qwen3-VL's 0.5."""
    clip = ([0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711])
    for name, (mean, std) in {
        "qwen2_vl": clip,
        "qwen2_5_vl": clip,
        "qwen3_vl": ([0.5] * 3, [0.5] * 3),
        "qwen3_vl_moe": ([0.5] * 3, [0.5] * 3),
    }.items():
        images = load_processor(model_cfg(name)).image_processor
        assert [*images.image_mean, *images.image_std] == pytest.approx(mean + std), name


# -- video -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["qwen3_vl", "qwen3_5"])
def test_qwen3_video_prompts_carry_frame_times_and_t_grpo_shuffles_only_pixels(name, video_qa_data):
    cfg = model_cfg(name)
    processor = load_processor(cfg)
    task = VideoQA()
    sample = next(
        s for s in task.load(video_qa_data, frame_spec(cfg)).samples if s.meta["problem_type"] == "multiple choice"
    )
    prompt = render_prompt(processor, task.messages(sample), sample, cfg)
    clip = prompt.video
    # a temporal patch of two frames is at the mean of their times (frame index / file fps)
    times = [(clip.indices[i] + clip.indices[i + 1]) / 2 / clip.video_fps for i in range(0, len(clip.indices), 2)]
    decoded = processor.tokenizer.decode(prompt.input_ids)
    assert re.findall(r"<(\d+\.\d) seconds>", decoded) == [f"{t:.1f}" for t in times]
    t, h, w = prompt.vision["video_grid_thw"][0].tolist()
    assert (h * 16, w * 16) == tuple(clip.frames.shape[2:]) and t == len(times)
    assert decoded.count("<|video_pad|>") == t * h * w // 4
    shuffled = render_prompt(
        processor, task.messages(task.temporal_variant(sample)), task.temporal_variant(sample), cfg
    )
    assert shuffled.video.indices != clip.indices
    assert torch.equal(shuffled.input_ids, prompt.input_ids)  # the same times: only the pixels move
    assert not torch.equal(shuffled.vision["pixel_values_videos"], prompt.vision["pixel_values_videos"])


def test_qwen25_video_tokens_are_placed_in_time_by_the_seconds_of_each_temporal_patch(video_qa_data):
    """Qwen2.5-VL's mrope puts a temporal patch at seconds x tokens_per_second (2 in its released
    configs); a patch lasts temporal_patch_size / the sampled frames' fps (qwen-vl-utils' fps)."""
    from vlrl.models.batch import collate
    from vlrl.models.loading import pretrained

    cfg = model_cfg("qwen2_5_vl")
    processor, family, task = load_processor(cfg), model_family(cfg), VideoQA()
    sample = next(s for s in task.load(video_qa_data, frame_spec(cfg)).samples if s.video)
    prompt = render_prompt(processor, task.messages(sample), sample, cfg)
    seconds = 2 / prompt.video.sampled_fps
    assert seconds != 1.0  # transformers' value when it is not told
    assert prompt.vision["second_per_grid_ts"].tolist() == pytest.approx([seconds])
    model = pretrained(cfg, checkpoint_path(cfg))
    positions, _ = family.rope_positions(model, collate([prompt], processor.tokenizer.pad_token_id))
    t = prompt.vision["video_grid_thw"][0, 0].item()
    temporal = positions[0, 0, prompt.mm_token_type_ids == 2].view(t, -1)  # (temporal patch, its tokens)
    assert (temporal == temporal[:, :1]).all()
    assert (temporal[:, 0] - temporal[0, 0]).tolist() == [int(i * seconds * 2) for i in range(t)]


def test_qwen25_video_tokens_are_a_second_a_temporal_patch_apart_when_timed_as_video_r1_trains(video_qa_data):
    """model.video.time_from=video_r1: Video-R1's trainer tells the processor no fps, so
    transformers 4.49 assumes 2 and every temporal patch lasts one second (two positions at
    tokens_per_second 2), however the frames were sampled; the frames themselves are unchanged."""
    from dataclasses import replace

    from vlrl.models.batch import collate
    from vlrl.models.loading import pretrained

    cfg = model_cfg("qwen2_5_vl", video=replace(VIDEO, time_from="video_r1"))
    processor, family, task = load_processor(cfg), model_family(cfg), VideoQA()
    sample = next(s for s in task.load(video_qa_data, frame_spec(cfg)).samples if s.video)
    prompt = render_prompt(processor, task.messages(sample), sample, cfg)
    sampled = render_prompt(processor, task.messages(sample), sample, model_cfg("qwen2_5_vl"))
    assert sampled.vision["second_per_grid_ts"].tolist() != pytest.approx([1.0])
    assert prompt.vision["second_per_grid_ts"].tolist() == pytest.approx([1.0])
    assert torch.equal(prompt.vision["pixel_values_videos"], sampled.vision["pixel_values_videos"])
    model = pretrained(cfg, checkpoint_path(cfg))
    positions, _ = family.rope_positions(model, collate([prompt], processor.tokenizer.pad_token_id))
    t = prompt.vision["video_grid_thw"][0, 0].item()
    temporal = positions[0, 0, prompt.mm_token_type_ids == 2].view(t, -1)
    assert (temporal[:, 0] - temporal[0, 0]).tolist() == [2 * i for i in range(t)]


# -- every family x every built-in task --------------------------------------------------------------
@pytest.fixture(scope="session")
def task_data(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """Each built-in task's synthetic data: 4 training and 2 evaluation records."""
    root = tmp_path_factory.mktemp("tasks")
    out = {}
    for name in sorted(builtin_training_tasks()):
        task = task_class(name)()
        folder = root / name.replace("+", "plus")
        train, held_out = folder / f"train{task.data_suffix}", folder / f"eval{task.data_suffix}"
        task.synthesize(train, 4, 0)
        task.synthesize(held_out, 2, 1)
        out[name] = (train, held_out)
    return out


@pytest.fixture(scope="module", params=sorted(family_names()))
def family_setup(request):
    cfg = model_cfg(request.param)
    return cfg, load_processor(cfg)


def vision_tokens_the_processor_counts(processor, family: ModelFamily, sample, prompt) -> tuple[int, int]:
    """Image and video tokens as the processor computes them from the files' own sizes (or the
    size the task squashes them to: classification's 384 x 384)."""
    image_sizes = [(sample.image_size or Image.open(path).size)[::-1] for path in sample.images]
    kwargs = {"images_kwargs": {"min_pixels": 3136, "max_pixels": 50176}}
    video_sizes = None
    if prompt.video is not None:
        video_sizes = [list(prompt.video.frames.shape[:1]) + list(prompt.video.frames.shape[2:])]
        kwargs["videos_kwargs"] = {"size": family.video_size(prompt.video)}
    counts = processor._get_num_multimodal_tokens(image_sizes=image_sizes or None, video_sizes=video_sizes, **kwargs)
    return sum(getattr(counts, "num_image_tokens", None) or []), sum(getattr(counts, "num_video_tokens", None) or [])


@pytest.mark.parametrize("task_name", sorted(builtin_training_tasks()))
def test_every_task_renders_for_every_family_and_its_target_earns_the_reward(family_setup, task_name, task_data):
    cfg, processor = family_setup
    family = model_family(cfg)
    task = make_task(TaskConfig(name=task_name), family.name)
    split = task.load(task_data[task_name][0], frame_spec(cfg))
    assert not split.errors and split.samples
    for sample in split.samples[:2]:
        prompt = render_prompt(processor, task.messages(sample), sample, cfg)
        tokens = processor.tokenizer.convert_tokens_to_ids([family.image_pad, family.video_pad])
        counted = [int((prompt.input_ids == token).sum()) for token in tokens]
        assert counted == list(vision_tokens_the_processor_counts(processor, family, sample, prompt)), sample.source
    targets = [task.target(s) for s in split.samples]  # in the family's frame, read back by the rewards
    for name, values in score(task, targets, split.samples).components.items():
        assert sum(values) / len(values) >= 0.9, (family.name, name, values)


def test_grounding_prompts_follow_the_family_and_task_options_override_them(task_data):
    for name, template in [
        ("qwen2_5_vl", VLM_R1_REC_TEMPLATE),
        ("qwen2_vl", VLM_R1_REC_TEMPLATE),
        ("qwen3_vl", QWEN3_REC_TEMPLATE),
        ("qwen3_5", QWEN3_REC_TEMPLATE),
        ("qwen3_5_moe", QWEN3_REC_TEMPLATE),
    ]:
        for task_name in ("refcoco", "refcoco+", "refcocog"):
            assert make_task(TaskConfig(name=task_name), name).options.prompt_template == template
    mine = make_task(TaskConfig(name="refcoco", options={"prompt_template": "{Question}"}), "qwen3_vl")
    assert mine.options.prompt_template == "{Question}"
    sample = mine.load(task_data["refcoco"][0], frame_spec(model_cfg("qwen3_vl"))).samples[0]
    text = make_task(TaskConfig(name="refcoco"), "qwen3_vl").messages(sample)[0]["content"][1]["text"]
    assert text.endswith(
        'JSON format as {"bbox_2d": [x1, y1, x2, y2]}, with coordinates relative to the image from 0 to 1000.'
    )


def mixture_seed(tasks: int, draws: int) -> int:
    """The first seed whose first `draws` prompts of an equal-weight mixture of `tasks` hold every task."""
    return next(
        seed
        for seed in range(10_000)
        if {source for source, _ in MixtureStream([1] * tasks, [1.0] * tasks, seed).take(draws)} == set(range(tasks))
    )


@pytest.mark.parametrize("name", decoder_families())
def test_every_family_takes_an_sft_step_an_rl_step_and_evaluates_every_task(name, task_data, tmp_path):
    from vlrl.cli import main

    tasks = sorted(builtin_training_tasks())
    # A third more prompts than tasks: a seed among the first few hundred draws every task in them
    # (the first at 15 tasks: 147), and the steps' forwards, most of this test's time, stay small.
    prompts = 4 * len(tasks) // 3
    seed = mixture_seed(len(tasks), prompts)
    config = {
        "extends": str(ROOT / "configs" / "demo" / "base.yaml"),
        "model": {
            "path": f"tiny:{name}",
            "max_pixels": 12544,
            "video": {"max_frames": 4, "min_pixels": 3136, "max_pixels": 12544},
        },
        "mixture": [{"name": t, "train": str(task_data[t][0]), "eval": str(task_data[t][1])} for t in tasks],
        "rollout": {"num_generations": 2, "max_new_tokens": 8},
        "eval": {"every": 1, "limit": 2, "max_new_tokens": 8},
        "trainer": {
            "steps": 1,
            "prompts_per_step": prompts,
            "seed": seed,
            "progress": False,
            "output_dir": str(tmp_path / "rl"),
        },
        "sft": {
            "steps": 1,
            "prompts_per_step": prompts,
            "seed": seed,
            "progress": False,
            "output_dir": str(tmp_path / "sft"),
        },
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    assert main(["sft", "--config", str(path)]) == 0
    assert main(["train", "--config", str(path)]) == 0
    (sft,) = [json.loads(line) for line in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()]
    assert (
        math.isfinite(sft["loss"])
        and sft["grad_norm"] > 0
        and sft["skipped_updates"] == 0
        and sft["skipped_samples"] == 0
    )
    (rl,) = [json.loads(line) for line in (tmp_path / "rl" / "metrics.jsonl").read_text().splitlines()]
    assert math.isfinite(rl["loss"]) and rl["skipped_samples"] == 0
    for task in tasks:
        assert f"{task}/reward" in rl, task  # the RL step drew it (and so did the SFT step: the same stream)
        assert math.isfinite(rl[f"eval/{task}/reward"]), task  # evaluated on its two held-out samples
        assert rl.get(f"eval/{task}/skipped_samples", 0) == 0, task


@pytest.mark.parametrize("name", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5"])
def test_an_exported_processor_states_the_video_sampling_and_only_a_per_frame_size(name):
    """`vlrl export` sets these on the video processor: a frame's pixel limits where its `size` is
    per frame (Qwen2-VL, Qwen2.5-VL); Qwen3-VL's budgets all frames together, so it is left alone."""
    video = VideoConfig(fps=1.0, min_frames=2, max_frames=8, min_pixels=3136, max_pixels=12544)
    settings = family_class(name)().video_processor_settings(video)
    assert settings.pop("size", None) == ({"shortest_edge": 3136, "longest_edge": 12544} if "qwen2" in name else None)
    assert settings == {"fps": 1.0, "min_frames": 2, "max_frames": 8}
    # Video-R1's rule floors a frame's limit at 1.05 x min_pixels (frame_size): so does the exported one
    floored = family_class(name)().video_processor_settings(VideoConfig(min_pixels=12544, max_pixels=12544))
    assert floored.get("size", {}).get("longest_edge") == (13171 if "qwen2" in name else None)
    # a message's max_pixels is capped at qwen-vl-utils' VIDEO_MAX_TOKENS x factor^2: so is the exported one
    family = family_class(name)()
    message = family.video_processor_settings(VideoConfig(max_pixels=10**7, max_pixels_from="message"))
    assert message.get("size", {}).get("longest_edge") == (768 * family.factor**2 if "qwen2" in name else None)


@pytest.mark.parametrize("name", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5"])
def test_the_video_processor_keeps_a_wide_clips_frames_at_their_exact_size(name):
    """Frames come sized as qwen-vl-utils sizes them: the pixel budget the family hands its
    processor (`video_size`) must leave a clip of 4 frames of 2 x 4 merged tokens (not square) as
    it is: 2 temporal patches of 4 x 8 patches."""
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    from vlrl.models.prompting import uncapped
    from vlrl.vision.video import Video

    family = family_class(name)()
    shape = dict(patch_size=family.patch_size, merge_size=2, temporal_patch_size=2)
    processor = (Qwen2VLVideoProcessor if "qwen2" in name else Qwen3VLVideoProcessor)(**shape)
    side = 2 * family.patch_size  # one merged token's side
    frames = torch.full((4, 3, 2 * side, 4 * side), 128.0)
    clip = Video(frames=frames, video_fps=2.0, total_frames=8, indices=[0, 2, 4, 6])
    kwargs = {**family.video_processor_kwargs(clip), **uncapped(type("P", (), {"video_processor": processor}))}
    out = processor(videos=[clip.frames], return_tensors="pt", **kwargs)
    assert out["video_grid_thw"].tolist() == [[2, 4, 8]]


def test_only_the_checkpoint_folders_own_name_says_the_family_not_the_folders_above_it():
    """Name hints are fragments of the checkpoint folder's name (ModelFamily.name_hints): a
    Qwen3-VL checkpoint kept under a Qwen2-VL experiments folder is Qwen3-VL, and a folder named
    for nothing is Qwen2.5-VL wherever it lies."""
    assert model_family(ModelConfig(path="/runs/qwen2-vl-experiments/Qwen3-VL-8B-Instruct")).name == "qwen3_vl"
    assert model_family(ModelConfig(path="/runs/qwen2_vl_sweeps/step-100")).name == "qwen2_5_vl"


def test_an_unknown_tiny_build_and_a_model_of_no_family_are_refused_naming_the_known_ones():
    from types import SimpleNamespace

    from vlrl.models.families import family_of_model, tiny_spec

    with pytest.raises(ConfigError, match=r"unknown tiny model 'qwen9'; expected one of .*qwen2_vl-h32.*qwen3_vl_moe"):
        tiny_spec("tiny:qwen9")
    llava = SimpleNamespace(config=SimpleNamespace(model_type="llava"))
    with pytest.raises(
        ConfigError,
        match=r"model of type 'llava' belongs to no model family; "
        r"supported: qwen2_5_vl, qwen2_vl, qwen3_5, qwen3_5_moe, qwen3_vl, qwen3_vl_moe \(or set model.family\)",
    ):
        family_of_model(llava)


def test_a_family_derived_from_another_without_builds_of_its_own_takes_none_of_its_parents(monkeypatch):
    """tiny_builds: each family's own declaration; a registered subclass of Qwen2.5-VL that
    declares none leaves tiny:qwen2_5_vl to Qwen2.5-VL and adds no build."""
    from vlrl.models.qwen2_5_vl import Qwen25VL

    class Derived(Qwen25VL):
        name = "derived"

    with registered_family(monkeypatch, "derived", Derived):
        builds = tiny_builds()
        assert {spec.arch for spec in builds.values()} == {
            "qwen2_vl",
            "qwen2_5_vl",
            "qwen3_vl",
            "qwen3_vl_moe",
            "qwen3_5",
            "qwen3_5_moe",
        }
        assert builds["qwen2_5_vl"].arch == builds["qwen2_5_vl-h32"].arch == "qwen2_5_vl"
