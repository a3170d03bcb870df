"""MMMU's validation set as lmms-eval evaluates it (commit 75571cf), and MMMU-Pro's standard
and vision sets (`mmmu_pro_standard`, `mmmu_pro_vision`: MMMUPro below): `mmmu_val` and
`mmmu_val_qwen` (lmms_eval/tasks/mmmu/{utils.py, mmmu_val.yaml, mmmu_val_qwen.yaml},
_task_utils/mmmu_mcq_utils.py; their scoring copied from MMMU's eval_utils.py) on
lmms-lab-encoder/MMMU @ validation (formerly lmms-lab/MMMU: id, question, options (a Python
list written as a string), image_1 ... image_7, answer, question_type, subfield).

- Prompt (`mmmu_val`): a multiple-choice question, a newline, "A. option" lines, a blank line
  and "Answer with the option's letter from the given choices directly."; an open one, a blank
  line and "Answer the question using a single word or phrase." (`mmmu_val_qwen`: "Question: "
  + the question + "\\nOptions:\\n" + the options + "\\n" + "Answer with the option letter only."
  or, open, "Please answer the question directly."). `--model qwen3_vl` runs `mmmu_val` with
  that format too, its open questions ending "Please select the correct answer from the options
  above." (mmmu_val.yaml's qwen3_vl kwargs: `model_kwargs`). The images are those the `<image
  N>` markers name (in the question and the options), in image_N order: lmms-eval's chat classes
  (`mmmu_doc_to_messages`) put each where the markers stand (the text split at them, each piece
  stripped); its simple classes, and the Qwen3-VL format, put them first and keep the markers
  in the text. 128 new tokens.
- A multiple-choice response is read by MMMU's parse_multi_choice_response: "(B)", then "B ",
  then "B." (on the response with ,.!?;:' stripped off its ends and a space either side), then,
  in a response of more than five words, an option's text; of several, the one whose mark
  comes last; of none, a random letter. It must equal the answer.
- An open response: MMMU's parse_open_response, its candidates (the tail after "so ", "is ",
  "therefore " ... of each sentence, and every number in them, normalized: numbers rounded to
  2 places, text lowercased) against the answer normalized alike.
- `mmmu_acc`: the accuracy, as the mean of the subjects' accuracies weighted by their sizes,
  rounded to 5 places (the subject is the id's middle: validation_Art_Theory_12).

Deviations, each named:
- The random letter: lmms-eval draws it from the process's global `random` (seeded by its
  --seed, then consumed in thread-pool order), so a rerun can differ; vlrl draws it from a
  generator seeded with the question's id, so a rerun gives the same number.
- `task.options.open_answers`: `lmms_eval` (default) scores as lmms-eval 75571cf does: it keeps
  only the first (in set order) of the parsed candidates, as a string, and MMMU's eval_open then
  checks the answer against each of its characters, so an open question is never right unless
  its answer is empty. `mmmu` scores every candidate, as MMMU's own eval_utils.py does.
- A row lmms-eval would stop on (options that do not read as a list of strings, a
  multiple-choice question without options, a marker whose image is missing, an id without a
  subject) is skipped and reported.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import pyarrow as pa
from PIL import Image

from rewards.text import compile_pattern, findall, python_literal, search
from tasks.benchmarks import LMMS_EVAL, lettered
from tasks.benchmarks.counting import dot_scenes
from tasks.records import record_image, row_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.data.tables import IMAGE_TYPE, Column, image_cell
from vlrl.tasking.benchmark import Benchmark, variants

MAX_OPTIONS_CHARS = 100_000  # options longer than this are refused before parsing
IMAGE_KEYS = tuple(f"image_{i}" for i in range(1, 8))
IMAGE_MARKER = compile_pattern(r"<image \d+>")
SUBJECT = compile_pattern(r"^[^_]*_(.+?)_\d+$")
# extract_numbers: with commas, scientific, simple (in that order, all of each)
NUMBER_PATTERNS = (
    compile_pattern(r"-?(?:(?<=\w)(?!\w)|(?<!\w)(?=\w))\d{1,3}(?:,\d{3})+(?:(?<=\w)(?!\w)|(?<!\w)(?=\w))"),
    compile_pattern(r"-?\d+(?:\.\d+)?[eE][+-]?\d+"),
    compile_pattern(r"-?(?:\d+\.\d+|\.\d+|\d+(?:(?<=\w)(?!\w)|(?<!\w)(?=\w)))(?![eE][+-]?\d+)(?![,\d])"),
)
SENTENCES = compile_pattern(r"\.\s(?=[A-Z])|\n")
KEY_INDICATORS = ("could be ", "so ", "is ", "thus ", "therefore ", "final ", "answer ", "result ")
SCHEMA = pa.schema(
    [("id", pa.string()), ("question", pa.string()), ("options", pa.string()), ("explanation", pa.string()),
     *[(key, IMAGE_TYPE) for key in IMAGE_KEYS], ("img_type", pa.string()), ("answer", pa.string()),
     ("topic_difficulty", pa.string()), ("question_type", pa.string()), ("subfield", pa.string())]
)  # fmt: skip

PRO_SCHEMA = pa.schema(
    [("id", pa.string()), ("question", pa.string()), ("options", pa.string()), ("explanation", pa.string()),
     *[(key, IMAGE_TYPE) for key in IMAGE_KEYS], ("img_type", pa.string()), ("answer", pa.string()),
     ("topic_difficulty", pa.string()), ("subject", pa.string())]
)  # fmt: skip

VISION_SCHEMA = pa.schema(
    [("id", pa.string()), ("image", IMAGE_TYPE), ("options", pa.string()), ("answer", pa.string()),
     ("subject", pa.string())]
)  # fmt: skip


@dataclass
class MMMUOptions:
    open_answers: Literal["lmms_eval", "mmmu"] = "lmms_eval"  # open questions as lmms-eval scores them, or MMMU


# -- reading a row ------------------------------------------------------------------------------------
def literal_options(text: str) -> list[str]:
    """The options column (a Python list literal, as the hub stores it and lmms-eval reads it with
    ast.literal_eval: rewards.text.python_literal, which runs nothing); ValueError unless it is a
    list of strings."""
    if len(text) > MAX_OPTIONS_CHARS:
        raise ValueError(f"options is {len(text)} characters long (at most {MAX_OPTIONS_CHARS})")
    try:
        options = python_literal(text)
    except ValueError as err:
        raise ValueError(f"options {text[:80]!r} is not a Python list literal: {err}") from None
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        raise ValueError(f"options must be a list of strings, got {text[:80]!r}")
    return options


def construct_prompt(question: str, options: list[str], multiple_choice: bool, mc_prompt: str, open_prompt: str) -> str:
    if multiple_choice:
        return f"{question}\n{lettered(options)}\n\n{mc_prompt}"
    return f"{question}\n\n{open_prompt}"


def interleaved_text(prompt: str) -> str:
    """replace_images_tokens: `<image 1>` ... `<image 7>` made "<image>"."""
    for i in range(1, 8):
        prompt = prompt.replace(f"<image {i}>", "<image>")
    return prompt


def image_keys(question: str, options: list[str], multiple_choice: bool) -> list[str]:
    """mmmu_doc_to_visual: the image_N columns the `<image N>` markers of the default prompt
    name, each once, in sorted order."""
    markers = findall(IMAGE_MARKER, construct_prompt(question, options, multiple_choice, "", ""))
    return sorted({marker.strip("<>").replace(" ", "_") for marker in markers})


def subject_of(doc_id: str) -> str:
    """extract_subset_name."""
    match = search(SUBJECT, doc_id)
    if not match:
        raise ValueError(f"id {doc_id!r} names no subject (expected e.g. validation_Art_Theory_12)")
    return match.group(1)


# -- reading a response (MMMU's eval_utils.py) --------------------------------------------------------
def parse_multi_choice(
    response: str,
    choices: list[str],
    index2ans: dict[str, str],
    rng: random.Random,
    bracketed: tuple[str, ...] = ("({})",),
    plain: tuple[str, ...] = ("{} ", "{}."),
) -> str:
    """parse_mmmu_multi_choice_response: the letters written as one of `bracketed`, else as the
    first of `plain` any letter is written as, else (over five words) the options whose text it
    holds; of several the last written ("(X)", or " X "), of none a random one. VMCBench's copy
    reads "X. " as bracketed and " X " alone as plain."""
    for char in ",.!?;:'":
        response = response.strip(char)
    response = f" {response} "
    by_text = False
    candidates = [c for c in choices if any(mark.format(c) in response for mark in bracketed)]
    with_brackets = bool(candidates)
    for mark in plain:
        candidates = candidates or [c for c in choices if mark.format(c) in response]
    if not candidates and len(response.split()) > 5:
        candidates = [index for index, answer in index2ans.items() if answer.lower() in response.lower()]
        by_text = bool(candidates)
    if not candidates:
        return rng.choice(choices)
    if len(candidates) == 1:
        return candidates[0]
    if by_text:
        starts = [response.lower().rfind(index2ans[c].lower()) for c in candidates]
    else:
        starts = [response.rfind(f"({c})" if with_brackets else f" {c} ") for c in candidates]
    return candidates[starts.index(max(starts))]  # np.argmax: the first of ties


def extract_numbers(text: str) -> list[str]:
    return [number for pattern in NUMBER_PATTERNS for number in findall(pattern, text)]


def normalize(text: str) -> list[str | float]:
    """normalize_str: a number (commas dropped) rounded to 2 places, else the text lowercased
    (a single character padded with a space either way, against trivial matches)."""
    text = text.strip()
    try:
        return [round(float(text.replace(",", "")), 2)]
    except ValueError:
        pass
    text = text.lower()
    return [" " + text, text + " "] if len(text) == 1 else [text]


def key_responses(response: str) -> list[str]:
    """get_key_subresponses: per sentence, the shortest tail after an indicator ("=" too in the
    last sentence)."""
    response = response.strip().strip(".").lower()
    sentences = SENTENCES.split(response)  # after lower(): only newlines split (MMMU's, kept)
    indicators = list(KEY_INDICATORS)
    found = []
    for index, sentence in enumerate(sentences):
        if index == len(sentences) - 1:
            indicators.append("=")
        shortest = None
        for indicator in indicators:
            if indicator in sentence:
                tail = sentence.split(indicator)[-1].strip()
                if not shortest or len(tail) < len(shortest):
                    shortest = tail
        if shortest and shortest.strip() not in (":", ",", ".", "!", "?", ";", "'"):
            found.append(shortest)
    return found or [response]


def parse_open_response(response: str) -> list[str | float]:
    """parse_open_response: the key responses and the numbers in them, normalized, each once
    (list(set(...)): in set order, as there)."""
    keys = key_responses(response)
    candidates = keys + [number for key in keys for number in extract_numbers(key)]
    return list({value for candidate in candidates for value in normalize(candidate)})


def eval_open(gold: str, predictions) -> bool:
    """eval_open: a text answer inside a text candidate, or a number among them. `predictions`
    is iterated as given: lmms-eval hands it one string, so its characters are the candidates."""
    answers = normalize(gold)
    for prediction in predictions:
        if isinstance(prediction, str):
            if any(isinstance(answer, str) and answer in prediction for answer in answers):
                return True
        elif prediction in answers:
            return True
    return False


def weighted_accuracy(items: list[dict[str, Any]]) -> float:
    """mmmu_aggregate_results' Overall: each subject's accuracy (in order of first appearance)
    weighted by its size, rounded to 5 places."""
    by_subject: dict[str, list[bool]] = {}
    for item in items:
        by_subject.setdefault(item["subdomain"], []).append(item["correct"])
    total, count = 0.0, 0
    for rights in by_subject.values():
        total += sum(rights) / len(rights) * len(rights)
        count += len(rights)
    return round(total / count if count else 0, 5)


class MMMU(Benchmark):
    """lmms_eval/tasks/mmmu/utils.py with mmmu_val.yaml's default kwargs."""

    Options = MMMUOptions
    reference = LMMS_EVAL
    columns = (Column("id", "string"), Column("question", "string"), Column("options", "string"),
               Column("answer", "string"), Column("question_type", "string"),
               *[Column(key, "image", required=False) for key in IMAGE_KEYS])  # fmt: skip
    schema = SCHEMA
    max_new_tokens = 128
    mc_prompt: ClassVar[str] = "Answer with the option's letter from the given choices directly."
    open_prompt: ClassVar[str] = "Answer the question using a single word or phrase."
    qwen3_vl_format: ClassVar[bool] = False
    model_kwargs = {"qwen3_vl": {"qwen3_vl_format": True, "mc_prompt": "Answer with the option letter only.",
                                 "open_prompt": "Please select the correct answer from the options above."}}  # fmt: skip

    def prompt(self, question: str, options: list[str], multiple_choice: bool) -> str:
        if not self.qwen3_vl_format:
            return construct_prompt(question, options, multiple_choice, self.mc_prompt, self.open_prompt)
        # mmmu_doc_to_text_qwen3vl: the options (none for an open question) and the tail
        tail = self.mc_prompt if multiple_choice else self.open_prompt
        return f"Question: {question}\nOptions:\n{lettered(options)}\n{tail}"

    def multiple_choice(self, record: dict[str, Any], ctx: RecordContext) -> bool:
        return ctx.get(record, "question_type", str, "multiple-choice or open") == "multiple-choice"

    def subject(self, record: dict[str, Any], ctx: RecordContext, doc_id: str) -> str:
        """The subject the accuracy is weighted by (MMMU's: the id's middle, extract_subset_name)."""
        try:
            return subject_of(doc_id)
        except ValueError as err:
            raise ctx.error(str(err)) from err

    def read_options(self, record: dict[str, Any], ctx: RecordContext) -> list[str]:
        """The options column, read as lmms-eval reads it (`literal_options`); what it refuses names the row."""
        try:
            return literal_options(ctx.get(record, "options", str, "a list of options"))
        except ValueError as err:
            raise ctx.error(str(err)) from err

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        doc_id = ctx.get(record, "id", str, "the question id")
        question = ctx.get(record, "question", str, "the question")
        multiple_choice = self.multiple_choice(record, ctx)
        options, subject = self.read_options(record, ctx), self.subject(record, ctx, doc_id)
        if multiple_choice and not options:  # MMMU's random letter would be drawn from no letters
            raise ctx.error("a multiple-choice question has no options")
        images = []
        for key in image_keys(question, options, multiple_choice):
            if record.get(key) is None:
                raise ctx.error(f"the question shows <{key.replace('_', ' ')}> but {key} is empty")
            images.append(record_image(record, ctx, (key,)))
        truth = {"id": doc_id, "answer": ctx.get(record, "answer", str, "the answer"), "subdomain": subject,
                 "multiple_choice": multiple_choice, "options": options}  # fmt: skip
        # images: none where the prompt names none (text only, as lmms-eval asks it)
        return row_sample(self.name, ctx, self.prompt(question, options, multiple_choice), truth, images)

    def messages(self, sample: Sample) -> list[dict[str, Any]]:
        """A chat class renders mmmu_doc_to_messages: the prompt's `<image N>` markers made
        "<image>" (replace_images_tokens), the text split there, each piece stripped and, where
        not empty, followed by the next image (images in name order, not the markers'), and the
        text after the last marker always last; a piece past the images (a marker named twice)
        is dropped, as there. The Qwen3-VL format and the simple classes: images, then text."""
        messages = super().messages(sample)
        if not self.model_class.chat or self.qwen3_vl_format:
            return messages
        pieces = interleaved_text(sample.problem).split("<image>")
        content: list[dict[str, Any]] = []
        for i in range(len(sample.images)):
            if i < len(pieces) - 1 and pieces[i].strip():
                content.append({"type": "text", "text": pieces[i].strip()})
            content.append({"type": "image"})
        content.append({"type": "text", "text": pieces[-1].strip()})
        return [*messages[:-1], {"role": "user", "content": content}]

    def parsed(self, completion: str, truth: dict[str, Any]) -> Any:
        """mmmu_process_results' parsed_pred: a letter, or (open) what the scoring option keeps."""
        if truth["multiple_choice"]:
            letters = [chr(ord("A") + i) for i in range(len(truth["options"]))]
            rng = random.Random(truth["id"])
            return parse_multi_choice(completion, letters, dict(zip(letters, truth["options"], strict=True)), rng)
        candidates = parse_open_response(completion)
        if self.options.open_answers == "mmmu":
            return candidates
        return str(candidates[0]) if candidates else ""

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        truth = sample.solution
        pred = self.parsed(completion, truth)
        correct = pred == truth["answer"] if truth["multiple_choice"] else eval_open(truth["answer"], pred)
        logged = pred if isinstance(pred, str) else [str(p) for p in pred]
        item = {"id": truth["id"], "subdomain": truth["subdomain"], "answer": truth["answer"],
                "parsed_pred": [logged], "correct": correct}  # fmt: skip
        return {"mmmu_acc": item, "submission": {truth["id"]: logged}}

    def aggregations(self):
        return {"mmmu_acc": weighted_accuracy}

    def describe(self, frame) -> dict[str, Any]:
        return {**super().describe(frame), "open_answers": self.options.open_answers}

    def synthetic_rows(self, size: int, seed: int):
        return (synthetic_row(*scene) for scene in dot_scenes(size, seed, fill=(140, 60, 160)))


