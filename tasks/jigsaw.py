"""Jigsaw puzzles (Jigsaw-R1): restore an image whose m x n patches were shuffled.

Definitions: Jigsaw-R1 (arXiv 2505.23590, TMLR 2025), code at github.com/zifuwanggg/Jigsaw-R1 —
the prompts of `utils/prompt.py` (`generate_grid_jigsaw_prompt`, `generate_instruction`, the
instruct-model form), the rewards of `utils/reward.py` (see rewards/jigsaw.py), the metrics of
`test.py` ("correct" = exact accuracy, "score" = mean fraction of positions right).

Data: the jsonl that data_prep/jigsaw.py writes (one shuffled puzzle image per record, the
grid m x n, the forward permutation, the question type and its keys; documented there).
Jigsaw-R1 publishes source images only and draws puzzles on the fly, so there is no public
puzzle file format to read.

Reward components (names used in configs and logs, all in [0, 1]):
- `jigsaw_partial`: Jigsaw-R1's accuracy reward: full questions, the fraction of positions
  right (0 if unparseable or of the wrong length); pair / multiple / single, 1 if the one
  asked answer is right.
- `jigsaw_exact`: 1 if the whole answer is right (Jigsaw-R1's logged "correct").
- `jigsaw_connections`: Jigsaw-R1's alternative full-question reward
  (`--score_jigsaw_connections`), the fraction of neighbouring patches placed next to each
  other; for other question types, the same as `jigsaw_partial`.
- `format`: Jigsaw-R1's format reward for the question type, thinking on or off.
Defaults are Jigsaw-R1's (`grpo.py`: accuracy 1.0, format 0.5) plus `jigsaw_exact` at weight
0.0: a weight-0 component is scored and logged every step as `reward/jigsaw_exact` and adds
nothing to the reward. A config that lists `task.rewards` itself should keep
`jigsaw_exact: 0.0` in the list to keep exact accuracy in the training log.

Options that are not Jigsaw-R1's defaults, by name: `require_answer_tag` (Jigsaw-R1 reads the
whole completion when `<answer>` is missing), `question_type` other than "any" (keep records of
one type only). Not implemented: backward answers (`--no-forward`), masked patch borders,
the "box" question, and the base-model prompt wrapper (`instruct_model=False`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from data_prep.jigsaw import (
    LETTERS,
    MAX_CHOICES,
    grid_name,
    grid_string,
    pair_choices,
    pair_relation,
    write_jigsaw_dataset,
)
from rewards.jigsaw import (
    QUESTION_TYPES,
    jigsaw_connections,
    jigsaw_exact,
    jigsaw_format,
    jigsaw_partial,
    parse_choice,
    parse_grid,
    parse_number,
    parse_permutation,
)
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.tasking.task import RewardFn, Task

# Jigsaw-R1's instruct-model prompt: question, blank line, thinking instruction, answer format.
JIGSAW_R1_TEMPLATE = "{question}\n\n{think_instruction}{format_instruction}"
THINK_INSTRUCTION = (
    "First, output the thinking process within <think> </think> tags. "
    "Then, provide the final answer within <answer> </answer> tags. "
)
NO_THINK_INSTRUCTION = "Directly output the final answer. "
FORMAT_INSTRUCTIONS = {
    "full": "The final answer should be the position indexes arranged in a {m}x{n} grid.",
    "pair": "The final answer should be a single letter.",
    "multiple": "The final answer should be a single letter.",
    "single": "The final answer should be a single number.",
}
FULL_QUESTION = (
    "For each patch, determine its correct position index in the original image. If a patch currently "
    'at position X should belong at position Y, place "Y" at position X.'
)
SYNTHETIC_GRIDS = {"2x1": 1.0, "2x2": 1.0}


@dataclass
class JigsawOptions:
    question_type: Literal["any", "full", "pair", "multiple", "single"] = "any"  # "any": each record's own
    think: bool = True  # Jigsaw-R1's --think (its README trains with --no-think too)
    prompt_template: str = JIGSAW_R1_TEMPLATE  # {question} {think_instruction} {format_instruction}
    require_answer_tag: bool = False  # True: no <answer> tag scores 0 (Jigsaw-R1 reads the whole text)
    target_think: str = "I compare the borders of the patches to find where each one belongs in the {grid} grid."


def puzzle_question(meta: dict[str, Any]) -> str:
    """Jigsaw-R1's question text for a record (forward answers, no masking)."""
    m, n, qtype = meta["m"], meta["n"], meta["question_type"]
    ends = ("left", "right") if m == 1 else ("top", "bottom") if n == 1 else ("top-left", "bottom-right")
    positions = grid_string(range(1, m * n + 1), m, n)
    text = (
        f"The input image is divided into {m}x{n} patches that have been randomly permuted from their original "
        f"positions. Your task is to solve this {m}x{n} jigsaw puzzle and reconstruct the original image.\n\n"
        f"Consider a {m}x{n} grid, where each number represents a position index ranging from 1 ({ends[0]}) "
        f"to {m * n} ({ends[1]}):\n\n```\n{positions}\n```\n\n"
    )
    if qtype == "full":
        return text + FULL_QUESTION
    if qtype == "single":
        return (
            text
            + f"For the patch currently at position {meta['k']}, determine its correct position index in the original image."
        )
    choices = meta["choices"]
    if qtype == "pair":
        listed = "\n".join(f"({LETTERS[i]}) {c}" for i, c in enumerate(choices))
        ask = f"For patches currently at positions {meta['k']} and {meta['l']}, determine their relative position in the original image."
    else:
        listed = "\n\n".join(f"({LETTERS[i]})\n{c}" for i, c in enumerate(choices))
        ask = FULL_QUESTION
    return text + f"{ask}\n\nSelect the correct answer from the following {len(choices)} choices:\n\n{listed}"


