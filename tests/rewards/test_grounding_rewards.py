"""RefCOCO rewards: VLM-R1's IoU and format definitions, in both model frames, on hand-computed cases."""

from __future__ import annotations

import pytest
from PIL import Image

from rewards.format import think_answer, vlm_r1_rec
from rewards.grounding import box_center_inside, iou_continuous, iou_vlm_r1, parse_answer_box
from tasks.refcoco import RefCOCO
from vlrl.data.records import FrameSpec, RecordContext


def answer(box: str) -> str:
    return f'<think>looking</think>\n<answer>{{"bbox_2d": {box}}}</answer>'


@pytest.mark.parametrize(
    "box1,box2,expected",
    [
        ([0, 0, 10, 10], [0, 0, 10, 10], 1.0),
        ([0, 0, 10, 10], [5, 5, 15, 15], 25 / 175),
        ([0, 0, 10, 10], [20, 20, 30, 30], 0.0),
        ([0, 0, 10, 10], [9, 0, 19, 10], 0.0),  # one pixel of overlap is none in VLM-R1's convention
        ([5, 5, 5, 5], [5, 5, 5, 5], 0.0),  # zero union: VLM-R1 divides by zero and scores 0
    ],
)
def test_vlm_r1_iou_on_hand_computed_boxes(box1, box2, expected):
    assert iou_vlm_r1(box1, box2) == pytest.approx(expected, abs=1e-12)


def test_continuous_iou_counts_thin_overlaps():
    assert iou_continuous([0, 0, 10, 10], [9, 0, 19, 10]) == pytest.approx(10 / 190)
    assert iou_continuous([0, 0, 10, 10], [5, 5, 15, 15]) == pytest.approx(25 / 175)


@pytest.mark.parametrize(
    "completion,expected",
    [
        (answer("[1, 2, 3, 4]"), [1, 2, 3, 4]),
        ("<answer>first [7,8,9,10] then [1,2,3,4]</answer>", [7, 8, 9, 10]),
        ("[1, 2, 3, 4] outside the answer", None),
        ("<answer>[1.5, 2, 3, 4]</answer>", None),  # VLM-R1 reads integers only
        ("<answer>[-1, 2, 3, 4]</answer>", None),
        ("<answer>[" + "9" * 5000 + ", 1, 2, 3]</answer>", None),  # too many digits to be a coordinate
    ],
)
def test_box_parsing_follows_vlm_r1(completion, expected):
    assert parse_answer_box(completion) == expected


def test_format_rewards():
    assert think_answer("<think>a</think> <answer>b</answer>") == 1.0
    assert think_answer("<think>a</think><answer>b</answer> and more") == 0.0
    assert think_answer("<answer>b</answer>") == 0.0
    assert vlm_r1_rec(answer("[1, 2, 3, 4]")) == 1.0
    assert vlm_r1_rec("<think>a</think><answer>[1, 2, 3, 4]</answer>") == 0.0  # no JSON object
    assert vlm_r1_rec(answer("[1.5, 2, 3, 4]")) == 0.0


def _sample(tmp_path, kind: str, width: int, height: int, box: list[float], max_pixels: int):
    Image.new("RGB", (width, height), (128, 128, 128)).save(tmp_path / "im.png")
    record = {"image": "im.png", "problem": "where?", "solution": box, "width": width, "height": height}
    ctx = RecordContext("data.json:1", 0, tmp_path, FrameSpec(kind, 3136, max_pixels))
    return RefCOCO().build_sample(record, ctx)


def test_iou_reward_in_the_qwen25_absolute_frame(tmp_path):
    # 1120x560 with max_pixels 560*280 resizes to exactly half: model pixels = original / 2.
    sample = _sample(tmp_path, "absolute", 1120, 560, [100, 100, 300, 200], max_pixels=560 * 280)
    assert (sample.frame.model_width, sample.frame.model_height) == (560, 280)
    task = RefCOCO()
    iou = task.reward_functions()["iou"]
    assert iou([answer("[50, 50, 150, 100]")], [sample]) == [1.0]
    # [100, 50, 200, 100] -> original [200, 100, 400, 200]: 100x100 shared of 200x100 each.
    assert iou([answer("[100, 50, 200, 100]")], [sample]) == pytest.approx([10000 / 30000])
    assert task.target(sample).endswith('<answer>{"bbox_2d": [50, 50, 150, 100]}</answer>')


def test_iou_reward_in_the_qwen2_norm1000_frame(tmp_path):
    sample = _sample(tmp_path, "norm1000", 1120, 560, [112, 56, 336, 168], max_pixels=12845056)
    task = RefCOCO()
    iou = task.reward_functions()["iou"]
    assert iou([answer("[100, 100, 300, 300]")], [sample]) == [1.0]
    assert iou([answer("[50, 50, 150, 100]")], [sample]) == [0.0]
    assert task.predict(answer("[100, 100, 300, 300]"), sample) == [112.0, 56.0, 336.0, 168.0]


def test_reward_variants_derive_from_iou(tmp_path):
    sample = _sample(tmp_path, "absolute", 1120, 560, [100, 100, 300, 200], max_pixels=560 * 280)
    task = RefCOCO(options={"iou_threshold": 0.3})
    fns = task.reward_functions()
    completion = [answer("[100, 50, 200, 100]")]
    assert fns["iou_squared"](completion, [sample]) == pytest.approx([1 / 9])
    assert fns["iou_threshold"](completion, [sample]) == [1.0]
    assert RefCOCO().reward_functions()["iou_threshold"](completion, [sample]) == [0.0]


def test_refcoco_metrics_on_fixed_predictions(tmp_path):
    sample = _sample(tmp_path, "absolute", 1120, 560, [100, 100, 300, 200], max_pixels=560 * 280)
    completions = [
        answer("[50, 50, 150, 100]"),
        answer("[110, 50, 210, 100]"),
        "no box at all",
        answer("[50, 50, 140, 100]"),
    ]
    metrics = RefCOCO().metrics([sample] * 4, completions)
    # Original-frame boxes: [100,100,300,200] (IoU 1), [220,100,420,200] (80x100 shared: 8000/32000 = 0.25,
    # center (320, 150) outside), none (0), [100,100,280,200] (180x100 / 200x100 = 0.9).
    assert metrics["acc@0.5"] == 0.5
    assert metrics["acc@0.2"] == 0.75
    assert metrics["acc@0.9"] == 0.25  # 0.9 is not > 0.9
    assert metrics["mean_iou"] == pytest.approx((1 + 0.25 + 0 + 0.9) / 4)
    assert metrics["center_acc"] == 0.5
    assert metrics["parse_rate"] == 0.75
    assert metrics["format_rate"] == 0.75


@pytest.mark.parametrize(
    "pred, inside",
    [([0, 50, 10, 60], False), ([0, 2, 10, 8], True), ([200, 2, 210, 8], False), ([90, 0, 110, 20], True)],
    ids=["below", "inside", "right", "on the edge"],
)
def test_a_box_center_is_inside_a_wide_target_only_within_its_height_and_width(pred, inside):
    assert box_center_inside(pred, [0, 0, 100, 10]) is inside  # 100 wide, 10 tall
