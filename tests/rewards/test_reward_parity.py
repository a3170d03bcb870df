"""Reward parity on the edges issue 27 named: Perception-R1's counting boxes and point reward,
GUI-R1's format and accuracy, each against the value the public code gives.

The expected values are literals, read off the public code run on these exact strings:
Perception-R1 at linkangheng/PR1@accb7cb (src/open_r1/utils.py `extract_boxes`, `num_scale`,
`match_and_compute_distances`; src/open_r1/rewards.py `pr1_counting_reward`; read in the fork
philipmit/PR1@ef4fe26, whose files are identical), with torch 2.14 on CPU; GUI-R1 at
ritzz-ai/GUI-R1@d43eea2 (verl/utils/reward_score/r1gui.py `r1gui_format_reward`,
`r1gui_accuracy_reward`). PR1 computes in float32, vlrl in float64: its values are compared
to 1e-6.
"""

from __future__ import annotations

import time

import pytest
from PIL import Image

from rewards.counting import MAX_BOX_CHARS, count_points, pr1_box_centers, pr1_format
from rewards.gui import gui_r1_format
from tasks.counting import Counting
from tasks.gui import GuiAction
from vlrl.data.records import FrameSpec, RecordContext

# -- Perception-R1 counting ----------------------------------------------------------------------
PR1_TRUTH = [[221, 343], [476, 173]]  # the solution in pr1_counting_reward's docstring
NEAR_FIRST = "(200,300),(240,380)"  # center (220, 340)
NEAR_SECOND = "(450,150),(500,200)"  # center (475, 175)
INF_BOX = "(1e999, 298),(300,400)"  # 1e999 is the float inf to Python; center (inf, 349)


def pr1_completion(*boxes: str) -> str:
    return (
        "<|object_ref_start|>people<|object_ref_end|>"
        + "".join(f"<|box_start|>{b}<|box_end|>" for b in boxes)
        + "<|im_end|>"
    )


def pr1_reward(*boxes: str, truth=PR1_TRUTH) -> tuple[int, float]:
    """(boxes counted, point reward) as pr1_counting_reward and evaluate_counting.py compute them."""
    completion = pr1_completion(*boxes)
    centers = pr1_box_centers(completion) or []
    return len(centers), count_points(centers, truth) if pr1_format(completion) else 0.0


@pytest.mark.parametrize(
    "box,count,reward",
    [
        ("(True, 298),(300,400)", 2, 0.974193811416626),  # True is 1
        (NEAR_FIRST + " # the first", 2, 0.9980913996696472),  # a comment
        ("[[200,300],[240,380]]", 2, 0.9980913996696472),
        ("(((200,300)),((240,380)))", 2, 0.9980913996696472),  # redundant parentheses
        ("(0x10,300),(240,380)", 2, 0.9663118720054626),
        ("(1_00,300),(240,380)", 2, 0.981147050857544),
        ("(- 1,300),(240,380)", 2, 0.9633080959320068),  # a sign and a space
        ("(00,2),(3,4)", 2, 0.8561272025108337),
        ("b'\\x01\\x02', b'\\x03\\x04'", 2, 0.8562229871749878),  # bytes unpack to integers
        ("{(1,2),(3,4)}", 2, 0.8562229871749878),  # a set of two pairs
        ("{(1,2): 0, (3,4): 1}", 2, 0.8562229871749878),  # a dict unpacks its keys
        ("(1+2j, 298),(300,400)", 2, 0.0),  # counted; the complex center makes torch raise
        ("(" + "1" * 400 + ", 298),(-" + "1" * 400 + ",400)", 2, 0.9210453629493713),  # integers that cancel
        ("(" + "1" * 400 + ", 298),(300,400)", 1, 0.4992094337940216),  # int too large for a float: skipped
        ("(" + "1" * 400 + ", 298),(1.5,400)", 1, 0.4992094337940216),
        ("('a','b'),('c','d')", 1, 0.4992094337940216),  # 'ac' / 2 raises: skipped
        ("(None,1),(2,3)", 1, 0.4992094337940216),
        ("(1,2),(3,4),(5,6)", 1, 0.4992094337940216),
        ("(07,2),(3,4)", 1, 0.4992094337940216),  # no leading zeros in Python 3
        ("(1,\u00a02),(3,4)", 1, 0.4992094337940216),  # NBSP is not Python whitespace
        ("(\u0663,2),(3,4)", 1, 0.4992094337940216),  # nor is an Arabic-Indic digit a digit
    ],
)
def test_box_text_is_read_as_perception_r1s_eval_reads_a_literal(box, count, reward):
    assert pr1_reward(box, NEAR_SECOND) == (count, pytest.approx(reward, abs=1e-6))


