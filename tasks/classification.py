"""Image classification as CLS-RL (minglllli/CLS-RL at 0dc42e0) trains and evaluates it, with and without thinking.

Records (CLS-RL's jsonl; data_prep/classification.py): `image`, the class name in `label`
(or `solution`, optionally wrapped in <answer></answer>), the prompt text in `problem`
(CLS-RL puts the candidates there: "...\\nPlease choose one from list [ a, b, c].").
Optional `choices`: the candidate class names; the label must be one of them, and when
`problem` is absent the prompt is built from `task.options.question` and the choices in
CLS-RL's wording. Optional `width` / `height` must match the image. Sample.solution is the
label; meta["choices"] the candidates (or None).

Variants (task.options.variant), with CLS-RL's templates:

- `thinking`: "{Question}\\n Please output the thinking process in <think> </think> and final
  answer in <answer> </answer> tags." (grpo.py); format = <think>...</think><answer>...</answer>.
- `no_thinking`: "{Question}\\n Please directly output the answer." (grpo_direct.py); the
  completion is the bare class name; format = a non-empty answer with no reasoning tags.
  CLS-RL's no-thinking run uses the label reward alone, so that is the variant's default.

`prompts: evaluation` asks the text of CLS-RL's evaluation instead (test_qwen2vl_fewshot.py:
"{Question} First output the thinking process ..." / "{Question} Please directly output the
answer name."). Every image is squashed to 384 x 384 (LANCZOS) before the model's own resize,
as CLS-RL trains and evaluates (`image_side`; 0 keeps the image's shape).

Rewards: `format`; `label` (task.options.match): `cls_rl` is CLS-RL's training rule for the
variant (thinking: math-verify's verdict on the completion against the label, where installed
(`answer_check`), else case-insensitive equality of the one-line <answer>; no-thinking: the
completion equals the label exactly), `normalized` is this package's looser match (case,
punctuation, articles, whitespace; rewards/classification.py).
Metrics: `accuracy` by CLS-RL's evaluation rule (equality or containment, case-insensitive),
`exact_accuracy` by the `label` reward's rule, `format_rate`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from data_prep.classification import CLS_RL_QUESTION, cls_rl_problem, write_synthetic_classification
from rewards.classification import cls_rl_eval_correct, eval_answer, label_cls_rl, label_direct, label_normalized
from rewards.text import answer_text
from tasks.answer_check import AnswerCheck
from tasks.records import optional_text, record_image
from tasks.text_answer import TextAnswerTask
from vlrl.config import ConfigError
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.tasking.task import RewardFn

TEMPLATES = {
    "thinking": (
        "{Question}\n Please output the thinking process in <think> </think> and final answer in "
        "<answer> </answer> tags."
    ),
    "no_thinking": "{Question}\n Please directly output the answer.",
}
# CLS-RL evaluates with other text than it trains with (eval/test_qwen2vl_fewshot.py, prompts
# 'normal' and 'direct'): task.options.prompts=evaluation asks it.
EVAL_TEMPLATES = {
    "thinking": (
        "{Question} First output the thinking process in <think> </think> and final answer in <answer> </answer> tags."
    ),
    "no_thinking": "{Question} Please directly output the answer name.",
}
# CLS-RL squashes every image to 384 x 384 (LANCZOS) before its processor, in training
# (grpo_trainer.py) and evaluation; the processor then smart-resizes it (392 x 392 for Qwen2-VL).
CLS_RL_IMAGE_SIDE = 384


@dataclass
class ClassificationOptions(AnswerCheck):  # answer_check: the thinking variant's cls_rl label
    variant: Literal["thinking", "no_thinking"] = "thinking"
    prompt_template: str = ""  # "" = CLS-RL's template for the variant and `prompts`; placeholder {Question}
    prompts: Literal["training", "evaluation"] = "training"  # CLS-RL's grpo.py text, or its evaluation's
    image_side: int = CLS_RL_IMAGE_SIDE  # every image squashed to this square first (CLS-RL's); 0: its own shape
    match: Literal["cls_rl", "normalized"] = "cls_rl"
    question: str = CLS_RL_QUESTION  # for records with `choices` and no `problem`
    target_think: str = "The object in the photo is: {label}."  # reasoning text of the SFT target

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.image_side < 0:
            raise ConfigError(
                f"config: task.options.image_side must be >= 0 (0: the image's own shape), got {self.image_side}"
            )


class Classification(TextAnswerTask):
    name = "classification"
    description = "Image classification (CLS-RL jsonl): class-name match, thinking or no-thinking"
    headline = ("accuracy", "format_rate")
    data_source = "CLS-RL's jsonl records with their images (docs/tasks.md)"
    Options = ClassificationOptions
    default_rewards = {"format": 1.0, "label": 1.0}
    data_suffix = ".jsonl"
    bare_variant = "no_thinking"
    target_key = "label"

    @property
    def templates(self) -> dict[str, str]:  # type: ignore[override]
        return EVAL_TEMPLATES if self.options.prompts == "evaluation" else TEMPLATES

    def default_weights(self) -> dict[str, float]:
        return {"label": 1.0} if self.bare else self.default_rewards

    # -- data -----------------------------------------------------------------------------
    def build_sample(self, record: dict[str, Any], ctx: RecordContext) -> Sample:
        label = _label(record, ctx)
        choices = _choices(record, ctx)
        if choices is not None and label not in choices:
            raise ctx.error(f"label {label!r} is not among the choices {choices!r}"[:200])
        problem = optional_text(record, ctx, "problem", "the question text")
        if problem is None:
            problem = cls_rl_problem(self.options.question, choices or [])
        path, width, height = record_image(record, ctx)
        side = self.options.image_side
        if side:
            width = height = side
        return Sample(
            id=ctx.record_id(record),
            task=self.name,
            problem=problem,
            solution=label,
            images=[path],
            frame=ctx.frame_spec.frame(width, height),
            meta={"choices": choices},
            source=ctx.source,
            image_size=(side, side) if side else None,
        )

    def synthesize(self, path: str | Path, size: int, seed: int) -> None:
        write_synthetic_classification(path, size, seed)

    # -- scoring --------------------------------------------------------------------------
    def reward_functions(self) -> dict[str, RewardFn]:
        return {
            "format": self._format_reward,
            "label": lambda completions, samples: [
                self._label_reward(c, s.solution) for c, s in zip(completions, samples, strict=True)
            ],
        }

    def _label_reward(self, completion: str, label: str) -> float:
        if self.options.match == "normalized":
            return label_normalized(completion, label, think=not self.bare)
        if self.bare:
            return label_direct(completion, label)
        return label_cls_rl(completion, label, use_math_verify=self.options.asks_math_verify)

    def predict(self, completion: str, sample: Sample) -> str | None:
        """The class name stated: the <answer> (or the whole text, as CLS-RL reads it), stripped."""
        answer = completion.strip() if self.bare else eval_answer(completion)
        return answer or None

    def metrics(self, samples: Sequence[Sample], completions: Sequence[str]) -> dict[str, float]:
        n = len(samples)
        if n == 0:
            return {}
        pairs = list(zip(completions, samples, strict=True))
        return {
            "accuracy": sum(cls_rl_eval_correct(c, s.solution) for c, s in pairs) / n,
            "exact_accuracy": sum(self._label_reward(c, s.solution) for c, s in pairs) / n,
            "format_rate": sum(self._format(c) for c, _ in pairs) / n,
        }


def _label(record: dict[str, Any], ctx: RecordContext) -> str:
    """The class name: `label`, or `solution` (CLS-RL's "<answer> name </answer>" or bare)."""
    key = "label" if "label" in record or "solution" not in record else "solution"
    value = ctx.get(record, key, str, "the class name")
    if key == "solution":
        inner = answer_text(value)
        value = inner if inner is not None else value
    value = value.strip()
    if not value:
        raise ctx.error(f"key '{key}' is an empty class name")
    return value


def _choices(record: dict[str, Any], ctx: RecordContext) -> list[str] | None:
    if record.get("choices") is None:
        return None
    choices = ctx.get(record, "choices", list, "a list of candidate class names")
    if not choices or not all(isinstance(c, str) and c.strip() for c in choices):
        raise ctx.error(f"key 'choices' must be a non-empty list of non-empty strings, got {choices!r}"[:200])
    if len(set(choices)) != len(choices):
        raise ctx.error("key 'choices' lists a class name twice")
    return list(choices)
