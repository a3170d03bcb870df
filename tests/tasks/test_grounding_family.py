"""The grounding family beyond one box: several targets (Hungarian-matched IoU), polygon
targets (area IoU), Perception-R1's box parser and IoU², refcoco+ / refcocog synthetic data.
Every expected value is worked out by hand in the comments."""

from __future__ import annotations

import json
import math
import re

import pytest
from PIL import Image

from data_prep.refcoco import write_synthetic_rec
from data_prep.shapes import COLORS, SceneSpec
from rewards.grounding import (
    MAX_BOXES,
    hungarian_mean_iou,
    iou_continuous,
    parse_answer_boxes,
    parse_box_perception_r1,
    parse_boxes_perception_r1,
)
from rewards.polygon import (
    MAX_REPAIR_VERTICES,
    MAX_VERTICES,
    box_geometry,
    coco_geometry,
    geometry_iou,
    parse_answer_shapes,
    polygon_geometry,
)
from tasks.refcoco import RefCOCO, RefCOCOg, RefCOCOPlus
from vlrl.config import ConfigError
from vlrl.data.records import FrameSpec, RecordContext, RecordError

# 1120x560 with max_pixels 560*280 resizes to exactly half: model pixels = original / 2.
HALF = dict(kind="absolute", max_pixels=560 * 280)
NORM = dict(kind="norm1000", max_pixels=12845056)


def answer(inner: str) -> str:
    return f"<think>looking</think>\n<answer>{inner}</answer>"


def boxes_answer(*boxes: list[int]) -> str:
    return answer("[" + ", ".join(f'{{"bbox_2d": {b}}}' for b in boxes) + "]")


def make_sample(tmp_path, solution, segmentation=None, kind="absolute", max_pixels=12845056, task=None):
    image = tmp_path / "im.png"
    if not image.exists():
        Image.new("RGB", (1120, 560), (128, 128, 128)).save(image)
    record = {"image": "im.png", "problem": "where?", "normal_caption": "it", "solution": solution}
    if segmentation is not None:
        record["segmentation"] = segmentation
    ctx = RecordContext("data.json:1", 0, tmp_path, FrameSpec(kind, 3136, max_pixels))
    return (task or RefCOCO()).build_sample(record, ctx)


def rewards(task, completion, sample):
    return {name: fn([completion], [sample])[0] for name, fn in task.reward_functions().items()}


# -- several targets ----------------------------------------------------------------------


def test_hungarian_matching_beats_greedy_on_a_hand_made_matrix():
    m = [[0.9, 0.8], [0.7, 0.0]]
    # Greedy would take 0.9 then 0.0 (mean 0.45); the best assignment is 0.8 + 0.7 = 1.5 over 2.
    score, pairs = hungarian_mean_iou([0, 1], [0, 1], lambda p, t: m[p][t])
    assert score == pytest.approx(0.75)
    assert sorted(pairs) == [(0, 1, 0.8), (1, 0, 0.7)]


@pytest.mark.parametrize(
    "preds,gts,expected",
    [
        ([[0, 0, 10, 10], [20, 0, 30, 10]], [[20, 0, 30, 10], [0, 0, 10, 10]], 1.0),  # order does not matter
        ([[0, 0, 10, 10]], [[0, 0, 10, 10], [20, 0, 30, 10]], 1 / 2),  # a missed target costs
        (
            [[0, 0, 10, 10], [20, 0, 30, 10], [40, 0, 50, 10]],
            [[0, 0, 10, 10], [20, 0, 30, 10]],
            2 / 3,
        ),  # so does an extra box
        ([[0, 0, 10, 10], [0, 0, 10, 10]], [[0, 0, 10, 10], [20, 0, 30, 10]], 1 / 2),  # a box matches one target only
        ([[5, 5, 15, 15], [20, 0, 30, 10]], [[0, 0, 10, 10], [20, 0, 30, 10]], (25 / 175 + 1) / 2),
        ([], [[0, 0, 10, 10]], 0.0),
        ([], [], 1.0),
    ],
)
def test_hungarian_mean_iou_on_hand_computed_boxes(preds, gts, expected):
    assert hungarian_mean_iou(preds, gts, iou_continuous)[0] == pytest.approx(expected)


@pytest.mark.parametrize(
    "completion,expected",
    [
        (boxes_answer([1, 2, 3, 4], [5, 6, 7, 8]), [[1, 2, 3, 4], [5, 6, 7, 8]]),
        (answer("[[1,2,3,4],[5,6,7,8]]"), [[1, 2, 3, 4], [5, 6, 7, 8]]),
        (answer("the first [1, 2, 3, 4] and the second [5, 6, 7, 8]"), [[1, 2, 3, 4], [5, 6, 7, 8]]),
        (answer("[1.5, 2, 3, 4], [5, 6, 7, 8]"), [[5, 6, 7, 8]]),  # integers only, as VLM-R1 reads boxes
        (answer("nothing"), []),
        ("[1, 2, 3, 4] without an answer", None),
        (answer("[1, 2, 3, 4] " * 65), None),  # more boxes than any expression names
    ],
)
def test_parsing_several_boxes(completion, expected):
    assert parse_answer_boxes(completion) == expected


