"""Detection rewards and metrics: hand-computed cases of every public definition, equality with
pycocotools COCOeval (one image and a whole split), adversarial answers, and the COCO loader."""

from __future__ import annotations

import contextlib
import io
import json
import re
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from rewards.detection import (
    Detections,
    GroundTruth,
    answer_well_formed,
    ap50_reward,
    coco_ap,
    hungarian_reward,
    map_reward,
    od_length_reward,
    parse_detections,
    parse_weighted_sum,
    vlm_r1_clean_text,
    weighted_sum_reward,
)
from rewards.grounding import iou_continuous
from tasks.detection import Detection
from vlrl.data.records import FrameSpec, RecordError
from vlrl.tasking.registry import task_class


def answer(entries, think: str = "ok") -> str:
    return f"<think>{think}</think>\n<answer>```json\n{json.dumps(entries)}\n```</answer>"


def dets(*pairs, raw: int | None = None, says_none: bool = False) -> Detections:
    return Detections(
        tuple(tuple(map(float, b)) for b, _ in pairs),
        tuple(lab for _, lab in pairs),
        len(pairs) if raw is None else raw,
        says_none,
    )


def truth(*pairs, crowd=()) -> GroundTruth:
    return GroundTruth(
        tuple(tuple(map(float, b)) for b, _ in pairs),
        tuple(lab for _, lab in pairs),
        tuple(tuple(map(float, b)) for b, _ in crowd),
        tuple(lab for _, lab in crowd),
    )


A, B = [0, 0, 100, 100], [200, 200, 300, 300]


# -- pycocotools, the reference ----------------------------------------------------------------


def pycocotools_stats(gts, gt_labels, dts, dt_labels, crowd=None, scores=None):
    """COCOeval on one image built as VLM-R1's calculate_map builds it (stats, or None if no dt)."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    cats: dict[str, int] = {}
    for label in gt_labels:
        cats.setdefault(label, len(cats))
    anns = []
    for i, (b, label) in enumerate(zip(gts, gt_labels, strict=False)):
        w, h = b[2] - b[0], b[3] - b[1]
        anns.append(
            {
                "id": i + 1,
                "image_id": 0,
                "category_id": cats[label],
                "bbox": [b[0], b[1], w, h],
                "area": w * h,
                "iscrowd": int(crowd[i]) if crowd else 0,
            }
        )
    results = [
        {
            "image_id": 0,
            "category_id": cats[label],
            "bbox": [b[0], b[1], b[2] - b[0], b[3] - b[1]],
            "score": scores[j] if scores else 1.0,
        }
        for j, (b, label) in enumerate(zip(dts, dt_labels, strict=False))
        if label in cats
    ]
    if not results:
        return None
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = {
            "images": [{"id": 0, "width": 2048, "height": 2048}],
            "annotations": anns,
            "categories": [{"id": i, "name": n} for n, i in cats.items()],
        }
        gt.createIndex()
        evaluator = COCOeval(gt, gt.loadRes(results), "bbox")
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    return evaluator.stats


coordinate = st.one_of(st.integers(0, 60), st.floats(0, 60, allow_nan=False).map(lambda v: round(v, 2)))


@st.composite
def image_case(draw):
    labels = draw(st.sampled_from([["a"], ["a", "b"], ["a", "b", "c"]]))
    gts, gt_labels, crowd = [], [], []
    for _ in range(draw(st.integers(1, 7))):
        x, y = draw(coordinate), draw(coordinate)
        gts.append([x, y, x + draw(st.integers(1, 30)), y + draw(st.integers(1, 30))])
        gt_labels.append(draw(st.sampled_from(labels)))
        crowd.append(draw(st.booleans()) and draw(st.booleans()) and draw(st.booleans()))
    dts, dt_labels, scores = [], [], []
    for _ in range(draw(st.integers(1, 12))):
        if draw(st.booleans()):  # near a ground truth, so that IoUs straddle the thresholds
            g = draw(st.sampled_from(gts))
            dts.append([v + draw(st.sampled_from([0, 0, 1, -1, 2, 0.5, -3])) for v in g])
        else:
            x, y = draw(coordinate), draw(coordinate)
            dts.append([x, y, x + draw(st.integers(-3, 30)), y + draw(st.integers(0, 30))])  # some inverted or empty
        dt_labels.append(draw(st.sampled_from([*labels, "unknown"])))
        scores.append(draw(st.sampled_from([1.0, 1.0, 0.9, 0.5])))
    return gts, gt_labels, dts, dt_labels, crowd, scores


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(image_case())
def test_coco_ap_equals_pycocotools_on_one_image(case):
    gts, gt_labels, dts, dt_labels, crowd, scores = case
    stats = pycocotools_stats(gts, gt_labels, dts, dt_labels, crowd, scores)
    if stats is None:  # VLM-R1 returns 0 before COCOeval when no prediction has a known label
        return
    for thresholds, expected in (((), stats[0]), ((0.5,), stats[1])):
        kwargs = {"iou_thresholds": thresholds} if thresholds else {}
        got = coco_ap(gts, gt_labels, dts, dt_labels, gt_crowd=crowd, dt_scores=scores, **kwargs)
        if expected == -1:
            assert got is None
        else:
            assert got == pytest.approx(expected, abs=1e-9)


def test_coco_ap_matches_a_detection_at_exactly_the_threshold_beside_a_crowd_region_as_pycocotools():
    """evaluateImg skips a ground truth only when its IoU is below the threshold (`< iou`); the
    crowd region sends the match down COCOeval's ignore-aware path."""
    gts, labels, crowd = [[0, 0, 10, 20], [100, 100, 110, 110]], ["a", "a"], [False, True]
    dts = [[0, 0, 10, 10]]  # IoU 100 / 200 = 0.5 with the first
    stats = pycocotools_stats(gts, labels, dts, ["a"], crowd)
    assert stats[1] == pytest.approx(1.0)
    assert coco_ap(gts, labels, dts, ["a"], gt_crowd=crowd, iou_thresholds=(0.5,)) == pytest.approx(stats[1])
    assert coco_ap(gts, labels, dts, ["a"], gt_crowd=crowd) == pytest.approx(stats[0], abs=1e-9)


def test_weighted_sum_matches_a_pair_at_exactly_the_threshold_as_vlm_r1_detection_score():
    """VLM-R1's detection_score stops matching when the best IoU is `< iou_threshold`."""
    pred = Detections(((0, 0, 10, 10),), ("a",), 1, False)
    gt = GroundTruth(((0, 0, 10, 20),), ("a",))  # continuous IoU 0.5
    assert weighted_sum_reward(pred, gt, iou=iou_continuous) == pytest.approx((0.7 * 0.5 + 0.3 * 1.0) / 1.0)


