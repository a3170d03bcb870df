"""TextVQA validation as lmms-eval evaluates it (commit 75571cf): `textvqa_val`
(lmms_eval/tasks/textvqa/utils.py, _task_utils/vqa_eval_metric.py: MMF's copy of EvalAI's
answer processing) on lmms-lab-encoder/textvqa @ validation (question_id, question, image,
answers: ten annotators').

- Prompt: the question with str.capitalize (its first letter upper-cased, every other one
  lower-cased: "What does the LED say?" asks "What does the led say?", kept) + "\\nAnswer the
  question using a single word or phrase."; each answer cut at "ASSISTANT:" (the yaml's until)
  where lmms-eval's simple model classes cut it (vlrl/tasking/lmms_eval_model.py). The yaml sets
  no length: the model class's (lmms-eval's Qwen2.5-VL chat class: 128).
- The response and each answer go through EvalAIAnswerProcessor: lowercased, "," and "?"
  deleted, "'s" split off; punctuation deleted (or made spaces, as EvalAI decides per mark);
  periods not before a digit deleted, at most 32 of them (the re.UNICODE flag passed as `count`
  there, kept); number words up to ten as digits; "a", "an", "the" dropped; contractions
  restored.
- VQA accuracy: for each answer, min(1, (how many of the other nine equal the response) / 3);
  the mean over the ten. `exact_match`, the mean. lmms-eval also reports `submission` (None:
  its aggregation writes a file); vlrl does not.
"""

from __future__ import annotations

from statistics import mean as statistics_mean
from typing import Any

import pyarrow as pa
from PIL import Image, ImageDraw

from rewards.text import compile_pattern, search
from tasks.benchmarks import LMMS_EVAL
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, mean, variants

POST_PROMPT = "\nAnswer the question using a single word or phrase."
SCHEMA = pa.schema(
    [("question_id", pa.string()), ("question", pa.string()), ("image", IMAGE_TYPE), ("answers", pa.list_(pa.string()))]
)

# -- EvalAIAnswerProcessor (vqa_eval_metric.py) --------------------------------------------------------
CONTRACTIONS = {
    "aint": "ain't", "arent": "aren't", "cant": "can't", "couldve": "could've", "couldnt": "couldn't",
    "couldn'tve": "couldn't've", "couldnt've": "couldn't've", "didnt": "didn't", "doesnt": "doesn't", "dont": "don't",
    "hadnt": "hadn't", "hadnt've": "hadn't've", "hadn'tve": "hadn't've", "hasnt": "hasn't", "havent": "haven't",
    "hed": "he'd", "hed've": "he'd've", "he'dve": "he'd've", "hes": "he's", "howd": "how'd", "howll": "how'll",
    "hows": "how's", "Id've": "I'd've", "I'dve": "I'd've", "Im": "I'm", "Ive": "I've", "isnt": "isn't", "itd": "it'd",
    "itd've": "it'd've", "it'dve": "it'd've", "itll": "it'll", "let's": "let's", "maam": "ma'am", "mightnt": "mightn't",
    "mightnt've": "mightn't've", "mightn'tve": "mightn't've", "mightve": "might've", "mustnt": "mustn't",
    "mustve": "must've", "neednt": "needn't", "notve": "not've", "oclock": "o'clock", "oughtnt": "oughtn't",
    "ow's'at": "'ow's'at", "'ows'at": "'ow's'at", "'ow'sat": "'ow's'at", "shant": "shan't", "shed've": "she'd've",
    "she'dve": "she'd've", "she's": "she's", "shouldve": "should've", "shouldnt": "shouldn't",
    "shouldnt've": "shouldn't've", "shouldn'tve": "shouldn't've", "somebody'd": "somebodyd",
    "somebodyd've": "somebody'd've", "somebody'dve": "somebody'd've", "somebodyll": "somebody'll",
    "somebodys": "somebody's", "someoned": "someone'd", "someoned've": "someone'd've", "someone'dve": "someone'd've",
    "someonell": "someone'll", "someones": "someone's", "somethingd": "something'd", "somethingd've": "something'd've",
    "something'dve": "something'd've", "somethingll": "something'll", "thats": "that's", "thered": "there'd",
    "thered've": "there'd've", "there'dve": "there'd've", "therere": "there're", "theres": "there's", "theyd": "they'd",
    "theyd've": "they'd've", "they'dve": "they'd've", "theyll": "they'll", "theyre": "they're", "theyve": "they've",
    "twas": "'twas", "wasnt": "wasn't", "wed've": "we'd've", "we'dve": "we'd've", "weve": "we've", "werent": "weren't",
    "whatll": "what'll", "whatre": "what're", "whats": "what's", "whatve": "what've", "whens": "when's",
    "whered": "where'd", "wheres": "where's", "whereve": "where've", "whod": "who'd", "whod've": "who'd've",
    "who'dve": "who'd've", "wholl": "who'll", "whos": "who's", "whove": "who've", "whyll": "why'll", "whyre": "why're",
    "whys": "why's", "wont": "won't", "wouldve": "would've", "wouldnt": "wouldn't", "wouldnt've": "wouldn't've",
    "wouldn'tve": "wouldn't've", "yall": "y'all", "yall'll": "y'all'll", "y'allll": "y'all'll", "yall'd've": "y'all'd've",
    "y'alld've": "y'all'd've", "y'all'dve": "y'all'd've", "youd": "you'd", "youd've": "you'd've", "you'dve": "you'd've",
    "youll": "you'll", "youre": "you're", "youve": "you've",
}  # fmt: skip
NUMBER_MAP = {"none": "0", "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6",
              "seven": "7", "eight": "8", "nine": "9", "ten": "10"}  # fmt: skip
