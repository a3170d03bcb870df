"""Jigsaw (Jigsaw-R1): rewards on hand-computed cases and against regex forms of Jigsaw-R1's
definitions, puzzle generation (determinism, answers that restore the image), record checks,
metrics on fixed predictions."""

from __future__ import annotations

import hashlib
import json
import re
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from data_prep.jigsaw import (
    crop_to_grid,
    grid_string,
    pair_relation,
    shuffle_image,
    solve_image,
    write_jigsaw_dataset,
)
from rewards.jigsaw import (
    answer_content,
    jigsaw_connections,
    jigsaw_exact,
    jigsaw_format,
    jigsaw_partial,
    parse_choice,
    parse_grid,
    parse_number,
    parse_permutation,
    think_answer_shape,
)
from tasks.jigsaw import Jigsaw
from vlrl.data.records import FrameSpec, RecordContext, RecordError
from vlrl.tasking.scoring import score


def tagged(answer: str, think: str = "look") -> str:
    return f"<think>{think}</think>\n<answer>{answer}</answer>"


# -- parsing ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text,expected",
    [
        ("2 1", [2, 1]),
        ("2, 1", [2, 1]),
        ("2\n1", [2, 1]),
        ("```\n3 1\n4 2\n```", [3, 1, 4, 2]),
        ("3;1;4;2", [3, 1, 4, 2]),
        ("03 1 4 2", [3, 1, 4, 2]),  # leading zeros are digits
        ("3 \t1 4 2", [3, 1, 4, 2]),  # a run of two whitespace characters is one separator
        ("3\t1 4 2", None),  # a lone tab is not a separator: "3\t1" is not a number
        ("3\t\t1 4 2", [3, 1, 4, 2]),  # two tabs are a run of two: one space (re.sub(r"\s{2,}", " "))
        ("3 3 3 3", [3, 3, 3, 3]),  # repeats parse; they score by position
        ("3 1 4", [3, 1, 4]),  # wrong length parses; it scores 0
        ("[3, 1, 4, 2]", None),  # brackets make "[3" a non-number (Jigsaw-R1 reads the same)
        ("3 1 4 5", None),  # 5 is outside 1..4
        ("0 1 2 3", None),
        ("", None),
        ("３ 1 4 2", None),  # full-width digits are not ASCII
        ("1" * 5000 + " 2 3 4", None),
    ],
)
def test_grid_answers_parse_as_jigsaw_r1_reads_them(text, expected):
    assert parse_grid(text, 4) == expected


def test_the_answer_is_the_first_tag_or_the_whole_text():
    assert answer_content("<think>x</think><answer> 2 1 </answer><answer>1 2</answer>") == "2 1"
    assert answer_content("no tags: 2 1 ") == "no tags: 2 1"  # Jigsaw-R1's fallback
    assert answer_content("no tags: 2 1", require_tag=True) is None
    assert answer_content("<answer>2 1</answer>", think=False) == "<answer>2 1</answer>"
    assert answer_content("<answer>2 1") == "<answer>2 1"  # unclosed: the whole text


# -- full questions -------------------------------------------------------------------------
GT = [3, 1, 4, 2]


@pytest.mark.parametrize(
    "pred,partial,exact",
    [
        ([3, 1, 4, 2], 1.0, 1.0),
        ([3, 1, 2, 4], 0.5, 0.0),
        ([3, 3, 3, 3], 0.25, 0.0),  # a repeated entry is right where it is right
        ([1, 2, 3, 4], 0.0, 0.0),
        ([3, 1, 4], 0.0, 0.0),  # wrong length: 0 even with three right
        ([3, 1, 4, 2, 1], 0.0, 0.0),
        (None, 0.0, 0.0),
        ([], 0.0, 0.0),
    ],
)
def test_partial_and_exact_by_hand(pred, partial, exact):
    assert jigsaw_partial(pred, GT) == partial
    assert jigsaw_exact(pred, GT) == exact