@pytest.mark.parametrize("value", ["1e10", "-1e10", "1000000001"])
def test_a_coordinate_beyond_a_billion_is_no_coordinate(value):
    completion = f'<answer>```json\n[{{"bbox_2d": [0, 0, {value}, 10], "label": "a"}}]\n```</answer>'
    assert not answer_well_formed(completion)
    assert parse_detections(completion, "lenient").boxes == ()
    assert answer_well_formed(completion.replace(value, "1000000000"))


def test_coco_ap_equals_pycocotools_when_ground_truth_is_out_of_area_range():
    # A ground truth larger than COCO's 'all' range (1e10) is ignored; unmatched huge detections too.
    big = [0, 0, 200_000, 100_000]
    gts, labels = [big, A], ["a", "a"]
    dts = [[0, 0, 200_000, 100_001], [1, 1, 101, 101], [0, 0, 300_000, 300_000]]
    stats = pycocotools_stats(gts, labels, dts, ["a"] * 3)
    assert coco_ap(gts, labels, dts, ["a"] * 3) == pytest.approx(stats[0], abs=1e-9)
    assert coco_ap([big], ["a"], dts, ["a"] * 3) is None  # pycocotools reports -1
    assert pycocotools_stats([big], ["a"], dts, ["a"] * 3)[0] == -1


@pytest.mark.parametrize(
    "dts,expected",
    [
        ([A], 1.0),
        ([B, A], 0.5),  # a false alarm first: precision 1/2 at every recall level
        ([A, B], 1.0),  # the same boxes, the hit first: ties keep answer order
        ([[0, 0, 100, 75]], 0.6),  # IoU 0.75 exactly: a hit at 6 of the 10 thresholds (0.5 ... 0.75)
    ],
)
def test_coco_ap_hand_computed(dts, expected):
    assert coco_ap([A], ["a"], dts, ["a"] * len(dts)) == pytest.approx(expected, abs=1e-12)


def test_coco_ap_recall_half_and_categories_averaged():
    # Two objects, one found: precision 1 up to recall 0.5, i.e. at 51 of 101 recall thresholds.
    assert coco_ap([A, B], ["a", "a"], [A], ["a"]) == pytest.approx(51 / 101)
    # Two categories, one perfect and one missed: the mean over categories.
    assert coco_ap([A, B], ["a", "b"], [A], ["a"]) == pytest.approx(0.5)
    # A detection on a crowd region is ignored, neither a hit nor a false alarm.
    assert coco_ap([A, B], ["a", "a"], [B, A], ["a", "a"], gt_crowd=[False, True]) == pytest.approx(1.0)


# -- the VLM-R1 rewards -------------------------------------------------------------------------


def test_map_and_ap50_rewards_follow_vlm_r1():
    gt = truth((A, "dog"))
    assert map_reward(dets((A, "dog")), gt) == pytest.approx(1.0)
    assert ap50_reward(dets(([0, 0, 100, 75], "dog")), gt) == pytest.approx(1.0)
    assert map_reward(dets(([0, 0, 100, 75], "dog")), gt) == pytest.approx(0.6)
    assert map_reward(dets((A, "cat")), gt) == 0.0  # a label the image lacks is dropped: nothing left
    assert map_reward(None, gt) == 0.0  # no <answer>
    assert map_reward(dets(), gt) == 0.0  # one side empty
    assert map_reward(dets((A, "dog")), truth()) == 0.0
    assert map_reward(dets(), truth()) == 1.0  # both empty
    assert map_reward(dets(raw=1), truth()) == 0.0  # a malformed entry is still an entry
    assert map_reward(None, truth()) == 0.0


def test_od_length_divides_by_the_number_of_predicted_entries():
    gt = truth((A, "dog"), (B, "dog"))
    far = [500, 500, 510, 510]
    assert od_length_reward(dets((A, "dog"), (B, "dog")), gt) == pytest.approx(1.0)
    # Both found first, then two extra boxes: mAP stays 1 (ties keep order), length 2/4.
    assert od_length_reward(dets((A, "dog"), (B, "dog"), (far, "dog"), (far, "cat")), gt) == pytest.approx(0.5)
    # A malformed third entry counts in n_pred, as in VLM-R1 (len of the parsed list).
    assert od_length_reward(dets((A, "dog"), (B, "dog"), raw=3), gt) == pytest.approx(2 / 3)
    # Fewer predictions than objects: no length penalty, only mAP.
    assert od_length_reward(dets((A, "dog")), gt) == pytest.approx(map_reward(dets((A, "dog")), gt))
    assert od_length_reward(dets(), truth()) == 1.0
    assert od_length_reward(dets((A, "dog")), truth()) == 0.0


def test_weighted_sum_hand_computed():
    gt = truth((A, "Dog"), (B, "cat"))
    b_half = [200, 200, 300, 260]  # VLM-R1 IoU with B: 100 * 60 / 10000 = 0.6
    far = [500, 500, 510, 510]
    pred = dets((A, "dog"), (b_half, "bird"), (far, "cat"))
    # A matched (IoU 1, labels equal ignoring case); B matched at 0.6 with a wrong label (adds 0);
    # the far box is a false alarm. position 1/2, miss 0, false alarm 1/3.
    expected = 0.7 * (1 / 2) + 0.3 * (1 - (0 + 1 / 3) / 2)
    assert weighted_sum_reward(pred, gt) == pytest.approx(expected)
    # Below the matching IoU a pair stays unmatched: miss 1/2, false alarm 1/2 for b_low.
    b_low = [200, 200, 300, 240]  # IoU 0.4
    expected = 0.7 * (1 / 2) + 0.3 * (1 - (1 / 2 + 1 / 2) / 2)
    assert weighted_sum_reward(dets((A, "dog"), (b_low, "cat")), gt) == pytest.approx(expected)
    assert weighted_sum_reward(dets((A, "dog"), (b_low, "cat")), gt, iou_threshold=0.3) == pytest.approx(
        0.7 * (1 + 0.4) / 2 + 0.3
    )


def test_weighted_sum_greedy_takes_the_best_pair_first():
    gt = truth(([0, 0, 100, 100], "a"), ([0, 0, 100, 60], "a"))
    # The one prediction overlaps both; greedy gives it to the ground truth of highest IoU.
    pred = dets(([0, 0, 100, 62], "a"))
    iou_second = 6000 / 6200
    assert weighted_sum_reward(pred, gt) == pytest.approx(0.7 * iou_second / 2 + 0.3 * (1 - (1 / 2 + 0) / 2))


