"""The colocated vLLM engine (`rollout.engine=vllm`): vllm.LLM inside the training process.

It is given exactly the prompt the HF engine would run: vlrl's own rendering (chat template,
smart-resized images, sampled video frames) as token ids plus the same images and frames.
vLLM runs the checkpoint's processor on the media and expands each image/video placeholder
itself, so the ids are sent unexpanded (`prompt_ids`: every run of `<|image_pad|>` /
`<|video_pad|>` collapsed to one token; for Qwen3-VL, whose processor also writes each
frame's timestamp, the template's text); already-expanded ids would be expanded again,
silently (longer prompts, no error). The video's frames, metadata and pixel budget are the
family's (`video_request`). What vLLM does differently per model family, or cannot do, is
this module's (`ON_VLLM`), not the family's: the families know nothing of engines.

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

import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from vlrl.config import ConfigError, ModelConfig
from vlrl.models.base import ModelFamily
from vlrl.models.batch import Prompt
from vlrl.models.checkpoints import weights_root
from vlrl.models.families import model_family
from vlrl.models.loading import torch_dtype
from vlrl.models.memory import GB, ModelShape, Workload
from vlrl.models.prompting import covering
from vlrl.models.qwen3_vl import experts_saved_as_held
from vlrl.rollout.base import Completion, EngineSetup, Generation, SamplingParams, banned_token_ids
from vlrl.rollout.hf import stop_token_ids
from vlrl.vision.video import Video

SEED_RANGE = 2**31 - 1
VLLM_TEMPERATURES = (0.01, 2.0)  # vLLM 0.32's SamplingParams: refused above, raised to the least below


def temperature_refusal(temperature: float) -> str:
    """Why vLLM cannot sample at `temperature` as asked ("": it can). It refuses one above 2,
    which its per-request error would make every prompt's refusal, and raises one below 0.01 to
    0.01 with a warning vlrl hides: draws and log-probs of another distribution than the
    trainer's. Either is the call's error, said once."""
    low, high = VLLM_TEMPERATURES
    if temperature > high or 0 < temperature < low:
        return (
            f"vLLM samples greedily (temperature 0) or at a temperature from {low:g} to {high:g}, not {temperature:g}: "
            "set rollout.temperature (vlrl eval: eval.temperature) in that range, or use the hf engine"
        )
    return ""


AUTO_FIT = -1  # rollout.vllm.max_model_len: the longest context vLLM's share holds, up to the model's


@dataclass
class VLLMOptions:
    """rollout.vllm: the colocated engine, vllm.LLM in the training process. Each request
    carries a seed drawn from the run's sampling generator, so trainer.seed governs vLLM's
    sampling too and a resumed run draws the same seeds."""

    gpu_memory_utilization: float = 0.3  # share of the GPU for weights + KV cache (the rest trains)
    # GPUs vLLM splits the model over (vLLM's tensor_parallel_size); `vlrl plan` divides its weights and
    # keys and values by it
    tensor_parallel_size: int = 1
    # -1: vLLM's auto-fit (the model's context, or the longest its share holds); 0: the model's, which
    # vLLM refuses to start without room for (262,144 tokens for Qwen3-VL); N: N tokens
    max_model_len: int = AUTO_FIT
    enforce_eager: bool = False  # no CUDA graphs (always eager on CPU)
    kv_cache_memory_bytes: int = 0  # KV cache size on CPU (0: vLLM's default, VLLM_CPU_KVCACHE_SPACE)
    sleep: bool = True  # free the engine's GPU memory during the update (CUDA only; a no-op on CPU)

    def validate(self, key: str) -> None:
        if not 0 < self.gpu_memory_utilization <= 1 or self.tensor_parallel_size < 1:
            raise ConfigError(
                f"config: {key} needs 0 < gpu_memory_utilization <= 1 and tensor_parallel_size >= 1, got "
                f"{self.gpu_memory_utilization} and {self.tensor_parallel_size}"
            )
        if self.max_model_len < AUTO_FIT or self.kv_cache_memory_bytes < 0:
            raise ConfigError(
                f"config: {key}.max_model_len must be >= -1 (-1: vLLM's auto-fit, 0: the model's context) and "
                "kv_cache_memory_bytes >= 0 (0: vLLM's default)"
            )


@dataclass(frozen=True)
class OnVLLM:
    """What differs in a vLLM request for a model family, and what vLLM cannot run (vLLM 0.32)."""

    # Why the engine cannot run the family (dtype, on CUDA) -> reason ("": it can)
    refusal: Callable[[torch.dtype, bool], str] = lambda dtype, cuda: ""
    engine_args: Callable[[bool], dict[str, Any]] = lambda cuda: {}  # vllm.LLM arguments beyond vlrl's own
    # Why vLLM cannot take the family's video prompts ("": it can); such a prompt is refused alone
    video_refusal: str = ""
    # The prompt as the template's text rather than collapsed ids: vLLM writes each frame's
    # timestamp and pads itself, so collapsing the pads would leave the timestamps twice.
    prompt_as_text: bool = False
    # Why vLLM cannot read the checkpoint folder it is to start from ("": it can)
    checkpoint_refusal: Callable[[str], str] = lambda checkpoint: ""


QWEN3_VIDEO = (
    "vLLM 0.32's Qwen3-VL processor runs transformers' processor on the video placeholder without the video, "
    "which transformers >= 5.20 refuses ('Found 1 <|video_pad|> tokens in the text but no videos were passed')"
)


def _qwen3_5_refusal(dtype: torch.dtype, cuda: bool) -> str:
    if cuda or dtype == torch.bfloat16:
        return ""
    return "vLLM's CPU kernel for Qwen3.5's linear-attention layers takes bfloat16 only: set model.dtype=bfloat16"


EXPERTS_ON_CPU = (
    "vLLM 0.32's CPU kernel for experts repacks their weights when it loads the checkpoint, and weights "
    "pushed after an update are not repacked (an unchanged push changes its greedy tokens): the engine would "
    "sample from a model the policy is not; use rollout.engine=hf on the CPU"
)


def _experts_refusal(dtype: torch.dtype, cuda: bool) -> str:
    # on CUDA vLLM's unquantized experts keep their parameters, copying padded weights back in
    # place (unquantized_fused_moe_method.py): not run on a GPU here
    return "" if cuda else EXPERTS_ON_CPU


def _held_experts_refusal(checkpoint: str) -> str:
    if not experts_saved_as_held(checkpoint):
        return ""
    return (
        f"{checkpoint} stores its experts as transformers 5 holds them (gate_up_proj experts x 2*intermediate x "
        "hidden), which vLLM reads as the released checkpoints' layout, transposed; `vlrl export CHECKPOINT OUT` "
        "writes it in the released layout"
    )


QWEN3_VL = OnVLLM(video_refusal=QWEN3_VIDEO, prompt_as_text=True)
QWEN3_5 = OnVLLM(
    refusal=_qwen3_5_refusal,
    # vLLM caches prefixes of hybrid models only in its 'align' mode, which needs chunked
    # prefill, and vlrl turns chunked prefill off on CPU: no prefix cache there
    engine_args=lambda cuda: {} if cuda else {"enable_prefix_caching": False},
    video_refusal=QWEN3_VIDEO,
    prompt_as_text=True,
)


ON_VLLM = {  # by family name; a family not here runs with Qwen2-VL's request layout
    "qwen3_vl": QWEN3_VL,
    # its checkpoints load (saved with the released experts' layout: models/qwen3_vl.py), pushes not on the CPU
    "qwen3_vl_moe": replace(QWEN3_VL, refusal=_experts_refusal, checkpoint_refusal=_held_experts_refusal),
    "qwen3_5": QWEN3_5,
    "qwen3_5_moe": replace(QWEN3_5, refusal=_experts_refusal),
}


def collapse_runs(ids: list[int], pad_ids: set[int]) -> list[int]:
    """Token ids with every run of one pad token reduced to a single token."""
    out: list[int] = []
    for token in ids:
        if token in pad_ids and out and out[-1] == token:
            continue
        out.append(token)
    return out


def prompt_ids(family: ModelFamily, prompt: Prompt, tokenizer) -> list[int]:
    """The prompt's token ids as vLLM takes them: each run of image or video pads collapsed
    to one pad, which vLLM expands again itself (already-expanded ids would be expanded
    twice, silently); the template's text for families whose processor writes more."""
    if ON_VLLM.get(family.name, OnVLLM()).prompt_as_text:
        return tokenizer(prompt.text, add_special_tokens=False)["input_ids"]
    pads = {tokenizer.convert_tokens_to_ids(family.image_pad), tokenizer.convert_tokens_to_ids(family.video_pad)}
    return collapse_runs(prompt.input_ids.tolist(), pads)