def test_full_reward_from_completions():
    def reward(completion: str, think: bool = True, require_tag: bool = False) -> float:
        return jigsaw_partial(parse_permutation(completion, len(GT), think, require_tag), GT)

    assert reward(tagged("3 1\n4 2")) == 1.0
    assert reward(tagged("3 1\n2 4")) == 0.5
    assert reward(tagged("3 1 4 5")) == 0.0  # one entry out of range: unparseable
    assert reward("3 1 2 4") == 0.5  # thinking on, no tag: the whole text is read
    assert reward("3 1 2 4", require_tag=True) == 0.0
    assert reward(tagged("3 1 4 2"), think=False) == 0.0  # no-think reads the whole text


def test_connections_by_hand():
    # 2x2, truth = identity. Prediction swaps the top row: of the 4 neighbour pairs only the
    # bottom row (3 then 4) is still a left-right pair in the truth.
    assert jigsaw_connections([2, 1, 3, 4], [1, 2, 3, 4], 2, 2) == 0.25
    assert jigsaw_connections([1, 2, 3, 4], [1, 2, 3, 4], 2, 2) == 1.0
    # 3x1 column, truth [2, 3, 1]: the patches now at 1 and 2 are neighbours (top, middle), those
    # at 2 and 3 are not. Prediction [1, 2, 3] puts the patch claimed for 2 right above the one
    # claimed for 3, as in the truth (1 of 2 pairs); its pair (1, 2) is not one there.
    assert jigsaw_connections([1, 2, 3], [2, 3, 1], 3, 1) == 0.5
    assert jigsaw_connections([1, 2], [1, 2, 3], 3, 1) == 0.0
    assert jigsaw_connections(None, [1, 2], 2, 1) == 0.0
    # Neighbours the other way round are no connection: 2x1, the prediction puts the truth's
    # lower patch on top (and 1x2, its right one on the left).
    assert jigsaw_connections([2, 1], [1, 2], 2, 1) == 0.0
    assert jigsaw_connections([2, 1], [1, 2], 1, 2) == 0.0


# -- pair / multiple / single ----------------------------------------------------------------
@pytest.mark.parametrize(
    "completion,expected",
    [
        (tagged("B"), 1.0),
        (tagged("(B)"), 1.0),
        (tagged("The answer is B"), 1.0),  # the last capital letter counts
        (tagged("B. The answer"), 0.0),  # ... so "T" is read here, as in Jigsaw-R1
        (tagged("b"), 1.0),  # no capital: the text itself, compared case-insensitively
        (tagged("bb"), 0.0),
        (tagged(""), 0.0),
        ("B", 1.0),  # no tag: the whole text
        (tagged("A"), 0.0),
    ],
)
def test_choice_reward_by_hand(completion, expected):
    assert float(parse_choice(completion) == "B") == expected


@pytest.mark.parametrize(
    "completion,expected",
    [
        (tagged("3"), 1.0),
        (tagged("position 03"), 1.0),
        (tagged("3 or 4"), 1.0),  # the first number counts
        (tagged("4 or 3"), 0.0),
        (tagged("٣"), 0.0),  # a non-ASCII digit is a digit to the regex, not to math_verify
        (tagged("three"), 0.0),
        (tagged(""), 0.0),
        (tagged("9" * 400), 0.0),
    ],
)
def test_number_reward_by_hand(completion, expected):
    assert float(parse_number(completion) == 3) == expected


def test_no_think_answers_are_the_whole_completion():
    assert parse_choice("B", think=False) == "B"
    assert parse_number(" 3 ", think=False) == 3
    assert parse_choice("<answer>A</answer> maybe B", think=False) == "B"
    assert parse_number("<answer>3</answer>", think=False) == 3


