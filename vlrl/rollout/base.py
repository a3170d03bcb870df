"""The rollout-engine seam: what every engine takes, returns and is told.

An engine turns rendered prompts (`vlrl.models.batch.Prompt`: token ids, the processor's vision
tensors and the images/video as the task rendered them) into n completions each. The trainer,
the SFT loop and the evaluation harness use engines only through `RolloutEngine`; adding an
engine (SGLang, a server) is one new module and one entry point of the group `vlrl.engines`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, Protocol

import torch

from vlrl.config import ModelConfig
from vlrl.models.batch import Prompt
from vlrl.models.memory import ModelShape, Workload


@dataclass(frozen=True)
class SamplingParams:
    n: int = 1  # completions per prompt
    max_new_tokens: int = 256
    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0
    top_k: int = 0  # 0: off
    min_p: float = 0.0  # 0: off (RolloutConfig.min_p)
    # > 1: each row's prompt and completion tokens so far made less likely before the draw (a
    # positive logit divided by it, a negative one multiplied): transformers' and vLLM's
    # repetition_penalty (eval.repetition_penalty, rollout.repetition_penalty). The HF engine's
    # log-probs stay the policy's; vLLM's are the penalized draw's (the trainer's SamplingFilter).
    repetition_penalty: float = 1.0
    # Of each prompt's n completions, the first `greedy` decoded greedily (argmax of the penalized,
    # banned logits), the rest sampled: ReMax's baseline in the batch it samples, not in a decoding
    # of its own. Only their tokens are for use: their log-probs are the engine's (the HF engine's at
    # the temperature, vLLM's at 1). Asked only of an engine that says `mixes_greedy`.
    greedy: int = 0
    # No end token is drawn before a completion holds this many tokens (transformers' min_new_tokens,
    # vLLM's min_tokens): banned with the vision tokens; the HF engine's log-probs stay the policy's.
    min_new_tokens: int = 0


@dataclass(frozen=True)
class EngineSetup:
    """What an engine is built from (besides its own options): the model it serves."""

    model: ModelConfig  # family, dtype, pixel budgets
    checkpoint: str  # the policy's local directory (a LoRA checkpoint: its adapter on a base)
    processor: Any
    seed: int  # the run's: an engine that seeds itself starts from it
    # The policy module and the device its forwards compute on (not always where its parameters
    # are stored: FSDP2 with CPU offload keeps them on the CPU); called only by engines that
    # sample with it (`shares_policy`), so evaluating with vLLM never loads the model twice.
    load_policy: Callable[[], tuple[torch.nn.Module, torch.device]]


@dataclass
class Completion:
    """One sampled answer: its tokens (ending with the stop token unless truncated) and text.

    `logprobs` are the sampled tokens' log-probs under the temperature-scaled policy, as the
    engine computed them; `entropies` the entropy of each step's distribution. Either is None
    when the engine cannot give it (vLLM gives no full-vocabulary entropy): the trainer then
    takes them from its own forward.
    """

    token_ids: list[int]
    text: str
    truncated: bool
    logprobs: list[float] | None = None
    entropies: list[float] | None = None


@dataclass
class Generation:
    """One prompt's completions, or why the engine refused the prompt (then none): a prompt
    too long for the engine or with too many images costs that sample, not the run."""

    completions: list[Completion]
    rejected: str = ""


def banned_token_ids(tokenizer, vocab_size: int, vision_tokens: Sequence[str]) -> list[int]:
    """Ids no engine may sample: the model family's vision special tokens (a sampled
    <|image_pad|> breaks the training forward, which expects one image feature per pad) and the
    padded tail of the embedding matrix past the tokenizer (rows that decode to nothing)."""
    banned = set(range(len(tokenizer), vocab_size))
    for token in vision_tokens:
        token_id = tokenizer.convert_tokens_to_ids(token)
        if token_id is not None and token_id < vocab_size:
            banned.add(token_id)
    return sorted(banned)


def vocab_mask(ids: Sequence[int], vocab: int) -> torch.Tensor:
    """(vocab,) True at `ids` (those past the vocabulary left out): a draw's bans and its end
    tokens (`SamplingFilter.banned`, `.stops`)."""
    mask = torch.zeros(vocab, dtype=torch.bool)
    mask[[i for i in ids if i < vocab]] = True
    return mask


class RolloutEngine(Protocol):
    """Samples completions for rendered prompts; follows the policy's weights.

    `shares_policy`: the engine generates with the training policy itself (the HF engine).
    Then there are no weights to push, and its log-probs are the policy's, over the whole
    vocabulary; they are the trainer's own unless the engine says otherwise
    (`exact_logprobs`, optional, True if absent: the HF engine decoding with LoRA merged sets
    it False). Otherwise (vLLM) the trainer pushes the policy's full weights after every
    update, and the engine's log-probs are of the distribution it draws from (bans, top-k,
    top-p, min-p applied; `min_p_first`, optional, False if absent: min-p before top-k / top-p,
    as vLLM applies it). Log-probs that are not the trainer's own are treated as another
    implementation's: old log-probs are recomputed by the trainer when the policy moves, and
    the mismatch is corrected and logged (`algo.rollout_correction`, `rollout/logp_diff`).

    Optional too: `mixes_greedy` (False if absent), whether it decodes `SamplingParams.greedy`
    rows among the sampled ones in one call (the HF engine, vLLM; else the trainer asks for them
    in a call of their own). And `memory_refusal(shape, work, options) -> str`, a staticmethod beside
    `memory` saying why the engine could not start on a GPU at all ("" or absent: it could),
    which `vlrl plan` prints and counts against every strategy (vLLM's share too small for its
    weights).
    """

    name: ClassVar[str]
    shares_policy: ClassVar[bool]
    gives_entropy: ClassVar[bool]  # Completion.entropies are filled in
    # Its options: a dataclass read from rollout.<options_key> (vlrl/plugins.py), or None
    Options: ClassVar[type | None]
    options_key: ClassVar[str]
    device: torch.device  # where a sampling generator passed to `generate` must live

    @classmethod
    def create(cls, setup: EngineSetup, options: Any) -> RolloutEngine:
        """The engine for `setup`'s policy, with its `Options` (None if it has none)."""
        ...

    @staticmethod
    def memory(shape: ModelShape, work: Workload, options: Any) -> tuple[float, float]:
        """Bytes it holds on one GPU, on paper: while sampling, and during the update."""
        ...

    def generate(
        self, prompts: Sequence[Prompt], params: SamplingParams, generator: torch.Generator | None = None
    ) -> list[Generation]:
        """params.n completions for each prompt, in prompt order. Randomness comes from
        `generator` only, so a run's checkpointed generator state reproduces its samples."""
        ...

    def sync_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Take the policy's new full weights (LoRA merged, in the engine's dtype), named and laid
        out as its checkpoint stores them: what save_pretrained writes (`loading.checkpoint_layout`)."""
        ...

    def sleep(self) -> None:
        """Free the engine's memory for the update, where the backend can (vLLM on CUDA)."""
        ...

    def wake(self) -> None:
        """Undo `sleep` before the next rollout."""
        ...

    def close(self) -> None:
        """Release what the engine holds (vLLM: its engine core and process groups) while the
        process still runs, rather than in interpreter teardown."""
        ...


