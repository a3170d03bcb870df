"""The pieces of the policy update (`RLTrainer.update` puts them together): which old log-probs
the ratio compares with, the reference's log-probs, one mini-batch's gradient accumulated over
token-budgeted micro-batches, and the statistics the step logs. The per-token loss itself is
vlrl/algos/losses.py's (`token_loss`), and so is the measure of an engine's mismatch."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import torch

from vlrl.algos.advantages import realized_energy
from vlrl.algos.entropy_control import EntropyController
from vlrl.algos.losses import KL_ESTIMATORS, mismatch, rollout_importance_weights, token_loss, token_weights
from vlrl.config import AlgoConfig, RolloutConfig
from vlrl.models.loading import without_grad
from vlrl.models.policy import SamplingFilter, TokenLogprobs
from vlrl.models.routing import RouterLogits, router_aux_coef
from vlrl.trainer.batch import (
    RolloutBatch,
    padded_tokens,
    padding_share,
    rows_logprobs,
    unpadded_tokens,
    update_micro_batches,
)
from vlrl.trainer.run import Run


@dataclass
class OldLogprobs:
    """The policy that sampled, as the ratio sees it."""

    logp: torch.Tensor | None  # (R, T); None: the current policy's, detached (it has not moved since the rollout)
    trainers: bool  # computed by the trainer (or None above), not taken from the engine
    sampled: torch.Tensor | None  # the trainer's log-probs of what a foreign engine draws from, at that policy
    entropy: (
        torch.Tensor | None
    )  # of each step, from a trainer forward (when selecting tokens and the engine gave none)
    sum_pi_squared: torch.Tensor | None = None  # of each step, from that forward (optimal_token_baseline)


def rows_of(values: torch.Tensor, micro: torch.Tensor, width: int, device: torch.device) -> torch.Tensor:
    return values[micro, :width].to(device)


@dataclass
class Updater:
    """What the update needs besides the batch: the run (policy, optimizer, processes), the
    options, the KL reference (None: the policy with its LoRA adapters off), and what the
    engine's log-probs are: the trainer's own, or not (`foreign`: another implementation, or
    the HF engine decoding with LoRA merged), and of which distribution (`sampler`: what the
    engine draws from, as the trainer computes it, when its log-probs are of that, as vLLM's
    are; None: of the policy over the whole vocabulary, as the trainer's)."""

    run: Run
    algo: AlgoConfig
    rollout: RolloutConfig
    reference: torch.nn.Module | None
    foreign: bool  # the engine's log-probs are not the trainer's own
    sampler: SamplingFilter | None
    low_precision: bool = False  # the policy computes in bfloat16 or float16 (algo.old_logprobs=auto)

    def __post_init__(self) -> None:
        a = self.algo
        self.entropy_control = EntropyController(
            a.entropy_coef, a.entropy_target, a.entropy_coef_min, a.entropy_coef_max, a.entropy_coef_delta
        )
        self.router_aux_coef = router_aux_coef(a.router_aux_loss_coef, self.run.model)

    def follow_entropy(self, sums: defaultdict[str, float]) -> None:
        """After an optimizer step, the adaptive entropy coefficient follows the step's trained
        tokens' mean entropy over every process (TRL's window-global mean)."""
        procs = self.run.procs
        entropy, tokens = procs.mean(sums.pop("window_entropy", 0.0)), procs.mean(sums.pop("window_tokens", 0.0))
        if tokens:
            self.entropy_control.update(entropy / tokens)

    @property
    def recomputes(self) -> bool:
        """Whether old log-probs come from a trainer forward once the policy moved: the engine's
        are not the trainer's own, or the options say so (auto: for a bfloat16 or float16 policy,
        whose one-token decoding steps round otherwise than the sequence's forward)."""
        option = self.algo.old_logprobs
        return self.foreign or option == "recompute" or (option == "auto" and self.low_precision)

    @property
    def moves(self) -> bool:
        """Whether the policy moves within a step's update (before its last optimizer step)."""
        return self.algo.num_iterations > 1 or self.algo.mini_batches > 1

    def old_logprobs(self, batch: RolloutBatch, moves: bool | None = None, sum_pi_squared: bool = False) -> OldLogprobs:
        """While the policy has not moved since the rollout (one pass, one optimizer step) the
        old log-probs are the detached current ones. Once it moves: the rollout's, when the
        engine samples with the policy and gives them, else a trainer forward made before the
        first update (also with `algo.old_logprobs=recompute`). Top-entropy selection without
        the engine's entropies takes them from that forward too (one forward for both).
        `moves`: whether the policy will have moved when they are used (None: by the options;
        replayed rows are used steps later). `sum_pi_squared` (Optimal Token Baseline's, with
        `moves`): each step's sum of squared probabilities, from that forward, whose log-probs are
        then the old ones (verl's old_log_prob, from which it takes both)."""
        algo = self.algo
        if moves is None:
            moves = self.moves
        recompute = moves and (sum_pi_squared or self.recomputes or batch.rollout_logprobs is None)
        need_entropy = algo.top_entropy_fraction < 1 and batch.entropy is None
        entropy = None
        if recompute or need_entropy:
            before = self.logprobs_no_grad(
                self.run.model, batch, need_entropy, sampled=recompute and self.sampler is not None,
                sum_pi_squared=sum_pi_squared,
            )  # fmt: skip
            if recompute:
                return OldLogprobs(before.logp, True, before.sampled, before.entropy, before.sum_pi_squared)
            entropy = before.entropy
        if moves:
            return OldLogprobs(batch.rollout_logprobs, False, None, entropy)
        return OldLogprobs(None, True, None, entropy)

    def reference_logprobs(self, batch: RolloutBatch) -> torch.Tensor:
        if self.reference is not None:
            return self.logprobs_no_grad(self.reference, batch).logp
        with self.run.model.disable_adapter():
            return self.logprobs_no_grad(self.run.model, batch).logp

    def reward_kl(self, batch: RolloutBatch, sum_pi_squared: bool = False) -> tuple[OldLogprobs, torch.Tensor]:
        """For algo.kl_in reward or returns: the policy that sampled, as the trainer computes it
        (verl's old_log_prob, OpenRLHF's action_log_probs; the update's old log-probs once the
        policy moves; with `sum_pi_squared`, `old_logprobs`'), and (R, T) each token's KL of it to
        the reference, 0 past a completion's end."""
        sampled = self.old_logprobs(batch, moves=True, sum_pi_squared=sum_pi_squared)
        assert sampled.logp is not None  # moves: the engine's, else a forward
        kl = KL_ESTIMATORS[self.algo.kl_estimator](sampled.logp, self.reference_logprobs(batch))
        return sampled, kl * batch.completion_mask

    def corrects(self, batch: RolloutBatch) -> bool:
        """Importance weights correct a foreign engine's samples (algo.rollout_correction): its
        log-probs are not the trainer's, so neither, exactly, is the policy it sampled from."""
        return self.foreign and self.algo.rollout_correction.enabled and batch.rollout_logprobs is not None

    def energy(self, batch: RolloutBatch, sampled: OldLogprobs) -> torch.Tensor:
        """(R, T) Optimal Token Baseline's realized energy of each token at the policy that
        sampled (`sampled`, from `old_logprobs` with sum_pi_squared), times the square of the
        rollout importance weight where they correct the engine (verl's rollout_is_weights**2;
        those the update applies, at that policy)."""
        assert sampled.logp is not None and sampled.sum_pi_squared is not None
        weights = None
        if self.corrects(batch):
            expected = sampled.logp if self.sampler is None else sampled.sampled
            weights = self.importance_weights(expected, batch.rollout_logprobs, batch.completion_mask)
        return realized_energy(sampled.logp, sampled.sum_pi_squared, weights)

    def importance_weights(self, expected: torch.Tensor, engine_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """algo.rollout_correction's weights of tokens the engine reported `engine_logp` for and
        the trainer `expected`, at the policy that sampled."""
        c = self.algo.rollout_correction
        return rollout_importance_weights(expected, engine_logp, mask, c.mode, c.clip_min, c.clip_max)

    def plan(
        self, batch: RolloutBatch, rows: list[int], sums: defaultdict[str, float] | None = None
    ) -> list[list[int]]:
        """Micro-batches of `rows`, padded with empty ones where every forward is a collective;
        into `sums`, the tokens their forwards compute and those without the padding (the
        logged `update_padding`)."""
        lengths = batch.lengths()
        shape = (
            [int(batch.prompt_index[r]) for r in rows],
            [len(p) for p in batch.prompts],
            [lengths[r] for r in rows],
        )
        planned = update_micro_batches(*shape, self.run.budget.tokens)
        if sums is not None:
            sums["computed_tokens"] += padded_tokens(planned, *shape)
            sums["unpadded_tokens"] += unpadded_tokens(planned, *shape)
        return self.run.strategy.micro_batches(planned)

    def discard(self, sums: defaultdict[str, float], before: dict[str, float]) -> None:
        """Undo an optimizer step's `accumulate` that raised (trainer/budget.py): its gradients
        and whatever its failed pass left dropped, `sums` as they were `before` it."""
        self.run.strategy.discard_pass(self.run.model)
        sums.clear()
        sums.update(before)

    def logprobs_no_grad(
        self,
        model: torch.nn.Module,
        batch: RolloutBatch,
        with_entropy: bool = False,
        sampled: bool = False,
        sum_pi_squared: bool = False,
    ) -> TokenLogprobs:
        """(R, T) log-probs of every row under `model` without gradient (reference, old policy),
        with each step's entropy, the sampling distribution's log-probs and each step's sum of
        squared probabilities when asked; at half the budget where a micro-batch ran out of memory."""
        rows = list(range(len(batch.prompt_index)))
        return self.run.budget.attempt(
            lambda: self._logprobs_no_grad(model, batch, rows, with_entropy, sampled, sum_pi_squared),
            undo=lambda: self.run.strategy.discard_pass(model),
            plan=lambda: self.plan(batch, rows),
        )

    def _logprobs_no_grad(
        self,
        model: torch.nn.Module,
        batch: RolloutBatch,
        rows: list[int],
        with_entropy: bool,
        sampled: bool,
        sum_pi_squared: bool,
    ) -> TokenLogprobs:
        out = torch.zeros_like(batch.completion_mask)
        ent = torch.zeros_like(batch.completion_mask) if with_entropy else None
        samp = torch.zeros_like(batch.completion_mask) if sampled else None
        squares = torch.zeros_like(batch.completion_mask) if sum_pi_squared else None
        run = self.run
        with without_grad(model):
            for micro in self.plan(batch, rows):
                if not micro:  # this process has fewer micro-batches than another (FSDP2)
                    run.strategy.idle_pass(model, run.pad_id, backward=False)
                    continue
                stats, width = rows_logprobs(
                    model, batch, micro, self.rollout.temperature, run.pad_id, run.device, with_entropy,
                    self.sampler if sampled else None, run.lean_forward, with_sum_pi_squared=sum_pi_squared,
                )  # fmt: skip
                index = torch.tensor(micro)
                for kept, column in ((out, stats.logp), (ent, stats.entropy), (samp, stats.sampled),
                                     (squares, stats.sum_pi_squared)):  # fmt: skip
                    if kept is not None:
                        kept[index, :width] = column.float().cpu()
        return TokenLogprobs(out, ent, samp, squares)

    def accumulate(
        self,
        batch: RolloutBatch,
        rows: list[int],
        mask: torch.Tensor,
        advantages: torch.Tensor,
        old: OldLogprobs,
        ref: torch.Tensor | None,
        selected: torch.Tensor | None,
        sums: defaultdict[str, float],
        first: bool,
        max_new_tokens: int,
        row_weights: torch.Tensor | None = None,
    ) -> float:
        """One optimizer step's gradient over `rows`, micro-batch by micro-batch (each weighted
        by the whole step's counts, so the split changes nothing); its loss. The engine's
        mismatch is measured on the `first` pass, where the policy is the one that sampled.
        `max_new_tokens` is the step's limit (its stage's, rollout.limits); `row_weights` (R,)
        multiply each row's policy term (algo.difficulty). A mixture of experts' load-balancing
        loss (algo.router_aux_loss_coef) is each micro-batch's own, as TRL's, so unlike the policy
        term it depends on the split: the step's is their mean over every process's micro-batches."""
        run, algo, device = self.run, self.algo, self.run.device
        rows_t = torch.tensor(rows, dtype=torch.long)
        weights = token_weights(
            mask[rows_t], algo.aggregation, max_new_tokens,
            rows=run.procs.mean(len(rows)), tokens=run.procs.mean(float(mask[rows_t].sum())),
            micro_rows=algo.micro_batch_rows, micro_batches=run.procs.mean(-(-len(rows) // algo.micro_batch_rows)),
        )  # fmt: skip
        correct = self.corrects(batch)
        entropy_coef = self.entropy_control.applied()
        if algo.entropy_target is not None:
            sums["entropy_coef"] += entropy_coef
        total = 0.0
        planned = self.plan(batch, rows, sums)
        router = RouterLogits(run.model) if self.router_aux_coef else None
        forwards = run.procs.mean(sum(1 for positions in planned if positions)) if router is not None else 1.0
        for positions in planned:
            if not positions:  # this process has fewer micro-batches than another (FSDP2)
                run.strategy.idle_pass(run.model, run.pad_id, backward=True)
                continue
            micro = rows_t[positions]
            current, width = rows_logprobs(
                run.model, batch, micro.tolist(), self.rollout.temperature, run.pad_id, device, algo.has_entropy_bonus,
                sampler=self.sampler if old.logp is None else None, lean=run.lean_forward, router=router,
            )  # fmt: skip
            m = rows_of(mask, micro, width, device)
            old_logp = current.logp.detach() if old.logp is None else rows_of(old.logp, micro, width, device)
            engine_logp = (
                None if batch.rollout_logprobs is None else rows_of(batch.rollout_logprobs, micro, width, device)
            )
            # the trainer's value of what the engine reported, at the policy that sampled
            expected = old_logp
            if self.sampler is not None:
                expected = current.sampled if old.logp is None else rows_of(old.sampled, micro, width, device)
            if engine_logp is not None and old.trainers and first:
                add_mismatch(
                    sums, mismatch(expected, engine_logp, rows_of(batch.completion_mask, micro, width, device))
                )
            is_weights = None
            if correct:
                is_weights = self.importance_weights(expected, engine_logp, m)
                sums["is_weight"] += float((is_weights.expand_as(m) * m).sum())
            adv = advantages[micro] if advantages.dim() == 1 else advantages[micro, :width]  # per row or token
            terms = token_loss(
                current.logp, old_logp, adv.to(device), m, algo,
                ref_logp=None if ref is None else rows_of(ref, micro, width, device), is_weights=is_weights,
                selected=None if selected is None else rows_of(selected, micro, width, device),
                row_weights=None if row_weights is None else row_weights[micro].to(device),
                entropy=current.entropy, sampling_logp=engine_logp, entropy_coef=entropy_coef,
            )  # fmt: skip
            if algo.entropy_target is not None:
                sums["window_entropy"] += float((current.entropy.detach() * m).sum())
                sums["window_tokens"] += float(m.sum())
            loss = (terms.per_token * weights[positions, :width].to(device)).sum()
            if router is not None:
                balance = router.loss()
                loss = loss + self.router_aux_coef * balance / forwards
                sums["router_aux_loss"] += float(balance.detach())
                sums["router_forwards"] += 1
            loss.backward()
            total += float(loss.detach())
            if terms.kl is not None:
                sums["kl"] += float((terms.kl * m).sum())
            sums["clip_low"] += float((terms.low_clipped.float() * m).sum())
            sums["clip_high"] += float((terms.high_clipped.float() * m).sum())
            sums["tokens"] += float(m.sum())
        return total


# A mean |log-prob difference| a token past which an engine cannot be sampling the policy (a
# push that did not load, another checkpoint): other kernels and dtypes part it by 1e-3 to 1e-2
# nats (vLLM in bfloat16 against the trainer's forward: tests/vllm_engine/test_vllm_families.py)
APART_NATS = 0.5


def engine_apart(engine: str, metrics: dict[str, float]) -> str:
    """A warning when the engine's log-probs (`rollout/logp_diff`) are too far from the trainer's
    for it to be sampling the policy ("": they are not)."""
    apart = metrics.get("rollout/logp_diff", 0.0)
    if apart <= APART_NATS:
        return ""
    return (
        f"rollout engine {engine}'s log-probs are {apart:.2f} nats a token from the trainer's (rollout/logp_diff; "
        "other kernels part them by 0.001 to 0.01): it is not sampling from the policy, as after a weight push "
        "that did not load; importance weights (algo.rollout_correction) cannot mend that"
    )


def add_mismatch(sums: defaultdict[str, float], measured: dict[str, float]) -> None:
    sums["mismatch_max"] = max(sums["mismatch_max"], measured.pop("mismatch_max"))
    for key, value in measured.items():
        sums[key] += value


def update_stats(
    sums: dict[str, float], with_kl: bool, corrected: bool, trainer_entropy: torch.Tensor | None, batch: RolloutBatch
) -> dict[str, float]:
    """The update's logged statistics from its sums: means per optimizer step and per token."""
    steps, tokens = max(1.0, sums["optimizer_steps"]), max(1.0, sums["tokens"])  # none: no group anywhere
    stats = {
        "loss": sums["loss"] / steps,
        "grad_norm": sums["grad_norm"] / steps,
        "clip_low_frac": sums["clip_low"] / tokens,
        "clip_high_frac": sums["clip_high"] / tokens,
        "optimizer_steps": sums["optimizer_steps"],
    }
    if with_kl:
        stats["kl"] = sums["kl"] / tokens
    if sums.get("router_forwards"):  # TRL's aux_loss: the mean over the forwards, before the coefficient
        stats["router_aux_loss"] = sums["router_aux_loss"] / sums["router_forwards"]
    if "entropy_coef" in sums:  # the adaptive one's, applied: its mean over the optimizer steps
        stats["entropy_coef"] = sums["entropy_coef"] / steps
    if (padding := padding_share(sums.get("computed_tokens", 0), sums.get("unpadded_tokens", 0))) is not None:
        stats["update_padding"] = padding
    if sums["mismatch_tokens"]:
        n = sums["mismatch_tokens"]
        stats |= {
            "rollout/logp_diff": sums["mismatch_abs"] / n,
            "rollout/logp_diff_max": sums["mismatch_max"],
            "rollout/kl": sums["mismatch_kl"] / n,
        }
    if corrected:
        stats["rollout/is_weight"] = sums["is_weight"] / tokens
    if trainer_entropy is not None:
        mask = batch.completion_mask
        stats["entropy"] = float((trainer_entropy * mask).sum() / mask.sum().clamp(min=1))
    return stats
