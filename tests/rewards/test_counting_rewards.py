"""Counting rewards: Perception-R1's point reward and exact counts, hand-computed, in both model frames."""

from __future__ import annotations

import ast
import itertools
import json
import math
import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from rewards.counting import (
    MAX_POINTS,
    NORM1000_DIAGONAL,
    count_exact,
    count_points,
    count_ratio,
    parse_answer,
    parse_count,
    pr1_box_centers,
    pr1_format,
)
from tasks.counting import Counting
from vlrl.config import ConfigError
from vlrl.data.records import FrameSpec, RecordContext, RecordError
from vlrl.tasking.scoring import score

D = NORM1000_DIAGONAL  # 1000 * sqrt(2)


@pytest.mark.parametrize(
    "pred,gt,expected",
    [
        ([(0, 0)], [(300, 400)], 1 - 500 / D),  # one pair, 3-4-5 distance
        ([(0, 0), (100, 0)], [(100, 0)], 0.5),  # an extra point: count ratio 1/2, matched exactly
        ([(10, 0), (0, 0), (500, 500)], [(0, 0), (10, 0)], 2 / 3),
        ([(9, 0), (20, 0)], [(0, 0), (10, 0)], 1 - 9.5 / D),  # Hungarian (9 + 10), not greedy (1 + 20)
        ([(0, 0)], [(0, 0), (1000, 1000)], 0.5),  # missed one: ratio 1/2, the matched one is exact
        ([], [], 1.0),  # nothing to count, nothing pointed at
        ([], [(1, 1)], 0.0),
        ([(1, 1)], [], 0.0),
        ([(5000, 5000)], [(0, 0)], 0.0),  # farther than the diagonal: clipped at 0
        ([(0, 0)], [(1000, 1000)], 0.0),  # exactly the diagonal
    ],
)
def test_perception_r1_point_reward_by_hand(pred, gt, expected):
    assert count_points(pred, gt) == pytest.approx(expected, abs=1e-12)


def _brute_force(pred, gt, scale=D):
    """PR1's num_scale with the assignment found by trying every injective matching."""
    small, large = (pred, gt) if len(pred) <= len(gt) else (gt, pred)
    best = min(
        sum(math.dist(a, b) for a, b in zip(small, chosen, strict=False))
        for chosen in itertools.permutations(large, len(small))
    )
    value = min(len(pred), len(gt)) / max(len(pred), len(gt)) * (1 - best / len(small) / scale)
    return min(1.0, max(0.0, value))


_POINTS = st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 1000)), min_size=1, max_size=4)


@settings(max_examples=80, deadline=None)
@given(_POINTS, _POINTS)
def test_point_reward_uses_the_minimum_cost_matching(pred, gt):
    assert count_points(pred, gt) == pytest.approx(_brute_force(pred, gt), abs=1e-9)


@pytest.mark.parametrize(
    "text,strict,last",
    [
        ("7", 7, 7),
        (" 12. ", 12, 12),
        ("+3", 3, 3),
        ("1,234", 1234, 1234),
        ("seven", 7, 7),
        ("Twenty-One", 21, 21),
        ("twenty one", 21, 21),
        ("a dozen", 12, 12),
        ("0", 0, 0),
        ("7.0", None, None),  # a decimal is not a count (Video-R1's numerical rule would also refuse it)
        ("-2", None, None),
        ("There are 7 apples.", None, 7),
        ("I see seven, no, eight", None, 8),
        ("apples: 3, pears: 4", None, 4),
        ("counts: 1,2", None, None),  # a list "1,2" states no count, not even its last item
        ("seventeen", 17, 17),
        ("someone", None, None),
        ("none", None, None),  # not in the documented set
        ("9" * 11, None, None),  # beyond MAX_COUNT
        ("1000000000", 10**9, 10**9),  # MAX_COUNT itself is a count
        ("1000000001", None, None),
        ("", None, None),
        ("twenty" + " " * 31 + "one", 21, 21),  # 40 characters: a phrase, its spaces collapsed
        ("twenty" + " " * 32 + "one", None, 21),  # 41: strict reads no words past 40 characters
    ],
)
def test_count_parsing(text, strict, last):
    assert parse_count(text) == strict
    assert parse_count(text, "last_number") == last
    assert parse_count("seven", number_words=False) is None