def test_weighted_sum_empty_image_needs_the_word_none():
    assert weighted_sum_reward(dets(says_none=True), truth()) == 1.0
    assert weighted_sum_reward(dets(says_none=False), truth()) == 0.0  # "[]" is not "None" for VLM-R1
    assert weighted_sum_reward(dets((A, "dog")), truth()) == 0.0
    assert weighted_sum_reward(dets(says_none=True), truth((A, "dog"))) == 0.0
    assert weighted_sum_reward(None, truth()) == 0.0


def test_hungarian_reward_follows_perception_r1():
    gt = truth((A, "dog"), (B, "cat"))
    # Exact boxes and labels: 0.25 + 0.75 * F1 + 1 (labels) + 1 (IoU) = 3, divided by 3.
    assert hungarian_reward(dets((A, "dog"), (B, "cat")), gt) == pytest.approx(1.0, abs=1e-6)
    # One of two found, one far box: F1 1/2, penalty 0.5 * (1/2 + 1/2).
    far = [500, 500, 510, 510]
    value = (0.25 + 0.75 * 0.5 + 1 + 1 - 0.5) / 3
    assert hungarian_reward(dets((A, "dog"), (far, "cat")), gt) == pytest.approx(value, abs=1e-6)
    # Without the penalty (DO_PENAIlty=False, PR1's detection recipe): the same less 0.5.
    no_penalty = hungarian_reward(dets((A, "dog"), (far, "cat")), gt, penalty=False)
    assert no_penalty == pytest.approx(value + 0.5 / 3, abs=1e-6)
    # A label outside the vocabulary counts as wrong format (Perception-R1's cate_to_id lookup).
    value = (0.25 * 0.5 + 0.75 * (2 * 1 * 0.5 / 1.5) + 1 + 1 - 0.5 * (0 + 0.5)) / 3
    assert hungarian_reward(dets((A, "dog"), (B, "zebra")), gt, vocabulary=["dog", "cat"]) == pytest.approx(
        value, abs=1e-6
    )
    # Matched but wrong label: the class term is the share of right labels.
    value = (0.25 + 0.75 + 0.5 + 1) / 3
    assert hungarian_reward(dets((A, "dog"), (B, "dog")), gt) == pytest.approx(value, abs=1e-6)
    # No pair above IoU 0.5: only the format term.
    assert hungarian_reward(dets((far, "dog")), gt) == pytest.approx(0.25 / 3)
    assert hungarian_reward(dets(), truth()) == 1.0
    assert hungarian_reward(dets((A, "dog")), truth()) == 0.0
    assert hungarian_reward(dets(([10, 10, 0, 0], "dog")), gt) == 0.0  # only an inverted box: nothing valid


def test_hungarian_keeps_a_pair_only_above_half_iou_and_counts_flat_and_malformed_entries():
    big = truth(([0, 0, 10000, 10000], "dog"))
    # IoU exactly 1/2 (at this size the 1e-8 Perception-R1 adds to the union is lost): not kept (> 0.5).
    assert hungarian_reward(dets(([0, 0, 10000, 20000], "dog")), big) == pytest.approx(0.25 / 3)
    # A box of zero width is not inverted (the GIoU assertion is x2 >= x1): well formed, just unmatched.
    assert hungarian_reward(dets(([5, 5, 5, 9], "dog")), truth((A, "dog"))) == pytest.approx(0.25 / 3)
    # A malformed entry (raw 2, one box) is an entry: format 1/2; the well-formed one is matched alone.
    value = (0.25 * 0.5 + 0.75 * 2 / (2 + 1e-8) + 1 + 1) / 3
    assert hungarian_reward(dets((A, "dog"), raw=2), truth((A, "dog"))) == pytest.approx(value, abs=1e-9)


def test_coco_ap_reads_the_first_100_detections_only_as_pycocotools():
    gts, labels = [[0, 0, 10, 10]], ["a"]
    dts = [[500 + i, 500, 510 + i, 510] for i in range(100)] + [[0, 0, 10, 10]]  # the hit is the 101st
    stats = pycocotools_stats(gts, labels, dts, ["a"] * 101)
    assert stats[0] == 0.0 and stats[1] == 0.0
    assert coco_ap(gts, labels, dts, ["a"] * 101) == 0.0
    assert coco_ap(gts, labels, dts[1:], ["a"] * 100) > 0.0  # the 100th is read


def test_coco_ap_gives_a_flat_detection_touching_a_crowd_region_iou_zero_as_pycocotools():
    """maskApi's bbIou skips a pair at zero overlap width before it divides by the detection's
    area, which a crowd region's IoU does (0 / 0 for a detection of no width)."""
    gts, labels, crowd = [[0, 0, 10, 10], [50, 50, 60, 60]], ["a", "a"], [True, False]
    dts = [[10, 0, 10, 10], [50, 50, 60, 60]]
    stats = pycocotools_stats(gts, labels, dts, ["a", "a"], crowd)
    assert coco_ap(gts, labels, dts, ["a", "a"], gt_crowd=crowd) == pytest.approx(stats[0], abs=1e-12)
    assert coco_ap(gts, labels, dts, ["a", "a"], gt_crowd=crowd, iou_thresholds=(0.5,)) == pytest.approx(stats[1])


def test_vlm_r1_clean_text_drops_trailing_dots_and_spaces_out_carriage_returns():
    assert vlm_r1_clean_text("<answer>None..</answer>") == "none"
    assert parse_weighted_sum("<answer>None.</answer>").says_none
    assert vlm_r1_clean_text("<answer>A\rB \rC</answer>") == "a b c"  # after a space: dropped; else a space


# -- parsing ------------------------------------------------------------------------------------


def test_parse_reads_the_last_answer_and_its_last_json_fence():
    text = (
        "<answer>```json\n[]\n```</answer> then <answer>```json\n[1]\n``` ```json\n"
        + json.dumps([{"bbox_2d": [1, 2, 3, 4], "label": "a"}, {"bbox_2d": [1, 2, 3], "label": "a"}, {"label": "b"}])
        + "\n```</answer>"
    )
    parsed = parse_detections(text)
    assert parsed.boxes == ((1.0, 2.0, 3.0, 4.0),) and parsed.labels == ("a",)
    assert parsed.raw_count == 3  # malformed entries dropped, but counted


