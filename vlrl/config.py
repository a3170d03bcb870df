"""One dataclass tree for every command: YAML file + dotted overrides (``key.sub=value``).

Validation happens here, before any model loads: an unknown key, a value of the wrong
type or outside the allowed set fails with the dotted key and what was expected.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import math
import re
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Union, get_args, get_origin, get_type_hints

import yaml

PIL_REFUSES_ABOVE = 2 * 89_478_485  # PIL's Image.open raises DecompressionBombError above this


class ConfigError(ValueError):
    """A configuration key or value is wrong; the message names the key."""


class UnknownKey(ConfigError):
    """A key no section has (`key`, dotted): load_config adds where it was set."""

    def __init__(self, message: str, key: str):
        super().__init__(message)
        self.key = key


class ConfigProblems(ConfigError):
    """Several refusals said at once (`errors`, each a ConfigError naming its key), so that a
    config is fixed in one pass rather than one key per run."""

    def __init__(self, errors: list[ConfigError]):
        self.errors = errors
        lines = [str(err).removeprefix("config: ") for err in errors]
        super().__init__(f"config: {len(errors)} problems:\n" + "\n".join(f"  - {line}" for line in lines))


def raise_all(errors: list[ConfigError]) -> None:
    """Raise the one error as it is, or several together (ConfigProblems are flattened)."""
    flat = [e for err in errors for e in (err.errors if isinstance(err, ConfigProblems) else [err])]
    if len(flat) == 1:
        raise flat[0]
    if flat:
        raise ConfigProblems(flat)


def first_line(err: BaseException) -> str:
    """An exception quoted inside a one-line message: its message's first line, or its type's name."""
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__


def require_positive(key: str, section: Any, *names: str) -> None:
    """`key.name` > 0 for each name of `section`."""
    for name in names:
        value = getattr(section, name)
        if value <= 0:
            raise ConfigError(f"config: {key}.{name} must be > 0, got {value}")


def require_nonnegative(key: str, section: Any, *names: str) -> None:
    """`key.name` >= 0 for each name of `section`."""
    for name in names:
        value = getattr(section, name)
        if value < 0:
            raise ConfigError(f"config: {key}.{name} must be >= 0, got {value}")


def require_top_p(key: str, section: Any) -> None:
    """`key.top_p` in (0, 1], as a nucleus is."""
    if not 0 < section.top_p <= 1:
        raise ConfigError(f"config: {key}.top_p must be in (0, 1], got {section.top_p}")


def plugin_sections() -> Any:
    """A section's field holding the option sections of the plugins it chooses (`rollout.vllm`,
    `trainer.fsdp`): any key of the section that is a mapping and no field of its own. The
    chosen plugin reads and validates its own (vlrl/plugins.py: `plugin_options`)."""
    return field(default_factory=dict, metadata={"plugin_sections": True})


# No default model: a default that trains or scores a random tiny model when a real run
# forgot model.path would fail silently. vlrl never downloads: a hub id loads only from the
# local Hugging Face cache.
MODEL_PATH_MISSING = (
    "config: model.path is not set. Give a local checkpoint directory, or the hub id of a model in the local "
    "Hugging Face cache (vlrl never downloads one: `huggingface-cli download Qwen/Qwen2.5-VL-3B-Instruct`, then "
    "model.path=Qwen/Qwen2.5-VL-3B-Instruct), a vlrl run's checkpoint (RUN/checkpoints/step-N), "
    "or model.path=tiny:qwen2_5_vl for the built-in tiny model with random weights (what configs/demo/ use)"
)


DOTTED_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")  # a layer or parameter name, not a pattern


@dataclass
class LoraConfig:
    r: int = 0  # 0 trains all weights; > 0 trains LoRA adapters of this rank
    # PEFT's lora_alpha: each adapter's output is scaled by alpha / r (alpha / sqrt(r) with use_rslora)
    alpha: int = 32
    use_rslora: bool = False  # rank-stabilized LoRA's scale, alpha / sqrt(r) (PEFT's and TRL's use_rslora)
    # on the adapters' input in SFT (PEFT's lora_dropout); RL runs without, its first ratio exactly 1
    dropout: float = 0.0
    # Names of the language model's linear layers to adapt (mlp.down_proj picks those under one
    # parent); a name the family has no layer of is skipped, as PEFT does, but one must match
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    # Parameters to adapt that no linear layer holds: a mixture of experts' fused weights
    # (mlp.experts.gate_up_proj, mlp.experts.down_proj), an adapter of rank r per expert (PEFT's
    # target_parameters); each name must match. Not with dropout (PEFT has none there) or fsdp2.
    target_parameters: list[str] = field(default_factory=list)

    def validate(self, key: str) -> None:
        require_nonnegative(key, self, "r")
        require_positive(key, self, "alpha")
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"config: {key}.dropout must be in [0, 1), got {self.dropout}")
        plain = [name for name in self.target_modules if DOTTED_NAME.fullmatch(name)]
        if not self.target_modules or plain != self.target_modules:
            raise ConfigError(
                f"config: {key}.target_modules must name the layers to adapt (q_proj, mlp.down_proj, ...), got "
                f"{self.target_modules}"
            )
        if not all(DOTTED_NAME.fullmatch(name) for name in self.target_parameters):
            raise ConfigError(
                f"config: {key}.target_parameters must name parameters (mlp.experts.gate_up_proj, ...), got "
                f"{self.target_parameters}"
            )
        if self.target_parameters and self.dropout:
            raise ConfigError(
                f"config: {key}.target_parameters takes no dropout (PEFT applies none to a parameter's adapter), "
                f"got {key}.dropout={self.dropout}"
            )


@dataclass
class VideoConfig:
    """How video frames are sampled and sized: qwen-vl-utils' video keys; defaults are Video-R1's
    training and evaluation settings (fps 2, 4 to 16 frames, 128 x 28 x 28 pixels a frame)."""

    # Frames sampled per second of video (qwen-vl-utils' fps), then held within min_frames..max_frames
    fps: float = 2.0
    # Fewest frames sampled from a video, rounded up to an even number (two frames make a temporal patch)
    min_frames: int = 4
    # Most frames sampled, rounded down to an even number; never more than the file has
    max_frames: int = 16
    # A frame's fewest pixels after smart_resize; its pixel limit is never below 1.05 x this
    min_pixels: int = 128 * 28 * 28
    # A frame's most pixels, as max_pixels_from reads it; a long video's frames get less (total_pixels)
    max_pixels: int = 128 * 28 * 28
    total_pixels: float = 128000 * 28 * 28 * 0.9  # qwen-vl-utils' MODEL_SEQ_LEN budget over all frames
    # What max_pixels is. video_r1: the VIDEO_MAX_PIXELS of Video-R1's vendored qwen-vl-utils, whose
    # messages name no max_pixels: a frame's limit is max(min(max_pixels, total_pixels / frames x 2),
    # 1.05 x min_pixels), so at the defaults 105,369 pixels. message: a max_pixels in the message, as
    # qwen-vl-utils 0.0.14 takes it: the least of it and that limit (768 tokens for its VIDEO_MAX_PIXELS).
    max_pixels_from: Literal["video_r1", "message"] = "video_r1"
    # What decodes the file: PyAV (FFmpeg, frame by frame) or decord (what Video-R1 reads with).
    backend: Literal["pyav", "decord"] = "pyav"
    # Where the model is told the frames are in time. sampled: where they were sampled from in the
    # file (Qwen2.5-VL's mrope: temporal_patch_size / sampled fps seconds a temporal patch).
    # video_r1: as if sampled at 2 fps from the clip's start, what Video-R1's training trains with
    # (its processor calls pass no fps and transformers 4.49 then assumes 2: one second a patch).
    time_from: Literal["sampled", "video_r1"] = "sampled"

    def validate(self, key: str) -> None:
        require_positive(key, self, "total_pixels")
        if self.fps <= 0 or self.min_frames < 1 or self.max_frames < 2 or self.min_pixels <= 0:
            raise ConfigError(
                f"config: {key} needs fps > 0, min_frames >= 1, max_frames >= 2 and min_pixels > 0, got "
                f"fps={self.fps}, min_frames={self.min_frames}, max_frames={self.max_frames}, min_pixels={self.min_pixels}"
            )
        if self.max_pixels < self.min_pixels or self.max_frames < self.min_frames:
            raise ConfigError(
                f"config: {key}.max_pixels ({self.max_pixels}) and max_frames ({self.max_frames}) must be >= "
                f"min_pixels ({self.min_pixels}) and min_frames ({self.min_frames})"
            )
        if self.backend == "decord":
            if importlib.util.find_spec("decord") is None:
                raise ConfigError(f"config: {key}.backend=decord needs the decord package (pip install decord)")


# apply_chat_template's own arguments, which vlrl sets: not template variables
RENDERING_ARGUMENTS = frozenset(
    {"conversation", "chat_template", "add_generation_prompt", "continue_final_message", "tokenize", "return_dict",
     "return_tensors", "tools", "documents"}
)  # fmt: skip


@dataclass
class ModelConfig:
    # Required to load a model (MODEL_PATH_MISSING): a local checkpoint, a hub id already in the local
    # Hugging Face cache (HF_HUB_CACHE; never downloaded), or tiny:NAME (vlrl/models/)
    path: str = ""
    # The model family (vlrl/models/): auto goes by the checkpoint's model_type; or a family's
    # name (qwen2_vl, qwen2_5_vl, qwen3_vl, qwen3_vl_moe, qwen3_5, qwen3_5_moe, an entry point) or module:Class.
    family: str = "auto"
    # The dtype the weights are loaded and computed in (policy, reference, rollout engine); auto: bfloat16 on a GPU
    # that supports it, else float32 (models/loading.py). trainer.master_weights keeps fp32 copies to step.
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    # transformers' attention (from_pretrained's attn_implementation). The lean step (decoding and the update's
    # forwards) and grouped vision attention need sdpa; the static step sdpa or eager.
    # flash_attention_2 needs the flash-attn package.
    attn_implementation: Literal["sdpa", "eager", "flash_attention_2"] = "sdpa"
    # Frame the model reads and writes coordinates in; auto: the family's (absolute for Qwen2.5-VL,
    # norm1000 for Qwen2-VL, Qwen3-VL and Qwen3.5).
    coord_frame: Literal["auto", "absolute", "norm1000", "original"] = "auto"
    # An image's fewest pixels: smaller ones are enlarged by smart_resize, as qwen-vl-utils, to sides that are
    # multiples of the family's factor (28 or 32). Default: qwen-vl-utils' 4 x 28 x 28.
    min_pixels: int = 3136
    # An image's most pixels: larger ones are shrunk (and a saved processor states this limit). Default:
    # qwen-vl-utils' 16384 x 28 x 28. Videos are sized by model.video.
    max_pixels: int = 12845056
    # How an image is sized. smart_resize: once, within min_pixels..max_pixels (qwen-vl-utils, and the
    # recipes of VLM-R1, Video-R1, UI-R1, ...). easyr1: as EasyR1, GUI-R1 and SophiaVL-R1 size it, scaled
    # into min_pixels..max_pixels by truncated factors (its process_image, in the file's own mode, then
    # made RGB with any alpha dropped, not painted over white), then smart-resized by the processor
    # within the checkpoint's own limits (3136..12845056 for Qwen2/2.5-VL, 65536..16777216 for Qwen3-VL
    # and Qwen3.5).
    image_resize: Literal["smart_resize", "easyr1"] = "smart_resize"
    # 0: an image's own pixels. N: each image re-encoded as JPEG at quality N before it is sized, as
    # lmms-eval's Qwen2-VL and Qwen2.5-VL simple classes send images (85): vlrl eval sets it for their
    # benchmarks under eval.image_pixels=lmms_eval.
    image_jpeg_quality: int = 0
    # The vision tower gets no gradient or optimizer state (full fine-tuning; LoRA adapts only the language
    # model anyway). A resumed run refuses a change.
    freeze_vision: bool = False
    # The vision tower's patch embedding, a Conv3d whose windows tile its input: linear computes it
    # as the matrix product it is (models/patch_embed.py: on some GPUs and torch versions the
    # convolution is 10-50,000x slower); conv: transformers' Conv3d, as its own forward.
    patch_embedding: Literal["linear", "conv"] = "linear"
    # The vision tower's attention within each image, frame or window under SDPA: grouped, one
    # SDPA call per chunk length (models/vision_attention.py; bit for bit on the CPU; for 16
    # COCO-sized images Qwen2.5-VL's window layers make 4 calls each instead of 480); chunks:
    # transformers' forward, one call per chunk, the lengths read off the device in every layer.
    vision_attention: Literal["grouped", "chunks"] = "grouped"
    # The output layer's product in float32, its logits float32 (TRL's cast_lm_head_to_fp32, as
    # ScaleRL and MiniMax-M1 recommend against the bfloat16 logits' error in the policy's
    # log-probs): in the model's forward, the rollout's decoding and the update. Its weight stays
    # in model.dtype, trained through float32 copies as every weight (models/float32_head.py).
    # No effect on a float32 model.
    lm_head_fp32: bool = False
    # The update's forwards of completion tokens (reference, old policy, policy; SFT's) through
    # models/decode_step.py's lean step where the model allows it: its kernels, bit for bit,
    # without transformers' per-call machinery (up to a few percent of the update at the demo's
    # sizes: docs/performance.md); false: always the model's own forward.
    lean_forward: bool = True
    # How messages become the prompt: the checkpoint's chat template, or none: their content
    # as it is, an image as its vision tokens, no roles (a base checkpoint, VisualThinker-R1-Zero).
    chat_template: Literal["model", "none"] = "model"
    # Variables the chat template reads (TRL's chat_template_kwargs, verl's
    # data.apply_chat_template_kwargs), e.g. {enable_thinking: false}: Qwen3.5's template then
    # closes its reasoning block for the model, which answers without one. For every prompt:
    # training, SFT, evaluation (a checkpoint's config keeps them).
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    # A prompt longer than this many tokens (its image and video tokens included) leaves its
    # sample out where a step or an evaluation draws it, reported as unusable, the run going on:
    # verl's and EasyR1's data.max_prompt_length with filter_overlong_prompts. None: no limit.
    max_prompt_tokens: int | None = None
    lora: LoraConfig = field(default_factory=LoraConfig)
    video: VideoConfig = field(default_factory=VideoConfig)

    def validate(self, key: str) -> None:
        require_positive(key, self, "min_pixels")
        if self.max_prompt_tokens is not None:
            require_positive(key, self, "max_prompt_tokens")
        if self.max_pixels < self.min_pixels:
            raise ConfigError(
                f"config: {key}.max_pixels ({self.max_pixels}) must be >= {key}.min_pixels ({self.min_pixels})"
            )
        if not 0 <= self.image_jpeg_quality <= 100:
            raise ConfigError(f"config: {key}.image_jpeg_quality must be 0 (off) or a JPEG quality up to 100")
        if self.chat_template_kwargs and self.chat_template == "none":
            raise ConfigError(
                f"config: {key}.chat_template_kwargs are read by a chat template, and {key}.chat_template is none: "
                "drop one of them"
            )
        if taken := sorted(RENDERING_ARGUMENTS & set(self.chat_template_kwargs)):
            raise ConfigError(
                f"config: {key}.chat_template_kwargs may not set {', '.join(taken)}: vlrl sets how a prompt is "
                "rendered (with the generation prompt, as text); give the template's own variables, e.g. enable_thinking"
            )
        self.lora.validate(f"{key}.lora")
        self.video.validate(f"{key}.video")


@dataclass
class DataConfig:
    # A file in the task's public format (json or jsonl), or a published table: a parquet /
    # arrow file, a glob, or a downloaded dataset directory, with @split (DIR@train).
    train: str = ""
    # The held-out split, in the same forms as train: evaluated every eval.every steps and by `vlrl eval`
    # (its default split). "": none
    eval: str = ""
    columns: dict[str, str] = field(default_factory=dict)  # tables: task record key -> table column
    image_cache: str = ""  # tables: where embedded images are written ("": the system temp dir)
    image_root: str = ""  # where relative image paths point; default: the data file's folder
    # Records may name files only inside the data root (image_root, else the data file's folder):
    # true lets them name absolute paths and paths or links that lead elsewhere.
    allow_outside_root: bool = False
    max_image_pixels: int = 89_478_485  # an image (a video's frame) whose header states more is refused (PIL's limit)
    strict: bool = False  # a bad record stops the run instead of being reported and skipped
    limit: int = 0  # use only the first N records (0: all)
    # Write the task's synthetic dataset at `train` / `eval` when missing, but only at the paths
    # stated where this key is set (the same config file, or the same command line): never at a
    # path given elsewhere, where a typo would fill a folder with synthetic scenes.
    synthetic: bool = False
    synthetic_train_size: int = 512  # records data.synthetic writes for a missing train file
    synthetic_eval_size: int = 128  # records data.synthetic writes for a missing eval file
    synthetic_seed: int = 0  # the data's seed, apart from the training seed: seeds vary training, not data

    def validate(self, key: str) -> None:
        require_nonnegative(key, self, "limit", "synthetic_seed")
        require_positive(key, self, "synthetic_train_size", "synthetic_eval_size")
        if not 0 < self.max_image_pixels <= PIL_REFUSES_ABOVE:
            raise ConfigError(
                f"config: {key}.max_image_pixels must be in (0, {PIL_REFUSES_ABOVE}] (PIL refuses larger images), "
                f"got {self.max_image_pixels}"
            )


@dataclass
class TaskConfig:
    # The task: its records, prompt, rewards and metrics (docs/tasks.md): a registered name or alias,
    # package.module:Class or path/to/file.py:Class
    name: str = "refcoco"
    # Component -> weight; empty: the task's defaults. A key FILE.py:FUNCTION or package.module:FUNCTION
    # is a reward function of yours (fn(completions, samples) -> list[float]), logged as reward/FUNCTION;
    # keys that are only such functions add to the task's defaults.
    rewards: dict[str, float] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)  # task variants, validated by the task


@dataclass
class MixtureEntry:
    """One task of a mixture: its data, its share of the prompts, its rewards and options."""

    name: str = ""  # the task, as task.name (required)
    # Its share of the prompts: each prompt's task is drawn with probability weight / the weights' sum (> 0)
    weight: float = 1.0
    train: str = ""  # its training data, as data.train (required)
    eval: str = ""  # its held-out data, as data.eval ("": not evaluated during training, said at the start)
    columns: dict[str, str] = field(default_factory=dict)  # as data.columns, for this task's tables
    rewards: dict[str, float] = field(default_factory=dict)  # as task.rewards, for this task
    options: dict[str, Any] = field(default_factory=dict)  # as task.options: this task's variants


@dataclass
class RolloutStage:
    """One stage of a schedule of completion lengths and group sizes over the run (Vision-R1's
    progressive thinking suppression: 4K tokens x 16 completions, then 8K x 8, then 16K x 4)."""

    steps: int | None = None  # RL steps the stage lasts; the last stage lasts to the end (no steps)
    max_new_tokens: int | None = None  # None: rollout.max_new_tokens
    num_generations: int | None = None  # None: rollout.num_generations


@dataclass(frozen=True)
class StageLimits:
    """What a step samples with: its stage (0 without rollout.stages), its length and group size."""

    stage: int
    max_new_tokens: int
    num_generations: int


@dataclass
class RolloutConfig:
    engine: str = "hf"  # a registered engine (hf, vllm: vlrl/rollout/), or module:Class of a RolloutEngine
    # G: completions sampled per prompt, its group (TRL's num_generations); a stage may set its own
    num_generations: int = 8
    # The longest completion, in tokens (TRL's max_completion_length); a stage may set its own. Also
    # evaluation's, unless eval.max_new_tokens or the task sets one
    max_new_tokens: int = 1024
    # Sampling temperature (> 0); the update's log-probs and entropies are of the logits divided by it, as drawn
    temperature: float = 1.0
    top_p: float = 1.0  # nucleus sampling: draw from the most probable tokens holding this much mass (1.0: off)
    top_k: int = 0  # 0: no top-k filtering
    # > 0: tokens less probable than min_p x the most probable one are not drawn (TRL's min_p):
    # after top-k / top-p in the HF engine, as transformers' generate; before them in vLLM, as vLLM.
    min_p: float = 0.0
    # > 1: each completion's prompt and earlier tokens made less likely in the draw (TRL's
    # repetition_penalty, transformers' rule: a positive logit divided by it, a negative one
    # multiplied). The log-probs the update uses stay the policy's, as TRL's are; vLLM's, of the
    # penalized draw, are compared with the trainer's own of that draw (rollout/logp_diff).
    repetition_penalty: float = 1.0
    # No end token is drawn before a completion holds this many tokens (transformers' min_new_tokens,
    # vLLM's min_tokens; OpenRLHF's default 1, which LMM-R1 and MM-Eureka train with). The update's
    # log-probs stay the policy's, as with the other bans; vLLM's are compared with the trainer's own.
    min_new_tokens: int = 0
    # The rows (prompts x completions) one engine call decodes at most: a step's rollout in parts,
    # whole groups while one fits (0: a step's in one call). The step's batch stays what it is: a
    # smaller KV cache and logits for the HF engine, not fewer samples. Halved where one runs the
    # GPU out of memory (trainer.halve_on_oom; rollout/parts.py).
    max_rows: int = 0
    # A schedule over the run: [{steps: 100, max_new_tokens: 4096, num_generations: 16}, ...,
    # {max_new_tokens: 16384, num_generations: 4}]; each step samples with its stage's limits.
    stages: list[RolloutStage] = field(default_factory=list)
    # The engine's own options under its name, e.g. rollout.vllm.gpu_memory_utilization (its Options)
    options: dict[str, dict[str, Any]] = plugin_sections()

    def validate(self, key: str) -> None:
        require_positive(key, self, "num_generations", "max_new_tokens", "temperature", "repetition_penalty")
        require_nonnegative(key, self, "top_k", "max_rows", "min_new_tokens")  # 0: off
        require_top_p(key, self)
        if not 0 <= self.min_p <= 1:
            raise ConfigError(f"config: {key}.min_p must be in [0, 1] (0: off), got {self.min_p}")
        last = len(self.stages) - 1
        for i, stage in enumerate(self.stages):
            at = f"{key}.stages[{i}]"
            if i < last and stage.steps is None:
                raise ConfigError(
                    f"config: {at}.steps is missing: every stage but the last says how many steps it lasts"
                )
            if i == last and stage.steps is not None:
                raise ConfigError(
                    f"config: {at}.steps ({stage.steps}): the last stage lasts to the end of the run; leave its steps out"
                )
            for name in ("steps", "max_new_tokens", "num_generations"):
                value = getattr(stage, name)
                if value is not None and value <= 0:
                    raise ConfigError(f"config: {at}.{name} must be > 0, got {value}")
        shortest = min(limits.max_new_tokens for limits in self.stage_limits())
        if self.min_new_tokens >= shortest:
            where = "a stage's max_new_tokens" if self.stages else "max_new_tokens"
            raise ConfigError(
                f"config: {key}.min_new_tokens ({self.min_new_tokens}) must be below {where} ({shortest}): "
                "no completion could end"
            )

    def stage_limits(self) -> list[StageLimits]:
        """Every stage's limits, in order (one, the section's own, without stages)."""
        return [
            StageLimits(i, s.max_new_tokens or self.max_new_tokens, s.num_generations or self.num_generations)
            for i, s in enumerate(self.stages or [RolloutStage()])
        ]

    def limits(self, step: int) -> StageLimits:
        """The limits RL step `step` (from 1) samples with: the stage it falls in."""
        every, end = self.stage_limits(), 0
        for stage, limits in zip(self.stages[:-1], every[:-1], strict=True):  # the last lasts to the end
            end += stage.steps or 0  # validate: every stage but the last has steps
            if step <= end:
                return limits
        return every[-1]


@dataclass
class RolloutCorrectionConfig:
    """Importance sampling of the mismatch between a rollout engine and the trainer (an engine
    that does not share the policy, like vLLM, computes the same policy with other kernels).
    Modes and defaults as TRL's vllm_importance_sampling_*: the ratio pi_trainer / pi_engine of
    each token (token_*) or sequence (sequence_*) is clipped (truncate) or zeroed outside
    [clip_min, clip_max] (mask), and multiplies the policy-gradient term."""

    enabled: bool = True  # TRL's vllm_importance_sampling_correction
    # TRL's vllm_importance_sampling_mode: the ratio of each token or of the sequence (its tokens' product),
    # clipped into [clip_min, clip_max] (truncate) or zeroed outside it (mask)
    mode: Literal["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"] = "sequence_mask"
    clip_min: float | None = None  # the ratio's lower bound (TRL's vllm_importance_sampling_clip_min); None: none
    clip_max: float | None = 3.0  # its upper bound (TRL's vllm_importance_sampling_clip_max); None: none

    def validate(self, key: str) -> None:
        if self.clip_min is not None and self.clip_max is not None and self.clip_min > self.clip_max:
            raise ConfigError(f"config: {key}.clip_min ({self.clip_min}) must be <= clip_max ({self.clip_max})")


# T of exp(-step / T) by Trust-GRPO variant: what SophiaVL-R1's released run set (its
# scripts/train_scripts/fullsets.yaml, worker.reward.alpha, which its main.py passes as T; its
# RewardConfig's default, 500, that run overrode); the paper variant keeps vlrl's earlier default.
TRUST_DECAY_STEPS = {"code": 12000.0, "paper": 1000.0}


@dataclass
class TrustConfig:
    """Trust-GRPO (SophiaVL-R1): a thinking reward, trusted per group, annealed over steps."""

    scorer: str = ""  # "": off; "module:function" / "file.py:function"; "http(s)://..."; "judge:PATH" (local model)
    # code: SophiaVL-R1's released reward manager (it produced the published numbers); paper: the paper's rule.
    variant: Literal["code", "paper"] = "code"
    # The thinking reward's weight: alpha x exp(-step / T) x its score is added (SophiaVL-R1's code: 0.3, fixed)
    alpha: float = 0.3
    decay_steps: float | None = None  # T in exp(-step / T); None: the variant's (code 12000, paper 1000)
    timeout_s: float = 60.0  # HTTP scorer timeout (SophiaVL-R1's request's); a failed call scores 0 and is counted
    judge_max_new_tokens: int = 16  # a judge:PATH scorer's longest answer, in tokens (decoded greedily)
    # What an http(s):// or judge: scorer is asked. vlrl: http gets {"items": [...]} and returns
    # {"scores": [...]}; the judge rates the <think> block 0-10. sophiavl_r1: SophiaVL-R1's request to
    # its thinking reward model (trainer/sophiavl_r1.py), http to an OpenAI-style /v1/chat/completions.
    protocol: Literal["vlrl", "sophiavl_r1"] = "vlrl"
    judge_model: str = ""  # the request's "model" under protocol sophiavl_r1 over http (SophiaVL-R1's REWARD_MODEL)

    def __post_init__(self) -> None:
        if self.decay_steps is None:  # resolved here, so that config.yaml states the T a run used
            self.decay_steps = TRUST_DECAY_STEPS[self.variant]

    def validate(self, key: str) -> None:
        require_positive(key, self, "decay_steps", "timeout_s", "judge_max_new_tokens")
        require_nonnegative(key, self, "alpha")
        if self.protocol == "sophiavl_r1":
            http = self.scorer.startswith(("http://", "https://"))
            if not (http or self.scorer.startswith("judge:")):
                raise ConfigError(
                    f"config: {key}.protocol=sophiavl_r1 is how an http(s):// or judge: scorer is asked; "
                    f"{key}.scorer is {self.scorer!r}"
                )
            if http and not self.judge_model:
                raise ConfigError(
                    f"config: {key}.protocol=sophiavl_r1 over http names the served model in {key}.judge_model"
                )


@dataclass
class TemporalConfig:
    """T-GRPO (Video-R1): contrast each prompt with a shuffled-frame variant supplied by the task."""

    # Each video prompt also samples shuffled_fraction x G completions on shuffled frames (the task's
    # temporal_variant; image prompts have none); correct ordered ones earn alpha where order helped (mu)
    enabled: bool = False
    alpha: float = 0.3  # bonus added to correct completions of the ordered input
    mu: float = 0.8  # bonus when acc(ordered) >= mu * acc(shuffled) (0.8 in Video-R1's code, 1.0 in the paper)
    shuffled_fraction: float = 0.5  # shuffled completions per prompt = fraction x G

    def validate(self, key: str) -> None:
        require_nonnegative(key, self, "alpha", "mu")
        if not 0 < self.shuffled_fraction <= 1:
            raise ConfigError(f"config: {key}.shuffled_fraction must be in (0, 1], got {self.shuffled_fraction}")


@dataclass
class LengthControlConfig:
    """Video-R1's len_control: a bonus for correct completions of a moderate length."""

    enabled: bool = False  # add the bonus to rewards (not with algo.advantage=remax)
    min_tokens: int = 320  # the shortest completion earning it, in tokens, its end token counted (Video-R1: 320)
    max_tokens: int = 512  # the longest completion earning it, inclusive (Video-R1: 512)
    # Added to each correct completion of min_tokens to max_tokens when more than one of its group is correct
    # (Video-R1: 0.2)
    bonus: float = 0.2

    def validate(self, key: str) -> None:
        if not 0 <= self.min_tokens <= self.max_tokens:
            raise ConfigError(
                f"config: {key} needs 0 <= min_tokens <= max_tokens, got {self.min_tokens} and {self.max_tokens}"
            )