def synthetic_row(image: Image.Image, count: int, index: int) -> dict[str, Any]:
    """A question in MMMU's schema: counting, multiple choice (one in three with a second image
    in an option, every fourth open), subjects in turn."""
    subject = ("Art_Theory", "Math", "Clinical_Medicine")[index % 3]
    row = {"id": f"validation_{subject}_{index + 1}", "explanation": "", "img_type": "['Diagrams']",
           "topic_difficulty": "Easy", "subfield": "Counting", "image_1": image_cell(image, f"{index}.png"),
           **dict.fromkeys(IMAGE_KEYS[1:])}  # fmt: skip
    if index % 4 == 3:
        return row | {"question": "<image 1> How many dots are there?", "options": "[]", "answer": str(count),
                      "question_type": "open"}  # fmt: skip
    options = [str(count - 1), str(count), str(count + 1), "the count in <image 2>" if index % 3 == 1 else "none"]
    if index % 3 == 1:
        row["image_2"] = image_cell(image.transpose(Image.Transpose.FLIP_LEFT_RIGHT), f"{index}-2.png")
    return row | {"question": "How many dots does <image 1> show?", "options": repr(options), "answer": "B",
                  "question_type": "multiple-choice"}  # fmt: skip


class MMMUPro(MMMU):
    """lmms_eval/tasks/mmmu_pro/utils.py with mmmu_pro_standard.yaml's default kwargs: every
    question multiple choice (ten options), the prompt's tail "Answer with the option letter from
    the given choices directly." (`--model qwen3_vl`: mmmu_val's Qwen3-VL format, "Answer with the
    option letter only."), the `<image N>` markers kept in the text and the images before it in
    every class (the task has no doc_to_messages), the accuracy weighted by the row's `subject`,
    256 new tokens. The reading, the random letter (seeded by the id here) and `mmmu_acc` are
    MMMU's."""

    columns = (Column("id", "string"), Column("question", "string"), Column("options", "string"),
               Column("answer", "string"), Column("subject", "string"),
               *[Column(key, "image", required=False) for key in IMAGE_KEYS])  # fmt: skip
    schema = PRO_SCHEMA
    max_new_tokens = 256
    mc_prompt = "Answer with the option letter from the given choices directly."
    model_kwargs = {"qwen3_vl": {"qwen3_vl_format": True, "mc_prompt": "Answer with the option letter only."}}

    def multiple_choice(self, record: dict[str, Any], ctx: RecordContext) -> bool:
        return True

    def subject(self, record: dict[str, Any], ctx: RecordContext, doc_id: str) -> str:
        return ctx.get(record, "subject", str, "the question's subject")

    def messages(self, sample: Sample) -> list[dict[str, Any]]:
        return Benchmark.messages(self, sample)

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        """mmmu_pro_process_results: `mmmu_acc` only."""
        return {"mmmu_acc": super().process(completion, sample)["mmmu_acc"]}

    def synthetic_rows(self, size: int, seed: int):
        return (pro_row(*scene) for scene in dot_scenes(size, seed, fill=(60, 140, 160)))