@pytest.mark.parametrize(
    "text,raw,boxes,says_none",
    [
        ("<answer>None</answer>", 0, 0, True),
        ("<answer> none. </answer>", 0, 0, True),
        ('<answer>[{"bbox_2d": [1, 2, 3, 4], "label": "a"}]</answer>', 0, 0, False),  # VLM-R1 needs the fence
        ('<answer>```json\n{"bbox_2d": [1, 2, 3, 4], "label": "a"}\n```</answer>', 2, 0, False),  # a dict's keys
        ('<answer>```json\n"abc"\n```</answer>', 3, 0, False),  # a string's characters
        ("<answer>```json\n7\n```</answer>", 0, 0, False),
        ("<answer>```json\n[1, 2\n```</answer>", 0, 0, False),  # invalid JSON: empty prediction
        ('<answer>```json\n[{"bbox_2d": [true, 2, 3, 4], "label": "a"}]\n```</answer>', 1, 0, False),
        ('<answer>```json\n[{"bbox_2d": [NaN, 2, 3, 4], "label": "a"}]\n```</answer>', 1, 0, False),
        ('<answer>```json\n[{"bbox_2d": [1e999, 2, 3, 4], "label": "a"}]\n```</answer>', 1, 0, False),
        ('<answer>```json\n[{"bbox_2d": [1, 2, 3, 4, 5], "label": "a"}]\n```</answer>', 1, 0, False),
        ('<answer>```json\n[{"bbox_2d": [1, 2, 3, 4], "label": 7}]\n```</answer>', 1, 0, False),
    ],
)
def test_parse_vlm_r1_mode(text, raw, boxes, says_none):
    parsed = parse_detections(text, "vlm_r1")
    assert (parsed.raw_count, len(parsed.boxes), parsed.says_none) == (raw, boxes, says_none)


def test_parse_lenient_mode():
    bare = '<answer>[{"bbox_2d": [1, 2, 3, 4], "label": "a"}]</answer>'
    assert parse_detections(bare, "lenient").boxes == ((1.0, 2.0, 3.0, 4.0),)
    single = '<answer>```\n{"bbox_2d": [1, 2, 3, 4], "label": "a"}\n```</answer>'
    assert parse_detections(single, "lenient").raw_count == 1
    assert parse_detections("<answer>None</answer>", "lenient") == Detections((), (), 0, True)
    assert parse_detections("<answer>I see a dog</answer>", "lenient") is None
    assert parse_detections("no answer tag", "lenient") is None
    assert parse_detections("no answer tag", "vlm_r1") is None


@pytest.mark.parametrize(
    "text",
    [
        "<answer>```json\n" + "[" * 200_000 + "\n```</answer>",
        "<answer>```json\n" + '[{"label": "' + "\\" * 30_001 + '"}]' + "\n```</answer>",
        "<answer>```json\n[" + "1" * 60_000 + "]\n```</answer>",
        "<answer>" * 8000 + "</answer>",
        "```json" * 9000 + "<answer>```json" * 3000,
        "<answer>```json\n" + '{"a": ' * 20 + "1" + "}" * 20 + "\n```</answer>",
        "<answer>```json\n__import__('os').system('echo PWNED')\n```</answer>",
    ],
)
def test_parse_adversarial_answers_in_bounded_time(text):
    start = time.perf_counter()
    for mode in ("vlm_r1", "lenient"):
        parsed = parse_detections(text, mode)
        assert parsed is None or not parsed.boxes
        gt = truth((A, "a"))
        for fn in (map_reward, ap50_reward, od_length_reward, weighted_sum_reward, hungarian_reward):
            assert 0.0 <= fn(parsed, gt) <= 1.0
    assert time.perf_counter() - start < 2.0


# -- the task: data, frames, metrics ----------------------------------------------------------------


def _coco_file(tmp_path: Path, annotations, images=None, categories=None) -> Path:
    for name, size in (("a.png", (200, 100)), ("b.png", (100, 100))):
        Image.new("RGB", size, (128, 128, 128)).save(tmp_path / name)
    data = {
        "images": images
        if images is not None
        else [
            {"id": 1, "file_name": "a.png", "width": 200, "height": 100},
            {"id": 2, "file_name": "b.png", "width": 100, "height": 100},
        ],
        "annotations": annotations,
        "categories": categories if categories is not None else [{"id": 1, "name": "dog"}, {"id": 3, "name": "cat"}],
    }
    path = tmp_path / "instances.json"
    path.write_text(json.dumps(data, indent=1))
    return path


def test_coco_loader_one_sample_per_image_in_original_pixels(tmp_path):
    path = _coco_file(
        tmp_path,
        [
            {"id": 1, "image_id": 1, "category_id": 1, "bbox": [10, 20, 30, 40], "area": 900, "iscrowd": 0},
            {"id": 2, "image_id": 1, "category_id": 3, "bbox": [100, 0, 50, 50], "iscrowd": 1},
        ],
    )
    split = Detection().load(path, FrameSpec("absolute", 3136, 12845056))
    assert not split.errors
    first, second = split.samples
    assert first.id == "1" and first.solution == [{"box": [10.0, 20.0, 40.0, 60.0], "label": "dog", "area": 900.0}]
    assert first.meta["crowd"] == [{"box": [100.0, 0.0, 150.0, 50.0], "label": "cat", "area": 2500.0}]
    assert first.meta["prompt_categories"] == ["dog"] and second.solution == []
    assert len(second.meta["prompt_categories"]) == 1  # an empty image still names a category
    assert first.source.endswith(" images[0]") and ":" in first.source


@pytest.mark.parametrize(
    "annotation,where,message",
    [
        (
            {"id": 1, "image_id": 1, "category_id": 1, "bbox": [190, 20, 30, 40]},
            "annotations[0]",
            "outside the 200x100 image",
        ),
        ({"id": 1, "image_id": 1, "category_id": 1, "bbox": [10, 20, -3, 40]}, "annotations[0]", "negative size"),
        (
            {"id": 1, "image_id": 1, "category_id": 2, "bbox": [10, 20, 3, 4]},
            "annotations[0]",
            "category_id 2 is not an id",
        ),
        ({"id": 1, "image_id": 1, "bbox": [10, 20, 3, 4]}, "annotations[0]", "missing key 'category_id'"),
        ({"id": 1, "image_id": 1, "category_id": 1, "bbox": [10, 20, 3]}, "annotations[0]", "must be 4 numbers"),
        (
            {"id": 1, "image_id": 9, "category_id": 1, "bbox": [10, 20, 3, 4]},
            "annotations[0]",
            "image_id 9 is not an id",
        ),
        # a number no float holds: the loader's own code raises, and the record still costs only its image
        ({"id": 1, "image_id": 1, "category_id": 1, "bbox": [10, 20, 10**400, 4]}, "annotations[0]", "OverflowError"),
        (
            {"id": 1, "image_id": 1, "category_id": 1, "bbox": [10, 20, 3, 4], "area": 10**400},
            "annotations[0]",
            "OverflowError",
        ),
    ],
)
def test_coco_loader_reports_bad_annotations_with_their_place(tmp_path, annotation, where, message):
    ok = {"id": 2, "image_id": 2, "category_id": 3, "bbox": [1, 1, 5, 5]}
    path = _coco_file(tmp_path, [annotation, ok])
    split = Detection().load(path, FrameSpec())
    assert [e.message for e in split.errors if message in e.message], split.errors
    (error,) = split.errors
    assert error.source.startswith(f"{path}:") and error.source.endswith(where)
    line = int(error.source.split(":")[-1].split()[0])
    assert line > 1 and path.read_text().splitlines()[line - 1].strip() == "{"  # where the record starts
    ids = [s.id for s in split.samples]
    assert "2" in ids and ("1" not in ids or "image_id 9" in message)  # the image with the bad box is skipped
    with pytest.raises(RecordError, match=message):
        Detection().load(path, FrameSpec(), strict=True)


