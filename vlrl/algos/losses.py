"""Per-token policy losses, KL estimators, and the weights that aggregate tokens into a loss.

The trainer computes `token_weights` once per optimizer step over all of that step's
completions; each micro-batch then contributes sum(per_token_loss * weights), so splitting
a batch into micro-batches changes nothing in the gradient.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from vlrl.config import AlgoConfig


@dataclass
class PolicyLoss:
    per_token: torch.Tensor  # (R, T), or (R, 1) for sequence-level ratios
    low_clipped: torch.Tensor  # where the ratio fell below its trust region with A < 0
    high_clipped: torch.Tensor  # where it rose above it with A > 0


# verl's bounds on the log-ratio before exp (verl/trainer/ppo/core_algos.py at b178a3c): a
# token's within [-20, 20], GSPO's sequence mean at most 10. Past them the ratio is beyond every
# clip range, so only a negative advantage's unclipped loss changes: it stops growing (from
# e^20 |A| a token) and gives no gradient. TRL bounds nothing, and in float32 a log-ratio past
# 88.7 (an old log-prob of -100 from an engine) overflows exp, which makes every gradient of the
# step NaN, a clipped or masked token's included, and the step is lost.
TOKEN_LOG_RATIO_BOUND = 20.0
SEQUENCE_LOG_RATIO_MAX = 10.0


def log_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor, level: str) -> torch.Tensor:
    """log(pi / pi_old) per token, or GSPO's per-sequence mean over the sequence's tokens (R, 1),
    within verl's bounds."""
    delta = logp - old_logp
    if level == "sequence":
        mean = (delta * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1.0)
        return mean.clamp(max=SEQUENCE_LOG_RATIO_MAX)
    return delta.clamp(-TOKEN_LOG_RATIO_BOUND, TOKEN_LOG_RATIO_BOUND)


def per_token(advantages: torch.Tensor) -> torch.Tensor:
    """(R, 1) from one advantage a row, broadcast over its tokens; (R, T) as given (per token:
    algo.kl_in=returns)."""
    return advantages if advantages.dim() == 2 else advantages.unsqueeze(1)


def clipped_surrogate(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    epsilon_low: float,
    epsilon_high: float,
    ratio_level: str = "token",
    dual_clip: float | None = None,
) -> PolicyLoss:
    """PPO/GRPO clipped objective as a loss: -min(r A, clip(r, 1-eps_low, 1+eps_high) A).

    With `dual_clip` = c, a negative advantage's loss is capped at -c A (dual-clip PPO), so a
    ratio far above 1 cannot blow the update up.
    """
    ratio = torch.exp(log_ratio(logp, old_logp, mask, ratio_level))
    adv = per_token(advantages)
    loss = -torch.min(ratio * adv, torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high) * adv)
    if dual_clip is not None:
        loss = torch.where(adv < 0, torch.minimum(loss, -dual_clip * adv), loss)
    return PolicyLoss(loss, (ratio < 1 - epsilon_low) & (adv < 0), (ratio > 1 + epsilon_high) & (adv > 0))


def cpgd_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    epsilon_low: float,
    epsilon_high: float,
    drift_coef: float,
    drift_clip: float,
) -> PolicyLoss:
    """CPGD: -min(ln r A, clip(ln r, ln(1-eps), ln(1+eps)) A) + coef * min(sg(r) - 1, c) ln pi.

    The first term is a policy gradient clipped in log-ratio space (no ratio amplifying the
    update); the second has the gradient of the k3 KL(pi_old || pi), capped at c: the drift.
    """
    log_r = logp - old_logp
    adv = per_token(advantages)
    low, high = math.log(1 - epsilon_low), math.log(1 + epsilon_high)
    surrogate = torch.min(log_r * adv, torch.clamp(log_r, low, high) * adv)
    drift = torch.clamp(torch.exp(log_r.detach()) - 1, max=drift_clip) * logp
    return PolicyLoss(-surrogate + drift_coef * drift, (log_r < low) & (adv < 0), (log_r > high) & (adv > 0))