# -- format -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "completion,qtype,think,expected",
    [
        (tagged("3 1\n4 2"), "full", True, 1.0),
        (tagged("3 1 4"), "full", True, 0.0),  # three entries on a 2x2 grid
        (tagged("3 3 3 3"), "full", True, 1.0),  # repeats are well formed
        ("<think>a</think><answer>3 1 4 2</answer> trailing", "full", True, 0.0),
        ("<think>a</think><answer>3 1 4 2</answer></answer>", "full", True, 0.0),  # lazy match stops early
        ("<answer>3 1 4 2</answer>", "full", True, 0.0),
        ("3 1\n4 2", "full", False, 1.0),
        ("3 1 4", "full", False, 0.0),
        (tagged("B"), "pair", True, 1.0),
        (tagged("b"), "pair", True, 0.0),
        ("B", "multiple", False, 1.0),
        ("B ", "multiple", False, 0.0),  # no-think letters must be exactly one character
        (tagged("2"), "single", True, 1.0),
        (tagged("two"), "single", True, 0.0),
        ("2", "single", False, 1.0),
        (" 2", "single", False, 0.0),
    ],
)
def test_format_by_hand(completion, qtype, think, expected):
    assert jigsaw_format(completion, qtype, 4, think) == expected


# -- the same as Jigsaw-R1's regular expressions, on any text ------------------------------------
THINK_ANSWER = re.compile(r"<think>.*?</think>\s*<answer>.*?</answer>", re.DOTALL)
ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def regex_shape(text: str) -> bool:
    match = THINK_ANSWER.search(text)
    return bool(match) and match.group(0) == text


def regex_grid(text: str, size: int) -> list[int] | None:
    for char in "`,;\n":
        text = text.replace(char, " ")
    values = []
    for piece in re.sub(r"\s{2,}", " ", text).strip().split(" "):
        if not re.fullmatch(r"[0-9]+", piece) or not 1 <= int(piece) <= size:
            return None
        values.append(int(piece))
    return values


def regex_answer(text: str) -> str:
    match = ANSWER.search(text)
    return match.group(1).strip() if match else text.strip()


def regex_letter(content: str) -> str:
    match = re.search(r"([A-Z])", content[::-1])
    return match.group(1) if match else content[::-1]


def regex_format(text: str, qtype: str, size: int, think: bool) -> float:
    """Jigsaw-R1's format reward, written with its regular expressions."""
    if think and not regex_shape(text):
        return 0.0
    if not think and qtype == "single":
        return float(text.isdigit())
    if not think and qtype in ("pair", "multiple"):
        return float(len(text) == 1 and text[0].isupper())
    content = regex_answer(text) if think else text.strip()
    if qtype == "full":
        values = regex_grid(content, size)
        return float(values is not None and len(values) == size)
    if qtype == "single":
        digits = re.search(r"(\d+)", content)
        return float((digits.group(1) if digits else content).isdigit())
    letter = regex_letter(content)
    return float(len(letter) == 1 and letter[0].isupper())


PIECES = st.sampled_from(
    [
        "<think>",
        "</think>",
        "<answer>",
        "</answer>",
        " ",
        "  ",
        "\t",
        "\n",
        "\x1c",
        "\u3000",
        ",",
        ";",
        "`",
        "1",
        "2",
        "3",
        "07",
        "x",
        "B",
        "b",
        "٣",
    ]
)


@pytest.mark.parametrize(
    "text",
    [
        "<think>a</think> b</think>\n<answer>2 1</answer>",  # the lazy think runs on to a later </think>
        "<think>a</think>x</think>y</think><answer>1</answer>",
        "<think>a</think> <answer>1</answer></answer>",
    ],
)
def test_think_shapes_equal_jigsaw_r1s_regex_past_a_first_close(text):
    assert think_answer_shape(text) == regex_shape(text)


def test_a_later_think_close_still_makes_the_shape():
    assert think_answer_shape("<think>a</think> b</think>\n<answer>2 1</answer>") is True


@settings(max_examples=400, deadline=None)
@given(st.lists(PIECES, max_size=24).map("".join))
def test_linear_parsers_equal_jigsaw_r1_regexes(text):
    assert think_answer_shape(text) == regex_shape(text)
    assert answer_content(text) == regex_answer(text)
    assert parse_grid(text, 3) == regex_grid(text, 3)
    digits = re.search(r"(\d+)", regex_answer(text))
    expected = int(digits.group(1)) if digits and digits.group(1).isascii() else None
    assert parse_number(text) == expected
    assert (parse_choice(text) == "B") == (regex_letter(regex_answer(text)).lower() == "b")
    for qtype in ("full", "pair", "multiple", "single"):
        for think in (True, False):
            assert jigsaw_format(text, qtype, 3, think) == regex_format(text, qtype, 3, think), (qtype, think)


