"""The update's token budget as a run follows it: trainer.token_budget, halved where a micro-batch
ran the GPU out of memory (trainer.halve_on_oom).

A micro-batch's memory grows with its tokens and with how long its rows are (attention, the
logits of each chunk), so a budget that fit for a hundred steps can fail on a step whose
completions run longer, or be set too high for the card from the start. Ending the run there
loses the steps since its last checkpoint. Instead, the work since the optimizer step before
(one optimizer step's micro-batches, or one no-gradient pass) is undone, its gradients zeroed,
and done again at half the budget, which the run keeps: accelerate's find_executable_batch_size
halves a batch alike. Only the rounding changes: the update weighs every micro-batch by the
whole optimizer step's counts (`update.Updater.accumulate`), so which rows share one does not
enter the loss (a mixture of experts' load-balancing term is the exception, its own per
micro-batch, docs/training.md).

Where every forward is a collective on several processes (FSDP2's all-gathers), one process's
failure leaves the others waiting inside one, so there the error ends the run, as before.
Elsewhere the processes agree after each attempt whether any failed, and all redo it; so the
work an attempt wraps must hold no collective after its first allocation that can fail (the
update's counts across processes are agreed before its micro-batches), or a process that failed
would skip one the others wait in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import torch
from rich.console import Console
from rich.markup import escape

from vlrl.config import TrainerConfig
from vlrl.models.out_of_memory import first_line, release
from vlrl.parallel.base import Strategy
from vlrl.parallel.distributed import Processes

T = TypeVar("T")

ADVICE = (
    "train LoRA adapters (model.lora.r), turn on trainer.gradient_checkpointing, shard the model "
    "(trainer.parallel=fsdp2, trainer.fsdp.cpu_offload=true) or shorten rollout.max_new_tokens: "
    "`vlrl plan` says which fits"
)


@dataclass
class TokenBudget:
    tokens: int  # a micro-batch's budget now: the configured one, halved by each recovery
    halve_on_oom: bool
    recoverable: bool  # the strategy can discard a failed pass (Strategy.recovers)
    procs: Processes
    console: Console
    section: str  # trainer or sft, as the messages name the key

    @classmethod
    def of_run(
        cls, t: TrainerConfig, section: str, procs: Processes, strategy: Strategy, console: Console
    ) -> TokenBudget:
        """The budget of a run with trainer section `t` under `strategy`."""
        return cls(t.token_budget, t.halve_on_oom, strategy.recovers(), procs, console, section)

    def attempt(self, work: Callable[[], T], undo: Callable[[], None], plan: Callable[[], list[list[int]]]) -> T:
        """work(); where it ran out of GPU memory on any process, undo() on every process and
        work() again at half the budget, as long as some micro-batch of the work's `plan` at the
        budget that failed (asked before halving) held more than one row: a smaller budget splits
        only those. Then the error ends the run."""
        if not (self.halve_on_oom and self.recoverable):
            return work()
        while True:
            failure = ""
            try:
                result = work()
            except torch.OutOfMemoryError as error:
                failure = first_line(error)
            # Out of the except clause, the failed forward's tensors, which its traceback held, are free.
            if self.procs.all_true(not failure):
                return result
            undo()
            release()
            said = f" ({failure})" if failure else " (on another process)"
            if not self.procs.max(int(any(len(rows) > 1 for rows in plan()))):
                raise torch.OutOfMemoryError(
                    f"the GPU ran out of memory in the update with one row a micro-batch{said} "
                    f"({self.section}.token_budget now {self.tokens}): no smaller split is left. {ADVICE}"
                )
            self.tokens //= 2
            if self.procs.main:
                self.console.print(
                    f"[yellow]warning:[/yellow] the update ran out of GPU memory{escape(said)}: its micro-batches since the "
                    f"last optimizer step run again at {self.section}.token_budget {self.tokens}, half the budget "
                    f"that failed, kept for the rest of the run (logged as token_budget). A budget that fits from "
                    f"the start saves the failed work: `vlrl plan`",
                    highlight=False,
                    soft_wrap=True,
                )
