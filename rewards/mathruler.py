"""EasyR1's answer grader, MathRuler's `grade_answer` and `extract_boxed_content`, without eval.

Reimplemented from hiyouga/MathRuler @14dadeb (PyPI mathruler 0.1.0, byte-identical graders):
mathruler/grader.py and mathruler/math_normalize.py, which are PRM800K's grading code
(openai/prm800k prm800k/grading/), itself Hendrycks' MATH `math_equivalence`. EasyR1's
examples/reward_function/math.py and r1v.py call it. An answer is right when

1. Hendrycks' normalization (`mathd_normalize`) of both sides is equal, or
2. PRM800K's normalization (`prm_normalize`: units, `\\text{}`, LaTeX read by pylatexenc,
   lower case) is equal, or
3. element by element of a tuple / interval: two plain fractions are equal as strings (an
   unreduced fraction is wrong), an integer against a non-integer is wrong, and anything else
   is equal when sympy simplifies the difference to 0.

Where this differs from MathRuler: step 3 never evaluates text. MathRuler hands
`(truth)-(given)` to sympy's `parse_expr` (Python's eval of a rewritten string) and then
`sympy.simplify`, with no time limit (`9**9**9**9` passes its filters and hangs). Here a small
parser (`_Parser`) reads the same text into sympy objects built directly: numbers, the
letters of at most two unknowns (names as Python's tokenizer reads them, split as `parse_expr`
splits them: "xy" is x*y, "a14" a*14, while a Greek letter or a subscripted name such as θ or
a_1 stays one symbol), `pi`, `sqrt(...)`, `ln(...)`,
`+ - * / ^ **`, parentheses and implicit multiplication, with Python's precedence. What it does
not read (function names other than sqrt and ln, factorials, `=`, commas, Python keywords, numbers
with leading zeros that Python refuses anyway, over MAX_TOKENS tokens, powers whose result
would pass MAX_POWER_BITS, a root or fractional power of a number past MAX_ROOT_BITS, a float
exponent past MAX_FLOAT_EXPONENT, or a symbolic base raised past MAX_SYMBOLIC_EXPONENT: numbers
sympy computes in C for minutes, where no deadline reaches) is "not equal", where MathRuler
might have called it equal. Reading and `sympy.simplify` run under a SIMPLIFY_SECONDS deadline
in the main thread (a timer signal; none elsewhere), and an expired deadline is "not equal".
"""

from __future__ import annotations

import keyword
import math
import signal
import threading
import unicodedata
from collections.abc import Callable
from contextlib import contextmanager
from functools import cache
from typing import Any

import regex

from rewards.text import Pattern, compile_pattern

BOXED = "\\boxed{"
NO_BOX = "None"  # what extract_boxed_content returns without a closed box (a string, as there)
MAX_TOKENS = 256
MAX_DEPTH = 48
MAX_POWER_BITS = 100_000
MAX_SYMBOLIC_EXPONENT = 16
# A float's exponent past this (1e-999999: sympy computes 10**999999 in C, minutes that no
# deadline interrupts) and a root or fractional power of a number past MAX_ROOT_BITS (sympy
# factors it: sqrt of 4,000 nines took 26 s) are unreadable.
MAX_FLOAT_EXPONENT = 1_000
MAX_ROOT_BITS = 256
SIMPLIFY_SECONDS = 1.0
TIMEOUT_S = 0.25  # each regex over model text


def boxed_content(text: str) -> str:
    """extract_boxed_content: the text of the last `\\boxed{`, up to its matching brace,
    stripped; "None" when there is no `\\boxed{` or the last one is never closed."""
    start = text.rfind(BOXED)
    if start < 0:
        return NO_BOX
    depth = 0
    body = text[start + len(BOXED) :]
    for i, char in enumerate(body):
        depth += char == "{"
        depth -= char == "}"
        if depth < 0:
            return body[:i].strip()
    return NO_BOX


def _sub(pattern: Pattern, repl: str, text: str) -> str:
    return pattern.sub(repl, text, timeout=TIMEOUT_S)


# -- Hendrycks' normalization (math_normalize.py) --------------------------------------------------
TEXT_WRAPPED = compile_pattern(r"^\\text\{(?P<text>.+?)\}$")


