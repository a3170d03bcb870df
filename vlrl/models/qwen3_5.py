"""Qwen3.5: natively multimodal, Qwen3-VL's vision (factor 32, 0-1000 answers, timestamped
video), and a hybrid language model: three of every four layers are gated-delta-net linear
attention, whose cache is a recurrent state and a short convolution window, not keys and values.

transformers' cache for those layers cannot serve vlrl's shared-prefix forward as it is: it has
no row selection or repetition (`batch_select_indices`, `batch_repeat_interleave` raise), and it
overwrites its recurrent state in place, which breaks the backward pass through a cached prefix
(the completion forward reads the state, then writes its new one into the same tensor: "a
variable needed for gradient computation has been modified by an inplace operation").
`SharedPrefixLinearAttention` replaces the recurrent state instead, and selects and repeats rows
(the convolution window it keeps as transformers does: row selection copies it, so its in-place
update touches no tensor the backward pass needs). tests/models/test_policy.py checks the log-probs
and gradients against full forwards.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from vlrl.models.build import TinySpec, mrope_sections, text_config
from vlrl.models.qwen3_vl import QWEN3_TINY, Qwen3VL, experts_config

PARTIAL_ROTARY = 0.25  # Qwen3.5 rotates a quarter of each head's dimensions
FULL_ATTENTION_EVERY = 4  # Qwen3.5: layers 4, 8, ... attend fully, the others are linear
LINEAR_HEAD_DIM = 64  # tiny build: vLLM's CPU gated-delta-rule kernel takes 64 and 128, not 32 (Qwen3.5: 128)
# tiny build: the linear-attention layers' output gate (silu of in_proj_z) widened, so that their
# states move what the model says. At transformers' initialization it all but closes them:
# zeroing every recurrent state at every decoding step moved no token and the log-probs by 5e-6,
# below every test's tolerance, so a cache that lost or misplaced a state passed unseen; 30 times
# wider, the same moved tokens, and log-probs by 0.5.
STATE_GATE_SCALE = 30.0


def _shared_prefix_layer():
    from transformers.cache_utils import LinearAttentionLayer

    class SharedPrefixLinearAttention(LinearAttentionLayer):
        """A linear-attention cache layer whose recurrent state is replaced, never written in
        place, and whose rows can be selected or repeated for the completions sharing a prefix."""

        def update_recurrent_state(self, recurrent_states, state_idx: int = 0, **kwargs):
            self.is_recurrent_states_initialized[state_idx] = True
            self.recurrent_states[state_idx] = recurrent_states
            return recurrent_states

        def _rows(self, pick) -> None:
            for i in range(self.number_of_states):
                if self.is_conv_states_initialized[i]:
                    self.conv_states[i] = pick(self.conv_states[i])
                if self.is_recurrent_states_initialized[i]:
                    self.recurrent_states[i] = pick(self.recurrent_states[i])

        def batch_select_indices(self, indices) -> None:
            self._rows(lambda state: state[indices.to(state.device)])

        def batch_repeat_interleave(self, repeats: int) -> None:
            self._rows(lambda state: state.repeat_interleave(repeats, dim=0))

    return SharedPrefixLinearAttention


class Qwen35(Qwen3VL):
    name = "qwen3_5"
    label = "Qwen3.5"
    model_types = ("qwen3_5",)
    name_hints = ("qwen3.5", "qwen3_5")
    tiny_builds: ClassVar[dict] = {"qwen3_5": QWEN3_TINY}
    zero_centred_norms = True
    limits = (
        "LoRA's default targets reach the full-attention layers and the MLPs, not the linear-attention "
        "projections (in_proj_qkv, in_proj_z, out_proj: add them to model.lora.target_modules)"
    )

    def new_cache(self, model):
        from transformers import DynamicCache
        from transformers.cache_utils import LinearAttentionLayer

        cache = DynamicCache(config=model.config)
        layer_cls = _shared_prefix_layer()
        cache.layers = [
            layer_cls(number_of_states=layer.number_of_states) if isinstance(layer, LinearAttentionLayer) else layer
            for layer in cache.layers
        ]
        return cache

    def text_config(self, spec: TinySpec, tokenizer) -> dict[str, Any]:
        head_dim = spec.head_width
        rope = dict(mrope_interleaved=True, partial_rotary_factor=PARTIAL_ROTARY)
        text = text_config(spec, tokenizer, **rope)
        text["rope_parameters"]["mrope_section"] = list(spec.mrope_section) or mrope_sections(
            int(head_dim * PARTIAL_ROTARY)
        )
        every = min(FULL_ATTENTION_EVERY, spec.num_layers)
        key_heads = spec.linear_key_heads or spec.num_heads
        return {
            **text,
            "head_dim": head_dim,
            "layer_types": [
                "full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(spec.num_layers)
            ],
            "linear_num_key_heads": key_heads,
            "linear_num_value_heads": spec.linear_value_heads or 2 * key_heads,  # Qwen3.5-35B-A3B's ratio
            "linear_key_head_dim": spec.linear_head_dim or LINEAR_HEAD_DIM,
            "linear_value_head_dim": spec.linear_head_dim or LINEAR_HEAD_DIM,
            "linear_conv_kernel_dim": 4,
        }

    def vision_config(self, spec: TinySpec) -> dict[str, Any]:
        vision = super().vision_config(spec)
        del vision["deepstack_visual_indexes"]  # Qwen3.5's vision tower has no deepstack
        return vision

    @staticmethod
    def model_class() -> type:
        from transformers import Qwen3_5ForConditionalGeneration

        return Qwen3_5ForConditionalGeneration

    def build_tiny_model(self, spec: TinySpec, tokenizer):
        model = super().build_tiny_model(spec, tokenizer)
        with torch.no_grad():
            for layer in model.model.language_model.layers:
                if hasattr(layer, "linear_attn"):
                    layer.linear_attn.in_proj_z.weight.mul_(STATE_GATE_SCALE)
        return model


class Qwen35Moe(Qwen35):
    """Qwen3.5's mixtures of experts (35B-A3B, 122B-A10B, 397B-A17B): the same hybrid layers,
    each MLP routed experts (fused 3D parameters, as Qwen3-VL MoE's) beside a gated shared one."""

    name = "qwen3_5_moe"
    label = "Qwen3.5 MoE"
    model_types = ("qwen3_5_moe",)
    name_hints = ("qwen3.5-35b-a3b", "qwen3.5-122b-a10b", "qwen3.5-397b-a17b", "qwen3_5_moe")
    # experts 32 wide in a 64-wide model: a down projection read transposed fails on its shape (vLLM's CPU
    # kernel takes gate and up projections together only in multiples of 64 wide)
    tiny_builds: ClassVar[dict] = {"qwen3_5_moe": {**QWEN3_TINY, "expert_intermediate": 32}}
    limits = (
        "LoRA's default targets reach the full-attention layers and the shared expert, not the routed experts "
        "(fused 3D parameters: model.lora.target_parameters) nor the linear-attention projections (in_proj_qkv, "
        "in_proj_z, out_proj: add them to model.lora.target_modules)"
    )

    @staticmethod
    def model_class() -> type:
        from transformers import Qwen3_5MoeForConditionalGeneration

        return Qwen3_5MoeForConditionalGeneration

    def text_config(self, spec: TinySpec, tokenizer) -> dict[str, Any]:
        experts = experts_config(spec)
        return {
            **super().text_config(spec, tokenizer),
            **experts,
            "shared_expert_intermediate_size": experts["moe_intermediate_size"],
        }