class MMMUProVision(MMMUPro):
    """mmmu_pro_vision.yaml: the question and its options shown only in the screenshot `image`;
    the prompt is the post prompt alone ("Answer with the option letter from the given choices
    directly."; `--model qwen3_vl`: "Question: analyze the image and answer the associated
    question.\nOptions:\n" + the options column's lines + "\nAnswer with the option letter
    only."); the response is not parsed: right only when, stripped, it is the answer's letter
    itself ("B." is wrong, kept)."""

    columns = (Column("id", "string"), Column("image", "image"), Column("options", "string"),
               Column("answer", "string"), Column("subject", "string"))  # fmt: skip
    schema = VISION_SCHEMA
    vision_prompt: ClassVar[str] = ""  # the Qwen3-VL format's opening, where there is no question text
    model_kwargs = {"qwen3_vl": {"qwen3_vl_format": True, "mc_prompt": "Answer with the option letter only.",
                                 "vision_prompt": "Question: analyze the image and answer the associated question."}}  # fmt: skip

    def build_samples(self, record: dict[str, Any], ctx: RecordContext) -> list[Sample]:
        doc_id = ctx.get(record, "id", str, "the question id")
        options = self.read_options(record, ctx)
        prompt = self.mc_prompt
        if self.qwen3_vl_format:  # mmmu_doc_to_text_qwen3vl without a question
            prompt = f"{self.vision_prompt}\nOptions:\n{lettered(options)}\n{self.mc_prompt}"
        truth = {"id": doc_id, "answer": ctx.get(record, "answer", str, "the answer"),
                 "subdomain": self.subject(record, ctx, doc_id), "multiple_choice": True, "options": options}  # fmt: skip
        return row_sample(self.name, ctx, prompt, truth, [record_image(record, ctx)])

    def parsed(self, completion: str, truth: dict[str, Any]) -> Any:
        """mmmu_pro_process_results without a question: the response itself."""
        return completion

    def synthetic_rows(self, size: int, seed: int):
        return (vision_row(row) for row in super().synthetic_rows(size, seed))