def video_request(family: ModelFamily, clip: Video) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """(frames T x H x W x C uint8, metadata, videos_kwargs) of a clip for vLLM's processor."""
    frames = clip.frames.round().clamp(0, 255).to(torch.uint8).permute(0, 2, 3, 1).numpy()
    metadata = {
        **family.video_metadata(clip),
        "duration": clip.total_frames / clip.video_fps,
        "video_backend": "vlrl",
        "do_sample_frames": False,  # already sampled as qwen-vl-utils samples them
    }
    return frames, metadata, {"size": family.video_size(clip), "do_sample_frames": False}


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


def memory_refused(err: ValueError, cuda: bool) -> str:
    """vLLM's refusal to start in the memory it was given (no room for its cache, or not for
    one sequence of max_model_len tokens), in the keys of vlrl's config."""
    share = "rollout.vllm.gpu_memory_utilization" if cuda else "rollout.vllm.kv_cache_memory_bytes"
    return (
        f"config: rollout.vllm: vLLM could not start in the memory it was given: {err}\nIn vlrl's keys: its share is "
        f"{share}, and max_model_len is rollout.vllm.max_model_len (-1, the default: vLLM's auto-fit; 0: the model's whole "
        "context); "
        "`vlrl plan --config CFG rollout.engine=vllm` checks both on paper before a run"
    )


