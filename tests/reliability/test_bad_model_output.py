"""Bad model output, everywhere: every built-in task's reward functions, `predict` and `metrics`,
called directly (no scorer to catch what they raise), take any text - huge numbers, NaN and
infinities, deep nesting, megabyte strings, control characters - and give finite values in
range, in bounded time, without raising. One exception, by design: a math-verify reward
(rewards/math.py) that gives no verdict in VERIFY_SECONDS (`"\\(" * 30000`, `$9^{9^{9^{9}}}$`)
raises TimeoutError, which the scorer counts as a failure scoring 0
(tests/rewards/test_math_rewards.py); its strings are not in FIXED, each costs those seconds."""

from __future__ import annotations

import math
import tempfile
import time
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vlrl.data.records import FrameSpec
from vlrl.tasking.registry import builtin_training_tasks, task_class

SCRATCH = tempfile.TemporaryDirectory(prefix="bad-output-")  # the synthetic data, removed at exit
# Every task, and the options that switch to another parser or rule.
CONFIGS = [
    ("classification", {}),
    ("classification", {"variant": "no_thinking", "match": "normalized"}),
    ("counting", {}),
    ("counting", {"variant": "number", "count_parse": "last_number"}),
    ("counting", {"variant": "perception_r1"}),
    ("detection", {}),
    ("detection", {"answer_parse": "lenient", "format": "think_answer_json", "iou_convention": "continuous"}),
    ("gui_action", {}),
    ("gui_action", {"style": "ui_r1", "parser": "public_regex"}),
    ("gui_grounding", {}),
    ("gui_grounding", {"style": "gui_r1", "parser": "public_regex", "thinking": False}),
    ("jigsaw", {}),
    ("math_vqa", {}),
    ("math_vqa", {"variant": "easyr1_r1v"}),
    ("math_vqa", {"variant": "mm_eureka"}),
    ("math_vqa", {"variant": "lmm_r1"}),
    ("math_vqa", {"variant": "visualthinker"}),
    ("multi_image_grounding", {}),
    ("ocr", {}),
    ("refcoco", {}),
    ("refcoco", {"box_parser": "perception_r1", "iou_convention": "continuous"}),
    ("refcoco+", {}),
    ("refcocog", {"box_parser": "perception_r1", "pr1_untagged_boxes": "model"}),
    ("scene_graph", {}),
    ("sophiavl_r1", {}),
    ("sophiavl_r1", {"scorer": "math"}),
    ("sophiavl_r1", {"scorer": "ocr"}),
    ("sophiavl_r1", {"scorer": "caption"}),
    ("step_reasoning", {}),
    ("video_qa", {}),
    ("video_qa", {"nonfinite": "video_r1"}),
]

NUMBERS = st.one_of(
    st.integers(-(10**40), 10**40).map(str),
    st.integers(300, 450).map(lambda n: "9" * n),  # int() reads it, float() cannot hold it
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(
        ["nan", "NaN", "-nan", "inf", "-inf", "Infinity", "1e999", "-1e999", "1e308", "4e-324", "0x1F", "1_000",
         "\u0663", "\U00010d40", "\uff11", "1.", ".5", "-0", "+7", "07"]
    ),
)  # fmt: skip
TEMPLATES = [
    "<answer>[{0}, {1}, {2}, {3}]</answer>",
    '<answer>{{"bbox_2d": [{0}, {1}, {2}, {3}]}}</answer>',
    '<answer>```json\n[{{"bbox_2d": [{0}, {1}, {2}, {3}], "label": "{4}"}}]\n```</answer>',
    "<answer>[{{'action': 'click', 'point': [{0}, {1}], 'input_text': '{4}'}}]</answer>",
    "<answer>[{{'action': '{4}', 'coordinate': [{0}, {1}]}}]</answer>",
    '<answer>[{{"point_2d": [{0}, {1}]}}, {{"point_2d": [{2}, {3}]}}]</answer>',
    "<|object_ref_start|>{4}<|object_ref_end|><|box_start|>({0},{1}),({2},{3})<|box_end|><|im_end|>",
    "({0}, {1}), ({2}, {3})",
    "<answer>{0} {1} {2} {3}</answer>",
    '<answer>{{"polygon": [[{0}, {1}], [{2}, {3}], [{1}, {0}]]}}</answer>',
    "<answer>{0}</answer>",
]
PIECES = st.sampled_from(
    ["<think>", "</think>", "<answer>", "</answer>", "```json", "```", "[", "]", "{", "}", "(", ")", ",", ":", "'",
     '"', " ", "\n", "None", "A", "<|endoftext|>", "<|box_start|>", "<|box_end|>", "<|im_end|>"]
)  # fmt: skip
CONTROL = st.characters(categories=["Cc", "Cf", "Zl", "Zp", "Zs", "Cs"])
NESTING = st.tuples(st.sampled_from(["[", "{", "(", "[{", "<answer>"]), st.integers(1, 500)).map(lambda t: t[0] * t[1])
FILLED = st.builds(
    lambda t, *values: t.format(*values),
    st.sampled_from(TEMPLATES),
    NUMBERS,
    NUMBERS,
    NUMBERS,
    NUMBERS,
    st.text(max_size=8),
)
TEXTS = st.lists(st.one_of(FILLED, NUMBERS, PIECES, CONTROL, NESTING, st.text(max_size=20)), max_size=12).map("".join)

