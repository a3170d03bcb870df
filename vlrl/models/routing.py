"""A mixture-of-experts model's routers, recorded over forwards, and its load-balancing loss over
what they routed: Switch Transformer's auxiliary loss, as transformers computes it for the model
(each modeling module's `load_balancing_loss_func`). TRL's GRPO (trl/trainer/grpo_trainer.py,
1.16) adds it to the loss by default for a model whose text config has `output_router_logits`,
at the config's `router_aux_loss_coef`; vlrl's `algo.router_aux_loss_coef` adds it the same way
(off by default, as in verl's and EasyR1's FSDP workers).

The routers are found as transformers finds them when asked for `output_router_logits`: the
module class its `_can_record_outputs["router_logits"]` names, its output at that index (the
logits, tokens x experts). A hook on each records every call, so the lean step's completion
forward (which calls each layer's experts block as the model does) counts as the model's does."""

from __future__ import annotations

import sys

import torch

from vlrl.config import ConfigError
from vlrl.models.loading import core_model


def is_mixture(model: torch.nn.Module) -> bool:
    """Whether the model routes tokens among experts (TRL's test: the text config declares
    `output_router_logits`)."""
    return hasattr(core_model(model).config.get_text_config(), "output_router_logits")


def router_aux_coef(option: float | None, model: torch.nn.Module) -> float:
    """The load-balancing loss's coefficient: `option` (algo.router_aux_loss_coef), else, as
    TRL's, the model's own `router_aux_loss_coef` for a mixture of experts (0.001 for Qwen3-VL
    MoE and Qwen3.5 MoE) and 0 for a dense model."""
    text = core_model(model).config.get_text_config()
    if option is None:
        return float(getattr(text, "router_aux_loss_coef", 0.0)) if is_mixture(model) else 0.0
    if option and not is_mixture(model):
        raise ConfigError(
            f"config: algo.router_aux_loss_coef is {option}, but {type(core_model(model)).__name__} is not a "
            "mixture of experts (its text config has no output_router_logits); leave it null or set 0"
        )
    return float(option)


def modeling_function(model: torch.nn.Module, name: str):
    """`name` of the transformers modeling module that defines the model's class: the first in
    its class's ancestry that has it (FSDP2's fully_shard makes the class a subclass of its own,
    defined in torch's module)."""
    for cls in type(model).__mro__:
        found = getattr(sys.modules.get(cls.__module__), name, None)
        if found is not None:
            return found
    raise ConfigError(f"{type(model).__name__}'s modeling module has no {name}")


class RouterLogits:
    """Within `with router.over(...)`, every router's logits over the forwards run, each router's
    calls in order; then `loss()`, the model's load-balancing loss over them."""

    def __init__(self, model: torch.nn.Module) -> None:
        core = core_model(model)
        recorders = (getattr(type(m), "_can_record_outputs", None) or {} for m in model.modules())
        recorder = next((r["router_logits"] for r in recorders if "router_logits" in r), None)
        if recorder is None:
            raise ConfigError(f"{type(core).__name__} records no router logits: it has no experts")
        self.index = recorder.index
        self.routers = [m for m in model.modules() if isinstance(m, recorder.target_class)]
        self.calls: dict[torch.nn.Module, list[torch.Tensor]] = {router: [] for router in self.routers}
        text = core.config.get_text_config()
        self.experts, self.top_k = text.num_experts, text.num_experts_per_tok
        self.loss_func = modeling_function(core, "load_balancing_loss_func")
        self.handles: list[torch.utils.hooks.RemovableHandle] = []
        self.token_weights = torch.zeros(0)

    def over(self, prompt_mask: torch.Tensor, rows: torch.Tensor, completion_mask: torch.Tensor) -> RouterLogits:
        """For the forwards of `models.policy.completion_logprobs`: the prompts (B, P) once, then
        the completions (R, T), row r continuing prompt `rows[r]`. Each token the routers see is
        weighted as in the rows of prompt and completion TRL's forward takes: a prompt token once
        for each of its completions, a completion token once, padding not at all."""
        uses = torch.bincount(rows, minlength=len(prompt_mask)).to(prompt_mask.device)
        self.token_weights = torch.cat([(prompt_mask * uses[:, None]).flatten(), completion_mask.flatten()]).float()
        return self

    def __enter__(self) -> RouterLogits:
        for router in self.routers:
            self.calls[router].clear()
            record = self.calls[router].append
            self.handles.append(router.register_forward_hook(lambda _, inputs, out, r=record: r(out[self.index])))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()

    def loss(self) -> torch.Tensor:
        """The load-balancing loss over the recorded tokens, each weighted by `token_weights`."""
        layers = tuple(torch.cat(self.calls[router]) for router in self.routers)
        if any(len(layer) != len(self.token_weights) for layer in layers):
            routed = sorted({len(layer) for layer in layers})
            raise RuntimeError(f"the routers saw {routed} tokens, the weights are of {len(self.token_weights)}")
        return self.loss_func(layers, self.experts, self.top_k, self.token_weights)