@dataclass
class DifficultyConfig:
    """UniVG-R1's difficulty-aware weighting (vlrl/algos/difficulty.py): each group's policy term,
    not the KL, times phi of the group's mean `reward` component (its mIoU)."""

    weighting: Literal["none", "exp", "power", "log"] = "none"  # UniVG-R1's miou_adjust_math; its run: exp
    reward: str = ""  # the task's reward component whose group mean is the difficulty (UniVG-R1: the IoU)
    power: float = 1.0  # power's exponent (UniVG-R1's miou_weight)

    def validate(self, key: str) -> None:
        if self.weighting != "none" and not self.reward:
            raise ConfigError(f"config: {key}.weighting={self.weighting} needs {key}.reward (a reward component)")


@dataclass
class ReplayConfig:
    """Selective sample replay (VL-Rethinker's SSR; Skywork R1V2's Selective Sample Buffer is its
    advantage-weighted cousin): rows with a non-zero advantage are kept in a buffer and replayed,
    with their stored advantage and old log-probs, into steps whose groups carry little signal.
    Defaults: VL-Rethinker's code (vlrl/algos/replay.py)."""

    # off: train on the step's rows; ssr: the SSR branch; filter: its other branch (only the
    # step's effective rows, repeated to refill the batch, no buffer)
    mode: Literal["off", "filter", "ssr"] = "off"
    keep_fraction: float = 0.5  # ssr: rows trained per step = int(this x the step's rows) (there: half)
    buffer_size: int = 0  # ssr: effective rows kept (oldest out first); 0: half the first step's rows, as there
    positive_fraction: float = 0.1  # ssr: zero-advantage rows of all-correct groups joining, x effective rows
    positive_reward: float = 0.95  # ssr: the reward above which a zero-advantage row counts as all-correct
    alpha: float = 1.0  # ssr: draws with p ~ |A|^alpha
    eps: float = 1e-4  # ssr: the buffer's draws with p ~ (|A| + eps)^alpha

    def validate(self, key: str) -> None:
        if not 0 < self.keep_fraction <= 1:
            raise ConfigError(f"config: {key}.keep_fraction must be in (0, 1], got {self.keep_fraction}")
        if self.buffer_size < 0 or self.positive_fraction < 0 or self.eps < 0:
            raise ConfigError(
                f"config: {key}.buffer_size, positive_fraction and eps must be >= 0, got {self.buffer_size}, "
                f"{self.positive_fraction} and {self.eps}"
            )
        if self.alpha <= 0:
            raise ConfigError(f"config: {key}.alpha must be > 0, got {self.alpha}")