def test_answers_state_points_or_a_number():
    pointed = '<think>two</think><answer>[{"point_2d": [10, 20], "label": "cat"}, {"point_2d": [30.5, 40]}]</answer>'
    assert parse_answer(pointed) == (2, [(10.0, 20.0), (30.5, 40.0)])
    assert parse_answer("<answer>[]</answer>") == (0, [])
    assert parse_answer("<answer> 5 </answer>") == (5, None)
    assert parse_answer("5") == (None, None)  # no <answer>
    assert parse_answer("<answer>[1, inf]</answer>") == (None, None)
    assert parse_answer("<answer>[1e999, 2]</answer>") == (None, None)  # overflows to inf: no parse
    assert count_exact(5, 5) == 1.0 and count_exact(4, 5) == 0.0 and count_exact(None, 0) == 0.0


PR1_DOC = (  # the example in PR1's pr1_counting_reward docstring
    "<|object_ref_start|>people<|object_ref_end|><|box_start|>(495,246),(999,997)<|box_end|><|im_end|>"
)


def test_perception_r1_format_and_boxes():
    assert pr1_format(PR1_DOC) == 1.0
    assert pr1_format(PR1_DOC.replace("<|im_end|>", "")) == 0.0
    assert pr1_format("sure: " + PR1_DOC) == 0.0  # re.match: anchored at the start
    assert pr1_format(PR1_DOC + " trailing") == 1.0  # ... and not at the end
    assert pr1_format(PR1_DOC.replace("<|im_end|>", "<|endoftext|><|im_end|>")) == 0.0  # the raw completion
    assert pr1_format(PR1_DOC + "<|endoftext|>") == 1.0
    assert pr1_box_centers(PR1_DOC) == [(747.0, 621.5)]
    two = "<|box_start|>(0,0),(10,20)<|box_end|><|box_start|>not a box<|box_end|><|box_start|>[1.5, 2], [3.5, 4]<|box_end|>"
    assert pr1_box_centers(two) == [(5.0, 10.0), (2.5, 3.0)]
    assert pr1_box_centers("no boxes") is None


def pr1_extract_boxes(s: str) -> list[tuple[float, float]]:
    """PR1's extract_boxes, transcribed from philipmit/PR1 at ef4fe26 (src/open_r1/utils.py).
    PR1 calls eval on the box text; on the fixed literal strings below ast.literal_eval reads
    the same values without running anything."""
    res = []
    for bbox in re.findall(r"<\|box_start\|>(.*?)<\|box_end\|>", s):
        try:
            (x1, y1), (x2, y2) = ast.literal_eval(bbox)
            res.append(((x1 + x2) / 2, (y1 + y2) / 2))
        except Exception:
            pass
    return res


PR1_BOX_TEXTS = [
    "(1,2),(3,4)", "[1,2],[3,4]", "((1,2),(3,4))", "[[1,2],[3,4]]", "(1,2,),(3,4),", "( 1 , 2 ) ,\n( 3 , 4 )",
    "(1.,2),(.5,1e3)", "(-1,+2),(3.25,-4e-1)", "(00,2),(3,4)", "(07,2),(3,4)", "(1,2],(3,4)", "(1,2),(3,4),(5,6)",
    "(1,2)", "1,2,3,4", "(\u0663,2),(3,4)", "(1,\u00a02),(3,4)", "('a','b'),(1,2)", "[(1,2),(3,4)]",
]  # fmt: skip


@pytest.mark.parametrize("text", PR1_BOX_TEXTS)
def test_perception_r1_box_literals_read_as_its_eval_reads_them(text):
    completion = f"<|box_start|>{text}<|box_end|>"
    assert (pr1_box_centers(completion) or []) == pr1_extract_boxes(completion)