def _braced_fracs(text: str) -> str:
    """`\\frac12` -> `\\frac{1}{2}`, `\\frac1{72}` -> `\\frac{1}{72}` (_fix_fracs). Raises
    IndexError where `\\frac` ends the text, as the original does (normalize_answer catches it)."""
    head, *rest = text.split("\\frac")
    out = [head]
    for part in rest:
        out.append("\\frac")
        if part[0] == "{":
            out.append(part)
        elif len(part) < 2:
            return text
        elif part[1] == "{":
            out.append("{" + part[0] + "}" + part[1:])
        else:
            out.append("{" + part[0] + "}{" + part[1] + "}" + part[2:])
    return "".join(out)


def _slash_fraction(text: str) -> str:
    """`3/4` (two integers written plainly) -> `\\frac{3}{4}` (_fix_a_slash_b)."""
    parts = text.split("/")
    if len(parts) != 2:
        return text
    try:
        a, b = int(parts[0]), int(parts[1])
    except ValueError:
        return text
    return f"\\frac{{{a}}}{{{b}}}" if text == f"{a}/{b}" else text


def _braced_sqrt(text: str) -> str:
    """`\\sqrt3` -> `\\sqrt{3}` (_fix_sqrt); IndexError where `\\sqrt` ends the text."""
    if "\\sqrt" not in text:
        return text
    head, *rest = text.split("\\sqrt")
    return head + "".join("\\sqrt" + (part if part[0] == "{" else "{" + part[0] + "}" + part[1:]) for part in rest)


def _hendrycks(text: str) -> str:
    """_strip_string, step by step."""
    for old, new in (("\n", ""), ("\\!", ""), ("\\\\", "\\"), ("tfrac", "frac"), ("dfrac", "frac")):
        text = text.replace(old, new)
    for old in ("\\left", "\\right", "^{\\circ}", "^\\circ", "\\$"):
        text = text.replace(old, "")
    if "\\text{ " in text:  # units on the right; exactly one is understood
        pieces = text.split("\\text{ ")
        if len(pieces) != 2:
            raise ValueError("more than one \\text{ }")
        text = pieces[0]
    text = text.replace("\\%", "").replace("%", "")
    text = text.replace(" .", " 0.").replace("{.", "{0.")
    if not text:
        return text
    if text[0] == ".":
        text = "0" + text
    sides = text.split("=")
    if len(sides) == 2 and len(sides[0]) <= 2:  # "k = 5" -> "5"
        text = sides[1]
    text = _braced_sqrt(text).replace(" ", "")
    text = _braced_fracs(text)
    if text == "0.5":
        text = "\\frac{1}{2}"
    return _slash_fraction(text)


def mathd_normalize(answer: str | None) -> str | None:
    """normalize_answer: stripped, an enclosing `\\text{}` removed, then _strip_string; the
    text as it stood when _strip_string raises."""
    if answer is None:
        return None
    answer = answer.strip()
    match = TEXT_WRAPPED.search(answer, timeout=TIMEOUT_S)
    if match is not None:
        answer = match.group("text").strip()
    try:
        return _hendrycks(answer)
    except (IndexError, ValueError):
        return answer


# -- PRM800K's normalization (grader.py) -------------------------------------------------------------
UNITS = ("degree", "cm", "centimeter", "meter", "mile", "second", "minute", "hour", "day", "week", "month",
         "year", "foot", "feet", "inch", "yard")  # fmt: skip
UNIT_PATTERNS = [compile_pattern(rf"{unit}(es)?(s)? *(\^[0-9]+)?") for unit in UNITS]
CIRC = compile_pattern(r"\^ *\\circ")
THIN_SPACE_COMMA = compile_pattern(",\\\\! *")
MINUS_SPACE = compile_pattern("- *")
MIXED_NUMBER = compile_pattern("([0-9]) +([0-9])")
THOUSANDS = compile_pattern(r"(\d)(,)(\d\d\d)($|\D)")
FRACTION = compile_pattern(r"^-?[0-9]+.?/0*[1-9][0-9]*.?$")
LATEX_SYMBOLS = (("√", "sqrt"), ("π", "pi"), ("∞", "inf"), ("∪", "U"), ("·", "*"), ("×", "*"))
TUPLE_CHARS = "()[]"


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _near_int(value: float) -> bool:
    try:
        return abs(value - round(value)) <= 1e-7
    except (OverflowError, ValueError):
        return False