class Jigsaw(Task):
    name = "jigsaw"
    states_coordinates = False
    description = "Jigsaw puzzles (Jigsaw-R1): full / pair / multiple / single questions on a shuffled m x n grid"
    headline = ("accuracy", "partial", "format_rate")
    data_source = "puzzles cut from any folder of images by data_prep.jigsaw.write_jigsaw_dataset (docs/tasks.md)"
    Options = JigsawOptions
    option_templates = {
        "prompt_template": ("question", "think_instruction", "format_instruction"),
        "target_think": ("grid", "question_type"),
    }
    default_rewards = {"jigsaw_partial": 1.0, "format": 0.5, "jigsaw_exact": 0.0}
    data_suffix = ".jsonl"

    # -- data -----------------------------------------------------------------------------
    def build_sample(self, record: dict[str, Any], ctx: RecordContext) -> Sample:
        image = ctx.get(record, "image", str, "the path of the shuffled puzzle image")
        m = ctx.get(record, "m", int, "the number of grid rows (an integer >= 1)")
        n = ctx.get(record, "n", int, "the number of grid columns (an integer >= 1)")
        if m < 1 or n < 1 or m * n < 2:
            raise ctx.error(f"grid {m}x{n} must have m, n >= 1 and at least 2 patches")
        size = m * n
        permutation = _permutation(record, size, m, n, ctx)
        qtype = ctx.get(record, "question_type", str, f"one of {', '.join(QUESTION_TYPES)}")
        if qtype not in QUESTION_TYPES:
            raise ctx.error(f"key 'question_type' is {qtype!r}; expected one of {', '.join(QUESTION_TYPES)}")
        wanted = self.options.question_type
        if wanted != "any" and qtype != wanted:
            raise ctx.error(f"question_type {qtype!r} but task.options.question_type is {wanted!r}")
        path, width, height = ctx.image_with_size(image, record)
        if width % n or height % m:
            raise ctx.error(
                f"grid mismatch: image {path} is {width}x{height}, which does not split into {m} rows x {n} columns "
                f"(width must be a multiple of {n}, height of {m})"
            )
        meta: dict[str, Any] = {
            "m": m,
            "n": n,
            "grid": grid_name(m, n),
            "question_type": qtype,
            "permutation": permutation,
        }
        solution: Any = permutation
        if qtype == "single":
            meta["k"] = _position(record, "k", size, ctx)
            solution = _checked_answer(record, permutation[meta["k"] - 1], ctx)
        elif qtype == "pair":
            meta["k"], meta["l"] = _position(record, "k", size, ctx), _position(record, "l", size, ctx)
            if meta["k"] == meta["l"]:
                raise ctx.error(f"keys 'k' and 'l' are both {meta['k']}; a pair question needs two positions")
            meta["choices"] = _choices(record, ctx)
            expected = pair_choices(m, n, meta["k"], meta["l"])
            if sorted(meta["choices"]) != sorted(expected):
                raise ctx.error(
                    f"key 'choices' must be the {len(expected)} relations of a {m}x{n} grid, in any order: {expected}"
                )
            truth = meta["choices"].index(pair_relation(permutation, n, meta["k"], meta["l"]))
            solution = _letter(record, meta["choices"], truth, ctx)
        elif qtype == "multiple":
            meta["choices"] = _choices(record, ctx)
            parsed = []
            for i, choice in enumerate(meta["choices"]):
                values = parse_grid(choice, size)
                if values is None or sorted(values) != list(range(1, size + 1)):
                    raise ctx.error(
                        f"choice ({LETTERS[i]}) {choice!r} is not a permutation of 1..{size} laid out as a grid"
                    )
                parsed.append(values)
            if len({tuple(v) for v in parsed}) != len(parsed):
                raise ctx.error("key 'choices' lists the same permutation twice")
            truth = next((i for i, values in enumerate(parsed) if values == permutation), None)
            solution = _letter(record, meta["choices"], truth, ctx)
        return Sample(
            id=ctx.record_id(record),
            task=self.name,
            problem=puzzle_question(meta),
            solution=solution,
            images=[path],
            frame=ctx.frame_spec.frame(width, height),
            meta=meta,
            source=ctx.source,
        )

    def synthesize(self, path: str | Path, size: int, seed: int) -> None:
        """Synthetic puzzles: 2x1 (and 1x2) and 2x2 grids, the four question types in turn, or
        only task.options.question_type's (a record of another type would be refused)."""
        wanted = self.options.question_type
        types = QUESTION_TYPES if wanted == "any" else (wanted,)
        write_jigsaw_dataset(path, None, size, seed, grids=SYNTHETIC_GRIDS, question_types=types)

    # -- prompting ------------------------------------------------------------------------
    def messages(self, sample: Sample) -> list[dict[str, Any]]:
        meta = sample.meta
        text = self.options.prompt_template.format(
            question=sample.problem,
            think_instruction=THINK_INSTRUCTION if self.options.think else NO_THINK_INSTRUCTION,
            format_instruction=FORMAT_INSTRUCTIONS[meta["question_type"]].format(m=meta["m"], n=meta["n"]),
        )
        return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]

    def target(self, sample: Sample) -> str:
        meta = sample.meta
        if meta["question_type"] == "full":
            answer = grid_string(meta["permutation"], meta["m"], meta["n"])
        else:
            answer = str(sample.solution)
        if not self.options.think:
            return answer
        think = self.options.target_think.format(grid=meta["grid"], question_type=meta["question_type"])
        return f"<think>{think}</think>\n<answer>{answer}</answer>"

    # -- scoring --------------------------------------------------------------------------
    def reward_functions(self) -> dict[str, RewardFn]:
        return {
            "jigsaw_partial": self._per_completion(self._partial),
            "jigsaw_exact": self._per_completion(self._exact),
            "jigsaw_connections": self._per_completion(self._connections),
            "format": self._per_completion(self._format),
        }

    @staticmethod
    def _per_completion(fn: Callable[[str, Sample], float]) -> RewardFn:
        return lambda completions, samples: [fn(c, s) for c, s in zip(completions, samples, strict=True)]

    def predict(self, completion: str, sample: Sample) -> list[int] | str | int | None:
        """Full: the listed positions (any length); pair / multiple: the option letter; single: the position."""
        think, strict = self.options.think, self.options.require_answer_tag
        qtype = sample.meta["question_type"]
        if qtype == "full":
            return parse_permutation(completion, len(sample.meta["permutation"]), think, strict)
        if qtype == "single":
            return parse_number(completion, think, strict)
        return parse_choice(completion, think, strict)

    def _partial(self, completion: str, sample: Sample) -> float:
        prediction = self.predict(completion, sample)
        if sample.meta["question_type"] == "full":
            return jigsaw_partial(prediction, sample.solution)
        return 1.0 if prediction == sample.solution else 0.0

    def _exact(self, completion: str, sample: Sample) -> float:
        prediction = self.predict(completion, sample)
        if sample.meta["question_type"] == "full":
            return jigsaw_exact(prediction, sample.solution)
        return 1.0 if prediction == sample.solution else 0.0

    def _connections(self, completion: str, sample: Sample) -> float:
        if sample.meta["question_type"] != "full":
            return self._partial(completion, sample)
        meta = sample.meta
        return jigsaw_connections(self.predict(completion, sample), sample.solution, meta["m"], meta["n"])

    def _format(self, completion: str, sample: Sample) -> float:
        meta = sample.meta
        return jigsaw_format(
            completion,
            meta["question_type"],
            meta["m"] * meta["n"],
            self.options.think,
            self.options.require_answer_tag,
        )

    def metrics(self, samples: Sequence[Sample], completions: Sequence[str]) -> dict[str, float]:
        """accuracy: exact answers (Jigsaw-R1 test.py "correct"); partial: mean fraction of positions
        right (test.py "score" on full questions; the 0/1 correctness on the others, where
        test.py writes 0); both also per grid ("accuracy/2x1") and per question type
        ("accuracy/pair"), with counts; format_rate; parse_rate (an answer could be read)."""
        if not samples:
            return {}
        groups: dict[str, list[tuple[float, float]]] = defaultdict(list)
        formats, parsed = 0.0, 0
        for completion, sample in zip(completions, samples, strict=True):
            exact, partial = self._exact(completion, sample), self._partial(completion, sample)
            for key in ("", f"/{sample.meta['grid']}", f"/{sample.meta['question_type']}"):
                groups[key].append((exact, partial))
            formats += self._format(completion, sample)
            parsed += self.predict(completion, sample) is not None
        out: dict[str, float] = {}
        for key in sorted(groups):
            rows = groups[key]
            out[f"accuracy{key}"] = sum(e for e, _ in rows) / len(rows)
            out[f"partial{key}"] = sum(p for _, p in rows) / len(rows)
            if key:
                out[f"count{key}"] = float(len(rows))
        out["format_rate"] = formats / len(samples)
        out["parse_rate"] = parsed / len(samples)
        return out


