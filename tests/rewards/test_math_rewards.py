"""Math VQA rewards (rewards/math.py, rewards/mathruler.py) against the public code's
definitions: expected values are the worked examples run on the public code (EasyR1's
examples/reward_function/math.py with mathruler 0.1.0; MM-Eureka's reward_func_qwen_instruct.py,
LMM-R1's math_verifier.py and VisualThinker-R1-Zero's grpo.py rewards with math-verify 0.5.2,
the version they pin), on typical, boundary and hostile inputs."""

from __future__ import annotations

import threading

import pytest

from rewards import math as rm
from rewards.mathruler import boxed_content, equal_under_sympy, grade_answer, mathd_normalize, prm_normalize

# (given, truth, MathRuler's grade_answer) — mathruler 0.1.0 run on each pair.
GRADES = [
    ("3", "3", True), ("3.0", "3", True), (r"\frac{1}{2}", "0.5", True), ("1/2", r"\frac{1}{2}", True),
    ("2/4", r"\frac{1}{2}", False),  # both fractions: compared as strings, unreduced refused
    (r"\frac{2}{4}", "0.5", True),  # the truth is no fraction: sympy decides
    (r"\sqrt{12}", r"2 \sqrt{3}", True), ("3.46", r"2 \sqrt{3}", False), (r"60^\circ", "60", True),
    ("60 degrees", "60", True), ("5 cm", "5", True), ("x=5", "5", True), ("abc=3", "3", False), ("b", "B", True),
    ("B. 12", "B", False), ("(2,1)", "(1,2)", False), ("1,2", "2,1", False), ("1000", "1,000", True), (".5", "0.5", True),
    (r"5\%", "5", True), ("2x", "2*x", True), (r"\text{B}", "B", True), ("1.4142", r"\sqrt{2}", False),
    (r"2\pi", "6.28", False), ("3/6", "1/2", False), ("x^2+2x+1", "(x+1)^2", True), ("2^10", "1024", False),  # a two-digit exponent: should_allow_eval refuses
    (r"\frac{\sqrt{3}}{2}", r"\frac{1}{2}\sqrt{3}", True), ("xy", "yx", True), (r"\pi r^2", "r^2 pi", False),
    ("1e3", "1000", True), ("007", "7", True), ("13 \\frac{1}{3}", r"\frac{40}{3}", True), ("7 3/4", "31/4", True),
    ("0.3333", "1/3", False), (r"\sqrt{x^2}", "x", False), ("1/(x+1)+1", "(x+2)/(x+1)", True), ("3!", "6", False),
    ("0498a", "0*55", True),  # Python's tokenizer reads 0498 as 0 then 498: 0*498*a is 0
    ("042a14", "012x3", True), ("2mu", "mu2", False), ("ln2", "ln(2)", False), ("", "3", False), ("None", "None", True),
    ("3.00000001", "3", True), ("3.000001", "3", False),  # _is_int: within 1e-7 of an integer
    ("", "(1,2)", False), ("$$", "[1,2)", False),  # an empty normalized answer is refused before the tuple check
    ("(1,2]", "(1,2)", False), ("[1,2)", "(1,2)", False),  # a tuple's brackets must match at both ends
    ("(1)", "1", True),  # three characters already make a tuple: its one element is compared
    ("2/2", "1", False),  # an integer truth takes no sympy-equal non-integer
    ("1 and 2", "1, 2", True),  # " and " reads as a comma
    # Blanks and line breaks stay in the answer (PRM800K removes spaces only): tokenize's
    # whitespace inside the brackets, a line break its NL, which implicit products do not cross
    ("\n1.5\n", r"\frac{3}{2}", True), ("\n1+x\n", "x+1", True), ("\n2x+2\n", "2(x+1)", True),
    ("\t1.50", "3/2", True), ("2\tx", "x*2", True), ("x\ty", "y*x", True), ("2\x0cx", "x*2", True),
    ("2\nx", "x*2", False), ("2\rx", "x*2", False), ("2\n(x+1)", "2x+2", False), ("\\sqrt\n(4)", "2", False),
    ("sqrt\t(8)", "2sqrt(2)", True), ("sqrt\n(8)", "2sqrt(2)", False),
    # ln, sympy's log (the one other function name the two-letter filter lets through in answers)
    ("ln(4)", "2ln(2)", True), ("2ln(3)", "ln(9)", True), ("ln(2)+ln(3)", "ln(6)", True), ("1/ln(4)", "1/(2ln(2))", True),
    ("ln(ln(4))", "ln(2ln(2))", True), ("ln\n(4)", "2ln(2)", False), ("ln(x^2)", "2ln(x)", False), ("ln(1)", "0", False),
    ("1\n\n2", "2", False), ("2\x0bx", "x*2", False),
    # Names as Python's tokenizer reads them and parse_expr splits them (sympy's _token_splittable):
    # Greek letters (pylatexenc writes \theta as θ) and subscripted names kept whole, other names split
    # into letters and numbers; a keyword, or a split number with a leading zero, does not parse
    (r"\theta \times 2", r"2\theta", True), (r"0.5\theta", r"\frac{\theta}{2}", True), (r"\beta+\beta", r"2\beta", True),
    ("1+a_1", "a_{1}+1", True), ("x_2+x_1", "x_1+x_2", True), ("x_1_2", "x_1_2*1", True), ("a1_b+0", "a1_b", True),
    ("0+π", "π", True), ("ℓ+1", "1+ℓ", True), ("αβ", "βα", True), ("αβ+0.5", "1.5", False), ("3ℓ", "ℓ+ℓ+ℓ", True), ("x_2", "2x", False),
    ("θ2+0", "2θ", True), ("a2j", "2aj", True),
    ("fi", "if", False), ("ni", "in", False), ("si", "is", False), ("(xy05)*1", "xy05", False), ("x²", "x^2", False),
]  # fmt: skip