def test_rewards_take_linear_time_on_huge_inputs():
    huge = ["<think>" + "</think> " * 20000 + "<answer>", "<answer>" + "1 " * 30000 + "</answer>", " \t" * 50000]
    start = time.perf_counter()
    for text in huge:
        jigsaw_format(text, "full", 4)
        parse_permutation(text, len(GT))
        parse_choice(text)
        parse_number(text)
    assert time.perf_counter() - start < 5.0


# -- puzzle generation ------------------------------------------------------------------------
def _digest(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _photos(folder: Path) -> Path:
    """Three odd-sized images with distinct pixels everywhere (so a wrong patch shows)."""
    folder.mkdir()
    for i, (w, h) in enumerate([(101, 77), (64, 90), (55, 55)]):
        image = Image.new("RGB", (w, h))
        image.putdata([((x * 7 + i) % 256, (y * 5) % 256, (x * y + 3 * i) % 256) for y in range(h) for x in range(w)])
        image.save(folder / f"photo{i}.png")
    (folder / "notes.txt").write_text("not an image")
    return folder


def test_same_seed_gives_byte_identical_output(tmp_path):
    for name in ("a", "b"):
        write_jigsaw_dataset(
            tmp_path / name / "train.jsonl",
            None,
            6,
            seed=3,
            grids={"2x1": 1, "2x2": 1},
            question_types=("full", "pair", "multiple", "single"),
        )
    write_jigsaw_dataset(
        tmp_path / "c" / "train.jsonl",
        None,
        6,
        seed=4,
        grids={"2x1": 1, "2x2": 1},
        question_types=("full", "pair", "multiple", "single"),
    )
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    assert _digest(tmp_path / "a") != _digest(tmp_path / "c")


def test_the_answer_restores_the_original_exactly(tmp_path):
    photos = _photos(tmp_path / "photos")
    out = write_jigsaw_dataset(
        tmp_path / "out" / "train.jsonl", photos, 9, seed=0, grids=["2x2", "3x1", "2x3"], question_types="full"
    )
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 9
    for record in records:
        m, n, permutation = record["m"], record["n"], record["permutation"]
        assert sorted(permutation) == list(range(1, m * n + 1))
        with Image.open(photos / record["source_image"]) as source:
            original = crop_to_grid(source.convert("RGB"), m, n)
        with Image.open(out.parent / record["image"]) as puzzle:
            assert puzzle.size == original.size == (record["width"], record["height"])
            assert solve_image(puzzle, permutation, m, n).tobytes() == original.tobytes()
            if permutation != sorted(permutation):
                assert puzzle.tobytes() != original.tobytes()
    assert {r["source_image"] for r in records} == {"photo0.png", "photo1.png", "photo2.png"}  # each before repeats


def test_one_puzzle_per_source_image_as_jigsaw_r1s_dataset_seeds_each_image_by_its_index(tmp_path):
    photos = _photos(tmp_path / "photos")
    out = write_jigsaw_dataset(tmp_path / "o" / "t.jsonl", photos, None, 0, grids="2x1")
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert sorted(r["source_image"] for r in records) == ["photo0.png", "photo1.png", "photo2.png"]
    with pytest.raises(ValueError, match="one puzzle per source image; give source_folder"):
        write_jigsaw_dataset(tmp_path / "x.jsonl", None, None, 0)


def test_shuffle_places_original_patch_y_at_position_x():
    image = Image.new("RGB", (4, 2))
    image.putdata([(10 * i, 0, 0) for i in range(8)])  # 2x2 grid of 2x1 patches
    puzzle = shuffle_image(image, [3, 1, 4, 2], 2, 2)
    assert puzzle.getpixel((0, 0)) == image.getpixel((0, 1))  # position 1 shows original patch 3
    assert puzzle.getpixel((2, 1)) == image.getpixel((2, 0))  # position 4 shows original patch 2


def test_stages_curriculum_and_question_types(tmp_path):
    out = write_jigsaw_dataset(
        tmp_path / "train.jsonl",
        None,
        8,
        seed=1,
        grids=[("2x1", 1), ("3x1", 3)],
        curriculum="stages",
        shuffle_mn=False,
        question_types=("full", "pair", "multiple", "single"),
    )
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["m"], r["n"]) for r in records] == [(2, 1)] * 2 + [(3, 1)] * 6
    assert [r["question_type"] for r in records] == ["full", "pair", "multiple", "single"] * 2
    for r in records:
        if r["question_type"] == "pair":
            assert len(r["choices"]) == 2  # a one-column grid: above / below
            assert r["choices"]["AB".index(r["answer"])] == pair_relation(r["permutation"], r["n"], r["k"], r["l"])
        if r["question_type"] == "multiple":
            count = 2 if r["m"] == 2 else 4  # a 2x1 grid has only 2 orders
            assert len(r["choices"]) == len(set(r["choices"])) == count
            assert r["choices"]["ABCD".index(r["answer"])] == grid_string(r["permutation"], r["m"], r["n"])
        if r["question_type"] == "single":
            assert r["answer"] == r["permutation"][r["k"] - 1]