def cispo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    ratio_min: float | None,
    ratio_max: float,
    ratio_level: str = "token",
) -> PolicyLoss:
    """CISPO (MiniMax-M1): -sg(clip(r, ratio_min, ratio_max)) A log pi. The importance weight is
    bounded and detached instead of the token being clipped out, so every token keeps its policy
    gradient, the rare forking tokens whose ratio leaves PPO's trust region first among them.
    TRL 1.16 (loss_type="cispo") bounds it above only, at epsilon_high (ScaleRL: 5.0); verl
    (b178a3c, compute_policy_loss_cispo) within [1 - epsilon, 1 + epsilon_high] (algo.cispo_bounds).
    Clipped: tokens past a bound, below with A < 0 and above with A > 0, as the clip loss counts."""
    ratio = torch.exp(log_ratio(logp, old_logp, mask, ratio_level))
    adv = per_token(advantages)
    weight = torch.clamp(ratio, min=ratio_min, max=ratio_max).detach()
    low = torch.zeros_like(ratio, dtype=torch.bool) if ratio_min is None else (ratio < ratio_min) & (adv < 0)
    return PolicyLoss(-weight * adv * logp, low, (ratio > ratio_max) & (adv > 0))


def sapo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    temperature_pos: float,
    temperature_neg: float,
    ratio_level: str = "token",
) -> PolicyLoss:
    """SAPO (Soft Adaptive Policy Optimization, arXiv 2511.20347; TRL 1.16's loss_type="sapo"):
    the hard clip replaced by a soft gate, -(4 / tau) sigmoid(tau (r - 1)) A, with tau
    temperature_pos where A > 0 and temperature_neg elsewhere (a gate that closes faster on
    negative advantages). At r = 1 its gradient is the policy gradient's; it fades as r leaves
    1 rather than stopping at a bound, so nothing counts as clipped."""
    ratio = torch.exp(log_ratio(logp, old_logp, mask, ratio_level))
    adv = per_token(advantages)
    tau = torch.where(adv > 0, temperature_pos, temperature_neg)
    none = torch.zeros_like(ratio, dtype=torch.bool)
    return PolicyLoss(-torch.sigmoid(tau * (ratio - 1)) * 4 / tau * adv, none, none)


def reinforce_loss(logp: torch.Tensor, advantages: torch.Tensor) -> PolicyLoss:
    """Plain REINFORCE, -A log pi, no ratio and no clip (verl's `reinforce` and `gpg` policy
    losses; GPG's, "Group Policy Gradient"): one pass per rollout is what it is meant for."""
    none = torch.zeros_like(logp, dtype=torch.bool)
    return PolicyLoss(-per_token(advantages) * logp, none, none)


def gmpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    epsilon_low: float,
    epsilon_high: float,
) -> PolicyLoss:
    """GMPO (Geometric-Mean Policy Optimization, arXiv 2507.20673; verl's `geo_mean` at b178a3c):
    -A times the geometric mean of the sequence's token ratios, each token's log-ratio clipped
    to [-epsilon_low, epsilon_high] on the side its advantage's sign clips (PPO's min, in log
    space), the advantage the sequence's token mean. An outlier token moves a geometric mean far
    less than an arithmetic one. (R, 1): with seq_mean_token_mean, verl's mean over sequences."""
    log_r = log_ratio(logp, old_logp, mask, "token")
    adv = per_token(advantages).expand_as(log_r)
    sign = torch.sign(adv)
    clamped = torch.clamp(log_r, -epsilon_low, epsilon_high)
    kept = sign * torch.minimum(sign * log_r, sign * clamped)
    tokens = mask.sum(dim=-1, keepdim=True) + 1e-8
    ratio = torch.exp((kept * mask).sum(dim=-1, keepdim=True) / tokens)
    sequence_adv = (adv * mask).sum(dim=-1, keepdim=True) / tokens
    clipped = log_r != clamped
    return PolicyLoss(-sequence_adv * ratio, clipped & (adv < 0), clipped & (adv > 0))


def kl_cov_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    share: float,
    coef: float,
) -> PolicyLoss:
    """KL-Cov ("The Entropy Mechanism of RL for Reasoning LMs", arXiv 2505.22617; verl's
    `kl_cov`): the unclipped policy term -A r, plus coef |log r| on the `share` of the
    micro-batch's tokens (at least one) whose covariance of advantage and log-prob,
    (A - mean A)(log pi - mean log pi), is largest: the tokens that drive the entropy down."""
    log_r = log_ratio(logp, old_logp, mask, "token")
    adv = per_token(advantages).expand_as(log_r)
    loss = -adv * torch.exp(log_r)
    valid = mask > 0
    chosen = torch.zeros_like(valid)
    if valid.any():
        a, lp = adv[valid].detach(), logp[valid].detach()
        cov = (a - a.mean()) * (lp - lp.mean())
        top = torch.topk(cov, max(1, int(cov.numel() * share))).indices
        rows, columns = valid.nonzero(as_tuple=True)
        chosen[rows[top], columns[top]] = True
    none = torch.zeros_like(valid)
    return PolicyLoss(torch.where(chosen, loss + coef * log_r.abs(), loss), none, none)


