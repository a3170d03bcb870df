"""OCR: transcribe the text in an image; Video-R1's WER reward and 1 - normalized edit distance.

Records (json list or jsonl), one of:

- `image` + `text` (data_prep/ocr.py writes these), optional `problem`;
- Video-R1's image OCR records: `path` (or `image`), `problem`, `solution`
  ("<answer>text</answer>" or bare text); `problem_type`, if present, must be "OCR" and
  `data_type`, if present, "image";
- conversation records: `image` + `conversations` [{"from": "human", ...}, {"from": "gpt",
  "value": text}] (the format Perception-R1's OCR evaluation reads).

The text is kept as written (it may be empty: an image with no text). Optional `width` /
`height` must match the image. Sample.solution is the text.

Variants (task.options.variant):

- `thinking` (default, Video-R1): Video-R1's question template plus its OCR type template;
  the transcription goes in <answer></answer>, read as Video-R1 reads it ("" when absent).
- `plain` (Perception-R1's evaluation): the prompt "<image>\\nOCR this image: " and the whole completion,
  as generated, is the transcription; format = non-empty with no reasoning tags.

Rewards: `format`, `wer` (Video-R1: clip(1 - WER, 0, 1)), `edit_distance` (1 - NED).
Metrics: `edit_distance_score` (mean 1 - NED), `ned` (mean NED, PR1's "edit_dist"),
`wer_score` (mean reward), `wer` (mean WER, may exceed 1), `exact_match`, `format_rate`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from data_prep.ocr import write_synthetic_ocr
from rewards.ocr import edit_distance_score, video_r1_answer, wer_score, word_error_rate
from rewards.text import answer_text
from tasks.records import optional_text, record_image
from tasks.text_answer import TextAnswerTask
from tasks.video_qa import QUESTION_TEMPLATE, TYPE_TEMPLATE
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.tasking.task import RewardFn

# Video-R1 (src/r1-v/src/open_r1/grpo.py): QUESTION_TEMPLATE + TYPE_TEMPLATE["OCR"].
VIDEO_R1_OCR_TEMPLATE = QUESTION_TEMPLATE + TYPE_TEMPLATE["OCR"]
# Perception-R1 (eval/evaluate_ocr.py) sends an image entry and then this text, its literal
# "<image>" and trailing space included: the model reads them as text, so they are kept.
PLAIN_OCR_TEMPLATE = "<image>\nOCR this image: "
TEMPLATES = {"thinking": VIDEO_R1_OCR_TEMPLATE, "plain": PLAIN_OCR_TEMPLATE}
DEFAULT_QUESTION = "What is the text in the image?"


@dataclass
class OCROptions:
    variant: Literal["thinking", "plain"] = "thinking"
    prompt_template: str = ""  # "" = the variant's template; placeholder {Question}
    question: str = DEFAULT_QUESTION  # for records without `problem`
    target_think: str = "The image reads: {text}"  # reasoning text of the SFT target


class OCR(TextAnswerTask):
    name = "ocr"
    description = "OCR (image + text, Video-R1 OCR records): WER reward (Video-R1) and 1 - normalized edit distance"
    data_source = "records with an image and its text, or Video-R1's OCR records (docs/tasks.md)"
    accuracy_metric = "exact_match"
    headline = ("edit_distance_score", "wer", "exact_match")
    Options = OCROptions
    default_rewards = {"format": 1.0, "wer": 1.0}
    data_suffix = ".json"
    templates = TEMPLATES
    bare_variant = "plain"
    target_key = "text"

    # -- data -----------------------------------------------------------------------------
    def build_sample(self, record: dict[str, Any], ctx: RecordContext) -> Sample:
        for key, allowed in (("problem_type", "OCR"), ("data_type", "image")):
            if key in record and record[key] != allowed:
                raise ctx.error(f"key '{key}' is {record[key]!r}; the ocr task reads {key} {allowed!r} only"[:200])
        text = _text(record, ctx)
        problem = optional_text(record, ctx, "problem", "the question text") or self.options.question
        path, width, height = record_image(record, ctx, ("image", "path"))
        return Sample(
            id=ctx.record_id(record),
            task=self.name,
            problem=problem,
            solution=text,
            images=[path],
            frame=ctx.frame_spec.frame(width, height),
            source=ctx.source,
        )

    def synthesize(self, path: str | Path, size: int, seed: int) -> None:
        write_synthetic_ocr(path, size, seed)

    # -- scoring --------------------------------------------------------------------------
    def reward_functions(self) -> dict[str, RewardFn]:
        return {
            "format": self._format_reward,
            "wer": lambda completions, samples: [
                wer_score(self._read(c), s.solution) for c, s in zip(completions, samples, strict=True)
            ],
            "edit_distance": lambda completions, samples: [
                edit_distance_score(self._read(c), s.solution) for c, s in zip(completions, samples, strict=True)
            ],
        }

    def _read(self, completion: str) -> str:
        """The transcription the rewards compare: Video-R1's answer, or the plain completion."""
        return completion if self.bare else video_r1_answer(completion)

    def predict(self, completion: str, sample: Sample) -> str | None:
        return completion if self.bare else answer_text(completion)  # None when there is no <answer>

    def metrics(self, samples: Sequence[Sample], completions: Sequence[str]) -> dict[str, float]:
        n = len(samples)
        if n == 0:
            return {}
        scores, wers, rewards, exact, formatted = 0.0, 0.0, 0.0, 0, 0.0
        for completion, sample in zip(completions, samples, strict=True):
            text = self._read(completion)
            scores += edit_distance_score(text, sample.solution)
            wers += word_error_rate(sample.solution, text)
            rewards += wer_score(text, sample.solution)
            exact += text == sample.solution
            formatted += self._format(completion)
        return {
            "edit_distance_score": scores / n,
            "ned": 1.0 - scores / n,
            "wer_score": rewards / n,
            "wer": wers / n,
            "exact_match": exact / n,
            "format_rate": formatted / n,
        }


def _text(record: dict[str, Any], ctx: RecordContext) -> str:
    """The ground-truth text from `text`, Video-R1's `solution`, or the gpt turn of `conversations`."""
    if "text" in record:
        return ctx.get(record, "text", str, "the text in the image")
    if "solution" in record:
        value = ctx.get(record, "solution", str, "the text, optionally in <answer></answer>")
        inner = answer_text(value)
        return inner if inner is not None else value.strip()
    if "conversations" in record:
        turns = ctx.get(record, "conversations", list, "a list of turns")
        answers = [t.get("value") for t in turns if isinstance(t, dict) and t.get("from") == "gpt"]
        if len(answers) != 1 or not isinstance(answers[0], str):
            raise ctx.error("key 'conversations' must hold exactly one 'gpt' turn with a string 'value'")
        return answers[0]
    raise ctx.error("missing the text: expected 'text', 'solution' (Video-R1) or 'conversations'")
