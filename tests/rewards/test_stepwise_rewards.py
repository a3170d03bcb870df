"""R1-VL's StepGRPO rewards against the values R1-VL's own functions give (jingyi0000/R1-VL@679be5c,
src/r1-vl/src/open_r1/grpo.py: check_reasoning_completeness, check_reasoning_logic,
validity_reward, key_step_single, accuracy_reward; the values below were read off a copy of
those functions run on these exact strings), on typical, boundary and hostile completions."""

from __future__ import annotations

import json
import re
import time

import pytest
from PIL import Image

import tasks.answer_check
from rewards import stepwise
from rewards.stepwise import answer_correct, final_answer, key_step_score, validity
from tasks.step_reasoning import StepReasoning, read_key_steps
from vlrl.config import ConfigError
from vlrl.data.records import FrameSpec, RecordContext, RecordError

GOOD = (
    "### Image Description:\nA right triangle with legs 3 and 4.\n### Rationales:\nPythagorean theorem.\n"
    "### Let's think step by step.\n### Step 1:\nc^2 = 3^2 + 4^2 = 25\n### Step 2:\nc = 5\n### The final answer is: 5"
)
KEY_STEPS = [["c^2 = 25", "25"], "c = 5", ["hypotenuse"]]
SOLUTION = "### The final answer is: 5"


@pytest.mark.parametrize(
    "completion,expected",
    [
        (GOOD, 1.0),
        (GOOD.replace("### Step 2:", "### Step 3:"), 0.0),  # steps 1, 3
        (
            "### Image Description:\nx\n### Rationales:\ny\n### Step 1:\nz\n### Step 2:\nw\n### The final answer is:",
            1.0,
        ),
        ("### Image Description:\nx\n### Rationales:\ny\n### The final answer is: 3\n### Step 1:\nz", 0.0),
        (GOOD + "\n### Step 1: again", 0.0),  # numbers 1, 2, 1 and the answer before the last step
        (GOOD.replace("### Rationales:", "### Rationale:"), 0.0),  # a section missing
        (GOOD.replace("### Step 1:", "### Step 01:"), 0.0),  # "### Step 1:" itself is required
        # sections in any order: only the answer's place after the steps is checked
        ("### Step 1:\nc = 5\n### Rationales:\nr\n### Image Description:\nd\n### The final answer is: 5", 1.0),
        ("### Image Description:\n### Rationales:\n### Step 1:### The final answer is: 5", 1.0),  # adjacent
        ("", 0.0),
        ("### Step 1:" * 10_000, 0.0),
        # ends with the header once stripped: its place is not checked (the answer came before the step)
        (
            "### Image Description:\nx\n### Rationales:\ny\n### The final answer is: 3\n### Step 1:\nz\n"
            "### The final answer is:\n",
            1.0,
        ),
        # the first header is the one compared with the end of the *last* step header
        (
            "### Image Description:\nx\n### Rationales:\ny\n### Step 1:\nz\n### The final answer is: 3\n"
            "### Step 2:\nw\n### The final answer is: 3",
            0.0,
        ),
    ],
)
def test_validity_equals_r1_vls_validity_reward(completion, expected):
    assert validity(completion) == expected


def test_key_steps_are_found_case_insensitively_in_the_step_bodies_only():
    assert key_step_score(GOOD, KEY_STEPS) == pytest.approx(2 / 3)  # "25" and "c = 5"; no hypotenuse
    assert key_step_score(GOOD.replace("c = 5", "C = 5"), KEY_STEPS) == pytest.approx(2 / 3)
    assert key_step_score(GOOD.upper(), KEY_STEPS) == 0.0  # "### STEP 1:" is no step header
    # the description names the hypotenuse, but only ### Step N: bodies are searched
    described = GOOD.replace("A right triangle", "A hypotenuse of a right triangle")
    assert key_step_score(described, KEY_STEPS) == pytest.approx(2 / 3)
    # a body runs to the next "\n###": text after a header on the same line still counts
    assert key_step_score("### Step 1: c = 5 ### hypotenuse\n### Step 2:\n25", KEY_STEPS) == 1.0
    assert key_step_score(GOOD, []) == 0.0
    assert key_step_score("no steps at all: c = 5, 25, hypotenuse", KEY_STEPS) == 0.0
    assert key_step_score(GOOD, [[]]) == 0.0  # a key step without alternatives is never found
    assert key_step_score(GOOD, [""]) == 1.0  # the empty phrase is in every text, as in R1-VL
    assert key_step_score(GOOD, ["C = 5", ["HYPOTENUSE", "C^2 = 3^2"]]) == 1.0  # key steps lower-cased too


def test_the_answer_is_the_final_answer_line_compared_as_a_string():
    assert final_answer(GOOD) == "5"
    assert final_answer("### The final answer is:\n\n  5 \nmore") == "5"  # blank lines skipped
    assert final_answer("the answer is 5") == "the answer is 5"  # no header: the whole text
    assert answer_correct(GOOD, SOLUTION, use_math_verify=False) == 1.0
    assert answer_correct(GOOD, "### The final answer is: 6", use_math_verify=False) == 0.0
    assert answer_correct("5", "5", use_math_verify=False) == 1.0
    assert answer_correct(GOOD.replace("is: 5", "is: 5.0"), SOLUTION, use_math_verify=False) == 0.0