def clip_cov_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    epsilon_low: float,
    epsilon_high: float,
    share: float,
    bounds: tuple[float, float],
) -> PolicyLoss:
    """Clip-Cov (arXiv 2505.22617; verl's `clip_cov` at b178a3c): PPO's clipped term, and on a
    random `share` of the micro-batch's tokens (at least one) among those the clip left alone
    whose covariance of advantage and log-prob lies within `bounds`, no gradient at all: the
    tokens that drive the entropy down, detached. Drawn with torch's global generator, as verl
    draws them (a run's checkpoints keep it)."""
    ratio = torch.exp(log_ratio(logp, old_logp, mask, "token"))
    adv = per_token(advantages).expand_as(ratio)
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
    valid = mask > 0
    by_clip = (clipped > unclipped) & valid
    real = mask.sum().clamp(min=1.0)
    cov = (adv - (adv * mask).sum() / real) * (logp - (logp.detach() * mask).sum() / real)
    cov = cov.masked_fill(~valid | by_clip, -math.inf)
    candidates = torch.nonzero((cov < bounds[1]) & (cov > bounds[0]) & valid)
    keep = torch.ones_like(ratio)
    if len(candidates):
        count = max(int(share * float(mask.sum())), 1)
        chosen = candidates[torch.randperm(len(candidates))[:count]]
        keep[chosen[:, 0], chosen[:, 1]] = 0
    loss = torch.maximum(unclipped, clipped) * keep
    return PolicyLoss(loss, (ratio < 1 - epsilon_low) & (adv < 0), (ratio > 1 + epsilon_high) & (adv > 0))


VESPO_LOG_MIN = math.log(1e-8)  # TRL's bound below on the log weights ("matching the original implementation")


@torch.no_grad()
def vespo_weights(
    advantages: torch.Tensor,
    log_ratio_tokens: torch.Tensor,
    mask: torch.Tensor,
    is_weights: torch.Tensor | None,
    k: tuple[float, float],
    lam: tuple[float, float],
) -> torch.Tensor:
    """VESPO's gamma weight of each sequence (TRL 1.16's get_gamma_weights), phi(w) =
    e^lambda w^k e^(-lambda w), 1 at w = 1, with w the sequence's importance ratio: the product of
    its tokens' ratios, each log within [-20, 20], times the engine-correction weights
    (`is_weights`, folded in rather than multiplied after), its log within [log 1e-8, 20]. `k`
    and `lam` are (for A >= 0, for A < 0). No gradient: it scales the policy gradient."""
    seq = (torch.clamp(log_ratio_tokens, -20.0, 20.0) * mask).sum(dim=-1, keepdim=True)
    if is_weights is not None:
        seq = seq + torch.clamp(torch.log(is_weights), VESPO_LOG_MIN, 20.0).sum(dim=-1, keepdim=True)
    log_w = torch.clamp(seq, VESPO_LOG_MIN, 20.0)
    nonnegative = per_token(advantages) >= 0
    k_seq = torch.where(nonnegative, k[0], k[1])
    lam_seq = torch.where(nonnegative, lam[0], lam[1]).clamp(min=1e-4)
    phi = torch.exp(lam_seq + k_seq * log_w - lam_seq * torch.exp(log_w))
    return phi.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)