def vision_row(row: dict[str, Any]) -> dict[str, Any]:
    """A standard row as the vision set holds it: its first image stands for the screenshot."""
    return {"id": row["id"], "image": row["image_1"], "options": row["options"], "answer": row["answer"],
            "subject": row["subject"]}  # fmt: skip


def pro_row(image: Image.Image, count: int, index: int) -> dict[str, Any]:
    """MMMU's synthetic multiple-choice rows in MMMU-Pro's schema: ten options, the subject a
    column (the id does not name it here, so only the column can give it), the right option's
    letter in turn."""
    row = synthetic_row(image, count, index - index % 4 if index % 4 == 3 else index)  # no open questions
    right = index % 10
    options = [str(count + k - right) for k in range(9)] + ["the count in <image 2>" if row["image_2"] else "none"]
    subject = row["id"].split("_", 1)[1].rsplit("_", 1)[0]
    return {"id": f"test_{index + 1}", "question": row["question"], "options": repr(options),
            "explanation": "", **{key: row[key] for key in IMAGE_KEYS}, "img_type": row["img_type"],
            "answer": chr(ord("A") + right), "topic_difficulty": "Easy", "subject": subject}  # fmt: skip


BENCHMARKS = variants(MMMU, [{"name": "mmmu_val", "split": "validation", "dataset": "lmms-lab-encoder/MMMU",
                              "description": "MMMU validation, lmms-eval's mmmu_val: MMMU's answer parsing, mmmu_acc"}])  # fmt: skip
BENCHMARKS |= variants(MMMU, [{"name": "mmmu_val_qwen", "split": "validation", "dataset": "lmms-lab-encoder/MMMU",
                               "qwen3_vl_format": True, "mc_prompt": "Answer with the option letter only.",
                               "open_prompt": "Please answer the question directly.", "model_kwargs": {},
                               "description": "MMMU validation with lmms-eval's mmmu_val_qwen prompt (Qwen3-VL's report)"}])  # fmt: skip
BENCHMARKS |= variants(MMMUProVision, [{"name": "mmmu_pro_vision", "split": "test", "dataset": "MMMU/MMMU_Pro (vision)",
                                       "description": "MMMU-Pro vision (the question in the image), lmms-eval's mmmu_pro_vision: the raw response against the letter"}])  # fmt: skip
BENCHMARKS |= variants(MMMUPro, [{"name": "mmmu_pro_standard", "split": "test", "dataset": "MMMU/MMMU_Pro (standard (10 options))",
                                 "description": "MMMU-Pro standard (ten options), lmms-eval's mmmu_pro_standard: MMMU's parsing, mmmu_acc"}])  # fmt: skip
