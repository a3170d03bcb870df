"""The reference scoring vlrl's benchmarks are tested against.

lmms-eval: its own code when the package is importable (`LmmsEvalPackage`), and always a
re-implementation of it (`Reimplementation`) written from lmms_eval/tasks/
{refcoco,refcoco+,refcocog}/utils_rec.py, refcoco_grounding/utils.py, countbench/utils.py,
countbenchqa/utils.py, pixmo_count/utils.py, ocrbench/{utils.py,reasoning/utils.py},
chartqa/{utils.py,reasoning/utils.py}, mmstar/{utils.py,reasoning/utils.py}, _task_utils/mcq_extract.py, mmmu/utils.py,
_task_utils/mmmu_mcq_utils.py, realworldqa/{utils.py,reasoning/utils.py}, pope/utils.py, ai2d/{utils.py,reasoning/utils.py}, mme/utils.py, cv_bench/utils.py, blink/utils.py, mmvp/utils.py, vstar_bench/{utils.py,reasoning/utils.py}, scienceqa/utils.py, seedbench/utils.py, seedbench_2_plus/utils.py, vqav2/utils.py, ok_vqa/utils.py, vizwiz_vqa/utils.py, mmbench/{en_utils.py,mmbench_evals.py}, mmmu_pro/utils.py, muirbench/utils.py, docvqa/, infovqa/ (api/metrics.py anls), textvqa/utils.py, _task_utils/vqa_eval_metric.py, api/metrics.py (exact_match), screenspot_v2/utils.py, screenspot_pro/utils.py, screenspot/utils_rec.py, naturalbench/utils.py, fsc147/utils.py, vlmsareblind/utils.py, vlms_are_biased/utils.py, vmcbench/utils.py, mirb/utils.py, multihopspatial/utils.py, simplevqa/utils.py, illusionvqa/utils.py, osworld_g/utils.py, groundingme/utils.py, visualwebbench/{prompts.py,utils.py},
vsibench/utils.py, geometry3k/utils.py, gqa/utils.py, mme_realworld/{utils.py,reasoning/utils.py}, hrbench/{utils.py,hrbench_evals.py}, embspatial/utils.py, zerobench/utils.py, VisualPuzzles/utils.py, mmsi_bench/utils.py, sat/utils.py, mathkangaroo/utils.py, mathvista/{utils.py,mathvista_evals.py,reasoning/utils.py},
mathverse/reasoning/utils.py, mathvision/reasoning/utils.py, dynamath/reasoning/utils.py, logicvista/reasoning/utils.py, wemath/{wemath_utils.py,reasoning/utils.py}, _task_utils/reasoning_utils.py and api/reasoning.py at EvolvingLMMs-Lab/lmms-eval commit
75571cfe0fa36ca5ec2e6aa2bb268f9d38295af3, with the prompts' keyword arguments of the tasks'
yaml files. PyPI lmms-eval 0.7.3 holds the same task utilities and reasoning strip (formatting
aside); its evaluator.py runs the same per-document scoring on a thread pool.

Both go through the steps of a default `lmms-eval` run, not the task functions alone:
- the docs are the hub's table as `datasets` reads it (`hub_docs`: its declared column types,
  float32 boxes included), and `process_docs` writes back through `datasets.map`, which keeps
  a column's type (the strict RefCOCO ground truth is float32-rounded there);
- each response goes through the task's filter ("none": take_first, the response itself),
  then the reasoning strip evaluator.py applies before `process_results` when the
  `--reasoning_tags` value resolves to tags (its CLI default, `CLI_REASONING_TAGS`; "none"
  turns it off);
- then `process_results` per document and the aggregation functions.

lmms-eval is not a dev dependency: it pins av<16 (vlrl's video tests need a newer PyAV) and
brings some seventy packages; its task utilities and api/reasoning.py import offline, so where
it is installed the package itself is the reference.

Video-R1: a re-implementation of src/eval_bench.py at tulerfeng/Video-R1 commit
59d65c347e44efa71be27abf9d89b4a2bb7d1c05 (its scoring functions live inside the script's
loop, so there is nothing to import); it scores the raw output.

Each lmms-eval reference takes the docs (`hub_docs`) and the raw responses, and returns the
prompts and the aggregated metrics.
"""

from __future__ import annotations

import ast
import copy
import functools
import json
import math
import random
import re
import statistics
import string
import tempfile
from collections import defaultdict
from decimal import Decimal, InvalidOperation
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import datasets
import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import torch
from datasets.table import InMemoryTable

from vlrl.data.tables import is_image_struct

datasets.disable_progress_bars()

# lmms_eval/__main__.py (75571cf lines 309-314, 0.7.3 lines 318-323): the --reasoning_tags
# default, a JSON string decoded at scoring time.
CLI_REASONING_TAGS = '[["<think>", "</think>"], ["<analysis>", "</analysis>"]]'

COUNTBENCH_KWARGS = {
    "pre_prompt": "Look at the image carefully and count the objects. Answer with just a number, without any additional text. ",
    "post_prompt": "",
}
SINGLE_NUMBER_KWARGS = {"pre_prompt": "", "post_prompt": "\nAnswer with a single number."}  # countbenchqa, pixmo_count
AGGREGATIONS = {
    "IoU": "iou",
    "ACC@0.1": "acc01",
    "ACC@0.3": "acc03",
    "ACC@0.5": "acc05",
    "ACC@0.7": "acc07",
    "ACC@0.9": "acc09",
    "Center_ACC": "center_acc",
}
REC_NAMES = ["IoU", "ACC@0.1", "ACC@0.3", "ACC@0.5", "ACC@0.7", "ACC@0.9", "Center_ACC"]
VSI_MCA = [
    "object_rel_direction_easy",
    "object_rel_direction_medium",
    "object_rel_direction_hard",
    "object_rel_distance",
    "route_planning",
    "obj_appearance_order",
]
VSI_NA = ["object_abs_distance", "object_counting", "object_size_estimation", "room_size_estimation"]
VSI_NAMES = {
    "vsibench_overall": "overall", "obj_appearance_order_accuracy": "obj_appearance_order_accuracy",
    "object_abs_distance_mra": "object_abs_distance_MRA:.5:.95:.05", "object_counting_mra": "object_counting_MRA:.5:.95:.05",
    "object_rel_distance_accuracy": "object_rel_distance_accuracy", "object_size_estimation_mra": "object_size_estimation_MRA:.5:.95:.05",
    "room_size_estimation_mra": "room_size_estimation_MRA:.5:.95:.05", "route_planning_accuracy": "route_planning_accuracy",
    "object_rel_direction_accuracy": "object_rel_direction_accuracy",
}  # fmt: skip


def hub_docs(path: Path, skip: tuple[int, ...] = ()) -> datasets.Dataset:
    """The table as `datasets` loads a hub dataset (in memory): the parquet's column types, an
    `Image` column (struct<bytes, path>, as the hub's features declare it) decoding into PIL
    images; rows in `skip` left out."""
    docs = datasets.Dataset(InMemoryTable(pq.read_table(path)))
    for name, feature in docs.features.items():
        if is_image_struct(docs.data.schema.field(name).type) and isinstance(feature, dict):
            docs = docs.cast_column(name, datasets.Image())
    return docs.select([i for i in range(len(docs)) if i not in skip]) if skip else docs


_REC_PREPROCESSED: dict[str, list[dict]] = {}  # Reimplementation.rec_preprocessed's, by table fingerprint


def ai2d_filter(resp, doc=None):
    """ai2d/utils.py MultiChoiceRegexFilter.apply (the "flexible-extract" filter of ai2d.yaml;
    muirbench/utils.py's is the same code); it reads no doc."""
    match = re.compile(r"^\s*([A-Z])\.").match(resp)
    return match.group(1) if match else resp


def sat_doc_filter(resp, doc):
    return sat_filter([[resp]], [doc])[0]


# a task's filter_list, of a response and its doc; the others' is "none" (take_first)
FILTERS = {"ai2d": ai2d_filter, "muirbench": ai2d_filter, "sat": sat_doc_filter,
           "illusionvqa_comprehension": ai2d_filter, "illusionvqa_soft_localization": ai2d_filter}  # fmt: skip
# A yaml's generation_kwargs.until (lmms-eval puts ["\n\n"] where a yaml names none: api/task.py).
UNTIL = {task: ["ASSISTANT:"] for task in ("textvqa_val", "refcoco_rec", "mmbench_en_dev_static", "ok_vqa_val2014", "vizwiz_vqa_val", "seedbench", "seedbench_lite", "seedbench_2_plus")}  # fmt: skip
UNTIL["mathvision_reason_testmini_reasoning"] = [
    "</s>",
    "Q:",
    "<|im_end|>",
]  # mathvision/reasoning/_default_template_yaml


def model_answer(ans, model, task):
    """What an lmms-eval model class returns for a decoded answer (the evaluator's input).
    "chat" (models/chat/qwen2_5_vl.py, qwen3_vl.py): the answer. "simple" (models/simple/
    qwen2_5_vl.py, qwen3_vl.py): cut at each until term but "\n\n" (`ans.split(term)[0]`).
    "simple_qwen2_vl" (models/simple/qwen2_vl.py, lines 450-454): at the first of every term,
    "\n\n" too, then stripped. A "_qwen3_5" suffix (Qwen3.5, enable_thinking): then
    `_strip_thinking`, the text after the first </think>."""
    until = UNTIL.get(task, ["\n\n"])
    if model.startswith("simple_qwen2_vl"):
        stop_pos = len(ans)
        for term in until:
            if term and term in ans:
                stop_pos = min(stop_pos, ans.index(term))
        ans = ans[:stop_pos].strip()
    elif model.startswith("simple"):
        until = [item for item in until if item != "\n\n"]
        for term in until:
            if len(term) > 0:
                ans = ans.split(term)[0]
    if model.endswith("_qwen3_5"):
        _, _, remaining = ans.partition("</think>")
        ans = remaining.strip()
    return ans


class _Harness:
    """evaluator.py's steps between the model's responses and `process_results`."""

    def harness(
        self, responses: list[str], reasoning_tags: str | None = CLI_REASONING_TAGS, task: str = "", docs=None
    ) -> list[str]:
        """The answers (as a chat class returns them: `model_answer` gives another class's),
        through the task's filter (FILTERS; else the ensemble "none", take_first: a task without
        filter_list keeps the first response), then, when
        `parse_reasoning_tags_config(cli_value=reasoning_tags)` gives tags, `strip_reasoning_tags`
        on each filtered str (75571cf evaluator.py lines 1181-1235; 0.7.3
        _process_document_results, lines 298-311)."""
        docs = [None] * len(responses) if docs is None else list(docs)
        responses = (
            [FILTERS[task](r, d) for r, d in zip(responses, docs, strict=True)] if task in FILTERS else list(responses)
        )
        tags = self.parse_reasoning_tags_config(reasoning_tags)
        if tags is None:
            return responses
        return [self.strip_reasoning_tags(r, tags) if isinstance(r, str) else r for r in responses]

    def scored(
        self, responses: list[str], reasoning_tags: str | None = CLI_REASONING_TAGS, task: str = "", docs=None
    ) -> list[str]:
        """What `process_results` of the task's yaml then sees: api/task.py Task.process_results
        strips each generate_until response (None as "") before calling it (75571cf lines
        1586-1590; 0.7.3 the same)."""
        return [r.strip() if r is not None else "" for r in self.harness(responses, reasoning_tags, task, docs)]


def extract_boxed_answer(s):
    """reasoning_utils.py extract_boxed_answer: the last box that closes (braces counted from each)."""
    results, pos = [], 0
    starts = []
    while (pos := s.find("\\boxed{", pos)) != -1:
        starts.append(pos)
        pos += 1
    for start in starts:
        count, pos = 0, start + len("\\boxed{") - 1
        while pos < len(s):
            if s[pos] == "{":
                count += 1
            elif s[pos] == "}":
                count -= 1
                if count == 0:
                    results.append(s[start + len("\\boxed{") : pos])
                    break
            pos += 1
    return results[-1] if results else ""


# -- ocrbench/utils.py and chartqa/utils.py, per document ------------------------------------------------
OCRBENCH_TYPES = [
    "Regular Text Recognition", "Irregular Text Recognition", "Artistic Text Recognition", "Handwriting Recognition",
    "Digit String Recognition", "Non-Semantic Text Recognition", "Scene Text-centric VQA", "Doc-oriented VQA",
    "Key Information Extraction", "Handwritten Mathematical Expression Recognition",
]  # fmt: skip
# _task_utils/reasoning_utils.py DEFAULT_REASONING_SYSTEM_PROMPT
DEFAULT_REASONING_SYSTEM_PROMPT = (
    "You are a helpful assistant. When user asks a question, your response must include two parts: "
    "first, reasoning process enclosed in <analysis>...</analysis> tags, then final answer enclosed in <answer>...</answer> tags."
    "Please provide a clear, concise response within <answer> </answer> tags that directly addresses to question."
)


def _fold_fullwidth_ascii(text):
    folded = []
    for char in text:
        codepoint = ord(char)
        if 0xFF01 <= codepoint <= 0xFF5E:
            folded.append(chr(codepoint - 0xFEE0))
        elif codepoint == 0x3000:
            folded.append(" ")
        else:
            folded.append(char)
    return "".join(folded)


def ocrbench_process_results(doc, results):
    pred = results[0].strip()
    gt_ans = doc["answer"]
    score = 0
    if doc["dataset"] == "HME100k":
        for a in gt_ans if isinstance(gt_ans, list) else [gt_ans]:
            if a.strip().replace("\n", " ").replace(" ", "") in pred.strip().replace("\n", " ").replace(" ", ""):
                score = 1
    else:
        for a in gt_ans if isinstance(gt_ans, list) else [gt_ans]:
            answer = _fold_fullwidth_ascii(a).lower().strip().replace("\n", " ")
            if answer in _fold_fullwidth_ascii(pred).lower().strip().replace("\n", " "):
                score = 1
    return {"question_type": doc["question_type"], "score": score, "prediction": pred, "ground_truth": gt_ans}


def ocrbench_final_score(items):
    """ocrbench_aggregate_accuracy on fresh counts: Final_score / 1000."""
    counts = dict.fromkeys(OCRBENCH_TYPES, 0)
    for item in items:
        counts[item["question_type"]] += item["score"]
    recognition = sum(counts[t] for t in OCRBENCH_TYPES[:6])
    return (recognition + sum(counts[t] for t in OCRBENCH_TYPES[6:])) / 1000


def relaxed_correctness(prediction, target, max_relative_change=0.05):
    def _to_float(text):
        try:
            if text.endswith("%"):
                return float(text.rstrip("%")) / 100.0
            else:
                return float(text)
        except ValueError:
            return None

    prediction_float = _to_float(prediction)
    target_float = _to_float(target)
    if prediction_float is not None and target_float:
        relative_change = abs(prediction_float - target_float) / abs(target_float)
        return relative_change <= max_relative_change
    else:
        return prediction.lower() == target.lower()


def _split_means(docs, values_by_doc, suffixes):
    """chartqa's return_dict per doc (overall, and the doc's split), then each key's mean over
    the docs that returned it."""
    metrics = {}
    for d, values in zip(docs, values_by_doc, strict=True):
        split = "relaxed_human_split" if d["type"] == "human_test" else "relaxed_augmented_split"
        for suffix, value in zip(suffixes, values, strict=True):
            metrics.setdefault(f"relaxed_overall{suffix}", []).append(value)
            metrics.setdefault(f"{split}{suffix}", []).append(value)
    return {k: _mean(v) for k, v in metrics.items()}


def per_metric(per_doc):
    """Each metric's values, over the docs whose process_results returned it."""
    items = {}
    for values in per_doc:
        for key, item in values.items():
            items.setdefault(key, []).append(item)
    return items


# -- mmstar/utils.py and _task_utils/mcq_extract.py --------------------------------------------------------
MMSTAR_KWARGS = {"pre_prompt": "", "post_prompt": "\nAnswer with the option's letter from the given choices directly"}
MMSTAR_QWEN_KWARGS = {"pre_prompt": "Question: ", "post_prompt": "Answer with the option letter only."}
MMSTAR_METRICS = ["coarse perception", "fine-grained perception", "instance reasoning", "logical reasoning",
                  "science & technology", "math", "average"]  # fmt: skip


def extract_mcq_answer(response, choices=None):
    if not response or not response.strip():
        return ""
    all_choices = choices or ["A", "B", "C", "D", "E", "F", "G", "H"]
    text = response.strip()
    for char in [",", ".", "!", "?", ";", ":", "'", '"']:
        text = text.strip(char)
    text = " " + text + " "
    candidates = []
    for fmt, name in [("({})", "parentheses"), ("{}.", "period"), ("{}:", "colon"), ("{})", "right_paren"),
                      ("{} ", "space")]:  # fmt: skip
        for ch in all_choices:
            if fmt.format(ch) in text:
                candidates.append((ch, text.rfind(fmt.format(ch)), name))
    phrases = ["the answer is", "answer is", "the correct answer is", "correct answer is", "the best answer is",
               "best answer is", "the correct option is", "correct option is", "the best option is", "best option is",
               "the choice is", "choice is", "the correct choice is", "correct choice is", "i choose", "i select",
               "i pick", "my answer is", "my choice is", "옵션", "정답은", "답은", "답:", "答案是", "答案为", "选",
               "答えは"]  # fmt: skip
    text_lower = text.lower()
    for phrase in phrases:
        idx = text_lower.find(phrase)
        if idx != -1:
            after = idx + len(phrase)
            for ch in all_choices:
                ch_pos = text.find(ch, after)
                if ch_pos != -1:
                    candidates.append((ch, ch_pos, "phrase"))
    stripped = text.strip()
    for ch in all_choices:
        if stripped.startswith(ch) and (len(stripped) == 1 or not stripped[1].isalpha()):
            candidates.append((ch, 0, "start"))
    for ch in all_choices:
        if stripped.endswith(ch) and (len(stripped) == 1 or not stripped[-2].isalpha()):
            candidates.append((ch, len(text) - 1, "end"))
    if not candidates:
        for ch in all_choices:
            if ch in text:
                candidates.append((ch, text.rfind(ch), "fallback"))
    if not candidates:
        return ""
    priority = {"start": 10, "end": 9, "phrase": 7, "parentheses": 6, "period": 5, "colon": 4, "right_paren": 3,
                "space": 2, "fallback": 0}  # fmt: skip
    candidates.sort(key=lambda x: (priority.get(x[2], 0), x[1]), reverse=True)
    return candidates[0][0]


def mmstar_doc_to_text(doc, kwargs):
    question = doc["question"].strip()
    if "pre_prompt" in kwargs and kwargs["pre_prompt"] != "":
        question = question.replace(" Please answer yes or no.", "")
        question = f"{kwargs['pre_prompt']}{question}"
    if "post_prompt" in kwargs and kwargs["post_prompt"] != "":
        question = question.replace(" Please answer yes or no.", "")
        question = f"{question}{kwargs['post_prompt']}"
    return question


def mmstar_aggregate_results(results):
    by_l2 = {}
    for result in results:
        by_l2.setdefault(result["l2_category"], []).append(result["score"])
    averages = {k: sum(v) / len(v) for k, v in by_l2.items()}
    return sum(averages.values()) / len(averages)


def mmstar_metrics(per_doc):
    """Each doc's {category: item, "average": item}, aggregated over the docs that returned each metric."""
    return {k: mmstar_aggregate_results(v) for k, v in per_metric(per_doc).items() if k in MMSTAR_METRICS}


# -- mmmu/utils.py, _task_utils/mmmu_mcq_utils.py (MMMU's eval_utils.py) -------------------------------
MMMU_KWARGS = {"prompt_type": "format", "multiple_choice_prompt": "Answer with the option's letter from the given choices directly.",
               "open_ended_prompt": "Answer the question using a single word or phrase."}  # fmt: skip
# mmmu_val.yaml's kwargs under `--model qwen3_vl`
MMMU_VAL_QWEN3_VL_KWARGS = {"format": "qwen3_vl", "pre_prompt": "Question: ", "post_prompt": "Answer with the option letter only.",
                            "open_ended_prompt": "Please select the correct answer from the options above."}  # fmt: skip
MUIRBENCH_POST = "\nAnswer with the option's letter from the given choices directly."
MMMU_PRO_KWARGS = {"pre_prompt": "", "post_prompt": "Answer with the option letter from the given choices directly."}  # fmt: skip
MMMU_QWEN_KWARGS = {"format": "qwen3_vl", "pre_prompt": "Question: ", "post_prompt": "Answer with the option letter only.",
                    "open_ended_prompt": "Please answer the question directly."}  # fmt: skip


def mmmu_parse_options(options):
    option_letters = [chr(ord("A") + i) for i in range(len(options))]
    return "\n".join(
        [f"{option_letter}. {option}" for option_letter, option in zip(option_letters, options, strict=True)]
    )


def mmmu_construct_prompt(doc, mc_prompt="", open_ended_prompt=""):
    question = doc["question"]
    if doc["question_type"] == "multiple-choice":
        parsed_options = mmmu_parse_options(ast.literal_eval(doc["options"]))
        question = f"{question}\n{parsed_options}\n\n{mc_prompt}"
    else:
        question = f"{question}\n\n{open_ended_prompt}"
    return question


def mmmu_doc_to_text(doc, kwargs):
    if "format" in kwargs and kwargs["format"] == "qwen3_vl":
        options = mmmu_parse_options(ast.literal_eval(doc["options"]))
        if doc["question_type"] == "multiple-choice":
            return f"{kwargs['pre_prompt']}{doc['question']}\nOptions:\n{options}\n{kwargs['post_prompt']}"
        return f"{kwargs['pre_prompt']}{doc['question']}\nOptions:\n{options}\n{kwargs['open_ended_prompt']}"
    return mmmu_construct_prompt(doc, kwargs["multiple_choice_prompt"], kwargs["open_ended_prompt"])


def mmmu_image_keys(doc):
    tokens = re.findall(r"<image \d+>", mmmu_construct_prompt(doc))
    return sorted(list(set([t.strip("<>").replace(" ", "_") for t in tokens])))


def mmmu_doc_to_messages(doc, kwargs):
    """mmmu_doc_to_messages (mmmu/utils.py), as a chat class renders it; each image given as
    {"type": "image", "url": its image_N column}. Its interleaved_format switch (set on the first
    call) makes mmmu_doc_to_text replace the markers (replace_images_tokens)."""
    visuals = [{"type": "image", "url": key} for key in mmmu_image_keys(doc)]
    if "format" in kwargs and kwargs["format"] == "qwen3_vl":  # mmmu_doc_to_messages_qwen3vl
        return [{"role": "user", "content": [*visuals, {"type": "text", "text": mmmu_doc_to_text(doc, kwargs)}]}]
    question = mmmu_doc_to_text(doc, kwargs)
    for i in range(1, 8):
        question = question.replace(f"<image {i}>", "<image>")
    messages = [{"role": "user", "content": []}]
    interleaved_content = question.split("<image>")
    for i in range(len(visuals)):
        if i < len(interleaved_content) - 1:
            text = interleaved_content[i].strip()
            if text != "":
                messages[0]["content"].append({"type": "text", "text": text})
        messages[0]["content"].append(visuals[i])
    if len(interleaved_content) > 0:
        messages[0]["content"].append({"type": "text", "text": interleaved_content[-1].strip()})
    return messages


def mmmu_parse_multi_choice(response, all_choices, index2ans, rng):
    """parse_mmmu_multi_choice_response, its random.choice drawn from `rng`."""
    for char in [",", ".", "!", "?", ";", ":", "'"]:
        response = response.strip(char)
    response = " " + response + " "
    index_ans = True
    ans_with_brack = False
    candidates = []
    for choice in all_choices:
        if f"({choice})" in response:
            candidates.append(choice)
            ans_with_brack = True
    if len(candidates) == 0:
        for choice in all_choices:
            if f"{choice} " in response:
                candidates.append(choice)
    if len(candidates) == 0:
        for choice in all_choices:
            if f"{choice}." in response:
                candidates.append(choice)
    if len(candidates) == 0 and len(response.split()) > 5:
        for index, ans in index2ans.items():
            if ans.lower() in response.lower():
                candidates.append(index)
                index_ans = False
    if len(candidates) == 0:
        pred_index = rng.choice(all_choices)
    elif len(candidates) > 1:
        start_indexes = []
        if index_ans:
            if ans_with_brack:
                for can in candidates:
                    start_indexes.append(response.rfind(f"({can})"))
            else:
                for can in candidates:
                    start_indexes.append(response.rfind(f" {can} "))
        else:
            for can in candidates:
                start_indexes.append(response.lower().rfind(index2ans[can].lower()))
        pred_index = candidates[np.argmax(start_indexes)]
    else:
        pred_index = candidates[0]
    return pred_index


def mmmu_extract_numbers(string):
    pattern_commas = r"-?\b\d{1,3}(?:,\d{3})+\b"
    pattern_scientific = r"-?\d+(?:\.\d+)?[eE][+-]?\d+"
    pattern_simple = r"-?(?:\d+\.\d+|\.\d+|\d+\b)(?![eE][+-]?\d+)(?![,\d])"
    return (
        re.findall(pattern_commas, string) + re.findall(pattern_scientific, string) + re.findall(pattern_simple, string)
    )


def mmmu_normalize_str(string):
    string = string.strip()
    try:
        float(string.replace(",", ""))
        is_number = True
    except ValueError:
        is_number = False
    if is_number:
        return [round(float(string.replace(",", "")), 2)]
    string = string.lower()
    if len(string) == 1:
        return [" " + string, string + " "]
    return [string]


def mmmu_parse_open_response(response):
    def get_key_subresponses(response):
        response = response.strip().strip(".").lower()
        sub_responses = re.split(r"\.\s(?=[A-Z])|\n", response)
        indicators_of_keys = ["could be ", "so ", "is ", "thus ", "therefore ", "final ", "answer ", "result "]
        key_responses = []
        for index, resp in enumerate(sub_responses):
            if index == len(sub_responses) - 1:
                indicators_of_keys.extend(["="])
            shortest_key_response = None
            for indicator in indicators_of_keys:
                if indicator in resp:
                    if not shortest_key_response:
                        shortest_key_response = resp.split(indicator)[-1].strip()
                    else:
                        if len(resp.split(indicator)[-1].strip()) < len(shortest_key_response):
                            shortest_key_response = resp.split(indicator)[-1].strip()
            if shortest_key_response:
                if shortest_key_response.strip() not in [":", ",", ".", "!", "?", ";", ":", "'"]:
                    key_responses.append(shortest_key_response)
        if len(key_responses) == 0:
            return [response]
        return key_responses

    key_responses = get_key_subresponses(response)
    pred_list = key_responses.copy()
    for resp in key_responses:
        pred_list.extend(mmmu_extract_numbers(resp))
    tmp_pred_list = []
    for i in range(len(pred_list)):
        tmp_pred_list.extend(mmmu_normalize_str(pred_list[i]))
    return list(set(tmp_pred_list))


def mmmu_eval_open(gold_i, pred_i):
    correct = False
    norm_answers = mmmu_normalize_str(gold_i)
    for pred in pred_i:
        if isinstance(pred, str):
            for norm_ans in norm_answers:
                if isinstance(norm_ans, str) and norm_ans in pred:
                    if not correct:
                        correct = True
                    break
        else:
            if pred in norm_answers:
                if not correct:
                    correct = True
                break
    return correct


def mmmu_process_results(doc, results, open_answers="lmms_eval"):
    """mmmu_process_results; open_answers="mmmu" keeps the parsed list, as MMMU's own code."""
    parsed_preds = []
    for pred in results:
        if doc["question_type"] == "multiple-choice":
            options = ast.literal_eval(doc["options"])
            all_choices = [chr(ord("A") + i) for i in range(len(options))]
            index2ans = dict(zip(all_choices, options, strict=True))
            parsed_pred = mmmu_parse_multi_choice(pred, all_choices, index2ans, random.Random(doc["id"]))
        else:
            parsed_pred = mmmu_parse_open_response(pred)
            if open_answers == "lmms_eval":
                parsed_pred = str(parsed_pred[0]) if parsed_pred else ""
        parsed_preds.append(parsed_pred)
    subdomain = re.compile(rf"^{doc['id'].split('_')[0]}_(.+?)_\d+$").search(doc["id"]).group(1)
    return {"id": doc["id"], "subdomain": subdomain, "question_type": doc["question_type"], "answer": doc["answer"],
            "parsed_pred": parsed_preds}  # fmt: skip


def mmmu_aggregate_results(results):
    """The Overall accuracy of mmmu_aggregate_results (evaluate_mmmu per subject, calculate_ins_level_acc)."""
    subset_to_eval_samples = {}
    for result in results:
        subset_to_eval_samples.setdefault(result["subdomain"], []).append(result)
    evaluation_result = {}
    for subset, samples in subset_to_eval_samples.items():
        pred_correct = 0
        for sample in samples:
            correct = False
            for pred_i in sample["parsed_pred"]:
                if sample["question_type"] == "multiple-choice":
                    correct = sample["answer"] == pred_i
                else:
                    correct = mmmu_eval_open(sample["answer"], pred_i)
                if correct:
                    pred_correct += 1
                    break
        evaluation_result[subset] = {"acc": pred_correct / len(samples), "num_example": len(samples)}
    acc, ins_num = 0, 0
    for cat_results in evaluation_result.values():
        acc += cat_results["acc"] * cat_results["num_example"]
        ins_num += cat_results["num_example"]
    return round(acc / ins_num if ins_num else 0, 5)


# -- realworldqa/utils.py, pope/utils.py ---------------------------------------------------------------
# mathvista/reasoning, mathverse/reasoning and realworldqa/reasoning SYSTEM_PROMPT
THINK_SYSTEM_PROMPT = (
    "You are a helpful assistant. When the user asks a question, your response must include two parts: "
    "first, the reasoning process enclosed in <think>...</think> tags, then the final answer enclosed in <answer>...</answer> tags."
    "Please provide a clear, concise response within <answer> </answer> tags that directly addresses the question."
)
POPE_KWARGS = {"pre_prompt": "", "post_prompt": "\nAnswer the question using a single word or phrase."}


def realworldqa_process_results(doc, results):
    pred = results[0]
    gt_ans = doc["answer"].strip()
    if gt_ans.upper() in ("A", "B", "C", "D"):
        pred_ans = extract_mcq_answer(pred, choices=["A", "B", "C", "D"])
        score = 1.0 if pred_ans == gt_ans.upper() else 0.0
    else:
        pred_clean = pred.lower().strip().rstrip(".")
        score = 1.0 if pred_clean == gt_ans.lower() else 0.0
    return {"exact_match": score}


def pope_doc_to_text(doc, kwargs):
    return f"{kwargs.get('pre_prompt', '')}{doc['question'].strip()}{kwargs.get('post_prompt', '')}"


def pope_process_results(doc, results):
    pred = results[0].lower().strip()
    gt_ans = doc["answer"].lower().strip()
    assert gt_ans in ["yes", "no"]
    score = 1.0 if pred == gt_ans else 0.0
    return {"question_id": doc["question_id"], "score": score, "prediction": pred, "ground_truth": gt_ans}