@dataclass
class AlgoConfig:
    # Advantages from each group's rewards.
    # reinforce_baseline: OpenRLHF's (LMM-R1), whitened over the batch's tokens; gdpo: each reward
    # component (and shaping term) normalised within the group, their weighted sum normalised
    # over the batch (GDPO, TRL's multi_objective_aggregation=normalize_then_sum);
    # reinforce_plus_plus: no baseline, whitened as reinforce_baseline (REINFORCE++); opo: the
    # length-weighted group mean as baseline; gpg: r - mean times the batch's share of nonzero
    # rewards, inverted; passk: the best completion's lead over the second (Pass@k training);
    # remax: r less the reward of the prompt's greedy completion, decoded for it each step (ReMax:
    # EasyR1's and verl's; scored by the task's rewards and the overlong penalty; decoded in the
    # call that samples the group: a row of its batch (hf), a request beside the group's (vllm));
    # optimal_token_baseline: a baseline per token position, the group's returns weighted by each
    # completion's realized energy so far (verl's OTB; one more no-gradient forward a step, for
    # each token's sum of squared probabilities, unless the old log-probs are recomputed anyway)
    advantage: Literal[
        "grpo", "dr_grpo", "rloo", "sign", "cpgd", "reinforce_baseline", "gdpo", "reinforce_plus_plus", "opo",
        "gpg", "passk", "remax", "optimal_token_baseline",
    ] = "grpo"  # fmt: skip
    # grpo: divide by the group's std, the batch's (TRL scale_rewards "batch") or none (TRL "none":
    # dr_grpo's r - mean); passk: by the group's std or none (verl's norm_adv_by_std_in_grpo false)
    advantage_std: Literal["group", "batch", "none"] = "group"
    # advantage=cpgd's weight on r - the group's mean: equal (1), std (1 / (the group's std + std_eps)),
    # clip_filter (MM-EUREKA's: groups / groups whose rewards differ, at most 3)
    cpgd_weighting: Literal["equal", "std", "clip_filter"] = "std"
    std_eps: float = 1e-4  # A = (r - mean) / (std + std_eps), as TRL
    positive_weight: float = 1.0  # scales positive advantages (W-REINFORCE: 0.1)
    negative_weight: float = 1.0  # scales negative advantages
    accuracy_reward: str = ""  # reward component that says "correct" (empty: the weighted total)
    accuracy_threshold: float = 0.5  # correct when that reward >= this
    accuracy_strict: bool = False  # correct when that reward > the threshold (Video-R1: > 0.1)
    # The policy loss: clip (PPO's, GRPO's), cpgd, cispo (MiniMax-M1's bounded, detached
    # importance weight times log pi: epsilon_high is the bound, TRL's reading; ScaleRL 5.0),
    # sapo (a sigmoid gate in place of the clip, sapo_temperature_pos / _neg), vespo (a smooth
    # gamma weight of the sequence's ratio times A log pi, vespo_k_* / vespo_lambda_*): TRL 1.16's;
    # verl's: reinforce (-A log pi), gmpo (the geometric mean of the token ratios, each clipped in
    # log space to [-epsilon, epsilon_high]), kl_cov (|log r| times kl_cov_coef on the kl_cov_ratio
    # share of tokens whose advantage and log-prob covary most), clip_cov (PPO's clip, and no
    # gradient on a random clip_cov_ratio share of the tokens whose covariance is within
    # [clip_cov_lb, clip_cov_ub])
    loss: Literal["clip", "cpgd", "cispo", "sapo", "vespo", "reinforce", "gmpo", "kl_cov", "clip_cov"] = "clip"
    # cispo's bounds on the weight: trl (above only, at epsilon_high) or verl ([1 - epsilon, 1 + epsilon_high])
    cispo_bounds: Literal["trl", "verl"] = "trl"
    # kl_cov: the share of a micro-batch's tokens (at least one), those whose advantage and log-prob covary
    # most, given the |log r| penalty (verl's default)
    kl_cov_ratio: float = 0.0002
    kl_cov_coef: float = 1.0  # kl_cov: the penalty's coefficient on |log r| (verl's ppo_kl_coef)
    # clip_cov: the share of a micro-batch's tokens (at least one) drawn to lose their gradient, among the
    # unclipped ones whose covariance is within (clip_cov_lb, clip_cov_ub) (verl's default)
    clip_cov_ratio: float = 0.0002
    clip_cov_lb: float = 1.0  # clip_cov: the covariance above which a token may be drawn (verl's default)
    clip_cov_ub: float = 5.0  # clip_cov: the covariance below which a token may be drawn (verl's default)
    ratio_level: Literal["token", "sequence"] = "token"  # sequence: GSPO's length-normalised sequence ratio
    # The clip's lower side: the ratio clipped to [1 - epsilon, 1 + epsilon_high] (TRL's epsilon, verl's
    # clip_ratio_low); gmpo clips log r at -epsilon, cpgd at log(1 - epsilon), cispo_bounds=verl at 1 - epsilon
    epsilon: float = 0.2
    epsilon_high: float | None = None  # clip-higher (DAPO: 0.28); None: same as epsilon
    dual_clip: float | None = None  # dual-clip PPO's c (e.g. 3.0): bounds the loss of negative advantages
    drift_coef: float = 0.01  # CPGD's policy-drift weight (MM-EUREKA's --policy_drift_coef default and recipes)
    drift_clip: float = 2.0  # CPGD's c in min(sg(r) - 1, c)
    sapo_temperature_pos: float = 1.0  # SAPO's gate temperature where A > 0 (TRL's default)
    sapo_temperature_neg: float = 1.05  # and where A <= 0
    vespo_k_pos: float = 2.0  # VESPO's power of the ratio where A >= 0 (TRL's defaults)
    vespo_lambda_pos: float = 3.0  # its decay where A >= 0
    vespo_k_neg: float = 3.0  # and where A < 0
    vespo_lambda_neg: float = 2.0  # and its decay where A < 0
    # seq_mean_token_sum: each row's token sum, averaged over the rows (verl's seq-mean-token-sum,
    # TRL's luspo: with ratio_level sequence, LUSPO)
    aggregation: Literal[
        "token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm", "seq_mean_token_sum", "micro_token_mean"
    ] = "seq_mean_token_mean"
    # micro_token_mean's micro-batch: the token mean of each run of this many rows of a step,
    # averaged over them (EasyR1's and verl's legacy micro_batch_size_per_device_for_update)
    micro_batch_rows: int = 4
    # Entropy bonus: the loss minus this times each step's entropy under the temperature-scaled
    # policy, aggregated as the policy loss (verl's and EasyR1's entropy_coeff; EasyR1 1e-3 until
    # 2025-03-18, which Vision-R1 and SophiaVL-R1 trained with). 0: none, and no entropy computed.
    entropy_coef: float = 0.0
    # Skywork-OR1's adaptive entropy control (TRL's use_adaptive_entropy with entropy_target): the
    # coefficient (from entropy_coef) moves by entropy_coef_delta after every optimizer step, up
    # while the step's entropy is at most this target and down past it, within [entropy_coef_min,
    # entropy_coef_max]; the bonus acts only while the last step's entropy was at most the target
    # (none before the first). None: entropy_coef fixed.
    entropy_target: float | None = None
    entropy_coef_min: float = 0.0  # the adaptive coefficient's floor (TRL's entropy_coef_min)
    entropy_coef_max: float = 1.0  # its ceiling (TRL's entropy_coef_max)
    entropy_coef_delta: float = 0.005  # its move after each optimizer step, up or down (TRL's entropy_coef_delta)
    # Mixture-of-experts models: the routers' load-balancing loss (Switch Transformer's, as
    # transformers computes it over each micro-batch's prompt and completion tokens) times this,
    # added to every micro-batch's loss and averaged over the optimizer step's micro-batches
    # (TRL's router_aux_loss_coef). None: the model config's router_aux_loss_coef (0.001 for
    # Qwen3-VL MoE and Qwen3.5 MoE), TRL 1.16's default; 0: none, as verl's and EasyR1's FSDP
    # workers. A dense model refuses a coefficient above 0.
    router_aux_loss_coef: float | None = 0.0
    # KL to the reference model.
    beta: float = 0.04  # 0 loads no reference model
    # k3_clamped: k3 of a log-ratio clamped to [-10, 10] (Video-R1); low_var: verl's clamped k3;
    # abs: |k1| (verl's); k1+ and low_var+: their value with k2's gradient (verl's k1+ and k3+)
    kl_estimator: Literal["k1", "k2", "k3", "low_var", "k3_clamped", "abs", "k1+", "low_var+"] = "k3"
    # Where beta times the KL goes: loss (added to each token's loss: GRPO, TRL), reward (the
    # completion's summed KL, of the policy that sampled, taken off its reward before the
    # advantages: verl's use_kl_in_reward), returns (each token's advantage less the KL of that
    # token and the ones after it: OpenRLHF's and LMM-R1's, before reinforce_baseline's whitening).
    # In the reward or returns it gives no gradient of its own; with k1, as verl and OpenRLHF advise.
    kl_in: Literal["loss", "reward", "returns"] = "loss"
    # With the KL in the reward: steer its coefficient (from beta) toward this KL a token, verl's
    # and OpenRLHF's adaptive controller (kl_ctrl.type adaptive, --kl_target); None: beta fixed.
    kl_target: float | None = None
    kl_horizon: int = 10000  # the controller's horizon in completions (verl's and OpenRLHF's default)
    # TR-DPO's moving reference (TRL's sync_ref_model): after every ref_sync_every-th optimizer
    # step of the run the reference becomes ref_sync_alpha x the policy + (1 - ref_sync_alpha) x
    # itself (TRL's ref_model_sync_steps, 512 there, and ref_model_mixup_alpha). Its weights are
    # then part of every checkpoint (as large as the model's). Needs a reference of its own:
    # beta > 0 and no LoRA (as TRL). 0: the reference stays the model the run started from.
    ref_sync_every: int = 0
    # The policy's share in each sync's mix, in (0, 1] (TRL's ref_model_mixup_alpha); 1: the reference becomes
    # the policy
    ref_sync_alpha: float = 0.6
    # The loss's KL times the ratio to the old policy, its gradient included (TRL 1.16's
    # use_bias_correction_kl, on there by default; DeepSeek-V3.2's unbiased reverse-KL gradient)
    kl_bias_correction: bool = False
    # Updates per rollout.
    num_iterations: int = 1  # passes over each rollout batch
    mini_batches: int = 1  # optimizer steps per pass
    # How a pass splits the rollout batch into its mini_batches: none (whole groups, in order, as
    # verl and EasyR1 split), once (the rows shuffled once per rollout, the same split every pass:
    # TRL's shuffle_sequence_dict before its steps_per_generation split), every_pass (shuffled anew
    # before each pass: OpenRLHF's and LMM-R1's DataLoader(shuffle=True) over the replay buffer).
    # The order is drawn from trainer.seed, the step and the pass alone (a resumed run draws it alike).
    mini_batch_shuffle: Literal["none", "once", "every_pass"] = "none"
    # Where old log-probs come from when the policy moved: the rollout engine's (when it shares
    # the policy) or a fresh forward; an engine that does not share the policy always recomputes.
    # auto: the rollout's where the policy computes in float32 (its decoding steps give the
    # trainer's log-probs to float rounding), else a fresh forward (bfloat16 rounds the one-token
    # steps otherwise than the whole sequence's forward; TRL's generate path, verl and EasyR1
    # recompute).
    old_logprobs: Literal["auto", "rollout", "recompute"] = "auto"
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)
    # Token and sample selection.
    # DeepSeek-V3.2's off-policy sequence masking (TRL's off_policy_mask_threshold, e.g. 0.5): a
    # completion with a negative advantage whose mean log-ratio of the engine that sampled to the
    # policy is above this leaves the policy term. None: off.
    off_policy_mask: float | None = None
    top_entropy_fraction: float = 1.0  # < 1: train only on the highest-entropy tokens ("Beyond the 80/20 Rule": 0.2)
    mask_truncated: bool = False  # completions that hit max_new_tokens get no gradient
    # DAPO.
    dynamic_sampling: bool = False  # drop groups whose rewards are all equal and refill the batch
    max_sampling_rounds: int = 4  # rollouts per step at most, when refilling
    # Prompts each refilling round draws, over all processes (verl's data.gen_batch_size; DAPO's
    # recipe: 3 x prompts_per_step). 0: trainer.prompts_per_step, verl's default. The groups kept
    # beyond prompts_per_step are dropped, as verl cuts its batch.
    sampling_batch: int = 0
    overlong_buffer: int = 0  # L_cache: penalty ramps from 0 at L_max - L_cache to -overlong_penalty at L_max
    overlong_penalty: float = 1.0  # the most the ramp takes off a reward, at max_new_tokens (with overlong_buffer > 0)
    trust: TrustConfig = field(default_factory=TrustConfig)
    temporal: TemporalConfig = field(default_factory=TemporalConfig)
    length_control: LengthControlConfig = field(default_factory=LengthControlConfig)
    difficulty: DifficultyConfig = field(default_factory=DifficultyConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)

    @property
    def has_entropy_bonus(self) -> bool:
        """Whether the loss has an entropy bonus, fixed or adaptive (an adaptive one's coefficient
        may be 0 at times; the entropy is computed to steer it)."""
        return self.entropy_coef != 0 or self.entropy_target is not None

    def validate(self, key: str) -> None:
        require_positive(
            key,
            self,
            "num_iterations",
            "mini_batches",
            "max_sampling_rounds",
            "std_eps",
            "drift_clip",
            "micro_batch_rows",
            "sapo_temperature_pos",
            "sapo_temperature_neg",
            "kl_horizon",
            "kl_cov_ratio",
            "clip_cov_ratio",
        )
        require_nonnegative(
            key,
            self,
            "beta",
            "positive_weight",
            "negative_weight",
            "drift_coef",
            "overlong_penalty",
            "entropy_coef_min",
            "entropy_coef_max",
            "entropy_coef_delta",
            "kl_cov_coef",
            "vespo_k_pos",
            "vespo_lambda_pos",
            "vespo_k_neg",
            "vespo_lambda_neg",
            "sampling_batch",
        )
        if self.sampling_batch and not self.dynamic_sampling:
            raise ConfigError(f"config: {key}.sampling_batch is read only with {key}.dynamic_sampling=true")
        reads_std = {"grpo": ("group", "batch", "none"), "passk": ("group", "none")}.get(self.advantage, ("group",))
        if self.advantage_std not in reads_std:
            raise ConfigError(
                f"config: {key}.advantage_std={self.advantage_std} is not read by advantage {self.advantage!r} "
                "(grpo reads group, batch or none; passk group or none)"
            )
        # the ratio's clip range is [1 - epsilon, 1 + epsilon_high]; CPGD takes log(1 - epsilon)
        if not 0 < self.epsilon < 1:
            raise ConfigError(f"config: {key}.epsilon must be in (0, 1), got {self.epsilon}")
        if self.epsilon_high is not None and self.epsilon_high < self.epsilon:
            raise ConfigError(
                f"config: {key}.epsilon_high ({self.epsilon_high}) must be >= {key}.epsilon ({self.epsilon})"
            )
        if self.dual_clip is not None and self.dual_clip <= 1:
            raise ConfigError(f"config: {key}.dual_clip must be > 1, got {self.dual_clip}")
        if self.loss == "cpgd" and (self.ratio_level != "token" or self.dual_clip is not None):
            raise ConfigError(
                f"config: {key}.loss=cpgd clips the log-ratio per token its own way: {key}.ratio_level and "
                f"{key}.dual_clip are the clip loss's (set them back, or {key}.loss=clip)"
            )
        if self.clip_cov_lb >= self.clip_cov_ub:
            raise ConfigError(
                f"config: {key}.clip_cov_lb ({self.clip_cov_lb}) must be < clip_cov_ub ({self.clip_cov_ub})"
            )
        if self.router_aux_loss_coef is not None and self.router_aux_loss_coef < 0:
            raise ConfigError(
                f"config: {key}.router_aux_loss_coef must be >= 0 (or null: the model's), got {self.router_aux_loss_coef}"
            )
        if self.off_policy_mask is not None and self.off_policy_mask <= 0:
            raise ConfigError(f"config: {key}.off_policy_mask must be > 0 (or null: off), got {self.off_policy_mask}")
        if self.loss in ("vespo", "reinforce", "gmpo", "kl_cov", "clip_cov") and self.ratio_level != "token":
            raise ConfigError(
                f"config: {key}.loss={self.loss} takes each token's ratio its own way: {key}.ratio_level is the "
                "clip loss's and GSPO's (set it back to token)"
            )
        if (
            self.loss in ("cispo", "sapo", "vespo", "reinforce", "gmpo", "kl_cov", "clip_cov")
            and self.dual_clip is not None
        ):
            raise ConfigError(
                f"config: {key}.dual_clip bounds the clip loss; {key}.loss={self.loss} bounds its own way "
                f"(set dual_clip back, or {key}.loss=clip)"
            )
        if self.loss == "cispo" and self.cispo_bounds == "trl" and self.epsilon_high is None:
            raise ConfigError(
                f"config: {key}.loss=cispo bounds the importance weight at {key}.epsilon_high, which is unset "
                f"(it would be epsilon, {self.epsilon}, as in TRL): set it, e.g. 5.0 (ScaleRL's)"
            )
        if self.entropy_target is not None and (
            self.entropy_target <= 0 or self.entropy_coef_min > self.entropy_coef_max
        ):
            raise ConfigError(
                f"config: {key}.entropy_target must be > 0 and entropy_coef_min <= entropy_coef_max, got "
                f"{self.entropy_target}, [{self.entropy_coef_min}, {self.entropy_coef_max}]"
            )
        if self.kl_target is not None and (self.kl_in == "loss" or self.kl_target <= 0):
            raise ConfigError(
                f"config: {key}.kl_target steers the coefficient of the KL in the reward: it takes {key}.kl_in "
                f"reward or returns and a target > 0, got kl_in={self.kl_in}, kl_target={self.kl_target}"
            )
        if self.ref_sync_every < 0 or not 0 < self.ref_sync_alpha <= 1:
            raise ConfigError(
                f"config: {key}.ref_sync_every must be >= 0 and {key}.ref_sync_alpha in (0, 1], got "
                f"{self.ref_sync_every}, {self.ref_sync_alpha}"
            )
        if self.ref_sync_every and self.beta == 0:
            raise ConfigError(
                f"config: {key}.ref_sync_every moves the KL reference, and {key}.beta is 0 (no reference model): "
                "set a beta, or ref_sync_every=0"
            )
        if self.kl_bias_correction and self.kl_in != "loss":
            raise ConfigError(
                f"config: {key}.kl_bias_correction weighs the loss's KL, and {key}.kl_in={self.kl_in} puts the KL "
                "in the reward: one or the other"
            )
        if not 0 < self.top_entropy_fraction <= 1:
            raise ConfigError(f"config: {key}.top_entropy_fraction must be in (0, 1], got {self.top_entropy_fraction}")
        if self.kl_in != "loss" and self.beta == 0:
            raise ConfigError(
                f"config: {key}.kl_in={self.kl_in} takes beta times the KL off the reward, but {key}.beta is 0 "
                "(no reference model): set a beta, or kl_in=loss"
            )
        if self.kl_in == "reward" and self.advantage == "sign":
            raise ConfigError(
                f"config: {key}.advantage=sign reads only correctness, so the KL taken off the reward "
                f"({key}.kl_in=reward) would change nothing: kl_in=loss or returns"
            )
        shaped = {
            "trust": bool(self.trust.scorer),
            "temporal": self.temporal.enabled,
            "length_control": self.length_control.enabled,
        }
        if self.advantage == "remax" and (terms := [name for name, on in shaped.items() if on]):
            raise ConfigError(
                f"config: {key}.advantage=remax scores its greedy baseline with the task's rewards and the overlong "
                f"penalty only, and {key}.{terms[0]} adds a term to the sampled completions' rewards it would lack"
            )
        per_token = ("kl_in=returns", "kl_in=loss or reward") if self.kl_in == "returns" else None
        if self.advantage == "optimal_token_baseline":
            per_token = ("advantage=optimal_token_baseline", "replay.mode=off")
            if self.kl_in == "reward":
                raise ConfigError(
                    f"config: {key}.advantage=optimal_token_baseline takes the KL per token, from each token on, as "
                    f"verl's token-level rewards give it: {key}.kl_in=returns (or loss), not reward"
                )
        if per_token and self.replay.mode != "off":
            raise ConfigError(
                f"config: {key}.replay stores one advantage a row, and {key}.{per_token[0]} gives one a token: "
                f"{per_token[1]}"
            )
        self.rollout_correction.validate(f"{key}.rollout_correction")
        self.trust.validate(f"{key}.trust")
        self.temporal.validate(f"{key}.temporal")
        self.length_control.validate(f"{key}.length_control")
        self.difficulty.validate(f"{key}.difficulty")
        self.replay.validate(f"{key}.replay")