class VLLMEngine:
    name = "vllm"
    shares_policy = False
    gives_entropy = False  # vLLM returns chosen tokens' log-probs, not whole distributions
    min_p_first = True  # its sampler: temperature, min-p (an argmax-invariant processor), top-k / top-p
    mixes_greedy = True  # SamplingParams.greedy: a greedy request of the prompt's beside its sampled one
    Options = VLLMOptions
    options_key = "vllm"

    def __init__(self, checkpoint: str, processor, model: ModelConfig, v: VLLMOptions, seed: int):
        cuda = torch.cuda.is_available()
        dtype = torch_dtype(model.dtype)
        self.family = model_family(model)
        self.on_vllm = ON_VLLM.get(self.family.name, OnVLLM())
        refusal = self.on_vllm.refusal(dtype, cuda)
        if refusal:
            raise ConfigError(f"config: the vLLM engine cannot run {self.family.label} here: {refusal}")
        if refusal := self.on_vllm.checkpoint_refusal(checkpoint):
            raise ConfigError(f"the vLLM engine cannot start: {refusal}")
        vllm = _import_vllm()
        from transformers import GenerationConfig

        kwargs = dict(
            model=checkpoint,
            dtype=dtype,
            seed=seed,
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
        kwargs.update(self.on_vllm.engine_args(cuda))
        try:
            self.llm = vllm.LLM(**kwargs)
        except ValueError as err:
            if "memory" not in str(err):
                raise
            raise ConfigError(memory_refused(err, cuda)) from err
        self.can_sleep = cuda and v.sleep
        self.asleep = False
        self.device = torch.device("cpu")  # the sampling generator only draws per-request seeds
        self.tokenizer = processor.tokenizer
        vocab = self.llm.llm_engine.model_config.get_vocab_size()
        banned = set(banned_token_ids(self.tokenizer, vocab, self.family.vision_tokens))
        self.allowed = [i for i in range(vocab) if i not in banned]
        self.stop_ids = stop_token_ids(GenerationConfig.from_pretrained(checkpoint), self.tokenizer)
        self.image_size = {"shortest_edge": model.min_pixels, "longest_edge": model.max_pixels}

    @staticmethod
    def memory(shape: ModelShape, work: Workload, options: VLLMOptions) -> tuple[float, float]:
        """Its share of the GPU while sampling, and during the update unless it sleeps."""
        share = options.gpu_memory_utilization * work.gpu_memory
        return share, 0.0 if options.sleep else share

    @staticmethod
    def memory_refusal(shape: ModelShape, work: Workload, options: VLLMOptions) -> str:
        """Why vLLM could not sample this run in its share of the GPU ("": it could, on paper).
        It loads the whole model (split over tensor_parallel_size GPUs) and starts only if the
        rest of its share holds the keys and values of one sequence of max_model_len tokens
        (vLLM's check_enough_kv_cache_memory): the model's declared context with 0; with -1
        (auto-fit) the longest it can hold, which must still hold this plan's prompt and
        completion. Its profiling pass's activations come on top: this is a lower bound."""
        tp, share = options.tensor_parallel_size, options.gpu_memory_utilization * work.gpu_memory
        weights = shape.params * shape.dtype_bytes / tp
        run = work.prompt_tokens + work.max_new_tokens
        auto_fit = options.max_model_len == AUTO_FIT
        length = run if auto_fit else options.max_model_len or shape.context

        def needed(tokens: int) -> float:
            return weights + shape.sequence_cache_bytes(tokens) / tp

        if needed(length) <= share:
            return ""
        key = "rollout.vllm"
        fraction = math.ceil(100 * needed(length) / work.gpu_memory) / 100
        advice = [
            f"{key}.gpu_memory_utilization={fraction:g}"
            if fraction <= 1
            else f"more GPUs than {tp} to hold it ({key}.tensor_parallel_size)"
        ]
        if not auto_fit and needed(run) <= share:
            advice.append(f"{key}.max_model_len=-1 (vLLM's auto-fit, the default)")
        outcome = (
            f"this plan's prompt and completion ({run} tokens): auto-fit would leave a shorter context, cutting them"
            if auto_fit
            else f"one {length}-token sequence: it would not start"
        )
        return (
            f"vLLM's share, gpu_memory_utilization {options.gpu_memory_utilization:g} x {work.gpu_memory / GB:g} GB = "
            f"{share / GB:.1f} GB, is under its weights ({weights / GB:.1f} GB a GPU) and the keys and values "
            f"({(needed(length) - weights) / GB:.1f} GB) of {outcome}. It needs {'; or '.join(advice)}"
        )

    @classmethod
    def create(cls, setup: EngineSetup, options: VLLMOptions) -> VLLMEngine:
        # A LoRA checkpoint holds only the adapter: the engine starts from its base model and
        # receives the merged weights with the first push.
        return cls(weights_root(setup.checkpoint), setup.processor, setup.model, options, setup.seed)

    # -- requests ---------------------------------------------------------------------------
    def request(self, prompt: Prompt) -> dict:
        """The vLLM prompt for a rendered Prompt: unexpanded ids plus the same media."""
        from vllm.inputs import TokensPrompt

        media: dict = {}
        mm_kwargs: dict = {}
        if prompt.images:
            media["image"] = prompt.images
            mm_kwargs["images_kwargs"] = {"size": covering(self.image_size, prompt.images)}  # as prompting.image_kwargs
        if prompt.video is not None:
            if self.on_vllm.video_refusal:
                raise ValueError(self.on_vllm.video_refusal)
            frames, metadata, videos_kwargs = video_request(self.family, prompt.video)
            media["video"] = [(frames, metadata)]
            mm_kwargs["videos_kwargs"] = videos_kwargs
        out = TokensPrompt(prompt_token_ids=prompt_ids(self.family, prompt, self.tokenizer))
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
            min_p=0.0 if greedy else params.min_p,
            repetition_penalty=params.repetition_penalty,
            min_tokens=params.min_new_tokens,
            seed=seed,
            logprobs=0,  # the sampled token's log-prob only
            stop_token_ids=self.stop_ids,
            allowed_token_ids=self.allowed,
            detokenize=False,  # decoded by vlrl's tokenizer call, as the HF engine decodes
        )

    def generate(
        self, prompts: Sequence[Prompt], params: SamplingParams, generator: torch.Generator | None = None
    ) -> list[Generation]:
        """A prompt's requests: a greedy one for each of its greedy rows (SamplingParams.greedy,
        first), then its sampled rows', seeded by one draw a prompt from `generator` (as without
        greedy rows)."""
        if refusal := temperature_refusal(params.temperature):
            raise ConfigError(refusal)
        seeds = torch.randint(0, SEED_RANGE, (len(prompts),), generator=generator).tolist()
        kinds = [replace(params, n=1, greedy=0, temperature=0.0)] * params.greedy  # vLLM: one greedy row a request
        if params.n > params.greedy:
            kinds.append(replace(params, n=params.n - params.greedy, greedy=0))
        rejected: dict[int, str] = {}
        accepted: list[int] = []  # the prompt of each request vLLM took, in the order it took them
        requests: list[str] = []  # their ids
        for i, (prompt, seed) in enumerate(zip(prompts, seeds, strict=True)):
            for kind in kinds:
                try:
                    requests += self.llm.enqueue([self.request(prompt)], [self.sampling(kind, seed)], use_tqdm=False)
                except Exception as err:  # refused when added (too long, too many images): this prompt only
                    rejected[i] = f"vLLM refused the prompt: {type(err).__name__}: {err}"
                    break
                accepted.append(i)
        completions: list[list[Completion]] = [[] for _ in prompts]
        if accepted:  # an error while generating is the engine's, not a prompt's: it propagates
            try:  # vLLM returns finished requests sorted by request id, that is in the order added
                outputs = self.llm.wait_for_completion(use_tqdm=False)
            except BaseException:  # none left queued for the next call (the rollout's parts call again)
                self.llm.llm_engine.abort_request(requests, internal=True)  # as vLLM aborts what it added
                raise
            for i, output in zip(accepted, outputs, strict=True):
                completions[i] += self._completions(output)
        return [
            Generation([], rejected=rejected[i]) if i in rejected else Generation(completions[i])
            for i in range(len(prompts))
        ]

    def _completions(self, output) -> list[Completion]:
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
        return completions

    # -- weights and memory -----------------------------------------------------------------
    def sync_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        if self.asleep:
            self._wake_up(tags=["weights"])  # the weights' memory must be mapped before loading
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
            self._wake_up()
            self.asleep = False

    def _wake_up(self, tags: list[str] | None = None) -> None:
        """Map the sleeping memory back (`tags`: part of it), once the blocks the update freed,
        which torch's allocator keeps cached, are given back to the driver: vLLM asks the driver
        for its memory, not torch (TRL empties the cache there too, "required to avoid OOM")."""
        torch.cuda.empty_cache()
        self.llm.wake_up(tags=tags)  # None: all of it

    def close(self) -> None:
        # Shut the engine core down now: left to garbage collection at exit, it tears down
        # process groups that torchrun's own exit handling has already destroyed.
        self.llm.llm_engine.engine_core.shutdown()