def pope_aggregates(results):
    """pope_aggregate_accuracy, _precision, _recall, _f1_score, _yes_ratio."""
    accuracy = sum(r["score"] for r in results) / len(results)
    tp = sum(1 for r in results if r["ground_truth"] == "yes" and r["prediction"] == "yes")
    fp = sum(1 for r in results if r["ground_truth"] == "no" and r["prediction"] == "yes")
    fn = sum(1 for r in results if r["ground_truth"] == "yes" and r["prediction"] == "no")
    precision = tp / (tp + fp) if (tp + fp) > 0 else 0
    recall = tp / (tp + fn) if (tp + fn) > 0 else 0
    f1 = 2 * (precision * recall) / (precision + recall) if (precision + recall) > 0 else 0
    yes = sum(1 for r in results if r["ground_truth"] == "yes")
    no = sum(1 for r in results if r["ground_truth"] == "no")
    return {"pope_accuracy": accuracy, "pope_precision": precision, "pope_recall": recall, "pope_f1_score": f1,
            "pope_yes_ratio": yes / (yes + no) if (yes + no) > 0 else 0}  # fmt: skip


# -- ai2d (ai2d.yaml: the generic exact_match of api/metrics.py) -------------------------------------------
AI2D_KWARGS = {"prompt_format": "mcq", "pre_prompt": "", "post_prompt": "\nAnswer with the option's letter from the given choices directly."}  # fmt: skip


def exact_match_hf_evaluate(predictions, references, ignore_case=False, ignore_punctuation=False):
    predictions = np.asarray(predictions)
    references = np.asarray(references)
    if ignore_case:
        predictions = np.char.lower(predictions)
        references = np.char.lower(references)
    if ignore_punctuation:
        repl_table = string.punctuation.maketrans("", "", string.punctuation)
        predictions = np.char.translate(predictions, table=repl_table)
        references = np.char.translate(references, table=repl_table)
    score_list = predictions == references
    return {"exact_match": np.mean(score_list)}


def ai2d_doc_to_text(doc, kwargs):
    question, choices = doc["question"], doc["options"]
    options = [chr(ord("A") + i) for i in range(len(choices))]
    choices_str = "\n".join([f"{option}. {choice}" for option, choice in zip(options, choices, strict=True)])
    return f"{kwargs['pre_prompt']}{question}\n{choices_str}{kwargs['post_prompt']}"


def ai2d_doc_to_target(doc):
    options = [chr(ord("A") + i) for i in range(len(doc["options"]))]
    return options[int(doc["answer"])]


# -- illusionvqa/utils.py (adapted from ai2d's: its MultiChoiceRegexFilter is ai2d_filter) -------------------
ILLUSIONVQA_KWARGS = {
    "prompt_format": "mcq",
    "pre_prompt": "You'll be given an image, an instruction and some options. You have to select the correct one. Do not explain your reasoning. Answer with only the letter which corresponds to the correct option. Do not repeat the entire answer.",
    "post_prompt": "",
}  # fmt: skip


def illusionvqa_doc_to_text(doc, lmms_eval_specific_kwargs=None):
    question, choices = doc["question"], doc["options"]
    len_choices = len(choices)
    post_prompt = lmms_eval_specific_kwargs["post_prompt"]
    pre_prompt = lmms_eval_specific_kwargs["pre_prompt"]
    options = [chr(ord("A") + i) for i in range(len_choices)]
    choices_str = "\n".join([f"{option}. {choice}" for option, choice in zip(options, choices)])  # noqa: B905 (as there)
    return f"{pre_prompt}{question}\n{choices_str}{post_prompt}"


def illusionvqa_doc_to_target(doc):
    len_choices = len(doc["options"])
    options = [chr(ord("A") + i) for i in range(len_choices)]
    return options[doc["options"].index(doc["answer"])]


# -- wemath/wemath_utils.py, wemath/reasoning/utils.py wemath_aggregate_results (pandas) ------------------
def wemath_process_steps_data(df, steps):
    steps_data = {f"{steps}steps_{i}": df[df["key"] == f"{steps}steps_{i}"] for i in range(1, steps + 1)}
    steps_data[f"{steps}steps_multi"] = df[df["key"] == f"{steps}steps_multi"]
    for key, data in steps_data.items():
        data.columns = [col + f"_{key.split('_')[-1]}" for col in data.columns]
    merged_data = steps_data[f"{steps}steps_1"]
    for i in range(2, steps + 1):
        merged_data = pd.merge(
            merged_data, steps_data[f"{steps}steps_{i}"], left_on="ID_1", right_on=f"ID_{i}", how="left"
        )
    return pd.merge(merged_data, steps_data[f"{steps}steps_multi"], left_on="ID_1", right_on="ID_multi", how="left")


def wemath_calculate_metrics(m2, m3):  # `== True` there, pandas' elementwise eq (a missing value: neither)
    metrics = {}
    metrics["steps2_filtered_rows_1_loose"] = m2[
        ((m2["joker_1"].eq(False)) & (m2["joker_2"].eq(False))) & (m2["joker_multi"].eq(True))
    ]
    metrics["steps2_filtered_rows_1_strict"] = m2[
        ((m2["joker_1"].eq(False)) | (m2["joker_2"].eq(False))) & (m2["joker_multi"].eq(True))
    ]
    metrics["steps2_filtered_rows_2"] = m2[
        ((m2["joker_1"].eq(True)) & (m2["joker_2"].eq(True))) & (m2["joker_multi"].eq(False))
    ]
    metrics["steps2_filtered_rows_3"] = m2[
        ((m2["joker_1"].eq(False)) | (m2["joker_2"].eq(False))) & (m2["joker_multi"].eq(False))
    ]
    metrics["steps3_filtered_rows_1_loose"] = m3[
        ((m3["joker_1"].eq(False)) & (m3["joker_2"].eq(False)) & (m3["joker_3"].eq(False)))
        & (m3["joker_multi"].eq(True))
    ]
    metrics["steps3_filtered_rows_1_strict"] = m3[
        ((m3["joker_1"].eq(False)) | (m3["joker_2"].eq(False)) | (m3["joker_3"].eq(False)))
        & (m3["joker_multi"].eq(True))
    ]
    metrics["steps3_filtered_rows_2"] = m3[
        ((m3["joker_1"].eq(True)) & (m3["joker_2"].eq(True)) & (m3["joker_3"].eq(True))) & (m3["joker_multi"].eq(False))
    ]
    metrics["steps3_filtered_rows_3"] = m3[
        ((m3["joker_1"].eq(False)) | (m3["joker_2"].eq(False)) | (m3["joker_3"].eq(False)))
        & (m3["joker_multi"].eq(False))
    ]
    return metrics  # the complete-mastery rows only feed the rates, left out (below)


def wemath_aggregate_results(results):
    """The score strings of update_main_results_df; compute_final_scores' rates are left out: they
    divide by the count of mastered and memorized problems, zero on small synthetic sets."""
    data = pd.DataFrame(results)
    data["joker"] = data["acc_score"] == 1.0
    merged_2steps = wemath_process_steps_data(data[data["key"].str.contains("2steps")], 2)
    merged_3steps = wemath_process_steps_data(data[data["key"].str.contains("3steps")], 3)
    metrics = wemath_calculate_metrics(merged_2steps, merged_3steps)
    ig = len(metrics["steps2_filtered_rows_2"]) + len(metrics["steps3_filtered_rows_2"])
    ik = len(metrics["steps2_filtered_rows_3"]) + len(metrics["steps3_filtered_rows_3"])
    rm_loose = len(metrics["steps2_filtered_rows_1_loose"]) + len(metrics["steps3_filtered_rows_1_loose"])
    rm_strict = len(metrics["steps2_filtered_rows_1_strict"]) + len(metrics["steps3_filtered_rows_1_strict"])
    return {
        "Score (Strict)": f"{(525 - 0.5 * ig - rm_strict - ik) / 525:.2%}",
        "Score (Loose)": f"{(525 - 0.5 * ig - rm_loose - ik) / 525:.2%}",
    }


# -- mme_realworld/utils.py, mme_realworld/reasoning/utils.py ------------------------------------------------
MME_RW_TASKS = ["Reasoning", "Perception"]
MME_RW_SUBTASKS = [
    "Monitoring",
    "Autonomous_Driving",
    "OCR with Complex Context",
    "Diagram and Table",
    "Remote Sensing",
]


def _mme_realworld_text(doc, heading, instruction):
    """The four doc_to_text functions of mme_realworld/utils.py and reasoning/utils.py, which
    differ only in these two strings."""
    question = doc["question"]
    option_prompt = heading + "\n".join(doc["multi-choice options"]) + "\n"
    question += " " + option_prompt + instruction
    return question


MME_RW_EN, MME_RW_CN = "The choices are listed below:\n", "选项如下所示:\n"
MME_RW_EN_DIRECT = (
    "Select the best answer to the above multiple-choice question based on the image. Respond with only the letter "
    "(A, B, C, D, or E) of the correct option.\nThe best answer is: "
)
MME_RW_CN_DIRECT = "根据图像选择上述多项选择题的最佳答案。只需回答正确选项的字母（A, B, C, D 或 E）。\n最佳答案为： "
MME_RW_EN_REASONING = "Select best answer to above multiple-choice question based on image."
MME_RW_CN_REASONING = "根据图像选择上述多项选择题的最佳答案。"


def mme_realworld_extract_characters_regex(s, choices=("(A)", "(B)", "(C)", "(D)", "(E)")):
    if type(s) is dict:
        s = ""
    s = s.strip()
    answer_prefixes = ["The best answer is", "The correct answer is", "The answer is", "The answer", "The best option is",
                       "The correct option is", "Best answer:", "Best option:"]  # fmt: skip
    for answer_prefix in answer_prefixes:
        s = s.replace(answer_prefix, "")
    if len(s.split()) > 10 and not re.search("[ABCDE]", s):
        return ""
    matches = re.search(r"[ABCDE]", s)
    if matches is None:
        for choice in choices:
            if s.lower() in choice.lower():
                return choice[1]
        return ""
    return matches[0]


def mme_realworld_process_results(doc, results):
    pred = results[0]
    pred_ans = mme_realworld_extract_characters_regex(pred)
    category = "Perception" if "perception" in doc["category"].lower() else "Reasoning"
    sub_category = doc["category"].split("/")[-1]
    task_category = doc["l2-category"]
    data_dict = {"question_id": doc["index"], "category": category, "sub_category": sub_category,
                 "task_category": task_category, "pred_answer": pred_ans, "answer": doc["answer"]}  # fmt: skip
    return {"mme_realworld_score": data_dict}


def mme_realworld_aggregate_results(results):  # the logging left out
    metrics = {}
    for task in MME_RW_TASKS:
        metrics[f"{task}"] = {}
        for subtask in MME_RW_SUBTASKS:
            metrics[f"{task}"][f"{subtask}"] = {}
    for i in range(len(results)):
        result = results[i]
        Task = result["category"]
        Subtask = result["sub_category"]
        Category = result["task_category"].lower()
        if "attribute" in Category.lower():
            Category = Category.split("/")[0] + "/attribute"
        cnt = (
            result["pred_answer"].lower() == result["answer"].lower()
            or result["answer"].lower() in result["pred_answer"].lower()
        )
        if Category not in metrics[Task][Subtask]:
            metrics[Task][Subtask][f"{Category}"] = {
                "true": cnt,
                "false": 1 - cnt,
                "is_E": result["pred_answer"] == "E",
            }
        else:
            metrics[Task][Subtask][f"{Category}"]["true"] += cnt
            metrics[Task][Subtask][f"{Category}"]["false"] += 1 - cnt
            metrics[Task][Subtask][f"{Category}"]["is_E"] += result["pred_answer"] == "E"
    sum_all, succ_all = 0, 0
    for tasks_values in metrics.values():
        cnt_task, sum_task = 0, 0
        for subtask_value in tasks_values.values():
            cnt_subtask, sum_subtask = 0, 0
            for category_dict in subtask_value.values():
                cnt_subtask += category_dict["true"]
                sum_subtask += category_dict["false"] + category_dict["true"]
            cnt_task += cnt_subtask
            sum_task += sum_subtask
        succ_all += cnt_task
        sum_all += sum_task
    return succ_all / sum_all


# -- hrbench/utils.py, hrbench_evals.py (HRBenchEval's rules; its GPT judge unreachable) -----------------------
def hrbench_doc_to_options(doc):
    return {cand: doc[cand] for cand in string.ascii_uppercase if cand in doc and not pd.isna(doc[cand])}


def hrbench_doc_to_text(doc, lmms_eval_specific_kwargs=None):
    question = doc["question"].strip()
    options = hrbench_doc_to_options(doc)
    options_prompt = ""
    for key, item in options.items():
        options_prompt += f"{key}. {item}\n"
    prompt = ""
    prompt += f"{question}\n{options_prompt}Answer the option letter directly."
    return prompt


def hrbench_can_infer_option(answer, choices):
    verbose = 0  # os.environ.get("VERBOSE", 0), unset
    if "Failed to obtain answer via API" in answer:
        return False
    reject_to_answer = ["Sorry, I can't help with images of people yet.", "I can't process this file.",
                        "I'm sorry, but without the image provided", "Cannot determine the answer"]  # fmt: skip
    for err in reject_to_answer:
        if err in answer:
            return "Z"

    def count_choice(splits, choices, prefix="", suffix=""):
        cnt = 0
        for c in choices:
            if prefix + c + suffix in splits:
                cnt += 1
        return cnt

    answer_mod = copy.copy(answer)
    chars = ".()[],:;!*#{}"
    for c in chars:
        answer_mod = answer_mod.replace(c, " ")
    splits = [x.strip() for x in answer_mod.split()]
    count = count_choice(splits, choices)
    if count == 1:
        for ch in choices:
            if "A" in splits and len(splits) > 3 and verbose:
                return False
            if ch in splits:
                return ch
    elif count == 0 and count_choice(splits, {"Z", ""}) == 1:
        return "Z"
    return False


def hrbench_can_infer_text(answer, choices):
    answer = answer.lower()
    for k in choices:
        choices[k] = str(choices[k]).lower()
    cands = []
    for k in choices:
        if choices[k] in answer:
            cands.append(k)
    if len(cands) == 1:
        return cands[0]
    return False


def hrbench_process_results(doc, results):
    pred = results[0].strip()
    gt = doc["answer"]
    options = hrbench_doc_to_options(doc)
    answer = str(pred)
    ret = hrbench_can_infer_option(answer, options) or hrbench_can_infer_text(answer, options)
    # get_chat_response: `ret` when the rules read one; else the GPT judge, which offline leaves no
    # prediction (lmms-eval then stops on a KeyError). vlrl's named deviation: the row is wrong.
    gpt_prediction = ret if ret else None
    gpt_score = 1 if gpt_prediction is not None and gt.lower() == gpt_prediction.lower() else 0
    item = {"index": doc["index"], "cycle_category": doc["cycle_category"], "gpt_score": gpt_score}
    return {doc["category"]: item, "average": item}


def hrbench_aggregate_results(results):
    cycle_category_scores = defaultdict(list)
    for result in results:
        cycle_category_scores[result["cycle_category"]].append(result["gpt_score"])
    cycle_category_avg_score = {}
    for cycle_category, scores in cycle_category_scores.items():
        cycle_category_avg_score[cycle_category] = sum(scores) / len(scores)
    return sum(cycle_category_avg_score.values()) / len(cycle_category_avg_score)


# -- embspatial/utils.py (the default kwargs) ------------------------------------------------------------------
EMBSPATIAL_KWARGS = {
    "pre_prompt": "Note: You only need to respond with A, B, C, D without providing any additional information.\n",
    "post_prompt": "",
}
EMBSPATIAL_SOURCES = ["ai2thor", "mp3d", "scannet"]


def embspatial_extract_answer_letter(text):
    text = text.strip()
    match = re.match(r"[\(\s]*([A-Z])[\)\.\s]*", text, flags=re.IGNORECASE)
    if match:
        return match.group(1).upper()
    return ""


def embspatial_doc_to_text(doc, lmms_eval_specific_kwargs=None):
    if lmms_eval_specific_kwargs is None:
        lmms_eval_specific_kwargs = {}
    options = doc["answer_options"]
    formatted_lines = []
    for i, item in enumerate(options):
        letter = chr(65 + i)
        formatted_lines.append(f"{letter}) {item}")
    options_string = "\n".join(formatted_lines)
    return lmms_eval_specific_kwargs.get("pre_prompt", "") + doc["question"] + "\n" + options_string


def embspatial_process_results(doc, results):
    choices = ["A", "B", "C", "D"]
    grounded_output = choices[doc["answer"]]
    response = results[0]
    pred_letter = embspatial_extract_answer_letter(response)
    flag = pred_letter == grounded_output
    data_source = doc.get("data_source", "unknown")
    entry = {"id": doc["question_id"], "gt_content": grounded_output, "pred": response, "sub_task": doc["relation"],
             "is_correct": flag, "data_source": data_source}  # fmt: skip
    result = {"embspatial_acc": entry}
    for src in EMBSPATIAL_SOURCES:
        result[f"{src}_accuracy"] = entry
    return result


def embspatial_aggregate_results(results):
    total_correct = sum(1 for sample in results if sample["is_correct"])
    return total_correct / len(results) if len(results) > 0 else 0  # (the per-sub-task logging left out)


def embspatial_aggregate_by_source(results, target_source):
    scores = [1 if r["is_correct"] else 0 for r in results if r.get("data_source") == target_source]
    return sum(scores) / len(scores) if scores else 0.0


# -- zerobench/utils.py (the default kwargs) -------------------------------------------------------------------
ZEROBENCH_KWARGS = {"pre_prompt": "", "post_prompt": "\nAnswer with only the final answer."}


def zerobench_doc_to_text(doc, lmms_eval_specific_kwargs=None):
    if lmms_eval_specific_kwargs is None:
        lmms_eval_specific_kwargs = {}
    pre_prompt = lmms_eval_specific_kwargs.get("pre_prompt", "")
    post_prompt = lmms_eval_specific_kwargs.get("post_prompt", "\nAnswer with only the final answer.")
    question = doc["question_text"].strip()
    return f"{pre_prompt}{question}{post_prompt}"


def _zerobench_normalize_text(text):
    normalized = text.strip().lower().strip("\"'`")
    normalized = re.sub(r"\s+", " ", normalized)
    if normalized.endswith("."):
        normalized = normalized[:-1].rstrip()
    return normalized


def _zerobench_to_decimal(text):
    candidate = text.strip().replace(",", "")
    if not re.fullmatch(r"-?(?:\d+\.\d+|\d+|\.\d+)", candidate):
        return None
    try:
        return Decimal(candidate)
    except InvalidOperation:
        return None


def _zerobench_is_exact_match(prediction, target):
    normalized_prediction = _zerobench_normalize_text(prediction)
    normalized_target = _zerobench_normalize_text(target)
    prediction_decimal = _zerobench_to_decimal(normalized_prediction)
    target_decimal = _zerobench_to_decimal(normalized_target)
    if prediction_decimal is not None and target_decimal is not None:
        return prediction_decimal == target_decimal
    return normalized_prediction == normalized_target


def zerobench_process_results(doc, results):
    prediction = results[0].strip() if results else ""
    target = str(doc["question_answer"]).strip()
    score = 1.0 if _zerobench_is_exact_match(prediction, target) else 0.0
    return {"zerobench_exact_match": {"question_id": doc.get("question_id", ""), "prediction": prediction,
                                      "target": target, "score": score}}  # fmt: skip


def zerobench_aggregate_results(results):
    if not results:
        return 0.0
    return sum(result["score"] for result in results) / len(results)


# -- VisualPuzzles/utils.py (random.choice drawn from a generator seeded with the row's id, as vlrl draws it) --
VISUALPUZZLES_PROMPTS = {
    "MULTI_CHOICE_DIRECT_PROMPT": "Answer the question with the option's letter from the given choices directly.",
    "COT_PROMPT": "Solve the multiple-choice question and then answer with the option letter from the given choices. The last line of your response should be of the following format: 'Answer: $LETTER' (without quotes) where LETTER is one of options. Think step by step before answering.",
}


def visualpuzzles_doc_to_text(doc, lmms_eval_specific_kwargs):
    question = "Question: " + doc["question"].strip()
    options = doc["options"]
    if options != None:  # noqa: E711 (as written there)
        question += (
            "\nOptions:\n(A) " + options[0] + "\n(B) " + options[1] + "\n(C) " + options[2] + "\n(D) " + options[3]
        )
    else:
        question += "\nOptions: Choose from (A) (B) (C) (D) in the image."
    question += "\n" + VISUALPUZZLES_PROMPTS[lmms_eval_specific_kwargs["prompt"]]
    return question


def visualpuzzles_parse_response(response, all_choices, index2ans, rng):
    for pattern in (r"Answer:\s*\(([A-Za-z])\)", r"(?<!Final )Answer:\s*([A-Za-z])", r"Answer:\s*([A-Za-z])",
                    r"\s*\(([A-Za-z])\)"):  # fmt: skip
        matches = re.findall(pattern, response)
        if matches:
            for match in matches[::-1]:
                if match in all_choices or match.upper() in all_choices:
                    return match
    response = " " + response.strip()
    for pattern in (r"\s*([A-Za-z])\)", r"\s*\{([A-Za-z])\}", r"\s*\$([A-Za-z])\$", r" ([A-Da-d])\."):
        matches = re.findall(pattern, response)
        if matches:
            for match in matches[::-1]:
                if match in all_choices or match.upper() in all_choices:
                    return match
    matches = re.findall(r" ([A-Da-d])", response)
    if matches and len(response) <= 5:
        for match in matches[::-1]:
            if match in all_choices or match.upper() in all_choices:
                return match
    if index2ans != None:  # noqa: E711 (as written there)
        for index in all_choices:
            ans = index2ans[index]
            if f"answer: {ans}" in response.lower():
                return index
            if f"answer:{ans}" in response.lower():
                return index
        last_found = None
        last_index = -1
        for index in all_choices:
            ans = index2ans[index]
            idx = response.rfind(ans)
            if idx > last_index:
                last_found = index
                last_index = idx
        if last_found:
            return last_found
    return rng.choice(all_choices)


def visualpuzzles_process_result(doc, results):
    pred = results[0].strip()
    all_choices = ["A", "B", "C", "D"]
    if doc["options"] == None:  # noqa: E711 (as written there)
        index2ans = None
    else:
        index2ans = {all_choices[i]: doc["options"][i] for i in range(4)}
    pred = visualpuzzles_parse_response(pred, all_choices, index2ans, random.Random(str(doc["id"])))
    target = doc["answer"]
    if pred.lower() == target.lower():
        return {"exact_match": 1.0}
    return {"exact_match": 0.0}


# -- mmsi_bench/utils.py (the default kwargs) ------------------------------------------------------------------
MMSI_KWARGS = {
    "pre_prompt": "",
    "post_prompt": "\nAnswer with the option's letter from the given choices directly. Enclose the option's letter within ``.",
}
MMSI_CATEGORY_ALIASES = {
    "Positional Relationship (Obj.-Obj.)": "Positional Relationship (Obj.–Obj.)",
    "Positional Relationship (Cam.-Obj.)": "Positional Relationship (Cam.–Obj.)",
    "Positional Relationship (Cam.-Cam.)": "Positional Relationship (Cam.–Cam.)",
    "Positional Relationship (Obj.-Reg.)": "Positional Relationship (Obj.–Reg.)",
    "Positional Relationship (Cam.-Reg.)": "Positional Relationship (Cam.–Reg.)",
    "Positional Relationship (Reg.-Reg.)": "Positional Relationship (Reg.–Reg.)",
}
MMSI_METRICS = [
    *MMSI_CATEGORY_ALIASES.values(),
    "Attribute (Meas.)",
    "Attribute (Appr.)",
    "Motion (Obj.)",
    "Motion (Cam.)",
    "MSR",
    "average",
]  # fmt: skip  (msr_bench.yaml's metric_list)


def msr_doc_to_text(doc, lmms_eval_specific_kwargs=None):
    if not isinstance(lmms_eval_specific_kwargs, dict):
        lmms_eval_specific_kwargs = {}
    pre_prompt = lmms_eval_specific_kwargs.get("pre_prompt", "")
    post_prompt = lmms_eval_specific_kwargs.get("post_prompt", "")
    question = doc["question"].strip()
    if pre_prompt != "":
        question = f"{pre_prompt}{question}"
    if post_prompt != "":
        question = f"{question}{post_prompt}"
    return question


def extract_single_choice_with_word_boundary(pred, gt):
    if pred is None:
        return None
    pred = str(pred)
    match = re.search(r"``([^`]*)``", pred)
    if match:
        pred = match.group(1)
    match = re.search(r"`([^`]*)`", pred)
    if match:
        pred = match.group(1)
    match = re.search(r"\{([^}]*)\}", pred)
    if match:
        pred = match.group(1)
    match = re.search(r"\b[A-F]\b(?!\s[a-zA-Z])", pred, flags=re.IGNORECASE)
    if match:
        pred = match.group().upper()
    else:
        return None
    answer = gt.lower().replace("\n", " ").strip()
    predict = pred.lower().replace("\n", " ").strip()
    try:
        if answer == predict[0]:  # noqa: SIM114 (as written there)
            return 1.0
        elif predict[0] == "(" and answer == predict[1]:  # noqa: SIM114
            return 1.0
        elif predict[0:7] == "option " and answer == predict[7]:  # noqa: SIM114
            return 1.0
        elif predict[0:14] == "the answer is " and answer == predict[14]:
            return 1.0
    except Exception:
        return 0.0
    return 0.0


def msr_process_results(doc, results):
    pred = results[0]
    gt = doc["answer"]
    score = extract_single_choice_with_word_boundary(pred, gt)
    category = MMSI_CATEGORY_ALIASES.get(doc["question_type"], doc["question_type"])
    item = {"question_id": doc["id"], "l2_category": category, "score": 0 if score is None else score}
    return {category: item, "average": item}


def msr_aggregate_results(results):
    l2_category_scores = defaultdict(list)
    for result in results:
        l2_category_scores[result["l2_category"]].append(result["score"])
    all_scores = [score for scores in l2_category_scores.values() for score in scores]
    return sum(all_scores) / len(all_scores) if all_scores else 0.0


# -- screenspot/utils_rec.py (screenspot_rec_test) ----------------------------------------------------------
def screenspot_rec_doc_to_text(doc):
    return (
        "Bounding box coordinates are specified in the format (top-left x, top-left y, bottom-right x, bottom-right y). All values are floating point numbers bounded between 0 and 1 with two decimal places of precision (e.g., 0.15). Please provide the bounding box coordinates of the region that corresponds to the command: "
        + doc["instruction"]
    )


def screenspot_parse_float_sequence_within(input_str):
    pattern = r"[\[\(]\s*(-?\d+(?:\.\d+)?),\s*(-?\d+(?:\.\d+)?),\s*(-?\d+(?:\.\d+)?),\s*(-?\d+(?:\.\d+)?)\s*[\]\)]"
    match = re.search(pattern, input_str)
    if match:
        pred = [float(match.group(i)) for i in range(1, 5)]
        if max(pred) > 1:
            pred = [x / 1000 for x in pred]
        return pred
    return [0, 0, 0, 0]


def screenspot_rec_process_result(doc, result):
    pred = result[0] if len(result) > 0 else ""
    pred = screenspot_parse_float_sequence_within(pred)
    ann_id = doc["file_name"]
    data_dict = {"instruction": doc["instruction"], "pred": pred, "ann_id": ann_id, "bbox": doc["bbox"], "data_type": doc["data_type"], "data_source": doc["data_source"]}  # fmt: skip
    return {f"screenspot_{metric}": data_dict for metric in REC_NAMES}


def screenspot_compute_iou(box1, box2):
    x_left = max(box1[0], box2[0])
    y_top = max(box1[1], box2[1])
    x_right = min(box1[2], box2[2])
    y_bottom = min(box1[3], box2[3])
    intersection_area = max(0, x_right - x_left) * max(0, y_bottom - y_top)
    box1_area = (box1[2] - box1[0]) * (box1[3] - box1[1])
    box2_area = (box2[2] - box2[0]) * (box2[3] - box2[1])
    union_area = box1_area + box2_area - intersection_area
    iou = intersection_area / union_area
    return iou


def screenspot_compute_center_accuracy(box1, box2):
    center_x = (box2[0] + box2[2]) / 2
    center_y = (box2[1] + box2[3]) / 2
    return box1[0] <= center_x <= box1[2] and box1[1] <= center_y <= box1[3]


def screenspot_rec_aggregation_result(results, metric):
    """The function with its printing returned: (the metric, every key it prints -> value)."""
    scorers = {
        "IoU": screenspot_compute_iou,
        "ACC@0.1": lambda x, y: screenspot_compute_iou(x, y) >= 0.1,
        "ACC@0.3": lambda x, y: screenspot_compute_iou(x, y) >= 0.3,
        "ACC@0.5": lambda x, y: screenspot_compute_iou(x, y) >= 0.5,
        "ACC@0.7": lambda x, y: screenspot_compute_iou(x, y) >= 0.7,
        "ACC@0.9": lambda x, y: screenspot_compute_iou(x, y) >= 0.9,
        "Center_ACC": screenspot_compute_center_accuracy,
    }
    results_dict = {
        metric: [],
        metric + "-mobile_text": [],
        metric + "-mobile_icon": [],
        metric + "-web_text": [],
        metric + "-web_icon": [],
        metric + "-desktop_text": [],
        metric + "-desktop_icon": [],
    }
    for result in results:
        gt = result["bbox"]
        pred = result["pred"]
        score = scorers[metric](gt, pred)
        results_dict[metric].append(score)
        if result["data_type"] == "text":
            if "ios" in result["data_source"] or "android" in result["data_source"]:
                results_dict[metric + "-mobile_text"].append(score)
            elif "macos" in result["data_source"] or "windows" in result["data_source"]:
                results_dict[metric + "-desktop_text"].append(score)
            else:
                results_dict[metric + "-web_text"].append(score)
        else:
            if "ios" in result["data_source"] or "android" in result["data_source"]:
                results_dict[metric + "-mobile_icon"].append(score)
            elif "macos" in result["data_source"] or "windows" in result["data_source"]:
                results_dict[metric + "-desktop_icon"].append(score)
            else:
                results_dict[metric + "-web_icon"].append(score)
    for key in results_dict:
        if len(results_dict[key]) == 0:
            results_dict[key] = 0
        else:
            results_dict[key] = sum(results_dict[key]) / len(results_dict[key])
    return results_dict[metric], results_dict


# -- naturalbench/utils.py ----------------------------------------------------------------------------------
NATURALBENCH_SUFFIX_FOR_VQA = {"yes_no": "Please answer Yes or No.", "multiple_choice": "Please output the letter corresponding to the correct option."}  # fmt: skip