# lmms-eval's `--reasoning_tags` default (lmms_eval/__main__.py @ 75571cf, PyPI 0.7.3): the blocks its
# evaluator removes from a response before scoring it.
LMMS_EVAL_REASONING_TAGS = (("<think>", "</think>"), ("<analysis>", "</analysis>"))


@dataclass
class EvalConfig:
    split: str = "eval"  # "eval" (data.eval), "train" (data.train), or a data file
    limit: int = 0  # evaluate the first N samples (0: all)
    batch_size: int = 8  # prompts per generation batch
    # 0: the task's length, else a benchmark's lmms-eval model class's, else rollout.max_new_tokens
    max_new_tokens: int = 0
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0  # nucleus sampling at temperature > 0, as rollout.top_p (1.0: off)
    # > 1: each answer's prompt and earlier tokens made less likely (transformers' and vLLM's
    # repetition_penalty). null: the checkpoint's generation_config.json's (1.0 without one), as
    # transformers' generate takes it when its caller names none: lmms-eval's HF Qwen classes and
    # VLM-R1's test_rec_r1.py (1.05 in the Qwen2-VL and Qwen2.5-VL Instruct checkpoints as
    # published; docs/benchmarks.md). reference: as the task's reference evaluation decodes, the
    # checkpoint's for an lmms-eval benchmark, none (1.0) for Video-R1's (vLLM) and for any other task.
    repetition_penalty: float | Literal["reference"] | None = "reference"
    backend: str = "hf"  # rollout engine for `vlrl eval`: hf, vllm, or module:Class
    every: int = 0  # during RL: evaluate on the eval split every N steps and at the last (0: never)
    headline: list[str] = field(default_factory=list)  # metrics that summaries show first (empty: all)
    output_dir: str = ""  # `vlrl eval` writes results.json and samples_<task>.jsonl here (default: runs/eval/...)
    # [start, end] pairs of the reasoning blocks removed from a response before an lmms-eval benchmark
    # scores it, as lmms-eval's evaluator does (its --reasoning_tags; whitespace is stripped too, also
    # with []); none scores the raw response (lmms-eval's --reasoning_tags none).
    reasoning_tags: list[list[str]] | None = field(default_factory=lambda: [list(p) for p in LMMS_EVAL_REASONING_TAGS])
    # The lmms-eval model class a benchmark's prompts and answers go through (vlrl/tasking/lmms_eval_model.py).
    # auto: the one `lmms-eval --model <family>` runs (the chat class: the task's messages, answers uncut;
    # Qwen2-VL's simple one). simple: its --force_simple (doc_to_text, answers cut at the yaml's until).
    lmms_eval_model: Literal["auto", "simple"] = "auto"
    # The pixel budget of an lmms-eval benchmark's images. lmms_eval: the one its model class sizes them
    # by (Qwen2.5-VL's chat class 200,704 to 1,605,632; vlrl/tasking/lmms_eval_model.py), and its JPEG
    # encoding where it has one (model.image_jpeg_quality); model: the config's model.min_pixels /
    # model.max_pixels and model.image_jpeg_quality, as every other task is rendered.
    image_pixels: Literal["lmms_eval", "model"] = "lmms_eval"
    # model.video.time_from when evaluating (vlrl eval, eval.every), whatever the run trained with:
    # sampled, as Video-R1's evaluator and lmms-eval place frames, though its trainer uses video_r1.
    video_time_from: Literal["sampled", "video_r1"] = "sampled"

    def validate(self, key: str) -> None:
        require_positive(key, self, "batch_size")
        require_nonnegative(key, self, "temperature", "max_new_tokens", "every", "limit")
        if isinstance(self.repetition_penalty, float):
            require_positive(key, self, "repetition_penalty")
        require_top_p(key, self)
        for pair in self.reasoning_tags or []:
            if len(pair) != 2 or not all(pair):
                raise ConfigError(
                    f"config: {key}.reasoning_tags holds [start, end] pairs of non-empty tags, got {pair!r}"
                )


