"""Advantages from the rewards of each prompt's group of G completions.

All estimators take rewards (groups, G) and return advantages of the same shape; with the KL to
the reference in each token's return (algo.kl_in=returns) they are per token, (groups, G, T).
"""

from __future__ import annotations

import torch

from vlrl.config import AlgoConfig


def grpo(rewards: torch.Tensor, std_eps: float = 1e-4, std_scope: str = "group") -> torch.Tensor:
    """(r - mean_g) / (std + eps), std unbiased as TRL computes it: of the group, or of the whole batch
    (TRL's scale_rewards="batch"); "none": r - mean_g (TRL's scale_rewards="none", Dr.GRPO's)."""
    centered = rewards - rewards.mean(dim=1, keepdim=True)
    if std_scope == "none":
        return centered
    std = rewards.std(dim=1, keepdim=True) if std_scope == "group" else rewards.std()
    return centered / (std + std_eps)


def without_spread(rewards: torch.Tensor) -> torch.Tensor:
    """Per group (the last dimension): are its rewards all equal, DAPO's dynamic-sampling filter
    (np.std over Python floats, exactly 0 then). Not a float32 std of 0: torch's of eight 0.7s is
    6.4e-8, and such a group would pass for one that teaches something."""
    return rewards.amax(dim=-1) == rewards.amin(dim=-1)


def dr_grpo(rewards: torch.Tensor) -> torch.Tensor:
    """Dr.GRPO: r - mean_g, no division by the std (which favours too-easy and too-hard prompts)."""
    return rewards - rewards.mean(dim=1, keepdim=True)


def rloo(rewards: torch.Tensor) -> torch.Tensor:
    """REINFORCE leave-one-out: r_i minus the mean of the other G - 1 rewards = G/(G-1) (r_i - mean)."""
    g = rewards.shape[1]
    return (rewards - rewards.mean(dim=1, keepdim=True)) * g / (g - 1)


def sign(correct: torch.Tensor) -> torch.Tensor:
    """+1 for a correct completion, -1 otherwise: the REINFORCE of "The Surprising Effectiveness of
    Negative Reinforcement in LLM Reasoning" (with positive_weight 0.1 it is their W-REINFORCE)."""
    return correct.float() * 2 - 1


def reinforce_baseline(
    rewards: torch.Tensor, lengths: torch.Tensor, penalty: torch.Tensor | None = None
) -> torch.Tensor:
    """OpenRLHF's reinforce_baseline (LMM-R1 @f917f18, openrlhf/trainer/ppo_utils/
    experience_maker.py): the group mean taken off, then whitened over every completion token of
    the batch (`whitened`). So a long completion weighs more in both, and a group of equal
    rewards still gets the shift. With `penalty` (..., T), its KL in each token's return
    (`kl_returns`) before the whitening, and the advantages per token."""
    return reinforce_plus_plus(dr_grpo(rewards), lengths, penalty)


def reinforce_plus_plus(
    rewards: torch.Tensor, lengths: torch.Tensor, penalty: torch.Tensor | None = None
) -> torch.Tensor:
    """REINFORCE++ (arXiv 2501.03262; OpenRLHF's `reinforce` at LMM-R1 @f917f18): no baseline,
    each completion's return (with `penalty`, its KL from each token on: `kl_returns`) whitened
    over every completion token of the batch as reinforce_baseline's are. verl's
    reinforce_plus_plus whitens with the unbiased variance + 1e-8 (a N / (N - 1) apart)."""
    if penalty is None:
        return whitened(rewards, lengths)
    mask = completion_mask(lengths, penalty.shape[-1])
    return whitened(kl_returns(rewards, penalty, lengths), mask) * mask


