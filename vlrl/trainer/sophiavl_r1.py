"""SophiaVL-R1's request to its thinking reward model, and how it reads the answer.

Transcribed from kxfan2002/SophiaVL-R1 at a818494, verl/workers/reward/custom.py:
`get_process_reward` (the evaluator prompt around the decoded policy prompt and the whole
response, "<image> " put first when an image goes with it; a system message, the text, then the
image as a PNG data URL; temperature 0) and `extract_score` (seven extractors tried in turn, the
first number found clamped to [0, 1]; 0 when none finds one). `CustomRewardManager.__call__`
decodes the prompt and the response without special tokens, removes `$` from the response, and
sends the first image of a sample whose `data_type` is "image" (none for a video).

Differences, both in what fails rather than what is scored: a request that fails scores 0 and is
counted at once (SophiaVL-R1 tries 10 times, sleeping 1 to 10 s between, then scores 0), and an
answer is read up to MAX_ANSWER_CHARS (its patterns run with `re`, one of them quadratic in
the length of a reply full of "**").
"""

from __future__ import annotations

import base64
import io
import re
from typing import Any

from PIL import Image

EVALUATOR = (
    "You are an expert reasoning evaluator. I will give you a multimodal question and an answer. Your goal is to "
    "judge a reward process and give a score between 0 and 1. You should focus on whether the reasoning process is "
    "good rather than whether the final answer is correct.### Evaluation Criteria:\n- **Logical Soundness**: Does "
    "each step follow logically from the previous one?\n- **Correct Reasoning**: Are the methods and steps used "
    "appropriate and valid? Are the facts and lemmas correctly stated and applied?\n- **Error Identification**: Are "
    "there any logical fallacies, unsupported assumptions, or incorrect steps?\n- **Language Consistency**: Is the "
    "reasoning process conducted in a single, consistent language without mixing different languages?\n- "
    "**Redundancy**: Is the reasoning concise, without unnecessary repetition or extraneous steps?\nProvide a single "
    "score from **{0, 0.1, 0.2, ..., 1.0}** based on the reasoning quality, where:\n - **0**: Completely flawed "
    "reasoning\n- **1**: Perfectly sound reasoning\n- Intermediate values (e.g., 0.3, 0.7) should reflect partial "
    "correctness or minor errors.\nBe strict, reward the good process and punish the bad one. You should only output "
    "the score without any explanation.\n    Question: PROMPT\n    Reasoning process: RESPONSE\n"
    "    Your response format: <answer>your_score</answer>\n    "
)
SYSTEM = "You are a helpful assistant."
MAX_ANSWER_CHARS = 16384


def evaluator_text(prompt: str, response: str, with_image: bool) -> str:
    """The evaluator prompt of `get_process_reward`, around the decoded prompt and the response
    (`$` removed by the manager before)."""
    if with_image and "<image>" not in prompt:
        prompt = f"<image> {prompt}"
    response = response.replace("$$", "").replace("$", "")
    head, _, rest = EVALUATOR.partition("PROMPT")
    middle, _, tail = rest.partition("RESPONSE")
    return f"{head}{prompt}{middle}{response}{tail}"


def png_base64(image: Image.Image) -> str:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode("utf-8")


def chat_request(model: str, text: str, image: Image.Image | None) -> dict[str, Any]:
    """The body of its POST to an OpenAI-style /v1/chat/completions."""
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    if image is not None:
        content.append({"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png_base64(image)}"}})
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": content}]
    return {"model": model, "messages": messages, "temperature": 0.0}


def _number(text: str) -> int | float:
    return int(text) if text.isdigit() else float(text)


def _after_think(text: str) -> int | float | None:
    match = re.search(r"</think>\s*<answer>\s*([\d.]+)\s*</answer>", text)
    if match:
        return _number(match.group(1))
    match = re.search(r"</think>\s*([\d.]+)", text)
    return _number(match.group(1)) if match else None


def _first_float(pattern: str):
    def extract(text: str) -> float | None:
        match = re.search(pattern, text)
        return float(match.group(1)) if match else None

    return extract


def _first_int(pattern: str):
    def extract(text: str) -> int | None:
        match = re.search(pattern, text)
        return int(match.group(1)) if match else None

    return extract


# extract_score's order: \box{}, <answer>, a bare 0-1 number, after </think>, then three
# "wrong steps" counts (read as scores, as there).
EXTRACTORS = (
    _first_float(r"\\box(?:es)?\{([01](?:\.\d)?)\}"),
    _first_float(r"<answer>\s*([01](?:\.\d)?)\s*</answer>"),
    _first_float(r"\b([01](?:\.\d)?)\b"),
    _after_think,
    _first_int(r"Total Wrong Steps\*\*:\s*(\d+)"),
    _first_int(r"\*\*(\d+)\s+wrong steps\*\*"),
    _first_int(r"\*\*.*?\bWrong Steps\*\*:\s*(\d+)"),
)


def extract_score(text: str) -> float:
    """The first score an extractor finds, clamped to [0, 1]; 0 when none does."""
    text = text[:MAX_ANSWER_CHARS]
    for extractor in EXTRACTORS:
        try:
            score = extractor(text)
        except ValueError:  # "1.2.3" after </think>: float() raises there too, and the call scores 0
            return 0.0
        if score is not None:
            return float(min(1, max(0, score)))
    return 0.0