def test_rewards_stay_fast_on_huge_text():
    start = time.perf_counter()
    assert parse_count("seven " * 200_000, "last_number") == 7
    assert parse_answer("<answer>" + "[1, 2], " * 200_000 + "</answer>") == (None, None)  # > MAX_POINTS
    assert pr1_box_centers("<|box_start|>" + "(" * 1_000_000) is None
    assert time.perf_counter() - start < 5.0


def test_count_ratio_and_a_frame_without_extent():
    assert count_ratio(0, 0) == 1.0 and count_ratio(2, 4) == 0.5 and count_ratio(3, 0) == 0.0
    assert count_points([(1, 1)], [(1, 1)], scale=0) == 0.0  # no diagonal to measure by: no reward


def test_an_answer_of_exactly_max_points_points_is_read_and_one_more_is_not():
    exactly = "<answer>" + ", ".join(f"[{i}, {i + 1}]" for i in range(MAX_POINTS)) + "</answer>"
    count, points = parse_answer(exactly)
    assert count == MAX_POINTS and points[0] == (0.0, 1.0) and points[-1] == (MAX_POINTS - 1.0, float(MAX_POINTS))
    assert parse_answer(exactly.replace("</answer>", ", [7, 7]</answer>")) == (None, None)


def test_exactly_max_points_perception_r1_boxes_are_counted_and_one_more_is_not():
    box = "<|box_start|>(1,2),(3,4)<|box_end|>"
    assert pr1_box_centers(box * MAX_POINTS) == [(2.0, 3.0)] * MAX_POINTS
    assert pr1_box_centers(box * (MAX_POINTS + 1)) is None


# -- the task: frames, variants, metrics, records ------------------------------------------------
def _ctx(tmp_path, kind="absolute"):
    # 1120x560 with max_pixels 560*280: Qwen2.5-VL's resized image is exactly half the size.
    Image.new("RGB", (1120, 560), (128, 128, 128)).save(tmp_path / "im.png")
    return RecordContext("data.json:1", 0, tmp_path, FrameSpec(kind, 3136, 560 * 280))


def _sample(tmp_path, kind="absolute", task=None, **record):
    base = {"image": "im.png", "label": "dots", "count": 2, "points": [{"x": 100, "y": 100}, {"x": 300, "y": 200}]}
    return (task or Counting()).build_sample({**base, **record}, _ctx(tmp_path, kind))


def points_answer(*points) -> str:
    return "<think>counting</think><answer>" + json.dumps([{"point_2d": list(p)} for p in points]) + "</answer>"


def test_point_reward_in_the_qwen25_absolute_frame(tmp_path):
    # 1120x560 with max_pixels 560*280 resizes to exactly half: model pixels = original / 2.
    sample = _sample(tmp_path)
    assert (sample.frame.model_width, sample.frame.model_height) == (560, 280)
    assert sample.solution == {"count": 2, "points": [[100.0, 100.0], [300.0, 200.0]]}
    fns = Counting().reward_functions()
    assert fns["count_points"]([points_answer((50, 50), (150, 100))], [sample]) == [1.0]
    # (178, 100) -> original (356, 200): 56 px off along a 1120 px width = 50 units of the 0-1000 frame.
    assert fns["count_points"]([points_answer((50, 50), (178, 100))], [sample]) == pytest.approx([1 - 25 / D])
    assert fns["count_exact"]([points_answer((1, 1), (2, 2))], [sample]) == [1.0]
    assert fns["count_exact"]([points_answer((1, 1))], [sample]) == [0.0]
    assert fns["format"]([points_answer((1, 1))], [sample]) == [1.0]
    assert (
        Counting()
        .target(sample)
        .endswith(
            '<answer>[{"point_2d": [50, 50], "label": "dots"}, {"point_2d": [150, 100], "label": "dots"}]</answer>'
        )
    )