def _permutation(record: dict[str, Any], size: int, m: int, n: int, ctx: RecordContext) -> list[int]:
    value = ctx.get(record, "permutation", list, f"the forward answer, a permutation of 1..{size}")
    if len(value) != size:
        raise ctx.error(
            f"grid mismatch: key 'permutation' has {len(value)} entries but a {m}x{n} grid has {size} positions"
        )
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ctx.error(f"key 'permutation' must hold integers, got {value!r}"[:200])
    if sorted(value) != list(range(1, size + 1)):
        repeated = sorted({v for v in value if value.count(v) > 1})
        missing = sorted(set(range(1, size + 1)) - set(value))
        outside = sorted({v for v in value if not 1 <= v <= size})
        details = "; ".join(
            part
            for part in (
                f"repeated {repeated}" if repeated else "",
                f"missing {missing}" if missing else "",
                f"outside 1..{size}: {outside}" if outside else "",
            )
            if part
        )
        raise ctx.error(f"key 'permutation' {value} is not a permutation of 1..{size} ({details})"[:300])
    return list(value)


def _position(record: dict[str, Any], key: str, size: int, ctx: RecordContext) -> int:
    value = ctx.get(record, key, int, f"a position in 1..{size}")
    if not 1 <= value <= size:
        raise ctx.error(f"key '{key}' is {value}, outside the positions 1..{size}")
    return value