@pytest.mark.parametrize("given,truth,expected", GRADES)
def test_mathruler_grade_equals_the_public_grader(given, truth, expected):
    assert grade_answer(given, truth) is expected


def test_mathruler_normalizations_follow_hendrycks_and_prm800k():
    assert mathd_normalize(r"\text{ 5 }") == "5"
    assert mathd_normalize(r"k = \dfrac12") == r"\frac{1}{2}"
    assert mathd_normalize(r"3 \text{ cm}") == "3"
    assert mathd_normalize(r"1 \text{ a} \text{ b}") == r"1 \text{ a} \text{ b}"  # two units: left as it was
    assert mathd_normalize("\\frac") == "\\frac"  # _fix_fracs fails: the text as it was
    assert prm_normalize(r"\$5 million") == "5*10^6"
    assert prm_normalize(r"\frac{a+b}{c}") == "a+b/c"  # pylatexenc's reading, kept as PRM800K has it


def test_the_sympy_step_never_evaluates_text_and_refuses_huge_powers():
    for hostile in ("9**9**9**9", "2**99999999", "__import__('os')", "().__class__", "x**100"):
        assert equal_under_sympy(hostile, "1") is False
    assert equal_under_sympy("2**10", "1024") and equal_under_sympy("(x+1)**2", "x**2+2*x+1")
    assert grade_answer("9**9**9**9", "1") is False


def test_reading_an_answer_runs_under_the_deadline_too(monkeypatch):
    """sympy evaluates powers as the parser builds them: reading counts against the deadline."""
    import time

    import sympy

    import rewards.mathruler as mathruler

    def slow_parse(self):
        time.sleep(0.5)  # Python-level work a timer signal interrupts
        return sympy.Integer(0)

    monkeypatch.setattr(mathruler, "SIMPLIFY_SECONDS", 0.05)
    monkeypatch.setattr(mathruler._Parser, "parse", slow_parse)
    assert equal_under_sympy("2", "2") is False  # the deadline passed while reading


@pytest.mark.parametrize(
    "hostile,readable",
    [  # just past each limit, and just within it; far past, sympy computed for minutes in C
        ("1e-1001", "1e-1000"),  # (1e-3999999): 10**3999999, 2 minutes
        ("sqrt(" + "9" * 78 + ")", "sqrt(" + "9" * 77 + ")"),  # sqrt of 4,000 nines: 26 s of factoring
        ("(2**257+1)**(1/3)", "(2**255+1)**(1/3)"),  # (2**99999+1)**(1/3): over 4 minutes
    ],
)
def test_the_sympy_step_refuses_numbers_whose_roots_or_exponents_sympy_computes_for_minutes(hostile, readable):
    from rewards.mathruler import Unreadable, _Parser

    with pytest.raises(Unreadable):
        _Parser(hostile).parse()
    _Parser(readable).parse()
    assert grade_answer(hostile, "4") is False
    assert rm.easyr1_accuracy(f"<think>a</think> \\boxed{{({hostile})}}", "4") == 0.0  # the parentheses keep it whole