def vespo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    k: tuple[float, float],
    lam: tuple[float, float],
    is_weights: torch.Tensor | None = None,
) -> PolicyLoss:
    """VESPO (TRL 1.16's loss_type="vespo"): -phi(w) A log pi, the sequence's gamma weight
    (`vespo_weights`) in place of a clip: it fades smoothly for ratios far from 1 on either
    side. Nothing counts as clipped."""
    phi = vespo_weights(advantages, logp - old_logp, mask, is_weights, k, lam)
    none = torch.zeros_like(logp, dtype=torch.bool)
    return PolicyLoss(-phi * per_token(advantages) * logp, none, none)


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cfg: AlgoConfig,
    is_weights: torch.Tensor | None = None,
) -> PolicyLoss:
    """The policy term of cfg.loss; `is_weights`, the engine-correction weights, only VESPO takes
    (token_loss multiplies every other loss by them)."""
    epsilon_high = cfg.epsilon if cfg.epsilon_high is None else cfg.epsilon_high
    if cfg.loss == "cpgd":
        return cpgd_loss(logp, old_logp, advantages, cfg.epsilon, epsilon_high, cfg.drift_coef, cfg.drift_clip)
    if cfg.loss == "cispo":
        low, high = (None, epsilon_high) if cfg.cispo_bounds == "trl" else (1 - cfg.epsilon, 1 + epsilon_high)
        return cispo_loss(logp, old_logp, advantages, mask, low, high, cfg.ratio_level)
    if cfg.loss == "sapo":
        t_pos, t_neg = cfg.sapo_temperature_pos, cfg.sapo_temperature_neg
        return sapo_loss(logp, old_logp, advantages, mask, t_pos, t_neg, cfg.ratio_level)
    if cfg.loss == "reinforce":
        return reinforce_loss(logp, advantages)
    if cfg.loss == "gmpo":
        return gmpo_loss(logp, old_logp, advantages, mask, cfg.epsilon, epsilon_high)
    if cfg.loss == "clip_cov":
        bounds = (cfg.clip_cov_lb, cfg.clip_cov_ub)
        return clip_cov_loss(logp, old_logp, advantages, mask, cfg.epsilon, epsilon_high, cfg.clip_cov_ratio, bounds)
    if cfg.loss == "kl_cov":
        return kl_cov_loss(logp, old_logp, advantages, mask, cfg.kl_cov_ratio, cfg.kl_cov_coef)
    if cfg.loss == "vespo":
        k, lam = (cfg.vespo_k_pos, cfg.vespo_k_neg), (cfg.vespo_lambda_pos, cfg.vespo_lambda_neg)
        return vespo_loss(logp, old_logp, advantages, mask, k, lam, is_weights)
    return clipped_surrogate(
        logp, old_logp, advantages, mask, cfg.epsilon, epsilon_high, cfg.ratio_level, cfg.dual_clip
    )


def off_policy_mask(
    advantages: torch.Tensor, logp: torch.Tensor, sampling_logp: torch.Tensor, mask: torch.Tensor, threshold: float
) -> torch.Tensor:
    """DeepSeek-V3.2's off-policy sequence masking (its eq. 9; TRL 1.16's get_off_policy_mask):
    1 keeps a completion's policy term, 0 drops it where its advantage is negative and the mean
    over its tokens of log pi_sampler - log pi (a KL estimate of how far the policy moved from
    the one that sampled, the engine's mismatch included) is above `threshold`. Tokens without a
    log-prob (NaN) count 0. (R, 1), or (R, T) with advantages per token."""
    kl = torch.nan_to_num(sampling_logp - logp.detach(), nan=0.0)
    mean = (kl * mask).sum(dim=1, keepdim=True) / mask.sum(dim=1, keepdim=True).clamp(min=1.0)
    return ((per_token(advantages) >= 0) | (mean <= threshold)).to(mask.dtype)


@dataclass
class TokenLoss:
    per_token: torch.Tensor  # (R, T): what each token adds to the loss before aggregation weights
    kl: torch.Tensor | None  # (R, T) the KL estimate, detached (None without a reference)
    low_clipped: torch.Tensor
    high_clipped: torch.Tensor


