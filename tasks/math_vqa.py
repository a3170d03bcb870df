"""Math and reasoning VQA: a problem (with images, or text only), a free-form or choice-letter
answer, verified as each public recipe verifies it (rewards/math.py).

Records (json list or jsonl, or a parquet / arrow table as published), read unchanged:

- EasyR1 / hiyouga/geometry3k: `images` (list of images), `problem` (its `<image>`
  placeholders mark where each image goes), `answer`.
- MM-Eureka / FanqingM/MMK12: `image` (one image), `question` (options inline for the
  multiple-choice test split), `answer` (a letter for those).
- LMM-R1 and MM-Eureka training files: `message`, the chat as a JSON string (or list) of
  {"role", "content"} with text parts and image parts {"type": "image", "image": "file:///..."},
  and `answer` (LaTeX, e.g. "$\\boxed{60}$"). A record without image parts is text-only
  (LMM-R1's stage 1); such records need no images at all.
- VisualThinker-R1-Zero (SAT): `messages` ([user with `<image>`, assistant = the answer]) and
  `images`.

A text-only record (no image anywhere) is a text-only sample: every model family trains and
evaluates on it (LMM-R1). Extra keys are ignored; the synthetic generator (data_prep/
math_vqa.py) writes Geometry3K's keys plus `count` and `addend`, which make the SFT target's
reasoning.

Variants (task.options.variant) set the prompt, the answer extraction and the grader:

- `easyr1` (default): EasyR1's Geometry3K recipe, format_prompt/math.jinja (the problem, a
  space, "You FIRST think ... put in \\boxed{}."), rewards `accuracy` 0.9 and `format` 0.1.
- `easyr1_r1v`: EasyR1's r1v.jinja prompt and reward_function/r1v.py, 0.5 / 0.5.
- `mm_eureka`: MM-Eureka's system prompt (MMK12), `accuracy` 1.0 and `format` 0.5.
- `lmm_r1`: LMM-R1's system prompt and verifier, 1.0 / 0.5.
- `visualthinker`: VisualThinker-R1-Zero's base-model prompt (no chat template: set
  model.chat_template: none), which ends with `<think>`; 1.0 / 1.0. `base_model: false` gives its
  instruct prompt instead.

The last three need math-verify (`pip install 'vlrl[math]'`), as their recipes do; the task
refuses to start without it. Records with `message` are prompted with their own messages
(`record_messages`), as LMM-R1 and MM-Eureka train.

Every variant also offers `hfrrf`, Vision-R1's hard formatting result reward: 1 only when the
variant's format and accuracy both hold (`task.rewards: {hfrrf: 1.0}`, configs/vision_r1.yaml).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from data_prep.math_vqa import MathSceneSpec, write_synthetic_math_vqa
from data_prep.shapes import SceneSpec
from rewards import math as rm
from tasks.records import IMAGE, record_image, split_images
from vlrl.config import ConfigError, build
from vlrl.data.records import RecordContext
from vlrl.data.sample import Sample
from vlrl.tasking.task import RewardFn, Task

Variant = Literal["easyr1", "easyr1_r1v", "mm_eureka", "lmm_r1", "visualthinker"]

# EasyR1 examples/format_prompt/math.jinja and r1v.jinja, after `{{ content | trim }}`.
EASYR1_MATH = (
    " You FIRST think about the reasoning process as an internal monologue and then provide the final answer. "
    "The reasoning process MUST BE enclosed within <think> </think> tags. The final answer MUST BE put in \\boxed{}."
)
EASYR1_R1V = (
    " A conversation between User and Assistant. The user asks a question, and the Assistant solves it. The "
    "assistant first thinks about the reasoning process in the mind and then provides the user with the answer. "
    "The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags, "
    "respectively, i.e., <think> reasoning process here </think><answer> answer here </answer>"
)
# MM-Eureka's reward file's worked example (reward_func_qwen_instruct.py, a comment at line 41 on
# branch MM-EUREKA-Qwen, fbd0fc0; the qwen branch's copy has none) and LMM-R1's paper (App. E),
# verbatim ("$...$.The").
MM_EUREKA_SYSTEM = (
    "You are a helpful assistant good at solving math problems with step-by-step reasoning. You should first "
    "thinks about the reasoning process in the mind and then provides the user with the answer. Your answer must "
    "be in latex format and wrapped in $...$.The reasoning process and answer are enclosed within <think> </think> "
    "and <answer> </answer> tags, respectively, i.e., <think> Since $1+1=2$, so the answer is $2$. </think>"
    "<answer> $2$ </answer>, which means your output should start with <think> and end with </answer>."
)
# VisualThinker-R1-Zero grpo.py make_conversation_sat: the base model's raw prompt (its text item
# begins with the literal "<image>") and the instruct model's QUESTION_TEMPLATE (two spaces).
VISUALTHINKER_BASE = (
    "<image>A conversation between User and Assistant. The user asks a question about the image, and the "
    "Assistant solves it. The assistant first thinks about the reasoning process in the mind and then provides "
    "the user with the answer.\nUser: {question} \nAssistant: Let me solve this step by step.\n<think>"
)
VISUALTHINKER_INSTRUCT = (
    "{Question}  Output the thinking process in <think> </think> and final answer (option) in <answer> </answer> tags."
)

# variant -> (accuracy, format, default weights)
REWARDS = {
    "easyr1": (rm.easyr1_accuracy, rm.easyr1_format, {"accuracy": 0.9, "format": 0.1}),
    "easyr1_r1v": (rm.easyr1_r1v_accuracy, rm.easyr1_r1v_format, {"accuracy": 0.5, "format": 0.5}),
    "mm_eureka": (rm.mm_eureka_accuracy, rm.mm_eureka_format, {"accuracy": 1.0, "format": 0.5}),
    "lmm_r1": (rm.lmm_r1_accuracy, rm.lmm_r1_format, {"accuracy": 1.0, "format": 0.5}),
    "visualthinker": (rm.visualthinker_accuracy, None, {"accuracy": 1.0, "format": 1.0}),
}
NEEDS_MATH_VERIFY = ("mm_eureka", "lmm_r1", "visualthinker")


@dataclass
class MathVQAOptions:
    variant: Variant = "easyr1"
    # Records with `message` are prompted with their own chat (LMM-R1, MM-Eureka); false: the variant's prompt.
    record_messages: bool = True
    base_model: bool = True  # visualthinker: the base model's raw prompt (else its instruct template)
    # Added to an integer answer in the SFT target (and its reasoning): 1 imitates a teacher one
    # too high (the demo's cold start); other answers are left as they are.
    target_answer_offset: int = 0
    synthetic_scene: dict[str, Any] = field(default_factory=dict)  # SceneSpec fields (data_prep/shapes.py)
    synthetic_max_addend: int = 3
    synthetic_text_only_every: int = 0  # every N-th synthetic problem has no image


class MathVQA(Task):
    name = "math_vqa"
    states_coordinates = False
    description = "Math / reasoning VQA (Geometry3K, MMK12, LMM-R1 records): EasyR1, MM-Eureka, LMM-R1, VisualThinker"
    Options = MathVQAOptions
    default_rewards = REWARDS["easyr1"][2]
    data_suffix = ".json"

    def __init__(self, options: dict[str, Any] | None = None, rewards: dict[str, float] | None = None):
        super().__init__(options, rewards)
        if self.options.variant in NEEDS_MATH_VERIFY:
            try:
                rm.require_math_verify()
            except ImportError as err:
                raise ConfigError(f"config: task.options.variant {self.options.variant!r}: {err}") from err

    def default_weights(self) -> dict[str, float]:
        return REWARDS[self.options.variant][2]

    # -- data -----------------------------------------------------------------------------
    def build_sample(self, record: dict[str, Any], ctx: RecordContext) -> Sample:
        meta: dict[str, Any] = {k: record[k] for k in ("count", "addend") if isinstance(record.get(k), int)}
        if "message" in record:
            parts, system, images = _chat(record, ctx)
            meta.update(parts=parts, system=system)
            problem = "".join(p["text"] if p["type"] == "text" else IMAGE for p in parts)
        elif "messages" in record:
            problem, answer, images = _sat(record, ctx)
        else:
            key = "problem" if "problem" in record else "question"
            problem = ctx.get(record, key, str, "the problem text")
            images = _images(record, ctx)
            placeholders = problem.count(IMAGE)
            if placeholders and placeholders != len(images):
                raise ctx.error(f"'{key}' has {placeholders} {IMAGE} placeholders for {len(images)} images")
        if "messages" not in record:
            answer = ctx.get(record, "answer", (str, int, float), "the answer (text or a number)")
        if (isinstance(answer, float) and not math.isfinite(answer)) or not str(answer).strip():  # NaN, Infinity, ""
            raise ctx.error(f"key 'answer' must be text or a finite number, got {answer!r}"[:200])
        frame = None
        if images:
            _, width, height = images[0]
            frame = ctx.frame_spec.frame(width, height)
        return Sample(
            id=ctx.record_id(record),
            task=self.name,
            problem=problem,
            solution=str(answer),
            images=[path for path, _, _ in images],
            frame=frame,
            meta=meta,
            source=ctx.source,
        )

    def synthesize(self, path: str | Path, size: int, seed: int) -> None:
        scene = {**asdict(MathSceneSpec().scene), **self.options.synthetic_scene}
        spec = MathSceneSpec(
            scene=build(SceneSpec, scene, prefix="task.options.synthetic_scene."),
            max_addend=self.options.synthetic_max_addend,
            text_only_every=self.options.synthetic_text_only_every,
        )
        write_synthetic_math_vqa(path, size, seed, spec)

    # -- prompting ------------------------------------------------------------------------
    def messages(self, sample: Sample) -> list[dict[str, Any]]:
        variant = self.options.variant
        if "parts" in sample.meta and self.options.record_messages:
            system = sample.meta["system"]
            user = {"role": "user", "content": [dict(p) for p in sample.meta["parts"]]}
            return ([_system(system)] if system is not None else []) + [user]
        if variant == "visualthinker":
            return self._visualthinker(sample)
        images = [{"type": "image"} for _ in sample.images]
        if variant in ("mm_eureka", "lmm_r1"):
            question = sample.problem.replace(IMAGE, "")
            return [
                _system(MM_EUREKA_SYSTEM),
                {"role": "user", "content": [*images, {"type": "text", "text": question}]},
            ]
        text = sample.problem.strip() + (EASYR1_MATH if variant == "easyr1" else EASYR1_R1V)
        return [{"role": "user", "content": split_images(text, len(sample.images))}]

    def _visualthinker(self, sample: Sample) -> list[dict[str, Any]]:
        images = [{"type": "image"} for _ in sample.images]
        if self.options.base_model:
            text = VISUALTHINKER_BASE.format(question=sample.problem.replace(IMAGE, ""))
        else:
            text = VISUALTHINKER_INSTRUCT.format(Question=sample.problem)
        return [{"role": "user", "content": [*images, {"type": "text", "text": text}]}]

    def target(self, sample: Sample) -> str:
        answer, reasoning = self._taught(sample)
        variant = self.options.variant
        if variant == "easyr1":
            return f"<think>{reasoning}</think> \\boxed{{{answer}}}"
        if variant in ("mm_eureka", "lmm_r1"):
            latex = answer if answer.startswith("$") else f"${answer}$"
            return f"<think>{reasoning}</think><answer>{latex}</answer>"
        if variant == "visualthinker" and self.options.base_model:
            return f" {reasoning} </think><answer>{answer}</answer>"
        return f"<think>{reasoning}</think><answer>{answer}</answer>"

    def _taught(self, sample: Sample) -> tuple[str, str]:
        """The teacher's answer and reasoning (off by target_answer_offset on integer answers)."""
        offset, answer = self.options.target_answer_offset, sample.solution
        if offset and answer.lstrip("-").isdigit():
            answer = str(int(answer) + offset)
        if "count" in sample.meta and "addend" in sample.meta:
            count, addend = sample.meta["count"] + offset, sample.meta["addend"]
            return answer, f"I count {count}. {count} + {addend} = {count + addend}."
        return answer, f"The answer is {answer}."

    # -- scoring --------------------------------------------------------------------------
    def reward_functions(self) -> dict[str, RewardFn]:
        accuracy, fmt, _ = REWARDS[self.options.variant]
        if fmt is None:  # visualthinker: the base prompt's <think> is the completion's start
            prefilled = self.options.base_model

            def fmt(c: str) -> float:
                return rm.visualthinker_format(c, prefilled)

        def right(completions: Sequence[str], samples: Sequence[Sample]) -> list[float]:
            return [accuracy(c, s.solution) for c, s in zip(completions, samples, strict=True)]

        def formatted(completions: Sequence[str], samples: Sequence[Sample]) -> list[float]:
            return [fmt(c) for c in completions]

        def hfrrf(completions: Sequence[str], samples: Sequence[Sample]) -> list[float]:
            pairs = zip(formatted(completions, samples), right(completions, samples), strict=True)
            return [rm.hard_format_result(f, a) for f, a in pairs]

        return {"accuracy": right, "format": formatted, "hfrrf": hfrrf}

    def predict(self, completion: str, sample: Sample) -> str | None:
        """The answer text the variant grades (None where it finds none)."""
        if self.options.variant == "easyr1":
            return rm.easyr1_answer(completion)
        match = rm.search(rm.FIRST_ANSWER_LINE, completion)
        return match.group(1).strip() if match else None

    def metrics(self, samples: Sequence[Sample], completions: Sequence[str]) -> dict[str, float]:
        """accuracy and format rate as the variant's rewards score them; parse rate: an answer
        was found where the variant looks for it. A completion math-verify gives no verdict on
        in time (rewards/math.py's VERIFY_SECONDS) is wrong here, as its reward is 0."""
        n = len(samples)
        if n == 0:
            return {}
        functions = self.reward_functions()
        accuracy = [_right_in_time(functions["accuracy"], c, s) for c, s in zip(completions, samples, strict=True)]
        formatted = functions["format"](completions, samples)
        parsed = [self.predict(c, s) is not None for c, s in zip(completions, samples, strict=True)]
        return {"accuracy": sum(accuracy) / n, "format_rate": sum(formatted) / n, "parse_rate": sum(parsed) / n}