def test_boxed_content_is_the_last_box_brace_matched():
    assert boxed_content(r"x \boxed{3}") == "3"
    assert boxed_content(r"x \boxed{ 3 }.") == "3"  # stripped
    assert boxed_content(r"\boxed{1} then \boxed{2}") == "2"
    assert boxed_content(r"\boxed{\frac{1}{2}}") == r"\frac{1}{2}"
    assert boxed_content(r"\boxed{3} and \boxed{4") == "None"  # the last box is unclosed: no fallback
    assert boxed_content(r"\boxed {3}") == "None"
    assert boxed_content(r"\boxed{a{b}c}d}") == "a{b}c"


# -- EasyR1 compute_score (format_weight 0.1): (response, answer, format, accuracy) ---------------------
EASYR1 = [
    (r"<think>x</think> The answer is \boxed{3}", "3", 1, 1),
    (r"<think>x</think> \boxed{3.0}", "3", 1, 1),
    (r"<think>x</think> \boxed{2/4}", r"\frac{1}{2}", 1, 0),
    (r"<think>x</think> \boxed{1} then \boxed{2}", "1", 1, 0),
    (r"no think \boxed{3}", "3", 0, 1),
    ("<think>x</think> 3", "3", 0, 0),
    ("<think>a</think> no box", "None", 0, 1),  # the "None" sentinel meets a literal "None" answer
    (r"< think >a</ think >\boxed{3}", "3", 1, 1),  # whitespace around < > / is deleted first
    (r"<think>x</think> \boxed{3 / 4}", "3/4", 1, 1),  # ...also inside the box
    (r"<think>x</think>\boxed{3", "3", 0, 0),
    (r"<think>a</think>\boxed{x} tail", "x", 1, 1),
]


@pytest.mark.parametrize("response,answer,fmt,acc", EASYR1)
def test_easyr1_rewards_equal_compute_score(response, answer, fmt, acc):
    assert (rm.easyr1_format(response), rm.easyr1_accuracy(response, answer)) == (fmt, acc)


def test_easyr1_format_spans_lines():
    assert rm.easyr1_format("<think>a\nb</think>\nso \\boxed{3}\n") == 1.0  # DOTALL


def test_easyr1_r1v_reads_the_first_one_line_answer_else_the_whole_response():
    assert rm.easyr1_r1v_accuracy("<think>r</think><answer>\\frac{1}{2}</answer>", " 0.5 ") == 1.0
    assert rm.easyr1_r1v_accuracy("<think>r</think><answer>\n3\n</answer>", "3") == 0.0  # multi-line: whole text
    assert rm.easyr1_r1v_accuracy("  3  ", "3") == 1.0
    assert rm.r1v_answer("<think>r</think><answer> 12 </answer>") == "12"  # the answer stripped
    assert rm.easyr1_r1v_format("<think>r</think> <answer>3</answer>") == 1.0
    assert rm.easyr1_r1v_format("<think>r</think><answer>3</answer> more") == 0.0


# -- math-verify recipes ------------------------------------------------------------------------------
mv = pytest.importorskip("math_verify", reason="pip install 'vlrl[math]'")

# MM-Eureka: (completion, answer, accuracy, format in [0, 1] — 0.5 there, weighted 0.5 here)
MM_EUREKA = [
    ("<think>r</think><answer>$2$</answer>", "2", 1, 1),
    ("<think>r</think><answer>2</answer>", "2", 0, 1),  # ">2<": no anchor before the number
    ("<think>r</think><answer> 2 </answer>", "2", 1, 1),
    ("<think>r</think><answer>\\frac{1}{2}</answer>", "\\frac{1}{2}", 1, 1),
    ("<think>r</think><answer>The answer is 2.</answer>", "2", 1, 1),
    ("<think>r</think><answer>$\\sqrt{12}$</answer>", "2\\sqrt{3}", 1, 1),
    ("<think>r</think><answer>3.4641016</answer>", "2\\sqrt{3}", 0, 1),
    ("<think>r</think><answer>B</answer>", "B", 1, 1),  # the a-d containment fallback
    ("<think>r</think><answer>(B)</answer>", "B", 1, 1),
    ("<think>r</think><answer>The answer is B</answer>", "B", 0, 1),  # "answer" holds an "a"
    ("<think>r</think><answer>Answer: A</answer>", "A", 1, 1),
    ("<think>r</think><answer>B. 12 cm</answer>", "B", 0, 1),  # "cm" holds a "c"
    ("<think>r</think> no answer tag 5", "5", 1, 0),
    ("<think>r</think><answer>2</answer> <answer>3</answer>", "3", 0, 0),
    ("<think></think><answer>$2$</answer>", "2", 1, 0),  # an empty think fails the format
    ("", "2", 0, 0),
    ("<|im_end|>", "2", 0, 0),
]