def test_coco_loader_reports_missing_image_and_bad_category(tmp_path):
    images = [
        {"id": 1, "file_name": "a.png", "width": 200, "height": 100},
        {"id": 2, "file_name": "gone.png", "width": 5, "height": 5},
    ]
    categories = [{"id": 1, "name": "dog"}, {"id": 1, "name": "cat"}, {"name": "bird"}]
    path = _coco_file(tmp_path, [], images=images, categories=categories)
    split = Detection().load(path, FrameSpec())
    messages = {e.source.split(" ")[-1]: e.message for e in split.errors}
    assert "duplicate category id 1" in messages["categories[1]"]
    assert "missing key 'id'" in messages["categories[2]"]
    assert "image not found" in messages["images[1]"]
    assert [s.id for s in split.samples] == ["1"]
    # Without images the record's width and height are trusted.
    assert len(Detection().load(path, FrameSpec(), require_images=False).samples) == 2


def test_alias_and_prompt_categories(tmp_path):
    assert task_class("coco") is task_class("detection")
    path = _coco_file(
        tmp_path,
        [{"id": 1, "image_id": 1, "category_id": 3, "bbox": [1, 1, 5, 5]}],
        categories=[{"id": i, "name": n} for i, n in enumerate(["dog", "cat", "cow", "pig"], 1)],
    )
    task = Detection(options={"negative_categories": 2})
    first = task.load(path, FrameSpec()).samples[0]
    again = task.load(path, FrameSpec()).samples[0]
    assert "cow" in first.meta["prompt_categories"] and len(first.meta["prompt_categories"]) == 3
    assert first.meta["prompt_categories"] == again.meta["prompt_categories"]  # deterministic
    assert "['" in task.messages(first)[0]["content"][1]["text"]  # a Python list, as VLM-R1 writes it
    everything = Detection(options={"prompt_categories": "all"}).load(path, FrameSpec()).samples[0]
    assert everything.meta["prompt_categories"] == ["dog", "cat", "cow", "pig"]


def test_a_category_present_only_as_crowd_regions_is_never_named_absent(tmp_path):
    """A crowd region of 'cat' beside a dog: the prompt asks for the dog and the absent
    categories, never the cat, whose "None" would earn the no-object reward although it is there."""
    names = ["dog", "cat", "cow", "pig", "hen"]
    annotations = [
        {"id": 1, "image_id": 1, "category_id": 1, "bbox": [1, 1, 5, 5]},
        {"id": 2, "image_id": 1, "category_id": 2, "bbox": [2, 2, 6, 6], "iscrowd": 1},
    ]
    path = _coco_file(tmp_path, annotations, categories=[{"id": i, "name": n} for i, n in enumerate(names, 1)])
    sample = Detection(options={"negative_categories": 4}).load(path, FrameSpec()).samples[0]
    assert sample.meta["prompt_categories"] == ["dog", "cow", "pig", "hen"]  # every absent one, not the cat
    assert (
        Detection(options={"prompt_categories": "all"}).load(path, FrameSpec()).samples[0].meta["prompt_categories"]
        == names
    )


def _one_image(tmp_path, kind: str, max_pixels: int):
    Image.new("RGB", (1120, 560), (128, 128, 128)).save(tmp_path / "im.png")
    data = {
        "images": [{"id": 7, "file_name": "im.png", "width": 1120, "height": 560}],
        "annotations": [{"id": 1, "image_id": 7, "category_id": 1, "bbox": [100, 100, 200, 100]}],
        "categories": [{"id": 1, "name": "dog"}],
    }
    (tmp_path / "d.json").write_text(json.dumps(data))
    return Detection().load(tmp_path / "d.json", FrameSpec(kind, 3136, max_pixels)).samples[0]


def test_rewards_map_predictions_back_from_the_model_frame(tmp_path):
    # 1120x560 with max_pixels 560*280 resizes to exactly half: model pixels = original / 2.
    sample = _one_image(tmp_path, "absolute", 560 * 280)
    task = Detection(rewards={"map": 1.0, "weighted_sum": 1.0})
    fns = task.reward_functions()
    assert fns["map"]([answer([{"bbox_2d": [50, 50, 150, 100], "label": "dog"}])], [sample]) == [pytest.approx(1.0)]
    assert task.predict(answer([{"bbox_2d": [50, 50, 150, 100], "label": "dog"}]), sample) == [
        {"box": [100.0, 100.0, 300.0, 200.0], "label": "dog"}
    ]
    assert fns["map"]([answer([{"bbox_2d": [100, 100, 300, 200], "label": "dog"}])], [sample]) == [
        0.0
    ]  # original pixels are wrong here
    assert '"bbox_2d": [50, 50, 150, 100]' in task.target(sample)
    qwen2 = _one_image(tmp_path, "norm1000", 12845056)
    assert task.predict(answer([{"bbox_2d": [89, 179, 268, 357], "label": "dog"}]), qwen2)[0]["box"] == pytest.approx(
        [99.68, 100.24, 300.16, 199.92]
    )