def logprobs_exact(engine: RolloutEngine) -> bool:
    """Whether `engine`'s log-probs are the trainer's own (see RolloutEngine)."""
    return engine.shares_policy and getattr(engine, "exact_logprobs", True)


class CompletionRows(NamedTuple):
    """Completions of several prompts as right-padded rows, prompt-major."""

    rows: torch.Tensor  # (R,) the prompt each row continues
    ids: torch.Tensor  # (R, T) token ids, padded with the pad id
    mask: torch.Tensor  # (R, T) 1 on real tokens
    logprobs: torch.Tensor | None  # (R, T) the engine's, zero-padded; None if any completion lacks them
    entropies: torch.Tensor | None  # (R, T) likewise
    truncated: torch.Tensor  # (R,) hit max_new_tokens without stopping


def completion_rows(groups: Sequence[object], pad_id: int) -> CompletionRows:
    """The completions of `groups` (anything with `.completions`: an engine's Generations, the
    trainer's Groups) as the tensors the forwards take, each made by one call from padded lists
    (a row at a time, a step spent milliseconds in tensor indexing)."""
    completions: list[Completion] = [c for g in groups for c in g.completions]  # type: ignore[attr-defined]
    lengths = [len(c.token_ids) for c in completions]
    width = max([1, *lengths])
    ids = torch.tensor([[*c.token_ids, *[pad_id] * (width - len(c.token_ids))] for c in completions], dtype=torch.long)
    mask = torch.tensor([[1.0] * n + [0.0] * (width - n) for n in lengths])
    rows = torch.tensor([i for i, g in enumerate(groups) for _ in g.completions], dtype=torch.long)  # type: ignore[attr-defined]
    truncated = torch.tensor([c.truncated for c in completions], dtype=torch.bool)
    return CompletionRows(  # the views: no completions (all of a process's prompts failed) are (0, 1), not (0,)
        rows,
        ids.view(len(completions), width),
        mask.view(len(completions), width),
        _padded([c.logprobs for c in completions], width),
        _padded([c.entropies for c in completions], width),
        truncated,
    )


def _padded(values: list[list[float] | None], width: int) -> torch.Tensor | None:
    """Per-token values right-padded with zeros to `width`, or None if any row lacks them."""
    if any(row is None for row in values):
        return None
    return torch.tensor([[*row, *[0.0] * (width - len(row))] for row in values]).view(len(values), width)