@pytest.mark.parametrize(
    "box,pr1_count",
    [
        ("(float('inf'), 298),(300,400)", 2),  # a call: PR1 counts it (and scores 0)
        ("(--1,300),(240,380)", 2),  # two signs: PR1 reads 1 (reward 0.9636614918708801)
        ("(1+1,300),(240,380)", 2),  # arithmetic
        ("(200,300),(240,380)" + " " * MAX_BOX_CHARS, 2),  # longer than MAX_BOX_CHARS
    ],
)
def test_box_text_only_eval_reads_is_skipped_a_documented_deviation(box, pr1_count):
    assert pr1_reward(box, NEAR_SECOND) == (pr1_count - 1, pytest.approx(0.4992094337940216, abs=1e-6))


def test_hostile_boxes_are_skipped_quickly():
    start = time.perf_counter()
    boxes = ("(" * 600, "-" * 1000 + "1", "1+" * 500 + "1", "'\ud800'", "{[1]: 2}")
    assert pr1_box_centers(pr1_completion(*boxes)) is None
    assert time.perf_counter() - start < 2.0


@pytest.mark.parametrize(
    "boxes,count,reward",
    [
        ((NEAR_FIRST, NEAR_SECOND), 2, 0.9980913996696472),  # typical: both matched closely
        ((INF_BOX, NEAR_SECOND), 2, 0.0),  # counted; linear_sum_assignment: "cost matrix is infeasible"
        ((INF_BOX,), 1, 0.0),
        (("(-1e999, 298),(300,400)", NEAR_SECOND), 2, 0.0),
        ((INF_BOX, NEAR_SECOND, NEAR_FIRST), 3, 0.6653943061828613),  # more boxes than objects: inf left unmatched
        (("(-1e999, 298),(300,400)", NEAR_SECOND, NEAR_FIRST), 3, 0.6653943061828613),
        ((INF_BOX, INF_BOX, NEAR_SECOND), 3, 0.0),  # two infinite boxes for two objects: infeasible
        ((INF_BOX, INF_BOX, NEAR_SECOND, NEAR_FIRST), 4, 0.4990456998348236),
        (("(1e999, 298),(-1e999,400)", NEAR_SECOND, NEAR_FIRST), 3, 0.0),  # nan center: "invalid numeric entries"
        (("(1e308, 298),(1e308,400)", NEAR_SECOND, NEAR_FIRST), 3, 0.6653943061828613),  # the center sum overflows
        (("(1e300, 298),(1e300,400)", NEAR_SECOND, NEAR_FIRST), 3, 0.6653943061828613),  # inf in float32 only
        (("(1e300, 298),(1e300,400)", NEAR_SECOND), 2, 0.0),
    ],
)
def test_a_box_with_an_infinite_center_is_counted_and_scored_as_perception_r1_does(boxes, count, reward):
    assert pr1_reward(*boxes) == (count, pytest.approx(reward, abs=1e-6))


# Above 25 points on either side torch.cdist computes distances by matrix products, in float32:
# -2 p.g + |p|^2 + |g|^2, where +inf (or a product past float32's range) meets an infinite square.
MANY_TRUTH = [[10 * i + 5, 20 * i + 7] for i in range(26)]
MANY_BOXES = tuple(f"({10 * i},{20 * i}),({10 * i + 12},{20 * i + 14})" for i in range(26))  # each 2 units off


@pytest.mark.parametrize(
    "extra,reward",
    [
        ("(1e999, 298),(300,400)", 0.0),  # nan: "matrix contains invalid numeric entries"
        ("(-1e999, 298),(300,400)", 0.9622820615768433),  # -2 p.g is +inf: inf, no nan, left unmatched
        ("(300, -1e999),(300,400)", 0.9622820615768433),
        ("(1e30, 298),(1e30,400)", 0.9622820615768433),  # finite products
        ("(1e36, 298),(1e36,400)", 0.0),  # -2 p.g overflows to -inf against the infinite square
        ("(-1e36, 298),(-1e36,400)", 0.9622820615768433),
        ("(4e38, 298),(4e38,400)", 0.0),  # past float32's range
        ("(1j, 298),(300,400)", 0.0),  # a complex center: torch.tensor raises "must be real number"
    ],
)
def test_with_more_than_25_points_an_infinite_box_scores_as_perception_r1s_matrix_product_distances(extra, reward):
    assert pr1_reward(*MANY_BOXES, extra, truth=MANY_TRUTH) == (27, pytest.approx(reward, abs=1e-6))
    assert pr1_reward(*MANY_BOXES, truth=MANY_TRUTH) == (26, pytest.approx(0.9992929100990295, abs=1e-6))


