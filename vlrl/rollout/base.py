"""The rollout-engine seam: what every engine takes, returns and is told.

An engine turns rendered prompts (`vlrl.prompting.Prompt`: token ids, the processor's vision
tensors and the images/video as the task rendered them) into n completions each. The trainer,
the SFT loop and the evaluation harness use engines only through `RolloutEngine`; adding an
engine (SGLang, a server) is one new module registered in `vlrl.rollout.ENGINES`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

if TYPE_CHECKING:  # torch stays unimported until an engine is built: `vlrl config show` needs none
    import torch

    from vlrl.prompting import Prompt

@dataclass(frozen=True)
class SamplingParams:
    n: int = 1  # completions per prompt
    max_new_tokens: int = 256
    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0
    top_k: int = 0  # 0: off


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


class RolloutEngine(Protocol):
    """Samples completions for rendered prompts; follows the policy's weights.

    `shares_policy`: the engine generates with the training policy itself (the HF engine).
    Then there are no weights to push, and its log-probs are the trainer's own. Otherwise
    (vLLM) the trainer pushes the policy's full weights after every update, and treats the
    engine's log-probs as another implementation's: old log-probs are recomputed by the
    trainer and the mismatch is corrected and logged (`algo.rollout_correction`).
    """

    name: ClassVar[str]
    shares_policy: ClassVar[bool]
    gives_entropy: ClassVar[bool]  # Completion.entropies are filled in
    device: torch.device  # where a sampling generator passed to `generate` must live

    def generate(
        self, prompts: Sequence[Prompt], params: SamplingParams, generator: torch.Generator | None = None
    ) -> list[Generation]:
        """params.n completions for each prompt, in prompt order. Randomness comes from
        `generator` only, so a run's checkpointed generator state reproduces its samples."""
        ...

    def sync_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Take the policy's new full weights (HF names, LoRA merged, in the engine's dtype)."""
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
