"""The video benchmarks Video-R1 reports, as its evaluator (src/eval_bench.py, tulerfeng/Video-R1
commit 59d65c3) defines them: VSI-Bench, VideoMMMU, MMVU, MVBench, TempCompass, VideoMME.

Data: Video-R1's eval json files (huggingface.co/datasets/Video-R1/Video-R1-eval,
eval_<benchmark>.json: problem, problem_type, options, solution "<answer>..</answer>",
data_type, path "./<benchmark>/<video>" relative to the json's folder) and each benchmark's
videos, downloaded by you beside them.

Prompt: the evaluator's question template (its wording differs from training's: "between
the <think> and </think> tags") and the training TYPE_TEMPLATE; a multiple-choice question
lists its options after "Options:". Frames: model.video, whose defaults are the evaluator's
vendored qwen-vl-utils (2 fps, 4 to 16 frames, 128 x 28 x 28 pixels a frame); the README's
reported setting is 256 x 28 x 28 and 16 / 32 / 64 frames (docs/benchmarks.md).

Scoring (eval_bench.py's reward_fn) reads the raw response, as the evaluator does: no reasoning
block is removed first (eval.reasoning_tags is lmms-eval's step, not Video-R1's). The first
<answer>..</answer> of the response, stripped (the whole response when there is none or it is
empty), against the solution's <answer>:
multiple choice by exact string, numerical rounded to 2 decimals (a decimal point or comma
on one side only scores 0), regression by mean relative accuracy (float32, thresholds
0.50:0.95:0.05, relative error < 1 - threshold); OCR and free-form score 0 there, and here.
Metrics: `mean_acc` over the non-regression samples, `mean_mra` over the regression ones
(0 without any), as the evaluator's `final_acc` (float32 means).

VSI-Bench also reports its official eight-task mean (lmms_eval/tasks/vsibench/utils.py,
commit 75571cf) under lmms-eval's names (`vsibench_overall`, `object_counting_mra`, ...),
computed from each record's VSI question type (`original_question_type`, or
`question_type`) on the same extracted answers: multiple-choice types by the first word
(trailing "." dropped, case-insensitive), numeric types by MRA (float64, <=) of the first
number; the three relative-direction levels averaged into one task. lmms-eval raises when a
level is missing (a --limit subset) or a ground truth is 0; here the levels present are
averaged and a zero ground truth scores 0.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import regex

from data_prep.video import MOTION_OPTIONS, motion_clip, write_clip
from rewards.text import compile_pattern, finditer, search
from tasks.video_qa import TYPE_TEMPLATE, video_r1_sample
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.tasking.benchmark import Benchmark, variants

VIDEO_R1 = "Video-R1 59d65c3 src/eval_bench.py"
EVAL_QUESTION_TEMPLATE = (
    "{Question}\n"
    "Please think about this question as if you were a human pondering deeply. "
    "Engage in an internal dialogue using expressions such as 'let me think', 'wait', 'Hmm', 'oh, I see', "
    "'let's break it down', etc, or other natural language thought expressions "
    "It's encouraged to include self-reflection or verification in the reasoning process. "
    "Provide your detailed reasoning between the <think> and </think> tags, and then give your final answer "
    "between the <answer> and </answer> tags."
)
ANSWER = compile_pattern(r"<answer>\s*(.*?)\s*</answer>", regex.DOTALL)
MCA_TYPES = ("object_rel_direction_easy", "object_rel_direction_medium", "object_rel_direction_hard",
             "object_rel_distance", "route_planning", "obj_appearance_order")  # fmt: skip
NA_TYPES = ("object_abs_distance", "object_counting", "object_size_estimation", "room_size_estimation")
DIRECTION_LEVELS = MCA_TYPES[:3]
# lmms-eval's metric name for each VSI-Bench task (its aggregation functions' keys).
VSI_METRICS = {
    "obj_appearance_order_accuracy": "obj_appearance_order_accuracy",
    "object_abs_distance_mra": "object_abs_distance_MRA:.5:.95:.05",
    "object_counting_mra": "object_counting_MRA:.5:.95:.05",
    "object_rel_distance_accuracy": "object_rel_distance_accuracy",
    "object_size_estimation_mra": "object_size_estimation_MRA:.5:.95:.05",
    "room_size_estimation_mra": "room_size_estimation_MRA:.5:.95:.05",
    "route_planning_accuracy": "route_planning_accuracy",
    "object_rel_direction_accuracy": "object_rel_direction_accuracy",
}


# -- Video-R1's evaluator --------------------------------------------------------------------
def extract_answer(text: str) -> str:
    """eval_bench.extract_answer: the first <answer>..</answer>, stripped ("" without one)."""
    match = search(ANSWER, text)
    return match.group(1).strip() if match else ""


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except Exception:
        return None


def video_r1_mra(pred: float, target: float) -> float:
    """eval_bench.mean_relative_accuracy, in float32 as there."""
    import torch  # here, not at import: `vlrl tasks list` loads every task module

    pred_t, target_t = torch.tensor(pred, dtype=torch.float32), torch.tensor(target, dtype=torch.float32)
    rel_error = torch.abs(pred_t - target_t) / (torch.abs(target_t) + 1e-8)
    thresholds = torch.arange(0.5, 0.95 + 0.05 / 2, 0.05, dtype=torch.float32)
    return (rel_error < (1 - thresholds)).float().mean().item()


def video_r1_reward(output: str, solution: str, problem_type: str) -> float:
    """eval_bench.reward_fn."""
    try:
        answer = extract_answer(output) or output
        truth = extract_answer(solution)
        if problem_type == "multiple choice":
            return 1.0 if answer.strip() == truth.strip() else 0.0
        if problem_type == "numerical":
            if ("." in truth or "," in truth) != ("." in answer or "," in answer):
                return 0.0
            truth_n, answer_n = _number(truth), _number(answer)
            if truth_n is None or answer_n is None:
                return 0.0
            return 1.0 if round(truth_n, 2) == round(answer_n, 2) else 0.0
        if problem_type == "regression":
            truth_n, answer_n = _number(truth), _number(answer)
            if truth_n is None or answer_n is None:
                return 0.0
            return video_r1_mra(answer_n, truth_n)
        return 0.0
    except Exception:
        return 0.0


def _float32_mean(values: list[float]) -> float:
    """torch.tensor(values).mean().item(), as the evaluator's final_acc (nan when empty)."""
    import torch

    return torch.tensor(values).mean().item()