@pytest.mark.parametrize("ids_out_of_order", [False, True])
def test_split_metrics_equal_pycocotools_on_the_file(tmp_path, ids_out_of_order):
    """Every box scores 1.0, so COCOeval breaks ties by image id (it sorts them), not by the
    file's order: a file listing its images out of id order gives the same numbers."""
    task = Detection()
    path = tmp_path / "val.json"
    task.synthesize(path, size=12, seed=3)
    if ids_out_of_order:
        data = json.loads(path.read_text())
        data["images"] = data["images"][5:] + data["images"][:5][::-1]
        path.write_text(json.dumps(data))
    split = task.load(path, FrameSpec("original"))
    data = json.loads(path.read_text())
    completions, results = [], []
    for k, sample in enumerate(split.samples):
        entries = []
        for j, o in enumerate(sample.solution):
            x1, y1, x2, y2 = o["box"]
            shift = (k + j) % 4  # some exact, some off by a few pixels, one in four dropped
            if shift == 3:
                continue
            entries.append({"bbox_2d": [x1 + shift, y1, x2 + shift, y2 - shift], "label": o["label"]})
        if k % 5 == 0:
            entries.append({"bbox_2d": [0, 0, 30, 30], "label": sample.meta["categories"][0]})
        completions.append(answer(entries) if entries else "<think>-</think><answer>None</answer>")
        cat = {c["name"]: c["id"] for c in data["categories"]}
        for e in entries:
            x1, y1, x2, y2 = e["bbox_2d"]
            results.append(
                {
                    "image_id": int(sample.id),
                    "category_id": cat[e["label"]],
                    "bbox": [x1, y1, x2 - x1, y2 - y1],
                    "score": 1.0,
                }
            )
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(str(path))
        evaluator = COCOeval(gt, gt.loadRes(results), "bbox")
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    metrics = task.metrics(split.samples, completions)
    for name, index in (("map", 0), ("ap50", 1), ("ap75", 2), ("ap_small", 3), ("ap_medium", 4), ("ar100", 8)):
        assert metrics[name] == pytest.approx(evaluator.stats[index], abs=1e-12), name
    assert metrics["format_rate"] == 1.0 and metrics["parse_rate"] == 1.0
    assert 0 < metrics["map"] < 1


def test_split_metrics_use_the_files_areas_and_recall_at_100_as_pycocotools(tmp_path):
    """Eleven objects found: AR@100 is 1 where AR@10 is 10/11; the file's areas (medium) decide
    the area ranges, not the boxes' (small)."""
    boxes = [[18 * i, 10, 10, 10] for i in range(11)]
    annotations = [
        {"id": i + 1, "image_id": 1, "category_id": 1, "bbox": b, "area": 5000, "iscrowd": 0}
        for i, b in enumerate(boxes)
    ]
    path = _coco_file(tmp_path, annotations)
    task = Detection()
    samples = task.load(path, FrameSpec("original")).samples
    entries = [{"bbox_2d": [x, y, x + w, y + h], "label": "dog"} for x, y, w, h in boxes]
    completions = [answer(entries) if s.solution else "<think>-</think><answer>None</answer>" for s in samples]
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(str(path))
        evaluator = COCOeval(
            gt, gt.loadRes([{"image_id": 1, "category_id": 1, "bbox": b, "score": 1.0} for b in boxes]), "bbox"
        )
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    stats = evaluator.stats
    assert stats[8] == 1.0 and stats[7] == pytest.approx(10 / 11) and stats[3] == -1 and stats[4] == 1.0
    metrics = task.metrics(samples, completions)
    for name, index in (("map", 0), ("ap50", 1), ("ap_small", 3), ("ap_medium", 4), ("ap_large", 5), ("ar100", 8)):
        assert metrics[name] == pytest.approx(stats[index], abs=1e-12), name


def test_per_sample_map_equals_split_metric_on_one_image(tmp_path):
    task = Detection(rewards={"map": 1.0})
    path = tmp_path / "one.json"
    task.synthesize(path, size=6, seed=1)
    sample = next(s for s in task.load(path, FrameSpec("original")).samples if len(s.solution) >= 2)
    x1, y1, x2, y2 = sample.solution[0]["box"]
    completion = answer(
        [
            {"bbox_2d": [x1 + 1, y1, x2, y2 - 2], "label": sample.solution[0]["label"]},
            {"bbox_2d": [0, 0, 9, 9], "label": sample.solution[0]["label"]},
        ]
    )
    reward = task.reward_functions()["map"]([completion], [sample])[0]
    assert reward == pytest.approx(task.metrics([sample], [completion])["map"], abs=1e-9)


def test_coco_subset_keeps_named_categories_and_prefixes_file_names(tmp_path):
    from data_prep.detection import coco_subset

    path = _coco_file(
        tmp_path,
        [
            {"id": 1, "image_id": 1, "category_id": 1, "bbox": [1, 1, 5, 5]},
            {"id": 2, "image_id": 2, "category_id": 3, "bbox": [1, 1, 5, 5]},
        ],
    )
    counts = coco_subset(path, tmp_path / "cats.json", ["cat"], image_prefix="imgs/")
    assert counts == {"images": 1, "annotations": 1, "categories": 1}
    data = json.loads((tmp_path / "cats.json").read_text())
    assert [img["file_name"] for img in data["images"]] == ["imgs/b.png"]
    assert coco_subset(path, tmp_path / "all.json", keep_empty=True)["images"] == 2
    with pytest.raises(ValueError, match="no category named 'cow'"):
        coco_subset(path, tmp_path / "x.json", ["cow"])


def test_coco_subset_names_the_item_a_file_lacks_a_key_of(tmp_path, capsys):
    from data_prep.detection import coco_subset, main

    images = [{"id": 1, "file_name": "a.png"}, {"id": 2}]
    for kwargs, message in [
        ({"categories": [{"id": 1, "name": "dog"}, {"id": 3}]}, "categories[1]: missing key 'name'"),
        ({"categories": [{"id": "1", "name": "dog"}]}, "categories[0]: key 'id' has the wrong type str"),
        ({"images": [*images, "c.png"]}, "images[2]: an item must be an object, got str"),
    ]:
        path = _coco_file(tmp_path, [], **kwargs)
        with pytest.raises(ValueError, match=re.escape(f"{path} {message}")):
            coco_subset(path, tmp_path / "out.json")
    path = _coco_file(tmp_path, [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [1, 1, 5, 5]}], images=images)
    assert coco_subset(path, tmp_path / "out.json")["images"] == 1  # no file name needed to keep one as it is
    with pytest.raises(ValueError, match=re.escape(f"{path} images[1]: missing key 'file_name'")):
        coco_subset(path, tmp_path / "prefixed.json", image_prefix="val2017/", keep_empty=True)
    path.write_text(json.dumps({"images": [], "annotations": []}))
    assert main([str(path), str(tmp_path / "x.json")]) == 2
    assert capsys.readouterr().err == f"error: {path}: expected a COCO instances object with a list 'categories'\n"