def test_the_25_point_boundary_is_torch_cdists():
    far = tuple(f"({3000 + i},3000),({3000 + i},3000)" for i in range(23))
    # 25 predicted points: cdist's direct path, the inf row is unmatched; 26: products, nan.
    assert pr1_reward(NEAR_FIRST, NEAR_SECOND, INF_BOX, *far[:22]) == (25, pytest.approx(0.0798473134636879, abs=1e-6))
    assert pr1_reward(NEAR_FIRST, NEAR_SECOND, INF_BOX, *far) == (26, 0.0)
    # A true x of 0 against -inf: -2 * -inf * 0 is nan.
    zero_x = [[0, 20 * i + 7] for i in range(26)]
    assert pr1_reward(*MANY_BOXES, "(-1e999, 298),(-1e999,400)", truth=zero_x) == (27, 0.0)


def _norm1000_sample(tmp_path, task):
    Image.new("RGB", (1120, 560), (128, 128, 128)).save(tmp_path / "im.png")
    record = {"image": "im.png", "label": "dots", "count": 2, "points": [{"x": 100, "y": 100}, {"x": 300, "y": 200}]}
    return task.build_sample(record, RecordContext("data.json:1", 0, tmp_path, FrameSpec("norm1000", 3136, 560 * 280)))


def test_the_perception_r1_variant_counts_an_infinite_box_so_its_exact_count_holds(tmp_path):
    task = Counting(options={"variant": "perception_r1"})
    sample = _norm1000_sample(tmp_path, task)
    fns = task.reward_functions()
    one_inf = pr1_completion(INF_BOX, "(80,160),(120,200)")
    three = pr1_completion(INF_BOX, "(80,160),(120,200)", "(250,330),(306,384)")
    # PR1's evaluate_counting.py: len(extract_boxes(...)) == 2 == ground truth; its reward: infeasible, 0.
    assert task.predict(one_inf, sample) == 2
    assert fns["count_exact"]([one_inf], [sample]) == [1.0]
    assert fns["count_points"]([one_inf], [sample]) == [0.0]
    # Truth (100, 100), (300, 200) of 1120x560 in the 0-1000 frame; PR1 gives 0.661728024482727.
    assert task.predict(three, sample) == 3
    assert fns["count_points"]([three], [sample]) == pytest.approx([0.661728024482727], abs=1e-6)
    assert task.metrics([sample], [one_inf])["accuracy"] == 1.0


# -- GUI-R1 format -------------------------------------------------------------------------------
def gui_answer(answer: str) -> str:
    return f"<think>ok</think> <answer>{answer}</answer>"


ACTION = "{'action': 'click', 'point': [100, 500], 'input_text': 'no input text'}"
JSON_ACTION = '{"action": "click", "point": [100, 500], "input_text": "no input text"}'


def with_point(point: str) -> str:
    return f"[{{'action': 'click', 'point': {point}, 'input_text': 'no input text'}}]"


@pytest.mark.parametrize(
    "answer,gui_r1",
    [
        (f"[{ACTION}]", 1.0),
        (with_point("[True, 500]"), 1.0),  # isinstance(True, int)
        (with_point("[True, False]"), 1.0),
        (with_point("[100.0, 500]"), 0.0),
        (with_point("(100, 500)"), 1.0),
        (with_point("[100, 500, 7]"), 1.0),  # only point[0] and point[1] are looked at
        (with_point("[100]"), 0.0),  # point[1] raises IndexError
        (with_point("{0: 100, 1: 500}"), 1.0),  # a dict indexes by 0 and 1
        (with_point("b'\\x01\\x02'"), 1.0),  # bytes index to integers
        (with_point("'[100, 500]'"), 0.0),  # a string indexes to strings
        (with_point("None"), 0.0),
        (with_point("[1_000, 500]"), 1.0),
        (with_point("[0x10, 500]"), 1.0),
        (with_point("[" + "9" * 400 + ", 500]"), 1.0),
        (with_point("[" + "9" * 5000 + ", 500]"), 0.0),  # Python's 4300-digit limit: SyntaxError
        (f"[{ACTION}]  # click it", 1.0),  # a comment
        ("[{'action': 'click',  # where\n 'point': [100, 500], 'input_text': 'no input text'}]", 1.0),
        ("[{'action': 'click', \\\n 'point': [100, 500], 'input_text': 'no input text'}]", 1.0),
        ("[{'action':\x0c'click', 'point': [100, 500], 'input_text': 'no input text'}]", 1.0),  # form feed
        ("[{'action':\u00a0'click', 'point': [100, 500], 'input_text': 'no input text'}]", 0.0),  # NBSP
        (f"[{ACTION}]\n[]", 0.0),  # a second line
        ("[{'action': 'cl' 'ick', 'point': [100, 500], 'input_text': 'no input text'}]", 1.0),
        ("[{'action': r'click', 'point': [100, 500], 'input_text': 'no input text'}]", 1.0),
        (f"[{ACTION[:-1]}, 'x': {{1, 2}}}}]", 1.0),  # a set in an extra key
        (f"[{ACTION[:-1]}, 'point': 'x'}}]", 0.0),  # a repeated key: the last one counts
        (f"({ACTION},)", 0.0),  # a tuple is not a list
        ("[]", 1.0),
        (f"[{JSON_ACTION}]", 1.0),
        (f'[{JSON_ACTION[:-1]}, "done": false}}]', 0.0),  # NameError: name 'false' is not defined
        (f'[{JSON_ACTION[:-1]}, "ok": true}}]', 0.0),
        (f'[{JSON_ACTION[:-1]}, "extra": null}}]', 0.0),
        (f"[{ACTION[:-1]}, 'done': True}}]", 1.0),
        ("[" + ", ".join([ACTION] * 60) + "]", 1.0),  # about 4 kB: no size limit there
        ("[" + ", ".join([JSON_ACTION] * 90) + "]", 1.0),
        (f"[{ACTION}]\x00", 0.0),  # null bytes: SyntaxError
        ("[" * 150 + "]" * 150, 0.0),
        ("[" * 201 + "]" * 201, 0.0),  # too many nested parentheses: SyntaxError
    ],
)
def test_gui_r1_format_reads_the_answer_as_its_eval_reads_a_literal(answer, gui_r1):
    assert gui_r1_format(gui_answer(answer)) == gui_r1


