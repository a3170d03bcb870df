"""Model outputs are untrusted: any completion scores in [0, 1] per component, never raises,
never runs code, and takes bounded time."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tasks.refcoco import RefCOCO
from vlrl.data import FrameSpec, load_split
from vlrl.scoring import MAX_COMPLETION_CHARS, score

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
    "<answer>__import__('pathlib').Path('PWNED').write_text('x')</answer>",
    "<answer>[1,2,3,4]" * 100_000,
    "\x00\udcff\U0010ffff" * 1000 + "<answer>[1, 2, 3, 4]</answer>",
    "<think>" + "a" * (MAX_COMPLETION_CHARS + 1) + "</think><answer>{[1, 2, 3, 4]}</answer>",
]


@pytest.fixture(scope="module")
def samples(rec_data: Path):
    return load_split(rec_data, RefCOCO().build_sample, FrameSpec("absolute", 3136, 50176)).samples


def _check(task, completions, samples):
    scores = score(task, completions, [samples[0]] * len(completions))
    for name, values in scores.components.items():
        assert all(0.0 <= v <= 1.0 for v in values), (name, values)
    return scores


@pytest.mark.parametrize("index", range(len(ADVERSARIAL)))
def test_adversarial_completion_scores_zero_quickly_and_runs_nothing(index, samples, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    task = RefCOCO(rewards={"format": 1.0, "iou": 1.0, "iou_squared": 1.0})
    start = time.perf_counter()
    scores = _check(task, [ADVERSARIAL[index]], samples)
    assert time.perf_counter() - start < 10.0  # a crafted string must not stall a training step
    assert not Path("PWNED").exists()
    assert scores.total[0] <= 1.0  # none of these is a correct answer with the right format


def test_completions_longer_than_the_limit_score_zero_and_are_counted(samples):
    task = RefCOCO()
    good = '<think>x</think><answer>{"bbox_2d": [1, 2, 3, 4]}</answer>'
    scores = _check(task, [good + " " * MAX_COMPLETION_CHARS, good], samples)
    assert scores.oversized == 1
    assert scores.components["format"] == [0.0, 1.0]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.one_of(
            st.text(max_size=300),
            st.sampled_from(["<think>", "</think>", "<answer>", "</answer>", "[", "]", "{", "}", ",", " ", "1", "999999"]),
            st.integers(-(10**30), 10**30).map(str),
        ),
        max_size=40,
    ).map("".join)
)
def test_any_text_scores_within_bounds(samples, text):
    _check(RefCOCO(rewards={"format": 1.0, "iou": 1.0, "iou_squared": 1.0, "iou_threshold": 1.0}), [text], samples)


def test_a_reward_that_raises_scores_zero_and_is_counted(samples):
    class Fragile(RefCOCO):
        def reward_functions(self):
            fns = super().reward_functions()

            def fragile(completions, batch):
                return [1.0 if c == "ok" else 1 / 0 for c in completions]

            return {**fns, "fragile": fragile}

    scores = score(Fragile(rewards={"fragile": 1.0}), ["ok", "boom", "ok"], [samples[0]] * 3)
    assert scores.components["fragile"] == [1.0, 0.0, 1.0]
    assert scores.failures == {"fragile": 1}
