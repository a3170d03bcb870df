"""A rollout that ran the GPU out of memory, done again in parts (trainer.halve_on_oom).

An engine call decodes all its prompts' rows (prompts x completions) at once: the HF engine's
KV cache, its prefill's activations and each step's logits grow with them, so a batch that fit
can fail on a step whose prompts carry larger images, or be set too high for the card from the
start. Ending the run there loses the steps since its last checkpoint. Instead the engine's own
buffers are freed (`sleep`, `wake`) and the call is made again in parts of at most half the rows
of the part that failed, which the run keeps: whole prompts while a part holds a group, else a
prompt's completions in pieces, put back together in order.

Every part's completions are samples of the same policy, so the step estimates what it did; only
the draws differ (the HF engine draws one uniform per row of the batch a step, so a row's tokens
depend on the batch it is decoded in): a run that split does not repeat the samples of one that
did not. The draws the failed call made are spent: the parts continue the random stream.

The rollout holds no collective (`Strategy.gathered`: each forward of the policy is local while
it samples), so each process recovers by itself, as its own batch needs.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from vlrl.models.batch import Prompt
from vlrl.rollout.base import Generation, RolloutEngine, SamplingParams

ADVICE = (
    "shorten rollout.max_new_tokens, lower model.max_pixels, train LoRA adapters (model.lora.r) or shard "
    "the model (trainer.parallel=fsdp2): `vlrl plan` says which fits"
)


@dataclass(frozen=True)
class Part:
    """One engine call: prompts[start:stop], `n` completions each, the first of them a prompt's
    completion number `first` (a piece of a group: its greedy rows are the group's first)."""

    start: int
    stop: int
    n: int
    first: int = 0

    @property
    def rows(self) -> int:
        return (self.stop - self.start) * self.n


def parts(prompts: int, n: int, rows: int | None) -> list[Part]:
    """The calls that decode `prompts` prompts' n completions each, at most `rows` rows a call
    (None: one call): whole prompts, rows // n of them a call; where a group is larger than
    `rows`, each prompt's n completions in pieces of `rows`."""
    if rows is None or rows >= prompts * n:
        return [Part(0, prompts, n)]
    if rows >= n:
        per = rows // n
        return [Part(i, min(i + per, prompts), n) for i in range(0, prompts, per)]
    return [Part(i, i + 1, min(rows, n - done), done) for i in range(prompts) for done in range(0, n, rows)]


@dataclass
class RolloutRows:
    """The rows one engine call may decode in a run: all of a call's until the rollout ran out
    of memory, then half the part that failed, for the rest of the run."""

    halve_on_oom: bool = False  # False: the error ends the run
    # After a call failed, before the engine's buffers are freed: what the failed forwards left in
    # the policy (the trainer's `Strategy.discard_pass`)
    undo: Callable[[], None] = lambda: None
    warn: Callable[[str], None] = lambda message: None  # told once a halving, on the process that halved
    rows: int | None = None  # None: a call's prompts at once

    def generate(
        self,
        engine: RolloutEngine,
        prompts: Sequence[Prompt],
        params: SamplingParams,
        generator: torch.Generator | None = None,
    ) -> list[Generation]:
        """engine.generate(prompts, params, generator), in parts of at most `rows` rows, halved
        while one runs the GPU out of memory (a part of one row that does ends the run)."""
        while True:
            plan = parts(len(prompts), params.n, self.rows)
            try:
                return in_parts(engine, prompts, params, generator, plan)
            except torch.OutOfMemoryError as error:
                if not self.halve_on_oom:
                    raise
                failure = str(error).strip().splitlines()[0] if str(error).strip() else "out of memory"
            # Out of the except clause, the failed forward's tensors, which its traceback held, are free.
            self.undo()
            engine.sleep()  # its buffers of the failed shape (the HF engine's static step, merged LoRA)
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            engine.wake()
            largest = max(part.rows for part in plan)
            if largest == 1:
                raise torch.OutOfMemoryError(
                    f"the GPU ran out of memory in the rollout decoding one row ({failure}): no smaller part is "
                    f"left. {ADVICE}"
                )
            self.rows = largest // 2
            self.warn(
                f"the rollout ran out of GPU memory ({failure}) in a call of {largest} rows (prompts x completions): "
                f"it is made again in parts of at most {self.rows} rows, half of that, kept for the rest of the run "
                f"(logged as rollout_rows); the draws are then not those of one call. Fewer rows from the start "
                f"(data.batch_size, rollout.num_generations) or shorter completions save the failed work: `vlrl plan`"
            )


def in_parts(
    engine: RolloutEngine,
    prompts: Sequence[Prompt],
    params: SamplingParams,
    generator: torch.Generator | None,
    plan: list[Part],
) -> list[Generation]:
    """Each part's call in turn, a prompt's pieces joined into its generation (refused if any
    piece was)."""
    out: list[Generation] = []
    starts: list[int] = []  # the prompt each generation of `out` is
    for part in plan:
        greedy = min(max(params.greedy - part.first, 0), part.n)  # SamplingParams.greedy: the group's first rows
        call = params if part.n == params.n else dataclasses.replace(params, n=part.n, greedy=greedy)
        for i, generation in enumerate(engine.generate(prompts[part.start : part.stop], call, generator)):
            prompt = part.start + i
            if starts and starts[-1] == prompt:  # another piece of the same prompt's group
                last = out[-1]
                rejected = last.rejected or generation.rejected
                out[-1] = Generation([] if rejected else last.completions + generation.completions, rejected)
            else:
                out.append(generation)
                starts.append(prompt)
    return out