def test_several_targets_in_the_qwen25_absolute_frame(tmp_path):
    sample = make_sample(tmp_path, [[100, 100, 300, 200], [600, 300, 800, 500]], **HALF)
    task = RefCOCO()
    # Model frame is half the original: [50,50,150,100] and [300,150,400,250].
    both = rewards(task, boxes_answer([300, 150, 400, 250], [50, 50, 150, 100]), sample)
    assert both["iou"] == 1.0 and both["multi_iou"] == 1.0 and both["iou_squared"] == 1.0
    one = rewards(task, boxes_answer([50, 50, 150, 100]), sample)
    assert one["iou"] == 0.5 and one["iou_threshold"] == 0.0  # 0.5 is not > 0.5
    extra = rewards(task, boxes_answer([50, 50, 150, 100], [300, 150, 400, 250], [0, 0, 10, 10]), sample)
    assert extra["iou"] == pytest.approx(2 / 3)
    assert task.predict(boxes_answer([300, 150, 400, 250]), sample) == [[600.0, 300.0, 800.0, 500.0]]
    assert task.target(sample).endswith(
        '<answer>[{"bbox_2d": [50, 50, 150, 100]}, {"bbox_2d": [300, 150, 400, 250]}]</answer>'
    )
    assert rewards(task, task.target(sample), sample)["iou"] == 1.0


def test_several_targets_in_the_qwen2_norm1000_frame(tmp_path):
    sample = make_sample(tmp_path, [[112, 56, 336, 168], [560, 280, 784, 392]], **NORM)
    task = RefCOCO()
    # norm1000: x / 1120 * 1000, y / 560 * 1000 -> [100,100,300,300] and [500,500,700,700].
    assert rewards(task, boxes_answer([500, 500, 700, 700], [100, 100, 300, 300]), sample)["iou"] == 1.0
    assert rewards(task, boxes_answer([100, 100, 300, 300]), sample)["multi_iou"] == 0.5


def test_one_target_keeps_vlm_r1s_first_box_while_multi_iou_charges_extra_boxes(tmp_path):
    sample = make_sample(tmp_path, [100, 100, 300, 200], **HALF)
    values = rewards(RefCOCO(), boxes_answer([50, 50, 150, 100], [400, 200, 500, 250]), sample)
    assert values["iou"] == 1.0  # the first box is the answer
    assert values["multi_iou"] == 0.5  # matched 1.0 over max(2 predicted, 1 target)
    assert sample.solution == [100.0, 100.0, 300.0, 200.0]  # one target stays a plain box


def test_metrics_over_single_and_multi_target_samples(tmp_path):
    single = make_sample(tmp_path, [100, 100, 300, 200], **HALF)
    multi = make_sample(tmp_path, [[100, 100, 300, 200], [600, 300, 800, 500]], **HALF)
    completions = [
        boxes_answer([50, 50, 150, 100]),  # single: IoU 1, center inside
        boxes_answer([300, 150, 400, 250], [50, 50, 150, 100]),  # multi: IoU 1, both centers inside
        boxes_answer([50, 50, 150, 100]),  # multi: 1 / 2, one center of max(1, 2)
        "no answer",  # multi: 0
    ]
    metrics = RefCOCO().metrics([single, multi, multi, multi], completions)
    assert metrics["mean_iou"] == pytest.approx((1 + 1 + 0.5 + 0) / 4)
    assert metrics["acc@0.5"] == 0.5  # 0.5 is not > 0.5
    assert metrics["acc@0.4"] == 0.75
    assert metrics["center_acc"] == pytest.approx((1 + 1 + 0.5 + 0) / 4)
    assert metrics["multi_target_acc@0.5"] == pytest.approx(1 / 3)
    assert metrics["parse_rate"] == 0.75
    inclusive = RefCOCO(options={"acc_inclusive": True}).metrics([single, multi, multi, multi], completions)
    assert inclusive["acc@0.5"] == 0.75  # Perception-R1's evaluation counts IoU >= t


def test_one_targets_accuracy_reads_the_box_vlm_r1s_evaluation_reads_and_its_reward_the_trainings(tmp_path):
    """VLM-R1's test_rec_r1.py asks for the box inside braces and takes the last one a brace
    follows; its training reward takes the first box, braces or not. Model pixels are half the
    original here: [50, 50, 150, 100] is the target."""
    sample = make_sample(tmp_path, [100, 100, 300, 200], **HALF)
    bare, right_last = answer("[50, 50, 150, 100]"), boxes_answer([0, 0, 10, 10], [50, 50, 150, 100])
    task = RefCOCO()
    assert [rewards(task, c, sample)["iou"] for c in (bare, right_last)] == [1.0, 0.0]
    metrics = task.metrics([sample, sample], [bare, right_last])
    assert metrics["acc@0.5"] == metrics["mean_iou"] == 0.5 and metrics["parse_rate"] == 0.5
    assert task.correct([bare, right_last], [sample, sample]) == [0.0, 1.0]
    assert task.predict(right_last, sample) == [100.0, 100.0, 300.0, 200.0] and task.predict(bare, sample) is None
    pr1 = RefCOCO(options={"box_parser": "perception_r1"})  # evaluated with its reward's parser
    assert pr1.metrics([sample], ["[50, 50, 150, 100]"])["acc@0.5"] == rewards(pr1, "[50, 50, 150, 100]", sample)["iou"]


