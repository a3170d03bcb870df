"""The RL loop of the GRPO family: rollout, reward, advantage, update, log — top to bottom in `train`."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import time
from collections import Counter, defaultdict

import numpy as np
import torch
from rich.console import Console
from rich.markup import escape

from vlrl.algos.advantages import advantages as compute_advantages
from vlrl.algos.advantages import decoupled_sum, without_spread
from vlrl.algos.difficulty import difficulty_weights
from vlrl.algos.entropy_control import EntropyController
from vlrl.algos.kl_control import KLController
from vlrl.algos.losses import high_entropy_mask
from vlrl.algos.shaping import length_bonus, overlong_penalty, temporal_bonus, trust_bonus
from vlrl.config import Config, ConfigError
from vlrl.data.sample import Sample
from vlrl.eval.harness import EvalSettings, evaluate, headline_line, headline_names, jsonable, prompt_text
from vlrl.models.batch import Prompt
from vlrl.models.families import family_of_model
from vlrl.models.loading import checkpoint_layout, core_model
from vlrl.models.policy import SamplingFilter
from vlrl.models.prompting import UnusableSample, render_prompt, render_prompts, render_usable
from vlrl.parallel.distributed import Processes
from vlrl.rollout import Completion, EngineSetup, Generation, SamplingParams, configured_engines
from vlrl.rollout.base import banned_token_ids, logprobs_exact, vocab_mask
from vlrl.rollout.hf import stop_token_ids
from vlrl.rollout.parts import RolloutRows
from vlrl.tasking.registry import check_algo_tasks, trust_outcome_warnings
from vlrl.tasking.scoring import Scores, correctness, judges, score
from vlrl.tasking.sources import check_held_out, held_out, task_sources
from vlrl.tasking.task import Task
from vlrl.trainer.batch import Group, RolloutBatch, mini_batch_rows
from vlrl.trainer.checkpoint import CheckpointError, load_process_state
from vlrl.trainer.reference import ReferenceWeights, mix_into
from vlrl.trainer.replay import Carried, ReplayBuffer, Trained
from vlrl.trainer.run import Run, RunResult, base_model_path, finished_run
from vlrl.trainer.thinking import Asked, make_scorer
from vlrl.trainer.update import OldLogprobs, Updater, engine_apart, update_stats
from vlrl.vision.video import Video


class RLTrainer:
    """Holds what the loop needs; `train` is the loop."""

    def __init__(self, cfg: Config, console: Console):
        self.cfg = cfg
        self.console = console
        engine, _ = configured_engines(cfg.rollout, cfg.eval.backend)  # its options checked before any model loads
        base_model_path(cfg.model, cfg.trainer, "trainer")  # a model that is not there is said before any data
        procs = Processes.from_env()
        if cfg.prompts_per_round % procs.world:  # prompts_per_step's own is Run's
            raise ConfigError(
                f"config: algo.sampling_batch ({cfg.algo.sampling_batch}) must divide evenly among the "
                f"{procs.world} training processes"
            )
        with procs.main_first():  # process 0 writes missing synthetic data, the others read it
            self.sources = task_sources(cfg, console)
        check_held_out(cfg, console, cfg.eval.every > 0, [s.task for s in self.sources])
        check_algo_tasks(cfg, [s.task for s in self.sources])
        for warning in trust_outcome_warnings(cfg, [s.task for s in self.sources]):
            console.print(f"[yellow]warning:[/yellow] {escape(warning)}", highlight=False)
        self.unjudged = {id(s.task) for s in self.sources if not judges(s.task, s.train.samples[0])}
        for source in self.sources:
            if id(source.task) in self.unjudged and source.task.accuracy_metric:
                console.print(
                    f"[yellow]warning:[/yellow] task {source.task.name}'s metrics report no "
                    f"{source.task.accuracy_metric!r} for a sample (Task.accuracy_metric): training logs no accuracy "
                    "for it; name another metric in accuracy_metric, or override Task.correct",
                    highlight=False,
                )
        judge_rows = RolloutRows(  # a local judge's calls: its own model, apart from the policy's strategy
            cfg.trainer.halve_on_oom, warn=self.warn, what="thinking judge",
            advice="a shorter algo.trust.judge_max_new_tokens saves the failed work",
        )  # fmt: skip
        # A thinking scorer that is not there (a missing file, judge model) is said before the model loads.
        self.thinking = make_scorer(cfg.algo.trust, cfg.model, judge_rows)
        updates = cfg.algo.num_iterations * cfg.algo.mini_batches
        self.run = run = Run(cfg, cfg.trainer, "trainer", self.sources, console, optimizer_steps_per_step=updates)
        with run.closed_on_error():  # what goes wrong from here on shows the tracked run as failed
            if cfg.model.lora.r and cfg.model.lora.dropout and run.procs.main:
                console.print(
                    "[yellow]note:[/yellow] model.lora.dropout applies to SFT only: RL runs the policy without dropout, "
                    "so that the first ratio of an update is exactly 1",
                    highlight=False,
                )
            # beta = 0: no reference at all; LoRA: the policy with its adapters disabled is the reference.
            reference = None
            if cfg.algo.beta > 0 and cfg.model.lora.r == 0:
                reference = run.strategy.wrap_reference(run.load(cfg.model, run.base_path).eval().requires_grad_(False))
            setup = EngineSetup(
                cfg.model, run.base_path, run.processor, cfg.trainer.seed, lambda: (run.model, run.device)
            )
            self.engine = engine.build(setup)
            # A rollout call that runs the GPU out of memory is made again in parts (rollout/parts.py);
            # held-out evaluation keeps its own rows, its calls are not the rollout's
            recovers, undo = cfg.trainer.halve_on_oom and run.strategy.recovers(), self.discard_sampling
            advice = "logged as rollout_rows; rollout.max_rows set so from the start saves the failed work: `vlrl plan`"
            rows = cfg.rollout.max_rows or None
            self.rollout_rows = RolloutRows(recovers, undo, self.warn, advice=advice, rows=rows)
            self.eval_rows = RolloutRows(recovers, undo, self.warn, what="held-out evaluation")
            r = cfg.rollout
            policy = core_model(run.model)
            vocab = policy.config.get_text_config().vocab_size
            banned = vocab_mask(
                banned_token_ids(run.processor.tokenizer, vocab, family_of_model(run.model).vision_tokens), vocab
            )
            # What the engine draws from, as the trainer computes it: what an engine that holds its
            # own copy of the policy reports log-probs of, a repetition penalty included (an engine
            # sampling with the policy reports the policy's, over the whole vocabulary).
            first = getattr(self.engine, "min_p_first", False)
            penalty = r.repetition_penalty
            stops = vocab_mask(stop_token_ids(policy.generation_config, run.processor.tokenizer), vocab)
            sampler = (
                None
                if self.engine.shares_policy
                else SamplingFilter(banned, r.top_k, r.top_p, r.min_p, first, penalty, r.min_new_tokens, stops)
            )
            exact = logprobs_exact(self.engine)
            low_precision = policy.dtype != torch.float32
            self.updater = Updater(run, cfg.algo, r, reference, not exact, sampler, low_precision)
            self.warned_apart = False  # `engine_apart`, said once a run
            if not self.engine.shares_policy:  # the run's weights: resumed, merged, rounded
                self.push_weights()
            unasked = not exact or cfg.algo.old_logprobs == "auto"  # algo.old_logprobs=recompute needs no telling
            if self.updater.recomputes and unasked and (cfg.algo.num_iterations > 1 or cfg.algo.mini_batches > 1):
                why = f"rollout engine {self.engine.name}" if not exact else f"a {policy.dtype} policy"
                console.print(f"{why}: old log-probs come from a trainer forward (algo.old_logprobs=recompute)")
            if note := getattr(self.engine, "note", ""):  # how it decodes, where not as configured (HF engine)
                console.print(f"rollout engine {self.engine.name}: {note}")
            if cfg.algo.top_entropy_fraction < 1 and not self.engine.gives_entropy:
                console.print(
                    f"rollout engine {self.engine.name} gives no entropies: algo.top_entropy_fraction selects tokens by "
                    "the entropy of a trainer forward (one more forward per step)"
                )
            algo = cfg.algo
            self.kl_control = KLController(algo.beta, algo.kl_target, algo.kl_horizon)
            if algo.kl_target is not None:  # its coefficient is part of the checkpoints (the same on every process)
                self.restore_part("kl_control", self.kl_control)
            if algo.entropy_target is not None:  # so is the entropy bonus's
                self.restore_part("entropy_control", self.updater.entropy_control)
            if algo.ref_sync_every:  # the reference, once moved, is part of the checkpoints
                assert reference is not None  # beta > 0 without LoRA (config.py)
                self.restore_part("reference", ReferenceWeights(reference, run.procs.main), shared=True)
            self.replay = None if cfg.algo.replay.mode == "off" else ReplayBuffer(cfg.algo.replay)
            if self.replay is not None:  # each process's buffer is part of its checkpoints
                self.restore_part("replay", self.replay)
            self.held_out: list[tuple[Task, str, list[Sample]]] = []
            self.headline_said: set[str] = set()  # eval.headline names said to be reported by no evaluation
            with procs.main_first():  # a held-out split that does not load stops every process
                if cfg.eval.every > 0 and procs.main:  # held-out splits, evaluated during training by process 0
                    self.held_out = held_out(cfg, self.sources, console)

    def restore_part(
        self, name: str, part: ReplayBuffer | KLController | EntropyController | ReferenceWeights, shared: bool = False
    ) -> None:
        """Make `part` (a state_dict and load_state_dict) part of each process's checkpoints, and
        load it from the one the run resumes from; `shared`: each process's own part merged over
        process 0's (which alone writes what every process holds alike)."""
        run = self.run
        run.process_parts[name] = part.state_dict
        if not run.checkpoint:
            return
        with run.procs.together():  # a file or state refused stops every process
            saved = load_process_state(run.checkpoint, name, run.procs.rank)
            if shared and not run.procs.main and saved is not None:
                first = load_process_state(run.checkpoint, name, 0)
                saved = None if first is None else {**first, **saved}
            try:
                if saved is not None:
                    part.load_state_dict(saved)
            except ValueError as err:
                raise CheckpointError(f"{run.checkpoint}'s {name} part: {err}") from err
        if saved is None:
            self.console.print(f"[yellow]warning:[/yellow] {run.checkpoint} holds no {name} state: it starts afresh")

    def warn(self, message: str) -> None:
        self.console.print(f"[yellow]warning:[/yellow] {escape(message)}", highlight=False, soft_wrap=True)

    def discard_sampling(self) -> None:
        """What a rollout forward that raised left in the policy (an engine that samples with it)."""
        if self.engine.shares_policy:
            self.run.strategy.discard_pass(self.run.model)

    # -- 1-2. rollout and reward ---------------------------------------------------------------
    def sampling_weights(self) -> contextlib.AbstractContextManager[None]:
        """Where the engine samples: with the policy's weights gathered, if it samples with the
        policy (every process enters it at the same time)."""
        return self.run.strategy.gathered() if self.engine.shares_policy else contextlib.nullcontext()

    def push_weights(self) -> None:
        """An engine with its own copy of the policy takes its full weights, as its checkpoint
        stores them (it loaded one: `loading.checkpoint_layout`)."""
        self.engine.sync_weights(checkpoint_layout(self.run.model, self.run.strategy.full_weights()))

    def render(self, task: Task, sample: Sample, decoded: dict[str, Video] | None = None) -> Prompt:
        return render_prompt(self.run.processor, task.messages(sample), sample, self.cfg.model, decoded)

    def sampling(self, step: int) -> SamplingParams:
        """What step `step` samples with: its stage's length and group size (rollout.stages)."""
        r, limits = self.cfg.rollout, self.cfg.rollout.limits(step)
        n, length = limits.num_generations, limits.max_new_tokens
        return SamplingParams(
            n, length, r.temperature, r.top_p, r.top_k, r.min_p, r.repetition_penalty, min_new_tokens=r.min_new_tokens
        )

    def accuracy(self, scores: Scores) -> torch.Tensor:
        """The reward that says how right each completion is: algo.accuracy_reward, or the total."""
        name = self.cfg.algo.accuracy_reward
        return torch.tensor(scores.components[name] if name else scores.total, dtype=torch.float32)

    def generate_groups(self, items: list[tuple[Task, Sample]], step: int) -> tuple[list[Group], list[UnusableSample]]:
        """Render, sample G completions per prompt, score them, add the configured shaping terms.
        Also returns the samples left out: media that fail to decode, prompts the engine refuses."""
        algo, params = self.cfg.algo, self.sampling(step)
        G = params.n
        decoded: dict[str, Video] = {}  # this step's videos, decoded once for both T-GRPO renders
        jobs = [(task.messages(sample), sample) for task, sample in items]
        items, prompts, unusable = render_usable(
            items, render_prompts(self.run.processor, jobs, self.cfg.model, decoded)
        )
        if not items:
            return [], unusable
        # ReMax: each prompt's greedy completion too, its reward the group's baseline: the first row
        # of the group where the engine decodes greedy rows among the sampled ones, else decoded after
        # them in a call of its own, as EasyR1 and verl decode it
        remax = algo.advantage == "remax"
        mixed = remax and getattr(self.engine, "mixes_greedy", False)
        asked = dataclasses.replace(params, n=G + 1, greedy=1) if mixed else params
        generations = self.rollout_rows.generate(self.engine, prompts, asked, self.run.generator)
        greedy: list[Generation | None] = [None] * len(items)
        if mixed:
            greedy = [Generation(g.completions[:1], g.rejected) for g in generations]
            generations = [Generation(g.completions[1:], g.rejected) for g in generations]
        shuffled_accuracy = (
            self.temporal_contrast(items, decoded, params) if algo.temporal.enabled else [None] * len(items)
        )
        if remax and not mixed:
            greedy = self.rollout_rows.generate(
                self.engine, prompts, dataclasses.replace(params, n=1, temperature=0.0), self.run.generator
            )
        groups = []
        for (task, sample), prompt, generation, shuffled, baseline_generation in zip(
            items, prompts, generations, shuffled_accuracy, greedy, strict=True
        ):
            rejected = generation.rejected or (baseline_generation.rejected if baseline_generation else "")
            if rejected:  # left out of the step, as a sample whose media fail
                unusable.append(UnusableSample(sample.source, rejected))
                continue
            group = generation.completions
            texts = [prompt.prefill + c.text for c in group]  # the answer, as the template opened it
            scores = score(task, texts, [sample] * G)
            reward = torch.tensor(scores.total, dtype=torch.float32)
            accuracy = self.accuracy(scores)
            correct = (
                accuracy > algo.accuracy_threshold if algo.accuracy_strict else accuracy >= algo.accuracy_threshold
            )
            lengths = torch.tensor([len(c.token_ids) for c in group])
            shaping: dict[str, torch.Tensor] = {}
            if algo.overlong_buffer > 0:
                shaping["overlong"] = self.overlong(lengths, params.max_new_tokens)
            if self.thinking is not None:
                thinking = torch.tensor(self.thinking([sample] * G, texts, self.asked(prompt)))
                shaping["thinking"] = trust_bonus(thinking, accuracy, correct, algo.trust, step)
            if shuffled is not None:
                shaping["temporal"] = temporal_bonus(accuracy, shuffled, correct, algo.temporal.alpha, algo.temporal.mu)
            if algo.length_control.enabled:
                length = algo.length_control
                shaping["length"] = length_bonus(lengths, correct, length.min_tokens, length.max_tokens, length.bonus)
            for term in shaping.values():
                reward = reward + term
            right = None if id(task) in self.unjudged else correctness(task, texts, [sample] * G)
            accuracy, failures = (None, 0) if right is None else (torch.tensor(right[0]), right[1])
            baseline = None
            if baseline_generation is not None:
                baseline = self.greedy_reward(task, sample, prompt, baseline_generation.completions[0], params)
            groups.append(
                Group(task, sample, prompt, group, scores, reward, correct, shaping, accuracy, failures, baseline)
            )
        return groups, unusable

    def greedy_reward(
        self, task: Task, sample: Sample, prompt: Prompt, completion: Completion, params: SamplingParams
    ) -> float:
        """ReMax's baseline (algo.advantage=remax): the prompt's greedy completion, of the step's
        length limit, scored by the task's rewards and the overlong penalty, as EasyR1 and verl
        score theirs with the reward function."""
        reward = score(task, [prompt.prefill + completion.text], [sample]).total[0]
        if self.cfg.algo.overlong_buffer > 0:
            reward += float(self.overlong(torch.tensor([len(completion.token_ids)]), params.max_new_tokens)[0])
        return float(reward)

    def overlong(self, lengths: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
        """DAPO's overlong penalty of completions of `lengths` tokens (algo.overlong_buffer)."""
        algo = self.cfg.algo
        return overlong_penalty(lengths, max_new_tokens, algo.overlong_buffer, algo.overlong_penalty)

    def asked(self, prompt: Prompt) -> Asked | None:
        """What the policy was asked, for a thinking scorer that reads it (SophiaVL-R1's protocol)."""
        if not self.thinking.reads_prompt:  # type: ignore[union-attr]
            return None
        text = self.run.processor.tokenizer.decode(prompt.input_ids, skip_special_tokens=True)
        return Asked(text, prompt.images[0] if prompt.images and prompt.video is None else None)

    def temporal_contrast(
        self, items: list[tuple[Task, Sample]], decoded: dict[str, Video], ordered: SamplingParams
    ) -> list[torch.Tensor | None]:
        """T-GRPO: the accuracy of a few completions on each prompt's shuffled-frame variant
        (a fraction of the ordered prompt's group size, `ordered`, with its length limit)."""
        variants = [(i, task, task.temporal_variant(sample)) for i, (task, sample) in enumerate(items)]
        present = [(i, task, self.visit_order(v)) for i, task, v in variants if v is not None]
        out: list[torch.Tensor | None] = [None] * len(items)
        if not present:
            return out
        n = max(1, int(self.cfg.algo.temporal.shuffled_fraction * ordered.n))
        params = dataclasses.replace(ordered, n=n)
        prompts = [self.render(task, v, decoded) for _, task, v in present]
        generations = self.rollout_rows.generate(self.engine, prompts, params, self.run.generator)
        for (i, task, variant), prompt, generation in zip(present, prompts, generations, strict=True):
            if not generation.rejected:  # else no contrast for this prompt (its ordered group is reported if refused)
                texts = [prompt.prefill + c.text for c in generation.completions]
                out[i] = self.accuracy(score(task, texts, [variant] * n))
        return out

    def visit_order(self, variant: Sample) -> Sample:
        """The variant's frames in an order of this visit's own: the task's seed mixed with a draw
        from the run's generator, as Video-R1 draws torch.randperm anew at every visit (a seed of
        the sample's alone shuffled it alike at every epoch of every run); saved with the run, so a
        resumed run draws what the uninterrupted one did."""
        if variant.shuffle_frames is None:
            return variant
        generator = self.run.generator
        draw = int(torch.randint(2**62, (1,), generator=generator, device=generator.device))
        return dataclasses.replace(variant, shuffle_frames=variant.shuffle_frames ^ draw)

    def draw(self, n: int) -> list[tuple[Task, Sample]]:
        """This process's share of the next n prompts of the run's task mixture."""
        return [(self.sources[s].task, self.sources[s].train.samples[i]) for s, i in self.run.take(n)]

    def collect(self, step: int) -> tuple[list[Group], int, list[UnusableSample]]:
        """B scored groups, the sampling rounds taken and the samples left out. With DAPO's
        dynamic sampling, as verl's DAPO trainer: groups whose rewards are all equal (zero
        advantage: nothing to learn) are dropped, a group of one completion kept, and whole
        rounds of `algo.sampling_batch` new prompts are drawn until B groups are kept, the first B
        trained."""
        algo, procs = self.cfg.algo, self.run.procs
        B = self.cfg.trainer.prompts_per_step // procs.world  # this process's share
        per_round = self.cfg.prompts_per_round
        groups: list[Group] = []
        unusable: list[UnusableSample] = []
        rounds = 0
        # Every process draws its share of each round until the neediest one is full, so their
        # data streams stay in step; one already full samples none of its share.
        while rounds < (algo.max_sampling_rounds if algo.dynamic_sampling else 1) and procs.max(B - len(groups)) > 0:
            rounds += 1
            items = self.draw(per_round)
            if len(groups) >= B:
                items = []  # its share drawn, to keep in step, and left unsampled
            new, left_out = self.generate_groups(items, step) if items else ([], [])
            unusable += left_out
            if algo.dynamic_sampling:
                informative = [g for g in new if len(g.reward) == 1 or not bool(without_spread(g.reward))]
                if not groups and not informative and rounds == algo.max_sampling_rounds:
                    informative = new  # nothing informative at all: train on what there is
                new = informative
            groups.extend(new)
        return groups[:B], rounds, unusable

    # -- 3. advantages ---------------------------------------------------------------------------
    def step_advantages(
        self, groups: list[Group], batch: RolloutBatch
    ) -> tuple[torch.Tensor, OldLogprobs | None, torch.Tensor | None]:
        """The step's advantages, (R,) or (R, T) with algo.kl_in=returns or
        optimal_token_baseline; with the KL in the reward or that estimator also the policy that
        sampled (the update's old log-probs once it moves), and with the KL each token's KL,
        after which the KL's coefficient follows the batch's KL (algo.kl_target)."""
        algo = self.cfg.algo
        sampled, kl, energy = None, None, None
        otb = algo.advantage == "optimal_token_baseline"
        # on every process: the forwards are collectives under FSDP2
        if algo.kl_in != "loss":
            sampled, kl = self.updater.reward_kl(batch, sum_pi_squared=otb)
        elif otb:
            sampled = self.updater.old_logprobs(batch, moves=True, sum_pi_squared=True)
        advantages = torch.zeros(0)
        if groups:
            gdpo = algo.advantage == "gdpo"  # each completion's rewards normalised apart, then summed
            rewards = torch.stack([decoupled_rewards(g, algo.std_eps) if gdpo else g.reward for g in groups])
            correct = torch.stack([g.correct for g in groups])
            lengths = torch.tensor([[len(c.token_ids) for c in g.completions] for g in groups])
            penalty = None if kl is None else self.kl_control.value * kl.view(*rewards.shape, -1)
            baseline = torch.tensor([g.baseline for g in groups]) if algo.advantage == "remax" else None
            if otb:
                assert sampled is not None
                energy = self.updater.energy(batch, sampled).view(*rewards.shape, -1)
            advantages = compute_advantages(rewards, correct, algo, lengths, penalty, baseline, energy).flatten(0, 1)
        if kl is not None:  # on every process: the controller follows the whole batch's KL
            self.kl_control.update(*self.batch_kl(batch, kl))
        return advantages, sampled, kl

    def batch_kl(self, batch: RolloutBatch, kl: torch.Tensor) -> tuple[float, int]:
        """The KL the controller follows: each completion's token mean, averaged over every
        process's completions (verl's current_kl), and how many completions there were."""
        procs, mask = self.run.procs, batch.completion_mask
        per_row = float((kl.sum(dim=1) / mask.sum(dim=1).clamp(min=1)).sum())
        rows = procs.mean(float(len(batch.prompt_index))) * procs.world
        return procs.mean(per_row) * procs.world / max(rows, 1.0), round(rows)

    # -- 4. update -------------------------------------------------------------------------------
    def update(
        self,
        batch: RolloutBatch,
        advantages: torch.Tensor,
        step: int = 1,
        carried: Carried | None = None,
        sampled: OldLogprobs | None = None,
    ) -> tuple[dict[str, float], int]:
        """num_iterations passes over the batch, each in mini_batches optimizer steps of whole
        groups, each step's gradient accumulated over token-budgeted micro-batches (lengths
        normalised by the max_new_tokens of `step`'s stage). `carried`: the old log-probs and
        weights replayed rows bring (algo.replay); `sampled`: the policy that sampled, already
        computed for the KL in the reward, the old log-probs once the policy moves. Returns
        stats and the number of optimizer steps skipped (non-finite)."""
        algo, max_new_tokens = self.cfg.algo, self.cfg.rollout.limits(step).max_new_tokens
        mask = batch.completion_mask.clone()
        if algo.mask_truncated:
            mask[batch.truncated] = 0.0
        if carried is not None:
            old = carried.old
        elif sampled is not None and self.updater.moves:
            old = sampled
        else:
            old = self.updater.old_logprobs(batch)
        selected = None
        if algo.top_entropy_fraction < 1:
            entropy = batch.entropy if batch.entropy is not None else old.entropy
            selected = high_entropy_mask(entropy, mask, algo.top_entropy_fraction).float()
        ref = self.updater.reference_logprobs(batch) if algo.beta > 0 and algo.kl_in == "loss" else None
        if carried is None:
            group_weights = self.difficulty(batch)
            row_weights = None if group_weights is None else group_weights[batch.prompt_index]
        else:  # replayed rows: their groups' weights, stored
            group_weights = row_weights = carried.row_weights
        sums: defaultdict[str, float] = defaultdict(float)
        skipped = 0
        for iteration in range(algo.num_iterations):
            seed = self.cfg.trainer.seed
            for rows in mini_batch_rows(batch, algo.mini_batches, algo.mini_batch_shuffle, seed, step, iteration):
                if self.run.procs.max(len(rows)) == 0:  # fewer groups than mini-batches everywhere: no step
                    continue
                # at half the token budget where a micro-batch ran the GPU out of memory (trainer/budget.py)
                loss = self.run.budget.attempt(
                    functools.partial(
                        self.updater.accumulate, batch, rows, mask, advantages, old, ref, selected, sums,
                        first=iteration == 0, row_weights=row_weights, max_new_tokens=max_new_tokens,
                    ),
                    functools.partial(self.updater.discard, sums, dict(sums)),
                    functools.partial(self.updater.plan, batch, rows),
                )  # fmt: skip
                grad_norm, applied = self.run.optimizer_step(math.isfinite(loss))
                if algo.ref_sync_every and self.run.optimizer_steps % algo.ref_sync_every == 0:
                    mix_into(self.updater.reference, self.run.model, algo.ref_sync_alpha)
                if algo.entropy_target is not None:
                    self.updater.follow_entropy(sums)
                skipped += not applied
                sums["loss"] += loss
                sums["grad_norm"] += grad_norm
                sums["optimizer_steps"] += 1
        stats = update_stats(sums, ref is not None, self.updater.corrects(batch), old.entropy, batch)
        if group_weights is not None and len(group_weights):
            stats["difficulty_weight"] = float(group_weights.mean())
        return stats, skipped

    def replayed(
        self,
        groups: list[Group],
        batch: RolloutBatch,
        advantages: torch.Tensor,
        step: int,
        sampled: OldLogprobs | None = None,
    ) -> Trained:
        """algo.replay: the rows this step trains on, of this step's and the buffer's, each
        with the old log-probs of the policy that sampled it (taken now, before the update;
        `sampled`, when the KL in the reward took them already)."""
        # an engine's without log-probs: the trainer's
        old = self.updater.old_logprobs(batch, moves=True) if sampled is None else sampled
        weights = self.difficulty(batch)
        rewards = torch.cat([g.reward for g in groups]) if groups else torch.zeros(0)
        row_weights = None if weights is None else weights[batch.prompt_index]
        assert self.replay is not None
        return self.replay.select(
            batch, advantages, rewards, old, row_weights, step, self.run.generator, self.run.pad_id
        )

    def difficulty(self, batch: RolloutBatch) -> torch.Tensor | None:
        """UniVG-R1's weight of each group's policy term, from the group's mean of the
        algo.difficulty.reward component (None when off)."""
        d = self.cfg.algo.difficulty
        if d.weighting == "none":
            return None
        means = torch.tensor([float(np.mean(g.scores.components[d.reward])) for g in batch.groups], dtype=torch.float64)
        return difficulty_weights(means, d.weighting, d.power).float()

    # -- 5. log ----------------------------------------------------------------------------------
    def step_metrics(
        self, groups: list[Group], batch: RolloutBatch, advantages: torch.Tensor, kl: torch.Tensor | None = None
    ) -> dict[str, float]:
        """The step's statistics of its samples; `kl` (R, T): the KL taken off the reward (algo.kl_in)."""
        if not groups:  # every prompt of this process was skipped: nothing of its own to report
            return {}
        rewards = torch.stack([g.reward for g in groups])
        mask = batch.completion_mask
        lengths = mask.sum(dim=1)
        per_token = advantages.dim() == 2  # algo.kl_in=returns, optimal_token_baseline: the mean over tokens
        metrics = {
            "reward_std": float(rewards.std(dim=1).mean()),
            "frac_groups_zero_std": float(without_spread(rewards).float().mean()),
            "advantage_abs": float((advantages.abs() * mask).sum() / mask.sum())
            if per_token
            else float(advantages.abs().mean()),
            "completion_length": float(lengths.mean()),
            "completion_length_max": float(lengths.max()),
            "truncated_frac": float(batch.truncated.float().mean()),
        }
        if kl is not None:  # as the loss's KL is logged: the mean over tokens
            metrics["kl"] = float(kl.sum() / mask.sum().clamp(min=1))
        if self.cfg.algo.advantage == "remax":  # the greedy completions' reward, ReMax's baseline
            metrics["greedy_reward"] = float(np.mean([g.baseline for g in groups]))
        if batch.entropy is not None:
            metrics["entropy"] = float(
                (batch.entropy * batch.completion_mask).sum() / batch.completion_mask.sum().clamp(min=1)
            )
        by_reward = bool(self.cfg.algo.accuracy_reward)
        metrics.update(reward_metrics(groups, by_reward))
        if len(self.sources) > 1:  # a mixture: the same numbers per task
            for source in self.sources:
                mine = [g for g in groups if g.task is source.task]
                if mine:
                    metrics.update({f"{source.task.name}/{k}": v for k, v in reward_metrics(mine, by_reward).items()})
        return metrics

    def evaluate_held_out(self, step: int) -> dict[str, float]:
        """Each task's held-out split (process 0): its metrics as eval/..., and one line of its
        headline metrics printed, on a terminal and in a log file alike."""
        metrics: dict[str, float] = {}
        reported: set[str] = set()
        for task, path, samples in self.held_out:
            settings = EvalSettings.of(self.cfg)
            result = evaluate(self.engine, self.run.processor, task, samples, settings, path, rows=self.eval_rows)
            reported |= result.metrics.keys()
            prefix = f"eval/{task.name}/" if len(self.sources) > 1 else "eval/"  # as a mixture's other metrics
            metrics.update({f"{prefix}{k}": v for k, v in result.metrics.items()})
            metrics[f"{prefix}skipped_samples"] = float(len(result.skipped))  # media that failed to decode
            metrics["time_eval"] = metrics.get("time_eval", 0.0) + result.seconds
            label = f"held-out step {step} | {task.name} ({len(result.records)} samples of {path})"
            line = headline_line(label, result.metrics, headline_names(task, self.cfg.eval.headline))
            self.console.print(line, markup=False, highlight=False, soft_wrap=True)
            for note in result.notes:
                self.console.print(f"[yellow]warning:[/yellow] {escape(note)}", highlight=False)
        unknown = [name for name in self.cfg.eval.headline if name not in reported | self.headline_said]
        if unknown and self.run.procs.main:  # a typo would otherwise only leave the line short (process 0 evaluates)
            self.headline_said.update(unknown)
            self.console.print(
                f"[yellow]warning:[/yellow] eval.headline names {', '.join(map(repr, unknown))}, which no held-out "
                f"evaluation reports; they report: {', '.join(sorted(reported))}",
                highlight=False,
                soft_wrap=True,
            )
        return metrics

    def train(self) -> RunResult:
        try:
            return self.loop()
        finally:
            self.engine.close()

    def loop(self) -> RunResult:
        cfg, run, t = self.cfg, self.run, self.cfg.trainer
        with run.running("train", ("reward", "accuracy", "kl")):
            first = run.step + 1
            for step in range(first, t.steps + 1):
                t0 = time.perf_counter()
                limits = cfg.rollout.limits(step)
                if cfg.rollout.stages and run.procs.main and (step == first or limits != cfg.rollout.limits(step - 1)):
                    self.console.print(
                        f"step {step}: stage {limits.stage + 1} of {len(cfg.rollout.stages)} (rollout.stages), "
                        f"{limits.max_new_tokens} new tokens, {limits.num_generations} completions per prompt",
                        highlight=False,
                    )
                # 1-2. rollout and reward: B prompts (fewer if some media fail or the engine refuses
                # a prompt), G scored completions each
                with self.sampling_weights():
                    groups, rounds, unusable = self.collect(step)
                self.engine.sleep()  # its memory is the update's until the next rollout
                t1 = time.perf_counter()
                # 3. advantages, per group (per token with algo.kl_in=returns or optimal_token_baseline)
                batch = RolloutBatch.from_groups(groups, run.pad_id)
                run.check_sampled(step, batch.rollout_logprobs, batch.completion_mask)  # a diverged policy stops
                kl_coef = self.kl_control.value  # this step's
                advantages, sampled, kl = self.step_advantages(groups, batch)
                # 4. update (every process takes part, even one whose prompts were all skipped),
                # then the engine follows the new weights
                trained = self.replayed(groups, batch, advantages, step, sampled) if self.replay else None
                lr = run.optimizer.param_groups[0]["lr"]  # the step's first update's (lr_schedule_per)
                if trained is None:
                    stats, skipped = self.update(batch, advantages, step, sampled=sampled)
                else:  # algo.replay: the rows it chose, with what they carry from their sampling
                    stats, skipped = self.update(trained.batch, trained.advantages, step, trained.carried)
                    stats |= trained.stats
                if not self.engine.shares_policy:
                    self.push_weights()
                self.engine.wake()
                t2 = time.perf_counter()
                # 5. log and checkpoint
                metrics = {
                    "step": step,
                    **(self.step_metrics(groups, batch, advantages, kl) if groups else {}),
                    **stats,
                }
                if kl is not None:
                    metrics["kl_coef"] = kl_coef
                if self.thinking is not None:  # this step's, on every process: their sum is the step's (is_count)
                    metrics["thinking_failures"] = float(self.thinking.failures)
                    self.thinking.failures = 0
                metrics["skipped_samples"] = run.report_unusable(step, unusable)
                run.report_reward_failures(step, sum(len(g.completions) for g in groups), reward_failures(groups))
                if cfg.rollout.stages:  # Vision-R1's schedule: which stage sampled this step
                    metrics.update(
                        stage=limits.stage + 1,
                        max_new_tokens=limits.max_new_tokens,
                        num_generations=limits.num_generations,
                    )
                metrics.update(
                    lr=lr,
                    skipped_updates=run.skipped_updates + skipped,
                    sampling_rounds=rounds,
                    time_rollout=t1 - t0,
                    time_update=t2 - t1,
                    time_step=t2 - t0,
                )
                if self.rollout_rows.rows != (cfg.rollout.max_rows or None):  # halved: its calls' rows since
                    metrics["rollout_rows"] = self.rollout_rows.rows
                if step == 1:
                    metrics["data_skipped_records"] = sum(len(s.train.errors) for s in self.sources)
                if run.device.type == "cuda":
                    metrics["gpu_peak_gb"] = torch.cuda.max_memory_allocated(run.device) / 2**30
                metrics = run.procs.mean_metrics(metrics, counts=is_count)
                if not self.warned_apart and (apart := engine_apart(self.engine.name, metrics)):
                    self.warned_apart = True  # once a run: the metric follows every step
                    self.console.print(f"[yellow]warning:[/yellow] {escape(apart)}", highlight=False)
                if cfg.eval.every > 0 and (step % cfg.eval.every == 0 or step == t.steps):
                    with self.sampling_weights():  # entered by every process; process 0 evaluates
                        metrics.update(self.evaluate_held_out(step))
                samples = []
                if groups and (step % t.log_samples_every == 0 or step == 1):
                    row_advantages = advantages if advantages.dim() == 1 else advantages[:, 0]  # the whole return's
                    samples = sample_rows(groups[0], row_advantages[: len(groups[0].completions)])
                run.log_step(metrics, samples)  # metrics.jsonl, samples.jsonl, trackers, progress
                if run.end_step(step, skipped):
                    break
        return run.close()


def decoupled_rewards(group: Group, std_eps: float) -> torch.Tensor:
    """GDPO's sum of a group's rewards each normalised on its own (`decoupled_sum`): the task's
    components at their weights and the shaping terms at 1, the parts of its total reward."""
    names = list(group.scores.components)
    columns = [torch.tensor(group.scores.components[n], dtype=torch.float32) for n in names]
    weights = [group.task.reward_weights[n] for n in names] + [1.0] * len(group.shaping)
    components = torch.stack([*columns, *group.shaping.values()], dim=1)
    return decoupled_sum(components, torch.tensor(weights, dtype=torch.float32), std_eps)


def sample_rows(group: Group, advantages: torch.Tensor) -> list[dict]:
    """A group's completions as samples.jsonl and the trackers' tables show them, as TRL's
    completions table does: the prompt's text, its media and target, each completion with its
    rewards, correctness and advantage."""
    sample = group.sample
    shared = {
        "id": sample.id,
        "prompt": prompt_text(group.task, sample),
        "images": list(sample.images),
        **({"video": sample.video} if sample.video else {}),
        "target": jsonable(sample.solution),
    }
    return [
        {
            **shared,
            "completion": group.prompt.prefill + c.text,  # what the rewards read
            "rewards": group.scores.row(i),
            "reward": float(group.reward[i]),
            **({"accuracy": float(group.accuracy[i])} if group.accuracy is not None else {}),
            "advantage": float(advantages[i]),
        }
        for i, c in enumerate(group.completions)
    ]


COUNTS = ("oversized_completions", "accuracy_failures", "thinking_failures")  # of a process's completions


def is_count(key: str) -> bool:
    """Whether a step metric counts events among this process's completions (summed over the
    processes, not averaged): reward_failures/NAME and COUNTS, also under a mixture task's prefix."""
    *path, name = key.split("/")
    return "reward_failures" in path or name in COUNTS


def reward_failures(groups: list[Group]) -> dict[str, tuple[int, str]]:
    """Each reward that raised or gave no finite number in these groups: how many of its values
    were replaced by 0, and why the first one was."""
    failed: dict[str, tuple[int, str]] = {}
    for g in groups:
        for name, n in g.scores.failures.items():
            count, reason = failed.get(name, (0, g.scores.reasons[name]))
            failed[name] = (count + n, reason)
    return failed


def reward_metrics(groups: list[Group], by_reward: bool = False) -> dict[str, float]:
    """Mean reward; accuracy, the task's correctness (Task.correct: refcoco's ACC@0.5, counting's
    exact count...); with `by_reward`, correct_frac, the share that the advantage options count as
    correct (algo.accuracy_reward >= algo.accuracy_threshold); each reward component and shaping
    term; and what scored 0 without a value of its own (`Scores.zero_counts`), where anything did."""
    out = {"reward": float(torch.cat([g.reward for g in groups]).mean())}
    judged = [g.accuracy for g in groups if g.accuracy is not None]
    if judged:
        out["accuracy"] = float(torch.cat(judged).mean())
    if by_reward:
        out["correct_frac"] = float(torch.cat([g.correct for g in groups]).float().mean())
    zeros = Counter()
    for g in groups:
        zeros.update(g.scores.zero_counts())
    out.update(zeros)
    if any(g.accuracy_failures for g in groups):
        out["accuracy_failures"] = float(sum(g.accuracy_failures for g in groups))
    for name in dict.fromkeys(k for g in groups for k in g.scores.components):
        values = [v for g in groups for v in g.scores.components.get(name, [])]
        out[f"reward/{name}"] = float(np.mean(values))
    for name in dict.fromkeys(k for g in groups for k in g.shaping):
        out[f"reward/{name}"] = float(torch.cat([g.shaping[name] for g in groups if name in g.shaping]).mean())
    return out


def train(cfg: Config, console: Console | None = None) -> RunResult:
    console = console or Console()
    return finished_run(cfg.trainer, "trainer", console) or RLTrainer(cfg, console).train()
