"""VQAv2, OK-VQA and VizWiz-VQA validation as lmms-eval evaluates them (commit 75571cf):
`vqav2_val` (lmms_eval/tasks/vqav2/utils.py) on lmms-lab-encoder/VQAv2 @ validation,
`ok_vqa_val2014` (ok_vqa/utils.py) on lmms-lab-encoder/OK-VQA @ val2014 and `vizwiz_vqa_val`
(vizwiz_vqa/utils.py) on lmms-lab-encoder/VizWiz-VQA @ val: TextVQA's VQA accuracy
(tasks/benchmarks/textvqa.py), each answer's leave-one-out agreement capped at 3, the mean
`exact_match`; lmms-eval's `submission` values (a file its aggregation writes) are not reported.

- OK-VQA and VizWiz: TextVQA's scoring (EvalAIAnswerProcessor on the response and on each of
  the ten answers, a list of strings); a question without answers scores 0 (TextVQA's code
  fails there). Prompt: the question (VizWiz's str.capitalize'd, as TextVQA's; OK-VQA's as
  written) + "\\nWhen the provided information is insufficient, respond with
  'Unanswerable'.\\nAnswer the question using a single word or phrase."; answers cut at
  "ASSISTANT:" (the yaml's until); the model class's length (the yamls set none).
- VQAv2: the answers are records {answer, answer_confidence, answer_id}. The response and
  each answer have newlines and tabs made spaces, are stripped, then go through EvalAI's
  punctuation and digit-article steps only (not the processor's first step: "?" and "," follow
  the punctuation rules, "'s" is not split off). An answer's comparison set leaves out every
  answer record equal to it (all three fields: with distinct answer_ids, the other nine). No
  answer records (None) scores 0. Prompt: the question as written + "\\nAnswer the question using
  a single word or phrase."; 16 new tokens; lmms-eval's default until.
"""

from __future__ import annotations

from statistics import mean as statistics_mean
from typing import Any, ClassVar

import pyarrow as pa

from tasks.benchmarks.textvqa import TextVQA, process_digit_article, process_punctuation, vqa_accuracy
from tasks.benchmarks.textvqa import synthetic_row as sign_row
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column
from vlrl.tasking.benchmark import variants

UNANSWERABLE_PROMPT = (
    "\nWhen the provided information is insufficient, respond with 'Unanswerable'."
    "\nAnswer the question using a single word or phrase."
)
VQAV2_POST_PROMPT = "\nAnswer the question using a single word or phrase."
ANSWER = pa.struct([("answer", pa.string()), ("answer_confidence", pa.string()), ("answer_id", pa.int64())])
VQAV2_SCHEMA = pa.schema(
    [("question_type", pa.string()), ("multiple_choice_answer", pa.string()), ("answers", pa.list_(ANSWER)),
     ("image_id", pa.int64()), ("answer_type", pa.string()), ("question_id", pa.int64()), ("question", pa.string()),
     ("image", IMAGE_TYPE)]
)  # fmt: skip


def vqav2_text(text: str) -> str:
    """vqav2_process_results' cleaning of the response and of each answer."""
    text = text.replace("\n", " ").replace("\t", " ").strip()
    return process_digit_article(process_punctuation(text))


def vqav2_accuracy(response: str, answers: list[dict[str, Any]] | None) -> float:
    """vqav2_process_results' accuracy: leave out every record equal to the answer, count the
    others that equal the response, capped at 3; the mean over the answers (0 without any)."""
    if answers is None:
        return 0.0
    predicted = vqav2_text(response)
    cleaned = [{**answer, "answer": vqav2_text(answer["answer"])} for answer in answers]
    scores = []
    for answer in cleaned:
        others = [item for item in cleaned if item != answer]
        scores.append(min(1, float(sum(1 for item in others if item["answer"] == predicted)) / 3))
    return statistics_mean(scores)