def test_pair_relations_on_a_2x2_grid():
    # Truth [3, 1, 4, 2]: the patch at 1 belongs at 3 (bottom-left), the one at 2 at 1 (top-left),
    # the one at 4 at 2 (top-right).
    assert pair_relation([3, 1, 4, 2], 2, 1, 2) == "1 is directly below 2"
    assert pair_relation([3, 1, 4, 2], 2, 1, 4) == "1 is on the lower left of 4"
    assert pair_relation([3, 1, 4, 2], 2, 2, 4) == "2 is directly to the left of 4"


def test_source_list_and_bad_arguments(tmp_path):
    photos = _photos(tmp_path / "photos")
    listing = tmp_path / "list.json"
    listing.write_text(json.dumps(["photo2.png"]))
    out = write_jigsaw_dataset(tmp_path / "o" / "t.jsonl", photos, 2, 0, source_list=listing)
    assert {json.loads(x)["source_image"] for x in out.read_text().splitlines()} == {"photo2.png"}
    with pytest.raises(ValueError, match="MxN"):
        write_jigsaw_dataset(tmp_path / "x.jsonl", None, 1, 0, grids="2by2")
    with pytest.raises(ValueError, match="at least 2 patches"):
        write_jigsaw_dataset(tmp_path / "x.jsonl", None, 1, 0, grids="1x1")
    with pytest.raises(ValueError, match="question_types"):
        write_jigsaw_dataset(tmp_path / "x.jsonl", None, 1, 0, question_types="box")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no images"):
        write_jigsaw_dataset(tmp_path / "x.jsonl", tmp_path / "empty", 1, 0)


def test_images_in_subfolders_are_ordered_and_named_by_their_relative_path(tmp_path):
    from data_prep.jigsaw import list_images

    root = tmp_path / "photos"
    (root / "sub").mkdir(parents=True)
    for name in ("z.png", "b.png", "sub/a.png"):
        Image.new("RGB", (20, 20), (len(name), 0, 0)).save(root / name)
    assert [p.relative_to(root).as_posix() for p in list_images(root)] == ["b.png", "sub/a.png", "z.png"]
    out = write_jigsaw_dataset(tmp_path / "o" / "t.jsonl", root, 3, 0, grids="2x1")
    assert sorted(json.loads(x)["source_image"] for x in out.read_text().splitlines()) == [
        "b.png",
        "sub/a.png",
        "z.png",
    ]