@dataclass
class TrainerConfig:
    # The run directory: config.yaml, metrics.jsonl, samples.jsonl, checkpoints/step-N (resume: auto goes on
    # from its latest)
    output_dir: str = "runs/refcoco"
    # Steps the run trains; a step samples and scores a batch, then takes algo.num_iterations x
    # algo.mini_batches optimizer steps (SFT: one)
    steps: int = 1000
    prompts_per_step: int = 8  # B prompts per step (SFT: samples per step)
    lr: float = 1e-6  # AdamW's learning rate: warmup_steps rise to it, lr_schedule decays from it
    # AdamW's decoupled weight decay, on every trained parameter (as verl's and EasyR1's; transformers' Trainer
    # leaves out biases and norms)
    weight_decay: float = 0.0
    # AdamW's (beta1, beta2): torch's and the HF Trainer's defaults; OpenRLHF's (LMM-R1) [0.9, 0.95]
    adam_betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    # Over trainer.steps, with warmup_steps first (rising from 0, as transformers' and verl's do)
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    # Schedule positions (lr_schedule_per's unit) over which the lr rises linearly from 0; 0: none
    warmup_steps: int = 0
    # What the schedule counts: step (one value per step, whatever its optimizer steps: verl,
    # EasyR1) or optimizer_step (transformers' Trainer, so TRL, and OpenRLHF, so LMM-R1: the
    # schedule is steps x algo.num_iterations x algo.mini_batches long, warmup_steps counted alike;
    # SFT takes one optimizer step a step, so there the two are the same)
    lr_schedule_per: Literal["step", "optimizer_step"] = "step"
    # Where linear and cosine decay end, as a share of lr (OpenRLHF's cosine_with_min_lr: 0.1)
    lr_min_ratio: float = 0.0
    max_grad_norm: float = 1.0  # gradients are clipped to this global L2 norm before each optimizer step
    # The optimizer steps fp32 copies of bf16/fp16 weights (precision.py): without them, most
    # updates at lr 1e-6 round away. false saves 4 bytes per weight and trains in the model's dtype.
    master_weights: bool = True
    # How the model is spread over the processes (vlrl/parallel/): replicated (each holds the whole
    # model, gradients averaged), fsdp2 (weights, gradients and optimizer state sharded, FSDP2;
    # its options under trainer.fsdp), or module:Class of a Strategy.
    parallel: str = "replicated"
    # The strategy's own options under its options key, e.g. trainer.fsdp.cpu_offload (its Options)
    options: dict[str, dict[str, Any]] = plugin_sections()
    # Recompute decoder layers' and vision blocks' activations in the backward pass instead of
    # keeping them: less memory at the token budget, about one more forward of compute.
    gradient_checkpointing: bool = False
    token_budget: int = 16384  # tokens per micro-batch in the update (prefix + completions)
    # Where a micro-batch runs the GPU out of memory, the work since the optimizer step before is undone and
    # done again at half token_budget, which the run keeps (logged as token_budget; trainer/budget.py); where
    # a rollout call does, it goes on from the part that failed in parts of half its rows, kept too (logged
    # as rollout_rows; rollout/parts.py), a local thinking judge's calls and vlrl eval's batches alike. Not
    # under fsdp2 on several processes (the update's forwards are collectives; a reset rollout forward
    # reshards the gathered weights). false: the error ends the run.
    halve_on_oom: bool = True
    # Seeds torch (new LoRA adapters), the prompt draws, the sampling generator (vLLM's request seeds too) and
    # SFT's dropout; not the synthetic data (data.synthetic_seed). A resumed run refuses another
    seed: int = 42
    save_every: int = 100  # checkpoint every N steps, at the last step, and at the step a stop signal ends
    keep_last: int = 2  # checkpoints kept in output_dir/checkpoints: older ones are deleted after each save
    resume: str = "auto"  # "auto": continue from the latest checkpoint in output_dir if any; "": fresh; or a path
    log_samples_every: int = 10  # completions to samples.jsonl and the trackers' tables every N steps
    # Where metrics go besides metrics.jsonl, which is always written: tensorboard, wandb, mlflow
    # (trackers.py; each needs its package: pip install 'vlrl[tensorboard]').
    report_to: list[Literal["jsonl", "tensorboard", "wandb", "mlflow"]] = field(default_factory=lambda: ["jsonl"])
    progress: bool = True  # a bar on a terminal; a plain line every log_every steps elsewhere (nohup, SLURM, files)
    log_every: int = 10  # off a terminal, a progress line every N steps (`vlrl eval`: batches)
    max_consecutive_nonfinite: int = 3  # steps in a row that skipped an update (non-finite loss or gradient) stop a run

    def validate(self, key: str) -> None:
        require_positive(
            key, self, "steps", "prompts_per_step", "token_budget", "save_every", "keep_last", "max_consecutive_nonfinite",
            "log_every", "log_samples_every",
            "max_grad_norm",  # clip_grad_norm_ turns the gradients around below 0 and zeroes them at 0
        )  # fmt: skip
        require_nonnegative(key, self, "lr", "weight_decay", "warmup_steps")
        if len(self.adam_betas) != 2 or not all(0 <= beta < 1 for beta in self.adam_betas):
            raise ConfigError(f"config: {key}.adam_betas must be two numbers in [0, 1), got {self.adam_betas}")
        if not 0 <= self.lr_min_ratio <= 1:
            raise ConfigError(f"config: {key}.lr_min_ratio must be in [0, 1], got {self.lr_min_ratio}")


