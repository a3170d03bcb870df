"""Tasks whose answer is text about one image, in a thinking variant (<think> then <answer>)
and a bare variant (the answer alone): the prompt, the SFT target and the format reward."""

from __future__ import annotations

from typing import Any, ClassVar

from rewards.format import bare_answer, think_answer
from vlrl.data.sample import Sample
from vlrl.tasking.task import Task


class TextAnswerTask(Task):
    """Options must have `variant`, `prompt_template` ("" = the variant's) and `target_think`."""

    states_coordinates = False

    templates: ClassVar[dict[str, str]] = {}  # variant -> prompt template with {Question}
    bare_variant: ClassVar[str] = ""  # the variant that answers without tags
    target_key: ClassVar[str] = "answer"  # name of the ground truth in options.target_think

    @property
    def option_templates(self) -> dict[str, tuple[str, ...]]:  # type: ignore[override]
        return {"prompt_template": ("Question",), "target_think": ("problem", self.target_key)}

    @property
    def bare(self) -> bool:
        return self.options.variant == self.bare_variant

    def messages(self, sample: Sample) -> list[dict[str, Any]]:
        template = self.options.prompt_template or self.templates[self.options.variant]
        text = template.format(Question=sample.problem)
        return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]

    def target(self, sample: Sample) -> str:
        if self.bare:
            return sample.solution
        think = self.options.target_think.format(problem=sample.problem, **{self.target_key: sample.solution})
        return f"<think>{think}</think>\n<answer>{sample.solution}</answer>"

    def _format(self, completion: str) -> float:
        return bare_answer(completion) if self.bare else think_answer(completion)

    def _format_reward(self, completions, samples) -> list[float]:
        return [self._format(c) for c in completions]
