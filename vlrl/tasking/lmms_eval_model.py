"""What lmms-eval's model class does around a benchmark's prompt and its decoded answer.

`lmms-eval --model qwen2_5_vl` (and qwen3_vl, qwen3_5) runs the model's chat class
(lmms_eval/models/chat/ @ 75571cf: the registry prefers a chat class where one exists);
`--force_simple` runs the simple one (models/simple/), and Qwen2-VL has only a simple one.
They differ before the task's own code sees anything:

- chat classes render the task's chat messages (its doc_to_messages, or the images then
  doc_to_text) and return the answer uncut. Qwen3-VL's and Qwen3.5's insert their system
  prompt before the task's messages (a reasoning task's own system prompt then follows it);
  Qwen2.5-VL's inserts none (its chat template writes "You are a helpful assistant." when the
  conversation has no system message).
- simple classes render doc_to_text (any literal "<image>" deleted) under their system
  prompt, and cut the answer at the yaml's `until` strings. Qwen2.5-VL's and Qwen3-VL's drop the
  "\\n\\n" lmms-eval puts there when a yaml names none; Qwen2-VL's keeps it and cuts a
  response at its first blank line, and strips the answer it cut.
- Qwen3.5's classes (enable_thinking on by default) return what follows the answer's first
  "</think>", stripped, and "" when it has none.

Lengths: where a task's yaml sets no max_new_tokens, the class's default holds (128 in the
chat classes, 32,768 in Qwen2.5-VL's simple one, 1,024 in Qwen3.5's): `max_new_tokens`.

Images: each class sizes them within its own pixel budget (`image_pixels`, below, read at
75571cf and qwen-vl-utils 0.0.14 at the classes' default model_args). Qwen2-VL's and Qwen2.5-VL's
simple classes first send each image as a JPEG of quality 85 (their `_encode_image_data_url`),
which qwen-vl-utils decodes before sizing it: `jpeg_quality`. Qwen2.5-VL's chat class
resizes twice (qwen-vl-utils' 3,136 to 12,845,056, then its processor's 200,704 to 1,605,632);
vlrl resizes once into the second: the sizes agree except where the second rounding moves a
side by one patch.

The `--model` name also picks a task's prompt: a yaml's `lmms_eval_specific_kwargs` under that
name replace its defaults (MMStar's and MMMU's `qwen3_vl`): `Benchmark.model_kwargs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

LmmsEvalModel = Literal["auto", "simple"]
DEFAULT_UNTIL = ("\n\n",)  # lmms-eval's until where a yaml names none (its fewshot_delimiter)
MODEL_NAMES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5")  # `--model` of a family (its MoE variant's too)
# Each class's defaults at its default model_args: the (min, max) pixels its images come out
# within, and its max_new_tokens where a task's yaml names none. The simple classes pass their
# min_pixels / max_pixels with each image (Qwen2-VL 3,136 / 602,112; Qwen2.5-VL and Qwen3-VL
# 256 x 28 x 28 / 1,605,632; Qwen3.5 64 x 32 x 32 / 128 x 32 x 32); the chat classes pass none,
# so qwen-vl-utils' defaults hold (4 to 16,384 tokens of 32 x 32 for Qwen3-VL and Qwen3.5, the
# processor told not to resize), but for Qwen2.5-VL's, whose processor then resizes into its own.
CLASS_DEFAULTS: dict[tuple[str, str], tuple[tuple[int, int], int]] = {
    ("qwen2_vl", "simple"): ((3136, 602112), 128),
    ("qwen2_5_vl", "simple"): ((200704, 1605632), 32768),
    ("qwen2_5_vl", "chat"): ((200704, 1605632), 128),
    ("qwen3_vl", "simple"): ((200704, 1605632), 128),
    ("qwen3_vl", "chat"): ((4096, 16777216), 128),
    ("qwen3_5", "simple"): ((65536, 131072), 1024),
    ("qwen3_5", "chat"): ((4096, 16777216), 1024),
}


@dataclass(frozen=True)
class ModelClass:
    """One lmms-eval model class, as far as a benchmark's prompt and scoring see it."""

    chat: bool = True  # models/chat/: the task's messages, the answer uncut
    system_first: bool = False  # chat: the class's system prompt before the task's messages
    keeps_blank_line_until: bool = False  # simple: "\n\n" (lmms-eval's default until) kept as a cut
    strips_answer: bool = False  # simple: the cut answer stripped of surrounding whitespace (Qwen2-VL's)
    strips_thinking: bool = False  # the answer after its first "</think>" ("" without one)
    name: str = ""  # the `--model` name ("": a family lmms-eval has no class for), which picks task kwargs
    image_pixels: tuple[int, int] | None = None  # (min, max) pixels of its images; None: the model config's
    jpeg_quality: int = 0  # its images re-encoded as JPEG at this quality before they are sized (0: not)
    max_new_tokens: int = 0  # its answer length where a yaml sets none (0: the config's)
    source: str = "models/chat/ (no class of the family's)"  # the class's file at 75571cf, for the results

    def until(self, yaml_until: tuple[str, ...]) -> tuple[str, ...]:
        """The strings the class cuts an answer at, in order: none for a chat class."""
        if self.chat:
            return ()
        given = yaml_until or DEFAULT_UNTIL
        return given if self.keeps_blank_line_until else tuple(t for t in given if t != "\n\n")

    def answer(self, decoded: str, yaml_until: tuple[str, ...]) -> str:
        """What the class returns for a decoded answer: cut at `until`, then its thinking stripped."""
        for term in self.until(yaml_until):
            if term:
                decoded = decoded.split(term)[0]
        if self.strips_answer:
            decoded = decoded.strip()
        return decoded.partition("</think>")[2].strip() if self.strips_thinking else decoded


def lmms_eval_model_class(
    family: str, which: LmmsEvalModel = "auto", enable_thinking: bool | None = None
) -> ModelClass:
    """The class `lmms-eval --model <family>` runs (`which="simple"`: with --force_simple).
    `enable_thinking`: the model's chat_template_kwargs' (lmms-eval's Qwen3.5 default: on).
    A family lmms-eval has no class for gets the plain chat class."""
    name = next((m for m in MODEL_NAMES if family.startswith(m)), "")
    simple = which == "simple" or name == "qwen2_vl"
    kind = "simple" if simple else "chat"
    pixels, length = CLASS_DEFAULTS.get((name, kind), (None, 0))
    return ModelClass(
        chat=not simple,
        system_first=not simple and name in ("qwen3_vl", "qwen3_5"),
        keeps_blank_line_until=name == "qwen2_vl",
        strips_answer=name == "qwen2_vl",
        strips_thinking=name == "qwen3_5" and enable_thinking is not False,
        name=name,
        image_pixels=pixels,
        jpeg_quality=85 if simple and name in ("qwen2_vl", "qwen2_5_vl") else 0,
        max_new_tokens=length,
        source=f"models/{kind}/{name}.py" if name else f"models/{kind}/ (no class of the family's)",
    )