@dataclass
class SFTConfig(TrainerConfig):
    """`vlrl sft`'s section: the trainer's fields, with the cold start's own defaults for its
    schedule and run directory."""

    # Defaults of a class, not of one instance: a section built from a file or the command line
    # starts from them, so setting one key keeps the others.

    output_dir: str = "runs/sft"  # the SFT run's directory, as trainer.output_dir
    lr: float = 1e-5  # AdamW's learning rate, as trainer.lr
    steps: int = 500  # SFT steps, each of prompts_per_step samples and one optimizer step
    # What ends a trained target. eos: the end-of-turn token, where generation stops. template: what
    # the chat template writes after an answer (ChatML: <|im_end|> and a line break), as TRL's
    # SFTTrainer trains a completion; the line break after the stop is never generated.
    turn_end: Literal["eos", "template"] = "eos"


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    # Several tasks in one run: when given, it replaces `task` and `data.train` / `data.eval`.
    mixture: list[MixtureEntry] = field(default_factory=list)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    # Cold-start SFT (`vlrl sft`): the same machinery, its own schedule and run directory.
    sft: SFTConfig = field(default_factory=SFTConfig)
    # Not a key: where load_config read each key ("the command line" or a config file), for the
    # rules that depend on it (synthetic data is written only at the paths of its own source).
    origins: ClassVar[dict[str, str]] = {}

    def origin(self, key: str) -> str | None:
        """The config file (or "the command line") that set `key` (dotted; a list is one key)."""
        return self.origins.get(key)

    def where(self, key: str) -> str:
        """Where `key` was set, for messages: "on the command line", "in FILE" or "by default"."""
        origin = self.origin(key)
        return "by default" if origin is None else "on the command line" if origin == COMMAND_LINE else f"in {origin}"

    def writes_synthetic(self, key: str) -> bool:
        """Whether the data path under `key` may be filled with synthetic data: data.synthetic is
        on and the path was stated by the same source that turned it on."""
        return self.data.synthetic and self.origin(key) == self.origin("data.synthetic")

    def tasks(self) -> list[MixtureEntry]:
        """The run's tasks, each with its data and settings: the mixture's entries, or the one
        `task` with data.train, data.eval and data.columns (what training and `vlrl eval` read)."""
        if self.mixture:
            return list(self.mixture)
        t, d = self.task, self.data
        return [MixtureEntry(t.name, 1.0, d.train, d.eval, d.columns, t.rewards, t.options)]

    def task_settings(self, name: str) -> MixtureEntry | None:
        """The run's task `name` (`tasks`), None when it trains no task of that name."""
        return next((entry for entry in self.tasks() if entry.name == name), None)

    def entry_key(self, name: str) -> str:
        """The config key holding task `name`'s rewards and options: its mixture entry, or `task`."""
        where = next((i for i, entry in enumerate(self.mixture) if entry.name == name), None)
        return "task" if where is None else f"mixture[{where}]"

    def columns_key(self, name: str) -> str:
        """The config key of task `name`'s column mapping: its mixture entry's, or data.columns."""
        key = self.entry_key(name)
        return "data.columns" if key == "task" else f"{key}.columns"

    @property
    def prompts_per_round(self) -> int:
        """Prompts a rollout round draws, over all processes: a step's, or with dynamic sampling
        algo.sampling_batch where set (verl's gen_batch_size)."""
        return self.algo.sampling_batch or self.trainer.prompts_per_step

    def task_key(self, which: Literal["train", "eval"]) -> str:
        """The config key that names the tasks' `which` files (a list is one key: its origin is the list's)."""
        return "mixture" if self.mixture else f"data.{which}"

    def validate(self) -> Config:
        """Each section checks itself (types and allowed values were checked while building),
        every section's refusal said together; then what spans sections."""
        errors: list[ConfigError] = []
        for name in ("model", "data", "rollout", "algo", "trainer", "eval", "sft"):
            try:
                getattr(self, name).validate(name)
            except ConfigError as err:
                errors.append(err)
        raise_all(errors)
        names = [entry.name for entry in self.mixture]
        if any(not name for name in names):
            raise ConfigError("config: every mixture entry needs a task name (mixture[i].name)")
        if len(set(names)) != len(names):
            raise ConfigError(f"config: mixture names a task twice: {names}")
        if any(entry.weight <= 0 for entry in self.mixture):
            raise ConfigError("config: mixture weights must be > 0")
        for section in ("trainer", "sft"):
            if self.model.lora.r and self.model.lora.target_parameters and getattr(self, section).parallel == "fsdp2":
                raise ConfigError(
                    f"config: model.lora.target_parameters with {section}.parallel=fsdp2 is not built (PEFT "
                    "reparametrizes the wrapped parameter at each forward; never run on sharded ones): use replicated"
                )
        algo = self.algo
        if algo.ref_sync_every and self.model.lora.r:
            raise ConfigError(
                "config: algo.ref_sync_every moves a reference model of its own, and with model.lora the reference is "
                "the policy with its adapters off (as TRL, which refuses sync_ref_model with PEFT): full fine-tuning, "
                "or ref_sync_every=0"
            )
        if algo.mini_batches > self.trainer.prompts_per_step:
            raise ConfigError(
                f"config: algo.mini_batches ({algo.mini_batches}) must be <= trainer.prompts_per_step "
                f"({self.trainer.prompts_per_step}): a mini-batch holds whole groups"
            )
        for limits in self.rollout.stage_limits():  # each stage's, named by its key
            at = f"rollout.stages[{limits.stage}]." if self.rollout.stages else "rollout."
            if not 0 <= algo.overlong_buffer < limits.max_new_tokens:
                raise ConfigError(
                    f"config: algo.overlong_buffer must be in [0, {at}max_new_tokens ({limits.max_new_tokens})), "
                    f"got {algo.overlong_buffer}"
                )
            if limits.num_generations < 2 and algo.advantage in GROUP_BASELINES:
                raise ConfigError(
                    f"config: algo.advantage {algo.advantage!r} needs {at}num_generations >= 2, got {limits.num_generations}"
                    " (its baseline is the group's: alone, every advantage is 0)"
                )
            if algo.temporal.enabled and int(algo.temporal.shuffled_fraction * limits.num_generations) < 1:
                raise ConfigError(f"config: algo.temporal.shuffled_fraction x {at}num_generations must be >= 1")
        return self