def _choices(record: dict[str, Any], ctx: RecordContext) -> list[str]:
    value = ctx.get(record, "choices", list, "a list of option texts")
    if not 2 <= len(value) <= MAX_CHOICES or not all(isinstance(c, str) for c in value):
        raise ctx.error(f"key 'choices' must be 2..{MAX_CHOICES} strings, got {len(value)} entries")
    return list(value)


def _letter(record: dict[str, Any], choices: list[str], truth: int | None, ctx: RecordContext) -> str:
    """The record's answer letter, checked to name the one true choice (index `truth`)."""
    last = LETTERS[len(choices) - 1]
    answer = ctx.get(record, "answer", str, f"an option letter A..{last}")
    if len(answer) != 1 or answer not in LETTERS[: len(choices)]:
        raise ctx.error(f"key 'answer' is {answer!r}; expected a letter A..{last}")
    if truth is None:
        raise ctx.error("no choice equals the permutation: the question has no right answer")
    if answer != LETTERS[truth]:
        raise ctx.error(
            f"key 'answer' is {answer!r}, but the permutation makes choice {LETTERS[truth]} "
            f"({choices[truth]!r}) the right one"
        )
    return answer


def _checked_answer(record: dict[str, Any], truth: int, ctx: RecordContext) -> int:
    """A single question's answer: the record's `answer` (optional) must equal permutation[k-1]."""
    if "answer" in record:
        stated = ctx.get(record, "answer", int, "the original position of patch k")
        if stated != truth:
            raise ctx.error(f"key 'answer' is {stated} but the permutation puts the patch at position k in {truth}")
    return truth
