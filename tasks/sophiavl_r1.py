"""Image reasoning QA as SophiaVL-R1 trains it: its data, prompt and outcome rewards.

Records: SophiaVL-R1-130k's json, which is Video-R1's format over images (`problem`,
`data_type` "image", `problem_type` multiple choice / numerical / OCR / free-form / text,
`options`, `solution` "<answer>...</answer>", `path`); a record without an image (another
`data_type`, as its text-only samples) is asked as text alone. Videos are refused:
SophiaVL-R1's dataset reads none (use video_qa).

Prompt (kxfan2002/SophiaVL-R1 at a818494, verl/utils/dataset.py and
scripts/train_scripts/run_train.sh): the script's system prompt (its typo "tagsdd" kept); the
user's turn is QUESTION_TEMPLATE around the problem, a multiple-choice problem followed
directly by its options joined with "; ", then the problem type's TYPE_TEMPLATE; the image at
the problem's `<image>`, or first when it has none.

Reward: `accuracy`, SophiaVL-R1's score (rewards/sophiavl_r1.py) chosen by the sample's problem
type as its trainer chooses it (`task.options.scorer: by_problem_type`), or one for every sample
(choice, math, ocr, caption, text), 0 unless the completion is in its format,
which is why there is no separate format reward: Trust-GRPO (algo.trust) reads this score as
its outcome. Metrics: `accuracy`, `accuracy/<problem type>`, `format_rate`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from data_prep.video import write_synthetic_image_qa
from rewards.sophiavl_r1 import answer_content, outcome
from tasks.records import IMAGE, record_image, split_images
from tasks.video_qa import QUESTION_TEMPLATE, accuracy_by_type, record_answer, record_id
from tasks.video_qa import TYPE_TEMPLATE as VIDEO_R1_TYPES
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.tasking.task import RewardFn, Task

# Its run_train.sh writes the text over two lines ("answer.\n The"), and passes it as
# data.system_prompt=... to OmegaConf.from_cli, whose YAML reading of the value folds the line
# break and the space into one space: the text the released run trained with (omegaconf 2.3).
SYSTEM_PROMPT = (
    "You FIRST think about the reasoning process as an internal monologue and then provide the final answer."
    " The reasoning process MUST BE enclosed within <think> </think> tagsdd. The final answer MUST BE enclosed "
    "within <answer> </answer> tags, for example <think>your_thinking_process</think><answer>your_final_answer"
    "</answer>. If you use formula, please use LaTeX format."
)
# Its QUESTION_TEMPLATE is Video-R1's; its TYPE_TEMPLATE Video-R1's less regression, plus text.
TYPE_TEMPLATE = {
    **{kind: VIDEO_R1_TYPES[kind] for kind in ("multiple choice", "numerical", "OCR", "free-form")},
    "text": " Please provide the short text answer within the <answer> </answer> tags.",
}


# Its trainer scores each group with its problem type's compute_score (verl/trainer/main.py's
# reward_fn_dict, chosen in ray_trainer.py's rank_dynamic_reward_fn); fullsets.yaml's
# compute_score (choice) is read by no training code, its val_compute_score (math) by validation.
PROBLEM_TYPE_SCORERS = {
    "numerical": "math", "multiple choice": "choice", "OCR": "ocr", "free-form": "caption", "text": "text",
}  # fmt: skip


@dataclass
class SophiaVLR1Options:
    # by_problem_type: each sample's type's compute_score, as its trainer; or one for all samples:
    # choice, math (its validation's val_compute_score), ocr, caption (= text)
    scorer: Literal["by_problem_type", "choice", "math", "ocr", "caption", "text"] = "by_problem_type"
    synthetic_side: int = 112  # synthetic images: side in pixels


class SophiaVLR1(Task):
    name = "sophiavl_r1"
    states_coordinates = False
    description = "Image reasoning QA in SophiaVL-R1-130k's format, with its prompt and format-gated scores"
    headline = ("accuracy", "format_rate")
    data_source = "SophiaVL-R1-130k's json files with their images (data.image_root: their folder)"
    Options = SophiaVLR1Options
    default_rewards = {"accuracy": 1.0}

    # -- data -----------------------------------------------------------------------------
    def build_sample(self, record: dict[str, Any], ctx: RecordContext) -> Sample:
        problem = ctx.get(record, "problem", str, "the question text")
        problem_type = ctx.get(record, "problem_type", str, "one of " + ", ".join(TYPE_TEMPLATE))
        if problem_type not in TYPE_TEMPLATE:
            raise ctx.error(f"problem_type {problem_type!r} is not one of {', '.join(TYPE_TEMPLATE)}"[:200])
        data_type = record.get("data_type", "image")
        if data_type == "video":
            raise ctx.error("data_type 'video': SophiaVL-R1 reads images only (the video_qa task reads videos)")
        answer = record_answer(record, ctx, stripped=False)  # custom.py's ground truth, as written
        if problem_type == "multiple choice":
            options = ctx.get(record, "options", list, 'the options, like ["A. red", "B. blue"]')
            if not all(isinstance(o, str) for o in options):
                raise ctx.error("options must be a list of strings")
            problem += "; ".join(options)
        images = [record_image(record, ctx, keys=("path", "image"))[0]] if data_type == "image" else []
        if problem.count(IMAGE) > 1:
            raise ctx.error(f"problem holds {problem.count(IMAGE)} {IMAGE} placeholders for one image")
        return Sample(
            id=record_id(record, ctx),
            task=self.name,
            problem=problem,
            solution=answer,
            images=images,
            meta={"problem_type": problem_type, "data_type": data_type},
            source=ctx.source,
        )

    def synthesize(self, path: str | Path, size: int, seed: int) -> None:
        write_synthetic_image_qa(path, size, seed, side=self.options.synthetic_side)

    # -- prompting ------------------------------------------------------------------------
    def messages(self, sample: Sample) -> list[dict[str, Any]]:
        question = sample.problem if IMAGE in sample.problem else IMAGE + sample.problem
        text = QUESTION_TEMPLATE.format(Question=question) + TYPE_TEMPLATE[sample.meta["problem_type"]]
        if not sample.images:  # its text-only samples' image is a masked dummy: the text alone
            content = [{"type": "text", "text": text.replace(IMAGE, "")}]
        else:
            content = split_images(text, len(sample.images))
        return [
            {"role": "system", "content": [{"type": "text", "text": SYSTEM_PROMPT}]},
            {"role": "user", "content": content},
        ]

    def target(self, sample: Sample) -> str:
        return f"<think>Let me look at the image carefully.</think><answer>{sample.solution}</answer>"

    # -- scoring --------------------------------------------------------------------------
    def reward_functions(self) -> dict[str, RewardFn]:
        return {
            "accuracy": lambda completions, samples: [
                self._accuracy(c, s) for c, s in zip(completions, samples, strict=True)
            ]
        }

    def _accuracy(self, completion: str, sample: Sample) -> float:
        scorer = self.options.scorer
        if scorer == "by_problem_type":
            scorer = PROBLEM_TYPE_SCORERS[sample.meta["problem_type"]]
        return outcome(completion, sample.solution, scorer)

    def predict(self, completion: str, sample: Sample) -> str | None:
        return answer_content(completion)

    def metrics(self, samples: Sequence[Sample], completions: Sequence[str]) -> dict[str, float]:
        if not samples:
            return {}
        scores = [self._accuracy(c, s) for c, s in zip(completions, samples, strict=True)]
        formatted = [float(answer_content(c) is not None) for c in completions]
        return accuracy_by_type(scores, formatted, samples, tuple(TYPE_TEMPLATE))
