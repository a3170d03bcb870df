"""Every pattern the rewards compile matches exactly what Python's `re` matches (the public
code runs its patterns with `re`; the `regex` module's \\s, \\d and \\w differ from `re`'s)."""

from __future__ import annotations

import importlib
import pkgutil
import re
import sys

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

import rewards
import tasks
from rewards.format import THINK_ANSWER
from rewards.grounding import parse_answer_box
from rewards.gui import regex_action
from rewards.text import compile_pattern, compiled_patterns, re_compatible

# Characters on which `regex` and `re` disagree (U+001C-U+001F are whitespace to `re` only;
# U+10D40 is a decimal digit in newer Unicode tables than this Python's; U+0301 is a combining
# mark), characters the case-insensitive patterns fold, and the pieces the patterns look for.
PIECES = [
    *"ab xyzAZ09_.,;:'\"-+()[]{}|<>/\\\n\t\r",
    "\x1c", "\x1d", "\x1e", "\x1f", "\x85", "\xa0", "\u2028", "\u3000", "\x0b", "\x0c",
    "\U00010d40", "\U00010d41", "\u0663", "\uff13", "\u00b2", "\u0301", "\u017f", "\u212a", "\u0130", "\u0131",
    "<think>", "</think>", "<answer>", "</answer>", "'action':", "'input_text':", "'click'", "point",
    "<|box_start|>", "<|box_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|im_end|>",
    "twenty", "one", "dozen", "Seven", "s\u0131x", "Nine", "123", "1.5", "-4", "e5",
]  # fmt: skip
for _package in (rewards, tasks):  # every reward and task module, so every pattern is compiled
    for _module in pkgutil.walk_packages(_package.__path__, f"{_package.__name__}."):
        importlib.import_module(_module.name)
TEXTS = st.lists(st.sampled_from(PIECES), max_size=40).map("".join)
FLAGS = re.DOTALL | re.IGNORECASE | re.MULTILINE


def test_every_reward_pattern_is_registered():
    sources = [source for _, source, _ in compiled_patterns()]
    assert r"\[(\d+),\s*(\d+),\s*(\d+),\s*(\d+)]" in sources  # VLM-R1's box
    assert r"'action':\s*'(\w+)'" in sources  # GUI-R1's action
    assert r"^[\(\s]*([A-Z])[\)\.\s]*" in sources  # lmms-eval's CV-Bench letter, case-insensitive
    assert len(sources) > 100


@settings(max_examples=150, deadline=None)
@given(TEXTS)
def test_patterns_find_what_re_finds(text):
    for compiled, source, flags in compiled_patterns():
        reference = re.compile(source, flags & FLAGS)
        ours, theirs = compiled.search(text), reference.search(text)
        assert (ours is None) == (theirs is None), (source, text)
        if ours is not None:
            assert ours.span() == theirs.span() and ours.groups() == theirs.groups(), (source, text)
        assert bool(compiled.fullmatch(text)) == bool(reference.fullmatch(text)), (source, text)


def test_control_separators_are_whitespace_as_in_re():
    completion = "<think>a</think>\x1c<answer>b</answer>"
    assert re.fullmatch(r"<think>.*?</think>\s*<answer>.*?</answer>", completion, re.DOTALL)
    assert THINK_ANSWER.fullmatch(completion)


def test_a_digit_unknown_to_re_does_not_hide_the_next_box():
    # re's \d does not match U+10D40, so VLM-R1 reads the second box; int() could not read the first.
    completion = "<answer>[\U00010d40, 1, 2, 3] [10, 20, 30, 40]</answer>"
    assert parse_answer_box(completion) == [10, 20, 30, 40]
    action = regex_action("[{'action': 'click', 'point': [\U00010d40, 1]}] {[5, 6]}", "gui_r1")
    assert action.point == (5.0, 6.0)


@pytest.mark.parametrize("pattern", [r"\b", r"[\S]", r"[^\W]"])
def test_what_cannot_be_spelled_out_exactly_is_refused(pattern):
    with pytest.raises(ValueError):
        re_compatible(pattern)


@pytest.mark.parametrize("pattern", [r"(?i)a", r"(a)\1", r"\x41", r"\N{LATIN SMALL LETTER A}", "[a"])
def test_what_cannot_be_spelled_out_case_insensitively_is_refused(pattern):
    with pytest.raises(ValueError):
        re_compatible(pattern, ignorecase=True)


def test_a_pattern_is_refused_when_written_and_spelled_out_only_when_first_used():
    with pytest.raises(ValueError, match=r"\\b has no exact re equivalent"):  # at its module's import
        compile_pattern(r"\bword")
    pattern = compile_pattern(r"\w+ [A-Z]", regex.IGNORECASE)
    assert "compiled" not in vars(pattern)  # no class body read off re yet: tens of ms each
    assert pattern.search("-- ab\u0131 K").group() == "ab\u0131 K"
    assert pattern.pattern == re_compatible(r"\w+ [A-Z]", ignorecase=True) and "compiled" in vars(pattern)


def test_a_dotless_i_is_an_i_case_insensitively_as_in_re():
    # re folds "\u0131" onto "i"; the regex module's own IGNORECASE does not
    assert re.fullmatch("five", "f\u0131ve", re.IGNORECASE)
    assert compile_pattern("five", regex.IGNORECASE).fullmatch("f\u0131ve")
    assert compile_pattern("[a-z]+", regex.IGNORECASE).fullmatch("f\u0131ve")


@pytest.mark.parametrize(
    "pattern",
    ["[A-Z]", "[^a-z]", "i", "K", "s", "\u00b5", "\u03c3", "\u0398", "\\.", "[\\w-]", "[^>]", "(?P<Name>x)", "(?:e)"],
)
def test_case_insensitive_pieces_hold_what_res_hold_across_the_first_planes(pattern):
    # every case mapping lies in the first two planes; surrogates included
    points = [*range(0x20000), sys.maxunicode]
    ours, theirs = compile_pattern(pattern, regex.IGNORECASE), re.compile(pattern, re.IGNORECASE)
    assert [bool(ours.fullmatch(chr(c))) for c in points] == [bool(theirs.fullmatch(chr(c))) for c in points]


@pytest.mark.parametrize("escape", [r"\d", r"\s", r"\w", r"\D", r"\S", r"\W"])
def test_each_class_holds_what_res_holds_across_every_plane(escape):
    # every 61st code point of all 17 planes, and astral members of each class (U+1D7CE is a
    # digit, U+10000 a letter, to `re` as to `regex`), surrogates included
    points = [*range(0, sys.maxunicode + 1, 61), 0x1D7CE, 0x10000, 0xD800, 0x1C, 0x3000, sys.maxunicode]
    ours, theirs = compile_pattern(escape), re.compile(escape)
    assert [bool(ours.fullmatch(chr(c))) for c in points] == [bool(theirs.fullmatch(chr(c))) for c in points]