def test_an_extra_box_costs_center_accuracy_over_several_targets(tmp_path):
    multi = make_sample(tmp_path, [[100, 100, 300, 200], [600, 300, 800, 500]], **HALF)
    extra = boxes_answer([300, 150, 400, 250], [50, 50, 150, 100], [0, 0, 10, 10])  # both targets, and a stray box
    assert RefCOCO().metrics([multi], [extra])["center_acc"] == pytest.approx(2 / 3)  # hits over max(3 stated, 2)


def test_bad_multi_target_records_are_reported(tmp_path):
    with pytest.raises(RecordError, match=r"data.json:1: box 1 of the solution .* outside the 1120x560 image"):
        make_sample(tmp_path, [[100, 100, 300, 200], [100, 100, 2000, 200]])
    with pytest.raises(RecordError, match=r"must be 4 numbers .* \(or a list of such boxes\)"):
        make_sample(tmp_path, [[100, 100, 300, 200], [100, 100, 200]])
    with pytest.raises(RecordError, match="at most 64"):
        make_sample(tmp_path, [[1, 1, 2, 2]] * 65)
    # VLM-R1's string solution with several boxes reads 4 numbers per box.
    sample = make_sample(tmp_path, "<answer>[1, 2, 3, 4], [5, 6, 7, 8]</answer>")
    assert sample.solution == [[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]]


def test_vlm_r1_grpo_jsonl_records_are_read_as_its_grpo_jsonl_reads_them(tmp_path):
    """om-ai-lab/VLM-R1 90052f4 grpo_jsonl.py: problem = conversations[0].value without <image>,
    solution = conversations[1].value without its <answer> tags; the question then goes through
    its rec template, which is refcoco's."""
    Image.new("RGB", (1120, 560), (128, 128, 128)).save(tmp_path / "im.png")
    rows = [
        {"id": 3, "image": "im.png", "conversations": [
            {"from": "human", "value": "<image>Please provide the bounding box coordinate of the region this sentence describes: the red cup."},
            {"from": "gpt", "value": "<answer>[100, 50, 300, 200]</answer>"}]},
        {"image": "im.png", "conversations": [{"from": "human", "value": "<image>the cup"}]},
        {"image": "im.png", "conversations": [{"from": "human", "value": "<image>x"}, {"from": "gpt", "value": "[1, 2, 3]"}]},
        {"image": "im.png", "conversations": [{"from": "human", "value": "<image>x"}, {"from": "gpt", "value": 5}]},
    ]  # fmt: skip
    path = tmp_path / "rec.jsonl"
    path.write_text("\n".join(json.dumps(row) for row in rows))
    split = RefCOCO().load(path, FrameSpec("original"))
    (sample,) = split.samples
    question = "Please provide the bounding box coordinate of the region this sentence describes: the red cup."
    assert (sample.id, sample.problem, sample.solution) == ("3", question, [100.0, 50.0, 300.0, 200.0])
    question_prompt = (  # VLM-R1's qwen_module.get_question_template("rec")
        "{Question} First output the thinking process in <think> </think> tags and then output the final answer in "
        "<answer> </answer> tags. Output the final answer in JSON format."
    )
    assert RefCOCO().messages(sample)[0]["content"][1]["text"] == question_prompt.format(Question=question)
    assert [str(e).split(": ", 1)[1] for e in split.errors] == [
        "key 'conversations' must open with a question turn and an answer turn, each with a 'value'",
        "key 'conversations[1].value' must be 4 numbers [x1, y1, x2, y2] (or a list of such boxes), got '[1, 2, 3]'",
        "conversations[1].value must be a box [x1, y1, x2, y2], got 5",
    ]


# -- polygon targets ----------------------------------------------------------------------

TRIANGLE = [100, 100, 300, 100, 100, 300]  # right triangle, area 200 * 200 / 2 = 20000


