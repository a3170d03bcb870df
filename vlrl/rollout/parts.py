"""A rollout that ran the GPU out of memory, done again in parts (trainer.halve_on_oom).

An engine call decodes all its prompts' rows (prompts x completions) at once: the HF engine's
KV cache, its prefill's activations and each step's logits grow with them, so a batch that fit
can fail on a step whose prompts carry larger images, or be set too high for the card from the
start. Ending the run there loses the steps since its last checkpoint. Instead the engine's own
buffers are freed (`sleep`, `wake`) and the part that failed, and the rest of the call after
it, go on in parts of at most half its rows, which the run keeps (the parts before it are
kept): whole prompts while a part holds a group, else a prompt's completions in pieces, put
back together in order.

Every part's completions are samples of the same policy, so the step estimates what it did; only
the draws differ (the HF engine draws one uniform per row of the batch a step, so a row's tokens
depend on the batch it is decoded in): a run that split does not repeat the samples of one that
did not. The draws the failed part made are spent: the parts continue the random stream.

The rollout holds no collective (`Strategy.gathered`: each forward of the policy is local while
it samples), so each process recovers by itself, as its own batch needs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from vlrl.models.batch import Prompt
from vlrl.models.out_of_memory import first_line, release
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


def parts(prompts: int, n: int, rows: int | None, start: int = 0, first: int = 0) -> list[Part]:
    """The calls that decode prompts [start, prompts)' n completions each, prompt `start`'s
    from its completion `first` on (those before are decoded), at most `rows` rows a call (None:
    one call): whole prompts, rows // n of them a call; a group larger than `rows`, and the rest
    of prompt `start`'s, in pieces of `rows`."""
    if start >= prompts:
        return []
    limit = max(prompts * n, 1) if rows is None else rows
    if first:
        head = [Part(start, start + 1, min(limit, n - done), done) for done in range(first, n, limit)]
        return head + parts(prompts, n, rows, start + 1)
    if limit >= (prompts - start) * n:
        return [Part(start, prompts, n)]
    if limit >= n:
        per = limit // n
        return [Part(i, min(i + per, prompts), n) for i in range(start, prompts, per)]
    return [Part(i, i + 1, min(limit, n - done), done) for i in range(start, prompts) for done in range(0, n, limit)]


class Decoded:
    """What a call's parts have given so far: each prompt's generation, a prompt's pieces
    joined in order (refused if any piece was), and where the next part starts."""

    def __init__(self, n: int):
        self.n = n
        self.generations: list[Generation] = []
        self.next, self.first = 0, 0  # the next part's prompt, and its completion number

    def add(self, part: Part, generations: list[Generation]) -> None:
        for generation in generations:
            if part.first:  # another piece of the last prompt's group
                last = self.generations[-1]
                rejected = last.rejected or generation.rejected
                self.generations[-1] = Generation(
                    [] if rejected else last.completions + generation.completions, rejected
                )
            else:
                self.generations.append(generation)
        done = part.first + part.n
        self.next, self.first = (part.stop, 0) if done == self.n else (part.start, done)


def call(
    engine: RolloutEngine,
    prompts: Sequence[Prompt],
    params: SamplingParams,
    part: Part,
    generator: torch.Generator | None,
) -> list[Generation]:
    """`part`'s engine call: its prompts, its completions, the greedy rows among them
    (SamplingParams.greedy: the group's first)."""
    greedy = min(max(params.greedy - part.first, 0), part.n)
    asked = params if part.n == params.n else dataclasses.replace(params, n=part.n, greedy=greedy)
    return engine.generate(prompts[part.start : part.stop], asked, generator)


@dataclass
class RolloutRows:
    """The rows one engine call may decode: those set (rollout.max_rows; None: all of a call's)
    until a part ran out of memory, then half the part that failed, from then on."""

    halve_on_oom: bool = False  # False: the error ends the run
    # After a call failed, before the engine's buffers are freed: what the failed forwards left in
    # the policy (the trainer's `Strategy.discard_pass`)
    undo: Callable[[], None] = lambda: None
    warn: Callable[[str], None] = lambda message: None  # told once a halving, on the process that halved
    # What the warning calls the calls, and what it says fewer of from the start would save
    what: str = "rollout"
    advice: str = "fewer prompts a batch from the start (eval.batch_size) save the failed work"
    rows: int | None = None  # None: a call's prompts at once

    def generate(
        self,
        engine: RolloutEngine,
        prompts: Sequence[Prompt],
        params: SamplingParams,
        generator: torch.Generator | None = None,
    ) -> list[Generation]:
        """engine.generate(prompts, params, generator), in parts of at most `rows` rows. A part
        that runs the GPU out of memory is made again, and the rest after it, in parts of half
        its rows (the parts before it are kept); one of a single row that does ends the run."""
        decoded = Decoded(params.n)
        while True:
            try:
                for part in parts(len(prompts), params.n, self.rows, decoded.next, decoded.first):
                    decoded.add(part, call(engine, prompts, params, part, generator))
                return decoded.generations
            except torch.OutOfMemoryError as error:
                if not self.halve_on_oom:
                    raise
                failure = first_line(error)
            # Out of the except clause, the failed forward's tensors, which its traceback held, are free.
            self.undo()
            engine.sleep()  # its buffers of the failed shape (the HF engine's static step, merged LoRA)
            release()
            engine.wake()
            failed = parts(len(prompts), params.n, self.rows, decoded.next, decoded.first)[0].rows
            if failed <= 1:
                raise torch.OutOfMemoryError(
                    f"the GPU ran out of memory in the {self.what} decoding one row ({failure}): no smaller part "
                    f"is left. {ADVICE}"
                )
            self.rows = failed // 2
            self.warn(
                f"the {self.what} ran out of GPU memory ({failure}) in a call of {failed} rows (prompts x "
                f"completions): it goes on in parts of at most {self.rows} rows, half of that, from then on (the "
                f"draws are then not those of one call); {self.advice}"
            )