def naturalbench_get_scores(scores):
    """get_scores, for its dict input."""
    Q_Acc = 0.0
    I_Acc = 0.0
    Acc = 0.0
    G_Acc = 0.0
    num_samples = len(scores)

    def calculate_image_score(result):
        image_correct = 0
        if result["q0_i0"] == 1.0 and result["q1_i0"] == 0.0:
            image_correct += 1
        if result["q1_i1"] == 1.0 and result["q0_i1"] == 0.0:
            image_correct += 1
        return image_correct

    def calculate_question_score(result):
        text_correct = 0
        if result["q0_i0"] == 1.0 and result["q0_i1"] == 0.0:
            text_correct += 1
        if result["q1_i1"] == 1.0 and result["q1_i0"] == 0.0:
            text_correct += 1
        return text_correct

    def calculate_binary_score(result):
        binary_score_correct = 0
        binary_score_correct += 1 if result["q0_i0"] == 1.0 else 0
        binary_score_correct += 1 if result["q0_i1"] == 0.0 else 0
        binary_score_correct += 1 if result["q1_i0"] == 0.0 else 0
        binary_score_correct += 1 if result["q1_i1"] == 1.0 else 0
        return binary_score_correct

    def calculate_group_score(result):
        group_correct = 0
        if calculate_question_score(result) == 2 and calculate_image_score(result) == 2:
            group_correct += 1
        return group_correct

    for _, result in scores.items():
        Q_Acc += calculate_question_score(result)
        I_Acc += calculate_image_score(result)
        Acc += calculate_binary_score(result)
        G_Acc += calculate_group_score(result)
    return {"Q_Acc": Q_Acc / float(num_samples * 2), "I_Acc": I_Acc / float(num_samples * 2), "Acc": Acc / float(num_samples * 4), "G_Acc": G_Acc / num_samples}  # fmt: skip


def naturalbench_extract_answer(output_string, task_type="yes_no"):
    def find_word_position(string, word):
        pattern = r"\b" + re.escape(word) + r"\b"
        match = re.search(pattern, string, re.IGNORECASE)
        if match:
            return match.start()
        return -1

    if task_type not in ["yes_no", "multiple_choice"]:
        raise ValueError("Task type not supported. Must be 'yes_no' or 'multiple_choice'.")
    if task_type == "yes_no":
        position_yes_and_a = find_word_position(output_string, "yes")
        position_no_and_b = find_word_position(output_string, "no")
    elif task_type == "multiple_choice":
        position_yes_and_a = find_word_position(output_string, "A")
        position_no_and_b = find_word_position(output_string, "B")
    if position_yes_and_a == -1 and position_no_and_b == -1:
        return -1
    elif position_yes_and_a != -1 and position_no_and_b != -1:
        return 1 if position_yes_and_a < position_no_and_b else 0
    else:
        return 0 if position_yes_and_a == -1 else 1


def naturalbench_doc_to_text(doc):
    question = doc["Question"]
    if doc["Question_Type"] == "yes_no":
        question = question + " " + NATURALBENCH_SUFFIX_FOR_VQA["yes_no"]
    elif doc["Question_Type"] == "multiple_choice":
        question = question + " " + NATURALBENCH_SUFFIX_FOR_VQA["multiple_choice"]
    return question


def naturalbench_process_results(doc, results):
    pred = results[0]
    type = doc["Question_Type"]
    gt_ans = naturalbench_extract_answer(pred, task_type=type)
    return {
        "naturalbench_G_ACC": {"id": doc["Index"], "score": gt_ans},
        "naturalbench_Q_ACC": {"id": doc["Index"], "score": gt_ans},
        "naturalbench_I_ACC": {"id": doc["Index"], "score": gt_ans},
        "naturalbench_Acc": {"id": doc["Index"], "score": gt_ans},
    }


def naturalbench_aggregate(results, key, rows=1900 * 4):
    """The four naturalbench_aggregate_results_* (the same body, `key` of get_scores); `rows`
    for 1900 * 4, the one count the published table has."""
    assert len(results) == rows
    answers = {}
    number_answered_samples = len(results) // 4
    for i in range(number_answered_samples):
        assert int(results[i * 4]["id"]) == i * 4
        assert int(results[i * 4 + 1]["id"]) == i * 4 + 1
        assert int(results[i * 4 + 2]["id"]) == i * 4 + 2
        assert int(results[i * 4 + 3]["id"]) == i * 4 + 3
        answers[i] = {"q0_i0": results[i * 4]["score"], "q0_i1": results[i * 4 + 1]["score"], "q1_i0": results[i * 4 + 2]["score"], "q1_i1": results[i * 4 + 3]["score"]}  # fmt: skip
    scores = naturalbench_get_scores(answers)
    return scores[key]


# -- fsc147/utils.py ----------------------------------------------------------------------------------------
FSC147_KWARGS = {"pre_prompt": "", "post_prompt": "\nAnswer with only an integer."}
_FSC147_COUNT_KEYS = ["annotated_pos_count", "pos_count", "count", "answer", "label", "gt_count", "gt_num"]
_FSC147_CAPTION_KEYS = ["pos_caption", "caption", "question", "query", "prompt", "text"]


def fsc147_to_int(value):
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return int(round(float(value)))  # noqa: RUF046 (as written there)
    text = str(value).strip().replace(",", "")
    if not text:
        return None
    match = re.search(r"-?\d+(?:\.\d+)?", text)
    if not match:
        return None
    try:
        return int(round(float(match.group(0))))  # noqa: RUF046 (as written there)
    except ValueError:
        return None


def fsc147_extract_count(doc):
    for key in _FSC147_COUNT_KEYS:
        count = fsc147_to_int(doc.get(key))
        if count is not None:
            return count
    return None


def fsc147_extract_caption(doc):
    for key in _FSC147_CAPTION_KEYS:
        value = doc.get(key)
        if isinstance(value, str) and value.strip():
            text = value.strip()
            text = re.sub(r"^[Tt]he\s+", "", text)
            return text.rstrip(". ")
    return "objects"


def fsc147_doc_to_text(doc, lmms_eval_specific_kwargs=None):
    kwargs = lmms_eval_specific_kwargs or {}
    pre_prompt = kwargs.get("pre_prompt", "")
    post_prompt = kwargs.get("post_prompt", "")
    object_phrase = fsc147_extract_caption(doc)
    question = f"How many {object_phrase} are there in the image?"
    return f"{pre_prompt}{question}{post_prompt}"


def fsc147_doc_to_target(doc):
    target = fsc147_extract_count(doc)
    if target is None:
        return ""
    return str(target)


def fsc147_process_results(doc, results):
    prediction = str(results[0]).strip() if results else ""
    target_count = fsc147_extract_count(doc)
    if target_count is None:
        return {"fsc147_exact_match": 0.0, "fsc147_mae": 0.0}
    pred_count = fsc147_to_int(prediction)
    if pred_count is None:
        return {"fsc147_exact_match": 0.0, "fsc147_mae": float(abs(target_count))}
    return {
        "fsc147_exact_match": float(pred_count == target_count),
        "fsc147_mae": float(abs(pred_count - target_count)),
    }


def fsc147_aggregate(items):
    """fsc147_aggregate_exact_match and fsc147_aggregate_mae (the same body)."""
    if not items:
        return 0.0
    return sum(float(item) for item in items) / len(items)


# -- vlmsareblind/utils.py ---------------------------------------------------------------------------------
VLMSAREBLIND_KWARGS = {"pre_prompt": "", "post_prompt": "\nAnswer only in the required format."}
VLMSAREBLIND_TASK_MAP = {
    "counting grid - blank grids": "counting grid",
    "counting grid - word grids": "counting grid",
}


def vlmsareblind_doc_to_text(doc, lmms_eval_specific_kwargs=None):
    if lmms_eval_specific_kwargs is None:
        lmms_eval_specific_kwargs = {}
    prompt = doc.get("prompt", "")
    pre_prompt = lmms_eval_specific_kwargs.get("pre_prompt", "")
    post_prompt = lmms_eval_specific_kwargs.get("post_prompt", "")
    return f"{pre_prompt}{prompt}{post_prompt}"


def vlmsareblind_parse_response(response, task):
    response = response.strip().lower()
    task = task.lower()
    if task == "touching circles":
        if response in ["yes", "no"]:
            return response
    if task in ["line plot intersections", "subway connections", "olympic counting - circles", "olympic counting - pentagons", "nested squares"]:  # fmt: skip
        match = re.search(r"\{?(\d+)\}?", response)
        if match:
            return match.group(1)
    if task == "circled letter":
        match = re.search(r"\{?([a-z])\}?", response)
        if match:
            return match.group(1)
    if task.startswith("counting grid"):
        match = re.search(r"\{(\d+)\}\s*\{(\d+)\}", response)
        if match:
            return f"{match.group(1)},{match.group(2)}"
        match = re.search(r"\((\d+)\s*,\s*(\d+)\)", response)
        if match:
            return f"{match.group(1)},{match.group(2)}"
        match = re.search(r"rows=\{(\d+)\}\scolumns=\{(\d+)\}", response)
        if match:
            return f"{match.group(1)},{match.group(2)}"
    return None


def vlmsareblind_process_results(doc, results):
    result = results[0]
    task = doc.get("task", "")
    target = doc.get("groundtruth", "")
    normalized_target = target.strip().lower()
    normalized_result = result.strip().lower()
    prediction = vlmsareblind_parse_response(normalized_result, task)
    if prediction is None:
        is_correct = False
    else:
        is_correct = prediction.strip().lower() == normalized_target
    return {"accuracy": float(is_correct), "accuracy_by_task": {"task": task, "is_correct": is_correct}}


def vlmsareblind_aggregate_by_task(results):
    task_correct = defaultdict(int)
    task_total = defaultdict(int)
    for result in results:
        task = result["task"].lower()
        task = VLMSAREBLIND_TASK_MAP.get(task, task)
        is_correct = result["is_correct"]
        task_total[task] += 1
        if is_correct:
            task_correct[task] += 1
    task_accuracy = {task: task_correct[task] / task_total[task] for task in task_correct}
    task_accuracy["task_mean"] = sum(task_accuracy.values()) / len(task_accuracy)
    return task_accuracy


# -- osworld_g/utils.py (its _parse_point is screenspot_v2's, Reimplementation._point) ------------------------
def osworld_g_doc_to_text(doc, lmms_eval_specific_kwargs=None):
    instruction = doc.get("instruction", "")
    return (
        "Identify the UI target for the instruction and output exactly one click point as [x, y]. "
        "You may use either normalized coordinates in [0, 1] or absolute pixel coordinates. "
        "If the target does not exist, output [-1, -1].\n"
        f"Instruction: {instruction}"
    )


def osworld_g_to_absolute_point(point_xy, width, height):
    x, y = point_xy
    if 0 <= x <= 1 and 0 <= y <= 1:
        return x * width, y * height
    return x, y


def osworld_g_point_in_bbox(point_xy, bbox_xywh):
    x, y = point_xy
    left, top, box_w, box_h = bbox_xywh
    right = left + box_w
    bottom = top + box_h
    return left <= x <= right and top <= y <= bottom


def osworld_g_point_in_polygon(point_xy, polygon):
    x, y = point_xy
    if len(polygon) == 4:
        left, top, right, bottom = polygon
        if left > right:
            left, right = right, left
        if top > bottom:
            top, bottom = bottom, top
        return left <= x <= right and top <= y <= bottom
    if len(polygon) % 2 != 0:
        return False
    n = len(polygon) // 2
    if n < 3:
        return False
    inside = False
    j = n - 1
    for i in range(n):
        xi, yi = polygon[i * 2], polygon[i * 2 + 1]
        xj, yj = polygon[j * 2], polygon[j * 2 + 1]
        intersects = (yi > y) != (yj > y)
        if intersects:
            x_cross = (xj - xi) * (y - yi) / (yj - yi) + xi
            if x < x_cross:
                inside = not inside
        j = i
    return inside


def osworld_g_process_results(doc, result, parse_point):
    prediction = result[0] if result else ""
    parsed = parse_point(prediction)
    image_size = doc.get("image_size")
    if isinstance(image_size, list) and len(image_size) == 2 and image_size[0] > 0 and image_size[1] > 0:
        width, height = image_size[0], image_size[1]
    else:
        width, height = doc["image"].convert("RGB").size
    box_type = str(doc.get("box_type", "")).lower()
    is_correct = False
    if parsed is not None:
        point_abs = osworld_g_to_absolute_point(parsed, width, height)
        if box_type == "bbox":
            is_correct = osworld_g_point_in_bbox(point_abs, doc.get("box_coordinates", [0, 0, 0, 0]))
        elif box_type == "polygon":
            is_correct = osworld_g_point_in_polygon(point_abs, doc.get("box_coordinates", []))
        elif box_type == "refusal":
            is_correct = point_abs[0] < 0 and point_abs[1] < 0
    record = {"correct": is_correct, "box_type": box_type}
    return {"osworld_g_acc": record, "osworld_g_bbox_acc": record, "osworld_g_polygon_acc": record, "osworld_g_refusal_acc": record}  # fmt: skip


def osworld_g_aggregate(results, target_type=None):
    filtered = [r for r in results if target_type is None or r.get("box_type") == target_type]
    if not filtered:
        return 0.0
    return sum(1 for r in filtered if r.get("correct")) / len(filtered)


# -- groundingme/{groundingme.yaml, utils.py} ----------------------------------------------------------------
GROUNDINGME_PROMPT = "All spatial relationships are defined from the viewer's perspective, where 'front' means closer to the viewer and 'back' means farther from the viewer. Please provide the bounding box coordinate of the object the following statement describes:\n{description}\nEnsure that all details mentioned about the object are accurate. Provide at most one bounding box. If a matching object is found, provide its bounding box as a JSON in the format {{\"bbox_2d\": [x1, y1, x2, y2]}}. If no matching object is found, output {{\"bbox_2d\": null}}."
# the yaml's metric_list: (metric without "groundingme_", the name its aggregation function passes on)
GROUNDINGME_METRICS = [('IoU', 'IoU'), ('ACC@0.5', 'ACC@0.5'), ('ACC@0.75', 'ACC@0.75'), ('ACC@0.9', 'ACC@0.9'), ('Center_ACC', 'Center_ACC'), ('MACC', 'MACC'), ('Discriminative_ACC@0.5', 'Discriminative_ACC@0.5'), ('Discriminative_ACC@0.75', 'Discriminative_ACC@0.75'), ('Discriminative_ACC@0.9', 'Discriminative_ACC@0.9'), ('Discriminative_MACC', 'Discriminative_MACC'), ('Spatial_ACC@0.5', 'Spatial_ACC@0.5'), ('Spatial_ACC@0.75', 'Spatial_ACC@0.75'), ('Spatial_ACC@0.9', 'Spatial_ACC@0.9'), ('Spatial_MACC', 'Spatial_MACC'), ('Limited_ACC@0.5', 'Limited_ACC@0.5'), ('Limited_ACC@0.75', 'Limited_ACC@0.75'), ('Limited_ACC@0.9', 'Limited_ACC@0.9'), ('Limited_MACC', 'Limited_MACC'), ('Rejection_ACC', 'Rejection_ACC@0.5'), ('D_Appearance_ACC@0.5', 'D_Appearance_ACC@0.5'), ('D_Appearance_ACC@0.75', 'D_Appearance_ACC@0.75'), ('D_Appearance_ACC@0.9', 'D_Appearance_ACC@0.9'), ('D_Appearance_MACC', 'D_Appearance_MACC'), ('D_Component_ACC@0.5', 'D_Component_ACC@0.5'), ('D_Component_ACC@0.75', 'D_Component_ACC@0.75'), ('D_Component_ACC@0.9', 'D_Component_ACC@0.9'), ('D_Component_MACC', 'D_Component_MACC'), ('D_Text_ACC@0.5', 'D_Text_ACC@0.5'), ('D_Text_ACC@0.75', 'D_Text_ACC@0.75'), ('D_Text_ACC@0.9', 'D_Text_ACC@0.9'), ('D_Text_MACC', 'D_Text_MACC'), ('D_State_ACC@0.5', 'D_State_ACC@0.5'), ('D_State_ACC@0.75', 'D_State_ACC@0.75'), ('D_State_ACC@0.9', 'D_State_ACC@0.9'), ('D_State_MACC', 'D_State_MACC'), ('Relationship_ACC@0.5', 'Relationship_ACC@0.5'), ('Relationship_ACC@0.75', 'Relationship_ACC@0.75'), ('Relationship_ACC@0.9', 'Relationship_ACC@0.9'), ('Relationship_MACC', 'Relationship_MACC'), ('Counting_ACC@0.5', 'Counting_ACC@0.5'), ('Counting_ACC@0.75', 'Counting_ACC@0.75'), ('Counting_ACC@0.9', 'Counting_ACC@0.9'), ('Counting_MACC', 'Counting_MACC'), ('Occlusion_ACC@0.5', 'Occlusion_ACC@0.5'), ('Occlusion_ACC@0.75', 'Occlusion_ACC@0.75'), ('Occlusion_ACC@0.9', 'Occlusion_ACC@0.9'), ('Occlusion_MACC', 'Occlusion_MACC'), ('Small_ACC@0.5', 'Small_ACC@0.5'), ('Small_ACC@0.75', 'Small_ACC@0.75'), ('Small_ACC@0.9', 'Small_ACC@0.9'), ('Small_MACC', 'Small_MACC'), ('R_Appearance_ACC', 'R_Appearance_ACC@0.5'), ('R_Component_ACC', 'R_Component_ACC@0.5'), ('R_Text_ACC', 'R_Text_ACC@0.5'), ('R_State_ACC', 'R_State_ACC@0.5')]  # fmt: skip


def groundingme_smart_resize_mimo(height, width, factor=28, min_pixels=28 * 28 * 8, max_pixels=28 * 28 * 4096):
    if max(height, width) < 10:
        raise ValueError(f"At least one dimension must be larger than 10 pixels, got height:{height}, width:{width}")
    elif min(height, width) < factor:
        if height < width:
            height = factor
            width = int(width * (factor / height))
        else:
            width = factor
            height = int(height * (factor / width))
    elif max(height, width) / min(height, width) > 200:
        raise ValueError(
            f"absolute aspect ratio must be smaller than 200, got {max(height, width) / min(height, width)}"
        )
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = math.floor(height / beta / factor) * factor
        w_bar = math.floor(width / beta / factor) * factor
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def groundingme_smart_resize_qwen(height, width, factor=28, min_pixels=4 * 28 * 28, max_pixels=16384 * 28 * 28):
    if max(height, width) / min(height, width) > 200:
        raise ValueError(
            f"absolute aspect ratio must be smaller than {200}, got {max(height, width) / min(height, width)}"
        )
    h_bar = max(factor, int(round(height / factor) * factor))
    w_bar = max(factor, int(round(width / factor) * factor))
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, int(math.floor(height / beta / factor) * factor))
        w_bar = max(factor, int(math.floor(width / beta / factor) * factor))
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = max(factor, int(math.ceil(height * beta / factor) * factor))
        w_bar = max(factor, int(math.ceil(width * beta / factor) * factor))
    return h_bar, w_bar


def groundingme_normalize_bbox(bbox, width, height):
    if all(coord <= 1 for coord in bbox):
        return [bbox[0] * width, bbox[1] * height, bbox[2] * width, bbox[3] * height]
    else:
        return [bbox[0] / 999 * width, bbox[1] / 999 * height, bbox[2] / 999 * width, bbox[3] / 999 * height]


def groundingme_convert_bbox_from_mimo(bbox, width, height):
    mimo_width, mimo_height = groundingme_smart_resize_mimo(height, width)
    return [
        bbox[0] / mimo_width * width,
        bbox[1] / mimo_height * height,
        bbox[2] / mimo_width * width,
        bbox[3] / mimo_height * height,
    ]


def groundingme_convert_bbox_from_qwen(bbox, width, height):
    qwen_width, qwen_height = groundingme_smart_resize_qwen(height, width)
    return [
        bbox[0] / qwen_width * width,
        bbox[1] / qwen_height * height,
        bbox[2] / qwen_width * width,
        bbox[3] / qwen_height * height,
    ]


def groundingme_doc_to_text(doc):
    assert isinstance(doc["description"], str), "Answer must be a string"
    return GROUNDINGME_PROMPT.format(description=doc["description"])


def groundingme_parse_bbox(input_str):
    try:
        match = re.search(r'\{.*"bbox_2d".*\}', input_str, re.DOTALL)
        if match:
            json_str = match.group(0)
            data = json.loads(json_str)
            bbox = data["bbox_2d"]
            if bbox is None:
                return [0, 0, 0, 0]
            if isinstance(bbox, list) and len(bbox) == 4:
                return [float(coord) for coord in bbox]
            else:
                raise ValueError(f"Invalid bbox format: {bbox}")
        else:
            raise ValueError(f"No bbox found in input string: {input_str}")
    except (ValueError, AttributeError, IndexError):
        pattern1 = r"(-?\d+(?:\.\d+)?)[\s,]+(-?\d+(?:\.\d+)?)[\s,]+(-?\d+(?:\.\d+)?)[\s,]+(-?\d+(?:\.\d+)?)"
        matches = re.findall(pattern1, input_str)
        if matches:
            last_match = matches[-1]
            return [float(coord) for coord in last_match]
        else:
            return [0, 0, 0, 0]


def groundingme_compute_iou(box1, box2):
    if box1 == [0, 0, 0, 0]:
        if box2 == [0, 0, 0, 0]:
            return 1
        else:
            return 0
    x_left = max(box1[0], box2[0])
    y_top = max(box1[1], box2[1])
    x_right = min(box1[2], box2[2])
    y_bottom = min(box1[3], box2[3])
    intersection_area = max(0, x_right - x_left) * max(0, y_bottom - y_top)
    box1_area = (box1[2] - box1[0]) * (box1[3] - box1[1])
    box2_area = (box2[2] - box2[0]) * (box2[3] - box2[1])
    union_area = box1_area + box2_area - intersection_area
    iou = intersection_area / union_area
    return iou


def groundingme_compute_center_accuracy(box1, box2):
    center_x = (box2[0] + box2[2]) / 2
    center_y = (box2[1] + box2[3]) / 2
    return box1[0] <= center_x <= box1[2] and box1[1] <= center_y <= box1[3]


def groundingme_process_result(doc, result):
    pred_raw = groundingme_parse_bbox(result[0] if len(result) > 0 else "")
    bbox = doc["bbox"] if doc["subtask_l1"] != "Rejection" else [0, 0, 0, 0]
    height, width = doc["height"], doc["width"]
    pred_candidates = [
        pred_raw,
        groundingme_normalize_bbox(pred_raw, width, height),
        groundingme_convert_bbox_from_mimo(pred_raw, width, height),
        groundingme_convert_bbox_from_qwen(pred_raw, width, height),
    ]
    ious = [groundingme_compute_iou(bbox, pred) for pred in pred_candidates]
    best_idx = ious.index(max(ious))
    pred_best, iou = pred_candidates[best_idx], ious[best_idx]
    center_acc = groundingme_compute_center_accuracy(bbox, pred_best)
    thresholds = [round(0.5 + x * 0.05, 2) for x in range(10)]
    accs = [iou >= t for t in thresholds]
    data_dict = {"subtask_l1": doc["subtask_l1"], "subtask_l2": doc["subtask_l2"], "description": doc["description"],
                 "pred": pred_best, "ann_id": doc["id"], "bbox": bbox, "iou": iou, "center_acc": center_acc,
                 "acc_5": accs[0], "acc_75": accs[5], "acc_9": accs[8], "macc": sum(accs) / len(accs)}  # fmt: skip
    return {f"groundingme_{metric}": data_dict for metric, _ in GROUNDINGME_METRICS}


def groundingme_aggregation_result(results, metric):
    is_l1_metric, is_l2_metric, l1_name, l2_name = 0, 0, 0, 0
    if "Discriminative" in metric or "Spatial" in metric or "Limited" in metric or "Rejection" in metric:
        is_l1_metric = 1
        l1_name = metric.split("_")[0]
    elif "D_Appearance" in metric or "D_Component" in metric or "D_Text" in metric or "D_State" in metric:
        is_l2_metric = 1
        l1_name = "Discriminative"
        l2_name = metric.split("_")[1]
    elif "R_Appearance" in metric or "R_Component" in metric or "R_Text" in metric or "R_State" in metric:
        is_l2_metric = 1
        l1_name = "Rejection"
        l2_name = metric.split("_")[1]
    elif "Relationship" in metric or "Counting" in metric:
        is_l2_metric = 1
        l1_name = "Spatial"
        l2_name = metric.split("_")[0]
    elif "Occlusion" in metric or "Small" in metric:
        is_l2_metric = 1
        l1_name = "Limited"
        l2_name = metric.split("_")[0]
    if "ACC@0.5" in metric:
        metric_type = "ACC@0.5"
    elif "ACC@0.75" in metric:
        metric_type = "ACC@0.75"
    elif "ACC@0.9" in metric:
        metric_type = "ACC@0.9"
    elif "MACC" in metric:
        metric_type = "MACC"
    else:
        metric_type = metric
    results_dict = {metric: []}
    for result in results:
        if metric_type == "ACC@0.5":
            score = result["acc_5"]
        elif metric_type == "ACC@0.75":
            score = result["acc_75"]
        elif metric_type == "ACC@0.9":
            score = result["acc_9"]
        elif metric_type == "MACC":
            score = result["macc"]
        elif metric_type == "Center_ACC":
            score = result["center_acc"]
        elif metric_type == "IoU":
            score = result["iou"]
        if is_l1_metric == 1:
            if result["subtask_l1"] == l1_name:
                results_dict[metric].append(score)
        elif is_l2_metric == 1:
            if result["subtask_l1"] == l1_name and result["subtask_l2"] == l2_name:
                results_dict[metric].append(score)
        else:
            results_dict[metric].append(score)
    scores = results_dict[metric]
    if not scores:
        return float("nan")
    return sum(scores) / len(scores)


# -- visualwebbench/{prompts.py, utils.py} (the accuracy tasks) ------------------------------------------
VISUALWEBBENCH_PROMPTS = {
    "element_ground": """In this website screenshot, I have labeled IDs for some HTML elements as candicates. Tell me which one best matches the description: {element_desc}

You should directly tell me your choice in a single uppercase letter, and do not output any explanation or any other contents.
""",
    "action_prediction": """You are given a screenshot of a webpage with a red rectangle bounding box. The [x1, y1, x2, y2] coordinates of the bounding box is {bbox_ratio}.
Please select the best webpage description that matches the new webpage after clicking the selected element in the bounding box:
{choices_text}

You should directly tell me your choice in a single uppercase letter, and do not output any explanation or any other contents.
""",
    "action_ground": """In this website screenshot, I have labeled IDs for some HTML elements as candicates. Tell me which one I should click to complete the following task: {instruction}

You should directly tell me your choice in a single uppercase letter, and do not output any explanation or any other contents.
""",
}


def visualwebbench_doc_to_text(doc, lmms_eval_specific_kwargs=None):
    prompt = VISUALWEBBENCH_PROMPTS[doc["task_type"]]
    if doc["task_type"] == "element_ground":
        cur_prompt = prompt.format(element_desc=doc["elem_desc"])
    elif doc["task_type"] == "action_prediction":
        cur_prompt = prompt.format(bbox_ratio=doc["bbox"], choices_text=doc["options"])
    elif doc["task_type"] == "action_ground":
        cur_prompt = prompt.format(instruction=doc["instruction"])
    return cur_prompt


def visualwebbench_doc_to_target(doc):
    if "answer" in doc:
        return doc["answer"]
    elif "target" in doc:
        return doc["target"]
    else:
        return ""


def visualwebbench_parse_multi_choice_response(response, all_choices):
    if len(response) == 1:
        return response.upper()
    elif not response:
        return "a"
    elif re.match(r"[A-Z]\.", response):
        return response[0]
    for char in [",", ".", "!", "?", ";", ":", "'", '"']:
        response = response.replace(char, "")
    response = " " + response + " "
    ans_with_brack = False
    candidates = []
    for choice in all_choices:
        if f"({choice})" in response:
            candidates.append(choice)
            ans_with_brack = True
    if len(candidates) == 0:
        for choice in all_choices:
            if f" {choice} " in response:
                candidates.append(choice)
    if len(candidates) == 0:
        pred_index = "z"
    elif len(candidates) > 1:
        start_indexes = []
        if ans_with_brack:
            for can in candidates:
                index = response.rfind(f"({can})")
                start_indexes.append(index)
        else:
            for can in candidates:
                index = response.rfind(f" {can} ")
                start_indexes.append(index)
        pred_index = candidates[np.argmax(start_indexes)]
    else:
        pred_index = candidates[0]
    return pred_index


def visualwebbench_process_results_accuracy(doc, results):
    pred = results[0] if len(results) > 0 else ""
    gold = doc["answer"] if "answer" in doc else doc.get("target", 0)
    cur_pred = visualwebbench_parse_multi_choice_response(pred, [chr(ord("A") + i) for i in range(8)])
    try:
        if ord("A") <= ord(cur_pred) <= ord("Z"):
            cur_pred = ord(cur_pred) - ord("A")
        else:
            cur_pred = -1
    except:  # noqa: E722 (as there)
        cur_pred = -1
    is_correct = cur_pred == gold
    return {"accuracy": 100.0 if is_correct else 0.0}


# -- vlms_are_biased/utils.py ------------------------------------------------------------------------------
def vlms_are_biased_doc_to_text(doc, lmms_eval_specific_kwargs=None):
    if lmms_eval_specific_kwargs is None:
        lmms_eval_specific_kwargs = {}
    prompt = doc.get("prompt", "")
    pre_prompt = lmms_eval_specific_kwargs.get("pre_prompt", "")
    post_prompt = lmms_eval_specific_kwargs.get("post_prompt", "")
    return f"{pre_prompt}{prompt}{post_prompt}"


def vlms_are_biased_process_results(doc, results):
    pred = results[0].strip()
    ground_truth = str(doc["ground_truth"]).strip()
    expected_bias = str(doc["expected_bias"]).strip()
    topic = doc.get("topic", "unknown")
    pred_normalized = pred.lower().strip("{}").strip()
    gt_normalized = ground_truth.lower().strip("{}").strip()
    bias_normalized = expected_bias.lower().strip("{}").strip()
    is_correct = pred_normalized == gt_normalized
    matches_bias = pred_normalized == bias_normalized
    if not is_correct and not matches_bias:
        pred_numbers = "".join(c for c in pred_normalized if c.isdigit())
        gt_numbers = "".join(c for c in gt_normalized if c.isdigit())
        bias_numbers = "".join(c for c in bias_normalized if c.isdigit())
        if pred_numbers and gt_numbers:
            is_correct = pred_numbers == gt_numbers
        if pred_numbers and bias_numbers:
            matches_bias = pred_numbers == bias_numbers
    return {"accuracy": float(is_correct), "bias_ratio": float(matches_bias), "accuracy_by_topic": {"topic": topic, "correct": is_correct}}  # fmt: skip


def vlms_are_biased_aggregate_by_topic(results):
    topic_correct = defaultdict(int)
    topic_total = defaultdict(int)
    for result in results:
        topic = result["topic"]
        correct = result["correct"]
        topic_total[topic] += 1
        if correct:
            topic_correct[topic] += 1
    topic_accuracy = {}
    for topic in topic_total:
        accuracy = topic_correct[topic] / topic_total[topic]
        topic_accuracy[topic] = accuracy
    total_correct = sum(topic_correct.values())
    total = sum(topic_total.values())
    topic_accuracy["overall"] = total_correct / total if total > 0 else 0.0
    return topic_accuracy


# -- vmcbench/utils.py --------------------------------------------------------------------------------------
VMCBENCH_KWARGS = {
    "pre_prompt": "",
    "post_prompt": "Answer with the option's letter from the given choices directly.\n",
}
VMCBENCH_CATEGORY_MAP = {
    "SEEDBench": "general", "MMStar": "general", "A-OKVQA": "general", "VizWiz": "general", "MMVet": "general",
    "VQAv2": "general", "OKVQA": "general", "MMMU": "reason", "MathVista": "reason", "ScienceQA": "reason",
    "RealWorldQA": "reason", "GQA": "reason", "MathVision": "reason", "TextVQA": "ocr", "OCRVQA": "ocr", "AI2D": "doc",
    "ChartQA": "doc", "DocVQA": "doc", "InfoVQA": "doc", "TableVQABench": "doc",
}  # fmt: skip