# The advantages measured against the prompt's group: a group of one learns nothing (verl's opo,
# gpg and reinforce_plus_plus_baseline take a baseline of 0 there instead; refused here).
GROUP_BASELINES = ("grpo", "rloo", "cpgd", "dr_grpo", "opo", "gpg", "reinforce_baseline", "passk", "gdpo")


def _type_name(tp: Any) -> str:
    if get_origin(tp) is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


# A value YAML reads as null, false or true where a choice of these words was meant: `none` on the
# command line (parse_override), `off` (and `no`) anywhere.
YAML_READS_AS = ((None, "none"), (False, "off"), (True, "on"))
NULL_WORDS = ("none", "null")


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check `value` against the annotation `tp`, converting where YAML is loose (int -> float)."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        options = get_args(tp)
        if type(None) in options and (value is None or (isinstance(value, str) and value.lower() in NULL_WORDS)):
            return None  # a file's `none` is null, as the command line's is (parse_override)
        for option in options:
            if option is type(None):
                continue
            try:
                return _coerce(value, option, key)
            except ConfigError:
                continue
        raise ConfigError(f"config: {key} expects {' or '.join(_type_name(o) for o in options)}, got {value!r}")
    if origin is Literal:
        allowed = get_args(tp)
        for read, word in YAML_READS_AS:
            if value is read and word in allowed:  # chat_template=none, replay.mode: off
                value = word
        if value not in allowed:
            raise ConfigError(f"config: {key} must be one of {', '.join(map(repr, allowed))}; got {value!r}")
        return value
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"config: {key} expects a mapping of sub-keys, got {value!r}")
        return build(tp, value, prefix=f"{key}.")
    if origin is list:
        (item_tp,) = get_args(tp)
        if isinstance(value, (str, int, float, bool)):  # report_to=tensorboard: a list of one
            value = [value]
        if not isinstance(value, list):
            raise ConfigError(f"config: {key} expects a list, got {value!r}")
        return [_coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is tuple:  # tuple[X, ...]: a YAML list
        item_tp = get_args(tp)[0]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"config: {key} expects a list, got {value!r}")
        return tuple(_coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        key_tp, value_tp = get_args(tp)
        if not isinstance(value, dict):
            raise ConfigError(f"config: {key} expects a mapping, got {value!r}")
        return {_coerce(k, key_tp, key): _coerce(v, value_tp, f"{key}.{k}") for k, v in value.items()}
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"config: {key} expects true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"config: {key} expects an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, str):  # YAML reads 1e-5 (no dot) as a string
            try:
                value = float(value)
            except ValueError:
                pass
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"config: {key} expects a number, got {value!r}")
        if not math.isfinite(value):  # every comparison with nan is false: no range check would catch it
            raise ConfigError(f"config: {key} expects a finite number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"config: {key} expects a string, got {value!r}")
        return value
    raise TypeError(f"unsupported config annotation {tp!r} at {key}")


def _sections_field(cls: type) -> str | None:
    return next((f.name for f in dataclasses.fields(cls) if f.metadata.get("plugin_sections")), None)


def build(cls: type, data: dict[str, Any], prefix: str = "") -> Any:
    """Instantiate dataclass `cls` from a plain mapping, rejecting unknown keys by name. A
    section with plugin sections (`plugin_sections`) keeps its unknown mapping keys there."""
    hints = get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    sections = _sections_field(cls)
    data = dict(data)
    if sections is not None:
        plugins = dict(data.pop(sections, None) or {})
        for key in [k for k in data if k not in names and isinstance(data[k], dict)]:
            plugins[key] = data.pop(key)
        data[sections] = plugins
    allowed = ", ".join(n for n in names if n != sections) or "none (it takes no keys)"
    also = " (or the chosen plugin's option section)" if sections else ""
    errors: list[ConfigError] = [
        UnknownKey(
            f"config: unknown key '{prefix}{k}'; allowed under '{prefix or '<top>'}': {allowed}{also}"
            + "".join(f"; did you mean '{prefix}{close}'?" for close in difflib.get_close_matches(k, names, 1, 0.75)),
            f"{prefix}{k}",
        )
        for k in data
        if k not in names
    ]
    kwargs = {}
    for k, v in data.items():
        if k in names:
            try:
                kwargs[k] = _coerce(v, hints[k], f"{prefix}{k}")
            except ConfigError as err:
                errors.append(err)
    raise_all(errors)
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except ValueError as err:  # the class's own check of its values (its __post_init__)
        raise ConfigError(f"config: {prefix.rstrip('.') or cls.__name__}: {err}") from err


def to_dict(obj: Any) -> Any:
    """The config as plain data, as it is written: plugin sections under their own names
    (`rollout.vllm`), where they were read from."""
    if dataclasses.is_dataclass(obj):
        out = {}
        for f in dataclasses.fields(obj):
            value = to_dict(getattr(obj, f.name))
            if f.metadata.get("plugin_sections"):
                out.update(value)
            else:
                out[f.name] = value
        return out
    if isinstance(obj, list):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def dotted(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"trainer": {"lr": 1e-6}} -> {"trainer.lr": 1e-6}: every leaf (lists, empty mappings) by its key."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(dotted(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def parse_override(text: str) -> tuple[list[str], Any]:
    """'trainer.lr=1e-5' -> (['trainer', 'lr'], 1e-05); the value is read as YAML."""
    if "=" not in text:
        hint = ": a config file is given as --config FILE" if text.endswith((".yaml", ".yml")) else ""
        raise ConfigError(f"config override {text!r} must look like key.sub=value{hint}")
    key, raw = text.split("=", 1)
    parts = key.strip().split(".")
    if "rewards" in parts[:-1]:  # a reward's name may hold dots: task.rewards.my_reward.py:fn=1
        at = parts.index("rewards") + 1
        parts = [*parts[:at], ".".join(parts[at:])]
    if not all(parts):
        raise ConfigError(f"config override {text!r} has an empty key part")
    try:
        value = yaml.load(raw, Loader=UniqueKeyLoader) if raw.strip() else ""
    except yaml.YAMLError as err:
        raise ConfigError(f"config override {key}: cannot read value {raw!r}: {err}") from err
    if isinstance(value, str) and value.lower() in NULL_WORDS:
        value = None
    return parts, value


def _set_path(tree: dict[str, Any], parts: list[str], value: Any) -> None:
    node = tree
    for i, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"config override {'.'.join(parts)}: {'.'.join(parts[: i + 1])} is not a mapping")
        node = child
    node[parts[-1]] = value