def _strip_thousands(text: str) -> str:
    """`1,234,567` -> `1234567`, leaving tuple commas (_strip_properly_formatted_commas)."""
    while True:
        stripped = _sub(THOUSANDS, r"\1\3\4", text)
        if stripped == text:
            return text
        text = stripped


def _is_int_text(text: str) -> bool:
    value = _float(_strip_thousands(text))
    return value is not None and _near_int(value)


@cache
def _latex_reader():
    from pylatexenc import latex2text

    return latex2text.LatexNodes2Text()


def _latex_to_text(text: str) -> str:
    """_parse_latex: pylatexenc's text of the LaTeX, its symbols spelled for sympy."""
    text = text.replace("\\tfrac", "\\frac").replace("\\dfrac", "\\frac").replace("\\frac", " \\frac")
    text = _latex_reader().latex_to_text(text)
    for old, new in LATEX_SYMBOLS:
        text = text.replace(old, new)
    return text.strip()


def prm_normalize(text: str) -> str:
    """_normalize: an enclosing `\\text{}`, money and percent signs, units and degrees gone,
    "or" / "and" as commas, LaTeX read as text, spaces and braces gone, lower case, an integer
    written plainly."""
    match = TEXT_WRAPPED.search(text, timeout=TIMEOUT_S)
    if match is not None:
        text = match.group("text")
    for old, new in (("\\%", "%"), ("\\$", "$"), ("$", ""), ("%", ""), (" or ", " , "), (" and ", " , "),
                     ("million", "*10^6"), ("billion", "*10^9"), ("trillion", "*10^12")):  # fmt: skip
        text = text.replace(old, new)
    for pattern in UNIT_PATTERNS:
        text = _sub(pattern, "", text)
    text = _sub(CIRC, "", text)
    if text[:1] == "{" and text[-1:] == "}":
        text = text[1:-1]
    text = _sub(THIN_SPACE_COMMA, "", text)
    value = _float(text)
    if value is not None and _near_int(value):
        text = str(round(value))
    if "\\" in text:
        try:
            text = _latex_to_text(text)
        except Exception:  # pylatexenc's own errors; MathRuler keeps the text as it was
            pass
    text = _sub(MINUS_SPACE, "-", text)
    text = _sub(MIXED_NUMBER, r"\1+\2", text)
    text = text.replace(" ", "").replace("{", "").replace("}", "").lower()
    if _is_int_text(text):
        text = str(int(float(text.replace(",", ""))))
    return text


def split_tuple(text: str) -> list[str]:
    """The elements of `(a,b)` / `[a,b)`... (brackets only at the ends), else the text itself."""
    text = _strip_thousands(text)
    if not text:
        return []
    inner = text[1:-1]
    if (
        len(text) > 2
        and text[0] in TUPLE_CHARS
        and text[-1] in TUPLE_CHARS
        and not any(c in inner for c in TUPLE_CHARS)
    ):
        return [element.strip() for element in inner.split(",")]
    return [text]


# -- step 3: sympy, without eval -----------------------------------------------------------------
class Unreadable(ValueError):
    """Text the safe parser does not read (MathRuler's parse_expr might): scored "not equal"."""


# Numbers as Python's tokenize module reads them: a float may start with zeros, an integer may
# not ("0498" is the two numbers 0 and 498, which implicit multiplication then multiplies).
# Blanks (space, tab, form feed) separate tokens; a line break (the answer is not stripped: a
# model's "<answer>\n1.5\n</answer>") is tokenize's NL inside the brackets, which sympy's
# implicit multiplication and application do not cross ("2\nx" is refused, "2\tx" is 2*x).
TOKEN = compile_pattern(
    r"(\d+\.\d*(?:e[+-]?\d+)?|\.\d+(?:e[+-]?\d+)?|\d+e[+-]?\d+|0+|[1-9]\d*)|((?!\d)\w+)|(\*\*|[-+*/()^])"
    r"|([ \t\f]+)|([\r\n])|(.)",
    regex.DOTALL,
)
# Python literals the parser does not read: 0x1f, 0o7, 0b1, 2j, 1.5j, 1_000 (a name such as a_1 or
# a1_b is no literal: Python reads it as one name).
OTHER_LITERALS = compile_pattern(r"(?<!\w)(?<!\.)(?:0[xob]|(?:\d[\d.]*|\.\d+)(?:e[+-]?\d+)?j|[\d.]*\d_)")
BAD_SUBSTRINGS = ("^{", "^(")
NAME_PARTS = compile_pattern(r"\d+|(?![\d_])\w")
BAD_POWERS = (compile_pattern(r"\^[0-9]+\^"), compile_pattern(r"\^[0-9][0-9]+"))