class UnanswerableVQA(TextVQA):
    """ok_vqa/utils.py and vizwiz_vqa/utils.py with the default kwargs: TextVQA's scoring."""

    columns = (Column("question", "string"), Column("answers", "list<string>", required=False),
               Column("image", "image"))  # fmt: skip
    capitalize: ClassVar[bool] = False  # VizWiz's doc_to_text capitalizes the question, OK-VQA's does not

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        answers = record.get("answers") or []
        if not all(isinstance(a, str) for a in answers):
            raise ctx.error(f"answers must be a list of strings, got {answers!r}"[:200])
        question = ctx.get(record, "question", str, "the question")
        prompt = (question.capitalize() if self.capitalize else question) + UNANSWERABLE_PROMPT
        return row_sample(self.name, ctx, prompt, answers, [record_image(record, ctx)])

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        return {"exact_match": vqa_accuracy(completion, sample.solution) if sample.solution else 0.0}

    def synthetic_rows(self, size: int, seed: int):
        """TextVQA's signs; one row in five without answers."""
        rows = (sign_row(index) for index in range(size))
        return ({**row, "answers": [] if index % 5 == 4 else row["answers"]} for index, row in enumerate(rows))


class VQAv2(TextVQA):
    """vqav2/utils.py (vqav2_process_results_val) with the default kwargs."""

    columns = (Column("question", "string"), Column("answers", "list<struct>", required=False),
               Column("image", "image"))  # fmt: skip
    schema = VQAV2_SCHEMA
    until = ()
    max_new_tokens = 16

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        answers = record.get("answers")
        if answers is not None and not all(isinstance(a, dict) and isinstance(a.get("answer"), str) for a in answers):
            raise ctx.error(f"answers must be a list of records with an 'answer' string, got {answers!r}"[:200])
        if answers == []:
            raise ctx.error("answers is empty: lmms-eval's vqav2 takes the mean of no scores and fails")
        prompt = ctx.get(record, "question", str, "the question") + VQAV2_POST_PROMPT
        return row_sample(self.name, ctx, prompt, answers, [record_image(record, ctx)])

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        return {"exact_match": vqav2_accuracy(completion, sample.solution)}

    def synthetic_rows(self, size: int, seed: int):
        return (vqav2_row(index) for index in range(size))


def vqav2_row(index: int) -> dict[str, Any]:
    """TextVQA's sign rows in VQAv2's schema: the answers as records with ids, two of them
    identical records one row in three (the comparison set then loses both); one row in seven
    without answer records."""
    row = sign_row(index)
    answers = [{"answer": a, "answer_confidence": "yes", "answer_id": k + 1} for k, a in enumerate(row["answers"])]
    if index % 3 == 1:
        answers[1] = dict(answers[0])
    return {"question_type": "what", "multiple_choice_answer": row["answers"][0],
            "answers": None if index % 7 == 6 else answers, "image_id": index, "answer_type": "other",
            "question_id": index, "question": "What does the sign say?", "image": row["image"]}  # fmt: skip


BENCHMARKS = variants(VQAv2, [
    {"name": "vqav2_val", "split": "validation", "dataset": "lmms-lab-encoder/VQAv2",
     "description": "VQAv2 validation, lmms-eval's vqav2_val: VQA accuracy"}])  # fmt: skip
BENCHMARKS |= variants(UnanswerableVQA, [
    {"name": "ok_vqa_val2014", "split": "val2014", "dataset": "lmms-lab-encoder/OK-VQA",
     "description": "OK-VQA val2014, lmms-eval's ok_vqa_val2014: EvalAI-processed VQA accuracy"},
    {"name": "vizwiz_vqa_val", "split": "val", "dataset": "lmms-lab-encoder/VizWiz-VQA", "capitalize": True,
     "description": "VizWiz-VQA val, lmms-eval's vizwiz_vqa_val: EvalAI-processed VQA accuracy"},
])  # fmt: skip