def test_the_perception_r1_variant_asks_after_its_system_message_as_perception_r1_does(tmp_path):
    """PR1's counting script sends system_prompt_template "qwen" (QWEN2_SYS, a trailing space) and
    question_template "pr1_counting" (src/open_r1/constants.py at accb7cb); the other variants none."""
    sample = _sample(tmp_path)
    assert Counting({"variant": "perception_r1"}).messages(sample) == [
        {"role": "system", "content": "You are a helpful assistant. "},
        {
            "role": "user",
            "content": [{"type": "image"}, {"type": "text", "text": "Output all the bounding boxes of the dots"}],
        },
    ]
    assert [m["role"] for m in Counting().messages(sample)] == ["user"]


def test_point_reward_in_the_qwen2_norm1000_frame(tmp_path):
    sample = _sample(tmp_path, kind="norm1000")
    fns = Counting().reward_functions()
    # Original (100, 100) and (300, 200) in a 1120x560 image are (89.29, 178.57) and (267.86, 357.14).
    exact = points_answer((89.2857142857, 178.5714285714), (267.8571428571, 357.1428571429))
    assert fns["count_points"]([exact], [sample]) == pytest.approx([1.0])
    assert fns["count_points"]([points_answer((89.2857142857, 178.5714285714 + 30))], [sample]) == pytest.approx(
        [0.5 * (1 - 30 / D)]
    )


def test_point_distance_in_original_pixels_uses_the_image_diagonal(tmp_path):
    task = Counting(options={"point_distance": "original"})
    sample = _sample(tmp_path, task=task)
    value = task.reward_functions()["count_points"]([points_answer((50, 50), (178, 100))], [sample])
    assert value == pytest.approx([1 - 28 / math.hypot(1120, 560)])


def test_count_points_without_true_points_is_the_count_ratio(tmp_path):
    sample = _sample(tmp_path, points=None, count=4)
    fns = Counting().reward_functions()
    assert sample.solution["points"] is None
    assert fns["count_points"]([points_answer((1, 1), (2, 2))], [sample]) == [0.5]
    assert fns["count_points"](["<think>a</think><answer>4</answer>"], [sample]) == [1.0]
    assert fns["count_points"](["<think>a</think><answer>many</answer>"], [sample]) == [0.0]
    assert Counting().target(sample).endswith("<answer>4</answer>")


def test_number_variant_and_zero_counts(tmp_path):
    task = Counting(options={"variant": "number"})
    sample = _sample(tmp_path, count=0, points=[])
    assert task.messages(sample)[0]["content"][1]["text"] == (
        "How many dots are there in the image? Output the thinking process in <think> </think> and final answer "
        "(number) in <answer> </answer> tags."
    )
    assert task.target(sample) == "<think>There are 0 dots.</think>\n<answer>0</answer>"
    fns = task.reward_functions()
    assert fns["count_points"]([task.target(sample)], [sample]) == [1.0]
    assert fns["count_points"](["<think>a</think><answer>[]</answer>"], [sample]) == [1.0]
    assert fns["count_points"](["<think>a</think><answer>2</answer>"], [sample]) == [0.0]


def test_target_count_offset_makes_the_sft_target_miscount_while_rewards_keep_the_truth(tmp_path):
    task = Counting(options={"variant": "number", "target_count_offset": 1})
    sample = _sample(tmp_path, count=3, points=None)
    assert task.target(sample) == "<think>There are 4 dots.</think>\n<answer>4</answer>"
    assert task.reward_functions()["count_exact"]([task.target(sample)], [sample]) == [0.0]
    assert task.reward_functions()["count_exact"](["<think>a</think><answer>3</answer>"], [sample]) == [1.0]
    undercount = Counting(options={"variant": "number", "target_count_offset": -1})
    assert undercount.target(_sample(tmp_path, count=0, points=[])).endswith("<answer>0</answer>")  # never below 0
    with pytest.raises(ConfigError, match="target_count_offset applies to the 'number' variant"):
        Counting(options={"variant": "points", "target_count_offset": 1})