def test_math_verify_accepts_equivalent_answers_where_it_is_installed():
    pytest.importorskip("math_verify")
    assert answer_correct("### The final answer is: $\\frac{1}{2}$", "### The final answer is: 0.5") == 1.0
    assert answer_correct("### The final answer is: $\\frac{1}{3}$", "### The final answer is: 0.5") == 0.0


def test_without_math_verify_the_strings_alone_decide(monkeypatch):
    monkeypatch.setattr(stepwise, "math_verify_available", lambda: False)
    monkeypatch.setattr(tasks.answer_check, "math_verify_available", lambda: False)
    assert answer_correct("### The final answer is: 1/2", "### The final answer is: 0.5") == 0.0
    assert answer_correct("### The final answer is: 0.5", "### The final answer is: 0.5") == 1.0
    with pytest.raises(ConfigError, match="math-verify"):
        StepReasoning(options={"answer_check": "math_verify"})


def test_the_task_sums_to_r1_vls_accuracy_plus_validity(tmp_path):
    """Default weights: answer + 0.1 key steps + validity = R1-VL's accuracy + validity (2.0667 on GOOD)."""
    task = StepReasoning(options={"answer_check": "string"})
    Image.new("RGB", (32, 32)).save(tmp_path / "a.png")
    ctx = RecordContext("data.json:1", 0, tmp_path, FrameSpec())
    record = {"image_path": "a.png", "problem": "c?", "solution": SOLUTION, "key_steps": {"Steps": KEY_STEPS}}
    sample = task.build_sample(record, ctx)
    assert task.messages(sample) == [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "c?"}]}]
    from vlrl.tasking.scoring import score

    scores = score(task, [GOOD, GOOD.replace("is: 5", "is: 4"), ""], [sample] * 3)
    assert scores.total == pytest.approx([1 + 0.1 * 2 / 3 + 1, 0.1 * 2 / 3 + 1, 0.0])
    # the target of a record whose solution is no chain walks through the key steps
    target = task.target(sample)
    assert validity(target) == 1.0 and key_step_score(target, KEY_STEPS) == 1.0 and final_answer(target) == "5"
    assert "### Step 1:\nc^2 = 25\n### Step 2:\nc = 5\n" in target  # each key step's first phrase
    assert task.predict("5, with no final-answer line", sample) is None and task.predict(GOOD, sample) == "5"
    # answer_check's default (auto) compares with math-verify where it is installed
    equivalent = GOOD.replace("is: 5", "is: $\\frac{10}{2}$")
    assert StepReasoning().reward_functions()["answer"]([equivalent], [sample]) == [1.0]
    assert task.reward_functions()["answer"]([equivalent], [sample]) == [0.0]  # answer_check: string


@pytest.mark.parametrize(
    "value,expected",
    [
        ({"Steps": ["a", ["b", "c"]]}, ["a", ["b", "c"]]),
        (["a"], ["a"]),
        ('{"Steps": ["a"]}', ["a"]),
        ({"Other": ["a"]}, []),  # no "Steps": no key steps, as key_step_single reads it
        (None, []),
    ],
)
def test_key_steps_are_read_in_r1_vls_shape(value, expected):
    ctx = RecordContext("data.json:3", 2, ".", FrameSpec())
    assert read_key_steps({"key_steps": value}, ctx) == expected


@pytest.mark.parametrize("value", [{"Steps": [1]}, {"Steps": [["a", 2]]}, "not json", {"Steps": "a"}])
def test_key_steps_that_r1_vl_would_crash_on_are_refused_by_place(value):
    ctx = RecordContext("data.json:3", 2, ".", FrameSpec())
    with pytest.raises(RecordError, match="data.json:3"):
        read_key_steps({"key_steps": value}, ctx)


def test_hostile_completions_finish_quickly_and_score_in_bounds():
    hostile = [
        "### Step 1:" + " " * 200_000,
        "### Step 1:\n" + "#" * 100_000,
        "### Image Description:### Rationales:### Step 1:" + "### Step 2:" * 20_000 + "### The final answer is: 1",
        "### Step 99999999999999999999999999:",
        "\x00\udcff" * 10_000 + GOOD,
    ]
    for text in hostile:
        start = time.perf_counter()
        assert validity(text) in (0.0, 1.0)
        assert 0.0 <= key_step_score(text, KEY_STEPS) <= 1.0
        assert answer_correct(text, SOLUTION, use_math_verify=False) in (0.0, 1.0)
        assert time.perf_counter() - start < 5.0


def test_synthetic_reasoning_chains_add_the_counts_of_the_two_shapes_the_problem_names(tmp_path):
    from data_prep.step_reasoning import write_synthetic_step_reasoning

    path = write_synthetic_step_reasoning(tmp_path / "train.json", 30, seed=0)
    for record in json.loads(path.read_text()):
        solution = record["solution"]
        described = re.search(r"shapes: (.*)\.\n", solution).group(1)
        shapes = [item.split()[-1] for item in described.split(", ") if item]
        first, second = re.search(r"Count the (\w+)s and the (\w+)s", solution).groups()
        answer = int(solution.rsplit("The final answer is: ", 1)[1])
        assert answer == shapes.count(first) + shapes.count(second), solution
