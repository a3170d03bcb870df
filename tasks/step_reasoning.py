"""Step-wise reasoning VQA with R1-VL's StepGRPO rewards (alias `r1_vl`).

Records (R1-VL's json list; data_prep/step_reasoning.py): `image_path` (or `image`),
`problem` (the whole prompt text: R1-VL adds no template and no system prompt), `solution`
(the reference, Mulberry-style, its answer after `### The final answer is:`), `key_steps`
(`{"Steps": [...]}` as R1-VL's `key_step_single` reads it, a bare list of the same, or either
as a JSON string; each key step a phrase or a list of alternative phrases; a dict without
"Steps" has no key steps, as there).

Rewards (rewards/stepwise.py holds the definitions and their source): `answer` (1 if the
answer is the solution's: math_verify, then the final-answer line as a string), `key_steps`
(StepRAR: the share of key steps found in the `### Step N:` bodies), `validity` (StepRVR:
the sections present, the answer after the last step, steps numbered 1..n). The default
weights {answer: 1, key_steps: 0.1, validity: 1} make the total R1-VL's `accuracy + validity`.

Any reasoning task can offer the two step-wise components: read a record's key steps with
`read_key_steps` into `Sample.meta["key_steps"]` and add `stepwise_rewards()` to its
`reward_functions()`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data_prep.step_reasoning import write_synthetic_step_reasoning
from rewards.stepwise import (
    FINAL_ANSWER,
    KEY_STEP_WEIGHT,
    answer_correct,
    final_answer,
    key_step_score,
    validity,
)
from tasks.answer_check import AnswerCheck
from tasks.records import record_image
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.tasking.task import RewardFn, Task

KEY_STEPS = "key_steps"  # Sample.meta key of a record's key steps


def read_key_steps(record: dict[str, Any], ctx: RecordContext) -> list[str | list[str]]:
    """The record's key steps as R1-VL's `key_step_single` reads them (`{"Steps": [...]}`), also
    from a bare list or a JSON string; each a phrase or a non-empty list of alternatives."""
    value = record.get(KEY_STEPS)
    if value is None:
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as err:
            raise ctx.error(f"key 'key_steps' is a string but not JSON: {err.msg}") from err
    if isinstance(value, dict):
        value = value.get("Steps", [])
    if not isinstance(value, list):
        raise ctx.error(f"key 'key_steps' must be {{\"Steps\": [...]}} or a list, got {type(value).__name__}")
    for i, step in enumerate(value):
        alternatives = [step] if isinstance(step, str) else step
        if not isinstance(alternatives, list) or not all(isinstance(a, str) for a in alternatives):
            raise ctx.error(f"key step {i} must be a phrase or a list of phrases, got {step!r}"[:200])
    return value


def stepwise_rewards() -> dict[str, RewardFn]:
    """StepRAR's `key_steps` and StepRVR's `validity`, for any task whose samples carry key steps."""
    return {
        "key_steps": lambda completions, samples: [
            key_step_score(c, s.meta.get(KEY_STEPS, ())) for c, s in zip(completions, samples, strict=True)
        ],
        "validity": lambda completions, samples: [validity(c) for c in completions],
    }


@dataclass
class StepReasoningOptions(AnswerCheck):
    """`answer_check` (tasks/answer_check.py) for R1-VL's `answer`."""


class StepReasoning(Task):
    name = "step_reasoning"
    states_coordinates = False
    description = "Reasoning VQA in R1-VL's format: StepGRPO's key-step (StepRAR) and validity (StepRVR) rewards"
    Options = StepReasoningOptions
    default_rewards = {"answer": 1.0, "key_steps": KEY_STEP_WEIGHT, "validity": 1.0}

    # -- data -----------------------------------------------------------------------------
    def build_sample(self, record: dict[str, Any], ctx: RecordContext) -> Sample:
        problem = ctx.get(record, "problem", str, "the question text")
        solution = ctx.get(record, "solution", str, 'the reference answer ("... ### The final answer is: X")')
        if not final_answer(solution):
            raise ctx.error("key 'solution' states no answer")
        path, width, height = record_image(record, ctx, keys=("image_path", "image"))
        return Sample(
            id=ctx.record_id(record),
            task=self.name,
            problem=problem,
            solution=solution,
            images=[path],
            frame=ctx.frame_spec.frame(width, height),
            meta={KEY_STEPS: read_key_steps(record, ctx)},
            source=ctx.source,
        )

    def synthesize(self, path: str | Path, size: int, seed: int) -> None:
        write_synthetic_step_reasoning(path, size, seed)

    # -- prompting ------------------------------------------------------------------------
    def messages(self, sample: Sample) -> list[dict[str, Any]]:
        return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": sample.problem}]}]

    def target(self, sample: Sample) -> str:
        """The reference when it is a valid chain; else a chain through the key steps (each's
        first phrase) to the reference's answer."""
        if validity(sample.solution):
            return sample.solution
        steps = [step if isinstance(step, str) else step[0] for step in sample.meta[KEY_STEPS] if step]
        body = "".join(f"### Step {i}:\n{step}\n" for i, step in enumerate(steps or ["Read the image."], start=1))
        return (
            f"### Image Description:\nThe image.\n### Rationales:\n{sample.problem}\n"
            f"### Let's think step by step.\n{body}{FINAL_ANSWER} {final_answer(sample.solution)}"
        )

    # -- scoring --------------------------------------------------------------------------
    def reward_functions(self) -> dict[str, RewardFn]:
        return {
            "answer": lambda completions, samples: [
                self._answer(c, s) for c, s in zip(completions, samples, strict=True)
            ],
            **stepwise_rewards(),
        }

    def _answer(self, completion: str, sample: Sample) -> float:
        return answer_correct(completion, sample.solution, use_math_verify=self.options.asks_math_verify)

    def predict(self, completion: str, sample: Sample) -> str | None:
        """The final-answer line (None without the header)."""
        return final_answer(completion) if FINAL_ANSWER in completion else None

    def metrics(self, samples: Sequence[Sample], completions: Sequence[str]) -> dict[str, float]:
        n = len(samples)
        if n == 0:
            return {}
        pairs = list(zip(completions, samples, strict=True))
        return {
            "accuracy": sum(self._answer(c, s) for c, s in pairs) / n,
            "key_steps": sum(key_step_score(c, s.meta[KEY_STEPS]) for c, s in pairs) / n,
            "validity": sum(validity(c) for c in completions) / n,
        }