@pytest.mark.parametrize("completion,answer,acc,fmt", MM_EUREKA)
def test_mm_eureka_rewards_equal_its_reward_function(completion, answer, acc, fmt):
    assert (rm.mm_eureka_accuracy(completion, answer), rm.mm_eureka_format(completion)) == (acc, fmt)


def test_mm_eureka_and_lmm_r1_give_1_when_the_answer_does_not_parse():
    assert rm.mm_eureka_accuracy("<think>r</think><answer>$7$</answer>", "") == 1.0
    assert rm.lmm_r1_accuracy("anything", "$$") == 1.0
    assert rm.lmm_r1_accuracy("", "$$") == 1.0  # verify_math's 1 for the answer comes before the response is read
    assert rm.lmm_r1_accuracy("", "$2$") == 0.0


# LMM-R1: (response, answer, accuracy, format)
LMM_R1 = [
    ("<think>r</think><answer>$2$</answer>", "2", 1, 1),
    ("<think>r</think><answer>2</answer>", "2", 0, 1),  # LaTeX only
    ("<think>r</think><answer>The answer is $\\boxed{2}$</answer>", "$\\boxed{2}$", 1, 1),
    ("<think>r</think> <answer>$2$</answer>", "2", 1, 0),  # a space between the tags
    ("<think>I get $\\boxed{3}$</think><answer>$2$</answer>", "2", 0, 1),  # a box anywhere wins
    ("<think>I get $3$</think><answer>$2$</answer>", "2", 1, 1),
    ("<think>r</think><answer>$\\boxed{A}$</answer>", "$\\boxed{A}$", 1, 1),
    ("<think>r</think><answer>A</answer>", "$\\boxed{A}$", 0, 1),
    ("<think>r</think><answer>The answer is $\\frac{39}{11}$</answer>", "\\frac{39}{11}", 1, 1),
    ("<think>r</think><answer>$60^\\circ$</answer>", "60", 1, 1),
    ("no tags $\\boxed{2}$", "2", 1, 0),
    ("<think>r</think><answer>$2$</answer>\n", "2", 1, 1),  # stripped first
    ("<think>a</think><think>b</think><answer>$2$</answer>", "2", 1, 0),
]


@pytest.mark.parametrize("response,answer,acc,fmt", LMM_R1)
def test_lmm_r1_rewards_equal_its_math_verifier(response, answer, acc, fmt):
    assert (rm.lmm_r1_accuracy(response, answer), rm.lmm_r1_format(response)) == (acc, fmt)


# VisualThinker-R1-Zero, base model (completions continue the prompt's "<think>")
VISUALTHINKER = [
    (" reasoning </think><answer>B</answer>", "B", 1, 1),
    (" r </think><answer> B </answer>", "B", 1, 1),
    (" r </think><answer>(B) left</answer>", "B", 1, 1),
    (" r </think><answer>The answer is B.</answer>", "B", 0, 1),  # "B." is not a standalone letter
    (" r </think><answer>A or B</answer>", "B", 1, 1),
    (" r </think><answer>B or A</answer>", "B", 0, 1),  # the last letter
    (" r </think><answer>b</answer>", "B", 0, 1),
    (" r </think><answer>Left</answer>", "left", 0, 1),
    (" r </think><answer>left</answer>", "left", 1, 1),
    (" reasoning about 3 things </think><answer>2</answer>", "3", 0, 1),
    (" r </think><answer>B</answer>\n<answer>C</answer>", "B", 1, 1),
    ("r</think><answer>\nB\n</answer>", "B", 1, 1),  # no one-line tag: the last letter of the whole text
    ("<answer>B</answer>", "B", 1, 0),
]


@pytest.mark.parametrize("completion,truth,acc,fmt", VISUALTHINKER)
def test_visualthinker_rewards_equal_its_grpo_rewards(completion, truth, acc, fmt):
    assert (rm.visualthinker_accuracy(completion, truth), rm.visualthinker_format(completion)) == (acc, fmt)