def token_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cfg: AlgoConfig,
    ref_logp: torch.Tensor | None = None,
    is_weights: torch.Tensor | None = None,
    selected: torch.Tensor | None = None,
    row_weights: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    sampling_logp: torch.Tensor | None = None,
    entropy_coef: float | None = None,
) -> TokenLoss:
    """Every term of the per-token loss, in order: the policy term (`policy_loss`), times the
    importance weights correcting another engine's samples (TRL: the policy-gradient term only),
    times the selection of high-entropy tokens, times each row's weight (UniVG-R1's difficulty
    weight, (R,)), times the off-policy sequence mask (algo.off_policy_mask: on the log-probs of
    the engine that sampled, `sampling_logp`, else the old ones, as TRL); minus entropy_coef
    times each step's `entropy` (verl's entropy bonus, as its entropy_loss; on the selected
    high-entropy tokens only where some are, as TRL 1.16's effective_mask);
    plus beta times the KL to the reference (times the ratio
    to the old policy with algo.kl_bias_correction: DeepSeek-V3.2's unbiased estimate of the
    reverse KL's gradient from samples of the old policy)."""
    terms = policy_loss(logp, old_logp, advantages, mask, cfg, is_weights)
    per_token = terms.per_token
    if cfg.off_policy_mask is not None:
        sampler = old_logp if sampling_logp is None else sampling_logp
        per_token = per_token * off_policy_mask(advantages, logp, sampler, mask, cfg.off_policy_mask)
    if is_weights is not None and cfg.loss != "vespo":  # VESPO folds them into its sequence weight
        per_token = per_token * is_weights
    if selected is not None:
        per_token = per_token * selected
    if row_weights is not None:
        per_token = per_token * row_weights.unsqueeze(1)
    if entropy is not None:  # `entropy_coef`: the adaptive one's (algo.entropy_target), else cfg's
        bonus = entropy if selected is None else entropy * selected  # on the tokens trained, as TRL's
        per_token = per_token - (cfg.entropy_coef if entropy_coef is None else entropy_coef) * bonus
    kl = None
    if ref_logp is not None:
        kl = KL_ESTIMATORS[cfg.kl_estimator](logp, ref_logp)
        if cfg.kl_bias_correction:  # times the ratio, its gradient included (TRL 1.16's use_bias_correction_kl)
            kl = kl * torch.exp(log_ratio(logp, old_logp, mask, cfg.ratio_level))
        per_token = per_token + cfg.beta * kl
        kl = kl.detach()
    return TokenLoss(per_token, kl, terms.low_clipped, terms.high_clipped)


def kl_k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    return logp - ref_logp