@pytest.mark.parametrize(
    "answer",
    [
        with_point("[50+50, 500]"),
        with_point("[--100, 500]"),
        with_point("[-True, 500]"),
        "[{'action': f'click', 'point': [100, 500], 'input_text': 'no input text'}]",
    ],
)
def test_answers_only_eval_reads_fail_the_gui_r1_format_a_documented_deviation(answer):
    assert gui_r1_format(gui_answer(answer)) == 0.0  # GUI-R1: 1.0


@pytest.mark.parametrize(
    "answer",
    ["-" * 60_000 + "1", "+0" * 30_000, "1+" * 30_000 + "1", "[" * 60_000, "'\ud800'", "{[1]: 2}"],
)
def test_hostile_answers_fail_the_gui_r1_format_quickly_as_python_fails_to_parse_them(answer):
    start = time.perf_counter()
    assert gui_r1_format(gui_answer(answer)) == 0.0  # GUI-R1: MemoryError, RecursionError, SyntaxError, ...
    assert time.perf_counter() - start < 2.0


# -- GUI-R1 accuracy: what each parser reads ------------------------------------------------------
def _click_sample(tmp_path, **gt):
    Image.new("RGB", (1120, 560), (200, 200, 200)).save(tmp_path / "screen.png")
    ctx = RecordContext("data.json:1", 0, tmp_path, FrameSpec("original", 3136, 560 * 280))  # model frame = image
    return GuiAction().build_sample({"image": "screen.png", "task": "do it", "gt": {"action_type": "click", **gt}}, ctx)


@pytest.mark.parametrize(
    "point,in_box,near_origin,structured_in_box",
    [
        ("[100, 500]", 1.0, 0.0, 1.0),
        ("'[100, 500]'", 1.0, 0.0, 0.0),  # GUI-R1's regex reads the point out of the string
        ("[-100, 500]", 0.0, 1.0, 0.0),  # `\[(\d+),\s*(\d+)]` finds none: [0, 0, 0, 0], 78 px from (50, 60)
        ("[100.0, 500]", 0.0, 1.0, 1.0),
        ("(100, 500)", 0.0, 1.0, 1.0),
    ],
)
def test_public_regex_accuracy_is_gui_r1s_and_structured_reads_the_point_as_written(
    tmp_path, point, in_box, near_origin, structured_in_box
):
    # in_box, near_origin: GUI-R1's r1gui_accuracy_reward with gt_bbox [90, 490, 110, 510] and [50, 60].
    box = _click_sample(tmp_path, x=100, y=500, bbox=[90, 490, 110, 510])
    origin = _click_sample(tmp_path, x=50, y=60)
    completion = gui_answer(with_point(point))
    public = GuiAction({"parser": "public_regex"}).reward_functions()["accuracy"]
    assert public([completion, completion], [box, origin]) == [in_box, near_origin]
    structured = GuiAction().reward_functions()["accuracy"]  # a documented deviation: the point as written
    assert structured([completion, completion], [box, origin]) == [structured_in_box, 0.0]
