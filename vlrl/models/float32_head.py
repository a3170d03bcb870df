"""The output layer computed in float32 (model.lm_head_fp32: TRL's cast_lm_head_to_fp32, after
ScaleRL and MiniMax-M1).

In bfloat16 a logit near 20 is rounded to a multiple of 0.125, so the policy's log-probs (and
with them the importance ratios, KL and entropies of the update) carry errors of that size that
an engine's float32 logits do not: the training-inference mismatch those papers remove by
computing the output layer in float32. Here the layer's product takes its input and its weight
upcast to float32 and gives float32 logits, wherever the layer runs: the model's own forward,
the rollout's decoding step, and the update's chunked log-probs (models/policy.py: each chunk's
logits in float32, their gradients cast back).

The weight itself stays in the model's dtype. TRL stores it in float32; here the optimizer
already steps float32 copies of every bfloat16 weight (trainer.master_weights, or FSDP2's
float32 parameters), so the head's values are trained in float32 as TRL's are, and only their
bfloat16 rounding multiplies the hidden states. Keeping the dtype keeps everything else as it
was: tied input embeddings (Qwen2-VL-2B, Qwen2.5-VL-3B) stay one bfloat16 tensor, FSDP2's units,
checkpoints and resumption, the weights vLLM receives, and the memory of the weights.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from vlrl.config import ConfigError


class Float32Head(torch.nn.Linear):
    """A Linear output layer whose product runs in float32 (its instances are the model's own
    layer, its class swapped: its parameters, hooks and name stay; FSDP2's unit class derives
    from it)."""

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        bias = None if self.bias is None else self.bias.float()
        return F.linear(hidden.float(), self.weight.float(), bias)


def float32_head(model: torch.nn.Module) -> None:
    """The model's output layer (get_output_embeddings) computed in float32 from now on."""
    head = model.get_output_embeddings()
    if type(head) is not torch.nn.Linear:
        raise ConfigError(
            f"config: model.lm_head_fp32 needs the output layer to be a torch.nn.Linear, this model's is "
            f"{type(head).__name__}"
        )
    head.__class__ = Float32Head


def computes_in_float32(head: torch.nn.Module) -> bool:
    """Whether `head` is a float32 output layer (what models/policy.py's chunked scorer asks)."""
    return isinstance(head, Float32Head)
