"""What every built-in task promises, checked on its own synthetic data: the data loads, the
prompt renders, its SFT target earns the reward, any text scores in [0, 1] without raising."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vlrl.data.records import FrameSpec
from vlrl.tasking.registry import builtin_training_tasks, task_class
from vlrl.tasking.scoring import MAX_COMPLETION_CHARS, score

ADVERSARIAL = [
    "",
    " " * 10,
    "<think>" * 50_000,
    "<think>" + "</think>" * 20_000 + "<answer>",
    "<think>a</think><answer>" + "{" * 100_000 + "[1,2,3,4]" + "}" * 100_000 + "</answer>",
    "<answer>" + "[" * 200_000 + "</answer>",
    "<answer>[" + "1" * 100_000 + ", 2, 3, 4]</answer>",
    "<answer>[nan, inf, -inf, 1e999]</answer>",
    '<answer>{"bbox_2d": [NaN, Infinity, 1, 2]}</answer>',
    '<answer>[{"bbox_2d": [1e308, -1e308, 1e308, 1e308], "label": "x"}]</answer>',
    "<answer>__import__('pathlib').Path('PWNED').write_text('x')</answer>",
    "<answer>[1,2,3,4]" * 100_000,
    "\x00\udcff\U0010ffff" * 1000 + "<answer>[1, 2, 3, 4]</answer>",
    "<think>" + "a" * (MAX_COMPLETION_CHARS - 40) + "</think><answer>{[1, 2, 3, 4]}</answer>",
]


@pytest.fixture(scope="module", params=sorted(builtin_training_tasks()))
def task_and_samples(request, tmp_path_factory):
    task = task_class(request.param)()
    path = tmp_path_factory.mktemp(request.param.replace("+", "plus")) / f"train{task.data_suffix}"
    task.synthesize(path, size=8, seed=0)
    split = task.load(path, FrameSpec("absolute", 3136, 50176))
    return task, split


def test_synthetic_data_loads_without_errors(task_and_samples):
    task, split = task_and_samples
    assert not split.errors
    assert len(split.samples) == 8
    assert all(s.task == task.name and s.source for s in split.samples)


def test_prompt_renders_one_vision_entry_per_sample_image_and_video(task_and_samples, tiny_qwen25):
    from vlrl.config import ModelConfig
    from vlrl.models.loading import load_processor
    from vlrl.models.prompting import render_prompt

    task, split = task_and_samples
    model = ModelConfig(path=str(tiny_qwen25), min_pixels=3136, max_pixels=50176)
    processor = load_processor(model)
    for sample in split.samples[:3]:
        messages = task.messages(sample)
        types = [c.get("type") for m in messages if isinstance(m["content"], list) for c in m["content"]]
        assert types.count("image") == len(sample.images) and types.count("video") == bool(sample.video)
        prompt = render_prompt(processor, messages, sample, model)
        assert prompt.text.count("<|vision_start|>") == len(sample.images) + bool(sample.video)


def test_the_sft_target_earns_the_reward(task_and_samples):
    task, split = task_and_samples
    targets = [task.target(s) for s in split.samples]
    scores = score(task, targets, split.samples)
    for name, values in scores.components.items():
        assert sum(values) / len(values) >= 0.9, (name, values)
    metrics = task.metrics(split.samples, targets)
    assert metrics and all(isinstance(v, float) and math.isfinite(v) for v in metrics.values())


@pytest.mark.parametrize("index", range(len(ADVERSARIAL)))
def test_adversarial_completions_score_in_bounds_and_run_nothing(task_and_samples, index, tmp_path, monkeypatch):
    task, split = task_and_samples
    monkeypatch.chdir(tmp_path)
    all_rewards = type(task)(rewards={name: 1.0 for name in task.reward_functions()})
    start = time.perf_counter()
    scores = score(all_rewards, [ADVERSARIAL[index]], split.samples[:1])
    assert time.perf_counter() - start < 10.0  # a crafted string must not stall a training step
    assert not scores.failures, scores.failures  # no reward raised on it
    for name, values in scores.components.items():
        assert 0.0 <= values[0] <= 1.0, (name, values)
    assert not Path("PWNED").exists()
    task.metrics(split.samples[:1], [ADVERSARIAL[index]])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.one_of(
            st.text(max_size=200),
            st.sampled_from(
                ["<think>", "</think>", "<answer>", "</answer>", "[", "]", "{", "}", ",", " ", '"', ":", "1", "99999"]
            ),
            st.integers(-(10**30), 10**30).map(str),
        ),
        max_size=40,
    ).map("".join)
)
def test_any_text_scores_in_bounds(task_and_samples, text):
    task, split = task_and_samples
    all_rewards = type(task)(rewards={name: 1.0 for name in task.reward_functions()})
    scores = score(all_rewards, [text], split.samples[:1])
    assert not scores.failures
    for values in scores.components.values():
        assert 0.0 <= values[0] <= 1.0