@pytest.mark.parametrize(
    "completion,expected",
    [
        (answer('{"polygon": [[50, 50], [150, 50], [50, 150]]}'), 1.0),  # the triangle itself
        (answer('{"polygon": [50, 50, 150, 50, 50, 150]}'), 1.0),  # flat form
        (answer('{"bbox_2d": [50, 50, 150, 150]}'), 0.5),  # its box: 20000 / 40000
        (answer('{"bbox_2d": [50, 50, 75, 75]}'), 2500 / 20000),  # a box inside it
        (answer('{"bbox_2d": [300, 200, 400, 250]}'), 0.0),
        (answer('{"polygon": [[50, 50], [150, 50]]}'), 0.0),  # two points are no shape
        (answer('{"polygon": [[50, 50], [150, 150], [150, 50], [50, 150]]}'), 10000 / 30000),  # bow-tie, repaired
        (answer('{"polygon": [' + ", ".join(["[1, 1]"] * 1025) + "]}"), 0.0),  # too many vertices
        ("no answer", 0.0),
    ],
)
def test_polygon_iou_in_the_absolute_frame(tmp_path, completion, expected):
    # Target: x >= 100, y >= 100, x + y <= 400 (in original pixels). The bow-tie
    # (100,100)-(300,300)-(300,100)-(100,300) is two triangles meeting at (200,200): the left
    # one, (100,100),(200,200),(100,300), area 10000, lies inside the target; the right one,
    # (200,200),(300,300),(300,100), area 10000, touches it only along x + y = 400.
    # Intersection 10000, union 20000 + 20000 - 10000 = 30000.
    sample = make_sample(tmp_path, [100, 100, 300, 300], segmentation=[TRIANGLE], **HALF)
    assert RefCOCO().reward_functions()["polygon_iou"]([completion], [sample])[0] == pytest.approx(expected)


def test_polygon_iou_in_the_norm1000_frame_and_without_segmentation(tmp_path):
    # Triangle (112,56),(336,56),(112,168) is (100,100),(300,100),(100,300) in norm1000.
    sample = make_sample(tmp_path, [112, 56, 336, 168], segmentation=[[112, 56, 336, 56, 112, 168]], **NORM)
    polygon_iou = RefCOCO().reward_functions()["polygon_iou"]
    assert polygon_iou([answer('{"polygon": [[100, 100], [300, 100], [100, 300]]}')], [sample])[0] == pytest.approx(1.0)
    assert polygon_iou([answer('{"bbox_2d": [100, 100, 300, 300]}')], [sample])[0] == pytest.approx(0.5)
    plain = make_sample(tmp_path, [112, 56, 336, 168], **NORM)  # no segmentation: the box is the shape
    assert polygon_iou([answer('{"bbox_2d": [100, 100, 300, 300]}')], [plain])[0] == pytest.approx(1.0)
    # One target: the first shape stated is the answer, the better second one is not looked at.
    both = '{"bbox_2d": [600, 600, 700, 700]}, {"polygon": [[100, 100], [300, 100], [100, 300]]}'
    assert polygon_iou([answer(f"[{both}]")], [sample])[0] == 0.0
    assert RefCOCO().metrics([sample], [answer(f"[{both}]")])["polygon_mean_iou"] == 0.0
    first = '{"polygon": [[100, 100], [300, 100], [100, 300]]}, {"bbox_2d": [600, 600, 700, 700]}'
    assert polygon_iou([answer(f"[{first}]")], [sample])[0] == pytest.approx(1.0)


def test_polygon_iou_with_several_targets_matches_shapes(tmp_path):
    square = [600, 100, 800, 100, 800, 300, 600, 300]
    sample = make_sample(
        tmp_path, [[100, 100, 300, 300], [600, 100, 800, 300]], segmentation=[[TRIANGLE], [square]], **HALF
    )
    # The square's box (IoU 1) and the triangle's box (IoU 0.5), stated in either order.
    completion = boxes_answer([300, 50, 400, 150], [50, 50, 150, 150])
    assert rewards(RefCOCO(), completion, sample)["polygon_iou"] == pytest.approx(0.75)
    metrics = RefCOCO().metrics([sample], [completion])
    assert metrics["polygon_mean_iou"] == pytest.approx(0.75)
    assert metrics["mean_iou"] == 1.0  # box metrics stay box metrics


def test_geometry_helpers_on_hand_computed_shapes():
    square = coco_geometry([[0, 0, 10, 0, 10, 10, 0, 10]])
    assert square.area == 100
    assert coco_geometry([[0, 0, 10, 0, 10, 10, 0, 10], [20, 0, 30, 0, 30, 10, 20, 10]]).area == 200  # union of parts
    assert geometry_iou(square, box_geometry([5, 0, 15, 10])) == pytest.approx(50 / 150)
    assert geometry_iou(box_geometry([0, 0, 0, 10]), box_geometry([0, 0, 0, 10])) == 0.0  # no area, no IoU
    assert polygon_geometry([(0, 0), (1, 1)]).is_empty
    shapes = parse_answer_shapes(answer('[1, 2, 3, 4] {"polygon": [[0, 0], [4, 0], [0, 4]]} [5, 6, 7, 8]'))
    assert [kind for kind, _ in shapes] == ["box", "polygon", "box"]
    assert parse_answer_shapes(answer('{"polygon": [[0, 0], [4, 0]]}')) == []  # two vertices are no polygon
    assert parse_answer_shapes(answer('{"polygon": [0, 0, 4, 0]}')) == [("box", [0, 0, 4, 0])]  # four numbers: a box
    # An inverted box has no area, as in iou_continuous (shapely's box() would reorder its corners).
    assert box_geometry([300, 300, 100, 100]).is_empty
    assert geometry_iou(box_geometry([300, 300, 100, 100]), box_geometry([100, 100, 300, 300])) == 0.0


