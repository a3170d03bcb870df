"""Format rewards: does the completion have the shape the prompt asked for? 1.0 or 0.0."""

from __future__ import annotations

import regex

from rewards.grounding import PAIR_BOX
from rewards.text import compile_pattern, fullmatch, search

# R1-style: reasoning in <think>, answer in <answer>, nothing else (full match, DOTALL).
THINK_ANSWER = compile_pattern(r"<think>.*?</think>\s*<answer>.*?</answer>", regex.DOTALL)
# VLM-R1 REC (format_reward_rec): think, then an answer holding a JSON object with an integer box.
VLM_R1_REC = compile_pattern(
    r"<think>.*?</think>\s*<answer>.*?\{.*\[\d+,\s*\d+,\s*\d+,\s*\d+\].*\}.*?</answer>", regex.DOTALL
)

# UniVG-R1 (format_reward_rec, AMAP-ML/UniVG-R1 at 44868ea, vlm_modules/qwen_module.py), searched
# anywhere: think, then an answer that is exactly one Qwen2-VL box, at the end of the text ($).
UNIVG_R1 = compile_pattern(
    r"<think>.*?</think>\s*<answer>\((\d+),\s*(\d+)\),\s*\((\d+),\s*(\d+)\)</answer>$", regex.DOTALL
)


def think_answer(completion: str) -> float:
    return 1.0 if fullmatch(THINK_ANSWER, completion) else 0.0


def vlm_r1_rec(completion: str) -> float:
    return 1.0 if search(VLM_R1_REC, completion) else 0.0


def univg_r1(completion: str) -> float:
    return 1.0 if search(UNIVG_R1, completion) else 0.0


def univg_r1_plain(completion: str) -> float:
    """UniVG-R1's single-image variant without reasoning: a Qwen2-VL box anywhere."""
    return 1.0 if search(PAIR_BOX, completion) else 0.0


REASONING_TAGS = ("<think>", "</think>", "<answer>", "</answer>")


def bare_answer(completion: str) -> float:
    """No-thinking variants: the answer itself, non-empty, with no <think> or <answer> tags."""
    return 1.0 if completion.strip() and not any(tag in completion for tag in REASONING_TAGS) else 0.0


FORMATS = {"think_answer": think_answer, "vlm_r1_rec": vlm_r1_rec, "bare_answer": bare_answer}