ARTICLES = ("a", "an", "the")
PERIOD_STRIP = compile_pattern(r"(?!<=\d)(\.)(?!\d)")  # "(?!<=" is EvalAI's, not a look-behind (kept)
COMMA_STRIP = compile_pattern(r"(?<=\d)(\,)+(?=\d)")
PUNCTUATIONS = (
    ";",
    r"/",
    "[",
    "]",
    '"',
    "{",
    "}",
    "(",
    ")",
    "=",
    "+",
    "\\",
    "_",
    "-",
    ">",
    "<",
    "@",
    "`",
    ",",
    "?",
    "!",
)


def process_punctuation(text: str) -> str:
    out = text
    has_digit_comma = search(COMMA_STRIP, text) is not None
    for mark in PUNCTUATIONS:
        out = out.replace(mark, "" if (mark + " " in text or " " + mark in text) or has_digit_comma else " ")
    return PERIOD_STRIP.sub("", out, 32)  # EvalAI passes re.UNICODE (32) where sub takes its count


def process_digit_article(text: str) -> str:
    words = [NUMBER_MAP.get(word, word) for word in text.lower().split()]
    return " ".join(CONTRACTIONS.get(word, word) for word in words if word not in ARTICLES)


def evalai_answer(text: str) -> str:
    """EvalAIAnswerProcessor.__call__."""
    text = text.lower().replace(",", "").replace("?", "").replace("'s", " 's").strip()
    text = text.replace("\n", " ").replace("\t", " ").strip()
    return process_digit_article(process_punctuation(text))


def vqa_accuracy(response: str, answers: list[str]) -> float:
    """textvqa_process_results' accuracy: each answer's leave-one-out agreement, capped at 3."""
    predicted = evalai_answer(response)
    processed = [evalai_answer(a) for a in answers]
    scores = []
    for i in range(len(processed)):
        others = [a for j, a in enumerate(processed) if j != i]
        scores.append(min(1, float(sum(1 for a in others if a == predicted)) / 3))
    return statistics_mean(scores)


class TextVQA(Benchmark):
    """lmms_eval/tasks/textvqa with the default kwargs (no OCR tokens)."""

    reference = LMMS_EVAL
    columns = (Column("question", "string"), Column("answers", "list<string>"), Column("image", "image"))
    schema = SCHEMA
    until = ("ASSISTANT:",)

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        answers = record["answers"]
        if not isinstance(answers, list) or not answers or not all(isinstance(a, str) for a in answers):
            raise ctx.error(f"answers must be a non-empty list of strings, got {answers!r}"[:200])
        question = ctx.get(record, "question", str, "the question").capitalize() + POST_PROMPT
        return row_sample(self.name, ctx, question, answers, [record_image(record, ctx)])

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        return {"exact_match": vqa_accuracy(completion, sample.solution)}

    def aggregations(self):
        return {"exact_match": mean}

    def synthetic_rows(self, size: int, seed: int):
        return (synthetic_row(index) for index in range(size))


SIGNS = ("STOP", "Exit 12", "the Café", "three", "2,500", "No. 5", "don't walk")


def synthetic_row(index: int) -> dict[str, Any]:
    """A sign with its text, asked for it; ten answers that agree in part, as annotators do."""
    text = SIGNS[index % len(SIGNS)]
    image = Image.new("RGB", (160, 48), (250, 250, 240))
    ImageDraw.Draw(image).text((6, 16), text, fill=(0, 0, 0))
    answers = [text] * (index % 4 + 1) + [text.lower() + "."] * 2 + ["sign"] * (7 - index % 4)
    return {"question_id": str(index), "question": "what does the SIGN say?", "image": image_cell(image, f"{index}.png"),
            "answers": answers[:10]}  # fmt: skip


BENCHMARKS = variants(TextVQA, [{"name": "textvqa_val", "split": "validation", "dataset": "lmms-lab-encoder/textvqa",
                                 "description": "TextVQA validation, lmms-eval's textvqa_val: EvalAI-processed VQA accuracy"}])  # fmt: skip
