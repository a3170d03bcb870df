"""The model-family seam: what the engine knows about one family of checkpoints, in one class.

Everything that differs between Qwen2-VL, Qwen2.5-VL, Qwen3-VL and Qwen3.5 lives in a subclass
of `ModelFamily`: which config.json `model_type`s it claims, how it is loaded, its vision
special tokens and processor outputs, its patch and merge sizes (the smart_resize factor), the
coordinate frame its answers use, how rope positions and the prefix cache work, where its
vision tower is, how a video is handed to its processor and to vLLM, and how to build a tiny
local checkpoint of it. The rest of vlrl asks the family (vlrl/models/families.py finds it).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, ClassVar

from vlrl.vision.frames import FrameKind

if TYPE_CHECKING:  # torch and transformers load only when a model does (`vlrl score` needs neither)
    import torch

    from vlrl.config import VideoConfig
    from vlrl.models.batch import PromptBatch
    from vlrl.models.build import TinySpec
    from vlrl.vision.video import Video


class ModelFamily:
    """One family of vision-language checkpoints. Subclasses set the class attributes and
    override what differs; the defaults are Qwen2-VL's, the family the others grew from."""

    name: ClassVar[str] = ""  # model.family=NAME, tiny:NAME
    label: ClassVar[str] = ""  # its name in messages and tables
    model_types: ClassVar[tuple[str, ...]] = ()  # config.json model_type values it loads
    # Fragments of a checkpoint folder's name that say the family when there is no config.json
    # to read (`vlrl score` with a model name only).
    name_hints: ClassVar[tuple[str, ...]] = ()
    coord_frame: ClassVar[FrameKind] = "norm1000"  # the frame its answers' coordinates are in
    patch_size: ClassVar[int] = 14
    merge_size: ClassVar[int] = 2  # spatial: merge_size x merge_size patches make one token
    temporal_patch_size: ClassVar[int] = 2  # frames merged into one temporal patch
    # The pixel limits its released checkpoints give their image processor (preprocessor_config.json):
    # what resizes an image handed to the processor as it is (model.image_resize=easyr1).
    processor_pixels: ClassVar[tuple[int, int]] = (3136, 12845056)
    # Never sampled by any engine: a sampled <|image_pad|> breaks the training forward, which
    # expects one image feature per pad.
    vision_tokens: ClassVar[tuple[str, ...]] = (
        "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
    )  # fmt: skip
    image_pad: ClassVar[str] = "<|image_pad|>"
    video_pad: ClassVar[str] = "<|video_pad|>"
    # The processor outputs the model's forward takes (besides input_ids and mm_token_type_ids).
    vision_keys: ClassVar[tuple[str, ...]] = ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw")
    vision_tower: ClassVar[str] = "visual"  # attribute of the *Model under *ForConditionalGeneration
    # Its RMSNorm keeps its weight centred on zero and scales by one plus it in float32 (Qwen3.5),
    # where Qwen2's scales by the weight in the input's dtype: the lean step computes each as the
    # model does (models/decode_step.py's `norm_of`).
    zero_centred_norms: ClassVar[bool] = False
    # Where the family's weights or cache keep something the engine cannot do for it, a sentence
    # saying so (README's model table); empty: nothing.
    limits: ClassVar[str] = ""

    @property
    def factor(self) -> int:
        """smart_resize's factor: image sides are multiples of one merged token's side."""
        return self.patch_size * self.merge_size

    # -- loading ------------------------------------------------------------------------------
    def load_model(self, path: str, dtype: torch.dtype, attn_implementation: str) -> torch.nn.Module:
        from transformers import AutoModelForImageTextToText

        return AutoModelForImageTextToText.from_pretrained(path, dtype=dtype, attn_implementation=attn_implementation)

    def load_processor(self, path: str):
        from transformers import AutoProcessor

        processor = AutoProcessor.from_pretrained(path)
        processor.tokenizer.padding_side = "left"
        return processor

    def vision_module(self, model: torch.nn.Module) -> torch.nn.Module:
        """The vision tower of a *ForConditionalGeneration (frozen by model.freeze_vision)."""
        return getattr(model.model, self.vision_tower)

    def lora_target(self, module_names: list[str]) -> str:
        """peft's target_modules regex: the named projections of the language model only."""
        return rf"^(?!.*{self.vision_tower}).*\.({'|'.join(map(re.escape, module_names))})$"

    # -- forward passes -----------------------------------------------------------------------
    def rope_positions(self, model: torch.nn.Module, batch: PromptBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """3D rope positions of a prompt batch (3, B, P) and each row's next position (B,).
        `model` is the *ForConditionalGeneration (no PEFT wrapper)."""
        positions, _ = model.model.get_rope_index(
            batch.input_ids,
            batch.mm_token_type_ids,
            image_grid_thw=batch.vision.get("image_grid_thw"),
            video_grid_thw=batch.vision.get("video_grid_thw"),
            attention_mask=batch.attention_mask,
        )
        return positions, positions.amax(dim=(0, 2)) + 1

    def decode_positions(self, next_position: torch.Tensor, offset: int, length: int) -> torch.Tensor:
        """Rope positions (3, R, length) of text continuing after the prompt: every section
        advances together, one position per token."""
        import torch

        steps = torch.arange(offset, offset + length, device=next_position.device)
        return (next_position[:, None] + steps[None, :]).unsqueeze(0).expand(3, -1, -1)

    def new_cache(self, model: torch.nn.Module):
        """An empty cache for a prefill whose rows are then repeated or selected per completion
        (`batch_repeat_interleave`, `batch_select_indices`), gradients flowing through it."""
        from transformers import DynamicCache

        return DynamicCache(config=model.config)

    # -- video --------------------------------------------------------------------------------
    def video_metadata(self, clip: Video) -> dict[str, Any]:
        """What the processor is told about a clip's frames: where they came from in the file."""
        return {"fps": clip.video_fps, "total_num_frames": clip.total_frames, "frames_indices": clip.indices}

    def video_size(self, clip: Video) -> dict[str, int]:
        """The processor's pixel budget for a clip that keeps its frames' size exactly: frames
        are already sized as qwen-vl-utils sizes them (its upscale can exceed max_pixels)."""
        pixels = clip.frames.shape[2] * clip.frames.shape[3]
        return {"shortest_edge": pixels, "longest_edge": pixels}

    def video_processor_settings(self, video: VideoConfig) -> dict[str, Any]:
        """What the processor a checkpoint saves states of how videos were sampled in training
        (`vlrl export`): the frame rate and count (used by a call that asks it to sample frames,
        do_sample_frames, left as the checkpoint's) and each frame's pixel limits, the largest as
        training sized frames (Qwen2-VL's `size` is per frame: `frame_pixel_limit`)."""
        from vlrl.vision.video import frame_pixel_limit

        largest = int(frame_pixel_limit(video, self.factor))
        return {
            "fps": video.fps,
            "min_frames": video.min_frames,
            "max_frames": video.max_frames,
            "size": {"shortest_edge": video.min_pixels, "longest_edge": largest},
        }

    def video_processor_kwargs(self, clip: Video) -> dict[str, Any]:
        """The processor's videos_kwargs for frames vlrl sampled and sized itself."""
        return {"video_metadata": [self.video_metadata(clip)], "do_sample_frames": False, "size": self.video_size(clip)}

    # -- tiny local checkpoints ---------------------------------------------------------------
    # The tiny builds tiny:NAME resolves to, by name (vlrl/models/tiny.py builds and caches them).
    tiny_builds: ClassVar[dict[str, dict[str, Any]]] = {}
    chat_template: ClassVar[str] = ""  # of the tiny build (a real checkpoint brings its own)

    def build_tiny_model(self, spec: TinySpec, tokenizer) -> torch.nn.Module:
        raise NotImplementedError(f"model family {self.name!r} has no tiny build")

    def build_tiny_processor(self, spec: TinySpec, tokenizer):
        raise NotImplementedError(f"model family {self.name!r} has no tiny build")
