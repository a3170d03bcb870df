"""Reward parity on the edges issue 27 named: Perception-R1's counting boxes and point reward,
each against the value the public code gives.

The expected values are literals, read off the public code run on these exact strings:
Perception-R1 at linkangheng/PR1@accb7cb (src/open_r1/utils.py `extract_boxes`, `num_scale`,
`match_and_compute_distances`; src/open_r1/rewards.py `pr1_counting_reward`; read in the fork
philipmit/PR1@ef4fe26, whose files are identical), with torch 2.14 on CPU. PR1 computes in
float32, vlrl in float64: its values are compared to 1e-6.
"""

from __future__ import annotations

import time

import pytest

from rewards.counting import MAX_BOX_CHARS, count_points, pr1_box_centers, pr1_format

# -- Perception-R1 counting ----------------------------------------------------------------------
PR1_TRUTH = [[221, 343], [476, 173]]  # the solution in pr1_counting_reward's docstring
NEAR_FIRST = "(200,300),(240,380)"  # center (220, 340)
NEAR_SECOND = "(450,150),(500,200)"  # center (475, 175)
INF_BOX = "(1e999, 298),(300,400)"  # 1e999 is the float inf to Python; center (inf, 349)


def pr1_completion(*boxes: str) -> str:
    return "<|object_ref_start|>people<|object_ref_end|>" + "".join(f"<|box_start|>{b}<|box_end|>" for b in boxes) + "<|im_end|>"


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