def _right_in_time(accuracy: RewardFn, completion: str, sample: Sample) -> float:
    try:
        return accuracy([completion], [sample])[0]
    except TimeoutError:
        return 0.0


def _system(text: str) -> dict[str, Any]:
    return {"role": "system", "content": [{"type": "text", "text": text}]}


def _images(record: dict[str, Any], ctx: RecordContext) -> list[tuple[str, int, int]]:
    """The record's images: `images` (a list, possibly empty) or `image` (one, or a list of one)."""
    if "images" in record:
        value = ctx.get(record, "images", list, "a list of image paths")
        if not all(isinstance(v, str) and v.strip() for v in value):
            raise ctx.error("key 'images' must be a list of image paths")
        return [ctx.image(v) for v in value]
    if record.get("image") is None:
        return []
    return [record_image(record, ctx)]


def _chat(record: dict[str, Any], ctx: RecordContext) -> tuple[list[dict[str, Any]], str | None, list]:
    """LMM-R1 / MM-Eureka `message`: (user content parts, system text, images in order)."""
    value = record["message"]
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as err:
            raise ctx.error(f"key 'message' is not a JSON message list: {err}") from err
    if not isinstance(value, list) or not all(isinstance(m, dict) and "role" in m for m in value):
        raise ctx.error("key 'message' must be a list of {'role', 'content'} messages")
    system, parts, images = None, [], []
    for message in value:
        content = message.get("content")
        if message["role"] == "system":
            system = content if isinstance(content, str) else "".join(p.get("text", "") for p in content or [])
            continue
        if message["role"] != "user":
            raise ctx.error(f"key 'message': a {message['role']!r} turn; expected system and user turns")
        for part in [{"type": "text", "text": content}] if isinstance(content, str) else content or []:
            if not isinstance(part, dict):
                raise ctx.error(f"key 'message': content part {part!r} is not an object"[:200])
            if part.get("type") == "image":
                image = part.get("image")
                if not isinstance(image, str):
                    raise ctx.error("key 'message': an image part without an 'image' path")
                images.append(ctx.image(image.removeprefix("file://")))
                parts.append({"type": "image"})
            elif part.get("type") == "text" and isinstance(part.get("text"), str):
                parts.append({"type": "text", "text": part["text"]})
            else:
                raise ctx.error(f"key 'message': unknown content part {part!r}"[:200])
    if not parts:
        raise ctx.error("key 'message' has no user content")
    return parts, system, images


def _sat(record: dict[str, Any], ctx: RecordContext) -> tuple[str, str, list]:
    """VisualThinker's SAT json: messages = [user text with `<image>`, assistant answer], images."""
    messages = ctx.get(record, "messages", list, "[user, assistant] messages")
    if len(messages) != 2 or not all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages):
        raise ctx.error("key 'messages' must be [user, assistant] messages with text content")
    return messages[0]["content"], messages[1]["content"], _images(record, ctx)