def test_math_verify_rewards_score_alike_from_any_thread():
    """math-verify's timers work only in a main thread: the rewards run in the reward worker's."""
    cases = [(f"<think>a</think><answer>{answer}</answer>", "0.5") for answer in ("$0.5$", "$3$", "$\\frac{1}{2}$")]
    expected = [rm.lmm_r1_accuracy(c, a) for c, a in cases]
    got = []
    thread = threading.Thread(target=lambda: got.extend(rm.lmm_r1_accuracy(c, a) for c, a in cases))
    thread.start()
    thread.join()
    assert got == expected == [1.0, 0.0, 1.0]


def test_a_completion_math_verify_would_scan_for_a_minute_is_a_counted_failure_not_a_stall(monkeypatch):
    """ "\\(" * 32768 keeps math-verify's regexes busy ~40 s, out of reach of any timer in the
    process: the worker is ended at VERIFY_SECONDS, the completion scores 0 and is counted, the
    scorer's retry of it fails at once, and the next completion scores as ever; in the task's
    metrics it is wrong."""
    from tasks.math_vqa import MathVQA
    from vlrl.data.sample import Sample
    from vlrl.tasking.scoring import score

    monkeypatch.setattr(rm, "VERIFY_SECONDS", 0.5)
    task = MathVQA({"variant": "lmm_r1"})
    sample = Sample(id="0", task="math_vqa", problem="1+1?", solution="2")
    completions = ["\\(" * 32768, "<think>a</think><answer>$2$</answer>"]
    scores = score(task, completions, [sample, sample])
    assert scores.components["accuracy"] == [0.0, 1.0]
    assert scores.failures == {"accuracy": 1}
    assert scores.reasons["accuracy"].startswith("TimeoutError: rewards.math.lmm_r1_accuracy gave no value in 0.5 s")
    assert task.metrics([sample, sample], completions)["accuracy"] == 0.5  # wrong there, the split's metrics kept


def test_hostile_completions_score_in_bounds_without_hanging():
    hostile = ["<answer>" * 2000, "$9^{9^{9^{9}}}$ " * 3, "\\boxed{" * 500, "<think>" + "a" * 60000, "\x00\ud800"]
    for text in hostile:
        for fn in (rm.easyr1_accuracy, rm.mm_eureka_accuracy, rm.lmm_r1_accuracy, rm.visualthinker_accuracy):
            assert fn(text, "2") in (0.0, 1.0)
        for fn in (rm.easyr1_format, rm.mm_eureka_format, rm.lmm_r1_format, rm.visualthinker_format):
            assert fn(text) in (0.0, 1.0)


def test_a_number_math_verify_cannot_parse_scores_0_and_prints_nothing(capsys):
    """A degenerate completion's 5,000 digits: sympy refuses integers over 4,300 digits and
    math-verify prints the error with the whole text at each parse; the rewards (and the
    math benchmarks' scorer) score it 0 and the console stays clean."""
    from tasks.benchmarks.reasoning import reasoning_score

    digits = "1" * 5000
    texts = [f"<think>a</think><answer>{digits}</answer>", f"${digits}$", digits]
    for reward in (rm.mm_eureka_accuracy, rm.lmm_r1_accuracy, rm.visualthinker_accuracy):
        assert [reward(text, "5") for text in texts] == [0.0, 0.0, 0.0], reward.__name__
    assert reasoning_score(f"<answer>{digits}</answer>", "5")[0] == 0.0
    assert capsys.readouterr().out == ""


def test_mm_eureka_reads_an_unclosed_answer_after_its_tag():
    assert rm.mm_eureka_accuracy("<think>x is 7</think><answer> $3$", "3") == 1.0


def test_lmm_r1_format_refuses_a_second_answer_tag():
    assert rm.lmm_r1_format("<think>a</think><answer><answer>3</answer>") == 0.0
    assert rm.lmm_r1_format("<think>a <think> b</think><answer>3</answer>") == 0.0  # nor a second think tag
    assert rm.lmm_r1_format("<think>a b</think><answer>3</answer>") == 1.0


def test_chatml_end_tokens_are_removed_before_the_format_is_checked():
    for token in ("<|im_end|>", "<｜end▁of▁sentence｜>", "<|endoftext|>", "<end_of_turn>"):  # LMM-R1's four
        assert rm.lmm_r1_format(f"<think>a</think><answer>3</answer>{token}") == 1.0, token