def test_coco_subset_keeps_empty_images_when_asked_and_drops_the_annotations_of_images_cut_by_max_images(tmp_path):
    from data_prep.detection import coco_subset

    annotations = [
        {"id": 1, "image_id": 1, "category_id": 1, "bbox": [1, 1, 5, 5]},
        {"id": 2, "image_id": 2, "category_id": 3, "bbox": [1, 1, 5, 5]},
        {"id": 3, "image_id": 2, "category_id": 1, "bbox": [9, 9, 5, 5]},
    ]
    path = _coco_file(tmp_path, annotations)
    data = json.loads(path.read_text())
    data |= {"info": {"year": 2017}, "licenses": [{"id": 1, "name": "cc"}]}
    path.write_text(json.dumps(data))
    # "cat" is only on image 2: keep_empty keeps image 1 too, without its dog.
    assert coco_subset(path, tmp_path / "cats.json", ["cat"], keep_empty=True) == {
        "images": 2, "annotations": 1, "categories": 1
    }  # fmt: skip
    cats = json.loads((tmp_path / "cats.json").read_text())
    assert [img["id"] for img in cats["images"]] == [1, 2] and [a["id"] for a in cats["annotations"]] == [2]
    assert cats["info"] == {"year": 2017} and cats["licenses"] == [{"id": 1, "name": "cc"}]
    assert coco_subset(path, tmp_path / "first.json", max_images=1) == {"images": 1, "annotations": 1, "categories": 2}
    first = json.loads((tmp_path / "first.json").read_text())
    assert [img["id"] for img in first["images"]] == [1] and [a["id"] for a in first["annotations"]] == [1]