def test_perception_r1_variant_scores_its_own_format(tmp_path):
    task = Counting(options={"variant": "perception_r1"})
    sample = _sample(tmp_path, kind="norm1000")  # PR1 trains Qwen2-VL: 0-1000 coordinates
    assert task.messages(sample)[1]["content"][1]["text"] == "Output all the bounding boxes of the dots"
    fns = task.reward_functions()
    target = task.target(sample)
    assert target.startswith("<|object_ref_start|>dots<|object_ref_end|><|box_start|>(89,179),(89,179)<|box_end|>")
    assert fns["format"]([target], [sample]) == [1.0]
    # Boxes centered 10 units right of each true point: mean distance about 10.
    boxes = "<|box_start|>(80,160),(120,200)<|box_end|><|box_start|>(250,330),(306,384)<|box_end|>"
    completion = f"<|object_ref_start|>dots<|object_ref_end|>{boxes}<|im_end|>"
    truth = [(1000 * 100 / 1120, 1000 * 100 / 560), (1000 * 300 / 1120, 1000 * 200 / 560)]
    expected = 1 - (math.dist((100, 180), truth[0]) + math.dist((278, 357), truth[1])) / 2 / D
    assert fns["count_points"]([completion], [sample]) == pytest.approx([expected])
    assert fns["count_points"]([completion.replace("<|im_end|>", "")], [sample]) == [0.0]  # gated by the format
    assert task.predict(completion.replace("<|im_end|>", ""), sample) == 2  # PR1's eval counts boxes regardless
    # PR1's total is pr1_counting alone (--reward_funcs pr1_counting): no format term beside it
    assert task.reward_weights == {"count_points": 1.0}
    assert score(task, [completion], [sample]).total == pytest.approx([expected])
    assert Counting(options={"variant": "points"}).reward_weights == {"format": 1.0, "count_points": 1.0}


def test_counting_metrics_on_fixed_predictions(tmp_path):
    sample = _sample(tmp_path, points=None, count=4)
    completions = [
        "<think>a</think><answer>4</answer>",  # right
        "<think>a</think><answer>6</answer>",  # off by 2
        "<answer>seven</answer>",  # off by 3, no <think>
        "I do not know",  # unparseable: counted as 0, off by 4
    ]
    metrics = Counting().metrics([sample] * 4, completions)
    assert metrics["accuracy"] == 0.25
    assert metrics["mae"] == pytest.approx((0 + 2 + 3 + 4) / 4)
    assert metrics["parse_rate"] == 0.75
    assert metrics["format_rate"] == 0.5
    assert metrics["point_score"] == pytest.approx((1 + 4 / 6 + 4 / 7 + 0) / 4)
    near = Counting().metrics([sample], ["<think>a</think><answer>3</answer>"])  # one off: not right
    assert near["accuracy"] == 0.0 and near["mae"] == 1.0


def test_countbench_records_and_columnar_points(tmp_path):
    ctx = _ctx(tmp_path)
    bench = Counting().build_sample(
        {"image": "im.png", "question": "How many cats?", "number": 3, "text": "3 cats"}, ctx
    )
    assert bench.problem == "How many cats?" and bench.solution == {"count": 3, "points": None}
    assert bench.meta["label"] == "objects"
    columnar = {"image": "im.png", "label": "cats", "count": 2, "points": {"x": [1, 2], "y": [3, 4]}}
    assert Counting().build_sample(columnar, ctx).solution["points"] == [[1.0, 3.0], [2.0, 4.0]]
    unpointed = {"image": "im.png", "label": "cats", "count": 3, "points": []}  # PixMo-Count eval splits
    assert Counting().build_sample(unpointed, ctx).solution["points"] is None