# -- VSI-Bench's official scoring (lmms-eval's vsibench) ----------------------------------------
_NUMBER_WORDS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
    "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16,
    "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50,
    "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90, "hundred": 100, "thousand": 1000,
}  # fmt: skip
_DIGITS = compile_pattern(r"-?\d+(?:\.\d+)?")
_WORD = compile_pattern(r"[a-z]+")


def vsi_number(text: str | None) -> float | None:
    """vsibench.extract_number: the first number in digits or English words, whichever comes first."""
    if text is None:
        return None
    s = str(text).strip().lower()
    if not s:
        return None
    digits = search(_DIGITS, s)
    start, words = None, []
    for match in finditer(_WORD, s):
        word = match.group(0)
        if start is None:
            if word in _NUMBER_WORDS:
                start = match.start()
                words.append(word)
        elif word == "and":
            continue
        elif word in _NUMBER_WORDS:
            words.append(word)
        else:
            break
    if digits is not None and (start is None or digits.start() < start):
        return float(digits.group(0))
    if start is None:
        return None
    total, current = 0, 0
    for word in words:
        value = _NUMBER_WORDS[word]
        if value == 100:
            current = max(current, 1) * 100
        elif value == 1000:
            total += max(current, 1) * 1000
            current = 0
        else:
            current += value
    return float(total + current)


def vsi_mra(pred: float, target: float) -> float:
    """vsibench.mean_relative_accuracy(start=.5, end=.95, interval=.05), float64, <=."""
    thresholds = np.linspace(0.5, 0.95, int((0.95 - 0.5) / 0.05 + 2))
    return float((abs(pred - target) / target <= 1 - thresholds).mean())


def vsi_score(question_type: str, prediction: str, truth: str) -> float:
    """vsibench_process_results for one sample: accuracy (choice types) or MRA (numeric types)."""
    if question_type in MCA_TYPES:
        word = prediction.split(" ")[0].rstrip(".").strip()
        return 1.0 if word.lower() == truth.lower() else 0.0
    pred, target = vsi_number(prediction), _to_float(truth)
    if pred is None or target is None or target == 0:
        return 0.0  # lmms-eval: TypeError (no number) scores 0; a zero target raises there
    return vsi_mra(pred, target)


def _to_float(text: str) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def vsi_task_scores(items: list[dict[str, Any]]) -> dict[str, float]:
    """vsibench._compute_all_subscores: each task's mean, relative direction over its levels,
    and `overall`, the mean over the tasks present."""
    by_type: dict[str, list[float]] = {}
    for item in items:
        by_type.setdefault(item["question_type"], []).append(item["score"])
    out = {}
    for question_type, scores in by_type.items():
        metric = "accuracy" if question_type in MCA_TYPES else "MRA:.5:.95:.05"
        out[f"{question_type}_{metric}"] = sum(scores) / len(scores)
    levels = [out.pop(f"{level}_accuracy") for level in DIRECTION_LEVELS if f"{level}_accuracy" in out]
    if levels:
        out["object_rel_direction_accuracy"] = sum(levels) / len(levels)
    out["overall"] = sum(out.values()) / len(out)
    return out