def test_shuffle_mn_turns_some_grids_on_their_side_and_only_then(tmp_path):
    def grids(shuffle_mn):
        out = write_jigsaw_dataset(tmp_path / f"{shuffle_mn}.jsonl", None, 12, 0, grids="2x1", shuffle_mn=shuffle_mn)
        return [(json.loads(x)["m"], json.loads(x)["n"]) for x in out.read_text().splitlines()]

    assert set(grids(True)) == {(2, 1), (1, 2)}
    assert set(grids(False)) == {(2, 1)}


def test_pair_choices_are_shown_in_a_shuffled_order(tmp_path):
    from data_prep.jigsaw import pair_choices

    out = write_jigsaw_dataset(tmp_path / "t.jsonl", None, 12, 0, grids="2x2", question_types="pair", shuffle_mn=False)
    records = [json.loads(x) for x in out.read_text().splitlines()]
    for r in records:
        canonical = pair_choices(2, 2, r["k"], r["l"])
        assert sorted(r["choices"]) == sorted(canonical)
        assert r["choices"][ord(r["answer"]) - ord("A")] == pair_relation(r["permutation"], 2, r["k"], r["l"])
    # more than the answer's swap moved: Jigsaw-R1 shuffles the sentences
    moved = [
        sum(a != b for a, b in zip(r["choices"], pair_choices(2, 2, r["k"], r["l"]), strict=True)) for r in records
    ]
    assert max(moved) > 2


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"grids": {"2x1": 0, "2x2": 1}}, "grid '2x1' has weight 0; weights must be numbers > 0"),
        ({"n_choices": 1}, "n_choices must be in 2..25, got 1"),
        ({"n_choices": 26}, "n_choices must be in 2..25, got 26"),
    ],
)
def test_bad_weights_and_choice_counts_are_refused(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        write_jigsaw_dataset(tmp_path / "x.jsonl", None, 1, 0, **kwargs)


def test_a_listing_that_names_a_missing_image_is_refused_naming_it(tmp_path):
    photos = _photos(tmp_path / "photos")
    listing = tmp_path / "list.json"
    listing.write_text(json.dumps(["photo1.png", "gone.png"]))
    with pytest.raises(ValueError, match=re.escape(f"{listing}: 1 listed image(s) not under {photos}, e.g. gone.png")):
        write_jigsaw_dataset(tmp_path / "x.jsonl", photos, 2, 0, source_list=listing)


# -- records ----------------------------------------------------------------------------------
def _ctx(tmp_path: Path, require_images: bool = True) -> RecordContext:
    return RecordContext("data.jsonl:1", 0, tmp_path, FrameSpec(), require_images)


def _record(tmp_path: Path, **changes) -> dict:
    Image.new("RGB", (40, 20)).save(tmp_path / "p.png")
    record = {"image": "p.png", "m": 2, "n": 2, "permutation": [3, 1, 4, 2], "question_type": "full"}
    record.update(changes)
    return {k: v for k, v in record.items() if v is not None}


PAIR = {"question_type": "pair", "k": 1, "l": 2, "answer": "C"}
PAIR_CHOICES = [
    "1 is directly above 2",
    "1 is directly to the left of 2",
    "1 is directly below 2",
    "1 is directly to the right of 2",
    "1 is on the upper left of 2",
    "1 is on the upper right of 2",
    "1 is on the lower left of 2",
    "1 is on the lower right of 2",
]


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"permutation": [3, 1, 3, 2]}, r"not a permutation of 1\.\.4 \(repeated \[3\]; missing \[4\]\)"),
        ({"permutation": [3, 1, 4, 5]}, r"outside 1\.\.4: \[5\]"),
        ({"permutation": [2, 1]}, "grid mismatch: key 'permutation' has 2 entries but a 2x2 grid has 4 positions"),
        ({"m": 3}, "grid mismatch: key 'permutation' has 4 entries but a 3x2 grid has 6 positions"),
        (
            {"m": 1, "n": 3, "permutation": [3, 1, 2]},
            r"grid mismatch: image .* is 40x20, which does not split into 1 rows x 3 columns",
        ),
        ({"m": 1, "n": 1, "permutation": [1]}, "at least 2 patches"),
        ({"image": "gone.png"}, "image not found"),
        ({"question_type": "box"}, "expected one of full, pair, multiple, single"),
        ({"permutation": None}, "missing key 'permutation'"),
        ({**PAIR, "choices": PAIR_CHOICES, "answer": "A"}, r"makes choice C \('1 is directly below 2'\) the right one"),
        ({**PAIR, "choices": PAIR_CHOICES[:2]}, "must be the 8 relations of a 2x2 grid"),
        ({**PAIR, "l": 1, "choices": PAIR_CHOICES}, "both 1"),
        ({**PAIR, "k": 5, "choices": PAIR_CHOICES}, r"outside the positions 1\.\.4"),
        (
            {"question_type": "multiple", "choices": ["1 2\n3 4", "2 1\n3 4"], "answer": "A"},
            "no choice equals the permutation",
        ),
        ({"question_type": "multiple", "choices": ["3 1\n4 2", "3 1 4 2"], "answer": "A"}, "same permutation twice"),
        (
            {"question_type": "multiple", "choices": ["3 1\n4 2", "1 1\n1 1"], "answer": "A"},
            r"choice \(B\) .* is not a permutation",
        ),
        ({"question_type": "single", "k": 2, "answer": 3}, "permutation puts the patch at position k in 1"),
    ],
)
def test_bad_records_are_reported_precisely(tmp_path, changes, message):
    with pytest.raises(RecordError, match=message):
        Jigsaw().build_sample(_record(tmp_path, **changes), _ctx(tmp_path))


