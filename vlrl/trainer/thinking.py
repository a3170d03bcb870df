"""Thinking-reward scorers for Trust-GRPO: how good is a completion's reasoning, in [0, 1]?

A scorer takes samples and completions and returns one score each. Three kinds:
a Python callable (`module:function` or `path/to/file.py:function`), an HTTP endpoint, or a
local judge model run through the rollout engine (`judge:PATH`); the last two ask in vlrl's
protocol or in SophiaVL-R1's (`algo.trust.protocol`, sophiavl_r1.py), which also reads what the
policy was asked (`Asked`). A scorer never ends a run: a failed call scores 0 and is counted.
"""

from __future__ import annotations

import dataclasses
import json
import math
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import regex
import torch
from PIL import Image

from vlrl.config import ConfigError, ModelConfig, TrustConfig
from vlrl.data.sample import Sample
from vlrl.rollout.parts import RolloutRows
from vlrl.trainer import sophiavl_r1

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


@dataclass(frozen=True)
class Asked:
    """What the policy was asked, as a reward model reads it: the prompt decoded without special
    tokens (SophiaVL-R1's prompt_str) and its first image as the policy saw it (None: a video)."""

    prompt: str
    image: Image.Image | None


class ThinkingScorer:
    """Scores completions; `failures` counts calls that produced no usable score. A scorer that
    `reads_prompt` is also given what the policy was asked. A GPU out of memory is not a failed
    call but the run's (a local judge's calls halve where trainer.halve_on_oom lets them): it
    ends the run, as the policy's rollout's does, rather than score 0 at every step."""

    def __init__(self, score_batch: Callable[..., list[Any]], reads_prompt: bool = False):
        self._score_batch = score_batch
        self.reads_prompt = reads_prompt
        self.failures = 0

    def __call__(
        self, samples: Sequence[Sample], completions: Sequence[str], asked: Asked | None = None
    ) -> list[float]:
        try:
            given = (samples, completions, asked) if self.reads_prompt else (samples, completions)
            raw = list(self._score_batch(*given))
            if len(raw) != len(completions):
                raise ValueError(f"{len(raw)} scores for {len(completions)} completions")
        except torch.OutOfMemoryError:
            raise
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


def sophiavl_http_scorer(url: str, model: str, timeout: float) -> Callable:
    """SophiaVL-R1's request, one per completion (eight at a time), to an OpenAI-style chat
    completions URL serving its thinking reward model; the answer read by its extract_score."""

    def one(text: str, image: Image.Image | None) -> float | None:
        body = json.dumps(sophiavl_r1.chat_request(model, text, image)).encode()
        request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                answer = json.loads(response.read(1 << 24))["choices"][0]["message"]["content"]
        except Exception:
            return None
        return sophiavl_r1.extract_score(answer) if isinstance(answer, str) else None

    def score(samples: Sequence[Sample], completions: Sequence[str], asked: Asked) -> list[Any]:
        with_image = asked.image is not None
        texts = [sophiavl_r1.evaluator_text(asked.prompt, c, with_image) for c in completions]
        with ThreadPoolExecutor(max_workers=8) as pool:
            return list(pool.map(lambda text: one(text, asked.image), texts))

    return score


def judge_scorer(path: str, model_cfg: ModelConfig, max_new_tokens: int, rows: RolloutRows | None = None) -> Callable:
    """A local VLM asked to rate the reasoning given the same images and video: 0-10, its answer
    / 10; or, given what the policy was asked (protocol sophiavl_r1), SophiaVL-R1's request with
    the first image, read by its extract_score. Its calls in parts of `rows` once one ran the
    GPU out of memory (rollout/parts.py; by default the error propagates: ThinkingScorer ends the
    run on it)."""
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

    def vlrl_job(sample: Sample, completion: str) -> tuple[list[dict], Sample]:
        text = JUDGE_TEMPLATE.format(problem=sample.problem, thinking=thinking_text(completion)[:4000])
        vision = [{"type": "image"} for _ in sample.images] + ([{"type": "video"}] if sample.video else [])
        return [{"role": "user", "content": [*vision, {"type": "text", "text": text}]}], sample

    def sophiavl_job(sample: Sample, completion: str, asked: Asked) -> tuple[list[dict], Sample]:
        text = sophiavl_r1.evaluator_text(asked.prompt, completion, asked.image is not None)
        content: list[dict] = [{"type": "text", "text": text}]
        if asked.image is not None:  # the first image, after the text, as its chat request puts it
            content.append({"type": "image"})
        first = dataclasses.replace(sample, images=sample.images[:1] if asked.image else [], video=None)
        return [{"role": "system", "content": sophiavl_r1.SYSTEM}, {"role": "user", "content": content}], first

    def score(samples: Sequence[Sample], completions: Sequence[str], asked: Asked | None = None) -> list[Any]:
        pairs = zip(samples, completions, strict=True)
        jobs = [sophiavl_job(s, c, asked) if asked else vlrl_job(s, c) for s, c in pairs]
        prompts = render_prompts(processor, jobs, model_cfg)  # one processor call; a video decoded once
        for prompt in prompts:
            if isinstance(prompt, UnusableSample):  # as render_prompt raised it (the rollout read the media)
                raise prompt
        answers = [g.completions[0].text for g in (rows or RolloutRows()).generate(engine, prompts, params)]
        if asked is not None:
            return [sophiavl_r1.extract_score(answer) for answer in answers]
        matches = [search(NUMBER, answer) for answer in answers]
        return [float(match.group(0)) / 10 if match else None for match in matches]

    return score


def make_scorer(cfg: TrustConfig, model_cfg: ModelConfig, rows: RolloutRows | None = None) -> ThinkingScorer | None:
    """The thinking scorer algo.trust.scorer names (None: off); what is wrong with it names the
    key. A local judge's calls go on in parts of `rows` once one ran the GPU out of memory."""
    if not cfg.scorer:
        return None
    try:
        return scorer_of(cfg, model_cfg, rows)
    except ConfigError as err:
        if str(err).startswith("config: algo.trust.scorer"):
            raise
        raise ConfigError(f"config: algo.trust.scorer {cfg.scorer!r}: {str(err).removeprefix('config: ')}") from err


def scorer_of(cfg: TrustConfig, model_cfg: ModelConfig, rows: RolloutRows | None = None) -> ThinkingScorer:
    spec = cfg.scorer
    sophiavl = cfg.protocol == "sophiavl_r1"
    if spec.startswith(("http://", "https://")):
        if sophiavl:
            return ThinkingScorer(sophiavl_http_scorer(spec, cfg.judge_model, cfg.timeout_s), reads_prompt=True)
        return ThinkingScorer(http_scorer(spec, cfg.timeout_s))
    if spec.startswith("judge:"):
        judge = judge_scorer(spec.split(":", 1)[1], model_cfg, cfg.judge_max_new_tokens, rows)
        return ThinkingScorer(judge, reads_prompt=sophiavl)
    if ":" in spec:
        from vlrl.plugins import call_refused, import_object

        fn = import_object(spec)
        if not callable(fn):
            raise ConfigError(f"config: algo.trust.scorer {spec!r} is not callable")
        if (refused := call_refused(fn, [], [])) is not None:  # it would fail every call, each scored 0
            raise ConfigError(
                f"config: algo.trust.scorer {spec!r} cannot be called as fn(samples, completions) -> list[float]: "
                f"{refused}"
            ) from refused
        return ThinkingScorer(fn)
    raise ConfigError(
        f"config: algo.trust.scorer {spec!r}: expected module:function, path.py:function, http(s)://... or judge:PATH"
    )