def vmcbench_doc_to_text(doc, lmms_eval_specific_kwargs=None):
    question = doc["question"]
    options = {cand: doc[cand] for cand in "ABCD"}
    options_prompt = "Options:\n"
    for key, item in options.items():
        options_prompt += f"{key}. {item}\n"
    prompt = f"Question: {question}\n{options_prompt}"
    if "pre_prompt" in lmms_eval_specific_kwargs and lmms_eval_specific_kwargs["pre_prompt"] != "":
        prompt = f"{lmms_eval_specific_kwargs['pre_prompt']}{prompt}"
    if "post_prompt" in lmms_eval_specific_kwargs and lmms_eval_specific_kwargs["post_prompt"] != "":
        prompt = f"{prompt}{lmms_eval_specific_kwargs['post_prompt']}"
    return prompt


def vmcbench_parse_multi_choice_response(response, all_choices, index2ans, rng):
    """parse_multi_choice_response, its random.choice drawn from `rng`."""
    response = str(response)
    for char in [",", ".", "!", "?", ";", ":", "'"]:
        response = response.strip(char)
    response = " " + response + " "
    index_ans = True
    ans_with_brack = False
    candidates = []
    for choice in all_choices:
        if f"({choice})" in response or f"{choice}. " in response:
            candidates.append(choice)
            ans_with_brack = True
    if len(candidates) == 0:
        for choice in all_choices:
            if f" {choice} " in response:
                candidates.append(choice)
    if len(candidates) == 0 and len(response.split()) > 5:
        for index, ans in index2ans.items():
            if ans.lower() in response.lower():
                candidates.append(index)
                index_ans = False
    if len(candidates) == 0:
        pred_index = rng.choice(all_choices)
    elif len(candidates) > 1:
        start_indexes = []
        if index_ans:
            if ans_with_brack:
                for can in candidates:
                    index = response.rfind(f"({can})")
                    start_indexes.append(index)
            else:
                for can in candidates:
                    index = response.rfind(f" {can} ")
                    start_indexes.append(index)
        else:
            for can in candidates:
                index = response.lower().rfind(index2ans[can].lower())
                start_indexes.append(index)
        pred_index = candidates[np.argmax(start_indexes)]
    else:
        pred_index = candidates[0]
    return pred_index


def vmcbench_process_results(doc, results):
    response = results[0]
    all_choices = []
    for i in range(4):
        all_choices.append(chr(65 + i))
    index2ans = {index: doc[index] for index in all_choices}
    pred_index = vmcbench_parse_multi_choice_response(response, all_choices, index2ans, random.Random(doc["index"]))
    answer = doc["answer"]
    score = int(pred_index == answer)
    category = doc["category"]
    main_category = VMCBENCH_CATEGORY_MAP[category]
    return {
        main_category: {"question_id": doc["index"], "category": category, "score": score},
        "average": {"question_id": doc["index"], "category": category, "score": score},
    }


def vmcbench_aggregate_results(results):
    scores = [result["score"] for result in results]
    return sum(scores) / len(scores)


# -- mirb/utils.py (its extract_numbers, normalize_str, parse_open_response and eval_open are mmmu/utils.py's,
# line for line: the mmmu_ transcriptions above) ---------------------------------------------------------------
MIRB_KWARGS = {"pre_prompt": "", "post_prompt": ""}


def mirb_get_task_instruction(dataset):
    if dataset in ["analogy", "attribute", "plot_code", "visual_chain", "sightseeing"]:
        instr = "Answer with a single word."
    elif dataset in ["codeu", "food", "image_jigsaw"]:
        instr = "Answer with the option symbol."
    elif dataset in ["arxiv"]:
        instr = "Answer with the paper title."
    elif dataset in ["count"]:
        instr = "Answer with a single number."
    elif dataset in ["3d_scene"]:
        instr = "The following images are different views of the same 3D scene. Answer with a single number."
    return instr


def mirb_doc_to_text(doc, lmms_eval_specific_kwargs=None):
    subset, question = doc["subset"], doc["questions"]
    task_instruction = mirb_get_task_instruction(subset)
    post_prompt = lmms_eval_specific_kwargs["post_prompt"]
    pre_prompt = lmms_eval_specific_kwargs["pre_prompt"]
    return f"{pre_prompt}{task_instruction}{question}{post_prompt}"


def mirb_parse_multi_choice_response(response):
    filtered_resps = []
    option_letter_regex = re.compile(r"^\s*([A-Z])\.")
    match = option_letter_regex.match(response)
    if match:
        filtered_resps = match.group(1)
    else:
        filtered_resps = response
    return filtered_resps


def mirb_process_results(doc, results):
    pred = results[0]
    subset, answer = doc["subset"], doc["answers"]  # noqa: F841 (as there)
    if answer in ["A", "B", "C", "D", "E"]:
        parsed_pred = mirb_parse_multi_choice_response(pred)
    else:
        parsed_pred = mmmu_parse_open_response(pred)
    task_type = doc["subset"]
    data_dict = {"question_id": doc["question_id"], "subset": task_type, "pred_answer": parsed_pred, "answers": doc["answers"]}  # fmt: skip
    return {"mirb_score": data_dict}


def mirb_eval_multi_choice(gold_i, pred_i):
    correct = False
    if isinstance(gold_i, list):
        for answer in gold_i:
            if answer == pred_i:
                correct = True
                break
    else:
        if gold_i == pred_i:
            correct = True
    return correct


def mirb_aggregation(results):
    """mirb_aggregation, its printed shares returned too: (the score, per subset, per dimension);
    a dimension missing a subset raises there, and is left out here."""
    task_num = {}
    score = 0
    task_score = {}
    for result in results:
        if result["subset"] not in task_score:
            task_score[result["subset"]] = 0
            task_num[result["subset"]] = 0
        if result["answers"] in ["A", "B", "C", "D", "E"]:
            correct = mirb_eval_multi_choice(result["answers"], result["pred_answer"])
            task_score[result["subset"]] += correct
            score += correct
        else:
            correct = mmmu_eval_open(result["answers"], result["pred_answer"])
            task_score[result["subset"]] += correct
            score += correct
        task_num[result["subset"]] += 1
    avg_score = score / len(results)
    task_score = {k: v / task_num[k] for k, v in task_score.items()}
    groups = {"Knowledge": ["food", "sightseeing"], "Reasoning": ["codeu", "plot_code", "analogy", "3d_scene"], "Perception": ["image_jigsaw", "count", "attribute"], "Multi-Hop": ["visual_chain", "arxiv"]}  # fmt: skip
    averages = {g: np.mean([task_score[f] for f in fs]) for g, fs in groups.items() if all(f in task_score for f in fs)}
    return avg_score, task_score, averages


# -- multihopspatial/utils.py (its private helpers prefixed multihopspatial_, docstrings left out) ----------------
multihopspatial_TAG_RE = re.compile(r"</?(?:ATT|POS|REL)>")


def multihopspatial_remove_tags(question: str) -> str:
    cleaned = multihopspatial_TAG_RE.sub("", question)
    return re.sub(r"\s+", " ", cleaned).strip()


def multihopspatial_build_prompt(question: str) -> str:
    clean_q = multihopspatial_remove_tags(question)
    return (
        f"{clean_q}\n\n"
        "Please respond in the following format:\n"
        'Answer: (your choice, e.g., "(a) object name")\n'
        'Bounding Box: {"bbox_2d": [x1, y1, x2, y2]}\n\n'
        "Important: Use NORMALIZED coordinates (0.0 to 1.0).\n"
        'Example: {"bbox_2d": [0.25, 0.1, 0.75, 0.8]}'
    )


def multihopspatial_doc_to_visual(doc: dict[str, Any]) -> list[Any]:
    image = doc["image"]
    return [image.convert("RGB")]


def multihopspatial_doc_to_text(doc: dict[str, Any], lmms_eval_specific_kwargs=None) -> str:
    return multihopspatial_build_prompt(doc["question"])


def multihopspatial_parse_mcq_answer(text: str) -> str | None:
    if not text:
        return None
    m = re.search(r"Answer:\s*(\([a-d]\)\s*[^\n]*)", text, re.IGNORECASE)
    if m:
        return m.group(1).strip()
    m = re.search(r"Answer:\s*([a-d])\)\s*([^\n]*)", text, re.IGNORECASE)
    if m:
        letter, desc = m.group(1).lower(), m.group(2).strip()
        return f"({letter}) {desc}" if desc else f"({letter})"
    m = re.search(r"Answer:\s*([a-d])\s*$", text, re.IGNORECASE | re.MULTILINE)
    if m:
        return f"({m.group(1).lower()})"
    m = re.search(r"(\([a-d]\)\s*[^\n,\[\]]*)", text, re.IGNORECASE)
    if m:
        return m.group(1).strip()
    return None


def multihopspatial_extract_choice_letter(text: str | None) -> str | None:
    if text is None:
        return None
    m = re.search(r"\(([a-d])\)", text, re.IGNORECASE)
    return m.group(1).lower() if m else None


# A single coordinate: an unsigned number like "12", "0.5" or ".5". The pattern
# only matches well-formed floats, so float() below can never raise on it.
multihopspatial_NUM = r"(\d*\.?\d+)"
multihopspatial_BBOX2D_RE = r'"bbox_2d"\s*:\s*\[\s*' + r"\s*,\s*".join([multihopspatial_NUM] * 4) + r"\s*\]"
multihopspatial_BBOX_LINE_RE = r"Bounding Box:\s*\[\s*" + r"\s*,\s*".join([multihopspatial_NUM] * 4) + r"\s*\]"
multihopspatial_BBOX_BARE_RE = r"\[\s*" + r"\s*,\s*".join([multihopspatial_NUM] * 4) + r"\s*\]"


def multihopspatial_parse_bbox(response_text: str) -> list[float] | None:
    groups = None
    m = re.search(multihopspatial_BBOX2D_RE, response_text)
    if m is None:
        m = re.search(multihopspatial_BBOX_LINE_RE, response_text, re.IGNORECASE)
    if m is not None:
        groups = m.groups()
    else:
        found = re.findall(multihopspatial_BBOX_BARE_RE, response_text)
        if found:
            groups = found[0]

    if groups is None:
        return None
    try:
        bbox = [float(v) for v in groups]
    except (TypeError, ValueError):
        return None

    if any(v > 1 for v in bbox):
        bbox = [v / 1000.0 for v in bbox]
    return bbox


def multihopspatial_is_valid_norm_bbox(bbox: list[float] | None) -> bool:
    if bbox is None or len(bbox) != 4:
        return False
    x1, y1, x2, y2 = bbox
    if any(v < 0 or v > 1 for v in bbox):
        return False
    return x2 > x1 and y2 > y1


def multihopspatial_image_dims(doc: dict[str, Any]) -> tuple[int, int]:
    res = doc.get("image_resolution")
    if isinstance(res, str) and "x" in res:
        try:
            w, h = res.lower().split("x")
            return int(w), int(h)
        except (ValueError, TypeError):
            pass
    image = doc["image"]
    return image.size  # (width, height)


def multihopspatial_calculate_iou(
    bbox_gt_xywh: list[float], bbox_pred_norm: list[float], img_w: int, img_h: int
) -> float | None:
    if bbox_gt_xywh is None or bbox_pred_norm is None:
        return None
    if len(bbox_gt_xywh) != 4 or len(bbox_pred_norm) != 4:
        return None
    try:
        gx, gy, gw, gh = bbox_gt_xywh
        gt = [gx, gy, gx + gw, gy + gh]
        pred = [
            bbox_pred_norm[0] * img_w,
            bbox_pred_norm[1] * img_h,
            bbox_pred_norm[2] * img_w,
            bbox_pred_norm[3] * img_h,
        ]
        ix1, iy1 = max(gt[0], pred[0]), max(gt[1], pred[1])
        ix2, iy2 = min(gt[2], pred[2]), min(gt[3], pred[3])
        if ix2 <= ix1 or iy2 <= iy1:
            return 0.0
        inter = (ix2 - ix1) * (iy2 - iy1)
        area_gt = (gt[2] - gt[0]) * (gt[3] - gt[1])
        area_pred = (pred[2] - pred[0]) * (pred[3] - pred[1])
        union = area_gt + area_pred - inter
        if union <= 0:
            return 0.0
        return round(inter / union, 4)
    except (TypeError, ValueError):
        return None


def multihopspatial_process_results(doc: dict[str, Any], results: list[str]) -> dict[str, Any]:
    prediction_text = results[0] if results else ""

    prediction = multihopspatial_parse_mcq_answer(prediction_text)
    pred_letter = multihopspatial_extract_choice_letter(prediction)
    gt_letter = multihopspatial_extract_choice_letter(doc.get("answer"))
    mcq_correct = pred_letter is not None and pred_letter == gt_letter

    pred_bbox = multihopspatial_parse_bbox(prediction_text)
    iou = None
    if multihopspatial_is_valid_norm_bbox(pred_bbox):
        img_w, img_h = multihopspatial_image_dims(doc)
        iou = multihopspatial_calculate_iou(doc.get("bbox"), pred_bbox, img_w, img_h)

    record = {
        "mcq_correct": bool(mcq_correct),
        "iou": iou,
        "hop": doc.get("hop"),
        "view": doc.get("view"),
    }
    return {"mcq_acc": record, "acc50iou": record, "avg_iou": record}


def multihopspatial_aggregate_mcq_acc(results: list[dict[str, Any]]) -> float:
    if not results:
        return 0.0
    correct = sum(1 for r in results if r["mcq_correct"])
    return round(correct / len(results) * 100, 2)


def multihopspatial_aggregate_acc50iou(results: list[dict[str, Any]]) -> float:
    if not results:
        return 0.0
    hit = sum(1 for r in results if r["mcq_correct"] and r["iou"] is not None and r["iou"] >= 0.5)
    return round(hit / len(results) * 100, 2)


def multihopspatial_aggregate_avg_iou(results: list[dict[str, Any]]) -> float:
    ious = [r["iou"] for r in results if r["mcq_correct"] and r["iou"] is not None]
    if not ious:
        return 0.0
    return round(sum(ious) / len(ious) * 100, 2)


# -- simplevqa/utils.py (EvalAIAnswerProcessor: the textvqa transcription below) --------------------------------
SIMPLEVQA_KWARGS = {"pre_prompt": "", "post_prompt": "\nAnswer the question using a short phrase."}


def simplevqa_doc_to_text(doc, lmms_eval_specific_kwargs=None):
    if lmms_eval_specific_kwargs is None:
        lmms_eval_specific_kwargs = {}
    pre_prompt = lmms_eval_specific_kwargs.get("pre_prompt", "")
    post_prompt = lmms_eval_specific_kwargs.get("post_prompt", "")
    question = doc["question"].strip()
    return f"{pre_prompt}{question}{post_prompt}"


def simplevqa_process_results(doc, result):
    assert len(result) == 1, f"The result should be a list of length 1, but got {len(result)}."
    processor = EvalAIAnswerProcessor()
    prediction = processor(result[0])
    reference = processor(doc["answer"])
    return {"exact_match": float(prediction == reference)}


# -- erqa/utils.py -------------------------------------------------------------------------------------------
def erqa_doc_to_text(doc):
    return doc["question"]


def erqa_process_results(doc, results):
    grounded_output = doc["answer"]
    response = results[0]
    pred_letter = extract_mcq_answer(response, choices=["A", "B", "C", "D"])
    flag = pred_letter == grounded_output
    submission = {"id": doc["question_id"], "gt_content": grounded_output, "pred": response, "sub_task": doc["question_type"], "is_correct": flag}  # fmt: skip
    return {"erqa_acc": submission}


def erqa_aggregate_results(results):
    total_correct = sum(1 for sample in results if sample["is_correct"])
    return total_correct / len(results) if len(results) > 0 else 0


# -- 3dsrbench/utils.py (the default kwargs) ----------------------------------------------------------------
THREEDSR_CATEGORY_MAPPING = {
    "height_higher": "height", "location_above": "location", "location_closer_to_camera": "location",
    "location_next_to": "location", "orientation_in_front_of": "orientation", "orientation_on_the_left": "orientation",
    "orientation_viewpoint": "orientation", "multi_object_closer_to": "multi_object",
    "multi_object_facing": "multi_object", "multi_object_viewpoint_towards_object": "multi_object",
    "multi_object_parallel": "multi_object", "multi_object_same_direction": "multi_object",
}  # fmt: skip
THREEDSR_MAIN = ["height", "location", "orientation", "multi_object"]


def threedsr_doc_to_text(doc, lmms_eval_specific_kwargs=None):
    lmms_eval_specific_kwargs = lmms_eval_specific_kwargs or {}
    pre_prompt = lmms_eval_specific_kwargs.get("pre_prompt", "")
    post_prompt = lmms_eval_specific_kwargs.get(
        "post_prompt", "Please select the correct answer from the options above. \n"
    )
    question = doc["question"]
    options = {}
    for cand in string.ascii_uppercase[:4]:
        if cand in doc and doc[cand] is not None:
            val = doc[cand]
            if isinstance(val, str) and val.lower() == "nan":
                continue
            if pd.isna(val):
                continue
            options[cand] = val
    options_prompt = "Options:\n"
    for key, item in options.items():
        options_prompt += f"{key}. {item}\n"
    prompt = ""
    if pre_prompt:
        prompt += pre_prompt
    prompt += f"Question: {question}\n"
    if options:
        prompt += options_prompt
    if post_prompt:
        prompt += post_prompt
    return prompt


def threedsr_extract_answer(text):
    if not text:
        return None
    text = text.strip()
    patterns = [r"^([A-D])[\.\s\)]", r"^([A-D])$", r"[Aa]nswer[:\s]+([A-D])", r"[Tt]he answer is[:\s]+([A-D])",
                r"[Mm]y answer is[:\s]+([A-D])", r"\(([A-D])\)", r"([A-D])\.", r"\b([A-D])\b"]  # fmt: skip
    for pattern in patterns:
        match = re.search(pattern, text)
        if match:
            return match.group(1).upper()
    return None


def threedsr_process_results(doc, results):
    pred = results[0].strip()
    score = 1.0 if threedsr_extract_answer(pred) == doc["answer"] else 0.0
    category = doc.get("category", "unknown")
    index = doc["index"]
    entry = {"index": index, "qid": doc.get("qid", index), "score": score, "category": category,
             "main_category": THREEDSR_CATEGORY_MAPPING.get(category, "other")}  # fmt: skip
    out = {name: entry for name in ("vanilla_accuracy", "flip_accuracy", "circular_accuracy", "flip_circular_accuracy")}
    out |= {f"{main}_accuracy": entry for main in THREEDSR_MAIN}
    for cat_name in THREEDSR_CATEGORY_MAPPING:
        out[f"{cat_name}_accuracy"] = entry
    return out


def threedsr_all_correct(results, key_of):
    """aggregate_flip_accuracy / aggregate_circular_accuracy / aggregate_flip_circular_accuracy."""
    if not results:
        return 0.0
    qid_groups = {}
    for r in results:
        qid_groups.setdefault(key_of(r["qid"]), []).append(r["score"])
    correct = total = 0
    for scores in qid_groups.values():
        group_correct = 1.0
        for s in scores:
            group_correct *= s
        if group_correct == 1.0:
            correct += 1
        total += 1
    return correct / total if total > 0 else 0.0


def threedsr_aggregations(circular):
    def main(cat):
        def agg(results):
            if not results:
                return 0.0
            scores = [r["score"] for r in results if r.get("main_category") == cat]
            if not scores:
                return 0.0
            return sum(scores) / len(scores)

        return agg

    def detailed(cat):
        def agg(results):
            scores = [r["score"] for r in results if r.get("category") == cat]
            return sum(scores) / len(scores) if scores else 0.0

        return agg

    out = {"vanilla_accuracy": lambda results: sum(r["score"] for r in results) / len(results) if results else 0.0}
    if circular:  # 3dsrbench_circular.yaml's metric_list
        out["flip_accuracy"] = lambda results: threedsr_all_correct(results, lambda q: q.replace("-flip", ""))
        out["circular_accuracy"] = lambda results: threedsr_all_correct(
            results, lambda q: q[:13] if "-flip" in q else q[:8]
        )
        out["flip_circular_accuracy"] = lambda results: threedsr_all_correct(results, lambda q: q[:8])
    out |= {f"{cat}_accuracy": main(cat) for cat in THREEDSR_MAIN}
    if not circular:  # 3dsrbench.yaml's
        out |= {f"{cat}_accuracy": detailed(cat) for cat in THREEDSR_CATEGORY_MAPPING}
    return out


# -- spatial457/utils.py (each level's yaml: its category kwarg) ---------------------------------------------
SPATIAL457_TASK_INSTRUCTIONS = {
    "L1_single": ("You are an intelligent chatbot designed to answer questions based on " "an image. Your task is to analyze the images, identify attributes of " "the objects, and then determine the answer to the question.\n"),
    "L2_objects": ("You are an intelligent chatbot designed to answer questions based on " "an image. Your task is to analyze the images, identify attributes of " "multiple objects, and then determine the answer to the question.\n"),
    "L3_2d_spatial": ("You are an intelligent chatbot designed to answer questions based on " "an image. Your task is to analyze the images, identify attributes of " "multiple objects and their spatial relationship from 2D projected " "camera view, and then determine the answer to the question.\n"),
    "L4_occ": ("You are an intelligent chatbot designed to answer questions based on " "an image. Your task is to analyze the images, identify attributes of " "multiple objects and their occlusion relationships, and then " "determine the answer to the question.\n"),
    "L4_pose": ("You are an intelligent chatbot designed to answer questions based on " "an image. Your task is to analyze the images, identify attributes of " "multiple objects and their facing direction in 3D space from the " "camera view, and then determine the answer to the question.\n"),
    "L5_6d_spatial": ("You are an intelligent chatbot designed to answer questions based on " "an image. Your task is to analyze the images, identify attributes of " "multiple objects and their spatial relationship from objects' " "perspective in 3D space, and then determine the answer to the " "question.\n"),
    "L5_collision": ("You are an intelligent chatbot designed to answer questions based on " "an image. Your task is to analyze the images, identify attributes of " "multiple objects and their potential collision given the assumption " "of moving direction in 3D space, and then determine the answer to " "the question.\n"),
}  # fmt: skip
SPATIAL457_REASONING_INSTRUCTION = (
    "First, you should identify the related objects referred in the questions, "
    "including their shape, color, size; then add a brief reasoning process "
    "about the questions. Each object in the image has a shape "
    "(e.g., 'airliner'), a size (only can be 'small' or 'large'), a color "
    "(e.g. 'blue'). The size of the object is either 'small' or 'large'. "
    "The color of the object is one of the following: 'gray', 'blue', "
    "'purple', 'brown', 'green', 'cyan', 'red', 'yellow'. The direction of "
    "the object is one of the following: 'left', 'right', 'front', 'back'.\n\n"
    "Second, give the answer based on the reasoning process. The answer should "
    "only be (1) a phrase, or (2) an integer [0-10] when asked for 'How many' "
    "or 'What is the number of', or (3) 'Yes' or 'No' when asked for "
    "'Is there'. If you think there are no possible answers or the question "
    "is not clear, choose the best answer that fits the question.\n\n"
    "Write your response into this json template: "
    "{'Reasoning': '<your reasons>', 'Answer': '<Your answer>'}"
)
SPATIAL457_LEVELS = ["L1_single", "L2_objects", "L3_2d_spatial", "L4_occ", "L4_pose", "L5_6d_spatial", "L5_collision"]


def spatial457_get_category_from_doc(doc):
    if "category" in doc:
        return doc["category"]
    question_index = doc.get("question_index", 0)
    if question_index < 200000:
        return "L1_single"
    elif question_index < 300000:
        return "L2_objects"
    elif question_index < 400000:
        return "L3_2d_spatial"
    elif question_index < 450000:
        return "L4_occ"
    elif question_index < 500000:
        return "L4_pose"
    elif question_index < 550000:
        return "L5_6d_spatial"
    else:
        return "L5_collision"


def spatial457_doc_to_text(doc, lmms_eval_specific_kwargs=None):
    lmms_eval_specific_kwargs = lmms_eval_specific_kwargs or {}
    question = doc.get("question", "")
    category = lmms_eval_specific_kwargs.get("category", spatial457_get_category_from_doc(doc))
    prompt = SPATIAL457_TASK_INSTRUCTIONS.get(category, "") + question + "\n" + SPATIAL457_REASONING_INSTRUCTION
    return lmms_eval_specific_kwargs.get("pre_prompt", "") + prompt + lmms_eval_specific_kwargs.get("post_prompt", "")


def spatial457_extract_answer_from_response(text):
    patterns = [r"['\"]?Answer['\"]?\s*[:=]\s*['\"]([^'\"]+)['\"]", r"Answer['\"]?\s*:\s*['\"]?(\w+)",
                r"['\"]Answer['\"]:\s*(\d+)"]  # fmt: skip
    for pattern in patterns:
        match = re.search(pattern, text, re.IGNORECASE)
        if match:
            return match.group(1).strip()
    return text.strip()


def spatial457_check_correctness(gt, pred):
    gt_normalized, pred_normalized = gt.strip().lower(), pred.strip().lower()
    if gt_normalized == pred_normalized:
        return True
    yes_variants, no_variants = {"yes", "true", "1"}, {"no", "false", "0"}
    if gt_normalized in yes_variants and pred_normalized in yes_variants:
        return True
    if gt_normalized in no_variants and pred_normalized in no_variants:
        return True
    if gt_normalized.isdigit() and pred_normalized.isdigit():
        return int(gt_normalized) == int(pred_normalized)
    return False


def spatial457_process_results(doc, results, lmms_eval_specific_kwargs=None):
    lmms_eval_specific_kwargs = lmms_eval_specific_kwargs or {}
    response = results[0] if results else ""
    gt_answer = str(doc.get("answer", "")).strip()
    category = lmms_eval_specific_kwargs.get("category", spatial457_get_category_from_doc(doc))
    pred_answer = spatial457_extract_answer_from_response(response)
    result_data = {"question_index": doc.get("question_index", 0), "category": category, "gt_answer": gt_answer,
                   "pred_answer": pred_answer, "response": response,
                   "is_correct": spatial457_check_correctness(gt_answer, pred_answer)}  # fmt: skip
    return {"spatial457_accuracy": result_data}


def spatial457_aggregate_results(results):
    total_correct = sum(1 if result["is_correct"] else 0 for result in results)
    return total_correct / len(results) if len(results) > 0 else 0.0


# -- chartqapro/utils.py, with the anls package (0.0.2) it imports --------------------------------------------
def anls_normalized_levenshtein_distance(s1, s2):  # anls/metrics/dist.py
    dist = levenshtein_distance(s1, s2)  # its levenshtein_distance is api/metrics.py's, line for line
    length = max(len(s1.upper()), len(s2.upper()))
    return 0.0 if length == 0 else dist / length


def anls_package_score(prediction, gold_labels, threshold=0.5):  # anls/metrics/score.py anls_score
    y_pred = " ".join(prediction.strip().lower().split())
    anls_scores = []
    for gold_label in gold_labels:
        y_true = " ".join(gold_label.strip().lower().split())
        nl_score = anls_normalized_levenshtein_distance(y_pred, y_true)
        anls_scores.append(1 - nl_score if nl_score < threshold else 0.0)
    return max(anls_scores)


CHARTQAPRO_KWARGS = {"pre_prompt": "", "post_prompt": "\nAnswer the question with a short phrase."}


def chartqapro_format_conversation(questions, answers):
    lines = []
    n = len(questions)
    for i in range(n - 1):
        lines.append(f"Q{i + 1}: {questions[i].strip()}")
        if i < len(answers):
            lines.append(f"A{i + 1}: {str(answers[i]).strip()}")
    lines.append(f"Q{n}: {questions[-1].strip()}")
    return "\n".join(lines)


def chartqapro_doc_to_text(doc, lmms_eval_specific_kwargs=None):
    lmms_eval_specific_kwargs = lmms_eval_specific_kwargs or {}
    pre_prompt = lmms_eval_specific_kwargs.get("pre_prompt", "")
    post_prompt = lmms_eval_specific_kwargs.get("post_prompt", "")
    questions = doc["Question"] if isinstance(doc["Question"], list) else [doc["Question"]]
    answers = doc.get("Answer") or []
    if not isinstance(answers, list):
        answers = [answers]
    qt = doc.get("Question Type", "")
    if qt == "Conversational" and len(questions) > 1:
        question = chartqapro_format_conversation(questions, answers)
    else:
        question = questions[-1].strip()
    paragraph = (doc.get("Paragraph") or "").strip()
    if paragraph:
        question = f"Context: {paragraph}\n\n{question}"
    return f"{pre_prompt}{question}{post_prompt}"


def chartqapro_doc_to_target(doc):
    answers = doc["Answer"] if isinstance(doc["Answer"], list) else [doc["Answer"]]
    return str(answers[-1])


def chartqapro_fix_list_format(item):
    if not isinstance(item, str):
        return item
    match = re.match(r"^\[(.*)\]$", item.strip())
    if not match:
        return item
    content = match.group(1)
    corrected = re.sub(r"(?<!['\w])(\w[^,]*?)(?!['\w])", r"'\1'", content)
    try:
        return ast.literal_eval(f"[{corrected}]")
    except (SyntaxError, ValueError):
        return item


def chartqapro_parse_to_list(text):
    if not isinstance(text, str):
        return None
    try:
        parsed = ast.literal_eval(text)
    except Exception:
        return None
    if isinstance(parsed, list):
        return [str(x).strip(" '") for x in parsed]
    return None


def chartqapro_to_float(text):
    try:
        return float(text.strip().strip("%"))
    except (ValueError, AttributeError):
        return None


def chartqapro_evaluate_single_answer(target, prediction, max_relative_change=0.05):
    t = target.strip().strip("%").strip()
    p = prediction.strip().strip("%").strip()
    t_f = chartqapro_to_float(t)
    p_f = chartqapro_to_float(p)
    if t_f is not None and p_f is not None:
        if t_f == 0.0:
            return 1.0 if p_f == 0.0 else 0.0
        change = abs(p_f - t_f) / abs(t_f)
        return 1.0 if change <= max_relative_change else 0.0
    return float(anls_package_score(prediction=p.lower(), gold_labels=[t.lower()], threshold=0.5))


def chartqapro_relaxed_correctness(
    target, prediction, max_relative_change=0.05, year_flags=None, always_use_exact_match=False
):
    fixed_t = chartqapro_fix_list_format(target)
    t_list = chartqapro_parse_to_list(str(fixed_t)) or [str(target)]
    p_list = chartqapro_parse_to_list(str(prediction)) or [str(prediction)]
    n = len(t_list)
    if year_flags is None:
        year_flags = ["NO"] * max(n, len(p_list))
    elif len(year_flags) < n:
        year_flags = list(year_flags) * n
    scores = []
    for idx in range(max(len(t_list), len(p_list))):
        if idx >= len(t_list) or idx >= len(p_list):
            scores.append(0.0)
            continue
        t_item, p_item = t_list[idx], p_list[idx]
        flag = year_flags[idx] if idx < len(year_flags) else "NO"
        flag_cond = isinstance(flag, str) and flag.upper() == "YES"
        if flag_cond or always_use_exact_match:
            try:
                scores.append(1.0 if t_item.strip().lower() == p_item.strip().lower() else 0.0)
            except (AttributeError, ValueError):
                scores.append(0.0)
        else:
            scores.append(chartqapro_evaluate_single_answer(t_item, p_item, max_relative_change))
    return sum(scores) / len(scores) if scores else 0.0