def test_a_question_type_option_keeps_one_type(tmp_path):
    with pytest.raises(RecordError, match="question_type 'full' but task.options.question_type is 'pair'"):
        Jigsaw(options={"question_type": "pair"}).build_sample(_record(tmp_path), _ctx(tmp_path))


def test_records_load_without_images_when_sizes_are_given(tmp_path):
    record = _record(tmp_path, image="elsewhere.png", width=40, height=20)
    sample = Jigsaw().build_sample(record, _ctx(tmp_path, require_images=False))
    assert sample.solution == [3, 1, 4, 2] and sample.meta["grid"] == "2x2"


def test_pair_prompt_text_is_jigsaw_r1s(tmp_path):
    record = _record(
        tmp_path,
        m=1,
        n=2,
        permutation=[2, 1],
        question_type="pair",
        k=1,
        l=2,
        choices=["1 is directly to the left of 2", "1 is directly to the right of 2"],
        answer="B",
    )
    task = Jigsaw(options={"think": False})
    sample = task.build_sample(record, _ctx(tmp_path))
    text = task.messages(sample)[0]["content"][1]["text"]
    assert text == (
        "The input image is divided into 1x2 patches that have been randomly permuted from their original positions. "
        "Your task is to solve this 1x2 jigsaw puzzle and reconstruct the original image.\n\n"
        "Consider a 1x2 grid, where each number represents a position index ranging from 1 (left) to 2 (right):\n\n"
        "```\n1 2\n```\n\n"
        "For patches currently at positions 1 and 2, determine their relative position in the original image.\n\n"
        "Select the correct answer from the following 2 choices:\n\n"
        "(A) 1 is directly to the left of 2\n(B) 1 is directly to the right of 2\n\n"
        "Directly output the final answer. The final answer should be a single letter."
    )
    assert task.target(sample) == "B"


# -- task scoring and metrics -----------------------------------------------------------------
def _samples(tmp_path: Path) -> list:
    task = Jigsaw()
    full = task.build_sample(_record(tmp_path), _ctx(tmp_path))
    line = task.build_sample(_record(tmp_path, m=1, n=4, image="line.png", permutation=[2, 4, 1, 3]), _ctx(tmp_path))
    single = task.build_sample(_record(tmp_path, question_type="single", k=2, answer=1), _ctx(tmp_path))
    pair = task.build_sample(_record(tmp_path, **PAIR, choices=PAIR_CHOICES), _ctx(tmp_path))
    return [full, line, single, pair]


