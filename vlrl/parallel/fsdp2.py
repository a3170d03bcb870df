"""FSDP2 (torch.distributed.fsdp.fully_shard): weights, gradients and AdamW's state sharded.

Each decoder layer of the language model is its own FSDP unit (all-gathered for its forward
and backward, its gradients reduce-scattered right after), so are the input embeddings and the
output layer (one unit when they share their weights); everything else (the vision tower, the
final norm) is the root unit, gathered once per forward. The vision tower stays in the root
unit on purpose: how often it runs depends on the inputs (not at all for a text-only batch,
once for its images and once more for its videos), and per-block units would then all-gather
a different number of times on different processes and deadlock. The other units run exactly
once per model call, and every micro-batch makes two (prompt, then completions) on every
process. The layer classes come from the model's `_no_split_modules` and the embeddings from
transformers' get_input_embeddings / get_output_embeddings, so new families need no code.

Precision: a bf16 or fp16 model trains through fp32 weights (the optimizer's), computed in the
model's dtype (MixedPrecisionPolicy param_dtype) with gradients reduced in fp32; this replaces
the replicated strategy's hand-made master weights. LoRA's adapters are fp32 already and the
frozen base stays in its dtype, each computing in its own dtype as when replicated.

Every forward is a collective, so all processes run the same number of them (`micro_batches`
pads with idle passes); sampling with the policy happens inside `gathered`, where every unit is
all-gathered once and the decoding forwards, as many as each process needs, gather nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, OffloadPolicy, fully_shard
from torch.distributed.tensor import DTensor

from vlrl.config import TrainerConfig
from vlrl.models.batch import Prompt, collate
from vlrl.models.blocks import unit_modules
from vlrl.models.loading import core_model, save_model, transformers_weights
from vlrl.models.memory import ModelShape, StrategyMemory, Workload
from vlrl.models.policy import completion_logprobs
from vlrl.parallel.base import adamw
from vlrl.parallel.distributed import Processes
from vlrl.parallel.recompute import checkpoint_layers
from vlrl.parallel.sharded_state import load_sharded, save_sharded

SHARDS = "sharded"  # the checkpoint's subdirectory of DCP shards


def ensure_process_group(procs: Processes) -> None:
    """FSDP2 needs a process group, also for one process (one GPU with CPU offload): then a
    group of one, in memory."""
    if dist.is_initialized():
        return
    backend = "cuda:nccl,cpu:gloo" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=procs.world)


def root_parameters(model: torch.nn.Module, below: list[list[torch.nn.Module]]) -> list[tuple[torch.nn.Module, str]]:
    """The trained parameters of the root unit (the vision tower, the final norm) as (module,
    attribute): FSDP2 swaps the tensor an attribute holds when it gathers or frees a unit."""
    in_units = {id(p) for modules in below for m in modules for p in m.parameters()}
    return [
        (module, name)
        for module in model.modules()
        for name, p in module.named_parameters(recurse=False)
        if p.requires_grad and id(p) not in in_units
    ]


def reduce_unused_root_gradients(root: FSDPModule, trained: list[tuple[torch.nn.Module, str]]) -> None:
    """A process whose micro-batch has no image (an idle pass, a text-only sample) leaves the
    vision tower without gradients, while another process's has them: the root unit's
    reduce-scatters would then differ in size between processes and the run dies. Every
    process must reduce every trained root parameter, zeros where it has no gradient.

    torch >= 2.12 does it when asked (`set_reduce_scatter_unused_params`). Older FSDP2 (2.11
    on the GPU machines this project is lent) reduces only parameters that have a gradient:
    there, every forward that records gradients adds zero times one element of each trained
    root parameter to the logits, so each of them gets a gradient of zeros."""
    if hasattr(root, "set_reduce_scatter_unused_params"):
        root.set_reduce_scatter_unused_params(True, recurse=False)
        return
    if not trained:
        return

    def touch_every_parameter(module: torch.nn.Module, args: Any, output: Any) -> Any:
        if torch.is_grad_enabled() and getattr(output, "logits", None) is not None:
            # the gathered tensors, as the root keeps them from its forward to its backward
            zero = sum(getattr(owner, name).reshape(-1)[0].float() for owner, name in trained) * 0.0
            output.logits = output.logits + zero.to(output.logits.dtype)
        return output

    root.register_forward_hook(touch_every_parameter)


Unit = tuple[FSDPModule, list[str]]  # a unit's handle and its modules' names in the transformers model


@dataclass
class FSDPOptions:
    """trainer.fsdp (sft.fsdp)."""

    # Sharded weights, gradients and AdamW's state live in CPU memory and the optimizer steps on
    # the CPU (FSDP2's CPUOffloadPolicy): a model too large for the GPUs trains, more slowly.
    cpu_offload: bool = False


class FSDP2:
    name = "fsdp2"
    Options = FSDPOptions
    options_key = "fsdp"
    copies_weights = True  # into its shards: each process need not copy the whole model first

    def __init__(self, procs: Processes, t: TrainerConfig, options: FSDPOptions):
        ensure_process_group(procs)
        self.procs = procs
        self.device = procs.device()
        self.load_device = torch.device("cpu")  # each unit is moved to the device as it is sharded
        self.mesh = init_device_mesh(self.device.type, (procs.world,))
        self.cpu_offload = options.cpu_offload
        self.master_weights = t.master_weights
        self.gradient_checkpointing = t.gradient_checkpointing
        self.model: torch.nn.Module | None = None
        self.units: list[Unit] = []  # the decoder layers, the embeddings, then the root
        self.parameters: list[torch.nn.Parameter] = []
        self.optimizer: torch.optim.Optimizer | None = None

    # -- memory on paper (vlrl plan) ------------------------------------------------------------
    @staticmethod
    def plan_variants() -> dict[str, FSDPOptions]:
        return {"fsdp2": FSDPOptions(), "fsdp2 + cpu_offload": FSDPOptions(cpu_offload=True)}

    @staticmethod
    def memory(shape: ModelShape, work: Workload, options: FSDPOptions) -> StrategyMemory:
        """The fp32 weights are the masters, sharded over the GPUs with gradients, moments and
        the reference (offloaded: in CPU memory instead); frozen weights stay in the model's
        dtype. Gathered: the root unit for the whole forward and backward, the unit being
        computed and the next (prefetched), and that unit's unsharded gradients with their fp32
        reduce-scatter copy; an engine sampling with the policy gathers all of it."""
        n, b, T, P = work.gpus, shape.dtype_bytes, shape.trainable, shape.params
        stepped = 4 if shape.upcast else shape.trainable_bytes
        resting = 0.0 if options.cpu_offload else 1.0
        reference = P * b / n if work.beta > 0 and not work.lora else 0.0  # offloaded with the policy
        return StrategyMemory(
            weights=resting * (P - T) * b / n,
            master_weights=resting * T * stepped / n,
            optimizer=resting * T * 2 * stepped / n,
            reference=resting * reference,
            gradients_update=resting * T * stepped / n,
            gradients_step=resting * T * stepped / n,
            gathered=shape.root_unit * b + 2 * shape.largest_unit * b + shape.largest_unit * (b + 4),
            sampling_weights=P * b,
            cpu_memory=((P - T) * b + T * stepped * 4) / n + reference if options.cpu_offload else 0.0,
        )

    # -- wrapping -------------------------------------------------------------------------------
    def _shard(self, model: torch.nn.Module, upcast: bool, keep_root: bool) -> list[Unit]:
        """`keep_root`: the root unit stays gathered from a forward to its backward (the policy);
        a model without backward (the reference) frees it after each forward instead."""
        dtype = core_model(model).dtype
        trainable = [p for p in model.parameters() if p.requires_grad]
        upcast = upcast and dtype != torch.float32 and any(p.dtype == dtype for p in trainable)
        if upcast:  # the optimizer's fp32 weights; forwards compute in the model's dtype
            for p in trainable:
                p.data = p.data.float()
        policy = MixedPrecisionPolicy(
            param_dtype=dtype if upcast else None, reduce_dtype=torch.float32 if dtype != torch.float32 else None
        )
        offload = CPUOffloadPolicy(pin_memory=torch.cuda.is_available()) if self.cpu_offload else OffloadPolicy()
        names = {id(m): name for name, m in core_model(model).named_modules()}
        below = unit_modules(model)
        root_trained = root_parameters(model, below)
        units: list[Unit] = []
        for modules in below:
            fully_shard(modules, mesh=self.mesh, mp_policy=policy, offload_policy=offload, reshard_after_forward=True)
            units.append((modules[0], [names[id(m)] for m in modules]))
        root = fully_shard(
            model, mesh=self.mesh, mp_policy=policy, offload_policy=offload, reshard_after_forward=not keep_root
        )
        reduce_unused_root_gradients(root, root_trained)
        return [*units, (root, [])]

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        if self.gradient_checkpointing:
            checkpoint_layers(model)
        self.units = self._shard(model, upcast=self.master_weights, keep_root=True)
        self.model = model
        self.parameters = [p for p in model.parameters() if p.requires_grad]
        return model

    def wrap_reference(self, model: torch.nn.Module) -> torch.nn.Module:
        self._shard(model, upcast=False, keep_root=False)
        return model

    def build_optimizer(self, lr: float, weight_decay: float) -> torch.optim.Optimizer:
        self.optimizer = adamw(self.parameters, lr, weight_decay)
        return self.optimizer

    # -- the update -----------------------------------------------------------------------------
    def micro_batches(self, planned: list[list[int]]) -> list[list[int]]:
        """`planned` followed by empty micro-batches up to the most any process has: every
        forward is a collective, so each process runs as many forwards and backwards (an
        empty one is an `idle_pass`)."""
        return planned + [[] for _ in range(self.procs.max(len(planned)) - len(planned))]

    def idle_pass(self, model: torch.nn.Module, pad_id: int, backward: bool) -> None:
        """A micro-batch that moves nothing: one token of prompt and one of completion through
        `model` (the same forwards as any micro-batch), and a backward of zero when `backward`."""
        prompt = Prompt(torch.tensor([pad_id]), torch.zeros(1, dtype=torch.long), {}, "")
        ids = torch.tensor([[pad_id]], device=self.device)
        with contextlib.nullcontext() if backward else torch.no_grad():
            logp = completion_logprobs(
                model, collate([prompt], pad_id).to(self.device), torch.zeros(1, dtype=torch.long, device=self.device),
                ids, torch.ones(1, 1, device=self.device),
            ).logp  # fmt: skip
            if backward:
                (logp.sum() * 0.0).backward()

    def clip_gradients(self, max_norm: float) -> float:
        """Gradients were reduce-scattered in backward; the global norm sums every shard's."""
        grads = [p.grad for p in self.parameters if p.grad is not None]
        if not grads:
            return 0.0
        norm = torch.nn.utils.get_total_norm(grads, 2.0)
        if isinstance(norm, DTensor):
            norm = norm.full_tensor()
        torch.nn.utils.clip_grads_with_norm_(self.parameters, max_norm, norm)
        return float(norm)

    def after_step(self) -> None:
        """Nothing: the next forward gathers the updated shards."""

    def zero_grad(self) -> None:
        for p in self.parameters:
            p.grad = None

    def recovers(self) -> bool:
        """On one process, with torch's reset of a failed pass (FSDPModule.reset_iter_state, torch
        2.14; torch 2.11 has none): on several, every forward is a collective, and the others would
        wait inside the one that failed."""
        return self.procs.world == 1 and hasattr(self.model, "reset_iter_state")

    def discard_pass(self, model: torch.nn.Module) -> None:
        """torch's reset (every unit resharded, its pending reductions dropped), then the gradients
        the failed backward left on the gathered parameters, then the sharded ones of the optimizer
        step so far. torch 2.14's reset frees a gathered parameter's storage but keeps the parameter
        and its gradient, which the next backward adds to (tests/trainer/test_oom.py)."""
        model.reset_iter_state()
        for module in model.modules():
            if isinstance(module, FSDPModule):
                for group in module._get_fsdp_state()._fsdp_param_groups:
                    for param in group.fsdp_params:
                        if hasattr(param, "_unsharded_param"):  # gathered at least once
                            param._unsharded_param.grad = None
        self.zero_grad()

    # -- checkpoints ----------------------------------------------------------------------------
    def _state_options(self, full: bool = False) -> StateDictOptions:
        # Frozen weights (a LoRA base, a frozen vision tower) never change: the HF files hold them.
        return StateDictOptions(full_state_dict=full, cpu_offload=full, ignore_frozen_params=True, strict=False)

    def _sharded_state(self) -> dict[str, Any]:
        optimizer = get_optimizer_state_dict(self.model, self.optimizer, options=self._state_options())
        return {
            "model": get_model_state_dict(self.model, options=self._state_options()),
            "optimizer": optimizer["state"],
        }

    def trainer_state(self) -> dict[str, Any]:
        groups = get_optimizer_state_dict(self.model, self.optimizer, options=self._state_options())["param_groups"]
        return {"parallel": {"strategy": self.name, "processes": self.procs.world}, "optimizer_groups": groups}

    def save(self, directory: Path, main: bool) -> None:
        save_sharded(self._sharded_state(), directory / SHARDS)
        if hasattr(self.model, "get_base_model"):  # LoRA: the adapter, gathered onto process 0
            adapters = get_model_state_dict(self.model, options=self._state_options(full=True))
            if main:
                save_model(self.model, directory, adapters)
            return
        weights = {name: tensor for name, tensor in self._stream(torch.device("cpu"), keep=main)}
        if main:
            save_model(core_model(self.model), directory, weights)

    def load(self, checkpoint: Path, state: dict[str, Any]) -> None:
        saved = state.get("parallel", {}).get("strategy")
        if saved != self.name:
            raise ValueError(f"it was written by the {saved or 'replicated'} strategy, this run is {self.name}")
        sharded = self._sharded_state()
        load_sharded(sharded, checkpoint / SHARDS)
        set_model_state_dict(self.model, sharded["model"], options=self._state_options())
        set_optimizer_state_dict(
            self.model,
            self.optimizer,
            {"state": sharded["optimizer"], "param_groups": state["optimizer_groups"]},
            options=self._state_options(),
        )

    # -- full weights ---------------------------------------------------------------------------
    def _unit_tensors(self) -> list[tuple[FSDPModule, list[tuple[str, torch.nn.Module, str]]]]:
        """Each unit with its own parameters and persistent buffers: (name relative to the
        transformers model, owning module, attribute), tied weights under each of their names."""
        prefixes = [(f"{name}.", i) for i, (_, names) in enumerate(self.units) for name in names]
        owned: list[list[tuple[str, torch.nn.Module, str]]] = [[] for _ in self.units]
        for module_name, module in core_model(self.model).named_modules(remove_duplicate=False):
            tensors = [n for n, _ in module.named_parameters(recurse=False)]
            tensors += [
                n for n, _ in module.named_buffers(recurse=False) if n not in module._non_persistent_buffers_set
            ]
            for attr in tensors:
                name = f"{module_name}.{attr}" if module_name else attr
                unit = next((i for prefix, i in prefixes if name.startswith(prefix)), len(self.units) - 1)
                owned[unit].append((name, module, attr))
        return [(handle, tensors) for (handle, _), tensors in zip(self.units, owned, strict=True)]

    def _stream(self, device: torch.device | str | None, keep: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
        """Unit by unit: gather it (a collective), yield copies of its tensors, free it again; a
        process holds one unit's full weights at a time besides what the caller keeps."""
        base = core_model(self.model)
        for unit, tensors in self._unit_tensors():
            unit.unshard()
            try:
                named = [(name, getattr(module, attr)) for name, module, attr in tensors]
                for name, tensor in transformers_weights(base, named):
                    if keep:
                        yield name, tensor.detach().to(device or tensor.device, copy=True)
            finally:
                unit.reshard()

    def full_weights(self, device: torch.device | str | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        yield from self._stream(device)

    @contextlib.contextmanager
    def gathered(self) -> Iterator[None]:
        """Every unit all-gathered once and kept through any number of forwards (each process
        holds the policy's full weights in the compute dtype until the block ends)."""
        handles = [handle for handle, _ in self.units]
        for handle in handles:
            handle.set_reshard_after_forward(False, recurse=False)
            handle.unshard()
        try:
            yield
        finally:
            for handle in handles:
                handle.reshard()
                handle.set_reshard_after_forward(handle is not handles[-1], recurse=False)