def kl_k2(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    return 0.5 * (logp - ref_logp) ** 2


def k3_of(delta: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 of a log-ratio delta = log ref - log pi: exp(delta) - delta - 1."""
    return torch.exp(delta) - delta - 1


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(pi || ref) per token, unclamped (TRL's)."""
    return k3_of(ref_logp - logp)


def kl_low_var(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 clamped to [-10, 10], as verl's low_var_kl (verl/trainer/ppo/core_algos.py: kl_penalty),
    so one wild token cannot dominate; as there, ref - logp is clamped to [-20, 20] first, else
    exp overflows past ~88 (float32) and the clamped value has a NaN gradient."""
    return torch.clamp(k3_of(torch.clamp(ref_logp - logp, -20.0, 20.0)), -10.0, 10.0)


def kl_k3_clamped(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 of ref - logp clamped to [-10, 10], as Video-R1's trainer computes its KL
    (src/r1-v/src/open_r1/trainer/grpo_trainer.py at 59d65c3, lines 564-565): k3 up to
    e^10 - 11, with no gradient past the clamp."""
    return k3_of(torch.clamp(ref_logp - logp, -10.0, 10.0))


def kl_abs(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """|k1|, verl's kl_penalty "abs"."""
    return (logp - ref_logp).abs()


def k2_gradient(estimator: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]):
    """`estimator`'s value with k2's gradient (straight through), verl's kl_penalty names ending
    in "+" ("k1+", "k3+"; verl PR 2953): k1's and k3's expected gradients are not the KL's, k2's
    is. verl at b178a3c passes the suffixed name on to kl_penalty_forward, which raises for it;
    this is what its docs and kl_penalty's straight-through lines say."""

    def straight_through(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
        backward = kl_k2(logp, ref_logp)
        return backward - backward.detach() + estimator(logp, ref_logp).detach()

    return straight_through


KL_ESTIMATORS = {
    "k1": kl_k1,
    "k2": kl_k2,
    "k3": kl_k3,
    "low_var": kl_low_var,
    "k3_clamped": kl_k3_clamped,
    "abs": kl_abs,
    "k1+": k2_gradient(kl_k1),
    "low_var+": k2_gradient(kl_low_var),
}


def token_weights(
    mask: torch.Tensor,
    aggregation: str,
    max_completion_length: int,
    rows: float | None = None,
    tokens: float | None = None,
    micro_rows: int = 4,
    micro_batches: float | None = None,
) -> torch.Tensor:
    """Weights w with loss = sum(per_token_loss * w) over the whole batch.

    token_mean: every token of the batch counts the same (DAPO, TRL's dapo; its bnpo with one
    micro-batch: bnpo takes each micro-batch's token mean, micro_token_mean).
    seq_mean_token_mean: mean over each sequence's tokens, then over sequences (GRPO, TRL's grpo).
    seq_mean_token_sum_norm: token sums divided by sequences x max length (Dr.GRPO).
    seq_mean_token_sum: token sums divided by sequences (verl's seq-mean-token-sum, TRL's luspo).
    micro_token_mean: the token mean of each `micro_rows` consecutive rows, averaged over those
    micro-batches (EasyR1's and verl's legacy worker: agg_loss's token-mean of a micro-batch over
    the gradient accumulation steps, a micro-batch `micro_batch_size_per_device_for_update` rows;
    TRL's bnpo, a micro-batch `per_device_train_batch_size` rows).

    `rows`, `tokens` and `micro_batches` are the batch's numbers of sequences, tokens and
    micro-batches to divide by; by default this mask's. Data-parallel training passes their
    means over the processes, so the averaged gradient equals the gradient over the whole batch
    on one process.
    """
    mask = mask.float()
    rows = mask.shape[0] if rows is None else rows
    tokens = float(mask.sum()) if tokens is None else tokens
    if aggregation == "micro_token_mean":
        micro = torch.arange(mask.shape[0]) // micro_rows  # each row's micro-batch
        per_micro = torch.zeros(-(-mask.shape[0] // micro_rows)).index_add_(0, micro, mask.sum(dim=1))
        micro_batches = per_micro.numel() if micro_batches is None else micro_batches
        return mask / per_micro[micro].clamp(min=1.0)[:, None] / max(micro_batches, 1.0)
    if aggregation == "token_mean":
        return mask / max(tokens, 1.0)
    if aggregation == "seq_mean_token_mean":
        return mask / mask.sum(dim=1, keepdim=True).clamp(min=1.0) / rows
    if aggregation == "seq_mean_token_sum":
        return mask / rows
    if aggregation == "seq_mean_token_sum_norm":
        return mask / (rows * max_completion_length)
    raise ValueError(f"unknown aggregation {aggregation!r}")


def high_entropy_mask(entropy: torch.Tensor, mask: torch.Tensor, fraction: float) -> torch.Tensor:
    """Tokens whose entropy is in the top `fraction` of the batch's real tokens (the forking
    tokens of "Beyond the 80/20 Rule"), as TRL selects them: entropy >= the (1 - fraction) quantile."""
    real = entropy[mask.bool()].float()
    if real.numel() == 0:
        return torch.zeros_like(mask, dtype=torch.bool)
    threshold = torch.quantile(real, 1 - fraction)
    return (entropy >= threshold) & mask.bool()


def rollout_importance_weights(
    trainer_logp: torch.Tensor,
    engine_logp: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    clip_min: float | None = None,
    clip_max: float | None = 3.0,
) -> torch.Tensor:
    """Importance weights pi_trainer / pi_engine for completions sampled by another engine, as
    TRL's vllm_importance_sampling_* (grpo_trainer.py, trl 1.16): per token (R, T) or per
    sequence (R, 1, the product over its tokens), then clipped into [clip_min, clip_max]
    (`*_truncate`) or set to 0 outside it (`*_mask`). Truncated IS (Yao et al., "Your efficient RL
    framework secretly brings you off-policy RL training", 2025) keeps the gradient unbiased
    up to the clip while one badly mismatched token cannot blow it up. Multiplies the
    policy-gradient term only, not the KL. No gradient flows through the weights."""
    diff = ((trainer_logp - engine_logp) * mask).detach()
    if mode.startswith("sequence"):
        diff = diff.sum(dim=-1, keepdim=True)
    ratio = torch.exp(diff)
    if mode.endswith("_truncate"):
        return torch.clamp(ratio, min=clip_min, max=clip_max)
    if mode.endswith("_mask"):
        low = -math.inf if clip_min is None else clip_min
        high = math.inf if clip_max is None else clip_max
        return ratio.masked_fill((ratio < low) | (ratio > high), 0.0)
    raise ValueError(f"unknown rollout correction mode {mode!r}")


def mismatch(trainer_logp: torch.Tensor, engine_logp: torch.Tensor, real: torch.Tensor) -> dict[str, float]:
    """How far an engine's log-probs are from the trainer's for the same tokens (the same
    policy): sums over real tokens of |difference| and of k3 KL(engine || trainer), the largest
    difference, and the token count (rollout/logp_diff, rollout/logp_diff_max, rollout/kl)."""
    trainer_logp = trainer_logp.detach()
    diff = (trainer_logp - engine_logp).abs() * real
    return {
        "mismatch_abs": float(diff.sum()),
        "mismatch_max": float(diff.max()),
        "mismatch_kl": float((kl_k3(engine_logp, trainer_logp) * real).sum()),
        "mismatch_tokens": float(real.sum()),
    }