def test_shape_limits_are_inclusive():
    # Exactly MAX_VERTICES polygon vertices, and exactly MAX_BOXES shapes, are read; one more is not.
    ring = ", ".join(f"[{i}, {i * i % 7}]" for i in range(MAX_VERTICES))
    shapes = parse_answer_shapes(answer(f'{{"polygon": [{ring}]}}'))
    assert len(shapes) == 1 and len(shapes[0][1]) == MAX_VERTICES
    assert parse_answer_shapes(answer(f'{{"polygon": [{ring}, [1, 1]]}}')) is None
    assert len(parse_answer_shapes(answer("[1, 2, 3, 4] " * MAX_BOXES))) == MAX_BOXES
    assert parse_answer_shapes(answer("[1, 2, 3, 4] " * (MAX_BOXES + 1))) is None
    # An invalid (self-crossing) predicted polygon of exactly MAX_REPAIR_VERTICES vertices is still
    # repaired: a bow-tie of two 2500-pixel lobes, its first edge cut by collinear points.
    edge = [(50 + 100 * k / 61, 50 + 100 * k / 61) for k in range(61)]
    bow_tie = [*edge, (150, 150), (150, 50), (50, 150)]
    assert len(bow_tie) == MAX_REPAIR_VERTICES
    assert polygon_geometry(bow_tie).area == pytest.approx(5000)
    assert polygon_geometry([edge[0], *bow_tie]).is_empty  # one vertex more: not repaired, no area


def test_bad_segmentation_is_reported(tmp_path):
    cases = [
        ([[100, 100, 300, 100, 100]], "even count of at least 6"),
        ([[100, 100, 300, 100, 100, 3000]], "outside the 1120x560 image"),
        ([[100, 100, 200, 100, 300, 100]], "no area"),
        ({"size": [560, 1120], "counts": "abc"}, "RLE is not supported"),
    ]
    for segmentation, message in cases:
        with pytest.raises(RecordError, match=message):
            make_sample(tmp_path, [100, 100, 300, 300], segmentation=segmentation)
    with pytest.raises(RecordError, match="3 entries for 2 target boxes"):
        make_sample(tmp_path, [[100, 100, 300, 300], [400, 100, 500, 200]], segmentation=[[TRIANGLE], None, None])


# -- Perception-R1 ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "completion,expected",
    [
        ("<|object_ref_start|>the cat<|object_ref_end|><|box_start|>(10,20),(30,40)<|box_end|>", [10, 20, 30, 40]),
        ("the cat(10,20),(30,40)", [10, 20, 30, 40]),  # special tokens skipped when decoding
        ("(1, 2, 3, 4) then [5, 6, 7, 8]", [5, 6, 7, 8]),  # the [..] pattern is tried first, anywhere
        ("[-1.5, 2, 3.25, 4]", [-1.5, 2, 3.25, 4]),
        ("no box", None),
    ],
)
def test_perception_r1_box_parser(completion, expected):
    assert parse_box_perception_r1(completion) == expected


def test_perception_r1_iou_squared_in_the_norm1000_frame(tmp_path):
    task = RefCOCO(
        options={"box_parser": "perception_r1", "iou_convention": "continuous", "pr1_untagged_boxes": "model"},
        rewards={"iou_squared": 1.0},
    )
    sample = make_sample(tmp_path, [112, 56, 336, 168], task=task, **NORM)  # [100,100,300,300] in norm1000
    assert rewards(task, "it(100,100),(300,300)", sample)["iou_squared"] == pytest.approx(1.0)
    # (200,200),(400,400): 100x100 shared of 200x200 each -> IoU 10000 / 70000 = 1/7, squared 1/49.
    assert rewards(task, "it(200,200),(400,400)", sample)["iou_squared"] == pytest.approx(1 / 49)
    assert task.target(sample) == "<|object_ref_start|>it<|object_ref_end|><|box_start|>(100,100),(300,300)<|box_end|>"
    assert rewards(task, task.target(sample), sample)["iou"] == pytest.approx(1.0)
    assert parse_boxes_perception_r1("(1,2),(3,4) and (5,6),(7,8)") == [[1, 2, 3, 4], [5, 6, 7, 8]]


def test_perception_r1_reads_exactly_max_boxes_boxes_and_refuses_one_more():
    assert parse_boxes_perception_r1("[1, 2, 3, 4] " * MAX_BOXES) == [[1.0, 2.0, 3.0, 4.0]] * MAX_BOXES
    assert parse_boxes_perception_r1("[1, 2, 3, 4] " * (MAX_BOXES + 1)) is None
    assert parse_boxes_perception_r1("no box") == []