def test_synthetic_coco_ids_start_at_one_and_boxes_areas_and_labels_match_the_pixels(tmp_path):
    from data_prep.detection import category_names, write_synthetic_coco
    from data_prep.shapes import COLORS, SceneSpec

    path = write_synthetic_coco(tmp_path / "instances.json", 6, seed=1, label_by="color_shape", empty_fraction=0.0)
    coco = json.loads(path.read_text())
    names = category_names(SceneSpec(), "color_shape")
    assert coco["categories"] == [{"id": i + 1, "name": n, "supercategory": "shape"} for i, n in enumerate(names)]
    assert [img["id"] for img in coco["images"]] == [1, 2, 3, 4, 5, 6]
    assert [a["id"] for a in coco["annotations"]] == list(range(1, len(coco["annotations"]) + 1))
    assert {a["image_id"] for a in coco["annotations"]} == {1, 2, 3, 4, 5, 6}  # no image is empty
    name_of = {c["id"]: c["name"] for c in coco["categories"]}
    for ann in coco["annotations"]:
        x, y, w, h = ann["bbox"]
        assert ann["area"] == w * h and ann["iscrowd"] == 0
        image = Image.open(tmp_path / coco["images"][ann["image_id"] - 1]["file_name"]).convert("RGB")
        # (w/2, 2h/3) inside the box is inside every shape: its pixel is the fill color the label names
        assert image.getpixel((x + w // 2, y + h * 2 // 3)) == COLORS[name_of[ann["category_id"]].split()[0]]


def test_synthetic_coco_empty_fraction_one_draws_no_object_and_a_records_file_name_is_refused(tmp_path):
    from data_prep.detection import write_synthetic_coco

    coco = json.loads(write_synthetic_coco(tmp_path / "empty.json", 4, seed=0, empty_fraction=1.0).read_text())
    assert len(coco["images"]) == 4 and coco["annotations"] == []
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'x.jsonl'}: COCO instances are one JSON object")):
        write_synthetic_coco(tmp_path / "x.jsonl", 1, seed=0)


def test_benchmark_runs_and_agrees_with_pycocotools():
    import subprocess
    import sys

    bench = Path(__file__).resolve().parents[2] / "bench" / "ap_vs_pycocotools.py"
    out = subprocess.run(
        [sys.executable, str(bench), "--samples", "20", "--repeats", "1"], capture_output=True, text=True, check=True
    )
    row = json.loads(out.stdout)
    assert row["samples"] == 20 and row["max_abs_diff"] < 1e-9
    assert {"vlrl_ms_per_sample", "pycocotools_ms_per_sample", "speedup"} <= set(row)


def test_json_format_variant_wants_a_well_formed_list_or_none():
    task = Detection(options={"format": "think_answer_json"})
    fmt = task.reward_functions()["format"]
    good = answer([{"bbox_2d": [1, 2, 3, 4], "label": "a"}])
    bad_entry = answer([{"bbox_2d": [1, 2, 3, 4], "label": "a"}, {"bbox_2d": [1, 2], "label": "a"}])
    bare = '<think>t</think><answer>[{"bbox_2d": [1, 2, 3, 4], "label": "a"}]</answer>'
    none = "<think>t</think> <answer>None</answer>"
    assert fmt([good, bad_entry, bare, none, "<answer>None</answer>"], [None] * 5) == [1.0, 0.0, 0.0, 1.0, 0.0]
    lenient = Detection(options={"format": "think_answer_json", "answer_parse": "lenient"})
    assert lenient.reward_functions()["format"]([bare], [None]) == [1.0]
    assert Detection().reward_functions()["format"]([bad_entry, bare], [None] * 2) == [1.0, 1.0]  # VLM-R1's


@pytest.mark.parametrize(
    "options",
    [{"negative_categories": -1}, {"iou_threshold": 1.5}, {"prompt_template": "detect"}, {"answer_parse": "eval"}],
)
def test_bad_options_fail_with_the_key(options):
    from vlrl.config import ConfigError

    with pytest.raises(ConfigError, match="task.options"):
        Detection(options=options)


def vlm_r1_weighted_sum(content: str, sol: str) -> float:
    """VLM-R1's accuracy_reward for accu_reward_method 'weighted_sum', transcribed from
    om-ai-lab/VLM-R1 at 90052f4 (src/open-r1-multimodal/src/open_r1/grpo_jsonl.py: clean_text,
    iou, detection_score); `sol` in the model's frame."""

    def clean_text(text, exclue_chars=("\n", "\r")):
        answer_matches = re.findall(r"<answer>(.*?)</answer>", text, re.DOTALL)
        if answer_matches:
            text = answer_matches[-1]
        for char in exclue_chars:
            text = re.sub(r"(?<=\s)" + re.escape(char), "", text)
            text = re.sub(r"(?<!\s)" + re.escape(char), " ", text)
        return text.strip().rstrip(".").lower()

    def iou(box1, box2):
        inter_x1, inter_y1 = max(box1[0], box2[0]), max(box1[1], box2[1])
        inter_x2, inter_y2 = min(box1[2] - 1, box2[2] - 1), min(box1[3] - 1, box2[3] - 1)
        inter = (
            (inter_x2 - inter_x1 + 1) * (inter_y2 - inter_y1 + 1) if inter_x1 < inter_x2 and inter_y1 < inter_y2 else 0
        )
        union = (box1[2] - box1[0]) * (box1[3] - box1[1]) + (box2[2] - box2[0]) * (box2[3] - box2[1]) - inter
        return float(inter) / union

    def boxes_of(text):
        match = re.search(r"```json(.*?)```", clean_text(text), re.DOTALL)
        block = match.group(1).strip() if match else None
        if not block:
            return []
        try:
            return [item for item in json.loads(block)]
        except Exception:
            return []

    def detection_score(content, sol, iou_threshold=0.5, alpha=0.7, beta=0.0, gamma=0.3):
        pred_boxes, gt_boxes = boxes_of(content), boxes_of(sol)
        if len(gt_boxes) == 0:
            return 1.0 if not pred_boxes else 0.0
        if len(pred_boxes) == 0:
            return 0.0
        matches, unmatched_preds, unmatched_gts = [], list(range(len(pred_boxes))), list(range(len(gt_boxes)))
        iou_matrix = []
        for pred_box in pred_boxes:
            row = []
            for gt_box in gt_boxes:
                try:
                    row.append(iou(pred_box["bbox_2d"], gt_box["bbox_2d"]))
                except Exception:
                    row.append(0.0)
            iou_matrix.append(row)
        while unmatched_preds and unmatched_gts:
            max_iou, max_pred_idx, max_gt_idx = -1, -1, -1
            for pred_idx in unmatched_preds:
                for gt_idx in unmatched_gts:
                    if iou_matrix[pred_idx][gt_idx] > max_iou:
                        max_iou, max_pred_idx, max_gt_idx = iou_matrix[pred_idx][gt_idx], pred_idx, gt_idx
            if max_iou < iou_threshold:
                break
            label_correct = pred_boxes[max_pred_idx]["label"].lower() == gt_boxes[max_gt_idx]["label"].lower()
            matches.append({"iou": max_iou if label_correct else 0, "label_correct": label_correct})
            unmatched_preds.remove(max_pred_idx)
            unmatched_gts.remove(max_gt_idx)
        position_score = sum(m["iou"] for m in matches) / len(gt_boxes) if matches else 0.0
        label_score = sum(1.0 for m in matches if m["label_correct"]) / len(gt_boxes) if matches else 0.0
        miss_rate = len(unmatched_gts) / len(gt_boxes)
        false_alarm_rate = len(unmatched_preds) / len(pred_boxes) if pred_boxes else 0.0
        completeness_score = 1.0 - (miss_rate + false_alarm_rate) / 2.0
        return (alpha * position_score + beta * label_score + gamma * completeness_score) / (alpha + beta + gamma)

    clean_content, sol = clean_text(content), clean_text(sol)
    if sol == "none":
        return 1.0 if clean_content == "none" else 0.0
    return detection_score(clean_content, sol)


DOG = '{"bbox_2d": [110, 100, 300, 200], "label": "dog"}'
WEIGHTED_SUM_COMPLETIONS = [
    f"<think>a</think><answer>```json\n[{DOG}]\n```</answer>",
    '<think>a</think><answer>```json\n[{"bbox_2d": [110, 100, NaN, 200], "label": "dog"}]\n```</answer>',
    '<think>a</think><answer>```json\n[{"BBOX_2D": [110, 100, 300, 200], "LABEL": "DOG"}]\n```</answer>',
    f"no answer tag, a fence all the same ```json [{DOG}] ```",
    f'<answer>```json [{{"bbox_2d": [0, 0, 9, 9], "label": "dog"}}] ``` then ```json [{DOG}] ```</answer>',
    '<answer>```json [{"bbox_2d": [110, 100, 300, 200], "label": "do\ng"}] ```</answer>',  # the newline becomes a space
    f'<answer>```json [{DOG}, {{"bbox_2d": [true, 0, 1, 1], "label": "dog"}}] ```</answer>',
    f"<answer>x</answer>\n<answer>```json\n[{DOG}, {DOG}]\n```.</answer>",
    "<answer>None.</answer>",
    '<answer>```json {"bbox_2d": [110, 100, 300, 200], "label": "dog"} ```</answer>',  # a dict: its keys are entries
]


@pytest.mark.parametrize("completion", WEIGHTED_SUM_COMPLETIONS)
def test_weighted_sum_reads_answers_as_vlm_r1_does(tmp_path, completion):
    sample = _one_image(tmp_path, "absolute", 12845056)  # 1120x560: the model's frame is the image's
    sol = '```json\n[{"bbox_2d": [100, 100, 300, 200], "label": "dog"}]\n```'
    ours = Detection(rewards={"weighted_sum": 1.0}).reward_functions()["weighted_sum"]([completion], [sample])[0]
    assert ours == pytest.approx(vlm_r1_weighted_sum(completion, sol), abs=1e-12)


def test_hungarian_accepts_every_category_of_the_file_unless_told_otherwise(tmp_path):
    path = _coco_file(tmp_path, [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 50, 50]}])
    completion = answer([{"bbox_2d": [0, 0, 50, 50], "label": "dog"}, {"bbox_2d": [100, 50, 150, 100], "label": "cat"}])
    scores = {}
    for labels, penalty in (("categories", False), ("categories", True), ("prompted", False)):
        options = {"hungarian_labels": labels, **({"hungarian_penalty": True} if penalty else {})}
        task = Detection(options=options, rewards={"hungarian": 1.0})
        sample = task.load(path, FrameSpec("original")).samples[0]
        assert sample.meta["prompt_categories"] == ["dog"]
        scores[labels, penalty] = task.reward_functions()["hungarian"]([completion], [sample])[0]
    # Both entries count (format 1): one of two predictions matched, F1 2/3, class and IoU 1; by
    # default no penalty (PR1's detection recipe), else 0.5 * (1/2 false alarms + 0 misses).
    f1 = 2 * (0.5 * 1.0) / (1.5 + 1e-8)
    assert scores["categories", False] == pytest.approx((0.25 + 0.75 * f1 + 2.0) / 3, abs=1e-7)
    assert scores["categories", True] == pytest.approx((0.25 + 0.75 * f1 + 2.0 - 0.25) / 3, abs=1e-7)
    # "cat" was not asked for: a wrong-format entry (format 1/2), the dog alone is matched.
    assert scores["prompted", False] == pytest.approx((0.25 * 0.5 + 0.75 + 2.0) / 3, abs=1e-7)