class UniqueKeyLoader(yaml.SafeLoader):
    """yaml.safe_load's loader, refusing a key given twice in one mapping, where YAML keeps the
    last silently (a second `trainer:` section would drop the first's settings)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue  # unhashable keys: the base class says so; `<<: *anchor` merges, as YAML does
            key = self.construct_object(key_node, deep=deep)
            if key in lines:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is given twice (first on line {lines[key]})", key_node.start_mark
                )
            lines[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        """YAML 1.2's integers: 010 is ten (YAML 1.1, PyYAML's, reads eight), 0o10 eight, 0x10 sixteen."""
        text = str(self.construct_scalar(node)).replace("_", "")
        digits = text.lstrip("+-")
        base = {"0x": 16, "0o": 8}.get(digits[:2].lower(), 10)
        value = int(digits[2:] if base != 10 else digits, base)
        return -value if text.startswith("-") else value


# Numbers as YAML 1.2 reads them, in config files and on the command line alike: PyYAML's YAML 1.1
# reads 010 as 8 (octal), 1:30 as 90 (base 60) and 0b11 as 3, none of which a config means.
INT_TAG, FLOAT_TAG = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
UniqueKeyLoader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag not in (INT_TAG, FLOAT_TAG)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
UniqueKeyLoader.add_implicit_resolver(
    INT_TAG, re.compile(r"^[-+]?(?:[0-9][0-9_]*|0x[0-9a-fA-F][0-9a-fA-F_]*|0o[0-7][0-7_]*)$"), list("-+0123456789")
)
UniqueKeyLoader.add_implicit_resolver(  # YAML 1.1's floats less its base-60 ones
    FLOAT_TAG,
    re.compile(
        r"^(?:[-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
    ),
    list("-+0123456789."),
)
UniqueKeyLoader.add_constructor(INT_TAG, UniqueKeyLoader.construct_yaml_int)


class ConfigDumper(yaml.SafeDumper):
    """yaml.safe_dump's dumper with the loader's resolvers: a string it would read as a number
    ("08", ten in YAML 1.2, a string in YAML 1.1) is written quoted."""


ConfigDumper.yaml_implicit_resolvers = UniqueKeyLoader.yaml_implicit_resolvers


def dump_config(data: dict[str, Any]) -> str:
    """`data` as YAML that `read_yaml` reads back the same."""
    return yaml.dump(data, Dumper=ConfigDumper, sort_keys=False)


def read_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"config file {path} is a folder; give a YAML file")
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    try:
        with path.open(encoding="utf-8") as stream:  # the YAML error's marks name the file
            data = yaml.load(stream, Loader=UniqueKeyLoader) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"config file {path}: invalid YAML: {err}") from err
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"config file {path}: cannot read it as UTF-8 text ({err})") from err
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: top level must be a mapping, got {type(data).__name__}")
    return data


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """`override` on top of `base`: mappings merge key by key, anything else (lists too) replaces."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def read_config_file(
    path: str | Path, chain: tuple[Path, ...] = (), origins: dict[str, str] | None = None
) -> dict[str, Any]:
    """A config file with its `extends: other.yaml` chain resolved (the path relative to the
    file), so that variants of a recipe state only what differs from it. `origins` gets the
    file that set each key (dotted)."""
    path = Path(path)
    data = read_yaml(path)
    parent = data.pop("extends", None)
    if parent is None:
        _record(origins, data, str(path))
        return data
    if not isinstance(parent, str) or not parent:
        raise ConfigError(f"config file {path}: extends expects a file name, got {parent!r}")
    parent_path = path.parent / parent
    chain = (*chain, path)
    if parent_path.resolve() in {p.resolve() for p in chain}:
        cycle = " -> ".join(str(p) for p in (*chain, parent_path))
        raise ConfigError(f"config file {path}: extends {parent} makes a cycle: {cycle}")
    if not parent_path.is_file():
        raise ConfigError(f"config file {path}: extends {parent}, but {parent_path} does not exist")
    merged = merge(read_config_file(parent_path, chain, origins), data)
    _record(origins, data, str(path))
    return merged


COMMAND_LINE = "the command line"


@dataclass(frozen=True)
class Restored:
    """Settings (dotted keys) a command takes from elsewhere than the config file or its own
    command line (a checkpoint's own, from its run's history), and where from, for messages."""

    origin: str
    settings: dict[str, Any]


def _record(origins: dict[str, str] | None, tree: dict[str, Any], origin: str) -> None:
    if origins is not None:
        origins.update(dict.fromkeys(dotted(tree), origin))


def absolute_if_local(path: str) -> str:
    """A model path that names a local directory or file, made absolute (what a run records is
    read again from any working directory); a hub id, or a path not there, as given."""
    return str(Path(path).absolute()) if path and Path(path).exists() else path


def load_config(
    path: str | Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    preset: dict[str, Any] | None = None,
    restored: Restored | None = None,
) -> Config:
    """Defaults <- YAML file (and the files it extends) <- `restored` <- `preset` (dotted keys
    set by command line flags) <- overrides."""
    origins: dict[str, str] = {}
    tree: dict[str, Any] = read_config_file(path, origins=origins) if path else {}
    if restored is not None:  # dotted keys of values, never of mappings: each is its own origin's key
        for key, value in restored.settings.items():
            _set_path(tree, key.split("."), value)
        origins.update(dict.fromkeys(restored.settings, restored.origin))
    given: dict[str, Any] = {}  # what the command line set
    for key, value in (preset or {}).items():
        _set_path(tree, key.split("."), value)
        _set_path(given, key.split("."), value)
    for text in overrides:
        parts, value = parse_override(text)
        _set_path(tree, parts, value)
        _set_path(given, parts, value)
    _record(origins, given, COMMAND_LINE)
    try:
        cfg = build(Config, tree)
    except ConfigError as err:
        problems = err.errors if isinstance(err, ConfigProblems) else [err]
        raise_all([_placed(problem, origins) for problem in problems])
    cfg.origins = origins
    return cfg.validate()


def _placed(err: ConfigError, origins: dict[str, str]) -> ConfigError:
    """An unknown key with the file that set it (of an `extends` chain, say), and the other
    sections that have a key of its name (trainer.beta: algo.beta)."""
    if not isinstance(err, UnknownKey):
        return err
    where = next((o for k, o in origins.items() if k == err.key or k.startswith(f"{err.key}.")), COMMAND_LINE)
    section, _, name = err.key.rpartition(".")
    elsewhere = [
        f"'{f.name}.{name}'"
        for f in dataclasses.fields(Config)
        if f.name != section
        and dataclasses.is_dataclass(f.default_factory)
        and name in {g.name for g in dataclasses.fields(f.default_factory)}
    ]
    hint = f"; of another section: {' or '.join(elsewhere)}" if elsewhere else ""
    return ConfigError(f"{err}{hint}" if where == COMMAND_LINE else f"{err}{hint} (set in {where})")