def pr1_reward(completion: str, solution: list[float]) -> float:
    """Perception-R1's pr1_grounding_reward, transcribed from linkangheng/PR1 at 48d5558
    (src/open_r1/rewards.py and src/open_r1/utils.py: extract_bbox_answer,
    parse_float_sequence_within, compute_iou); `solution` in its 0-1000 frame."""
    content = completion.replace("<|endoftext|>", "")
    is_qwen2vl = "<|box_start|>" in content
    num = r"(-?\d+(?:\.\d+)?)"
    patterns = [
        rf"\[\s*{num},\s*{num},\s*{num},\s*{num}\s*\]",
        rf"\(\s*{num},\s*{num},\s*{num},\s*{num}\s*\)",
        rf"\(\s*{num},\s*{num}\),\s*\(\s*{num},\s*{num}\)",
    ]
    bbox = [0, 0, 0, 0]
    for pattern in patterns:
        match = re.search(pattern, content)
        if match:
            bbox = [float(match.group(i)) for i in range(1, 5)]
            break
    if not is_qwen2vl:
        bbox = [int(x * 1000) for x in bbox]
    box1, box2 = bbox, solution
    x_left, y_top = max(box1[0], box2[0]), max(box1[1], box2[1])
    x_right, y_bottom = min(box1[2], box2[2]), min(box1[3], box2[3])
    intersection = max(0, x_right - x_left) * max(0, y_bottom - y_top)
    union = (box1[2] - box1[0]) * (box1[3] - box1[1]) + (box2[2] - box2[0]) * (box2[3] - box2[1]) - intersection
    return (intersection / union) ** 2


@pytest.mark.parametrize(
    "completion",
    [
        "<|object_ref_start|>it<|object_ref_end|><|box_start|>(100,100),(300,300)<|box_end|><|im_end|>",
        "<|object_ref_start|>it<|object_ref_end|><|box_start|>(150,120),(320,290)<|box_end|><|endoftext|>",
        "<|box_start|>(1<|endoftext|>50,120),(320,290)<|box_end|>",  # the token goes, the digits join
        "<|box_st<|endoftext|>art|>(100,100),(300,250)",  # and the tag it splits is whole again: absolute
        "(0.1,0.1),(0.3,0.3)",  # no <|box_start|>: a relative box, scaled by 1000
        "[0.15, 0.1234, 0.29999, 0.3]",  # int(x * 1000) truncates
        "the box is (0.12, 0.1), (0.3, 0.31)<|endoftext|>",
        "(100,100),(300,300)",  # untagged absolute numbers: PR1 scales them too (IoU 0)
    ],
)
def test_perception_r1_grounding_reward_equals_its_public_code(tmp_path, completion):
    task = RefCOCO(
        options={"box_parser": "perception_r1", "iou_convention": "continuous"}, rewards={"iou_squared": 1.0}
    )
    sample = make_sample(tmp_path, [112, 56, 336, 168], task=task, **NORM)  # [100,100,300,300] in norm1000
    expected = pr1_reward(completion, [100, 100, 300, 300])
    assert rewards(task, completion, sample)["iou_squared"] == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_prompt_templates_can_use_the_expression(tmp_path):
    task = RefCOCO(options={"prompt_template": "Output the bounding box of the {Caption} in the image."})
    sample = make_sample(tmp_path, [1, 1, 5, 5], task=task)
    assert task.messages(sample)[0]["content"][1]["text"] == "Output the bounding box of the it in the image."


# -- the family and its synthetic data -----------------------------------------------------


def test_family_members_share_the_code_and_differ_in_name_and_grammar():
    assert (RefCOCOPlus.name, RefCOCOg.name) == ("refcoco+", "refcocog")
    assert RefCOCOPlus.reward_functions is RefCOCO.reward_functions
    assert set(RefCOCOPlus().reward_functions()) == {
        "format",
        "iou",
        "iou_squared",
        "iou_threshold",
        "multi_iou",
        "polygon_iou",
    }
    with pytest.raises(ConfigError, match="synthetic_multi must be in"):
        RefCOCOg(options={"synthetic_multi": 1.5})


def _captions(path):
    return [r["normal_caption"] for r in json.loads(path.read_text())]


def test_synthetic_expressions_follow_each_dataset(tmp_path):
    plus = _captions(write_synthetic_rec(tmp_path / "p" / "t.json", 40, 0, style="refcoco+"))
    long = _captions(write_synthetic_rec(tmp_path / "g" / "t.json", 40, 0, style="refcocog"))
    base = _captions(write_synthetic_rec(tmp_path / "c" / "t.json", 40, 0, style="refcoco"))
    spatial = ("left", "right", "above", "below", "top", "bottom")
    assert not any(word in caption.split() for caption in plus for word in spatial)
    assert any(word in caption.split() for caption in base for word in spatial)  # refcoco does use them
    mean_words = lambda captions: sum(len(c.split()) for c in captions) / len(captions)  # noqa: E731
    assert mean_words(long) > 1.5 * mean_words(base)