@pytest.fixture
def four_samples(tmp_path):
    Image.new("RGB", (40, 10)).save(tmp_path / "line.png")
    return _samples(tmp_path)


def test_metrics_on_fixed_predictions(four_samples):
    completions = [
        tagged("3 1\n2 4"),  # full 2x2 [3,1,4,2]: 2 of 4 right
        tagged("2 4 1 3"),  # full 1x4: exact
        "1",  # single: no tags, but Jigsaw-R1 reads the whole text: right, format 0
        tagged("A"),  # pair: the right answer is C
    ]
    metrics = Jigsaw().metrics(four_samples, completions)
    assert metrics["accuracy"] == pytest.approx(2 / 4)
    assert metrics["partial"] == pytest.approx((0.5 + 1 + 1 + 0) / 4)
    assert metrics["accuracy/2x2"] == pytest.approx(1 / 3)
    assert metrics["partial/2x2"] == pytest.approx(1.5 / 3)
    assert metrics["count/2x2"] == 3.0
    assert metrics["accuracy/1x4"] == metrics["partial/1x4"] == 1.0
    assert metrics["accuracy/full"] == 0.5 and metrics["partial/full"] == 0.75
    assert metrics["accuracy/single"] == 1.0 and metrics["accuracy/pair"] == 0.0
    assert metrics["format_rate"] == 0.75
    assert metrics["parse_rate"] == 1.0


def test_exact_match_is_scored_and_logged_at_weight_zero(four_samples):
    task = Jigsaw()
    assert task.reward_weights == {"jigsaw_partial": 1.0, "format": 0.5, "jigsaw_exact": 0.0}
    scores = score(task, [tagged("3 1\n2 4")], four_samples[:1])
    assert scores.components == {"jigsaw_partial": [0.5], "format": [1.0], "jigsaw_exact": [0.0]}
    assert scores.total == [0.5 + 0.5 * 1.0]


def test_connections_component_and_no_think_targets(four_samples):
    task = Jigsaw(options={"think": False}, rewards={"jigsaw_connections": 1.0, "format": 1.0, "jigsaw_exact": 1.0})
    targets = [task.target(s) for s in four_samples]
    assert targets == ["3 1\n4 2", "2 4 1 3", "1", "C"]
    scores = score(task, targets, four_samples)
    assert all(v == [1.0] * 4 for v in scores.components.values())
    assert task.predict("2 4 1", four_samples[1]) == [2, 4, 1]


@pytest.mark.parametrize("question_type", ["full", "pair", "multiple", "single"])
def test_synthetic_puzzles_are_of_the_question_type_the_task_asks_for(tmp_path, question_type):
    """configs/jigsaw.yaml asks for pair questions: synthetic data of the four types in turn
    had three records in four refused by its own task."""
    task = Jigsaw(options={"question_type": question_type})
    task.synthesize(tmp_path / "train.jsonl", 8, seed=0)
    split = task.load(tmp_path / "train.jsonl", FrameSpec("absolute", 3136, 12845056))
    assert len(split.samples) == 8 and not split.errors
    assert {s.meta["question_type"] for s in split.samples} == {question_type}


def test_a_multiple_choice_record_with_one_choice_is_refused(tmp_path):
    record = _record(tmp_path, question_type="multiple", choices=["3 1\n4 2"], answer="A")
    with pytest.raises(RecordError, match=r"key 'choices' must be 2\.\.\d+ strings, got 1 entries"):
        Jigsaw().build_sample(record, _ctx(tmp_path))


def test_a_permutation_of_booleans_is_refused_though_true_equals_1(tmp_path):
    with pytest.raises(RecordError, match="key 'permutation' must hold integers"):
        Jigsaw().build_sample(_record(tmp_path, m=1, n=2, permutation=[True, 2]), _ctx(tmp_path))


def test_metrics_count_only_per_grid_and_per_type_groups(four_samples):
    metrics = Jigsaw().metrics(four_samples, [tagged("3 1\n4 2")] * 4)
    assert "count" not in metrics and metrics["count/2x2"] == 3.0 and metrics["count/full"] == 2.0