BIG = "1" + "0" * 400  # int() reads it; no float holds it
FIXED = [
    *(template.format(BIG, 2, 3, 4, "x") for template in TEMPLATES),
    *(template.format("9" * 5000, 2, 3, 4, "x") for template in TEMPLATES),
    "<think>a</think><answer>[nan, inf, -inf, 1e999]</answer>",
    '<think>a</think><answer>```json\n[{"bbox_2d": [NaN, Infinity, 1, 2], "label": "x"}]\n```</answer>',
    "<answer>" + "[" * 100_000 + "</answer>",
    "<answer>" + "{'a': " * 50_000 + "</answer>",
    "\x00\x1c\x1f\u2028\ud800" * 1000,
]
# The scorer scores completions over 65,536 characters 0 without calling a reward; `predict` and
# `metrics` (vlrl eval, vlrl score) see them all.
MEGABYTE = [
    "<think>" + "\x00\x1c\u2028" * 300_000 + "</think><answer>[1, 2, 3, 4]</answer>",
    "<answer>" + "[1, 2], " * 150_000 + "</answer>",
    "<|box_start|>" + "(1,2),(3,4)<|box_end|><|box_start|>" * 40_000 + "'action': 'click' " * 20_000,
]


@cache
def task_and_samples(name: str, options: tuple) -> tuple:
    from pathlib import Path

    task = task_class(name)(
        options=dict(options), rewards={n: 1.0 for n in task_class(name)(dict(options)).reward_functions()}
    )
    path = Path(tempfile.mkdtemp(dir=SCRATCH.name)) / f"train{task.data_suffix}"
    task.synthesize(path, size=4, seed=0)
    split = task.load(path, FrameSpec("absolute", 3136, 50176))
    assert not split.errors and split.samples
    return task, split.samples[:2]


def check(task, samples, text: str) -> None:
    """Every reward in [0, 1] and finite, predict and metrics without raising, metrics finite."""
    for name, fn in task.reward_functions().items():
        for sample in samples:
            value = fn([text], [sample])[0]
            assert isinstance(value, (int, float)) and math.isfinite(value) and 0.0 <= value <= 1.0, (name, value)
    for sample in samples:
        task.predict(text, sample)
    metrics = task.metrics(samples, [text] * len(samples))
    for key, value in metrics.items():
        assert isinstance(value, float) and math.isfinite(value) and value >= -1.0, (key, value)


def _id(config: tuple) -> str:
    name, options = config
    return name + "".join(f"-{v}" for v in options.values())


def test_every_built_in_task_is_among_the_configs():
    """Aliases aside (the same class), a task added without a line here goes unchecked."""
    checked = {task_class(name) for name, _ in CONFIGS}
    assert {name for name in builtin_training_tasks() if task_class(name) not in checked} == set()


@pytest.mark.parametrize("config", CONFIGS, ids=_id)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(text=TEXTS)
def test_any_text_gives_finite_values_in_range(config, text):
    name, options = config
    task, samples = task_and_samples(name, tuple(options.items()))
    check(task, samples, text)


@pytest.mark.parametrize("config", CONFIGS, ids=_id)
def test_huge_numbers_nan_and_deep_nesting_give_finite_values_in_range(config):
    name, options = config
    task, samples = task_and_samples(name, tuple(options.items()))
    for text in FIXED:
        check(task, samples[:1], text)


@pytest.mark.parametrize("config", CONFIGS, ids=_id)
def test_megabyte_completions_end_in_bounded_time(config):
    name, options = config
    task, samples = task_and_samples(name, tuple(options.items()))
    for text in MEGABYTE:
        start = time.perf_counter()
        for sample in samples[:1]:
            task.predict(text, sample)
        assert all(math.isfinite(v) for v in task.metrics(samples[:1], [text]).values())
        # Generous for a busy shared machine; an unbounded parse takes minutes on these.
        assert time.perf_counter() - start < 20.0, (name, text[:40])


def test_a_400_digit_box_is_no_answer_not_an_error():
    task, samples = task_and_samples("refcoco", ())
    completion = f"<think>a</think><answer>[{BIG}, 2, 3, 4]</answer>"
    assert task.predict(completion, samples[0]) is None
    assert task.metrics(samples, [completion] * 2)["parse_rate"] == 0.0
