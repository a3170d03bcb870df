"""Thinking-reward scorers for Trust-GRPO: how good is a completion's reasoning, in [0, 1]?

A scorer takes samples and completions and returns one score each. Three kinds:
a Python callable (`module:function` or `path/to/file.py:function`), an HTTP endpoint, or a
local judge model run through the rollout engine (`judge:PATH`). A scorer never ends a run:
a failed call scores 0 and is counted.
"""

from __future__ import annotations

import json
import math
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

import regex

from vlrl.config import ConfigError, ModelConfig, TrustConfig
from vlrl.data.sample import Sample

# Model output is searched with a time limit (the `regex` module's), as rewards/text.py searches
MATCH_TIMEOUT_S = 0.25
THINK = regex.compile(r"<think>(.*?)</think>", regex.DOTALL | regex.VERSION0)
NUMBER = regex.compile(r"\d+(?:\.\d+)?", regex.VERSION0)


def search(pattern: regex.Pattern, text: str) -> regex.Match | None:
    try:
        return pattern.search(text, timeout=MATCH_TIMEOUT_S)
    except TimeoutError:
        return None


JUDGE_TEMPLATE = (
    "Question: {problem}\nA model reasoned as follows:\n{thinking}\n\n"
    "Rate how sound, relevant and faithful to the image this reasoning is, from 0 (useless) to 10 (flawless). "
    "Answer with the number only."
)


def thinking_text(completion: str) -> str:
    """The reasoning of a completion: the <think> block if there is one, else all of it."""
    match = search(THINK, completion)
    return match.group(1).strip() if match else completion


def clean_score(value: Any) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return min(1.0, max(0.0, value)) if math.isfinite(value) else None


class ThinkingScorer:
    """Scores completions; `failures` counts calls that produced no usable score."""

    def __init__(self, score_batch: Callable[[Sequence[Sample], Sequence[str]], list[Any]]):
        self._score_batch = score_batch
        self.failures = 0

    def __call__(self, samples: Sequence[Sample], completions: Sequence[str]) -> list[float]:
        try:
            raw = list(self._score_batch(samples, completions))
            if len(raw) != len(completions):
                raise ValueError(f"{len(raw)} scores for {len(completions)} completions")
        except Exception:
            raw = [None] * len(completions)
        scores = []
        for value in raw:
            score = clean_score(value)
            self.failures += score is None
            scores.append(0.0 if score is None else score)
        return scores


def http_scorer(url: str, timeout: float) -> Callable[[Sequence[Sample], Sequence[str]], list[Any]]:
    """POST {"items": [{"id", "problem", "completion", "thinking"}]} -> {"scores": [float, ...]}."""

    def score(samples: Sequence[Sample], completions: Sequence[str]) -> list[Any]:
        items = [
            {"id": s.id, "problem": s.problem, "completion": c, "thinking": thinking_text(c)}
            for s, c in zip(samples, completions, strict=True)
        ]
        request = urllib.request.Request(
            url, data=json.dumps({"items": items}).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read(1 << 24))["scores"]

    return score


def judge_scorer(path: str, model_cfg: ModelConfig, max_new_tokens: int) -> Callable:
    """A local VLM asked to rate the reasoning 0-10 given the same images and video; its answer / 10."""
    from vlrl.models.loading import load_model, load_processor
    from vlrl.models.prompting import UnusableSample, render_prompts
    from vlrl.rollout import SamplingParams
    from vlrl.rollout.hf import HFEngine

    judge_cfg = ModelConfig(
        path=path, dtype=model_cfg.dtype, min_pixels=model_cfg.min_pixels, max_pixels=model_cfg.max_pixels
    )
    processor = load_processor(judge_cfg)
    model = load_model(judge_cfg).eval().requires_grad_(False)
    engine = HFEngine(model, processor.tokenizer)
    params = SamplingParams(n=1, max_new_tokens=max_new_tokens, temperature=0.0)

    def score(samples: Sequence[Sample], completions: Sequence[str]) -> list[Any]:
        jobs = []
        for sample, completion in zip(samples, completions, strict=True):
            text = JUDGE_TEMPLATE.format(problem=sample.problem, thinking=thinking_text(completion)[:4000])
            vision = [{"type": "image"} for _ in sample.images] + ([{"type": "video"}] if sample.video else [])
            jobs.append(([{"role": "user", "content": [*vision, {"type": "text", "text": text}]}], sample))
        prompts = render_prompts(processor, jobs, model_cfg)  # one processor call; a video decoded once
        for prompt in prompts:
            if isinstance(prompt, UnusableSample):  # as render_prompt raised it (the rollout read the media)
                raise prompt
        answers = engine.generate(prompts, params)
        out = []
        for generation in answers:
            match = search(NUMBER, generation.completions[0].text)
            out.append(float(match.group(0)) / 10 if match else None)
        return out

    return score


def make_scorer(cfg: TrustConfig, model_cfg: ModelConfig) -> ThinkingScorer | None:
    spec = cfg.scorer
    if not spec:
        return None
    if spec.startswith(("http://", "https://")):
        return ThinkingScorer(http_scorer(spec, cfg.timeout_s))
    if spec.startswith("judge:"):
        return ThinkingScorer(judge_scorer(spec.split(":", 1)[1], model_cfg, cfg.judge_max_new_tokens))
    if ":" in spec:
        from vlrl.plugins import import_object

        fn = import_object(spec)
        if not callable(fn):
            raise ConfigError(f"config: algo.trust.scorer {spec!r} is not callable")
        return ThinkingScorer(fn)
    raise ConfigError(
        f"config: algo.trust.scorer {spec!r}: expected module:function, path.py:function, http(s)://... or judge:PATH"
    )