CHARTQAPRO_SPLIT_TO_METRIC = {"Factoid": "relaxed_factoid", "Conversational": "relaxed_conversational",
                              "Hypothetical": "relaxed_hypothetical", "Fact Checking": "relaxed_fact_checking",
                              "Multi Choice": "relaxed_multi_choice"}  # fmt: skip


def chartqapro_process_results(doc, results):
    pred = (results[0] or "").strip().strip(".").strip("\n")
    answers = doc["Answer"] if isinstance(doc["Answer"], list) else [doc["Answer"]]
    gt = str(answers[-1]).strip().strip(".").strip("\n")
    qt = doc.get("Question Type", "")
    year_flags = doc.get("Year") or []
    if not isinstance(year_flags, list):
        year_flags = [year_flags]
    if qt == "Conversational" and year_flags:
        year_flags = year_flags[-1:]
    always_use_exact_match = qt in ("Fact Checking", "Multi Choice")
    score = chartqapro_relaxed_correctness(
        gt, pred, year_flags=year_flags, always_use_exact_match=always_use_exact_match
    )
    out = {"relaxed_overall": score}
    metric = CHARTQAPRO_SPLIT_TO_METRIC.get(qt)
    if metric is not None:
        out[metric] = score
    return out


# -- viewspatial/utils.py -------------------------------------------------------------------------------------
VIEWSPATIAL_QUESTION_TYPES = {
    "Camera perspective - Relative Direction": "camera_perspective_relative_direction",
    "Camera perspective - Object View Orientation": "camera_perspective_object_view_orientation",
    "Person perspective - Relative Direction": "person_perspective_relative_direction",
    "Person perspective - Object View Orientation": "person_perspective_object_view_orientation",
    "Person perspective - Scene Simulation Relative Direction": "person_perspective_scene_simulation_relative_direction",
}


def viewspatial_doc_to_text(doc, lmms_eval_specific_kwargs=None):
    question = doc["question"]
    choices = doc["choices"]
    question_text = f"Question: {question}\n"
    choices_text = f"Choices: {choices}\n"
    post_prompt = "Reply only to the corresponding option.\nAnswer:"
    return question_text + choices_text + post_prompt


def viewspatial_extract_option(text):
    match = re.search(r"\b([A-D])\b", text, re.IGNORECASE)
    return match.group(1).upper() if match else None


def viewspatial_process_results(doc, results):
    grounded_option = viewspatial_extract_option(doc["answer"])
    pred = results[0]
    pred = pred.split("\n")[-1]
    score = 1.0 if viewspatial_extract_option(pred) == grounded_option else 0.0
    question_type = doc.get("question_type", "unknown")
    result = {"overall_accuracy": {"score": score}}
    for qt_name, metric_key in VIEWSPATIAL_QUESTION_TYPES.items():
        result[f"{metric_key}_accuracy"] = {"score": score, "question_type": question_type, "target_type": qt_name}
    return result


def viewspatial_aggregations():
    def overall(results):
        if not results:
            return 0.0
        return sum(res["score"] for res in results) / len(results)

    def by_type(target_type):
        def agg(results):
            scores = [r["score"] for r in results if r.get("question_type") == target_type]
            return sum(scores) / len(scores) if scores else 0.0

        return agg

    return {"overall_accuracy": overall} | {f"{k}_accuracy": by_type(t) for t, k in VIEWSPATIAL_QUESTION_TYPES.items()}


# -- omni_spatial/utils.py (eval_type direct) -----------------------------------------------------------------
OMNI_SPATIAL_SYSTEM_PROMPT = """\
You are a spatial-reasoning assistant.

Task
-----
You will receive
1. **Image** - a single RGB frame depicting a scene.
2. **Multi-View Image** - a RGB frame depicting a scene from 6 novel views.
3. **Question** - a natural-language query about spatial relationships between objects in the image.
4. **Options** - >=2 answer candidates, each tagged by a capital letter (A, B, C, D...).

Based on the image and question, provide your answer.
Always ground your answer in the visual evidence; do not hallucinate unseen objects.
If uncertain, pick the most plausible option---never refuse or reply "insufficient information."
"""
OMNI_SPATIAL_DIRECT_FORMAT = (
    "\nNote: You only need to respond with A, B, C, or D without providing any additional information.\n"
)


def omni_spatial_strip_think(text):
    text = re.sub(r"^.*?</think>", "", text, flags=re.DOTALL)
    text = re.sub(r"^.*?</thought>", "", text, flags=re.DOTALL)
    m = re.search(r"<answer>(.*?)</answer>", text, flags=re.DOTALL | re.IGNORECASE)
    if m:
        return m.group(1).strip()
    return text.strip()


def omni_spatial_doc_to_text(doc, lmms_eval_specific_kwargs=None):
    prompt = OMNI_SPATIAL_SYSTEM_PROMPT + OMNI_SPATIAL_DIRECT_FORMAT + "\n" + doc["question"]
    for i, opt in enumerate(doc["options"]):
        prompt += f"\n{chr(65 + i)}. {opt}"
    return prompt


def omni_spatial_doc_to_answer(doc):
    return chr(65 + int(doc["answer"]))


def omni_spatial_process_results(doc, results):
    raw = results[0] if results else ""
    response = omni_spatial_strip_think(raw)
    pred_letter = response.strip().upper()[:1] if response else ""
    score = int(pred_letter == chr(65 + int(doc["answer"])))
    item = {
        "score": score,
        "task_type": str(doc.get("task_type", "")),
        "sub_task_type": str(doc.get("sub_task_type", "")),
    }
    return {
        name: item
        for name in (
            "omni_spatial_score",
            "complex_logic",
            "dynamic_reasoning",
            "perspective_taking",
            "spatial_interaction",
        )
    }


def omni_spatial_aggregations():
    def _mean(xs):
        return sum(xs) / len(xs) if xs else 0.0

    def by_task(target):
        return lambda results: _mean([r["score"] for r in results if r["task_type"] == target])

    return {"omni_spatial_score": lambda results: _mean([r["score"] for r in results]),
            "complex_logic": by_task("Complex_Logic"), "dynamic_reasoning": by_task("Dynamic_Reasoning"),
            "perspective_taking": by_task("Perspective_Taking"), "spatial_interaction": by_task("Spatial_Interaction")}  # fmt: skip


# -- mindcube/utils.py (the default kwargs) -------------------------------------------------------------------
def mindcube_doc_to_text(doc, lmms_eval_specific_kwargs=None):
    return doc["input_prompt"]


def mindcube_interleaved_messages(prompt, images):
    content = []
    prompt_parts = prompt.split("<image>")
    for idx, part in enumerate(prompt_parts):
        text = part.strip()
        if text:
            content.append({"type": "text", "text": text})
        if idx != len(prompt_parts) - 1 and idx < len(images):
            content.append({"type": "image", "url": images[idx]})
    return [{"role": "user", "content": content}]


def mindcube_extract_answer(text):
    if not text:
        return None
    simple_pattern_matches = list(re.finditer(r"([A-E])\.", text))
    if simple_pattern_matches:
        return simple_pattern_matches[-1].group(1)
    answer_section_match = re.search(r"<Answer>(.*?)(?:<|$)", text, re.DOTALL)
    if answer_section_match:
        answer_section = answer_section_match.group(1)
        for pattern in [
            r"[Mm]y answer is ([A-E])",
            r"[Mm]y answer is ([A-E])\.",
            r"[Tt]he answer is ([A-E])",
            r"(?:Answer: )?([A-E])\.",
            r"\b([A-E])\b",
        ]:
            matches = list(re.finditer(pattern, answer_section))
            if matches:
                return matches[-1].group(1)
    patterns = [
        r'(?:Answer: )?([A-E])\. [A-Za-z0-9 \-\(\)\'",]+(?=(?:\n|$|\.|"))',
        r'(?:Answer: )?([A-E])\. [A-Za-z0-9 \-\(\)\'"]+',
        r"(?:^|\n)(?:Answer: )?([A-E])(?:\.|$|\s)",
        r"[\*\"]([A-E])[\*\"]",
        r"\bAnswer:?\s*([A-E])\b",
        r"[Mm]y answer is ([A-E])",
        r"[Mm]y answer is ([A-E])\.",
        r"answer is ([A-E])",
    ]
    for pattern in patterns:
        matches = list(re.finditer(pattern, text))
        if matches:
            return matches[-1].group(1)
    lines = text.split("\n")
    line_matches = []
    for i, line in enumerate(lines):
        match = re.search(r'([A-E])\. [A-Za-z0-9 \-\(\)\'",]+', line)
        if match:
            line_matches.append((i, match.group(1)))
    if line_matches:
        return line_matches[-1][1]
    for i in reversed(range(len(lines))):
        match = re.search(r"\b([A-E])\b", lines[i])
        if match:
            return match.group(1)
    return None


def mindcube_process_results(doc, results):
    grounded_output = doc["gt_answer"]
    pred = results[0].strip()
    score = 1.0 if mindcube_extract_answer(pred) == grounded_output else 0.0
    first = doc["id"].split("_", 1)[0]
    if first == "among":
        type = "among"
    elif first == "rotation":
        type = "rotation"
    elif first in ("around", "aroundnew"):
        type = "around"
    else:
        type = "other"
    return {"overall_accuracy": {"score": score}, "around_accuracy": {"score": score, "type": type},
            "among_accuracy": {"score": score, "type": type}, "rotation_accuracy": {"score": score, "type": type}}  # fmt: skip


def mindcube_aggregations():
    def overall(results):
        total_score = 0.0
        for res in results:
            total_score += res["score"]
        return total_score / len(results) if results else 0.0

    def of_type(kind):
        def agg(results):
            total_score, count = 0.0, 0
            for res in results:
                if res["type"] == kind:
                    total_score += res["score"]
                    count += 1
            return total_score / count if count > 0 else 0.0

        return agg

    return {"overall_accuracy": overall, "rotation_accuracy": of_type("rotation"), "among_accuracy": of_type("among"),
            "around_accuracy": of_type("around")}  # fmt: skip


# -- where2place/utils.py (prompt_suffix_type original) -------------------------------------------------------
WHERE2PLACE_SUFFIX = "Your answer should be formatted as a list of tuples, i.e. [(x1, y1), (x2, y2), ...], where each tuple contains the x and y coordinates of a point satisfying the conditions above. The coordinates should be between 0 and 1, indicating the normalized pixel locations of the points in the image."
WHERE2PLACE_FORMAT = "Return only list of tuples, don't add anything else."


def where2place_doc_to_text(doc):
    return f"{doc['question']} {WHERE2PLACE_SUFFIX} {WHERE2PLACE_FORMAT}"


def where2place_text2pts(text, width=640, height=480, normalization_constant=1, is_absolute=False):
    pattern = r"\(([-+]?\d+\.?\d*(?:,\s*[-+]?\d+\.?\d*)*?)\)"
    matches = re.findall(pattern, text)
    points = []
    for match in matches:
        vector = [float(num) if "." in num else int(num) for num in match.split(",")]
        if len(vector) == 2:
            x, y = vector
            if not is_absolute:
                x = int(x / normalization_constant * width)
                y = int(y / normalization_constant * height)
            points.append((x, y))
    return np.array(points)


def where2place_acc(mask, points):
    acc = 0.0
    if len(points) > 0:
        in_range = (
            (points[:, 0] >= 0) & (points[:, 0] < mask.shape[1]) & (points[:, 1] >= 0) & (points[:, 1] < mask.shape[0])
        )
        acc = np.concatenate(
            [mask[points[in_range, 1], points[in_range, 0]], np.zeros(points.shape[0] - in_range.sum())]
        ).mean()
    return acc


def where2place_process_results(doc, result):
    mask = np.array(doc["mask"]) / 255.0
    mask = np.round(mask, 0).astype(int)
    if mask.ndim == 3:
        mask = mask[:, :, 0]
    response = result[0]
    points = where2place_text2pts(response, mask.shape[1], mask.shape[0], 1)
    acc = where2place_acc(mask, points)
    return {
        "where2place_acc": {
            "id": doc["question_id"],
            "pred": response,
            "parsed_points": list(map(tuple, points)),
            "accuracy": acc,
        }
    }


def where2place_aggregate_results(results):
    return float(np.mean([sample["accuracy"] for sample in results]))


# -- refspatial/utils.py (prompt_suffix_type original; its _text2pts and _refspatial_acc are where2place's) ----
def refspatial_doc_to_text(doc):
    return f"{doc['prompt']} {doc['suffix']} {WHERE2PLACE_FORMAT}"


def refspatial_process_results(doc, result):  # where2place_process_results' lines, its id from `id`
    item = where2place_process_results({**doc, "question_id": doc["id"]}, result)["where2place_acc"]
    return {"refspatial_acc": {**item, "query": refspatial_doc_to_text(doc)}}


# -- the pointing tasks' `_json` variants (where2place, refspatial): _task_utils/point_format.py -------------
WHERE2PLACE_JSON_SUFFIX = "Your answer should be JSON format. The coordinates should be between 0 and 1000, indicating the normalized pixel locations of the points in the image."


def parse_point2d(text, width, height):
    pattern = r"[\[\(]\s*([-+]?\d+\.?\d*)\s*,\s*([-+]?\d+\.?\d*)\s*[\]\)]"
    points = []
    for xs, ys in re.findall(pattern, text):
        xf, yf = float(xs), float(ys)
        is_float = ("." in xs) or ("." in ys)
        if is_float:
            x, y = int(xf * width), int(yf * height)
        else:
            x, y = int(xf / 1000 * width), int(yf / 1000 * height)
        points.append((x, y))
    return np.array(points)


def pointing_json_accuracy(doc, response):  # where2place_process_results_json / refspatial_process_results_json
    mask = np.array(doc["mask"]) / 255.0
    mask = np.round(mask, 0).astype(int)
    if mask.ndim == 3:
        mask = mask[:, :, 0]
    return where2place_acc(mask, parse_point2d(response, mask.shape[1], mask.shape[0]))


# -- sat/utils.py (sat.yaml: its MultiChoiceRegexFilter, then the generic exact_match) ------------------------
def sat_doc_to_text(doc, lmms_eval_specific_kwargs=None):
    question = (
        doc["question"].strip()
        + "\n"
        + "When multiple images are provided, You want to realize that when camera moves left, the objects in the image move right, and vice versa. And when you are asked about the movement of the same object captured in different images, you can compare the position of the object relative to other objects in the image to answer the question.\n"
    )
    candidates_str = ""
    for i, candidate in enumerate(doc["answers"]):
        option_letter = chr(ord("A") + i)
        candidates_str += f"{option_letter}. {candidate}\n"
    return question + "\n" + candidates_str + "\n" + "Only output the letter of the correct option and nothing else."


def sat_doc_to_target(doc):
    return chr(ord("A") + doc["correct_answer_idx"])


def sat_filter(resps, docs):  # MultiChoiceRegexFilter.apply
    filtered_resps = []
    for r, doc in zip(resps, docs, strict=True):
        fallback_regexes = []
        choice_to_alpha = {}
        next_alpha = "A"
        multiple_choices_regex = re.compile(r"\b([A-Z])\.\s+([^\n]*)")
        matches = multiple_choices_regex.findall(doc["question"])
        for m in matches:
            choice_text = m[1].strip()
            fallback_regexes.append(f"{re.escape(choice_text)}")
            choice_to_alpha[choice_text] = next_alpha
            next_alpha = chr(ord(next_alpha) + 1)
        fallback_regex = re.compile("|".join(fallback_regexes))
        filtered = []
        for resp in r:
            cleaned_resp = re.sub(r"[^\w\s]", "", resp).strip()
            match = fallback_regex.search(cleaned_resp)
            if match and match.group() in choice_to_alpha:
                filtered.append(choice_to_alpha[match.group()])
            else:
                filtered.append(cleaned_resp)
        filtered_resps.append(filtered[0].split(" ")[0])
    return filtered_resps


# -- mathkangaroo/utils.py (the default kwargs) -----------------------------------------------------------------
MATHKANGAROO_KWARGS = {"pre_prompt": "", "post_prompt": "\nAnswer with the option letter (A, B, C, D, or E) only."}


def mathkangaroo_doc_to_text(doc, lmms_eval_specific_kwargs=None):
    kwargs = lmms_eval_specific_kwargs or {}
    pre_prompt = kwargs.get("pre_prompt", "")
    post_prompt = kwargs.get("post_prompt", "\nAnswer with the option letter (A, B, C, D, or E) only.")
    question = str(doc.get("question", "")).strip()
    return f"{pre_prompt}{question}{post_prompt}"


def _mathkangaroo_normalize_targets(answer):
    if answer is None:
        return set()
    return set(re.findall(r"[A-E]", str(answer).upper()))


def _mathkangaroo_extract_prediction(response):
    if not response:
        return ""
    text = str(response).strip()
    direct_match = re.search(r"(?i)(?:final\s+answer|answer|option)\s*(?:is|:)?\s*\(?([A-E])\)?", text)
    if direct_match:
        return direct_match.group(1).upper()
    for line in reversed(text.splitlines()):
        line = line.strip().upper()
        if not line:
            continue
        line_match = re.fullmatch(r"\(?([A-E])\)?[\.)]?", line)
        if line_match:
            return line_match.group(1)
    candidates = re.findall(r"\b([A-E])\b", text.upper())
    if candidates:
        return candidates[-1]
    return ""


def mathkangaroo_process_results(doc, results):
    prediction = _mathkangaroo_extract_prediction(results[0] if results else "")
    targets = _mathkangaroo_normalize_targets(doc.get("ground_truth"))
    score = 1.0 if prediction and prediction in targets else 0.0
    return {"mathkangaroo_accuracy": score}


# -- gqa/utils.py (gqa.yaml: the default kwargs, the generic exact_match of api/metrics.py) -------------
GQA_KWARGS = {"pre_prompt": "", "post_prompt": "\nAnswer the question using a single word or phrase."}


def gqa_doc_to_text(doc, lmms_eval_specific_kwargs):
    question = doc["question"]
    pre_prompt = lmms_eval_specific_kwargs["pre_prompt"]
    post_prompt = lmms_eval_specific_kwargs["post_prompt"]
    return f"{pre_prompt}{question}{post_prompt}"


# -- mme/utils.py -------------------------------------------------------------------------------------
MME_KWARGS = {"pre_prompt": "", "post_prompt": "\nAnswer the question using a single word or phrase."}
MME_PERCEPTION = [
    "existence",
    "count",
    "position",
    "color",
    "posters",
    "celebrity",
    "scene",
    "landmark",
    "artwork",
    "OCR",
]


mme_doc_to_text = mmstar_doc_to_text  # mme/utils.py's mme_doc_to_text is the same code


def mme_parse_pred_ans(pred_ans):
    pred_ans = pred_ans.lower().strip().replace(".", "")
    pred_label = None
    if pred_ans in ["yes", "no"]:
        pred_label = pred_ans
    elif len(pred_ans) == 1:
        if pred_ans == "y":
            pred_label = "yes"
        elif pred_ans == "n":
            pred_label = "no"
        else:
            pred_label = "other"
    else:
        prefix_pred_ans = pred_ans[:4]
        if "yes" in prefix_pred_ans:
            pred_label = "yes"
        elif "no" in prefix_pred_ans:
            pred_label = "no"
        else:
            pred_label = "other"
    return pred_label


def mme_process_results(doc, results):
    pred_ans = mme_parse_pred_ans(results[0])
    gt_ans = doc["answer"].lower().strip().replace(".", "")
    assert gt_ans in ["yes", "no"]
    score = 1.0 if pred_ans == gt_ans else 0.0
    key_name = "mme_perception_score" if doc["category"] in MME_PERCEPTION else "mme_cognition_score"
    return {key_name: {"question_id": doc["question_id"], "category": doc["category"], "score": score}}


def mme_aggregate_results(results):
    category2score = {}
    for result in results:
        category2score.setdefault(result["category"], {}).setdefault(result["question_id"], []).append(result["score"])
    category2avg_score = {}
    for category, question2scores in category2score.items():
        total_score = 0
        for scores in question2scores.values():
            assert len(scores) == 2, "MME only supports pairwise evaluation"
            acc = sum(scores) / len(scores) * 100.0
            acc_plus = (sum(scores) == 2) * 100.0
            total_score += acc_plus + acc
        category2avg_score[category] = total_score / len(question2scores)
    return sum(category2avg_score.values())


# -- cv_bench/utils.py ------------------------------------------------------------------------------------
CV_BENCH_KWARGS = {"pre_prompt": "Note: You only need to respond with {} without providing any additional information.\n", "post_prompt": ""}  # fmt: skip


def cv_bench_doc_to_text(doc, kwargs):
    choice_letters = ", ".join([chr(65 + i) for i in range(len(doc["choices"]))])
    return kwargs.get("pre_prompt", "").format(choice_letters) + "\n" + doc["prompt"]


def cv_bench_process_results(doc, result):
    grounded_output = doc["answer"].strip("()")
    text = result[0].strip()
    match = re.match(r"[\(\s]*([A-Z])[\)\.\s]*", text, flags=re.IGNORECASE)
    pred_letter = match.group(1).upper() if match else ""
    return {"cv_bench_acc": {"id": doc["idx"], "is_correct": pred_letter == grounded_output}}


def cv_bench_aggregate_results(results):
    total_correct = sum(1 for sample in results if sample["is_correct"])
    return total_correct / len(results) if len(results) > 0 else 0


# -- blink/utils.py (its letter reader and aggregation are cv_bench's) ---------------------------------------
def blink_doc_to_text(doc, kwargs):
    choice_letters = ", ".join([chr(65 + i) for i in range(len(doc["choices"]))])
    return kwargs.get("pre_prompt", "").format(choice_letters) + doc["prompt"]


def blink_doc_to_visual_keys(doc):
    """blink_doc_to_visual's columns: every image_N that is not None, in the doc's order."""
    return [key for key in doc if re.match(r"^image_\d+$", key) and doc[key] is not None]


# -- mmvp/utils.py ------------------------------------------------------------------------------------------
MMVP_KWARGS = {"pre_prompt": "", "post_prompt": "\nAnswer with the option's letter from the given choices directly."}


def mmvp_extract_answer_letter(text):
    text = text.strip()
    patterns = [r"^\s*\(?([AB])\)?\.?\s*$", r"^\s*\(?([AB])\)?[\.\s]", r"answer\s+is\s+\(?([AB])\)?",
                r"option\s+\(?([AB])\)?", r"\(?([AB])\)?(?:\s|$)"]  # fmt: skip
    for pattern in patterns:
        match = re.search(pattern, text, flags=re.IGNORECASE)
        if match:
            return match.group(1).upper()
    if text and text[0].upper() in ["A", "B"]:
        return text[0].upper()
    return ""


def mmvp_doc_to_text(doc, kwargs):
    options_raw = doc.get("Options", doc.get("options", ""))
    if isinstance(options_raw, str):
        matches = re.findall(r"\([a-z]\)\s*([^(]+?)(?=\s*\([a-z]\)|$)", options_raw, re.IGNORECASE)
        options = [m.strip() for m in matches]
    else:
        options = options_raw
    options_str = "\n".join([f"{chr(65 + i)}. {opt}" for i, opt in enumerate(options)])
    question = doc.get("Question", doc.get("question", ""))
    return f"{kwargs.get('pre_prompt', '')}{question}\n{options_str}{kwargs.get('post_prompt', '')}"


def mmvp_doc_to_target(doc):
    answer = doc.get("Correct Answer", doc.get("answer", "")).strip().lower()
    if "(a)" in answer or answer == "a":
        return "A"
    if "(b)" in answer or answer == "b":
        return "B"
    return answer.upper()


def mmvp_process_results(doc, results):
    index = doc.get("Index", doc.get("index", doc.get("idx", -1)))
    if isinstance(index, int) and index > 0:
        index = index - 1
    gt, pred_letter = mmvp_doc_to_target(doc), mmvp_extract_answer_letter(results[0])
    result = {"index": index, "pair_index": index // 2, "pred": results[0], "pred_letter": pred_letter, "gt": gt,
              "is_correct": pred_letter == gt}  # fmt: skip
    return {"mmvp_accuracy": result, "mmvp_pair_accuracy": result}


def mmvp_aggregates(results):
    """mmvp_aggregate_results, mmvp_aggregate_pair_results."""
    pairs = {}
    for r in results:
        pairs.setdefault(r["pair_index"], []).append(r)
    complete = [p for p in pairs.values() if len(p) == 2]
    return {"mmvp_accuracy": sum(1 for r in results if r["is_correct"]) / len(results) if results else 0.0,
            "mmvp_pair_accuracy": sum(1 for p in complete if all(r["is_correct"] for r in p)) / len(complete) if complete else 0.0}  # fmt: skip


# -- scienceqa/utils.py --------------------------------------------------------------------------------------
SQA_KWARGS = {"format": "default", "pre_prompt": "", "post_prompt": "\nAnswer with the option's letter from the given choices directly."}  # fmt: skip


def sqa_doc_to_text(doc, lmms_eval_specific_kwargs):
    context, question, choices = doc["hint"], doc["question"], doc["choices"]
    options = [chr(ord("A") + i) for i in range(len(choices))]
    choices_str = "\n".join([f"{option}. {choice}" for option, choice in zip(options, choices, strict=True)])
    if context:
        context = f"Context: {context}\n"
    post_prompt = lmms_eval_specific_kwargs["post_prompt"]
    pre_prompt = lmms_eval_specific_kwargs["pre_prompt"]
    return f"{pre_prompt}{context}{question}\n{choices_str}{post_prompt}"


def sqa_process_results(doc, results):
    target = [chr(ord("A") + i) for i in range(len(doc["choices"]))][doc["answer"]].strip().lower()
    pred = results[0].strip()
    if pred.lower() == target:
        return {"exact_match": 1.0}
    if len(pred) >= 2 and pred[0].isupper() and pred[1] == ".":
        return {"exact_match": 1.0 if pred[0].lower() == target else 0.0}
    return {"exact_match": 0.0}


# -- seedbench/utils.py and seedbench_2_plus/utils.py -------------------------------------------------------
SEED_2_PLUS_KWARGS = {"img_token": "<image>", "post_prompt": "Answer with the option's letter from the given choices directly."}  # fmt: skip
SEED_METRICS = {"seedbench": ["seed_image", "seed_video", "seed_all"],
                "seedbench_2_plus": ["seedbench_2_plus_Chart", "seedbench_2_plus_Map", "seedbench_2_plus_Web",
                                     "seedbench_2_plus_all"]}  # fmt: skip


def seed_doc_to_text(doc):
    question = doc["question"]
    question += "\n" + f"A. {doc['choice_a']}\n"
    question += f"B. {doc['choice_b']}\n"
    question += f"C. {doc['choice_c']}\n"
    question += f"D. {doc['choice_d']}"
    return f"{question}\nAnswer with the option's letter from the given choices directly."


def seed_2_plus_parse_choice_img(choice, img_token):
    if "jpg" in choice or "png" in choice:
        return img_token
    return choice


def seed_2_plus_doc_to_text(doc, model_specific_kwargs):
    question = doc["question"]
    question.replace("<img>", model_specific_kwargs["img_token"])
    question += "\n" + f"A. {seed_2_plus_parse_choice_img(doc['choice_A'], model_specific_kwargs['img_token'])}\n"
    question += f"B. {seed_2_plus_parse_choice_img(doc['choice_B'], model_specific_kwargs['img_token'])}\n"
    question += f"C. {seed_2_plus_parse_choice_img(doc['choice_C'], model_specific_kwargs['img_token'])}\n"
    question += f"D. {seed_2_plus_parse_choice_img(doc['choice_D'], model_specific_kwargs['img_token'])}"
    return f"{question}\n{model_specific_kwargs['post_prompt']}"


def seed_process_result(doc, result):
    pred = result[0].strip()
    if len(pred) > 1:
        pred = pred[0]
    answer = doc["answer"]
    data_type = doc["data_type"]
    item = {"pred": pred, "answer": answer, "question_id": doc["question_id"]}
    return {f"seed_{data_type}": item, "seed_all": item}


def seed_2_plus_process_result(doc, result):
    pred = result[0].strip()
    if len(pred) > 1:
        pred = pred[0]
    answer = doc["answer"]
    data_type = doc["question_image_type"].capitalize()
    item = {"pred": pred, "answer": answer, "question_id": doc["question_id"]}
    return {f"seedbench_2_plus_{data_type}": item, "seedbench_2_plus_all": item}


def seed_aggregation_result(results):
    total_count = 0
    total_correct = 0
    for result in results:
        if result["pred"].lower().strip() == result["answer"].lower().strip():
            total_correct += 1
        total_count += 1
    return total_correct / total_count if total_count != 0 else 0


def seed_metrics(per_doc, listed, aggregate):
    """The evaluator's aggregation: each metric of the yaml's metric_list that some doc returned."""
    items = per_metric(per_doc)
    return {name: aggregate(items[name]) for name in listed if name in items}


# -- mmbench/en_utils.py, mmbench_evals.py (MMBench_Evaluator, the static evaluation) -------------------------
MMBENCH_KWARGS = {"pre_prompt": "", "post_prompt": "\nAnswer with the option's letter from the given choices directly."}  # fmt: skip


def mmbench_doc_to_text(doc, lmms_eval_specific_kwargs=None, sys_prompt="There are several options:"):
    import pandas as pd

    available_keys = set(doc.keys()) & set(["A", "B", "C", "D", "E"])
    options = {cand: doc[cand] for cand in available_keys if doc[cand]}
    options_prompt = f"{sys_prompt}\n"
    for key, item in dict(sorted(options.items())).items():
        if pd.notna(item) and item != "nan":
            options_prompt += f"{key}. {item}\n"
    options_prompt = options_prompt.rstrip("\n")
    hint = doc["hint"]
    query_prompt = (
        f"{hint} {doc['question']} {options_prompt}"
        if pd.notna(hint) and hint != "nan"
        else f"{doc['question']} {options_prompt}"
    )
    if lmms_eval_specific_kwargs:
        query_prompt = f"{query_prompt}\n{lmms_eval_specific_kwargs['post_prompt']}"
    return query_prompt


def mmbench_process_results(doc, results):
    item = {"index": doc["index"], "question": doc["question"], "answer": doc["answer"], "prediction": results[0].strip(),
            "hint": doc["hint"], "source": doc["source"], "split": doc["split"], "category": doc["category"],
            "L2-category": doc["L2-category"]}  # fmt: skip
    for c in ["A", "B", "C", "D", "E"]:
        item[c] = doc.get(c, "nan")
    return {"gpt_eval_score": item}