def test_synthetic_multi_target_and_polygon_records(tmp_path):
    spec = SceneSpec(min_objects=3, max_objects=5, backgrounds=("solid",))
    path = write_synthetic_rec(
        tmp_path / "t.json", 24, 1, spec=spec, style="refcoco+", multi_fraction=0.5, polygons=True
    )
    records = json.loads(path.read_text())
    multi = [r for r in records if isinstance(r["solution"][0], list)]
    assert 0 < len(multi) < len(records)
    assert all(r["normal_caption"].startswith(("all the", "both")) for r in multi)
    split = RefCOCOPlus().load(path, FrameSpec("absolute", 3136, 50176))
    assert not split.errors and len(split.samples) == 24
    for record in records:
        image = Image.open(path.parent / record["image"]).convert("RGB")
        boxes = record["solution"] if isinstance(record["solution"][0], list) else [record["solution"]]
        outlines = record["segmentation"] if isinstance(record["solution"][0], list) else [record["segmentation"]]
        for box, polygons in zip(boxes, outlines, strict=True):
            area = coco_geometry(polygons).area
            ratio = area / ((box[2] - box[0]) * (box[3] - box[1]))
            # square 1, circle pi/4 (a 64-gon: 0.7841), triangle 1/2
            assert min(abs(ratio - r) for r in (1.0, 0.7841, 0.5)) < 1e-3, ratio
            # The outline is the drawn shape: its pixels of the fill color match its area.
            crop = image.crop(tuple(box))
            counts = {name: sum(1 for p in crop.getdata() if p == rgb) for name, rgb in COLORS.items()}
            drawn = max(counts.values())
            assert abs(drawn - area) <= 0.06 * area + 2 * math.sqrt(area), (drawn, area)


def _random_polygon(n: int, seed: int) -> str:
    import random

    rng = random.Random(seed)
    return json.dumps([[rng.randint(0, 500), rng.randint(0, 270)] for _ in range(n)])


ADVERSARIAL_SHAPES = [
    answer(" ".join(f'{{"polygon": {_random_polygon(64, i)}}}' for i in range(16))),  # 16 tangled 64-gons: repaired
    answer(f'{{"polygon": {_random_polygon(1000, 0)}}}'),  # a tangled 1000-gon: not repaired, scores 0
    answer('{"polygon": [[' + "9" * 400 + ", 1], [2, 3], [4, 5]]}"),  # a coordinate that overflows to inf
    answer('{"polygon": ' + "[" * 100_000 + "}"),
    answer(", ".join(["[1, 2, 3, 4]"] * 64)),
    answer(", ".join(["[1, 2, 3, 4]"] * 65)),
    answer('{"polygon": [[0, 0], [0, 0], [0, 0]]}'),
]


@pytest.mark.parametrize("index", range(len(ADVERSARIAL_SHAPES)))
def test_adversarial_shapes_score_in_bounds_quickly(tmp_path, index):
    import time

    sample = make_sample(
        tmp_path,
        [[100, 100, 300, 300], [600, 100, 800, 300]],
        segmentation=[[TRIANGLE], [[600, 100, 800, 100, 800, 300]]],
        **HALF,
    )
    task = RefCOCO()
    start = time.perf_counter()
    for name, value in rewards(task, ADVERSARIAL_SHAPES[index], sample).items():
        assert 0.0 <= value <= 1.0 and math.isfinite(value), name
    task.metrics([sample], [ADVERSARIAL_SHAPES[index]])
    assert time.perf_counter() - start < 3.0


@pytest.mark.parametrize("cls", [RefCOCO, RefCOCOPlus, RefCOCOg])
def test_sft_targets_earn_the_rewards_on_multi_target_polygon_data(tmp_path, cls):
    task = cls(options={"synthetic_multi": 0.5, "synthetic_polygons": True})
    task.synthesize(tmp_path / "train.json", size=8, seed=3)
    samples = task.load(tmp_path / "train.json", FrameSpec("absolute", 3136, 50176)).samples
    assert any(isinstance(s.solution[0], list) for s in samples) and all("segmentation" in s.meta for s in samples)
    targets = [task.target(s) for s in samples]
    for name in ("format", "iou", "multi_iou"):
        values = task.reward_functions()[name](targets, samples)
        assert sum(values) / len(values) >= 0.9, (name, values)


# -- the demo's knobs: an imperfect teacher and the scene ----------------------------------


def test_target_box_scale_grows_the_sft_box_about_its_center_inside_the_image(tmp_path):
    # Original box [100,100,300,200] (center 200,150; 200x100) x1.5 -> [50,75,350,225];
    # the model frame is half: [25,38,175,112] after rounding 37.5 -> 38 and 112.5 -> 112.
    sample = make_sample(tmp_path, [100, 100, 300, 200], **HALF)
    task = RefCOCO({"target_box_scale": 1.5})
    assert task.target(sample).endswith('<answer>{"bbox_2d": [25, 38, 175, 112]}</answer>')
    # At a corner the box grows only inward: [0,0,100,100] x3 -> [-100,-100,200,200], clipped to
    # [0,0,200,200], half of it in the model frame.
    corner = make_sample(tmp_path, [0, 0, 100, 100], **HALF)
    assert RefCOCO({"target_box_scale": 3.0}).target(corner).endswith('<answer>{"bbox_2d": [0, 0, 100, 100]}</answer>')
    # A perfect imitator of the 1.5x teacher stays under ACC@0.5: IoU ~ 200*100 / (300*148) = 0.45.
    imitated = rewards(task, task.target(sample), sample)
    assert 0.4 < imitated["iou"] < 0.5 and imitated["iou_threshold"] == 0.0
    with pytest.raises(ConfigError, match="target_box_scale"):
        RefCOCO({"target_box_scale": 0})