def opo(rewards: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """OPO (arXiv 2505.23585; verl's compute_opo_outcome_advantage at b178a3c): r minus the
    group's length-weighted mean reward, the baseline that minimises the gradient's variance
    when every token's gradient is alike."""
    weights = lengths.to(rewards.dtype)
    return rewards - (weights * rewards).sum(dim=1, keepdim=True) / weights.sum(dim=1, keepdim=True)


def gpg(rewards: torch.Tensor) -> torch.Tensor:
    """GPG (arXiv 2504.02546; verl's compute_gpg_outcome_advantage, f_norm 1): r - mean_g, times
    the batch's completions over its completions with a nonzero reward (alpha), so that a batch
    of mostly unrewarded completions is not diluted."""
    alpha = rewards.numel() / torch.count_nonzero(rewards).clamp(min=1)
    return alpha * dr_grpo(rewards)


def passk(rewards: torch.Tensor, std_eps: float, std_scope: str = "group") -> torch.Tensor:
    """Pass@k training's advantage (arXiv 2503.19595; verl's compute_grpo_passk_outcome_advantage):
    only each group's best completion (the first of equal best) gets one, its lead over the
    second best, divided by the group's std (unbiased) + std_eps (`std_scope` "none": not
    divided, verl's norm_adv_by_std_in_grpo=False); every other completion 0."""
    top = torch.topk(rewards, 2, dim=1)
    lead = top.values[:, 0] - top.values[:, 1]
    if std_scope != "none":
        lead = lead / (rewards.std(dim=1) + std_eps)
    return torch.zeros_like(rewards).scatter_(1, top.indices[:, :1], lead[:, None])


def completion_mask(lengths: torch.Tensor, width: int) -> torch.Tensor:
    """(..., width) 1 on each completion's tokens."""
    return (torch.arange(width) < lengths[..., None]).float()


def whitened(values: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Shifted by the weighted mean and divided by the weighted (biased) std, floored at 1e-4
    (OpenRLHF's rsqrt of the variance clamped at 1e-8): its normalisation over every action token
    of the rollout, `weights` a row's length (values per row) or the mask (values per token)."""
    weights = weights.to(values.dtype)
    total = weights.sum().clamp(min=1.0)
    mean = (weights * values).sum() / total
    variance = (weights * (values - mean) ** 2).sum() / total
    return (values - mean) * variance.clamp(min=1e-8).rsqrt()


def kl_returns(advantages: torch.Tensor, penalty: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Each token's return with the KL in the reward, as OpenRLHF computes it (LMM-R1 @f917f18,
    openrlhf/models/utils.py: compute_reward; experience_maker.py: get_cumulative_returns with
    gamma 1): the completion's outcome advantage (on its last token there, so in every token's
    return) minus the KL penalty (the coefficient times the KL) of that token and of every token
    after it; 0 past the completion's end. `advantages` (..., ), `penalty` and the result (..., T)."""
    mask = completion_mask(lengths, penalty.shape[-1])
    later = (penalty * mask).flip(-1).cumsum(-1).flip(-1)
    return (advantages[..., None] - later) * mask


def decoupled_sum(components: torch.Tensor, weights: torch.Tensor, std_eps: float = 1e-4) -> torch.Tensor:
    """GDPO's group reward-decoupled sum (TRL 1.16's multi_objective_aggregation=
    "normalize_then_sum"): each reward (the columns of `components`, (G, K)) normalised within
    the group on its own, (r_k - mean_k) / (std_k + eps), std unbiased, then summed with its
    weight (`weights`, (K,)). So a reward that varies little in a group is not drowned by one
    that varies much, as in the total's normalisation. (G,)."""
    centred = components - components.mean(dim=0, keepdim=True)
    return (centred / (components.std(dim=0, keepdim=True) + std_eps) * weights).sum(dim=1)


def gdpo(decoupled: torch.Tensor, std_eps: float = 1e-4) -> torch.Tensor:
    """GDPO's advantage: the groups' decoupled sums (`decoupled_sum`) normalised over the batch,
    (x - mean) / (std + eps), std unbiased, as TRL does after them."""
    return (decoupled - decoupled.mean()) / (decoupled.std() + std_eps)


CLIP_FILTER_MAX = 3.0  # MM-EUREKA's --clip_filter_like_weight_clip_eps default


def cpgd(rewards: torch.Tensor, weighting: str, std_eps: float) -> torch.Tensor:
    """CPGD's A = w (R - mean_g) with w = 1 (equal), 1 / (std_g + eps) (std), or clip_filter.

    clip_filter is CPGD's "clip-filter-like" weight (MM-EUREKA fe4a536,
    openrlhf/trainer/ppo_utils/experience_maker.py: clip_filter_like_weight_func, applied to
    reinforce_baseline's centered rewards): the batch rescaled by (groups / groups with any
    spread), at most CLIP_FILTER_MAX, so that groups that teach nothing do not dilute the
    update, as if they had been filtered out (DAPO-style) without resampling.
    """
    centered = dr_grpo(rewards)
    if weighting == "equal":
        return centered
    if weighting == "std":
        return centered / (rewards.std(dim=1, keepdim=True) + std_eps)
    informative = (rewards.std(dim=1) > 0).float().sum()
    if not informative:  # the public weight is 1 then; every centered reward is 0 anyway
        return centered
    return centered * (rewards.shape[0] / informative).clamp(max=CLIP_FILTER_MAX)


OTB_EPS = 1e-8  # verl's epsilon in B_t's denominator


def realized_energy(
    logp: torch.Tensor, sum_pi_squared: torch.Tensor, is_weights: torch.Tensor | None = None
) -> torch.Tensor:
    """Each token's ||s_t||^2 proxy of Optimal Token Baseline (verl's logit-gradient proxy): the
    squared norm of log pi's gradient in the logits, 1 - 2 pi(token) + sum_v pi(v)^2, from the
    old policy's forward (no backward). With rollout importance weights (truncated IS), times
    their square, as verl scales it to keep the baseline's MSE minimal under the weights."""
    energy = 1 - 2 * logp.exp() + sum_pi_squared
    return energy if is_weights is None else energy * is_weights**2


def optimal_token_baseline(
    rewards: torch.Tensor, energy: torch.Tensor, lengths: torch.Tensor, penalty: torch.Tensor | None = None
) -> torch.Tensor:
    """Optimal Token Baseline (verl's compute_optimal_token_baseline_advantage at b178a3c,
    handle_zero_tail off as verl calls it): a baseline per token position, B_t = sum_i G_t W_t /
    (sum_i W_t + 1e-8) over the group's completions that reach t, where G_t is the token's return
    (the reward, less with `penalty` the KL from that token on: `kl_returns`) and W_t its
    completion's `realized_energy` summed up to t; A_t = G_t - B_t. A completion whose path so
    far was uncertain weighs more in the baseline. `energy` and `penalty` (groups, G, T); a
    group of one keeps its returns, as verl's."""
    mask = completion_mask(lengths, energy.shape[-1])
    returns = rewards[..., None] * mask if penalty is None else kl_returns(rewards, penalty, lengths)
    cumulative = (energy * mask).cumsum(dim=-1) * mask
    baseline = (returns * cumulative).sum(dim=1, keepdim=True) / (cumulative.sum(dim=1, keepdim=True) + OTB_EPS)
    if rewards.shape[1] == 1:
        baseline = torch.zeros_like(baseline)
    return (returns - baseline) * mask


def remax(rewards: torch.Tensor, baseline: torch.Tensor) -> torch.Tensor:
    """ReMax (arXiv 2310.10505; EasyR1's and verl's compute_remax_outcome_advantage): r less the
    reward of the prompt's greedy completion (`baseline`, (groups,)), a baseline that costs one
    greedy decoding a prompt and no critic."""
    return rewards - baseline[:, None].to(rewards.dtype)


WHITENED = ("reinforce_baseline", "reinforce_plus_plus")  # over the batch's tokens, the KL's returns first
OWN_RETURNS = (*WHITENED, "optimal_token_baseline")  # estimators that take the KL's returns themselves
WEIGHING_TOKENS = ("opo", *OWN_RETURNS)  # estimators that take the completions' lengths


def advantages(
    rewards: torch.Tensor,
    correct: torch.Tensor,
    cfg: AlgoConfig,
    lengths: torch.Tensor | None = None,
    penalty: torch.Tensor | None = None,
    baseline: torch.Tensor | None = None,
    energy: torch.Tensor | None = None,
) -> torch.Tensor:
    """(groups, G) advantages, or (groups, G, T) with algo.kl_in=returns or per-token estimators
    (optimal_token_baseline, `energy` (groups, G, T) its `realized_energy`); for gdpo `rewards` are
    each completion's `decoupled_sum` rather than its total; `baseline` (groups,), remax's greedy
    completions' rewards. `lengths` (groups, G), the
    completions' tokens, for reinforce_baseline and the returns; `penalty` (groups, G, T), each
    token's KL of the sampling policy to the reference times its coefficient, for algo.kl_in
    reward or returns: the completion's summed penalty taken off its reward before the estimator
    (verl's use_kl_in_reward: its GRPO sums the token-level rewards), or each token's advantage
    less the penalty from that token on (`kl_returns`, OpenRLHF's), then reinforce_baseline's
    whitening over the tokens."""
    if cfg.kl_in != "loss" and (penalty is None or lengths is None):
        raise ValueError(
            f"algo.kl_in={cfg.kl_in} takes the KL off the reward: give each token's penalty and the lengths"
        )
    if cfg.advantage in WEIGHING_TOKENS and lengths is None:
        raise ValueError(f"{cfg.advantage} weighs tokens: give the completions' lengths")
    if cfg.advantage == "remax" and baseline is None:
        raise ValueError("remax takes each prompt's greedy completion's reward: give the baseline")
    if cfg.advantage == "optimal_token_baseline" and energy is None:
        raise ValueError("optimal_token_baseline weighs each token by its realized energy: give it")
    if cfg.kl_in == "reward":
        rewards = rewards - penalty.sum(dim=-1)
    if cfg.advantage == "grpo":
        adv = grpo(rewards, cfg.std_eps, cfg.advantage_std)
    elif cfg.advantage == "dr_grpo":
        adv = dr_grpo(rewards)
    elif cfg.advantage == "rloo":
        adv = rloo(rewards)
    elif cfg.advantage == "sign":
        adv = sign(correct)
    elif cfg.advantage == "cpgd":
        adv = cpgd(rewards, cfg.cpgd_weighting, cfg.std_eps)
    elif cfg.advantage == "gdpo":  # `rewards`: each completion's decoupled sum
        adv = gdpo(rewards, cfg.std_eps)
    elif cfg.advantage == "gpg":
        adv = gpg(rewards)
    elif cfg.advantage == "passk":
        adv = passk(rewards, cfg.std_eps, cfg.advantage_std)
    elif cfg.advantage == "opo":
        adv = opo(rewards, lengths)
    elif cfg.advantage == "reinforce_baseline":
        adv = reinforce_baseline(rewards, lengths, penalty if cfg.kl_in == "returns" else None)
    elif cfg.advantage == "reinforce_plus_plus":
        adv = reinforce_plus_plus(rewards, lengths, penalty if cfg.kl_in == "returns" else None)
    elif cfg.advantage == "remax":
        adv = remax(rewards, baseline)
    elif cfg.advantage == "optimal_token_baseline":
        adv = optimal_token_baseline(rewards, energy, lengths, penalty if cfg.kl_in == "returns" else None)
    else:
        raise ValueError(f"unknown advantage estimator {cfg.advantage!r}")
    if cfg.kl_in == "returns" and cfg.advantage not in OWN_RETURNS:  # there, before their whitening
        adv = kl_returns(adv, penalty, lengths)
    if cfg.positive_weight != 1.0 or cfg.negative_weight != 1.0:
        adv = torch.where(adv > 0, adv * cfg.positive_weight, adv * cfg.negative_weight)
    return adv