def mmbench_can_infer_option(answer, num_choice=5):
    choices = string.ascii_uppercase[:num_choice]
    if "Failed to obtain answer via API" in answer:
        return False

    def count(splits, choices="ABCD", prefix="", suffix=""):
        return sum(1 for c in choices if prefix + c + suffix in splits)

    splits = [x.strip() for x in answer.split()]
    if count(splits, choices) == 1:
        for ch in choices:
            if "A" in splits and len(splits) > 3:
                break
            if ch in splits:
                return ch
    tups = [("", "."), ("", ","), ("", ":"), ("", ")"), ("", ")."), ("(", ")"), ("(", ")."), (":", ""), (":", ","), (":", "."), (":", ")"), (":", ").")]  # fmt: skip
    for tup in tups:
        if count(splits, choices, prefix=tup[0], suffix=tup[1]) == 1:
            for ch in choices:
                if tup[0] + ch + tup[1] in splits:
                    return ch
    return False


def mmbench_can_infer_text(answer, choices):
    answer = answer.lower()
    for k in choices:
        choices[k] = str(choices[k]).lower()
    cands = [k for k in choices if choices[k] in answer]
    return cands[0] if len(cands) == 1 else False


def mmbench_eval_static(results):
    """MMBench_Evaluator.eval_result(results, eval_method="static")'s overall hit rate."""
    import pandas as pd

    def build_choices(item):
        return {ch: item[ch] for ch in "ABCD" if not pd.isna(item[ch])}

    def eval_sub_data(sub_data, answer_map):
        gt, pred = [], []
        for i in range(len(sub_data)):
            item = sub_data.iloc[i]
            gt.append(answer_map[item["index"]])
            choices = build_choices(item)
            copt = mmbench_can_infer_option(item["prediction"])
            pred.append(copt if copt else mmbench_can_infer_text(item["prediction"], choices))
            if pred[-1] and gt[-1] != pred[-1]:
                return 0
        for i in range(len(sub_data)):
            if pred[i]:
                continue
            choice_list = sorted(build_choices(sub_data.iloc[i]).keys())
            pred[i] = extract_mcq_answer(sub_data.iloc[i]["prediction"], choices=choice_list)
            if not pred[i] or pred[i] != gt[i]:
                return 0
        return 1

    data = pd.DataFrame(results).sort_values(by="index")
    data["prediction"] = [str(x) for x in data["prediction"]]
    for k in list(data.columns):  # en_utils iterates data.keys(), the columns when the loop starts
        data[k.lower() if k not in "ABCD" else k] = data.pop(k)
    data_main = data[data["index"] < int(1e6)].copy()
    data_main["hit"] = 0
    answer_map = {i: c for i, c in zip(data["index"], data["answer"], strict=True)}
    result = {}
    for i in range(len(data_main)):
        idx = data_main.iloc[i]["index"]
        if idx in result:
            continue
        result[idx] = eval_sub_data(data[data["index"] % int(1e6) == idx], answer_map)
        data_main.loc[data_main["index"] == idx, "hit"] = result[idx]
    return data_main["hit"].mean()


# -- vstar_bench/utils.py ---------------------------------------------------------------------------------------
VSTAR_KWARGS = {"pre_prompt": "", "post_prompt": "\nAnswer with the option's letter from the given choices directly."}


def vstar_doc_to_text(doc, lmms_eval_specific_kwargs=None):
    question = doc["text"]
    options_match = re.findall(r"\([A-D]\)\s*([^()]+?)(?=\s*\([A-D]\)|$)", question)
    if options_match:
        question_text = question.split("(A)")[0].strip()
        option_letters = ["A", "B", "C", "D"]
        options_formatted = []
        for i, option in enumerate(options_match):
            if i < len(option_letters):
                options_formatted.append(f"{option_letters[i]}. {option.strip()}")
        question = f"{question_text}\n" + "\n".join(options_formatted)
    if lmms_eval_specific_kwargs:
        if lmms_eval_specific_kwargs.get("pre_prompt"):
            question = f"{lmms_eval_specific_kwargs['pre_prompt']}{question}"
        if lmms_eval_specific_kwargs.get("post_prompt"):
            question = f"{question}{lmms_eval_specific_kwargs['post_prompt']}"
    return question


def vstar_extract_answer_letter(response):
    response = response.strip().upper()
    patterns = [r"^([A-D])\s*[\.)\]]*", r"(?:THE\s+)?(?:ANSWER|CHOICE|OPTION)(?:\s+IS)?[\s:]+([A-D])", r"\(([A-D])\)",
                r"([A-D])\s*(?:\.|\)|])", r"(?:^|\s)([A-D])(?:\s|$)"]  # fmt: skip
    for pattern in patterns:
        match = re.search(pattern, response, re.IGNORECASE)
        if match:
            return match.group(1).upper()
    letters = re.findall(r"[A-D]", response)
    if len(letters) == 1:
        return letters[0]
    if response and response[0] in "ABCD":
        return response[0]
    return None


def vstar_process_results(doc, results):
    pred = results[0] if results else ""
    pred_letter = vstar_extract_answer_letter(pred)
    gt_letter = doc["label"].strip().upper()
    category = doc.get("category", "unknown")
    result = {"question_id": doc["question_id"], "category": category, "score": 1.0 if pred_letter == gt_letter else 0.0,
              "prediction": pred_letter, "ground_truth": gt_letter}  # fmt: skip
    return {f"vstar_{category}_acc": result, "vstar_overall_acc": result}


def vstar_aggregate_results(results):
    if not results:
        return 0.0
    all_scores = [r["score"] for r in results]
    return sum(all_scores) / len(all_scores) * 100.0


# -- docvqa, infovqa (the generic anls metric of api/metrics.py) ----------------------------------------------
DOCVQA_KWARGS = {"pre_prompt": "", "post_prompt": "\nAnswer the question using a single word or phrase."}


def levenshtein_distance(s1, s2):
    if len(s1) > len(s2):
        s1, s2 = s2, s1
    distances = range(len(s1) + 1)
    for i2, c2 in enumerate(s2):
        distances_ = [i2 + 1]
        for i1, c1 in enumerate(s1):
            if c1 == c2:
                distances_.append(distances[i1])
            else:
                distances_.append(1 + min((distances[i1], distances[i1 + 1], distances_[-1])))
        distances = distances_
    return distances[-1]


def anls(references, predictions, thresh_hold=0.5):
    values = []
    pred = predictions[0] if isinstance(predictions[0], str) else predictions[0][0]
    for answer in references:
        gt_answer = " ".join(answer.strip().lower().split())
        det_answer = " ".join(pred.strip().lower().split())
        dist = levenshtein_distance(gt_answer, det_answer)
        length = max(len(answer.upper()), len(pred.upper()))
        values.append(0.0 if length == 0 else float(dist) / float(length))
    question_result = 1 - min(values)
    if question_result < thresh_hold:
        question_result = 0
    return {"anls": question_result}


# -- textvqa/utils.py, _task_utils/vqa_eval_metric.py (EvalAIAnswerProcessor) ---------------------------------
TEXTVQA_KWARGS = {"pre_prompt": "", "post_prompt": "\nAnswer the question using a single word or phrase.", "ocr": False}


class EvalAIAnswerProcessor:
    """MMF's copy, written from it; of its 117 contractions, the ones the tests' responses use
    (lowercased first, so its "Im" key never matches; "somebody'd" becomes "somebodyd"). With
    lmms-eval importable the tests run its own processor too."""

    CONTRACTIONS = {"aint": "ain't", "arent": "aren't", "cant": "can't", "couldnt": "couldn't", "didnt": "didn't",
                    "doesnt": "doesn't", "dont": "don't", "isnt": "isn't", "thats": "that's", "wont": "won't",
                    "youre": "you're", "somebody'd": "somebodyd", "Im": "I'm", "oclock": "o'clock"}  # fmt: skip
    NUMBER_MAP = {"none": "0", "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6",
                  "seven": "7", "eight": "8", "nine": "9", "ten": "10"}  # fmt: skip
    ARTICLES = ["a", "an", "the"]
    PERIOD_STRIP = re.compile(r"(?!<=\d)(\.)(?!\d)")
    COMMA_STRIP = re.compile(r"(?<=\d)(\,)+(?=\d)")
    PUNCTUATIONS = [
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
    ]

    def word_tokenize(self, word):
        word = word.lower()
        word = word.replace(",", "").replace("?", "").replace("'s", " 's")
        return word.strip()

    def process_punctuation(self, in_text):
        out_text = in_text
        for p in self.PUNCTUATIONS:
            if (p + " " in in_text or " " + p in in_text) or (re.search(self.COMMA_STRIP, in_text) is not None):
                out_text = out_text.replace(p, "")
            else:
                out_text = out_text.replace(p, " ")
        out_text = self.PERIOD_STRIP.sub("", out_text, re.UNICODE)
        return out_text

    def process_digit_article(self, in_text):
        out_text = []
        for word in in_text.lower().split():
            word = self.NUMBER_MAP.get(word, word)
            if word not in self.ARTICLES:
                out_text.append(word)
        for word_id, word in enumerate(out_text):
            if word in self.CONTRACTIONS:
                out_text[word_id] = self.CONTRACTIONS[word]
        return " ".join(out_text)

    def __call__(self, item):
        item = self.word_tokenize(item)
        item = item.replace("\n", " ").replace("\t", " ").strip()
        item = self.process_punctuation(item)
        return self.process_digit_article(item)


def textvqa_process_results(doc, result, processor_class=EvalAIAnswerProcessor):
    eval_ai_processor = processor_class()
    res_ans = eval_ai_processor(result[0])
    answers = [eval_ai_processor(a) for a in doc["answers"]]
    gt_acc = []
    for i in range(len(answers)):
        other = [answers[j] for j in range(len(answers)) if i != j]
        gt_acc.append(min(1, float(len([item for item in other if item == res_ans])) / 3))
    return {"exact_match": statistics.mean(gt_acc)}


# -- vqav2/utils.py, ok_vqa/utils.py, vizwiz_vqa/utils.py ------------------------------------------------------
VQAV2_KWARGS = {"pre_prompt": "", "post_prompt": "\nAnswer the question using a single word or phrase."}
UNANSWERABLE_KWARGS = {"pre_prompt": "", "post_prompt": "\nWhen the provided information is insufficient, respond with 'Unanswerable'.\nAnswer the question using a single word or phrase."}  # fmt: skip


def vqav2_process_results(doc, result, processor_class=EvalAIAnswerProcessor):
    eval_ai_processor = processor_class()
    res_ans = result[0]
    accuracy = 0
    if "answers" in doc and doc["answers"] is not None:
        for ans_dic in doc["answers"]:
            ans_dic["answer"] = ans_dic["answer"].replace("\n", " ")
            ans_dic["answer"] = ans_dic["answer"].replace("\t", " ")
            ans_dic["answer"] = ans_dic["answer"].strip()
        res_ans = res_ans.replace("\n", " ")
        res_ans = res_ans.replace("\t", " ")
        res_ans = res_ans.strip()
        gt_acc = []
        for ans_dic in doc["answers"]:
            ans_dic["answer"] = eval_ai_processor.process_punctuation(ans_dic["answer"])
            ans_dic["answer"] = eval_ai_processor.process_digit_article(ans_dic["answer"])
        res_ans = eval_ai_processor.process_punctuation(res_ans)
        res_ans = eval_ai_processor.process_digit_article(res_ans)
        for gt_ans_datum in doc["answers"]:
            other_gt_ans = [item for item in doc["answers"] if item != gt_ans_datum]
            matching_ans = [item for item in other_gt_ans if item["answer"] == res_ans]
            gt_acc.append(min(1, float(len(matching_ans)) / 3))
        accuracy = statistics.mean(gt_acc)
    return {"exact_match": accuracy}


def unanswerable_vqa_process_results(doc, result, processor_class=EvalAIAnswerProcessor):
    """ok_vqa_process_results and vizwiz_vqa_process_results (the same lines)."""
    eval_ai_processor = processor_class()
    res_ans = eval_ai_processor(result[0])
    accuracy = 0
    if "answers" in doc and doc["answers"] is not None:
        gt_acc = []
        for i in range(len(doc["answers"])):
            doc["answers"][i] = eval_ai_processor(doc["answers"][i])
        for i in range(len(doc["answers"])):
            other = [doc["answers"][j] for j in range(len(doc["answers"])) if i != j]
            gt_acc.append(min(1, float(len([item for item in other if item == res_ans])) / 3))
        accuracy = statistics.mean(gt_acc) if gt_acc else 0
    return {"exact_match": accuracy}


class MathReimplementation:
    """lmms-eval's math tasks, written from their source with `re` (mathvista: the judge
    unavailable, so its extraction is "" where the rules before it do not decide)."""

    # -- geometry3k/utils.py --------------------------------------------------------------------------
    @staticmethod
    def geometry3k(docs, responses):
        def letter(response, choices):
            response = response.strip()
            patterns = [r"[Aa]nswer\s*[:=]\s*\(?([A-Da-d])\)?", r"\b([A-Da-d])\s*[.)\]]", r"^\s*\(?([A-Da-d])\)?$",
                        r"\b([A-Da-d])\b"]  # fmt: skip
            for pattern in patterns:
                matches = re.findall(pattern, response)
                if matches:
                    for match in reversed(matches):
                        if match.upper() in ["A", "B", "C", "D"]:
                            return match.upper()
            if choices:
                for idx, choice in enumerate(choices):
                    if choice.lower() in response.lower():
                        return ["A", "B", "C", "D"][idx]
            return ""

        prompts = [
            f"{d['problem']}\n" + "\n".join(f"{o}. {c}" for o, c in zip(["A", "B", "C", "D"], d["choices"], strict=False))
            + "\nAnswer with the option's letter from the given choices directly."
            for d in docs
        ]  # fmt: skip
        scores = []
        for d, r in zip(docs, responses, strict=True):
            pred = letter(r, d.get("choices", []))
            scores.append(1.0 if pred and pred == d["ground_truth"].strip().upper() else 0.0)
        return prompts, {"exact_match": _mean(scores)}

    # -- mathvista (mathvista_evals.py create_one_query, extract_answer, normalize_extracted_answer) -----
    @staticmethod
    def _mathvista_query(doc, shot_type):
        qtype, atype, precision = doc["question_type"], doc["answer_type"], doc["precision"]
        if shot_type == "format-prompt":
            if qtype == "multi_choice":
                hint = "Answer with the option's letter from the given choices directly."
            elif atype == "integer":
                hint = "Answer the question using a single integer number."
            elif atype == "float" and precision == 1:
                hint = "Answer the question using a single floating-point number with one decimal place."
            elif atype == "float" and precision == 2:
                hint = "Answer the question using a single floating-point number with two decimal places."
            elif atype == "list":
                hint = "Answer the question using a Python list."
        else:
            if qtype == "multi_choice":
                hint = "Hint: Please answer the question and provide the correct option letter, e.g., A, B, C, D, at the end."
            elif atype == "integer":
                hint = "Hint: Please answer the question requiring an integer answer and provide the final value, e.g., 1, 2, 3, at the end."
            elif atype == "float" and precision == 1:
                hint = "Hint: Please answer the question requiring a floating-point number with one decimal place and provide the final value, e.g., 1.2, 1.3, 1.4, at the end."
            elif atype == "float" and precision == 2:
                hint = "Hint: Please answer the question requiring a floating-point number with two decimal places and provide the final value, e.g., 1.23, 1.34, 1.45, at the end."
            elif atype == "list":
                hint = "Hint: Please answer the question requiring a Python list as an answer and provide the final list, e.g., [1, 2, 3], [1.2, 1.3, 1.4], at the end."
        question = doc["question"] if shot_type == "format-prompt" else f"Question: {doc['question']}"
        if doc["unit"]:
            question += f" (Unit: {doc['unit']})"
        choices = ""
        if doc["choices"]:
            if shot_type == "format-prompt":
                choices = "\n".join(f"{chr(ord('A') + i)}. {c}" for i, c in enumerate(doc["choices"]))
            else:
                choices = "\n".join(["Choices:"] + [f"({chr(ord('A') + i)}) {c}" for i, c in enumerate(doc["choices"])])
        prompt = "Solution: " if shot_type == "solution" else ""
        query = "\n".join(e for e in [question, choices, "", "", hint, prompt] if e != "")
        return ("" + "\n\n" + query).strip()

    @staticmethod
    def _mathvista_true_false(doc, response):
        response = response.strip()
        qtype, atype, choices = doc["question_type"], doc["answer_type"], doc["choices"]
        extraction = ""
        if response:
            if qtype == "multi_choice" and response in choices:
                extraction = response
            elif atype == "integer":
                try:
                    extraction = str(int(response))
                except ValueError:
                    extraction = ""  # the judge, unavailable: ""
            elif atype == "float":
                try:
                    extraction = str(float(response))
                except ValueError:
                    extraction = ""
        if qtype == "multi_choice":
            extraction = extraction.strip()
            letter = re.findall(r"\(([a-zA-Z])\)", extraction)
            if len(letter) > 0:
                extraction = letter[0].upper()
            options = [chr(ord("A") + i) for i in range(len(choices))]
            if extraction in options:
                extraction = choices[options.index(extraction)]
            else:

                def distance(a, b):  # Levenshtein, by the full table
                    table = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
                    for i in range(1, len(a) + 1):
                        for j in range(1, len(b) + 1):
                            table[i][j] = min(
                                table[i - 1][j] + 1, table[i][j - 1] + 1, table[i - 1][j - 1] + (a[i - 1] != b[j - 1])
                            )
                    return table[-1][-1]

                distances = [distance(extraction, c) for c in choices]
                extraction = choices[distances.index(min(distances))]
        elif atype == "integer":
            try:
                extraction = str(int(float(extraction)))
            except Exception:
                extraction = None
        elif atype == "float":
            try:
                extraction = str(round(float(extraction), doc["precision"]))
            except Exception:
                extraction = None
        return str(extraction).strip() == str(doc["answer"]).strip()

    @classmethod
    def _mathvista(cls, docs, responses, shot_type):
        prompts = [cls._mathvista_query(d, shot_type) for d in docs]
        correct = sum(cls._mathvista_true_false(d, r) for d, r in zip(docs, responses, strict=True))
        accuracy = round(correct / len(docs) * 100, 2)
        return prompts, {"llm_as_judge_eval": accuracy}  # lmms-eval: None when 0

    @classmethod
    def mathvista_testmini_cot(cls, docs, responses):
        return cls._mathvista(docs, responses, "step-by-step")

    @classmethod
    def mathvista_testmini_solution(cls, docs, responses):
        return cls._mathvista(docs, responses, "solution")

    @classmethod
    def mathvista_testmini_format(cls, docs, responses):
        return cls._mathvista(docs, responses, "format-prompt")

    # -- _task_utils/reasoning_utils.py ---------------------------------------------------------------
    @staticmethod
    def extract_anwser_tag(s):
        m = re.search(re.compile(r"<answer>(.*?)</answer>", re.DOTALL), s)
        if m:
            return m.group(1)
        if extract_boxed_answer(s):
            return extract_boxed_answer(s)
        for line in reversed(s.strip().split("\n")):
            if line.strip():
                n = re.search(r"\b(\d+(?:\.\d+)?)\b(?:\s*\.?\s*$)", line)
                if n:
                    return n.group(1)
        return ""

    @classmethod
    def format_reward(cls, s):
        if re.fullmatch(re.compile(r"<think>.*</think>.*<answer>.*</answer>", re.DOTALL), s):
            return 1.0
        if re.fullmatch(re.compile(r"<analysis>.*</analysis>.*<answer>.*</answer>", re.DOTALL), s):
            return 1.0
        if extract_boxed_answer(s):
            return 1.0
        if len(s.strip()) > 50 and re.search(r"[=\+\-\*/\(\)\[\]\\]", s) and cls.extract_anwser_tag(s):
            return 0.8
        return 0.0

    @classmethod
    def reasoning_score(cls, solution_str, ground_truth):
        from math_verify import parse, verify

        tag, fmt = cls.extract_anwser_tag, cls.format_reward

        def mcq(s):
            if not s or s.strip() == "":
                return ""
            r = s.strip()
            for ch in [",", ".", "!", "?", ";", ":", "'", '"']:
                r = r.strip(ch)
            r = " " + r + " "
            letters = ["A", "B", "C", "D", "E", "F", "G", "H"]
            cands = []
            for fmt_, kind in [("({})", "parentheses"), ("{}.", "period"), ("{}:", "colon"), ("{})", "right_paren"),
                               ("{} ", "space"), ("{}-", "dash"), ("{}_", "underscore"), ("{}=", "equals")]:  # fmt: skip
                for c in letters:
                    if fmt_.format(c) in r:
                        cands.append((c, r.rfind(fmt_.format(c)), kind))
            phrases = ["the answer is", "answer is", "the correct answer is", "correct answer is", "the answer", "answer",
                       "correct answer", "the correct answer", "the best answer is", "best answer is", "the best answer",
                       "best answer", "the option is", "option is", "the correct option is", "correct option is",
                       "the choice is", "choice is", "the correct choice is", "correct choice is", "i choose", "i select",
                       "i pick", "my answer is", "my choice is"]  # fmt: skip
            for p in phrases:
                if p in r.lower():
                    start = r.lower().find(p)
                    for c in letters:
                        if r.find(c, start) != -1:
                            cands.append((c, r.find(c, start), "phrase"))
            for c in letters:
                if r.strip().startswith(c):
                    cands.append((c, 0, "start"))
            for c in letters:
                if r.strip().endswith(c):
                    cands.append((c, len(r) - 1, "end"))
            for i, c in enumerate(letters):
                if f"{i + 1}. {c}" in r:
                    cands.append((c, r.rfind(f"{i + 1}. {c}"), "numbered"))
            if not cands:
                cands = [(c, r.rfind(c), "fallback") for c in letters if c in r]
            prio = {"start": 10, "end": 9, "numbered": 8, "phrase": 7, "parentheses": 6, "period": 5, "colon": 4,
                    "right_paren": 3, "space": 2, "dash": 1, "underscore": 1, "equals": 1, "fallback": 0}  # fmt: skip
            cands.sort(key=lambda x: (prio[x[2]], -x[1]), reverse=True)
            return cands[0][0] if cands else ""

        def simple(s):
            return (s[:-1] if s.endswith(".") else s).strip()

        def relax(p, g):
            if mcq(g) in ["A", "B", "C", "D", "E", "F", "G", "H"]:
                return 1.0 if mcq(p).lower().strip() == mcq(g).lower().strip() else 0.0
            if p in g and len(p) >= 0.9 * len(g):
                return 1.0
            if g in p and len(g) >= 0.9 * len(p):
                return 1.0
            return 1.0 if p.strip() == g.strip() else 0.0

        format_score = fmt(solution_str)
        p, g = simple(tag(solution_str).strip()), simple(ground_truth)
        acc = relax(p, g)
        if acc == 0.0:
            try:
                acc = int(verify(parse(g), parse(p)))
            except Exception:
                acc = 0.0
        return acc, format_score

    @classmethod
    def _reasoning(cls, prompts, truths, responses):
        scores = [cls.reasoning_score(r.strip(), t) for t, r in zip(truths, responses, strict=True)]
        return prompts, {"acc_score": _mean([a for a, _ in scores]), "format_score": _mean([f for _, f in scores])}

    @classmethod
    def mathvista_testmini_cot_reasoning(cls, docs, responses):
        truths = [["A", "B", "C", "D", "E", "F", "G", "H"][d["choices"].index(d["answer"])]
                  if d["choices"] and d["question_type"] == "multi_choice" else d["answer"] for d in docs]  # fmt: skip
        return cls._reasoning([cls._mathvista_query(d, "step-by-step") for d in docs], truths, responses)

    @classmethod
    def mathverse_testmini_reasoning(cls, docs, responses):
        return cls._reasoning(
            [("" + "\n\n" + d["query_wo"]).strip() for d in docs], [d["answer"] for d in docs], responses
        )

    @classmethod
    def mathvision_reason_testmini_reasoning(cls, docs, responses):
        def doc_to_text(doc, lmms_eval_specific_kwargs=None):  # mathvision/reasoning/utils.py, kwargs None
            question, choices = doc["question"], doc["options"]
            options = [chr(ord("A") + i) for i in range(len(choices))]
            choices_str = "\n".join([f"{option}. {choice}" for option, choice in zip(options, choices, strict=True)])
            mc_prompt = ""
            if lmms_eval_specific_kwargs is not None:
                mc_prompt = "\n" + lmms_eval_specific_kwargs["mc_prompt"]
            query_prompt = 'Please solve the problem step by step and put your answer in one "\\boxed{}".'
            if choices_str:
                query_prompt += f"{question}\nChoices: {choices_str}" + mc_prompt
            else:
                query_prompt += question
            return query_prompt

        return cls._reasoning([doc_to_text(d).strip() for d in docs], [str(d["answer"]) for d in docs], responses)

    mathvision_reason_test_reasoning = mathvision_reason_testmini_reasoning

    @classmethod
    def logicvista_reasoning(cls, docs, responses):  # logicvista/reasoning/utils.py
        return cls._reasoning([d["question"].strip() for d in docs], [str(d["answer"]) for d in docs], responses)

    @classmethod
    def wemath_testmini_reasoning(cls, docs, responses):  # wemath/reasoning/utils.py, wemath_utils.py
        acc, fmt, data = [], [], []
        for doc, pred in zip(docs, responses, strict=True):
            acc_score, format_score = cls.reasoning_score(pred.strip(), doc["answer"])
            acc.append(acc_score)
            fmt.append(format_score)
            data.append({"ID": doc["ID"], "key": doc["key"], "acc_score": acc_score})
        prompts = [(d["question"] + "\n" + d["option"]).strip() for d in docs]
        metrics = {"acc_score": _mean(acc), "format_score": _mean(fmt)}
        for name, column in (("wemath_loose", "Score (Loose)"), ("wemath_strict", "Score (Strict)")):
            metrics[name] = float(wemath_aggregate_results(data)[column].rstrip("%"))  # vlrl: the string's number
        return prompts, metrics

    @classmethod
    def mmerealworld_reasoning(cls, docs, responses):  # mme_realworld/reasoning (make_reasoning_doc_to_messages)
        prompts = [_mme_realworld_text(d, MME_RW_EN, MME_RW_EN_REASONING).strip() for d in docs]
        return cls._reasoning(prompts, [str(d["answer"]) for d in docs], responses)

    @classmethod
    def mmerealworld_cn_reasoning(cls, docs, responses):
        prompts = [_mme_realworld_text(d, MME_RW_CN, MME_RW_CN_REASONING).strip() for d in docs]
        return cls._reasoning(prompts, [str(d["answer"]) for d in docs], responses)

    @classmethod
    def dynamath_reasoning(cls, docs, responses):  # dynamath/reasoning/utils.py
        results = []
        for doc, pred in zip(docs, responses, strict=True):
            acc, _ = cls.reasoning_score(pred.strip(), doc["ground_truth"])
            results.append({"acc": acc, "question_id": doc["question_id"], "variant_id": doc["id"]})

        def aggregate(metric_name):
            variant_to_results = defaultdict(list)
            for result in results:
                variant_to_results[result["variant_id"]].append(result)
            score = 0.0
            for variant_results in variant_to_results.values():
                if metric_name == "dynamath_average":
                    score += sum([result["acc"] for result in variant_results]) / len(variant_results)
                else:
                    score += min([result["acc"] for result in variant_results])
            return score / len(variant_to_results)

        prompts = [d["question"].strip() for d in docs]
        return prompts, {
            "dynamath_average": aggregate("dynamath_average"),
            "dynamath_worst": aggregate("dynamath_worst"),
        }

    # -- ocrbench/reasoning/utils.py, chartqa/reasoning/utils.py (make_reasoning_doc_to_messages) -----
    @classmethod
    def ocrbench_reasoning(cls, docs, responses):
        prompts = [d["question"].strip() for d in docs]
        acc, fmt = [], []
        for d, pred in zip(docs, responses, strict=True):
            fmt.append(cls.format_reward(pred))
            acc.append(ocrbench_process_results(d, [cls.extract_anwser_tag(pred).strip()])["score"])
        return prompts, {"ocrbench_accuracy_acc_score": _mean(acc), "ocrbench_accuracy_format_score": _mean(fmt)}

    @classmethod
    def chartqa_reasoning(cls, docs, responses):
        prompts = [d["question"].strip() for d in docs]
        scores = [cls.reasoning_score(pred.strip(), str(d["answer"])) for d, pred in zip(docs, responses, strict=True)]
        return prompts, _split_means(docs, scores, ("_acc_score", "_format_score"))

    @classmethod
    def mmstar_reasoning(cls, docs, responses):
        prompts = [mmstar_doc_to_text(d, {}).strip() for d in docs]
        scores = [cls.reasoning_score(pred.strip(), str(d["answer"])) for d, pred in zip(docs, responses, strict=True)]
        return prompts, {"acc_score": _mean([a for a, _ in scores]), "format_score": _mean([f for _, f in scores])}

    @classmethod
    def realworldqa_reasoning(cls, docs, responses):
        prompts = [d["question"].strip() for d in docs]
        scores = [
            cls.reasoning_score(r.strip(), d["answer"].lower().strip()) for d, r in zip(docs, responses, strict=True)
        ]
        return prompts, {"acc_score": _mean([a for a, _ in scores]), "format_score": _mean([f for _, f in scores])}

    @classmethod
    def vstar_bench_reasoning(cls, docs, responses):
        """vstar_reasoning_process_results: compute_score per doc, under its category and overall,
        means of the metrics the yaml lists."""
        prompts = [vstar_doc_to_text(d, None).strip() for d in docs]
        listed = [f"vstar_{c}_{m}" for c in ("overall", "direct_attributes", "relative_position")
                  for m in ("acc_score", "format_score")]  # fmt: skip
        per_doc = []
        for d, r in zip(docs, responses, strict=True):
            acc, fmt = cls.reasoning_score(r.strip(), d["label"].strip().upper())
            category = d.get("category", "unknown")
            per_doc.append({f"vstar_{category}_acc_score": acc, f"vstar_{category}_format_score": fmt,
                            "vstar_overall_acc_score": acc, "vstar_overall_format_score": fmt})  # fmt: skip
        return prompts, {k: _mean(v) for k, v in per_metric(per_doc).items() if k in listed}

    @classmethod
    def ai2d_reasoning(cls, docs, responses):
        prompts = [ai2d_doc_to_text(d, {"pre_prompt": "", "post_prompt": ""}).strip() for d in docs]
        scores = [cls.reasoning_score(r.strip(), ai2d_doc_to_target(d)) for d, r in zip(docs, responses, strict=True)]
        return prompts, {"acc_score": _mean([a for a, _ in scores]), "format_score": _mean([f for _, f in scores])}


