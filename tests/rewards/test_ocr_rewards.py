"""OCR rewards: Video-R1's clip(1 - WER) and 1 - normalized edit distance, by hand and against a plain DP."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from rewards.ocr import (
    MAX_EDIT_SYMBOLS,
    edit_distance_score,
    levenshtein,
    normalized_edit_distance,
    video_r1_answer,
    wer_score,
    word_error_rate,
)
from tasks.ocr import OCR
from vlrl.data.records import FrameSpec, RecordContext, RecordError


def _dp(a, b) -> int:
    """The textbook dynamic program (nltk.edit_distance with unit costs, no transpositions)."""
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, start=1):
        diagonal, row[0] = row[0], i
        for j, y in enumerate(b, start=1):
            diagonal, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, diagonal + (x != y))
    return row[-1]


@pytest.mark.parametrize(
    "a,b,distance",
    [("kitten", "sitting", 3), ("", "abc", 3), ("abc", "", 3), ("", "", 0), ("flaw", "lawn", 2), ("ab", "ba", 2)],
)
def test_levenshtein_by_hand(a, b, distance):
    assert levenshtein(a, b) == distance
    assert levenshtein(a.split(), b.split()) == _dp(a.split(), b.split())


@settings(max_examples=200, deadline=None)
@given(st.text("abc ", max_size=30), st.text("abcd", max_size=30))
def test_levenshtein_agrees_with_the_plain_dynamic_program(a, b):
    assert levenshtein(a, b) == _dp(a, b)
    assert levenshtein(a.split(), b.split()) == _dp(a.split(), b.split())


@pytest.mark.parametrize(
    "pred,gt,expected",
    [
        ("kitten", "sitting", 1 - 3 / 7),
        ("OPEN 24", "OPEN 24", 1.0),
        ("open 24", "OPEN 24", 1 - 4 / 7),  # case counts
        ("", "", 1.0),  # both empty: nothing to read, nothing read (PR1 would divide by zero)
        ("", "abc", 0.0),
        ("abcdef", "abc", 0.5),
    ],
)
def test_edit_distance_score_by_hand(pred, gt, expected):
    assert edit_distance_score(pred, gt) == pytest.approx(expected)
    assert normalized_edit_distance(pred, gt) == pytest.approx(1 - expected)


@pytest.mark.parametrize(
    "pred,gt,expected",
    [
        ("the cat sat on the mat", "the cat sat on the mat", 1.0),
        ("the cat sat on mat", "the cat sat on the mat", 5 / 6),  # one deletion over 6 reference words
        ("The cat sat on the mat", "the cat sat on the mat", 5 / 6),  # case counts (no normalization)
        ("the  cat\nsat on the mat", "the cat sat on the mat", 1.0),  # str.split(): any whitespace
        ("a b c d e f g h", "x y", 0.0),  # WER 4 > 1: clipped
        ("a b", "", 0.0),  # WER = 2 / max(1, 0)
        ("", "", 1.0),
        ("", "the mat", 0.0),
    ],
)
def test_video_r1_wer_reward_by_hand(pred, gt, expected):
    assert wer_score(pred, gt) == pytest.approx(expected)


def test_wer_is_not_clipped_and_answers_are_read_as_video_r1_reads_them():
    assert word_error_rate("x y", "a b c d e f g h") == 4.0
    assert video_r1_answer("<think>hm</think><answer>\n  OPEN 24 \n</answer>") == "OPEN 24"
    assert video_r1_answer("OPEN 24") == ""
    assert video_r1_answer("<answer> a </answer> <answer>b</answer>") == "a"  # the first answer
    assert wer_score(video_r1_answer("OPEN 24"), "OPEN 24") == 0.0


def test_long_inputs_are_cut_and_stay_fast():
    start = time.perf_counter()
    assert edit_distance_score("a" * 1_000_000, "b" * 1_000_000) == 0.0
    assert levenshtein("a" * (MAX_EDIT_SYMBOLS + 5), "a" * MAX_EDIT_SYMBOLS) == 0  # both cut to the cap
    assert levenshtein("a" * (MAX_EDIT_SYMBOLS + 5), "a" * MAX_EDIT_SYMBOLS, cap=None) == 5  # a metric's: uncut
    assert wer_score("w " * 500_000, "w " * 500_000) == 1.0
    assert time.perf_counter() - start < 5.0


# -- the task -------------------------------------------------------------------------------------
def _ctx(tmp_path):
    Image.new("RGB", (120, 40), (240, 240, 240)).save(tmp_path / "im.png")
    return RecordContext("data.json:1", 0, tmp_path, FrameSpec("absolute", 3136, 50176))


def test_thinking_variant_is_video_r1s_ocr_prompt_and_reward(tmp_path):
    task = OCR()
    sample = task.build_sample({"image": "im.png", "text": "OPEN 24"}, _ctx(tmp_path))
    text = task.messages(sample)[0]["content"][1]["text"]
    assert text.startswith("What is the text in the image?\nPlease think about this question as if you were a human")
    assert text.endswith(
        "Please transcribe text from the image/video clearly and provide your text answer within the <answer> </answer> tags."
    )
    assert task.target(sample) == "<think>The image reads: OPEN 24</think>\n<answer>OPEN 24</answer>"
    fns = OCR(rewards={"format": 1.0, "wer": 1.0, "edit_distance": 1.0}).reward_functions()
    completions = ["<think>a</think><answer>OPEN 24</answer>", "<think>a</think><answer>OPEN 2A</answer>", "OPEN 24"]
    assert fns["wer"](completions, [sample] * 3) == [1.0, 0.5, 0.0]
    assert fns["edit_distance"](completions, [sample] * 3) == pytest.approx([1.0, 6 / 7, 0.0])
    assert fns["format"](completions, [sample] * 3) == [1.0, 1.0, 0.0]


def test_plain_variant_reads_the_whole_completion(tmp_path):
    task = OCR(options={"variant": "plain"})
    sample = task.build_sample({"image": "im.png", "text": "OPEN 24"}, _ctx(tmp_path))
    assert task.messages(sample)[0]["content"][1]["text"] == "<image>\nOCR this image: "  # PR1's, verbatim
    assert task.target(sample) == "OPEN 24"
    fns = OCR(options={"variant": "plain"}, rewards={"edit_distance": 1.0}).reward_functions()
    assert fns["edit_distance"](["OPEN 24", "OPEN 24\n"], [sample] * 2) == pytest.approx([1.0, 7 / 8])
    assert task.predict("OPEN 24\n", sample) == "OPEN 24\n"


def test_ocr_metrics_on_fixed_predictions(tmp_path):
    sample = OCR().build_sample({"image": "im.png", "text": "OPEN 24"}, _ctx(tmp_path))
    completions = [
        "<think>a</think><answer>OPEN 24</answer>",  # exact
        "<think>a</think><answer>OPEN 2A</answer>",  # 1 char of 7; 1 word of 2
        "<answer>OPEN</answer>",  # 3 chars deleted of 7; 1 word of 2; no <think>
        "nothing",  # no answer: "" is read
    ]
    metrics = OCR().metrics([sample] * 4, completions)
    assert metrics["edit_distance_score"] == pytest.approx((1 + 6 / 7 + 4 / 7 + 0) / 4)
    assert metrics["ned"] == pytest.approx((0 + 1 / 7 + 3 / 7 + 1) / 4)
    assert metrics["wer_score"] == pytest.approx((1 + 0.5 + 0.5 + 0) / 4)
    assert metrics["wer"] == pytest.approx((0 + 0.5 + 0.5 + 1) / 4)
    assert metrics["exact_match"] == 0.25
    assert metrics["format_rate"] == 0.5
    lower = OCR().metrics([sample], ["<think>a</think><answer>open 24</answer>"])  # case counts
    assert lower["exact_match"] == 0.0 and lower["edit_distance_score"] == pytest.approx(3 / 7)


def test_video_r1_and_conversation_records(tmp_path):
    ctx = _ctx(tmp_path)
    video_r1 = {
        "path": "im.png",
        "problem": "Read it.",
        "solution": "<answer> OPEN 24 </answer>",
        "problem_type": "OCR",
        "data_type": "image",
    }
    sample = OCR().build_sample(video_r1, ctx)
    assert (sample.problem, sample.solution) == ("Read it.", "OPEN 24")
    turns = [{"from": "human", "value": "<image>\nOCR this image: "}, {"from": "gpt", "value": "OPEN 24"}]
    conversation = {"image": "im.png", "conversations": turns}
    assert OCR().build_sample(conversation, ctx).solution == "OPEN 24"
    assert OCR().build_sample({"image": "im.png", "text": ""}, ctx).solution == ""  # an image without text


@pytest.mark.parametrize(
    "record,message",
    [
        ({"image": "im.png"}, "expected 'text', 'solution' \\(Video-R1\\) or 'conversations'"),
        ({"image": "im.png", "text": 5}, "'text' must be the text"),
        ({"image": "im.png", "text": "a", "problem_type": "multiple choice"}, "reads problem_type 'OCR' only"),
        ({"path": "im.png", "solution": "a", "data_type": "video"}, "reads data_type 'image' only"),
        ({"image": "im.png", "conversations": [{"from": "human", "value": "hi"}]}, "exactly one 'gpt' turn"),
        ({"text": "a"}, "missing key 'image'"),
        ({"image": "gone.png", "text": "a"}, "image not found"),
        ({"image": ["a.png", "b.png"], "text": "a"}, "one image path, got 2"),
    ],
)
def test_bad_ocr_records_say_what_is_wrong(tmp_path, record, message):
    with pytest.raises(RecordError, match=message):
        OCR().build_sample(record, _ctx(tmp_path))


def test_synthetic_ocr_draws_dark_words_and_numbers_of_up_to_four_digits_on_images_of_the_records_size(tmp_path):
    import json

    import numpy as np

    from data_prep.ocr import WORDS, write_synthetic_ocr

    records = json.loads(write_synthetic_ocr(tmp_path / "ocr.json", 40, seed=0).read_text())
    tokens = [t for r in records for t in r["text"].split(" ")]
    assert all(t in WORDS or (t.isdigit() and len(t) <= 4) for t in tokens)
    assert any(len(t) == 4 and t.isdigit() for t in tokens) and any(t in WORDS for t in tokens)
    for r in records:
        assert 1 <= len(r["text"].split(" ")) <= 3
        with Image.open(tmp_path / r["image"]) as image:
            assert image.size == (r["width"], r["height"])
            pixels = np.asarray(image.convert("RGB"))
        assert (pixels < 70).all(axis=-1).any()  # the ink (every channel < 70) on a light background