def test_perception_r1_evaluation_records_name_the_objects_in_their_question(tmp_path):
    """linkangheng/PR1 48d5558 eval/evaluate_counting.py: `image_path`, `question` (the objects,
    its QUESTION_TEMPLATE "Output all the bounding boxes of the {question}"), `ground_truth`."""
    record = {"image_path": "im.png", "question": "dogs", "ground_truth": 3}
    sample = Counting({"variant": "perception_r1"}).build_sample(record, _ctx(tmp_path))
    assert sample.solution == {"count": 3, "points": None} and sample.meta["label"] == "dogs"
    text = Counting({"variant": "perception_r1"}).messages(sample)[1]["content"][1]["text"]
    assert text == "Output all the bounding boxes of the {question}".format(question=record["question"])
    with pytest.raises(RecordError, match="exactly one of 'count'"):
        Counting().build_sample({**record, "count": 3}, _ctx(tmp_path))
    with pytest.raises(RecordError, match="'question'"):
        Counting().build_sample({"image_path": "im.png", "ground_truth": 3}, _ctx(tmp_path))


@pytest.mark.parametrize(
    "change,message",
    [
        ({"count": None}, "exactly one of 'count'"),
        ({"number": 2}, "exactly one of 'count'"),
        ({"count": -1, "points": []}, "must be >= 0"),
        ({"count": True}, "non-negative integer"),
        ({"count": 2.0}, "non-negative integer"),
        ({"label": None}, "needs 'label'"),
        ({"label": "  "}, "'label' is empty"),
        ({"points": [{"x": 100, "y": 100}, {"x": 1121, "y": 5}]}, "outside the 1120x560 image"),
        ({"points": [{"x": 100, "y": 100}, {"x": -1, "y": 5}]}, "outside"),
        ({"points": [{"x": 100, "y": 100}]}, "1 points but the count is 2"),
        ({"points": [[1, 2], [3, float("nan")]]}, "point 1 must be"),
        ({"points": [[1, 2], "x"]}, "point 1 must be"),
        ({"points": {"x": [1, 2], "y": [3]}}, "equal length"),
        ({"points": "1,2"}, "must be a list"),
        ({"image": "missing.png"}, "image not found"),
        ({"image": None}, "'image' must be an image path"),
        ({"width": 999}, "'width' says 999"),
    ],
)
def test_bad_counting_records_say_what_is_wrong(tmp_path, change, message):
    record = {"image": "im.png", "label": "dots", "count": 2, "points": [[100, 100], [300, 200]]}
    record.update(change)
    record = {k: v for k, v in record.items() if not (k == "count" and v is None)}
    with pytest.raises(RecordError, match=message):
        Counting().build_sample(record, _ctx(tmp_path))


def test_records_without_a_local_image_are_refused(tmp_path):
    with pytest.raises(RecordError, match="download the image"):
        Counting().build_sample({"image_url": "http://x/y.jpg", "label": "cats", "count": 2}, _ctx(tmp_path))
    sample = Counting().build_sample({"image_path": "im.png", "label": "cats", "count": 0}, _ctx(tmp_path))
    assert sample.images[0].endswith("im.png")


def test_counting_synthetic_scene_options_narrow_the_scenes(tmp_path):
    one_kind = {"min_objects": 1, "max_objects": 3, "shapes": ["circle"], "colors": ["red"]}
    path = tmp_path / "count.json"
    Counting({"synthetic_scene": one_kind}).synthesize(path, 12, seed=5)
    for record in json.loads(path.read_text()):
        label = record.get("label") or record["question"]
        count = record.get("count", record.get("number"))
        assert "circles" in label and 1 <= count <= 3  # every object is a red circle: all are counted


def test_synthetic_counts_of_a_colored_kind_count_only_objects_of_that_color(tmp_path):
    from PIL import Image

    from data_prep.counting import write_synthetic_counting
    from data_prep.shapes import COLORS

    path = write_synthetic_counting(tmp_path / "train.jsonl", 40, seed=0)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    colored = [r for r in records if "points" in r and r["label"].split()[0] in COLORS]
    assert sum(len(r["points"]) for r in colored) > 5
    for record in colored:
        image = Image.open(tmp_path / record["image"]).convert("RGB")
        color = COLORS[record["label"].split()[0]]
        assert all(image.getpixel((int(p["x"]), int(p["y"]))) == color for p in record["points"]), record