def test_synthetic_scene_options_shape_the_written_scenes(tmp_path):
    task = RefCOCO(
        {"synthetic_scene": {"min_objects": 1, "max_objects": 1, "min_side": 112, "max_side": 120, "sizes": ["large"]}}
    )
    path = tmp_path / "rec.json"
    task.synthesize(path, 6, seed=3)
    for record in json.loads(path.read_text()):
        width, height = Image.open(tmp_path / record["image"]).size
        assert 112 <= width <= 120 and 112 <= height <= 120
        x1, _y1, x2, _y2 = record["solution"]
        assert x2 - x1 >= 0.26 * min(width, height) - 1  # "large": 0.26-0.36 of the short side
    with pytest.raises(ConfigError, match="synthetic_scene.colour"):
        RefCOCO({"synthetic_scene": {"colour": ["red"]}})


# -- the synthetic scenes' grammar, on scenes written by hand -------------------------------------
def hand_scene(*objects):
    from data_prep.shapes import Scene, SceneObject

    return Scene(Image.new("RGB", (200, 200)), [SceneObject(*obj) for obj in objects])


def test_an_expression_adds_the_size_only_when_color_and_shape_do_not_single_out_the_object():
    from data_prep.shapes import referring_expression

    scene = hand_scene(
        ("circle", "red", "small", [0, 0, 20, 20]),
        ("circle", "red", "large", [100, 0, 160, 60]),
        ("square", "blue", "small", [0, 100, 20, 120]),
    )
    assert referring_expression(scene, 0) == "the small red circle"
    assert referring_expression(scene, 0, "refcoco+") == "the small red circle"
    assert referring_expression(scene, 2) == "the blue square"


def test_group_expressions_name_the_shared_color_or_kind_and_say_both_of_two():
    import numpy as np

    from data_prep.shapes import group_expression

    rng = np.random.default_rng(0)
    two_red = hand_scene(
        ("circle", "red", "small", [0, 0, 20, 20]),
        ("square", "red", "small", [50, 0, 70, 20]),
        ("triangle", "blue", "small", [100, 0, 120, 20]),
    )
    assert group_expression(two_red, "refcoco", rng) == ("both red shapes", [0, 1])
    circles = hand_scene(
        ("circle", "red", "small", [0, 0, 20, 20]),
        ("circle", "blue", "small", [50, 0, 70, 20]),
        ("circle", "green", "large", [100, 0, 160, 60]),
    )
    assert group_expression(circles, "refcoco", rng) == ("all the circles", [0, 1, 2])
    assert group_expression(circles, "refcocog", rng) == (
        "every one of the circles that can be seen in the picture", [0, 1, 2]
    )  # fmt: skip
    assert group_expression(hand_scene(("circle", "red", "small", [0, 0, 20, 20])), "refcoco", rng) is None


def test_a_relation_along_a_diagonal_is_read_along_the_horizontal_axis():
    from data_prep.shapes import SceneObject, spatial_relation

    anchor = SceneObject("circle", "red", "small", [40, 40, 60, 60])
    at = lambda x, y: SceneObject("square", "blue", "small", [x, y, x + 20, y + 20])  # noqa: E731
    assert [spatial_relation(at(x, y), anchor) for x, y in [(0, 0), (80, 80), (0, 80), (80, 0)]] == [
        "left of", "right of", "left of", "right of"
    ]  # fmt: skip
    assert [spatial_relation(at(x, y), anchor) for x, y in [(41, 0), (39, 80)]] == ["above", "below"]


def test_objects_of_crowded_scenes_never_overlap():
    import numpy as np

    from data_prep.shapes import make_scene

    spec = SceneSpec(min_objects=6, max_objects=6, min_side=64, max_side=64, sizes=("small",))
    rng = np.random.default_rng(0)
    for _ in range(30):
        boxes = [o.box for o in make_scene(spec, rng).objects]
        for i, a in enumerate(boxes):
            for b in boxes[i + 1 :]:
                assert min(a[2], b[2]) <= max(a[0], b[0]) or min(a[3], b[3]) <= max(a[1], b[1]), (a, b)


def test_a_scene_side_below_the_least_object_side_is_refused():
    with pytest.raises(ValueError, match=re.escape("needs 8 <= min_side <= max_side, got 4 and 10")):
        SceneSpec(min_side=4, max_side=10)


def test_only_scenes_in_a_row_that_name_nothing_count_toward_the_limit(tmp_path, monkeypatch):
    import data_prep.refcoco

    monkeypatch.setattr(data_prep.refcoco, "MAX_UNNAMED_SCENES", 4)
    spec = SceneSpec(min_objects=0, max_objects=3)  # a quarter of the scenes are empty: fewer than 4 in a row
    records = json.loads(write_synthetic_rec(tmp_path / "a.json", 24, seed=0, spec=spec).read_text())
    assert len(records) == 24
    with pytest.raises(ValueError, match=r"synthetic_scene: 4 scenes in a row held no object an expression names"):
        write_synthetic_rec(tmp_path / "b.json", 1, seed=0, spec=SceneSpec(min_objects=0, max_objects=0))