def may_evaluate(expr: str) -> bool:
    """should_allow_eval: at most two distinct letters (besides those of sqrt and frac), no
    `^{`, `^(`, `^9^` or exponents of two or more digits."""
    letters = {c for c in expr.replace("sqrt", "").replace("frac", "") if c.isalpha()}
    if len(letters) > 2 or any(bad in expr for bad in BAD_SUBSTRINGS):
        return False
    return not any(pattern.search(expr, timeout=TIMEOUT_S) for pattern in BAD_POWERS)


@cache
def _sympy_names() -> frozenset[str]:
    import sympy

    return frozenset(name for name in dir(sympy) if not name.startswith("_"))


def _greek(name: str) -> bool:
    try:
        unicodedata.lookup("GREEK SMALL LETTER " + name)
    except KeyError:
        return False
    return True


class _Parser:
    """Recursive descent over Python's expression grammar for the tokens sympy's parse_expr
    (standard transformations + implicit multiplication and application) would see."""

    def __init__(self, text: str):
        import sympy

        self.sympy = sympy
        if OTHER_LITERALS.search(text, timeout=TIMEOUT_S):
            raise Unreadable("a hex, octal, binary, imaginary or underscored literal")
        self.tokens: list[tuple[str, str]] = []
        self.after_break: set[int] = set()  # the tokens a line break precedes: nothing implicit across it
        for number, name, op, blank, line_break, other in TOKEN.findall(text.replace("^", "**"), timeout=TIMEOUT_S):
            if other:
                raise Unreadable(f"character {other!r}")
            if line_break:
                self.after_break.add(len(self.tokens))
            if blank or line_break:
                continue
            self.tokens.append(("num", number) if number else ("name", name) if name else ("op", op))
            if len(self.tokens) > MAX_TOKENS:
                raise Unreadable("too long")
        self.pos = 0
        self.depth = 0

    def parse(self) -> Any:
        value = self.sum()
        if self.pos != len(self.tokens):
            raise Unreadable(f"unexpected {self.tokens[self.pos][1]!r}")
        return value

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else ("end", "")

    def take(self, op: str) -> bool:
        if self.peek() == ("op", op):
            self.pos += 1
            return True
        return False

    def sum(self) -> Any:
        value = self.product()
        while self.peek() in (("op", "+"), ("op", "-")):
            sign = self.tokens[self.pos][1]
            self.pos += 1
            other = self.product()
            value = value + other if sign == "+" else value - other
        return value

    def product(self) -> Any:
        value = self.unary()
        while True:
            if self.take("*"):
                value = value * self.unary()
            elif self.take("/"):
                value = value / self.unary()
            elif self.pos not in self.after_break and (self.peek()[0] in ("num", "name") or self.peek() == ("op", "(")):
                value = value * self.power()  # implicit multiplication
            else:
                return value

    def unary(self) -> Any:
        if self.take("-"):
            return -self.unary()
        if self.take("+"):
            return +self.unary()
        return self.power()

    def power(self) -> Any:
        base = self.atom()
        if not self.take("**"):
            return base
        return self.raise_to(base, self.unary())

    def raise_to(self, base: Any, exponent: Any) -> Any:
        """base ** exponent, refused where the result would be huge or costly: a rational power of
        more than MAX_POWER_BITS bits, a root or fractional power of a rational past MAX_ROOT_BITS
        (sympy factors it), or a non-rational base past MAX_SYMBOLIC_EXPONENT."""
        sympy = self.sympy
        if exponent.is_Number and not isinstance(exponent, sympy.Float):
            if base.is_Rational:
                bits = math.log2(max(abs(base.p), base.q, 2))
                if abs(exponent) * bits > MAX_POWER_BITS:
                    raise Unreadable("power too large")
                if not exponent.is_Integer and bits > MAX_ROOT_BITS:
                    raise Unreadable("root of a number too large")
            elif not isinstance(base, sympy.Float) and abs(exponent) > MAX_SYMBOLIC_EXPONENT:
                raise Unreadable("symbolic power too large")
        return sympy.Pow(base, exponent)

    def atom(self) -> Any:
        kind, text = self.peek()
        self.pos += 1
        if kind == "num":
            return self.number(text)
        if kind == "name":
            return self.name(text)
        if (kind, text) == ("op", "("):
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise Unreadable("nested too deeply")
            value = self.sum()
            if not self.take(")"):
                raise Unreadable("unclosed parenthesis")
            self.depth -= 1
            return value
        raise Unreadable(f"unexpected {text or 'end'!r}")

    def number(self, text: str) -> Any:
        sympy = self.sympy
        if "." in text or "e" in text:
            _, _, exponent = text.partition("e")
            if exponent and abs(int(exponent)) > MAX_FLOAT_EXPONENT:
                raise Unreadable("float exponent too large")
            return sympy.Float(text)
        return sympy.Integer(text)

    def name(self, text: str) -> Any:
        sympy = self.sympy
        if text in ("sqrt", "ln"):  # applied to what follows in parentheses, as parse_expr applies them
            if self.peek() != ("op", "(") or self.pos in self.after_break:
                raise Unreadable(f"{text} without parentheses")
            argument = self.atom()
            return self.raise_to(argument, sympy.Rational(1, 2)) if text == "sqrt" else sympy.log(argument)
        if text == "pi":
            return sympy.pi
        if text in _sympy_names():
            raise Unreadable(f"sympy's name {text!r}")
        if keyword.iskeyword(text) or not text.isidentifier():  # Python's syntax refuses it ("if", "in")
            raise Unreadable(f"{text!r} is no Python name")
        if _greek(text) or "_" in text:  # sympy's _token_splittable: kept whole (theta, a_1)
            return sympy.Symbol(text)
        # parse_expr splits a longer name: "xy" is x*y, "a14" is a*14, "αβ" is α*β; a digit run with a
        # leading zero ("xy05") is a Number('05') Python cannot read
        parts = NAME_PARTS.findall(text, timeout=TIMEOUT_S)
        if any(p.isdigit() and len(p) > 1 and p.startswith("0") for p in parts):
            raise Unreadable(f"{text!r} splits into a number with a leading zero")
        return sympy.Mul(*(sympy.Integer(p) if p.isdigit() else sympy.Symbol(p) for p in parts))