class VideoR1Benchmark(Benchmark):
    reference = VIDEO_R1
    strips_reasoning = False  # the evaluator reads the raw output (its <answer>, else all of it)
    strips_whitespace = False
    follows_lmms_eval_model = False  # its evaluator renders its own prompts and reads the raw output
    data_suffix = ".json"
    max_new_tokens = 1024  # eval_bench.py's max_tokens
    vsi: bool = False  # also report VSI-Bench's official eight-task mean

    def build_sample(self, record: dict[str, Any], ctx: RecordContext) -> Sample:
        sample = video_r1_sample(record, ctx, self.name)
        sample.meta["solution"] = record["solution"]
        question_type = record.get("original_question_type", record.get("question_type"))
        if self.vsi and question_type is not None:
            if question_type not in MCA_TYPES + NA_TYPES:
                raise ctx.error(
                    f"VSI-Bench question type {question_type!r} is not one of {', '.join(MCA_TYPES + NA_TYPES)}"
                )
            sample.meta["question_type"] = question_type
        return sample

    def messages(self, sample: Sample) -> list[dict[str, Any]]:
        text = EVAL_QUESTION_TEMPLATE.format(Question=sample.problem) + TYPE_TEMPLATE[sample.meta["problem_type"]]
        return [{"role": "user", "content": [{"type": sample.meta["data_type"]}, {"type": "text", "text": text}]}]

    def process(self, completion: str, sample: Sample) -> dict[str, Any]:
        answer = extract_answer(completion) or completion
        reward = video_r1_reward(completion, sample.meta["solution"], sample.meta["problem_type"])
        item = {
            "problem_type": sample.meta["problem_type"],
            "prediction": answer,
            "reward": reward,
            "correct": reward == 1.0,
        }
        out = {"mean_acc": item, "mean_mra": item}
        if "question_type" in sample.meta:
            truth = extract_answer(sample.meta["solution"])
            vsi = {
                "question_type": sample.meta["question_type"],
                "score": vsi_score(sample.meta["question_type"], answer, truth),
            }
            out |= {"vsibench_overall": vsi} | {name: vsi for name in VSI_METRICS}
        return out

    def aggregations(self):
        return {
            "mean_acc": lambda items: _float32_mean([i["reward"] for i in items if i["problem_type"] != "regression"]),
            "mean_mra": lambda items: _mra_mean([i["reward"] for i in items if i["problem_type"] == "regression"]),
        }

    def aggregate(self, processed) -> dict[str, float]:
        out = super().aggregate(processed)
        typed = [values["vsibench_overall"] for values in processed if "vsibench_overall" in values]
        if typed:
            scores = vsi_task_scores(typed)
            out["vsibench_overall"] = round(scores["overall"], 6)
            out |= {name: round(scores.get(key, 0.0), 6) for name, key in VSI_METRICS.items()}
        return out

    def synthesize(self, path: str | Path, size: int, seed: int) -> None:
        write_synthetic_eval(Path(path), size, seed, vsi=self.vsi)


def _mra_mean(values: list[float]) -> float:
    return _float32_mean(values) if values else 0.0


def write_synthetic_eval(path: Path, size: int, seed: int, vsi: bool) -> None:
    """An eval json in Video-R1's format beside its clips: motion questions (multiple choice)
    and how-far questions (regression), with VSI-Bench question types when `vsi`."""
    rng = np.random.default_rng(seed)
    (path.parent / "videos").mkdir(parents=True, exist_ok=True)
    records = []
    for index in range(size):
        frames, direction, color, shape = motion_clip(rng, side=64, n_frames=8)
        write_clip(path.parent / "videos" / f"{index}.mp4", frames, fps=4)
        record = {
            "problem_id": index,
            "data_type": "video",
            "path": f"./videos/{index}.mp4",
            "data_source": "synthetic",
        }
        if index % 3 == 2:
            record |= {"problem": f"How many seconds does the {color} {shape} move?", "problem_type": "regression",
                       "options": [], "solution": "<answer>2.0</answer>"}  # fmt: skip
            question_type = NA_TYPES[index // 3 % len(NA_TYPES)]
        else:
            letter = "ABCD"[["left", "right", "up", "down"].index(direction)]
            record |= {"problem": f"In which direction does the {color} {shape} move?", "problem_type": "multiple choice",
                       "options": MOTION_OPTIONS, "solution": f"<answer>{letter}</answer>"}  # fmt: skip
            question_type = MCA_TYPES[index // 3 * 2 % len(MCA_TYPES) + index % 3]
        if vsi:
            record["original_question_type"] = question_type
        records.append(record)
    path.write_text(json.dumps(records, indent=1))


_VARIANTS = [("vsibench", "VSI-Bench"), ("videommmu", "VideoMMMU"), ("mmvu", "MMVU"), ("mvbench", "MVBench"),
             ("tempcompass", "TempCompass"), ("videomme", "VideoMME")]  # fmt: skip
BENCHMARKS = variants(VideoR1Benchmark, [
    {"name": f"video_r1_{key}", "split": "", "dataset": f"Video-R1/Video-R1-eval eval_{key}.json", "vsi": key == "vsibench",
     "description": f"{title} as Video-R1's evaluator scores it (mean_acc, mean_mra)" + (", and VSI-Bench's eight-task mean" if key == "vsibench" else "")}
    for key, title in _VARIANTS])  # fmt: skip