class Reimplementation(MathReimplementation, _Harness):
    name = "reimplementation"

    # -- the reasoning strip (api/reasoning.py, 75571cf lines 5-52) ------------------------------
    @staticmethod
    def strip_reasoning_tags(text, tag_pairs):
        """Transcribed from strip_reasoning_tags: per [start, end] pair in order, cut from the
        first start tag through the first end tag after it while both occur (str.find, no
        regex); then, with an end tag left and no start tag, keep what follows the last end
        tag; strip whitespace at the end."""
        result = text
        for start_tag, end_tag in tag_pairs:
            while start_tag in result and end_tag in result:
                start = result.find(start_tag)
                end = result.find(end_tag, start)
                if start != -1 and end != -1:
                    result = result[:start] + result[end + len(end_tag) :]
                else:
                    break
            if end_tag in result and start_tag not in result:
                result = result.rsplit(end_tag, 1)[-1]
        return result.strip()

    @staticmethod
    def parse_reasoning_tags_config(cli_value=None, task_value=None):
        """Transcribed from parse_reasoning_tags_config: the task's value over the CLI's; None or
        "none" disables; a string is JSON."""
        effective = task_value if task_value is not None else cli_value
        if effective is None or effective == "none" or effective is False:
            return None
        if isinstance(effective, str):
            return json.loads(effective)
        return effective

    # -- RefCOCO strict REC (utils_rec.py) -------------------------------------------------------
    def refcoco_rec(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        responses = self.scored(responses, reasoning_tags)
        exploded = self.rec_preprocessed(docs)
        prompts = ["Bounding box coordinates are specified in the format (top-left x, top-left y, bottom-right x, "
                   "bottom-right y). All values are floating point numbers bounded between 0 and 1. Please provide "
                   "the bounding box coordinate of the region this sentence describes: " + d["answer"] for d in exploded]  # fmt: skip

        def parse(text):
            m = re.search(
                r"\[\s*(-?\d+(?:\.\d+)?),\s*(-?\d+(?:\.\d+)?),\s*(-?\d+(?:\.\d+)?),\s*(-?\d+(?:\.\d+)?)\s*\]", text
            )
            return [float(m.group(i)) for i in range(1, 5)] if m else [0, 0, 0, 0]

        items = [{"bbox": d["bbox"], "pred": parse(r)} for d, r in zip(exploded, responses, strict=True)]
        return prompts, Reimplementation.rec_aggregate(items)

    @staticmethod
    def rec_preprocessed(docs) -> list[dict]:
        """refcoco_bbox_rec_preprocess_dataset: both maps write back through datasets (bbox keeps
        its declared type), then every expression becomes a doc of its own. lmms-eval runs it once,
        when it loads the task; here once per table content (datasets' fingerprint of it)."""
        if docs._fingerprint not in _REC_PREPROCESSED:
            mapped = docs.map(lambda x: {"image_width": x["image"].width, "image_height": x["image"].height})
            mapped = mapped.map(
                lambda x: {
                    "bbox": [
                        x["bbox"][0] / x["image_width"],
                        x["bbox"][1] / x["image_height"],
                        (x["bbox"][0] + x["bbox"][2]) / x["image_width"],
                        (x["bbox"][1] + x["bbox"][3]) / x["image_height"],
                    ]
                }
            )
            _REC_PREPROCESSED[docs._fingerprint] = [{**d, "answer": a} for d in mapped for a in d["answer"]]
        return _REC_PREPROCESSED[docs._fingerprint]

    @staticmethod
    def rec_aggregate(items):
        def iou(a, b):
            inter = max(0, min(a[2], b[2]) - max(a[0], b[0])) * max(0, min(a[3], b[3]) - max(a[1], b[1]))
            return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)

        return _aggregate_boxes("refcoco_", items, iou)

    # -- RefCOCO lenient grounding (refcoco_grounding/utils.py) -----------------------------------
    def refcoco_grounding(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)

        def refs(a):
            if isinstance(a, str):
                return f'"{a}"'
            cleaned = [str(s).strip() for s in a if str(s).strip()]
            return ", ".join(f'"{s}"' for s in cleaned) if cleaned else '""'

        prompts = [
            f"Locate every object that matches the description {refs(d['answer'])} in the image. Report bbox coordinates in JSON format."
            for d in docs
        ]

        def iou(a, b):
            inter = max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
            union = (
                max(0.0, a[2] - a[0]) * max(0.0, a[3] - a[1]) + max(0.0, b[2] - b[0]) * max(0.0, b[3] - b[1]) - inter
            )
            return 0.0 if union <= 0 else inter / union

        def from_json(text):
            text = text.strip()
            if not text:
                return None
            m = re.search(r"```(?:json)?\s*(.*?)\s*```", text, re.DOTALL | re.IGNORECASE)
            for candidate in ([m.group(1)] if m else []) + [text]:
                try:
                    return json.loads(candidate)
                except Exception:
                    pass
            for a, b in (("[", "]"), ("{", "}")):
                s, e = text.find(a), text.rfind(b)
                if s != -1 and e > s:
                    try:
                        return json.loads(text[s : e + 1])
                    except Exception:
                        continue
            return None

        def boxes(data):
            if isinstance(data, list):
                if data and all(isinstance(v, (int, float)) for v in data) and len(data) == 4:
                    return [[float(v) for v in data]]
                return [b for item in data for b in boxes(item)]
            if isinstance(data, dict):
                for key in ("bbox_2d", "bbox", "box", "coordinates", "coord", "location", "position"):
                    if key in data and isinstance(data[key], (list, tuple)) and len(data[key]) == 4:
                        try:
                            return [[float(v) for v in data[key]]]
                        except (TypeError, ValueError):
                            continue
                return [b for v in data.values() for b in boxes(v)]
            return []

        loose = re.compile(
            r"\[?\s*(-?\d+(?:\.\d+)?)\s*[,\s]\s*(-?\d+(?:\.\d+)?)\s*[,\s]\s*(-?\d+(?:\.\d+)?)\s*[,\s]\s*(-?\d+(?:\.\d+)?)\s*\]?"
        )
        items = []
        for doc, text in zip(docs, responses, strict=True):
            x, y, bw, bh = doc["bbox"]
            gt = [float(x), float(y), float(x) + float(bw), float(y) + float(bh)]
            w, h = doc["image"].size
            raw = (
                (boxes(from_json(text)) or [[float(m.group(i)) for i in range(1, 5)] for m in loose.finditer(text)])
                if text
                else []
            )
            candidates = [
                c
                for b in raw
                for c in (b, [b[0] / 1000.0 * w, b[1] / 1000.0 * h, b[2] / 1000.0 * w, b[3] / 1000.0 * h])
            ]
            best, best_iou = (candidates[0] if candidates else [0.0, 0.0, 0.0, 0.0]), -1.0
            for c in candidates:
                if iou(c, gt) > best_iou:
                    best, best_iou = c, iou(c, gt)
            items.append({"bbox": gt, "pred": best})
        return prompts, _aggregate_boxes("refcoco_grounding_", items, iou, to_float=True)

    # -- counting ---------------------------------------------------------------------------------
    def countbench(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        words = {
            w: str(i)
            for i, w in enumerate(
                [
                    "zero",
                    "one",
                    "two",
                    "three",
                    "four",
                    "five",
                    "six",
                    "seven",
                    "eight",
                    "nine",
                    "ten",
                    "eleven",
                    "twelve",
                    "thirteen",
                    "fourteen",
                    "fifteen",
                    "sixteen",
                    "seventeen",
                    "eighteen",
                    "nineteen",
                    "twenty",
                ]
            )
        }
        words["none"] = "0"

        def norm(a):
            a = str(a).strip().lower()
            return words.get(a, a)

        prompts = [COUNTBENCH_KWARGS["pre_prompt"] + d["question"].strip() for d in docs]
        return prompts, {
            "acc": _mean([float(norm(r) == norm(d["number"])) for d, r in zip(docs, responses, strict=True)])
        }

    def countbenchqa(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        prompts = [
            (f"{d['text']}\n\n{d['question']}" if d.get("text") else d["question"])
            + SINGLE_NUMBER_KWARGS["post_prompt"]
            for d in docs
        ]
        return prompts, {
            "acc": _mean([1.0 if r.strip() == str(d["number"]) else 0.0 for d, r in zip(docs, responses, strict=True)])
        }

    def pixmo_count(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        prompts = [d["question"].replace("<image>", "").strip() + SINGLE_NUMBER_KWARGS["post_prompt"] for d in docs]
        scores = []
        for d, r in zip(docs, responses, strict=True):
            pred, truth = r.strip(), d["answer"].strip()
            truth = (re.search(r"\d+", truth) or [truth])[0]
            pred = (re.search(r"\d+", pred) or [pred])[0]
            scores.append(1.0 if pred == truth else 0.0)
        return prompts, {"acc": _mean(scores)}

    # -- OCRBench, ChartQA ----------------------------------------------------------------------------
    def ocrbench(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        items = [ocrbench_process_results(d, [r]) for d, r in zip(docs, responses, strict=True)]
        return [d["question"].strip() for d in docs], {"ocrbench_accuracy": ocrbench_final_score(items)}

    def chartqa(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        scores = [[1.0 if relaxed_correctness(r, d["answer"]) else 0.0] for d, r in zip(docs, responses, strict=True)]
        return [f"{d['question']}\nAnswer the question with a single word." for d in docs], _split_means(
            docs, scores, ("",)
        )

    def _mmstar(self, docs, responses, reasoning_tags, kwargs):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        per_doc = []
        for d, r in zip(docs, responses, strict=True):
            score = 1.0 if extract_mcq_answer(r, choices=["A", "B", "C", "D"]) == d["answer"].strip().upper() else 0.0
            item = {"question_id": d["index"], "l2_category": d["l2_category"], "score": score}
            per_doc.append({d["category"]: item, "average": item})
        return [mmstar_doc_to_text(d, kwargs) for d in docs], mmstar_metrics(per_doc)

    def mmstar(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        return self._mmstar(docs, responses, reasoning_tags, MMSTAR_KWARGS)

    def mmstar_qwen(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        return self._mmstar(docs, responses, reasoning_tags, MMSTAR_QWEN_KWARGS)

    def _mmmu(self, docs, responses, reasoning_tags, kwargs, open_answers):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        items = [mmmu_process_results(d, [r], open_answers) for d, r in zip(docs, responses, strict=True)]
        return [mmmu_doc_to_text(d, kwargs) for d in docs], {"mmmu_acc": mmmu_aggregate_results(items)}

    def mmmu_val(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS, open_answers="lmms_eval"):
        return self._mmmu(docs, responses, reasoning_tags, MMMU_KWARGS, open_answers)

    def mmmu_val_qwen(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS, open_answers="lmms_eval"):
        return self._mmmu(docs, responses, reasoning_tags, MMMU_QWEN_KWARGS, open_answers)

    def mmmu_pro_standard(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        """mmmu_pro/utils.py: construct_prompt, every question multiple choice, the subject a column."""
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        items = []
        for d, r in zip(docs, responses, strict=True):
            options = ast.literal_eval(d["options"])
            all_choices = [chr(ord("A") + i) for i in range(len(options))]
            pred = mmmu_parse_multi_choice(
                r, all_choices, dict(zip(all_choices, options, strict=True)), random.Random(d["id"])
            )
            items.append({"subdomain": d["subject"], "question_type": "multiple-choice", "answer": d["answer"],
                          "parsed_pred": [pred]})  # fmt: skip
        prompts = [
            f"{d['question']}\n{mmmu_parse_options(ast.literal_eval(d['options']))}\n\n{MMMU_PRO_KWARGS['post_prompt']}"
            for d in docs
        ]
        return prompts, {"mmmu_acc": mmmu_aggregate_results(items)}

    def mmmu_pro_vision(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        """mmmu_pro/utils.py without a question column: the post prompt alone, the response unparsed."""
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        items = [{"subdomain": d["subject"], "question_type": "multiple-choice", "answer": d["answer"], "parsed_pred": [r]}
                 for d, r in zip(docs, responses, strict=True)]  # fmt: skip
        return [MMMU_PRO_KWARGS["post_prompt"] for _ in docs], {"mmmu_acc": mmmu_aggregate_results(items)}

    def muirbench(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        """muirbench/utils.py: muir_doc_to_text, muir_aggregation's comparison."""
        docs, responses = list(docs), self.scored(responses, reasoning_tags, "muirbench")
        right = [r.lower().strip() == d["answer"].lower().strip() for d, r in zip(docs, responses, strict=True)]
        prompts = [
            f"{d['question']}\n"
            + "\n".join(f"{chr(ord('A') + i)}. {o}" for i, o in enumerate(d["options"]))
            + MUIRBENCH_POST
            for d in docs
        ]
        return prompts, {"muirbench_score_overall": sum(right) / len(right)}

    def realworldqa(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        scores = [realworldqa_process_results(d, [r])["exact_match"] for d, r in zip(docs, responses, strict=True)]
        return [d["question"].strip() for d in docs], {"exact_match": _mean(scores)}

    def pope(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        items = [pope_process_results(d, [r]) for d, r in zip(docs, responses, strict=True)]
        return [pope_doc_to_text(d, POPE_KWARGS) for d in docs], pope_aggregates(items)

    pope_adv = pope_pop = pope_random = pope

    def ai2d(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags, "ai2d")
        scores = [
            exact_match_hf_evaluate([r], [ai2d_doc_to_target(d)], ignore_case=True, ignore_punctuation=True)[
                "exact_match"
            ]
            for d, r in zip(docs, responses, strict=True)
        ]
        return [ai2d_doc_to_text(d, AI2D_KWARGS) for d in docs], {"exact_match": _mean(scores)}

    def _illusionvqa(self, docs, responses, reasoning_tags, task):
        docs, responses = list(docs), self.scored(responses, reasoning_tags, task)
        scores = [
            exact_match_hf_evaluate([r], [illusionvqa_doc_to_target(d)], ignore_case=True, ignore_punctuation=True)[
                "exact_match"
            ]
            for d, r in zip(docs, responses, strict=True)
        ]
        return [illusionvqa_doc_to_text(d, ILLUSIONVQA_KWARGS) for d in docs], {"exact_match": _mean(scores)}

    def illusionvqa_comprehension(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        return self._illusionvqa(docs, responses, reasoning_tags, "illusionvqa_comprehension")

    def illusionvqa_soft_localization(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        return self._illusionvqa(docs, responses, reasoning_tags, "illusionvqa_soft_localization")

    def _mmerealworld(self, docs, responses, reasoning_tags, heading, instruction):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        items = [
            mme_realworld_process_results(d, [r])["mme_realworld_score"] for d, r in zip(docs, responses, strict=True)
        ]
        prompts = [_mme_realworld_text(d, heading, instruction) for d in docs]
        return prompts, {"mme_realworld_score": mme_realworld_aggregate_results(items)}

    def mmerealworld(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        return self._mmerealworld(docs, responses, reasoning_tags, MME_RW_EN, MME_RW_EN_DIRECT)

    mmerealworld_lite = mmerealworld

    def mmerealworld_cn(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        return self._mmerealworld(docs, responses, reasoning_tags, MME_RW_CN, MME_RW_CN_DIRECT)

    def hrbench4k(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        items = per_metric([hrbench_process_results(d, [r]) for d, r in zip(docs, responses, strict=True)])
        return [hrbench_doc_to_text(d) for d in docs], {k: hrbench_aggregate_results(v) for k, v in items.items()}

    hrbench8k = hrbench4k

    def embspatial(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        items = per_metric([embspatial_process_results(d, [r]) for d, r in zip(docs, responses, strict=True)])
        metrics = {"embspatial_acc": embspatial_aggregate_results(items["embspatial_acc"])}
        for source in EMBSPATIAL_SOURCES:
            metrics[f"{source}_accuracy"] = embspatial_aggregate_by_source(items[f"{source}_accuracy"], source)
        return [embspatial_doc_to_text(d, EMBSPATIAL_KWARGS) for d in docs], metrics

    def zerobench(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        items = [
            zerobench_process_results(d, [r])["zerobench_exact_match"] for d, r in zip(docs, responses, strict=True)
        ]
        prompts = [zerobench_doc_to_text(d, ZEROBENCH_KWARGS) for d in docs]
        return prompts, {"zerobench_exact_match": zerobench_aggregate_results(items)}

    def _visualpuzzles(self, docs, responses, reasoning_tags, prompt):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        scores = [visualpuzzles_process_result(d, [r])["exact_match"] for d, r in zip(docs, responses, strict=True)]
        return [visualpuzzles_doc_to_text(d, {"prompt": prompt}) for d in docs], {"exact_match": _mean(scores)}

    def VisualPuzzles_direct(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        return self._visualpuzzles(docs, responses, reasoning_tags, "MULTI_CHOICE_DIRECT_PROMPT")

    def VisualPuzzles_cot(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        return self._visualpuzzles(docs, responses, reasoning_tags, "COT_PROMPT")

    def mmsi_bench(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        items = per_metric([msr_process_results(d, [r]) for d, r in zip(docs, responses, strict=True)])
        metrics = {name: msr_aggregate_results(items[name]) for name in MMSI_METRICS if name in items}
        return [msr_doc_to_text(d, MMSI_KWARGS) for d in docs], metrics

    def sat(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs = list(docs)
        scored = self.scored(responses, reasoning_tags, "sat", docs)
        scores = [
            exact_match_hf_evaluate([r], [sat_doc_to_target(d)], ignore_case=True, ignore_punctuation=True)[
                "exact_match"
            ]
            for d, r in zip(docs, scored, strict=True)
        ]
        return [sat_doc_to_text(d) for d in docs], {"exact_match": _mean(scores)}

    def mathkangaroo(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        scores = [
            mathkangaroo_process_results(d, [r])["mathkangaroo_accuracy"] for d, r in zip(docs, responses, strict=True)
        ]
        return [mathkangaroo_doc_to_text(d, MATHKANGAROO_KWARGS) for d in docs], {
            "mathkangaroo_accuracy": _mean(scores)
        }

    def screenspot_rec_test(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        """screenspot_rec_test; beside its metrics, the per-bucket Center_ACC it prints."""
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        items = [screenspot_rec_process_result(d, [r]) for d, r in zip(docs, responses, strict=True)]
        metrics = {}
        for name in REC_NAMES:
            metrics[f"screenspot_{name}"], printed = screenspot_rec_aggregation_result(
                [i[f"screenspot_{name}"] for i in items], name
            )
            if name == "Center_ACC":
                metrics |= {f"screenspot_{key}": value for key, value in printed.items() if key != name}
        return [screenspot_rec_doc_to_text(d) for d in docs], metrics

    def visualwebbench(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        scores = [
            visualwebbench_process_results_accuracy(d, [r])["accuracy"] for d, r in zip(docs, responses, strict=True)
        ]
        return [visualwebbench_doc_to_text(d) for d in docs], {"accuracy": sum(scores) / len(scores)}

    def osworld_g(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        items = [osworld_g_process_results(d, [r], self._point) for d, r in zip(docs, responses, strict=True)]
        metrics = {"osworld_g_acc": osworld_g_aggregate([i["osworld_g_acc"] for i in items])}
        for kind in ("bbox", "polygon", "refusal"):
            metrics[f"osworld_g_{kind}_acc"] = osworld_g_aggregate([i[f"osworld_g_{kind}_acc"] for i in items], kind)
        return [osworld_g_doc_to_text(d) for d in docs], metrics

    def groundingme(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        items = [groundingme_process_result(d, [r]) for d, r in zip(docs, responses, strict=True)]
        metrics = {
            f"groundingme_{metric}": groundingme_aggregation_result([i[f"groundingme_{metric}"] for i in items], name)
            for metric, name in GROUNDINGME_METRICS
        }
        return [groundingme_doc_to_text(d) for d in docs], metrics

    def simplevqa(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        scores = [simplevqa_process_results(d, [r])["exact_match"] for d, r in zip(docs, responses, strict=True)]
        return [simplevqa_doc_to_text(d, SIMPLEVQA_KWARGS) for d in docs], {"exact_match": _mean(scores)}

    def multihopspatial(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        items = [multihopspatial_process_results(d, [r]) for d, r in zip(docs, responses, strict=True)]
        metrics = {
            "mcq_acc": multihopspatial_aggregate_mcq_acc([i["mcq_acc"] for i in items]),
            "acc50iou": multihopspatial_aggregate_acc50iou([i["acc50iou"] for i in items]),
            "avg_iou": multihopspatial_aggregate_avg_iou([i["avg_iou"] for i in items]),
        }
        return [multihopspatial_doc_to_text(d) for d in docs], metrics

    def mirb(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        """`mirb_score`, and the shares it prints per subset and dimension, as vlrl names them."""
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        items = [mirb_process_results(d, [r])["mirb_score"] for d, r in zip(docs, responses, strict=True)]
        score, subsets, dimensions = mirb_aggregation(items)
        metrics = {"mirb_score": score} | {f"mirb_score/{k}": float(v) for k, v in (subsets | dimensions).items()}
        return [mirb_doc_to_text(d, MIRB_KWARGS) for d in docs], metrics

    def vmcbench(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        """Each metric of the yaml aggregated over the values process_results gave it (a group
        no row gave one is not reported, as the evaluator aggregates only what it was given)."""
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        items = [vmcbench_process_results(d, [r]) for d, r in zip(docs, responses, strict=True)]
        names = ("general", "reason", "doc", "ocr", "average")
        given = {m: [i[m] for i in items if m in i] for m in names}
        metrics = {m: vmcbench_aggregate_results(values) for m, values in given.items() if values}
        return [vmcbench_doc_to_text(d, VMCBENCH_KWARGS) for d in docs], metrics

    def vlms_are_biased(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        """`accuracy`, `bias_ratio`, and `accuracy_by_topic`'s dict, each entry as vlrl names it."""
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        items = [vlms_are_biased_process_results(d, [r]) for d, r in zip(docs, responses, strict=True)]
        metrics = {m: _mean([i[m] for i in items]) for m in ("accuracy", "bias_ratio")}
        by_topic = vlms_are_biased_aggregate_by_topic([i["accuracy_by_topic"] for i in items])
        metrics |= {f"accuracy_by_topic/{topic}": share for topic, share in by_topic.items()}
        return [vlms_are_biased_doc_to_text(d) for d in docs], metrics

    def vlmsareblind(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        """`accuracy`, and `accuracy_by_task`'s dict, each entry as vlrl names it
        (accuracy_by_task/<task>)."""
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        items = [vlmsareblind_process_results(d, [r]) for d, r in zip(docs, responses, strict=True)]
        by_task = vlmsareblind_aggregate_by_task([i["accuracy_by_task"] for i in items])
        metrics = {"accuracy": _mean([i["accuracy"] for i in items])}
        metrics |= {f"accuracy_by_task/{task}": share for task, share in by_task.items()}
        return [vlmsareblind_doc_to_text(d, VLMSAREBLIND_KWARGS) for d in docs], metrics

    def fsc147(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        items = [fsc147_process_results(d, [r]) for d, r in zip(docs, responses, strict=True)]
        metrics = {m: fsc147_aggregate([i[m] for i in items]) for m in ("fsc147_exact_match", "fsc147_mae")}
        return [fsc147_doc_to_text(d, FSC147_KWARGS) for d in docs], metrics

    def naturalbench(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        """The three metrics lmms-eval reports (process_results' naturalbench_Acc has no entry in
        the yaml's metric_list, so the evaluator drops it), and naturalbench_Acc as its
        naturalbench_aggregate_results_ACC would give it: vlrl reports it."""
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        items = [naturalbench_process_results(d, [r]) for d, r in zip(docs, responses, strict=True)]
        keys = {"naturalbench_G_ACC": "G_Acc", "naturalbench_Q_ACC": "Q_Acc", "naturalbench_I_ACC": "I_Acc",
                "naturalbench_Acc": "Acc"}  # fmt: skip
        metrics = {m: naturalbench_aggregate([i[m] for i in items], key, len(docs)) for m, key in keys.items()}
        return [naturalbench_doc_to_text(d) for d in docs], metrics

    def erqa(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        items = [erqa_process_results(d, [r])["erqa_acc"] for d, r in zip(docs, responses, strict=True)]
        return [erqa_doc_to_text(d) for d in docs], {"erqa_acc": erqa_aggregate_results(items)}

    def _by_aggregation(self, docs, responses, reasoning_tags, doc_to_text, process_results, aggregations):
        """The prompts, and each metric of the yaml's metric_list (`aggregations`: name -> its
        aggregation function) over the values process_results returned for it."""
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        items = per_metric([process_results(d, [r]) for d, r in zip(docs, responses, strict=True)])
        return [doc_to_text(d) for d in docs], {name: fn(items[name]) for name, fn in aggregations.items()}

    def _threedsr(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS, circular=False):
        return self._by_aggregation(docs, responses, reasoning_tags, threedsr_doc_to_text, threedsr_process_results,
                                    threedsr_aggregations(circular))  # fmt: skip

    def _spatial457(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS, category=""):
        """Each level's yaml gives doc_to_text its category; process_results is called without kwargs."""
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        items = [
            spatial457_process_results(d, [r])["spatial457_accuracy"] for d, r in zip(docs, responses, strict=True)
        ]
        prompts = [spatial457_doc_to_text(d, {"pre_prompt": "", "post_prompt": "", "category": category}) for d in docs]
        return prompts, {"spatial457_accuracy": spatial457_aggregate_results(items)}

    def chartqapro(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        items = per_metric([chartqapro_process_results(d, [r]) for d, r in zip(docs, responses, strict=True)])
        return [chartqapro_doc_to_text(d, CHARTQAPRO_KWARGS) for d in docs], {k: _mean(v) for k, v in items.items()}

    def viewspatial(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        return self._by_aggregation(docs, responses, reasoning_tags, viewspatial_doc_to_text,
                                    viewspatial_process_results, viewspatial_aggregations())  # fmt: skip

    def omni_spatial(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        return self._by_aggregation(docs, responses, reasoning_tags, omni_spatial_doc_to_text,
                                    omni_spatial_process_results, omni_spatial_aggregations())  # fmt: skip

    def mindcube(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        return self._by_aggregation(docs, responses, reasoning_tags, mindcube_doc_to_text, mindcube_process_results,
                                    mindcube_aggregations())  # fmt: skip

    def where2place(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        items = [where2place_process_results(d, [r])["where2place_acc"] for d, r in zip(docs, responses, strict=True)]
        return [where2place_doc_to_text(d) for d in docs], {"where2place_acc": where2place_aggregate_results(items)}

    def refspatial(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        items = [refspatial_process_results(d, [r])["refspatial_acc"] for d, r in zip(docs, responses, strict=True)]
        return [refspatial_doc_to_text(d) for d in docs], {"refspatial_acc": where2place_aggregate_results(items)}

    def where2place_json(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        items = [{"accuracy": pointing_json_accuracy(d, r)} for d, r in zip(docs, responses, strict=True)]
        prompts = [f"{d['question']} {WHERE2PLACE_JSON_SUFFIX}" for d in docs]
        return prompts, {"where2place_acc": where2place_aggregate_results(items)}

    def refspatial_json(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        items = [{"accuracy": pointing_json_accuracy(d, r)} for d, r in zip(docs, responses, strict=True)]
        prompts = [f"Locate {d['object']} in this image and output the point coordinates in JSON format." for d in docs]
        return prompts, {"refspatial_acc": where2place_aggregate_results(items)}

    def gqa(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        scores = [
            exact_match_hf_evaluate([r], [d["answer"]], ignore_case=True, ignore_punctuation=True)["exact_match"]
            for d, r in zip(docs, responses, strict=True)
        ]
        return [gqa_doc_to_text(d, GQA_KWARGS) for d in docs], {"exact_match": _mean(scores)}

    def mme(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        items = per_metric([mme_process_results(d, [r]) for d, r in zip(docs, responses, strict=True)])
        return [mme_doc_to_text(d, MME_KWARGS) for d in docs], {k: mme_aggregate_results(v) for k, v in items.items()}

    def scienceqa(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        scores = [sqa_process_results(d, [r])["exact_match"] for d, r in zip(docs, responses, strict=True)]
        return [sqa_doc_to_text(d, SQA_KWARGS) for d in docs], {"exact_match": _mean(scores)}

    scienceqa_img = scienceqa

    def seedbench(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        per_doc = [seed_process_result(d, [r]) for d, r in zip(docs, responses, strict=True)]
        metrics = seed_metrics(per_doc, SEED_METRICS["seedbench"], seed_aggregation_result)
        return [seed_doc_to_text(d) for d in docs], metrics

    seedbench_lite = seedbench

    def seedbench_2_plus(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        per_doc = [seed_2_plus_process_result(d, [r]) for d, r in zip(docs, responses, strict=True)]
        metrics = seed_metrics(per_doc, SEED_METRICS["seedbench_2_plus"], seed_aggregation_result)
        return [seed_2_plus_doc_to_text(d, SEED_2_PLUS_KWARGS) for d in docs], metrics

    def vstar_bench(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        items = per_metric([vstar_process_results(d, [r]) for d, r in zip(docs, responses, strict=True)])
        return [vstar_doc_to_text(d, VSTAR_KWARGS) for d in docs], {
            "vstar_overall_acc": vstar_aggregate_results(items["vstar_overall_acc"])
        }

    def mmvp(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        items = [mmvp_process_results(d, [r])["mmvp_accuracy"] for d, r in zip(docs, responses, strict=True)]
        return [mmvp_doc_to_text(d, MMVP_KWARGS) for d in docs], mmvp_aggregates(items)

    def cv_bench(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        items = [cv_bench_process_results(d, [r])["cv_bench_acc"] for d, r in zip(docs, responses, strict=True)]
        return [cv_bench_doc_to_text(d, CV_BENCH_KWARGS) for d in docs], {
            "cv_bench_acc": cv_bench_aggregate_results(items)
        }

    cv_bench_2d = cv_bench_3d = cv_bench

    def blink(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        items = [cv_bench_process_results(d, [r])["cv_bench_acc"] for d, r in zip(docs, responses, strict=True)]
        return [blink_doc_to_text(d, CV_BENCH_KWARGS) for d in docs], {"blink_acc": cv_bench_aggregate_results(items)}

    def docvqa_val(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        """Task.process_results' generic path: gold = doc_to_target (the answers, a list), the
        metric called with references=gold and predictions=[the stripped response]."""
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        scores = [
            anls(references=list(d["answers"]), predictions=[r])["anls"] for d, r in zip(docs, responses, strict=True)
        ]
        prompts = [f"{DOCVQA_KWARGS['pre_prompt']}{d['question']}{DOCVQA_KWARGS['post_prompt']}" for d in docs]
        return prompts, {"anls": _mean(scores)}

    infovqa_val = docvqa_val

    def textvqa_val(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags, "textvqa_val")
        scores = [textvqa_process_results(d, [r])["exact_match"] for d, r in zip(docs, responses, strict=True)]
        prompts = [f"{d['question'].capitalize()}{TEXTVQA_KWARGS['post_prompt']}" for d in docs]
        return prompts, {"exact_match": _mean(scores)}

    def mmbench_en_dev_static(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        items = [mmbench_process_results(d, [r])["gpt_eval_score"] for d, r in zip(docs, responses, strict=True)]
        prompts = [mmbench_doc_to_text(d, MMBENCH_KWARGS) for d in docs]
        return prompts, {"gpt_eval_score": mmbench_eval_static(items) * 100}

    def vqav2_val(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs = [copy.deepcopy(dict(d)) for d in docs]  # its process_results writes into doc["answers"]
        responses = self.scored(responses, reasoning_tags)
        scores = [vqav2_process_results(d, [r])["exact_match"] for d, r in zip(docs, responses, strict=True)]
        return [f"{d['question']}{VQAV2_KWARGS['post_prompt']}" for d in docs], {"exact_match": _mean(scores)}

    def ok_vqa_val2014(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs = [copy.deepcopy(dict(d)) for d in docs]
        responses = self.scored(responses, reasoning_tags)
        scores = [unanswerable_vqa_process_results(d, [r])["exact_match"] for d, r in zip(docs, responses, strict=True)]
        return [f"{d['question']}{UNANSWERABLE_KWARGS['post_prompt']}" for d in docs], {"exact_match": _mean(scores)}

    def vizwiz_vqa_val(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs = [copy.deepcopy(dict(d)) for d in docs]
        responses = self.scored(responses, reasoning_tags)
        scores = [unanswerable_vqa_process_results(d, [r])["exact_match"] for d, r in zip(docs, responses, strict=True)]
        prompts = [f"{d['question'].capitalize()}{UNANSWERABLE_KWARGS['post_prompt']}" for d in docs]
        return prompts, {"exact_match": _mean(scores)}

    # -- ScreenSpot ---------------------------------------------------------------------------------
    @staticmethod
    def _point(text):
        token = r"-?\d+(?:\.\d+)?%?"
        value = lambda t: float(t.strip()[:-1]) / 100.0 if t.strip().endswith("%") else float(t.strip())  # noqa: E731
        m = re.search(r"<\s*bbox[^>]*>(.*?)<\s*/\s*bbox\s*>", text, re.IGNORECASE | re.DOTALL)
        if m and len(t := re.findall(token, m.group(1))) >= 4:
            return (value(t[0]) + value(t[2])) / 2.0, (value(t[1]) + value(t[3])) / 2.0
        m = re.search(r"[\[\(]\s*(" + token + r")\s*(?:,|\s)\s*(" + token + r")\s*[\]\)]", text)
        if m:
            return value(m.group(1)), value(m.group(2))
        m = re.search(
            r"['\"]?x['\"]?\s*[:=]\s*(" + token + r").*?['\"]?y['\"]?\s*[:=]\s*(" + token + r")",
            text,
            re.IGNORECASE | re.DOTALL,
        )
        if m:
            return value(m.group(1)), value(m.group(2))
        n = re.findall(token, text)
        if len(n) >= 4 and any(k in text.lower() for k in ("bbox", "box", "rect", "rectangle")):
            return (value(n[0]) + value(n[2])) / 2.0, (value(n[1]) + value(n[3])) / 2.0
        return (value(n[0]), value(n[1])) if len(n) >= 2 else None

    def screenspot_v2(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        prompts = [
            f"Identify the UI element for the instruction and output exactly one click point as [x, y] in normalized coordinates within [0, 1]. Do not output a bounding box.\nInstruction: {d.get('instruction', '')}"
            for d in docs
        ]
        records = []
        for d, r in zip(docs, responses, strict=True):
            w, h = (
                (int(d["image_width"]), int(d["image_height"]))
                if "image_width" in d and "image_height" in d
                else (1, 1)
            )
            b = [float(v) for v in d["bbox"]]
            if all(0 <= v <= 1 for v in b) and b[2] >= b[0] and b[3] >= b[1]:
                gt = b
            elif b[2] > b[0] and b[3] > b[1]:
                gt = [b[0] / w, b[1] / h, b[2] / w, b[3] / h]
            else:
                gt = [b[0] / w, b[1] / h, (b[0] + b[2]) / w, (b[1] + b[3]) / h]
            p = self._point(r)
            if p is not None and (p[0] > 1 or p[1] > 1):
                p = (p[0] / w, p[1] / h)
            records.append(
                {
                    "correct": bool(p and gt[0] <= p[0] <= gt[2] and gt[1] <= p[1] <= gt[3]),
                    "type": str(d.get("data_type", "")).lower(),
                }
            )
        return prompts, _click_accuracies("screenspot_v2", records)

    def screenspot_pro(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        prompts = [
            f"Identify the UI element for the instruction and output exactly one click point as [x, y] in normalized coordinates within [0, 1]. Do not output a bounding box.\nInstruction: {d.get('instruction', '')}"
            for d in docs
        ]

        def listed(value, n):
            if isinstance(value, list):
                return value
            try:
                parsed = json.loads(value)
                return parsed if isinstance(parsed, list) else None
            except (ValueError, TypeError):
                found = re.findall(r"-?\d+(?:\.\d+)?" if n == 4 else r"\d+", value)
                return found[:n] if len(found) >= n else None

        records = []
        for d, r in zip(docs, responses, strict=True):
            w, h = int(d.get("image_width", 1)), int(d.get("image_height", 1))
            size = listed(d.get("img_size"), 2) if d.get("img_size") is not None else None
            if size is not None and len(size) == 2 and int(size[0]) > 0 and int(size[1]) > 0:
                w, h = int(size[0]), int(size[1])
            b = [float(v) for v in (listed(d["bbox"], 4) or [0.0, 0.0, 0.0, 0.0])]
            if len(b) != 4:
                gt = [0.0, 0.0, 0.0, 0.0]
            else:
                gt = b if b[2] <= 1 and b[3] <= 1 else [b[0] / w, b[1] / h, b[2] / w, b[3] / h]
            p = self._point(r)
            if p is not None and (p[0] > 1 or p[1] > 1):
                p = (p[0] / w, p[1] / h)
            records.append({"correct": bool(p and gt[0] <= p[0] <= gt[2] and gt[1] <= p[1] <= gt[3]),
                            "type": str(d.get("ui_type", d.get("data_type", ""))).lower()})  # fmt: skip
        return prompts, _click_accuracies("screenspot_pro", records)

    # -- VSI-Bench (vsibench/utils.py) --------------------------------------------------------------
    @staticmethod
    def vsibench(docs, predictions):
        numbers = {
            w: i
            for i, w in enumerate(
                [
                    "zero",
                    "one",
                    "two",
                    "three",
                    "four",
                    "five",
                    "six",
                    "seven",
                    "eight",
                    "nine",
                    "ten",
                    "eleven",
                    "twelve",
                    "thirteen",
                    "fourteen",
                    "fifteen",
                    "sixteen",
                    "seventeen",
                    "eighteen",
                    "nineteen",
                    "twenty",
                ]
            )
        }
        numbers |= {
            "thirty": 30,
            "forty": 40,
            "fifty": 50,
            "sixty": 60,
            "seventy": 70,
            "eighty": 80,
            "ninety": 90,
            "hundred": 100,
            "thousand": 1000,
        }

        def number(text):
            s = str(text).strip().lower()
            if not s:
                return None
            digit = re.search(r"-?\d+(?:\.\d+)?", s)
            start, run = None, []
            for m in re.finditer(r"[a-z]+", s):
                if start is None:
                    if m.group(0) in numbers:
                        start, run = m.start(), [m.group(0)]
                elif m.group(0) != "and":
                    if m.group(0) not in numbers:
                        break
                    run.append(m.group(0))
            if digit and (start is None or digit.start() < start):
                return float(digit.group(0))
            if start is None:
                return None
            total = current = 0
            for word in run:
                v = numbers[word]
                if v == 100:
                    current = max(current, 1) * 100
                elif v == 1000:
                    total, current = total + max(current, 1) * 1000, 0
                else:
                    current += v
            return float(total + current)

        by_type: dict[str, list[float]] = {}
        for doc, pred in zip(docs, predictions, strict=True):
            qt = doc["question_type"]
            if qt in VSI_MCA:
                score = 1.0 if pred.split(" ")[0].rstrip(".").strip().lower() == doc["ground_truth"].lower() else 0.0
            else:
                p = number(pred)
                try:
                    target = float(doc["ground_truth"])
                except ValueError:
                    target = None
                if p is None or target is None:
                    score = 0.0
                else:
                    score = (abs(p - target) / target <= 1 - np.linspace(0.5, 0.95, 10)).mean()
            by_type.setdefault(qt, []).append(score)
        out = {
            f"{qt}_{'accuracy' if qt in VSI_MCA else 'MRA:.5:.95:.05'}": float(np.mean(v)) for qt, v in by_type.items()
        }
        out["object_rel_direction_accuracy"] = (
            sum(out.pop(f"object_rel_direction_{k}_accuracy") for k in ("easy", "medium", "hard")) / 3.0
        )
        out["overall"] = sum(out.values()) / len(out)
        return {name: round(out.get(key, 0.0), 6) for name, key in VSI_NAMES.items()}


def _mean(values):
    return sum(values) / len(values)


def _aggregate_boxes(prefix, items, iou, to_float=False):
    score = {
        "IoU": iou,
        "Center_ACC": lambda g, p: g[0] <= (p[0] + p[2]) / 2 <= g[2] and g[1] <= (p[1] + p[3]) / 2 <= g[3],
    }
    score |= {f"ACC@{t}": (lambda g, p, t=t: iou(g, p) >= t) for t in (0.1, 0.3, 0.5, 0.7, 0.9)}
    cast = float if to_float else (lambda v: v)
    return {prefix + name: _mean([cast(score[name](i["bbox"], i["pred"])) for i in items]) for name in REC_NAMES}


def _click_accuracies(name, records):
    def acc(rows):
        return sum(1 for r in rows if r["correct"]) / len(rows) if rows else 0.0

    return {f"{name}_action_acc": acc(records), f"{name}_text_acc": acc([r for r in records if r["type"] == "text"]),
            f"{name}_icon_acc": acc([r for r in records if r["type"] == "icon"])}  # fmt: skip


class LmmsEvalPackage(_Harness):
    """The same entry points, through lmms-eval's own code: its reasoning strip and its task
    utilities."""

    name = "lmms_eval"

    def __init__(self):
        from lmms_eval.api import reasoning
        from lmms_eval.tasks._task_utils import mmmu_mcq_utils
        from lmms_eval.tasks.blink import utils as blink
        from lmms_eval.tasks.chartqa import utils as chartqa
        from lmms_eval.tasks.countbench import utils as countbench
        from lmms_eval.tasks.countbenchqa import utils as countbenchqa
        from lmms_eval.tasks.cv_bench import utils as cv_bench
        from lmms_eval.tasks.mmbench import en_utils as mmbench
        from lmms_eval.tasks.mme import utils as mme
        from lmms_eval.tasks.mmmu_pro import utils as mmmu_pro
        from lmms_eval.tasks.mmstar import utils as mmstar
        from lmms_eval.tasks.mmvp import utils as mmvp
        from lmms_eval.tasks.muirbench import utils as muirbench
        from lmms_eval.tasks.ocrbench import utils as ocrbench
        from lmms_eval.tasks.ok_vqa import utils as ok_vqa
        from lmms_eval.tasks.pixmo_count import utils as pixmo
        from lmms_eval.tasks.pope import utils as pope
        from lmms_eval.tasks.refcoco import utils_rec
        from lmms_eval.tasks.refcoco_grounding import utils as grounding
        from lmms_eval.tasks.scienceqa import utils as scienceqa
        from lmms_eval.tasks.screenspot_pro import utils as pro
        from lmms_eval.tasks.screenspot_v2 import utils as v2
        from lmms_eval.tasks.seedbench import utils as seedbench
        from lmms_eval.tasks.seedbench_2_plus import utils as seedbench_2_plus
        from lmms_eval.tasks.textvqa import utils as textvqa
        from lmms_eval.tasks.vizwiz_vqa import utils as vizwiz_vqa
        from lmms_eval.tasks.vqav2 import utils as vqav2
        from lmms_eval.tasks.vsibench import utils as vsibench
        from lmms_eval.tasks.vstar_bench import utils as vstar

        self.strip_reasoning_tags = reasoning.strip_reasoning_tags
        self.parse_reasoning_tags_config = reasoning.parse_reasoning_tags_config
        self.m = {"rec": utils_rec, "grounding": grounding, "countbench": countbench, "countbenchqa": countbenchqa,
                  "pixmo": pixmo, "v2": v2, "pro": pro, "vsibench": vsibench, "ocrbench": ocrbench,
                  "chartqa": chartqa, "mmstar": mmstar, "pope": pope,
                  "mme": mme, "mmvp": mmvp, "cv_bench": cv_bench, "blink": blink, "textvqa": textvqa, "vstar": vstar, "scienceqa": scienceqa,
                  "seedbench": seedbench, "seedbench_2_plus": seedbench_2_plus,
                  "vqav2": vqav2, "ok_vqa": ok_vqa, "vizwiz_vqa": vizwiz_vqa, "mmbench": mmbench,
                  "mmmu_pro": mmmu_pro, "mmmu_mcq_utils": mmmu_mcq_utils, "muirbench": muirbench}  # fmt: skip

    def refcoco_rec(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        rec, responses = self.m["rec"], self.scored(responses, reasoning_tags)
        exploded = list(rec.refcoco_bbox_rec_preprocess_dataset(docs))
        prompts = [rec.refcoco_bbox_rec_doc_to_text(d) for d in exploded]
        items = [
            rec.refcoco_bbox_rec_process_result(d, [r])["refcoco_IoU"] for d, r in zip(exploded, responses, strict=True)
        ]
        return prompts, self.rec_aggregate(items)

    def rec_aggregate(self, items):
        rec = self.m["rec"]
        return {f"refcoco_{n}": getattr(rec, f"refcoco_bbox_rec_{f}")(items) for n, f in AGGREGATIONS.items()}

    def refcoco_grounding(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        g = self.m["grounding"]
        prompts = [g.refcoco_grounding_doc_to_text(d) for d in docs]
        items = [
            g.refcoco_grounding_process_result(d, [r])["refcoco_grounding_IoU"]
            for d, r in zip(docs, responses, strict=True)
        ]
        return prompts, {
            f"refcoco_grounding_{n}": getattr(g, f"refcoco_grounding_{f}")(items) for n, f in AGGREGATIONS.items()
        }

    def countbench(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        c = self.m["countbench"]
        return [c.countbench_doc_to_text(d, COUNTBENCH_KWARGS) for d in docs], {
            "acc": _mean([c.countbench_process_results(d, [r])["acc"] for d, r in zip(docs, responses, strict=True)])
        }

    def countbenchqa(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        c = self.m["countbenchqa"]
        return [c.countbenchqa_doc_to_text(d, SINGLE_NUMBER_KWARGS) for d in docs], {
            "acc": _mean([c.countbenchqa_process_results(d, [r])["acc"] for d, r in zip(docs, responses, strict=True)])
        }

    def pixmo_count(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        c = self.m["pixmo"]
        return [c.pixmo_count_doc_to_text(d, SINGLE_NUMBER_KWARGS) for d in docs], {
            "acc": _mean([c.pixmo_count_process_results(d, [r])["acc"] for d, r in zip(docs, responses, strict=True)])
        }

    def ocrbench(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        o = self.m["ocrbench"]
        items = [o.ocrbench_process_results(d, [r])["ocrbench_accuracy"] for d, r in zip(docs, responses, strict=True)]
        o.OCRBench_score.update(dict.fromkeys(o.OCRBench_score, 0))  # its counts are module globals, kept between calls
        with tempfile.TemporaryDirectory() as out:  # where it writes ocrbench_results.txt
            score = o.ocrbench_aggregate_accuracy(items, SimpleNamespace(output_path=out))
        return [o.ocrbench_doc_to_text(d, {"pre_prompt": "", "post_prompt": ""}) for d in docs], {
            "ocrbench_accuracy": score
        }

    def chartqa(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        c = self.m["chartqa"]
        metrics = per_metric([c.chartqa_process_results(d, [r]) for d, r in zip(docs, responses, strict=True)])
        kwargs = {"pre_prompt": "", "post_prompt": "\nAnswer the question with a single word."}
        return [c.chartqa_doc_to_text(d, kwargs) for d in docs], {k: _mean(v) for k, v in metrics.items()}

    def _mmstar(self, docs, responses, reasoning_tags, kwargs):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        m = self.m["mmstar"]
        items = per_metric([m.mmstar_process_results(d, [r]) for d, r in zip(docs, responses, strict=True)])
        metrics = {k: m.mmstar_aggregate_results(v) for k, v in items.items() if k in MMSTAR_METRICS}
        return [m.mmstar_doc_to_text(d, kwargs) for d in docs], metrics

    def mmstar(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        return self._mmstar(docs, responses, reasoning_tags, MMSTAR_KWARGS)

    def mmstar_qwen(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        return self._mmstar(docs, responses, reasoning_tags, MMSTAR_QWEN_KWARGS)

    def pope(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        m = self.m["pope"]
        per_doc = [m.pope_process_results(d, [r]) for d, r in zip(docs, responses, strict=True)]
        metrics = {k: getattr(m, k.replace("pope_", "pope_aggregate_"))([p[k] for p in per_doc]) for k in per_doc[0]}
        return [m.pope_doc_to_text(d, POPE_KWARGS) for d in docs], metrics

    pope_adv = pope_pop = pope_random = pope

    def mme(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        m = self.m["mme"]
        items = per_metric([m.mme_process_results(d, [r]) for d, r in zip(docs, responses, strict=True)])
        return [m.mme_doc_to_text(d, MME_KWARGS) for d in docs], {
            k: m.mme_aggregate_results(v) for k, v in items.items()
        }

    def cv_bench(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        c = self.m["cv_bench"]
        items = [c.cv_bench_process_results(d, [r])["cv_bench_acc"] for d, r in zip(docs, responses, strict=True)]
        return [c.cv_bench_doc_to_text(d, CV_BENCH_KWARGS) for d in docs], {
            "cv_bench_acc": c.cv_bench_aggregate_results(items)
        }

    cv_bench_2d = cv_bench_3d = cv_bench

    def blink(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        b = self.m["blink"]
        items = [b.blink_process_results(d, [r])["blink_acc"] for d, r in zip(docs, responses, strict=True)]
        return [b.blink_doc_to_text(d, CV_BENCH_KWARGS) for d in docs], {"blink_acc": b.blink_aggregate_results(items)}

    def mmvp(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        m = self.m["mmvp"]
        per_doc = [m.mmvp_process_results(d, [r]) for d, r in zip(docs, responses, strict=True)]
        metrics = {"mmvp_accuracy": m.mmvp_aggregate_results([p["mmvp_accuracy"] for p in per_doc]),
                   "mmvp_pair_accuracy": m.mmvp_aggregate_pair_results([p["mmvp_pair_accuracy"] for p in per_doc])}  # fmt: skip
        return [m.mmvp_doc_to_text(d, MMVP_KWARGS) for d in docs], metrics

    def scienceqa(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        q = self.m["scienceqa"]
        scores = [q.sqa_process_results(d, [r])["exact_match"] for d, r in zip(docs, responses, strict=True)]
        return [q.sqa_doc_to_text(d, dict(SQA_KWARGS)) for d in docs], {"exact_match": _mean(scores)}

    scienceqa_img = scienceqa

    def seedbench(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        m = self.m["seedbench"]
        per_doc = [m.seed_process_result(d, [r]) for d, r in zip(docs, responses, strict=True)]
        metrics = seed_metrics(per_doc, SEED_METRICS["seedbench"], m.seed_aggregation_result)
        return [m.seed_doc_to_text(d) for d in docs], metrics

    seedbench_lite = seedbench

    def seedbench_2_plus(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        m = self.m["seedbench_2_plus"]
        per_doc = [m.seed_process_result(d, [r]) for d, r in zip(docs, responses, strict=True)]
        metrics = seed_metrics(per_doc, SEED_METRICS["seedbench_2_plus"], m.seed_aggregation_result)
        return [m.seed_doc_to_text(d, dict(SEED_2_PLUS_KWARGS)) for d in docs], metrics

    def vstar_bench(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        v = self.m["vstar"]
        items = [v.vstar_process_results(d, [r])["vstar_overall_acc"] for d, r in zip(docs, responses, strict=True)]
        return [v.vstar_doc_to_text(d, VSTAR_KWARGS) for d in docs], {
            "vstar_overall_acc": v.vstar_aggregate_results(items)
        }

    def textvqa_val(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, t = [dict(d) for d in docs], self.m["textvqa"]  # its process_results writes into doc["answers"]
        responses = self.scored(responses, reasoning_tags, "textvqa_val")
        scores = [t.textvqa_process_results(d, [r])["exact_match"] for d, r in zip(docs, responses, strict=True)]
        prompts = [t.textvqa_doc_to_text(d, dict(TEXTVQA_KWARGS)) for d in docs]
        return prompts, {"exact_match": _mean(scores)}

    def mmmu_pro_standard(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        """Its own utils, the random letter drawn from a generator seeded with the id (vlrl's named
        deviation from the process-wide `random`: mmmu_mcq_utils' module global is swapped per doc)."""
        docs, responses, m, shared = (
            list(docs),
            self.scored(responses, reasoning_tags),
            self.m["mmmu_pro"],
            self.m["mmmu_mcq_utils"],
        )
        items, global_random = [], shared.random
        try:
            for d, r in zip(docs, responses, strict=True):
                shared.random = random.Random(d["id"])
                items.append(m.mmmu_pro_process_results(d, [r])["mmmu_acc"])
        finally:
            shared.random = global_random
        return [m.mmmu_pro_doc_to_text(d, dict(MMMU_PRO_KWARGS)) for d in docs], {
            "mmmu_acc": m.mmmu_pro_aggregate_results(items)
        }

    mmmu_pro_vision = mmmu_pro_standard  # the same utils: without a question column, the vision path

    def muirbench(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses, m = list(docs), self.scored(responses, reasoning_tags, "muirbench"), self.m["muirbench"]
        items = [
            m.muir_process_results(d, [r])["muirbench_score_overall"] for d, r in zip(docs, responses, strict=True)
        ]
        kwargs = {"pre_prompt": "", "post_prompt": MUIRBENCH_POST}
        return [m.muir_doc_to_text(d, kwargs) for d in docs], {"muirbench_score_overall": m.muir_aggregation(items)}

    def mmbench_en_dev_static(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses, m = list(docs), self.scored(responses, reasoning_tags), self.m["mmbench"]
        items = [m.mmbench_process_results(d, [r])["gpt_eval_score"] for d, r in zip(docs, responses, strict=True)]
        overall, _, _ = m.mmbench_evaluator.eval_result(items, eval_method="static")
        return [m.mmbench_doc_to_text(d, dict(MMBENCH_KWARGS)) for d in docs], {"gpt_eval_score": overall * 100}

    def vqav2_val(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, v = [copy.deepcopy(dict(d)) for d in docs], self.m["vqav2"]  # its process_results writes into them
        responses = self.scored(responses, reasoning_tags)
        scores = [v.vqav2_process_results_val(d, [r])["exact_match"] for d, r in zip(docs, responses, strict=True)]
        return [v.vqav2_doc_to_text(d, dict(VQAV2_KWARGS)) for d in docs], {"exact_match": _mean(scores)}

    def ok_vqa_val2014(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, o = [copy.deepcopy(dict(d)) for d in docs], self.m["ok_vqa"]
        responses = self.scored(responses, reasoning_tags)
        scores = [o.ok_vqa_process_results(d, [r])["exact_match"] for d, r in zip(docs, responses, strict=True)]
        return [o.ok_vqa_doc_to_text(d, dict(UNANSWERABLE_KWARGS)) for d in docs], {"exact_match": _mean(scores)}

    def vizwiz_vqa_val(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, z = [copy.deepcopy(dict(d)) for d in docs], self.m["vizwiz_vqa"]
        responses = self.scored(responses, reasoning_tags)
        scores = [z.vizwiz_vqa_process_results(d, [r])["exact_match"] for d, r in zip(docs, responses, strict=True)]
        return [z.vizwiz_vqa_doc_to_text(d, dict(UNANSWERABLE_KWARGS)) for d in docs], {"exact_match": _mean(scores)}

    def screenspot_v2(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        v2 = self.m["v2"]
        items = [
            v2.screenspot_v2_process_results(d, [r])["screenspot_v2_action_acc"]
            for d, r in zip(docs, responses, strict=True)
        ]
        return [v2.screenspot_v2_doc_to_text(d) for d in docs], {
            f"screenspot_v2_{k}_acc": getattr(v2, f"screenspot_v2_{k}_acc")(items) for k in ("action", "text", "icon")
        }

    def screenspot_pro(self, docs, responses, reasoning_tags=CLI_REASONING_TAGS):
        docs, responses = list(docs), self.scored(responses, reasoning_tags)
        pro = self.m["pro"]
        items = [
            pro.screenspot_pro_process_results(d, [r])["screenspot_pro_action_acc"]
            for d, r in zip(docs, responses, strict=True)
        ]
        return [pro.screenspot_pro_doc_to_text(d) for d in docs], {
            f"screenspot_pro_{k}_acc": getattr(pro, f"screenspot_pro_{k}_acc")(items)
            for k in ("action", "text", "icon")
        }

    def vsibench(self, docs, predictions):
        v = self.m["vsibench"]
        items = [
            v.vsibench_process_results(dict(d), [p])["vsibench_overall"] for d, p in zip(docs, predictions, strict=True)
        ]
        return {
            name: getattr(v, "vsibench_aggregate_" + ("overall" if name == "vsibench_overall" else name))(items)
            for name in VSI_NAMES
        }


# Task names that are no Python identifiers, and one method per Spatial457 level (its category kwarg)
setattr(Reimplementation, "3dsrbench", functools.partialmethod(Reimplementation._threedsr, circular=False))
setattr(Reimplementation, "3dsrbench_circular", functools.partialmethod(Reimplementation._threedsr, circular=True))
for _level in SPATIAL457_LEVELS:
    setattr(
        Reimplementation,
        f"spatial457_{_level.lower()}",
        functools.partialmethod(Reimplementation._spatial457, category=_level),
    )


# -- the samples file's `target`: each task's yaml doc_to_target (a column, a template, or a utils.py function)
def countbench_doc_to_target(doc):  # countbench/utils.py (_normalize_count_answer)
    words = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
             "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"]  # fmt: skip
    normalized = str(doc["number"]).strip().lower()
    return ({w: str(i) for i, w in enumerate(words)} | {"none": "0"}).get(normalized, normalized)


def sqa_doc_to_target(doc):  # scienceqa/utils.py
    return [chr(ord("A") + i) for i in range(len(doc["choices"]))][doc["answer"]]


DOC_TO_TARGET = {
    "ai2d": ai2d_doc_to_target, "countbench": countbench_doc_to_target, "mmvp": mmvp_doc_to_target,
    "muirbench": lambda doc: doc["answer"], "sat": sat_doc_to_target, "scienceqa": sqa_doc_to_target,
    "scienceqa_img": sqa_doc_to_target, "countbenchqa": "number", "docvqa_val": "answers", "infovqa_val": "answers",
    "dynamath_reasoning": "ground_truth", "mathkangaroo": "ground_truth", "geometry3k": "ground_truth",
    "mmmu_pro_standard": "{{answer}}", "mmmu_pro_vision": "{{answer}}", "refcoco_rec": "bbox",
    "refcoco_grounding": "bbox", "screenspot_rec_test": "bbox", "screenspot_v2": "instruction", "screenspot_pro": "instruction",
    "vstar_bench": "label", "vstar_bench_reasoning": "label", "zerobench": "question_answer",
    "chartqapro": chartqapro_doc_to_target, "omni_spatial": omni_spatial_doc_to_answer, "mindcube": "grounded_output",
    "fsc147": fsc147_doc_to_target, "mirb": "answers", "vlms_are_biased": "ground_truth", "visualwebbench": visualwebbench_doc_to_target, "osworld_g": "instruction", "groundingme": "", "illusionvqa_comprehension": illusionvqa_doc_to_target,
    "illusionvqa_soft_localization": illusionvqa_doc_to_target, "vlmsareblind": "groundtruth", "where2place": "", "refspatial": "", "where2place_json": "", "refspatial_json": "",
}  # fmt: skip  # every other task's yaml: "answer"


def lmms_eval_targets(task: str, docs) -> list[str]:
    """What the samples file logs as each doc's `target`: str(Task.doc_to_target(doc))
    (api/task.py ConfigurableTask.doc_to_target, lines 1444-1469; loggers/evaluation_tracker.py
    line 284). A yaml string naming no feature of the dataset is a jinja template (utils.py
    apply_template): "answer" renders as itself."""
    import jinja2

    rule = DOC_TO_TARGET.get(task, "answer")
    features = docs.features
    docs = Reimplementation.rec_preprocessed(docs) if task == "refcoco_rec" else docs
    out = []
    for doc in docs:
        if callable(rule):
            target = rule(doc)
        elif rule in features:
            target = doc[rule]
        else:
            target = jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(rule).render(**doc)
            if len(target) >= 2 and target[0] == "[" and target[-1] == "]":
                try:
                    target = ast.literal_eval(target)
                except (SyntaxError, ValueError):
                    pass
        out.append(str(target))
    return out


def references() -> list[Any]:
    """The re-implementation, and lmms-eval itself where it is installed."""
    out: list[Any] = [Reimplementation()]
    try:
        out.append(LmmsEvalPackage())
    except ImportError:
        pass
    return out


# -- Video-R1's evaluator (src/eval_bench.py) ----------------------------------------------------
VIDEO_R1_TYPES = {
    "multiple choice": " Please provide only the single option letter (e.g., A, B, C, D, etc.) within the <answer> </answer> tags.",
    "numerical": " Please provide the numerical value (e.g., 42 or 3.14) within the <answer> </answer> tags.",
    "OCR": " Please transcribe text from the image/video clearly and provide your text answer within the <answer> </answer> tags.",
    "free-form": " Please provide your text answer within the <answer> </answer> tags.",
    "regression": " Please provide the numerical value (e.g., 42 or 3.14) within the <answer> </answer> tags.",
}


def video_r1_prompt(record):
    question = record["problem"]
    if record["problem_type"] == "multiple choice":
        question += "Options:\n" + "".join(op + "\n" for op in record["options"])
    return (
        f"{question}\nPlease think about this question as if you were a human pondering deeply. Engage in an internal "
        "dialogue using expressions such as 'let me think', 'wait', 'Hmm', 'oh, I see', 'let's break it down', etc, or "
        "other natural language thought expressions It's encouraged to include self-reflection or verification in the "
        "reasoning process. Provide your detailed reasoning between the <think> and </think> tags, and then give your "
        "final answer between the <answer> and </answer> tags." + VIDEO_R1_TYPES[record["problem_type"]]
    )


def video_r1_extract_answer(text):
    m = re.search(r"<answer>\s*(.*?)\s*</answer>", text, re.DOTALL)
    return m.group(1).strip() if m else ""


def video_r1_reward(sample, output, problem_type):
    def number(s):
        try:
            return float(s.replace(",", ""))
        except Exception:
            return None

    try:
        out = video_r1_extract_answer(output) or output
        gt = video_r1_extract_answer(sample.get("solution", ""))
        if problem_type == "multiple choice":
            return 1.0 if out.strip() == gt.strip() else 0.0
        if problem_type == "numerical":
            if (("." in gt) or ("," in gt)) != (("." in out) or ("," in out)):
                return 0.0
            g, o = number(gt), number(out)
            return 0.0 if g is None or o is None else (1.0 if round(g, 2) == round(o, 2) else 0.0)
        if problem_type == "regression":
            g, o = number(gt), number(out)
            if g is None or o is None:
                return 0.0
            pred, target = torch.tensor(o, dtype=torch.float32), torch.tensor(g, dtype=torch.float32)
            rel = torch.abs(pred - target) / (torch.abs(target) + 1e-8)
            return (rel < (1 - torch.arange(0.5, 0.95 + 0.05 / 2, 0.05, dtype=torch.float32))).float().mean().item()
        return 0.0
    except Exception:
        return 0.0


def video_r1_final_acc(records, outputs):
    acc, mra = [], []
    for record, output in zip(records, outputs, strict=True):
        reward = video_r1_reward(record, output, record.get("problem_type", ""))
        (mra if record["problem_type"] == "regression" else acc).append(reward)
    return {"mean_acc": torch.tensor(acc).mean().item(), "mean_mra": torch.tensor(mra).mean().item() if mra else 0.0}