@contextmanager
def _deadline(seconds: float):
    """Raise TimeoutError in the main thread after `seconds` (a timer signal); elsewhere none."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    def expire(signum, frame):
        raise TimeoutError("sympy took too long")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def equal_under_sympy(truth: str, given: str) -> bool:
    """are_equal_under_sympy: `(truth)-(given)` simplifies to 0 (read by _Parser, not eval)."""
    expr = f"({truth})-({given})"
    if not may_evaluate(expr):
        return False
    try:
        import sympy

        with _deadline(SIMPLIFY_SECONDS):  # reading too: sympy evaluates powers as it builds them
            return bool(sympy.simplify(_Parser(expr).parse()) == 0)
    except (Unreadable, TimeoutError, ArithmeticError, TypeError, ValueError, RecursionError):
        return False


def _elements_equal(truth: str, given: str) -> bool:
    if FRACTION.search(truth, timeout=TIMEOUT_S) and FRACTION.search(given, timeout=TIMEOUT_S):
        return truth == given  # unreduced fractions are not accepted
    if _is_int_text(truth) != _is_int_text(given):
        return False  # an integer truth asks for an integer
    return equal_under_sympy(truth, given)


def grade_answer(given: str | None, truth: str, sympy_step: Callable[[str, str], bool] = _elements_equal) -> bool:
    """MathRuler's grade_answer(given_answer, ground_truth); False also where a regex over the
    text runs out of time."""
    if given is None:
        return False
    try:
        if mathd_normalize(truth) == mathd_normalize(given):
            return True
        truth_n, given_n = prm_normalize(truth), prm_normalize(given)
        if truth_n == given_n:
            return True
        if not given_n:
            return False
        truth_elements, given_elements = split_tuple(truth_n), split_tuple(given_n)
        if len(truth_elements) > 1 and (truth_n[0] != given_n[0] or truth_n[-1] != given_n[-1]):
            return False
        if len(truth_elements) != len(given_elements):
            return False
        return all(sympy_step(t, g) for t, g in zip(truth_elements, given_elements, strict=True))
    except TimeoutError:
        return False
