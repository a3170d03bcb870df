"""Mutation check of the trainer's options: does some test fail when an option is switched off or
inverted?

Copies the working tree (tracked and untracked, not ignored files) to a temporary directory,
runs the tests named by the mutations unmutated (they must pass), then applies each one-line
mutation in turn, runs the tests meant to kill it, and restores the file. Prints one JSON
object: every mutation with whether it was killed, and the names of the survivors. Exits 1
when a mutation survives, when its original text does not occur exactly once in its file, or
when the tests fail unmutated.

    python bench/mutants.py [--only NAME ...] [--list]

Run it before resolving an issue that adds or changes an option, and add that option's
mutations to MUTATIONS.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ALGOS = "tests/algos/test_algos.py"
LOSSES = "tests/algos/test_losses.py"
TRL = "tests/algos/test_trl_equivalence.py"
OPTIONS = "tests/trainer/test_train_options.py"
SEAM = "tests/rollout/test_rollout_seam.py"
POLICY = "tests/models/test_policy.py"
HF_ENGINE = "tests/rollout/test_hf_engine.py"
LORA = "tests/models/test_lora.py"
ADAPTER_DROPOUT = "test_adapter_dropout_is_on_only_inside_and_its_masks_follow_the_seed"
SFT = "tests/trainer/test_sft.py"
SFT_DROPOUT = "test_lora_dropout_acts_in_sft_and_a_resumed_run_draws_the_masks_an_uninterrupted_one_did"
FAMILY = "tests/models/test_model_families.py"
VISION_ATTENTION = "tests/models/test_vision_attention.py"
EXPERTS_LAYOUT = "tests/models/test_experts_layout.py"
PARALLEL = "tests/parallel/test_parallel.py"
RECOMPUTE = "tests/parallel/test_recompute.py"
FSDP_TWO = "tests/parallel/test_fsdp.py::test_fsdp2_on_two_processes_trains_resumes_and_samples_like_one_process"
FSDP_FOUR = "tests/parallel/test_fsdp.py::test_fsdp2_on_four_processes_equals_one_process"
# Tiny training runs whose logged loss, rewards or weights follow from the options by hand.
KL = f"{OPTIONS}::test_the_kl_term_is_added_times_beta_and_the_overlong_penalty_joins_the_reward"
MASK = f"{OPTIONS}::test_mask_truncated_drops_truncated_completions_and_the_lr_follows_its_schedule"
SCHEDULE = f"{OPTIONS}::test_the_schedule_counts_steps_not_the_optimizer_steps_within_them"
MIN_LR = f"{OPTIONS}::test_a_decay_ends_at_lr_min_ratio_as_transformers_cosine_with_min_lr_does"
PER_UPDATE = f"{OPTIONS}::test_a_schedule_per_optimizer_step_moves_at_every_update_and_warms_up_in_updates"
ENTROPY = f"{OPTIONS}::test_top_entropy_fraction_trains_on_that_share_and_max_grad_norm_clips"
DECAY = f"{OPTIONS}::test_weight_decay_shrinks_the_weights_when_nothing_else_moves_them"
SHAPING = f"{OPTIONS}::test_trust_temporal_and_length_terms_join_each_completions_reward"
ITERATIONS = f"{OPTIONS}::test_several_updates_per_rollout_with_rollout_or_recomputed_old_logprobs"
DYNAMIC = f"{OPTIONS}::test_dynamic_sampling_drops_groups_without_spread_and_refills"
ROUND_DRAWS = (
    "tests/trainer/test_dynamic_sampling.py::"
    "test_each_round_draws_a_whole_batch_until_enough_groups_are_kept_and_the_first_are_trained"
)
LONE_GROUP = "tests/trainer/test_dynamic_sampling.py::test_a_group_of_one_completion_is_kept_as_verl_keeps_it"
SHUFFLE = (
    "tests/trainer/test_update.py::test_mini_batches_take_whole_groups_in_order_or_rows_shuffled_once_or_every_pass"
)
OFF_POLICY = (
    "tests/trainer/test_update.py::test_the_off_policy_mask_drops_negative_completions_by_the_engines_log_probs"
)
GDPO = f"{OPTIONS}::test_gdpo_takes_each_reward_component_and_shaping_term_apart_at_its_weight"
REMAX = f"{OPTIONS}::test_remax_takes_each_prompts_greedy_completions_reward_as_its_baseline"
VERL_LOSSES = "tests/algos/test_losses.py::test_verls_other_policy_losses_give_its_loss_and_gradient"
ENTROPY_CONTROL = "tests/algos/test_entropy_control.py"
ADAPTIVE_ENTROPY = (
    "tests/trainer/test_update.py::"
    "test_the_adaptive_entropy_bonus_applies_the_controllers_coefficient_and_follows_each_steps_entropy"
)
ENTROPY_RESUME = f"{OPTIONS}::test_the_adaptive_entropy_coefficient_resumes_where_it_was"
ADAPTIVE_KL = f"{OPTIONS}::test_the_adaptive_kl_coefficient_follows_the_steps_kl_and_resumes_where_it_was"
KL_CONTROL = "tests/algos/test_kl_control.py"
REF_SYNC = "tests/trainer/test_reference_sync.py"
REF_SYNC_TRL = f"{REF_SYNC}::test_the_reference_moves_as_trls_sync_ref_model_moves_it"
REF_SYNC_EVERY = f"{REF_SYNC}::test_the_reference_is_mixed_after_every_nth_optimizer_step_and_checkpointed"
REF_SYNC_RESUME = f"{REF_SYNC}::test_a_resumed_run_goes_on_with_the_moved_reference"
KL_IN = f"{OPTIONS}::test_the_kl_in_the_reward_is_the_sampling_policys_to_the_reference_and_leaves_the_loss"
ROUNDS = f"{OPTIONS}::test_dynamic_sampling_stops_after_max_sampling_rounds_and_trains_on_what_there_is"
TEMPORAL = f"{OPTIONS}::test_t_grpo_samples_its_share_of_the_group_on_the_shuffled_frames"
OVERLONG = f"{OPTIONS}::test_the_overlong_penalty_ramps_over_the_last_overlong_buffer_tokens"
# The update against a hand-written GRPO loss, step by step (tests/trainer/test_update.py).
UPDATE = "tests/trainer/test_update.py"
OTB_STEP = f"{UPDATE}::test_optimal_token_baseline_takes_pi_and_its_squares_from_the_sampling_policy_as_verl"
KL_ESTIMATOR = f"{UPDATE}::test_each_kl_estimator_enters_the_loss_and_its_gradient"
MOVED = f"{UPDATE}::test_once_the_policy_moved_the_ratio_compares_with_the_rollouts_log_probs"
RECOMPUTE_SHARED = f"{UPDATE}::test_recompute_takes_the_trainers_log_probs_for_an_engine_that_shares_the_policy"
ENTROPY_OLD = (
    f"{UPDATE}::test_top_entropy_selection_keeps_the_rollouts_old_log_probs_and_none_are_taken_as_the_current_ones"
)
AGGREGATION = f"{UPDATE}::test_each_aggregation_weighs_the_tokens_as_its_loss_type"
ENTROPY_BONUS = f"{UPDATE}::test_the_entropy_bonus_is_subtracted_from_the_loss_as_verl_and_easyr1_do"
SELECTED_BONUS = f"{LOSSES}::test_the_entropy_bonus_acts_on_the_selected_high_entropy_tokens_only_as_trls"
ROUTER_STEP = f"{UPDATE}::test_a_mixture_of_experts_load_balancing_loss_is_each_micro_batchs_averaged_over_the_step"
ROUTER_TRL = f"{TRL}::test_a_mixture_of_experts_load_balancing_loss_and_gradient_equal_trls"
CORRECTION = f"{SEAM}::test_mismatch_is_measured_and_corrected_by_importance_weights"
THINKING = "tests/trainer/test_thinking.py"
SOPHIAVL = "tests/trainer/test_sophiavl_r1.py"
VLLM_OPTIONS = "tests/rollout/test_vllm_options.py"
TRAIN = "tests/trainer/test_train.py"
OOM = "tests/trainer/test_oom.py"
ROLLOUT_OOM = (
    "test_a_rollout_that_runs_out_of_memory_is_sampled_again_one_group_a_call_as_a_run_sampling_so_from_the_start"
)
PACKING = f"{LOSSES}::test_the_update_packs_rows_longest_first_when_that_computes_fewer_padded_tokens"
DIFFICULTY = "tests/trainer/test_difficulty_weighting.py"
MIN_P = "tests/models/test_policy.py::test_min_p_keeps_what_transformers_keeps_after_top_k_top_p_and_vllm_before_them"
TOP = f"{OPTIONS}::test_a_top_k_top_p_or_min_p_of_one_token_samples_the_greedy_completion_every_time"
LIMITS = "n, length = limits.num_generations, limits.max_new_tokens"
SAMPLING = "n, length, r.temperature, r.top_p, r.top_k, r.min_p, r.repetition_penalty, min_new_tokens=r.min_new_tokens"
PENALTY = (
    f"{OPTIONS}::test_rollout_repetition_penalty_samples_what_the_engine_samples_with_it_and_keeps_the_policys_logprobs"
)
MIN_NEW = f"{OPTIONS}::test_rollout_min_new_tokens_keeps_every_completion_going_that_long"
MIN_NEW_DRAWN = f"{OPTIONS}::test_min_new_tokens_is_part_of_the_draw_the_trainer_computes_for_an_engine_of_its_own"
PENALTY_DRAWN = (
    f"{OPTIONS}::test_a_repetition_penalty_is_part_of_the_draw_the_trainer_computes_for_an_engine_of_its_own"
)
STAGES = "tests/trainer/test_stages.py::test_a_step_samples_scores_and_normalises_with_its_stages_limits"
REPLAY = "tests/trainer/test_replay.py"
REPLAY_OPTIONS = f"{REPLAY}::test_the_buffer_hands_the_rule_every_replay_option"
REPLAY_RULE = "tests/algos/test_replay_selection.py::test_each_option_changes_the_selection_as_its_definition_says"
STATIC_STEP = f"{HF_ENGINE}::test_the_static_step_equals_decoding_every_row"
LEAN_STATIC = f"{HF_ENGINE}::test_the_static_steps_lean_forward_decodes_as_the_models_forward_bit_for_bit"
STATIC_REFRESH = (
    f"{HF_ENGINE}::test_a_hook_added_between_two_batches_of_the_same_shape_counts_in_the_static_steps_lean_forward"
)
DECODE_STEP = "tests/models/test_decode_step.py"
LEAN_FORWARD = (
    "tests/trainer/test_update.py::"
    "test_model_lean_forward_takes_the_update_through_the_lean_step_or_never_and_changes_no_value"
)
RESERVED = f"{HF_ENGINE}::test_the_dynamic_loop_writes_each_token_into_reserved_slots_as_a_growing_cache_would"
LOADING = "tests/models/test_loading.py"
# GPU-only (tests/gpu/): on the CPU it is skipped, so the mutation's CPU kill is the refusal test.
GRAPHS_ON_GPU = "tests/gpu/test_decoding_graphs.py::test_graph_replays_sample_what_the_eager_step_samples"
COMPILED = "tests/rollout/test_compiled_step.py"
COMPILED_EXPERTS = (
    f"{COMPILED}::test_compiled_graphs_are_refused_for_experts_that_grouped_mm_would_loop_over_on_the_host"
)
EXPERTS = "test_experts_take_the_static_step_where_transformers_routes_their_tokens_on_the_device"
WINDOW = "test_a_static_step_attending_over_a_window_of_the_cache_decodes_as_one_attending_over_all_of_it"
WIDENING = "test_the_window_widens_as_the_rows_decode_and_samples_as_the_whole_cache_does"
OPERATOR_BENCH = (
    "tests/app/test_bench_scripts.py::"
    "test_the_operator_bench_counts_a_static_steps_operators_per_layer_with_no_mask_converted_in_each"
)


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str  # relative to the repository root
    original: str  # must occur exactly once in the file
    replacement: str
    tests: tuple[str, ...]  # pytest arguments (files or node ids) that should fail on the mutant


def shaping_dropped(term: str, test: str) -> Mutation:
    """One shaping term computed and logged but never added to the reward."""
    return Mutation(
        f"shaping term {term} never added to the reward",
        "vlrl/trainer/rl.py",
        "reward = reward + term",
        f'reward = reward + (0 * term if term is shaping.get("{term}") else term)',
        (test,),
    )


def family(path: str, tests: tuple[str, ...], *members: tuple[str, str, str]) -> list[Mutation]:
    """Mutations of one file that the same tests kill: (name, original, replacement) each."""
    return [Mutation(name, path, original, replacement, tests) for name, original, replacement in members]


REPLAY_ARGS = "cfg.positive_fraction, cfg.positive_reward, cfg.alpha, cfg.eps,"  # the buffer hands the rule


def replay_option_not_passed(option: str, default: str) -> Mutation:
    """One replay option handed to the selection rule as its default (VL-Rethinker's value)."""
    return Mutation(
        f"replay.{option} not passed", "vlrl/trainer/replay.py",
        REPLAY_ARGS, REPLAY_ARGS.replace(f"cfg.{option},", f"{default},"), (REPLAY_OPTIONS,),
    )  # fmt: skip


MUTATIONS: tuple[Mutation, ...] = (
    # -- reward shaping (rl.py adds it, vlrl/algos/shaping.py computes it) ----------------------
    shaping_dropped("overlong", KL),
    *(shaping_dropped(term, SHAPING) for term in ("thinking", "temporal", "length")),
    Mutation(
        "T-GRPO's shuffled order fixed per sample", "vlrl/trainer/rl.py",
        "return dataclasses.replace(variant, shuffle_frames=variant.shuffle_frames ^ draw)", "return variant",
        (f"{OPTIONS}::test_t_grpo_shuffles_each_visit_in_an_order_of_its_own_drawn_from_the_runs_generator",),
    ),
    Mutation("no shaping term added", "vlrl/trainer/rl.py", "reward = reward + term", "reward = reward", (KL, SHAPING)),
    Mutation(
        "overlong penalty size ignored", "vlrl/algos/shaping.py",
        "ramp = (start - lengths.float()) / buffer * penalty", "ramp = (start - lengths.float()) / buffer", (ALGOS, KL),
    ),
    Mutation(
        "Trust-GRPO variant inverted", "vlrl/algos/shaping.py",
        'if trust.variant == "code":', 'if trust.variant != "code":', (ALGOS, SHAPING),
    ),
    Mutation(
        "Trust-GRPO code: no outcome gate at 0.2", "vlrl/algos/shaping.py",
        "process = torch.where(outcome >= CODE_MIN_OUTCOME, thinking, torch.zeros_like(thinking))",
        "process = thinking", (ALGOS,),
    ),
    Mutation(
        "Trust-GRPO code: no skipped groups", "vlrl/algos/shaping.py",
        "if bool((outcome >= CODE_SKIP_ABOVE).all()) or bool((outcome <= CODE_SKIP_BELOW).all()):", "if False:", (ALGOS,),
    ),
    Mutation(
        "Trust-GRPO code: trust weight ignored", "vlrl/algos/shaping.py",
        "weight *= math.exp(mu_correct - mu_wrong)", "weight *= 1.0", (ALGOS,),
    ),
    Mutation(
        "Trust-GRPO: no annealing", "vlrl/algos/shaping.py",
        "weight = alpha * math.exp(-step / decay_steps)", "weight = alpha", (ALGOS,),
    ),
    Mutation(
        "Trust-GRPO paper: gamma ignored", "vlrl/algos/shaping.py",
        "gamma = 1.0 if mu_correct >= mu_wrong else float(torch.exp(mu_correct - mu_wrong))", "gamma = 1.0", (ALGOS,),
    ),
    Mutation(
        "Trust-GRPO default T not the variant's", "vlrl/config.py",
        "self.decay_steps = TRUST_DECAY_STEPS[self.variant]", "self.decay_steps = 1000.0", (ALGOS, SHAPING),
    ),
    Mutation(
        "T-GRPO condition inverted", "vlrl/algos/shaping.py",
        "if accuracy_ordered.float().mean() >= mu * accuracy_shuffled.float().mean():",
        "if accuracy_ordered.float().mean() < mu * accuracy_shuffled.float().mean():", (ALGOS, SHAPING),
    ),
    Mutation(
        "T-GRPO mu ignored", "vlrl/algos/shaping.py",
        "if accuracy_ordered.float().mean() >= mu * accuracy_shuffled.float().mean():",
        "if accuracy_ordered.float().mean() >= 0.8 * accuracy_shuffled.float().mean():", (ALGOS,),
    ),
    Mutation(
        "T-GRPO: the run's alpha not passed", "vlrl/trainer/rl.py",
        "correct, algo.temporal.alpha, algo.temporal.mu)", "correct, 0.3, algo.temporal.mu)", (SHAPING,),
    ),
    Mutation(
        "T-GRPO: the run's mu not passed", "vlrl/trainer/rl.py",
        "correct, algo.temporal.alpha, algo.temporal.mu)", "correct, algo.temporal.alpha, 0.8)", (SHAPING,),
    ),
    Mutation(
        "T-GRPO alpha ignored", "vlrl/algos/shaping.py",
        "return alpha * correct_ordered.float()", "return correct_ordered.float()", (ALGOS, SHAPING),
    ),
    Mutation(
        "length control needs one correct, not two", "vlrl/algos/shaping.py",
        "if int(correct.sum()) <= 1:", "if int(correct.sum()) < 1:", (ALGOS,),
    ),
    Mutation(
        "length control bonus size ignored", "vlrl/algos/shaping.py",
        "return bonus * (correct & (lengths >= low) & (lengths <= high)).float()",
        "return (correct & (lengths >= low) & (lengths <= high)).float()", (ALGOS, SHAPING),
    ),
    Mutation(
        "accuracy_strict inverted", "vlrl/trainer/rl.py",
        "accuracy > algo.accuracy_threshold if algo.accuracy_strict else", "accuracy > algo.accuracy_threshold if not algo.accuracy_strict else",
        (KL, MASK),
    ),
    Mutation(
        "accuracy_threshold ignored", "vlrl/trainer/rl.py",
        "else accuracy >= algo.accuracy_threshold", "else accuracy >= 0.5", (ENTROPY,),
    ),
    # -- the update (rl.py applies the options, vlrl/algos/losses.py computes) -------------------
    Mutation(
        "top_entropy_fraction ignored", "vlrl/trainer/rl.py",
        "if algo.top_entropy_fraction < 1", "if False", (ENTROPY,),
    ),
    Mutation(
        "top_entropy_fraction selects the lowest-entropy tokens", "vlrl/algos/losses.py",
        "return (entropy >= threshold) & mask.bool()", "return (entropy < threshold) & mask.bool()", (ALGOS, ENTROPY),
    ),
    Mutation(
        "dual_clip ignored", "vlrl/algos/losses.py",
        "cfg.ratio_level, cfg.dual_clip", "cfg.ratio_level, None", (ALGOS, TRL),
    ),
    Mutation(
        "dual_clip cap not applied", "vlrl/algos/losses.py",
        "loss = torch.where(adv < 0, torch.minimum(loss, -dual_clip * adv), loss)", "loss = loss", (ALGOS,),
    ),
    Mutation("KL term's sign flipped", "vlrl/algos/losses.py", "per_token = per_token + cfg.beta * kl", "per_token = per_token - cfg.beta * kl", (KL,)),
    Mutation("beta ignored", "vlrl/algos/losses.py", "per_token = per_token + cfg.beta * kl", "per_token = per_token + kl", (KL,)),
    Mutation(
        "kl_estimator names swapped", "vlrl/algos/losses.py",
        '"k1": kl_k1,\n    "k2": kl_k2,\n    "k3": kl_k3,', '"k1": kl_k3,\n    "k2": kl_k2,\n    "k3": kl_k1,', (ALGOS, TRL),
    ),
    Mutation(
        "kl_estimator abs without the absolute value", "vlrl/algos/losses.py",
        "return (logp - ref_logp).abs()", "return logp - ref_logp", (ALGOS, LOSSES),
    ),
    Mutation(
        "k1+ and low_var+ without k2's gradient", "vlrl/algos/losses.py",
        "return backward - backward.detach() + estimator(logp, ref_logp).detach()",
        "return estimator(logp, ref_logp)", (LOSSES,),
    ),
    Mutation(
        "low_var+ of k3 unclamped", "vlrl/algos/losses.py",
        '"low_var+": k2_gradient(kl_low_var)', '"low_var+": k2_gradient(kl_k3)', (ALGOS, LOSSES),
    ),
    Mutation(
        "k3_clamped unclamped", "vlrl/algos/losses.py",
        "return k3_of(torch.clamp(ref_logp - logp, -10.0, 10.0))", "return k3_of(ref_logp - logp)", (ALGOS,),
    ),
    Mutation(
        "k3_clamped dispatched as k3", "vlrl/algos/losses.py", '"k3_clamped": kl_k3_clamped', '"k3_clamped": kl_k3', (ALGOS,),
    ),
    Mutation("k3's sign flipped", "vlrl/algos/losses.py", "return k3_of(ref_logp - logp)", "return k3_of(logp - ref_logp)", (ALGOS, LOSSES, TRL)),
    Mutation("mask_truncated ignored", "vlrl/trainer/rl.py", "if algo.mask_truncated:", "if False:", (MASK,)),
    Mutation(
        "epsilon_high ignored", "vlrl/algos/losses.py",
        "epsilon_high = cfg.epsilon if cfg.epsilon_high is None else cfg.epsilon_high", "epsilon_high = cfg.epsilon",
        (ALGOS, TRL),
    ),
    Mutation(
        "ratio_level ignored", "vlrl/algos/losses.py",
        "cfg.ratio_level, cfg.dual_clip", '"token", cfg.dual_clip', (ALGOS, TRL),
    ),
    Mutation(
        "CPGD drift coefficient ignored", "vlrl/algos/losses.py",
        "return cpgd_loss(logp, old_logp, advantages, cfg.epsilon, epsilon_high, cfg.drift_coef, cfg.drift_clip)",
        "return cpgd_loss(logp, old_logp, advantages, cfg.epsilon, epsilon_high, 0.0, cfg.drift_clip)", (ALGOS,),
    ),
    Mutation(
        "seq_mean_token_sum_norm divides by rows only", "vlrl/algos/losses.py",
        "return mask / (rows * max_completion_length)", "return mask / rows", (LOSSES, TRL, MASK),
    ),
    Mutation(
        "seq_mean_token_sum divides by tokens", "vlrl/algos/losses.py",
        'if aggregation == "seq_mean_token_sum":\n        return mask / rows',
        'if aggregation == "seq_mean_token_sum":\n        return mask / max(tokens, 1.0)',
        (TRL, "tests/trainer/test_update.py::test_each_aggregation_weighs_the_tokens_as_its_loss_type"),
    ),
    Mutation(
        "token_mean weighs sequences instead", "vlrl/algos/losses.py",
        "return mask / max(tokens, 1.0)", "return mask / mask.sum(dim=1, keepdim=True).clamp(min=1.0) / rows",
        (LOSSES, TRL),
    ),
    Mutation(
        "num_iterations ignored", "vlrl/trainer/rl.py",
        "for iteration in range(algo.num_iterations):", "for iteration in range(1):", (ITERATIONS,),
    ),
    Mutation(
        "mini_batches ignored", "vlrl/trainer/rl.py",
        "mini_batch_rows(batch, algo.mini_batches,", "mini_batch_rows(batch, 1,",
        (ITERATIONS,),
    ),
    Mutation(
        "mini_batch_shuffle ignored", "vlrl/trainer/rl.py",
        "algo.mini_batches, algo.mini_batch_shuffle, seed", 'algo.mini_batches, "none", seed', (SHUFFLE,),
    ),
    Mutation(
        "mini_batch_shuffle every_pass shuffled once", "vlrl/trainer/batch.py",
        'iteration if shuffle == "every_pass" else 0', "0", (SHUFFLE,),
    ),
    Mutation(
        "mini_batch_shuffle shuffles the groups, not the rows", "vlrl/trainer/batch.py",
        "return [chunk.tolist() for chunk in np.array_split(rng.permutation(len(batch.prompt_index)), parts)]",
        "return [[r for g in chunk for r in batch.group_rows(int(g))] for chunk in np.array_split(rng.permutation(len(batch.groups)), parts)]",
        (SHUFFLE,),
    ),
    Mutation(
        "dynamic_sampling ignored", "vlrl/trainer/rl.py",
        "            if algo.dynamic_sampling:\n", "            if False:\n",
        (DYNAMIC,),
    ),
    Mutation(
        "dynamic_sampling drops a group of one completion", "vlrl/trainer/rl.py",
        "if len(g.reward) == 1 or not bool(without_spread(g.reward))", "if not bool(without_spread(g.reward))",
        (LONE_GROUP,),
    ),
    Mutation(
        "dynamic_sampling trains every group kept, beyond the batch", "vlrl/trainer/rl.py",
        "return groups[:B], rounds, unusable", "return groups, rounds, unusable",
        (ROUND_DRAWS,),
    ),
    Mutation(
        "max_sampling_rounds exceeded", "vlrl/trainer/rl.py",
        "while rounds < (algo.max_sampling_rounds if algo.dynamic_sampling else 1)",
        "while rounds < (algo.max_sampling_rounds + 2 if algo.dynamic_sampling else 1)",
        (DYNAMIC, ROUNDS),
    ),
    Mutation(
        "sampling_batch ignored", "vlrl/config.py",
        "return self.algo.sampling_batch or self.trainer.prompts_per_step", "return self.trainer.prompts_per_step",
        (ROUND_DRAWS,),
    ),
    Mutation(
        "dynamic_sampling refills only the prompts missing", "vlrl/trainer/rl.py",
        "            items = self.draw(per_round)\n", "            items = self.draw(B - len(groups))\n",
        (ROUND_DRAWS,),
    ),
    Mutation(
        "rollout importance weights not applied", "vlrl/algos/losses.py",
        "per_token = per_token * is_weights", "per_token = per_token",
        (f"{SEAM}::test_mismatch_is_measured_and_corrected_by_importance_weights",),
    ),
    Mutation(
        "old log-probs taken from another engine's rollout", "vlrl/trainer/update.py",
        "return self.foreign or option ==", "return option ==",
        (f"{SEAM}::test_old_logprobs_are_the_trainers_when_the_engine_is_another",),
    ),
    Mutation(
        "the engine never gets the updated weights", "vlrl/trainer/rl.py",
        "                    self.push_weights()\n                self.engine.wake()",
        "                    pass\n                self.engine.wake()",
        (f"{SEAM}::test_the_engine_gets_the_policys_weights_after_every_update",),
    ),
    Mutation(
        "weights pushed in transformers' layout, not the checkpoint's", "vlrl/models/loading.py",
        "        yield from revert_weight_conversion(base, {name: tensor}).items()", "        yield name, tensor",
        ("tests/models/test_loading.py::test_an_engine_is_pushed_the_weights_as_the_checkpoint_stores_them",),
    ),
    Mutation(
        "Qwen3-VL MoE's experts saved as transformers 5 holds them", "vlrl/models/qwen3_vl.py",
        "            return Transpose(self.dim1, self.dim0)", "            return Transpose(self.dim1, self.dim0, True)",
        (EXPERTS_LAYOUT,),
    ),
    Mutation(
        "square experts saved transposed, which their load cannot tell", "vlrl/models/qwen3_vl.py",
        "if shape is None or shape[-1] == shape[-2] or not any(", "if shape is None or not any(",
        (EXPERTS_LAYOUT,),
    ),
    Mutation(
        "vLLM started from experts it reads transposed", "vlrl/rollout/vllm.py",
        "        if refusal := self.on_vllm.checkpoint_refusal(checkpoint):", '        if refusal := "":',
        (EXPERTS_LAYOUT,),
    ),
    Mutation(
        "square experts taken for transformers' layout", "vlrl/models/qwen3_vl.py",
        "return hidden != wide and tuple(", "return True and tuple(", (EXPERTS_LAYOUT,),
    ),
    Mutation(
        "an engine sampling another model never said", "vlrl/trainer/update.py",
        "    if apart <= APART_NATS:", "    if True:",
        (f"{SEAM}::test_an_engine_whose_log_probs_are_a_nat_from_the_trainers_is_said_once_not_to_sample_the_policy",),
    ),
    Mutation(
        "a foreign engine's log-probs compared with the full-vocabulary ones", "vlrl/trainer/update.py",
        "            if self.sampler is not None:\n                expected = current.sampled",
        "            if False:\n                expected = current.sampled",
        (f"{SEAM}::test_mismatch_is_measured_and_corrected_by_importance_weights",),
    ),
    Mutation(
        "kl_estimator fixed to k3", "vlrl/algos/losses.py",
        "kl = KL_ESTIMATORS[cfg.kl_estimator](logp, ref_logp)", 'kl = KL_ESTIMATORS["k3"](logp, ref_logp)', (KL_ESTIMATOR,),
    ),
    Mutation(
        "kl_estimator fixed to k1", "vlrl/algos/losses.py",
        "kl = KL_ESTIMATORS[cfg.kl_estimator](logp, ref_logp)", 'kl = KL_ESTIMATORS["k1"](logp, ref_logp)', (KL_ESTIMATOR,),
    ),
    Mutation(
        "old log-probs taken as the current ones once the policy moved", "vlrl/trainer/update.py",
        "return self.algo.num_iterations > 1 or self.algo.mini_batches > 1", "return False", (MOVED,),
    ),
    Mutation(
        "num_iterations ignored in choosing the old log-probs", "vlrl/trainer/update.py",
        "return self.algo.num_iterations > 1 or self.algo.mini_batches > 1", "return self.algo.mini_batches > 1",
        (f"{MOVED}[num_iterations]",),
    ),
    Mutation(
        "mini_batches ignored in choosing the old log-probs", "vlrl/trainer/update.py",
        "return self.algo.num_iterations > 1 or self.algo.mini_batches > 1", "return self.algo.num_iterations > 1",
        (f"{MOVED}[mini_batches]",),
    ),
    Mutation(
        "top-entropy selection's forward drops the rollout's old log-probs", "vlrl/trainer/update.py",
        "        if moves:\n            return OldLogprobs(batch.rollout_logprobs,",
        "        if moves and entropy is None:\n            return OldLogprobs(batch.rollout_logprobs,",
        (ENTROPY_OLD,),
    ),
    Mutation(
        "no old log-probs taken when the engine gives none", "vlrl/trainer/update.py",
        "or self.recomputes or batch.rollout_logprobs is None)", "or self.recomputes)", (ENTROPY_OLD,),
    ),
    Mutation(
        "the update packs its rows in order whatever the padding", "vlrl/trainer/batch.py",
        "return min(plans, key=lambda plan: padded_tokens(plan, prompt_index, prompt_lengths, row_lengths))",
        "return plans[0]", (PACKING,),
    ),
    Mutation(
        "longest-first packing loses the rows' positions", "vlrl/trainer/batch.py",
        "return [sorted(order[j] for j in rows) for rows in plan]", "return [sorted(rows) for rows in plan]",
        (PACKING,),
    ),
    Mutation(
        "the ratio always compares with the current log-probs", "vlrl/trainer/update.py",
        "old_logp = current.logp.detach() if old.logp is None else rows_of(old.logp, micro, width, device)",
        "old_logp = current.logp.detach()", (MOVED,),
    ),
    Mutation(
        "old_logprobs=recompute ignored for an engine that shares the policy", "vlrl/trainer/update.py",
        'option == "recompute" or (option == "auto"', '(option == "auto"',
        (RECOMPUTE_SHARED,),
    ),
    Mutation(
        "old_logprobs=auto ignored for a bfloat16 policy", "vlrl/trainer/update.py",
        ' or (option == "auto" and self.low_precision)', "",
        (RECOMPUTE_SHARED,),
    ),
    Mutation(
        "a bfloat16 policy taken for a float32 one", "vlrl/trainer/rl.py",
        "low_precision = policy.dtype != torch.float32", "low_precision = False",
        (f"{UPDATE}::test_the_updater_knows_a_bfloat16_policy_from_a_float32_one",),
    ),
    Mutation(
        "aggregation ignored", "vlrl/trainer/update.py",
        "mask[rows_t], algo.aggregation, max_new_tokens,",
        'mask[rows_t], "seq_mean_token_mean", max_new_tokens,', (AGGREGATION,),
    ),
    Mutation(
        "micro_batch_rows ignored", "vlrl/trainer/update.py",
        "micro_rows=algo.micro_batch_rows,", "micro_rows=4,", (AGGREGATION,),
    ),
    Mutation(
        "micro_token_mean weighs the step's tokens alike", "vlrl/algos/losses.py",
        "return mask / per_micro[micro].clamp(min=1.0)[:, None] / max(micro_batches, 1.0)",
        "return mask / float(mask.sum())", (AGGREGATION, LOSSES),
    ),
    Mutation(
        "entropy_coef ignored", "vlrl/trainer/update.py",
        "a.entropy_coef, a.entropy_target,", "0.0, a.entropy_target,", (ENTROPY_BONUS,),
    ),
    Mutation(
        "the entropy term dropped", "vlrl/algos/losses.py",
        "per_token = per_token - (cfg.entropy_coef if entropy_coef is None else entropy_coef) * bonus",
        "per_token = per_token", (ENTROPY_BONUS,),
    ),
    Mutation(
        "the entropy bonus on every token, not the selected ones", "vlrl/algos/losses.py",
        "bonus = entropy if selected is None else entropy * selected", "bonus = entropy", (SELECTED_BONUS,),
    ),
    Mutation(
        "router_aux_loss_coef ignored", "vlrl/trainer/update.py",
        "router = RouterLogits(run.model) if self.router_aux_coef else None", "router = None", (ROUTER_STEP,),
    ),
    Mutation(
        "router_aux_loss_coef: the term not averaged over the micro-batches", "vlrl/trainer/update.py",
        "self.router_aux_coef * balance / forwards", "self.router_aux_coef * balance",
        (ROUTER_STEP,),
    ),
    Mutation(
        "router_aux_loss_coef: a shared prompt counted once, not once per completion", "vlrl/models/routing.py",
        "(prompt_mask * uses[:, None])", "(prompt_mask * 1)", (ROUTER_TRL,),
    ),
    Mutation(
        "router_aux_loss_coef: null not the model's coefficient", "vlrl/models/routing.py",
        'return float(getattr(text, "router_aux_loss_coef", 0.0)) if is_mixture(model) else 0.0', "return 0.0",
        (ROUTER_TRL,),
    ),
    Mutation(
        "entropy_coef: no entropy computed", "vlrl/trainer/update.py",
        "run.pad_id, device, algo.has_entropy_bonus,", "run.pad_id, device, False,", (ENTROPY_BONUS,),
    ),
    Mutation("loss ignored (never cpgd)", "vlrl/algos/losses.py", 'if cfg.loss == "cpgd":', "if False:", (ALGOS,)),
    Mutation("loss ignored (never cispo)", "vlrl/algos/losses.py", 'if cfg.loss == "cispo":', "if False:", (TRL,)),
    Mutation("loss ignored (never sapo)", "vlrl/algos/losses.py", 'if cfg.loss == "sapo":', "if False:", (TRL,)),
    Mutation(
        "cispo's weight unbounded", "vlrl/algos/losses.py",
        "weight = torch.clamp(ratio, min=ratio_min, max=ratio_max).detach()", "weight = ratio.detach()", (TRL, VERL_LOSSES),
    ),
    Mutation(
        "cispo's weight not detached", "vlrl/algos/losses.py",
        "weight = torch.clamp(ratio, min=ratio_min, max=ratio_max).detach()",
        "weight = torch.clamp(ratio, min=ratio_min, max=ratio_max)", (TRL, VERL_LOSSES),
    ),
    Mutation(
        "sapo's temperatures swapped", "vlrl/algos/losses.py",
        "tau = torch.where(adv > 0, temperature_pos, temperature_neg)",
        "tau = torch.where(adv > 0, temperature_neg, temperature_pos)", (TRL,),
    ),
    Mutation("loss ignored (never reinforce)", "vlrl/algos/losses.py", 'if cfg.loss == "reinforce":', "if False:", (VERL_LOSSES,)),
    Mutation("loss ignored (never gmpo)", "vlrl/algos/losses.py", 'if cfg.loss == "gmpo":', "if False:", (VERL_LOSSES,)),
    Mutation("loss ignored (never kl_cov)", "vlrl/algos/losses.py", 'if cfg.loss == "kl_cov":', "if False:", (VERL_LOSSES,)),
    Mutation(
        "gmpo's clip ignored", "vlrl/algos/losses.py",
        "kept = sign * torch.minimum(sign * log_r, sign * clamped)", "kept = log_r", (VERL_LOSSES,),
    ),
    Mutation(
        "gmpo's arithmetic mean", "vlrl/algos/losses.py",
        "ratio = torch.exp((kept * mask).sum(dim=-1, keepdim=True) / tokens)",
        "ratio = (torch.exp(kept) * mask).sum(dim=-1, keepdim=True) / tokens", (VERL_LOSSES,),
    ),
    Mutation(
        "kl_cov's penalty dropped", "vlrl/algos/losses.py",
        "PolicyLoss(torch.where(chosen, loss + coef * log_r.abs(), loss), none, none)", "PolicyLoss(loss, none, none)",
        (VERL_LOSSES,),
    ),
    Mutation(
        "kl_cov_ratio ignored", "vlrl/algos/losses.py",
        "torch.topk(cov, max(1, int(cov.numel() * share)))", "torch.topk(cov, 1)", (VERL_LOSSES,),
    ),
    Mutation(
        "kl_cov_coef ignored", "vlrl/algos/losses.py",
        "cfg.kl_cov_ratio, cfg.kl_cov_coef)", "cfg.kl_cov_ratio, 1.0)", (VERL_LOSSES,),
    ),
    Mutation(
        "kl_cov picks the tokens that covary least", "vlrl/algos/losses.py",
        "torch.topk(cov, max(1, int(cov.numel() * share)))", "torch.topk(-cov, max(1, int(cov.numel() * share)))",
        (VERL_LOSSES,),
    ),
    Mutation(
        "cispo_bounds ignored (always trl's)", "vlrl/algos/losses.py",
        'if cfg.cispo_bounds == "trl" else', 'if True else', (VERL_LOSSES,),
    ),
    Mutation("loss ignored (never clip_cov)", "vlrl/algos/losses.py", 'if cfg.loss == "clip_cov":', "if False:", (VERL_LOSSES,)),
    Mutation(
        "clip_cov detaches nothing", "vlrl/algos/losses.py",
        "keep[chosen[:, 0], chosen[:, 1]] = 0", "pass", (VERL_LOSSES,),
    ),
    Mutation(
        "clip_cov_ratio ignored", "vlrl/algos/losses.py",
        "count = max(int(share * float(mask.sum())), 1)", "count = 1", (VERL_LOSSES,),
    ),
    Mutation(
        "clip_cov_lb ignored", "vlrl/algos/losses.py",
        "bounds = (cfg.clip_cov_lb, cfg.clip_cov_ub)", "bounds = (1.0, cfg.clip_cov_ub)", (VERL_LOSSES,),
    ),
    Mutation(
        "clip_cov_ub ignored", "vlrl/algos/losses.py",
        "bounds = (cfg.clip_cov_lb, cfg.clip_cov_ub)", "bounds = (cfg.clip_cov_lb, 5.0)", (VERL_LOSSES,),
    ),
    Mutation("loss ignored (never vespo)", "vlrl/algos/losses.py", 'if cfg.loss == "vespo":', "if False:", (TRL,)),
    Mutation(
        "vespo's powers swapped", "vlrl/algos/losses.py",
        "k_seq = torch.where(nonnegative, k[0], k[1])", "k_seq = torch.where(nonnegative, k[1], k[0])", (TRL,),
    ),
    Mutation(
        "vespo's decays swapped", "vlrl/algos/losses.py",
        "lam_seq = torch.where(nonnegative, lam[0], lam[1])", "lam_seq = torch.where(nonnegative, lam[1], lam[0])",
        (TRL,),
    ),
    Mutation(
        "vespo's engine weights not folded in", "vlrl/algos/losses.py",
        "    if is_weights is not None:\n        seq = seq", "    if False:\n        seq = seq", (LOSSES,),
    ),
    Mutation(
        "vespo's engine weights multiplied again", "vlrl/algos/losses.py",
        'if is_weights is not None and cfg.loss != "vespo":', "if is_weights is not None:", (LOSSES,),
    ),
    Mutation(
        "off_policy_mask ignored", "vlrl/algos/losses.py",
        "    if cfg.off_policy_mask is not None:\n", "    if False:\n", (TRL, OFF_POLICY),
    ),
    Mutation(
        "off_policy_mask's threshold fixed", "vlrl/algos/losses.py",
        "(mean <= threshold)", "(mean <= 0.5)", (TRL, OFF_POLICY),
    ),
    Mutation(
        "off_policy_mask on the old log-probs, not the engine's", "vlrl/trainer/update.py",
        "sampling_logp=engine_logp,", "sampling_logp=None,", (OFF_POLICY,),
    ),
    Mutation(
        "kl_bias_correction ignored", "vlrl/algos/losses.py",
        "        if cfg.kl_bias_correction:  # times", "        if False:  # times", (TRL,),
    ),
    Mutation(
        "kl_bias_correction's ratio detached", "vlrl/algos/losses.py",
        "kl = kl * torch.exp(log_ratio(logp, old_logp, mask, cfg.ratio_level))",
        "kl = kl * torch.exp(log_ratio(logp, old_logp, mask, cfg.ratio_level)).detach()", (TRL,),
    ),
    Mutation(
        "epsilon ignored", "vlrl/algos/losses.py",
        "mask, cfg.epsilon, epsilon_high, cfg.ratio_level", "mask, 0.2, epsilon_high, cfg.ratio_level", (ALGOS,),
    ),
    Mutation(
        "CPGD drift_clip ignored", "vlrl/algos/losses.py", "cfg.drift_coef, cfg.drift_clip)", "cfg.drift_coef, 2.0)",
        (ALGOS,),
    ),
    Mutation(
        "rollout_correction.enabled ignored", "vlrl/trainer/update.py",
        "self.algo.rollout_correction.enabled and", "True and", (CORRECTION,),
    ),
    Mutation(
        "rollout_correction.mode ignored", "vlrl/trainer/update.py",
        "c.mode, c.clip_min, c.clip_max", '"sequence_mask", c.clip_min, c.clip_max', (CORRECTION,),
    ),
    Mutation(
        "rollout_correction.clip_min ignored", "vlrl/trainer/update.py",
        "c.mode, c.clip_min, c.clip_max", "c.mode, None, c.clip_max", (CORRECTION,),
    ),
    Mutation(
        "rollout_correction.clip_max ignored", "vlrl/trainer/update.py",
        "c.mode, c.clip_min, c.clip_max", "c.mode, c.clip_min, 3.0", (CORRECTION,),
    ),
    Mutation(
        "token_budget ignored", "vlrl/trainer/update.py", "(*shape, self.run.budget.tokens)", "(*shape, 16384)",
        (f"{TRAIN}::test_micro_batch_size_does_not_change_the_gradient",),
    ),
    Mutation(
        "halve_on_oom ignored", "vlrl/trainer/budget.py",
        "if not (self.halve_on_oom and self.recoverable):", "if not self.recoverable:",
        (f"{OOM}::test_with_halve_on_oom_off_running_out_of_memory_ends_the_update_at_the_budget_set",),
    ),
    Mutation(
        "the failed pass's gradients kept", "vlrl/trainer/update.py",
        "self.run.strategy.discard_pass(self.run.model)\n        sums.clear()", "sums.clear()",
        (f"{OOM}::test_an_update_that_runs_out_of_memory_is_done_again_at_half_the_budget_as_a_run_at_that_budget",),
    ),
    Mutation(
        "the rollout's halve_on_oom ignored", "vlrl/trainer/rl.py",
        "cfg.trainer.halve_on_oom and run.strategy.recovers(),", "run.strategy.recovers(),",
        (f"{OOM}::test_with_halve_on_oom_off_a_rollout_that_runs_out_of_memory_ends_the_run",),
    ),
    Mutation(
        "the rollout recovers where the strategy cannot", "vlrl/trainer/rl.py",
        "cfg.trainer.halve_on_oom and run.strategy.recovers(),", "cfg.trainer.halve_on_oom,",
        (f"{OOM}::test_with_halve_on_oom_off_a_rollout_that_runs_out_of_memory_ends_the_run",),
    ),
    Mutation(
        "a rollout's parts before the failed one made again", "vlrl/rollout/parts.py",
        "            self.undo()\n", "            self.undo()\n            decoded = Decoded(params.n)\n",
        ("tests/rollout/test_parts.py",),
    ),
    Mutation(
        "the thinking judge's halve_on_oom ignored", "vlrl/trainer/rl.py",
        'cfg.trainer.halve_on_oom, warn=self.warn, what="thinking judge",', 'False, warn=self.warn, what="thinking judge",',
        ("tests/trainer/test_thinking.py::test_the_trainer_hands_a_local_judge_its_halve_on_oom",),
    ),
    Mutation(
        "a failed rollout forward's state kept", "vlrl/trainer/rl.py",
        "run.strategy.recovers(), self.discard_sampling", "run.strategy.recovers(), lambda: None",
        (f"{OOM}::{ROLLOUT_OOM}[fsdp2]",),
    ),
    Mutation(
        "a prompt's pieces not joined", "vlrl/rollout/parts.py", "if part.first:  # another piece", "if False:  # another piece",
        ("tests/rollout/test_parts.py",),
    ),
    Mutation(
        "the update scores at temperature 1", "vlrl/trainer/update.py",
        "run.model, batch, micro.tolist(), self.rollout.temperature,", "run.model, batch, micro.tolist(), 1.0,", (MOVED,),
    ),
    Mutation(
        "old log-probs recomputed at temperature 1", "vlrl/trainer/update.py",
        "model, batch, micro, self.rollout.temperature,", "model, batch, micro, 1.0,", (RECOMPUTE_SHARED,),
    ),
    # -- what the rollout and its rewards take of the options (rl.py, thinking.py) ----------------
    Mutation(
        "rollout.num_generations not passed to the engine", "vlrl/trainer/rl.py", LIMITS,
        "n, length = 8, limits.max_new_tokens",
        (f"{OPTIONS}::test_a_step_draws_prompts_per_step_prompts_of_num_generations_completions",),
    ),
    Mutation(
        "rollout.max_new_tokens not passed to the engine", "vlrl/trainer/rl.py", LIMITS,
        "n, length = limits.num_generations, 1024", (OVERLONG,),
    ),
    Mutation(
        "rollout.temperature not passed to the engine", "vlrl/trainer/rl.py", SAMPLING,
        "n, length, 1.0, r.top_p, r.top_k, r.min_p, r.repetition_penalty, min_new_tokens=r.min_new_tokens",
        (f"{MOVED}[temperature]",),
    ),
    Mutation(
        "rollout.top_p not passed to the engine", "vlrl/trainer/rl.py", SAMPLING,
        "n, length, r.temperature, 1.0, r.top_k, r.min_p, r.repetition_penalty, min_new_tokens=r.min_new_tokens",
        (f"{TOP}[top_p]",),
    ),
    Mutation(
        "rollout.top_k not passed to the engine", "vlrl/trainer/rl.py", SAMPLING,
        "n, length, r.temperature, r.top_p, 0, r.min_p, r.repetition_penalty, min_new_tokens=r.min_new_tokens",
        (f"{TOP}[top_k]",),
    ),
    Mutation(
        "rollout.min_p not passed to the engine", "vlrl/trainer/rl.py", SAMPLING,
        "n, length, r.temperature, r.top_p, r.top_k, 0.0, r.repetition_penalty, min_new_tokens=r.min_new_tokens",
        (f"{TOP}[min_p]",),
    ),
    Mutation(
        "rollout.repetition_penalty not passed to the engine", "vlrl/trainer/rl.py", SAMPLING,
        "n, length, r.temperature, r.top_p, r.top_k, r.min_p, min_new_tokens=r.min_new_tokens", (PENALTY,),
    ),
    Mutation(
        "rollout.min_new_tokens not passed to the engine", "vlrl/trainer/rl.py", SAMPLING,
        "n, length, r.temperature, r.top_p, r.top_k, r.min_p, r.repetition_penalty", (f"{MIN_NEW}[3]",),
    ),
    Mutation(
        "rollout.min_new_tokens left out of a foreign engine's draw", "vlrl/trainer/rl.py",
        "SamplingFilter(banned, r.top_k, r.top_p, r.min_p, first, penalty, r.min_new_tokens, stops)",
        "SamplingFilter(banned, r.top_k, r.top_p, r.min_p, first, penalty)", (MIN_NEW_DRAWN,),
    ),
    Mutation(
        "the draw's min_new_tokens ignored in the sampled column", "vlrl/models/policy.py",
        "history = sampler is not None and sampler.reads_history",
        "history = sampler is not None and sampler.repetition_penalty != 1",
        (f"{POLICY}::test_before_min_new_tokens_the_sampled_column_is_the_draw_without_the_end_tokens",),
    ),
    Mutation(
        "the HF engine bans the end tokens at every step, or never", "vlrl/rollout/decoding.py",
        "allowed = self.sampler.apply(logits, position=self.drawn)", "allowed = self.sampler.apply(logits)",
        (f"{HF_ENGINE}::test_no_completion_ends_before_min_new_tokens_and_its_log_probs_stay_the_policys",),
    ),
    Mutation(
        "the HF engine's count of drawn tokens never advances", "vlrl/rollout/decoding.py",
        "            self.drawn += 1", "            pass",
        (f"{HF_ENGINE}::test_no_completion_ends_before_min_new_tokens_and_its_log_probs_stay_the_policys",),
    ),
    Mutation(
        "the static step's count of drawn tokens not reset for a new batch", "vlrl/rollout/decoding.py",
        "            self.drawn.zero_()", "            pass",
        (f"{HF_ENGINE}::test_no_completion_ends_before_min_new_tokens_and_its_log_probs_stay_the_policys[static step]",),
    ),
    Mutation(
        "rollout.max_rows ignored", "vlrl/trainer/rl.py", "rows = cfg.rollout.max_rows or None", "rows = None",
        (f"{OPTIONS}::test_rollout_max_rows_decodes_a_step_in_calls_of_at_most_that_many_rows", f"{OOM}::{ROLLOUT_OOM}[replicated]"),
    ),
    Mutation(
        "vlrl plan ignores rollout.max_rows", "vlrl/models/memory.py",
        "return call_rows(prompts, stage.num_generations + greedy, cfg.rollout.max_rows)",
        "return call_rows(prompts, stage.num_generations + greedy, 0)",
        ("tests/app/test_plan.py::test_the_workload_is_one_gpus_share_of_the_prompts_and_the_stage_with_the_most_tokens",),
    ),
    Mutation(
        "rollout.repetition_penalty left out of a foreign engine's draw", "vlrl/trainer/rl.py",
        "SamplingFilter(banned, r.top_k, r.top_p, r.min_p, first, penalty, r.min_new_tokens, stops)",
        "SamplingFilter(banned, r.top_k, r.top_p, r.min_p, first, 1.0, r.min_new_tokens, stops)", (PENALTY_DRAWN,),
    ),
    Mutation(
        "the draw's penalty ignored in the sampled column", "vlrl/models/policy.py",
        "allowed = self.sampler.apply(scaled, seen, position)", "allowed = self.sampler.apply(scaled, None, position)", (f"{POLICY}::test_under_a_repetition_penalty_the_sampled_column_is_the_draw_that_penalized_each_rows_seen_tokens",),
    ),
    Mutation(
        "the HF engine's log-probs of the penalized draw", "vlrl/rollout/decoding.py",
        "logits = drawn_from / temperature if scale else drawn_from",
        "logits = drawn_from / temperature if scale else drawn_from; step_logp = torch.log_softmax(logits, dim=-1)",
        (PENALTY,),
    ),
    Mutation(
        "min-p ignored by the HF engine", "vlrl/rollout/hf.py",
        "(params.top_k, params.top_p, params.min_p)", "(params.top_k, params.top_p, 0.0)", (f"{TOP}[min_p]",),
    ),
    *family(
        "vlrl/models/policy.py", (MIN_P,),
        ("min-p after top-k / top-p (in vLLM's order too)", "if self.min_p_first:", "if False:"),
        ("min-p before top-k / top-p (in transformers' order too)", "if self.min_p_first:", "if True:"),
    ),
    Mutation("accuracy_reward ignored", "vlrl/trainer/rl.py", "name = self.cfg.algo.accuracy_reward", 'name = ""', (KL, MASK)),
    Mutation(
        "overlong_buffer ignored", "vlrl/trainer/rl.py",
        "algo.overlong_buffer, algo.overlong_penalty", "1, algo.overlong_penalty", (OVERLONG,),
    ),
    Mutation(
        "overlong_penalty not passed", "vlrl/trainer/rl.py",
        "algo.overlong_buffer, algo.overlong_penalty", "algo.overlong_buffer, 1.0", (OVERLONG,),
    ),
    Mutation(
        "length_control.bonus not passed", "vlrl/trainer/rl.py",
        "length.min_tokens, length.max_tokens, length.bonus)", "length.min_tokens, length.max_tokens, 0.2)",
        (SHAPING,),
    ),
    Mutation(
        "rollout.engine ignored (always hf)", "vlrl/rollout/__init__.py",
        "choose_engine(rollout.engine, rollout.options),", 'choose_engine("hf", rollout.options),',
        (f"{SEAM}::test_the_engine_gets_the_policys_weights_after_every_update",),
    ),
    Mutation(
        "output_dir ignored", "vlrl/trainer/run.py", "self.dir = Path(t.output_dir)", 'self.dir = Path("runs/refcoco")',
        (f"{TRAIN}::test_train_command_runs_and_changes_the_weights",),
    ),
    Mutation(
        "Trust-GRPO scorer ignored", "vlrl/trainer/rl.py",
        "self.thinking = make_scorer(cfg.algo.trust, cfg.model, judge_rows)", "self.thinking = None", (SHAPING,),
    ),
    Mutation(
        "Trust-GRPO code: alpha ignored", "vlrl/algos/shaping.py",
        "return trust_bonus_code(thinking, outcome, trust.alpha, step, trust.decay_steps)",
        "return trust_bonus_code(thinking, outcome, 0.3, step, trust.decay_steps)", (ALGOS,),
    ),
    Mutation(
        "Trust-GRPO paper: alpha ignored", "vlrl/algos/shaping.py",
        "return trust_bonus_paper(thinking, correct, trust.alpha, step, trust.decay_steps)",
        "return trust_bonus_paper(thinking, correct, 0.3, step, trust.decay_steps)", (ALGOS,),
    ),
    Mutation(
        "Trust-GRPO code: decay_steps ignored", "vlrl/algos/shaping.py",
        "return trust_bonus_code(thinking, outcome, trust.alpha, step, trust.decay_steps)",
        "return trust_bonus_code(thinking, outcome, trust.alpha, step, 12000.0)", (ALGOS,),
    ),
    Mutation(
        "Trust-GRPO paper: decay_steps ignored", "vlrl/algos/shaping.py",
        "return trust_bonus_paper(thinking, correct, trust.alpha, step, trust.decay_steps)",
        "return trust_bonus_paper(thinking, correct, trust.alpha, step, 1000.0)", (ALGOS,),
    ),
    Mutation(
        "Trust-GRPO HTTP timeout_s ignored", "vlrl/trainer/thinking.py",
        "http_scorer(spec, cfg.timeout_s)", "http_scorer(spec, 30.0)", (THINKING,),
    ),
    Mutation(
        "Trust-GRPO judge_max_new_tokens ignored", "vlrl/trainer/thinking.py",
        "cfg.judge_max_new_tokens", "16", (THINKING,),
    ),
    Mutation(
        "Trust-GRPO protocol ignored", "vlrl/trainer/thinking.py",
        'sophiavl = cfg.protocol == "sophiavl_r1"', "sophiavl = False", (SOPHIAVL,),
    ),
    Mutation(
        "Trust-GRPO judge_model ignored", "vlrl/trainer/thinking.py",
        "sophiavl_http_scorer(spec, cfg.judge_model, cfg.timeout_s)", 'sophiavl_http_scorer(spec, "", cfg.timeout_s)',
        (SOPHIAVL,),
    ),
    Mutation(
        "temporal.enabled ignored", "vlrl/trainer/rl.py",
        "self.temporal_contrast(items, decoded, params) if algo.temporal.enabled else",
        "self.temporal_contrast(items, decoded, params) if False else", (SHAPING,),
    ),
    Mutation(
        "temporal.shuffled_fraction ignored", "vlrl/trainer/rl.py",
        "int(self.cfg.algo.temporal.shuffled_fraction", "int(0.5", (TEMPORAL,),
    ),
    Mutation("length_control.enabled ignored", "vlrl/trainer/rl.py", "if algo.length_control.enabled:", "if False:", (SHAPING,)),
    Mutation(
        "length_control min_tokens and max_tokens ignored", "vlrl/trainer/rl.py",
        "length.min_tokens, length.max_tokens", "320, 512", (SHAPING,),
    ),
    Mutation(
        "prompts_per_step ignored", "vlrl/trainer/rl.py",
        "B = self.cfg.trainer.prompts_per_step // procs.world", "B = 8 // procs.world",
        (f"{OPTIONS}::test_a_step_draws_prompts_per_step_prompts_of_num_generations_completions",),
    ),
    # -- advantages ---------------------------------------------------------------------------
    Mutation(
        "advantage ignored (always grpo)", "vlrl/algos/advantages.py", 'if cfg.advantage == "grpo":', "if True:",
        (ALGOS,),
    ),
    Mutation("rloo dispatched to dr_grpo", "vlrl/algos/advantages.py", "adv = rloo(rewards)", "adv = dr_grpo(rewards)", (ALGOS,)),
    Mutation(
        "reinforce_baseline weighs completions, not tokens", "vlrl/algos/advantages.py",
        "        return whitened(rewards, lengths)", "        return whitened(rewards, torch.ones_like(rewards))", (ALGOS,),
    ),
    Mutation(
        "kl_in=reward takes nothing off the reward", "vlrl/algos/advantages.py",
        "rewards = rewards - penalty.sum(dim=-1)", "rewards = rewards", (ALGOS, KL_IN),
    ),
    Mutation(
        "kl_in=returns takes each token's KL only, not the later ones'", "vlrl/algos/advantages.py",
        "later = (penalty * mask).flip(-1).cumsum(-1).flip(-1)", "later = penalty * mask", (ALGOS, KL_IN),
    ),
    Mutation(
        "kl_in=returns whitens reinforce_baseline before the KL", "vlrl/algos/advantages.py",
        "return whitened(kl_returns(rewards, penalty, lengths), mask) * mask",
        "return kl_returns(whitened(rewards, lengths), penalty, lengths)", (ALGOS,),
    ),
    Mutation(
        "entropy_target ignored (the coefficient fixed)", "vlrl/algos/entropy_control.py",
        "        if self.target is None:\n            return\n        if entropy", "        return\n        if entropy",
        (ENTROPY_CONTROL, ADAPTIVE_ENTROPY, ENTROPY_RESUME),
    ),
    Mutation(
        "entropy_target: a bonus before any entropy is known", "vlrl/algos/entropy_control.py",
        "return self.coef if self.last <= self.target else 0.0", "return self.coef", (ENTROPY_CONTROL, ADAPTIVE_ENTROPY),
    ),
    Mutation(
        "entropy_coef_max ignored", "vlrl/algos/entropy_control.py",
        "self.coef = min(self.coef + self.delta, self.high)", "self.coef = self.coef + self.delta",
        (ENTROPY_CONTROL, ADAPTIVE_ENTROPY),
    ),
    Mutation(
        "entropy_coef_min ignored", "vlrl/algos/entropy_control.py",
        "self.coef = max(self.coef - self.delta, self.low)", "self.coef = self.coef - self.delta", (ENTROPY_CONTROL,),
    ),
    Mutation(
        "entropy_coef_delta ignored", "vlrl/algos/entropy_control.py",
        "self.coef = min(self.coef + self.delta, self.high)", "self.coef = min(self.coef + 0.005, self.high)",
        (ENTROPY_CONTROL, ADAPTIVE_ENTROPY),
    ),
    Mutation(
        "entropy_target: the loss takes entropy_coef, not the controller's", "vlrl/trainer/update.py",
        "entropy_coef=entropy_coef,", "entropy_coef=None,", (ADAPTIVE_ENTROPY,),
    ),
    Mutation(
        "entropy_target: the coefficient never follows the steps", "vlrl/trainer/rl.py",
        "                    self.updater.follow_entropy(sums)\n", "                    pass\n", (ADAPTIVE_ENTROPY, ENTROPY_RESUME),
    ),
    Mutation(
        "entropy_target: the coefficient not restored on resume", "vlrl/trainer/rl.py",
        'self.restore_part("entropy_control", self.updater.entropy_control)', "pass", (ENTROPY_RESUME,),
    ),
    Mutation(
        "eval.repetition_penalty ignored in the draw", "vlrl/rollout/decoding.py",
        "        if params.repetition_penalty == 1:\n            return\n", "        return\n",
        ("tests/rollout/test_hf_engine.py::test_a_repetition_penalty_decodes_as_transformers_generate_in_both_loops",
         "tests/eval/test_eval.py::test_eval_decodes_with_eval_repetition_penalty_or_the_checkpoints"),
    ),
    Mutation(
        "the repetition penalty of the answer's own tokens not kept", "vlrl/rollout/decoding.py",
        "            self.seen[index, choice] = True\n", "            pass\n",
        ("tests/rollout/test_hf_engine.py::test_a_repetition_penalty_decodes_as_transformers_generate_in_both_loops",),
    ),
    Mutation(
        "the static step's draw not told the batch's prompts", "vlrl/rollout/hf.py",
        "        decoding.draw.begin(", "        (lambda *a: None)(",
        ("tests/rollout/test_hf_engine.py::test_a_repetition_penalty_decodes_as_transformers_generate_in_both_loops",),
    ),
    Mutation(
        "eval.repetition_penalty null: the checkpoint's not read", "vlrl/eval/harness.py",
        "            penalty = checkpoint_repetition_penalty(cfg.model)", "            penalty = 1.0",
        ("tests/eval/test_eval.py::test_eval_decodes_with_eval_repetition_penalty_or_the_checkpoints",),
    ),
    Mutation(
        "eval.repetition_penalty not given to the engine", "vlrl/eval/harness.py",
        "        repetition_penalty=settings.repetition_penalty,\n", "",
        ("tests/eval/test_eval.py::test_eval_decodes_with_eval_repetition_penalty_or_the_checkpoints",),
    ),
    Mutation(
        "model.max_prompt_tokens ignored", "vlrl/models/prompting.py",
        "if model.max_prompt_tokens is not None and tokens > model.max_prompt_tokens:", "if False:",
        ("tests/models/test_prompting.py::test_a_prompt_over_max_prompt_tokens_leaves_its_sample_out_and_the_others_render",
         "tests/reliability/test_bad_media.py::test_a_prompt_over_max_prompt_tokens_costs_its_sample_in_training_and_evaluation"),
    ),
    Mutation(
        "model.chat_template_kwargs ignored", "vlrl/models/prompting.py",
        "tokenize=False, **model.chat_template_kwargs", "tokenize=False",
        ("tests/trainer/test_prefill.py::test_chat_template_kwargs_reach_the_template_and_a_closed_block_is_no_prefill",),
    ),
    Mutation(
        "ref_sync_every ignored (the reference never moves)", "vlrl/trainer/rl.py",
        "                    mix_into(self.updater.reference, self.run.model, algo.ref_sync_alpha)\n",
        "                    pass\n", (REF_SYNC_EVERY, REF_SYNC_RESUME),
    ),
    Mutation(
        "ref_sync_every: a mix after every optimizer step", "vlrl/trainer/rl.py",
        "self.run.optimizer_steps % algo.ref_sync_every == 0", "True", (REF_SYNC_EVERY,),
    ),
    Mutation(
        "ref_sync_every: optimizer steps counted from 0 again on resume", "vlrl/trainer/run.py",
        'self.optimizer_steps = state.get("optimizer_steps", self.step * optimizer_steps_per_step)',
        "self.optimizer_steps = 0", (REF_SYNC_RESUME,),
    ),
    Mutation(
        "ref_sync_alpha taken as the reference's share", "vlrl/trainer/reference.py",
        "target.mul_(1.0 - alpha).add_(source.to(target.device, target.dtype), alpha=alpha)",
        "target.mul_(alpha).add_(source.to(target.device, target.dtype), alpha=1.0 - alpha)",
        (REF_SYNC_TRL, REF_SYNC_EVERY),
    ),
    Mutation(
        "ref_sync_every: the moved reference not restored on resume", "vlrl/trainer/rl.py",
        'self.restore_part("reference", ReferenceWeights(reference, run.procs.main), shared=True)', "pass",
        (REF_SYNC_RESUME,),
    ),
    Mutation(
        "a shared part read from each process's own file alone", "vlrl/trainer/rl.py",
        "saved = None if first is None else {**first, **saved}", "saved = saved",
        (f"{REF_SYNC}::test_a_process_reads_its_shards_from_its_own_part_and_the_whole_weights_from_process_0s",),
    ),
    Mutation(
        "kl_target ignored (the coefficient fixed)", "vlrl/algos/kl_control.py",
        "        if self.target is None:\n            return", "        return", (KL_CONTROL, ADAPTIVE_KL),
    ),
    Mutation(
        "kl_horizon ignored", "vlrl/algos/kl_control.py",
        "error * completions / self.horizon", "error * completions / 10000", (KL_CONTROL, ADAPTIVE_KL),
    ),
    Mutation(
        "kl_target: the penalty at beta, not the controller's coefficient", "vlrl/trainer/rl.py",
        "self.kl_control.value * kl.view(", "algo.beta * kl.view(", (ADAPTIVE_KL,),
    ),
    Mutation(
        "the replay buffer not restored on resume", "vlrl/trainer/rl.py",
        'self.restore_part("replay", self.replay)', "pass",
        ("tests/trainer/test_replay.py::test_a_resumed_run_replays_the_buffer_it_saved",),
    ),
    Mutation(
        "kl_target: the coefficient not restored on resume", "vlrl/trainer/rl.py",
        'self.restore_part("kl_control", self.kl_control)', "pass", (ADAPTIVE_KL,),
    ),
    Mutation(
        "kl_in: the KL also in the loss", "vlrl/trainer/rl.py",
        'if algo.beta > 0 and algo.kl_in == "loss" else None', "if algo.beta > 0 else None", (KL_IN,),
    ),
    Mutation(
        "kl_in: the sampling policy's KL to itself", "vlrl/trainer/update.py",
        "(sampled.logp, self.reference_logprobs(batch))", "(sampled.logp, sampled.logp)", (KL_IN,),
    ),
    Mutation(
        "kl_in: the update forwards the sampling policy again", "vlrl/trainer/rl.py",
        "elif sampled is not None and self.updater.moves:", "elif False:",
        (f"{OPTIONS}::test_the_kl_in_the_reward_shares_its_forward_of_the_sampling_policy_with_the_update",),
    ),
    Mutation(
        "kl_in=returns: the tokens' advantages out of their order", "vlrl/trainer/update.py",
        "else advantages[micro, :width]", "else advantages[micro, :width].flip(1)",
        ("tests/trainer/test_update.py::test_advantages_per_token_weigh_each_tokens_term_by_its_own",),
    ),
    Mutation(
        "reinforce_baseline handed no token counts", "vlrl/trainer/rl.py",
        "lengths = torch.tensor([[len(c.token_ids) for c in g.completions] for g in groups])",
        "lengths = torch.ones_like(rewards)",
        (f"{OPTIONS}::test_reinforce_baseline_weighs_each_completion_by_the_tokens_the_update_trains",),
    ),
    Mutation(
        "opo's baseline unweighted", "vlrl/algos/advantages.py",
        "return rewards - (weights * rewards).sum(dim=1, keepdim=True) / weights.sum(dim=1, keepdim=True)",
        "return dr_grpo(rewards)", (ALGOS,),
    ),
    Mutation(
        "optimal_token_baseline dispatched to dr_grpo", "vlrl/algos/advantages.py",
        "adv = optimal_token_baseline(rewards, energy, lengths, penalty if cfg.kl_in == \"returns\" else None)",
        "adv = dr_grpo(rewards)", (ALGOS, OTB_STEP),
    ),
    Mutation(
        "optimal_token_baseline's energy not summed along the path", "vlrl/algos/advantages.py",
        "cumulative = (energy * mask).cumsum(dim=-1) * mask", "cumulative = energy * mask", (ALGOS, OTB_STEP),
    ),
    Mutation(
        "optimal_token_baseline's returns without the KL", "vlrl/algos/advantages.py",
        "adv = optimal_token_baseline(rewards, energy, lengths, penalty if cfg.kl_in == \"returns\" else None)",
        "adv = optimal_token_baseline(rewards, energy, lengths, None)", (ALGOS,),
    ),
    Mutation(
        "optimal_token_baseline's importance weights not squared", "vlrl/algos/advantages.py",
        "return energy if is_weights is None else energy * is_weights**2",
        "return energy if is_weights is None else energy * is_weights", (ALGOS,),
    ),
    Mutation(
        "optimal_token_baseline without the importance weights", "vlrl/trainer/update.py",
        "        if self.corrects(batch):\n            expected", "        if False:\n            expected", (OTB_STEP,),
    ),
    Mutation(
        "optimal_token_baseline's pi from the engine, not the forward", "vlrl/trainer/update.py",
        "recompute = moves and (sum_pi_squared or ", "recompute = moves and (", (OTB_STEP,),
    ),
    Mutation(
        "the sum of squared probabilities is the exp-normalizer's", "vlrl/models/policy.py",
        "out.append(torch.exp(torch.logsumexp(2 * scaled, dim=-1) - 2 * lse))",
        "out.append(torch.exp(torch.logsumexp(2 * scaled, dim=-1) - lse))", (POLICY, OTB_STEP),
    ),
    Mutation(
        "the sum of squared probabilities under the sampler's distribution", "vlrl/models/policy.py",
        "out.append(torch.exp(torch.logsumexp(2 * scaled, dim=-1) - 2 * lse))",
        "out.append(torch.exp(torch.logsumexp(2 * allowed, dim=-1) - 2 * torch.logsumexp(allowed, dim=-1)))",
        (POLICY,),
    ),
    Mutation("gpg's alpha dropped", "vlrl/algos/advantages.py", "return alpha * dr_grpo(rewards)", "return dr_grpo(rewards)", (ALGOS,)),
    Mutation(
        "passk's lead not divided by the std", "vlrl/algos/advantages.py",
        "        lead = lead / (rewards.std(dim=1) + std_eps)",
        "        lead = lead", (ALGOS,),
    ),
    Mutation(
        "reinforce_plus_plus takes a baseline", "vlrl/algos/advantages.py",
        "        return whitened(rewards, lengths)", "        return whitened(dr_grpo(rewards), lengths)", (ALGOS,),
    ),
    Mutation("gdpo dispatched to grpo", "vlrl/algos/advantages.py", "adv = gdpo(rewards, cfg.std_eps)",
             "adv = grpo(rewards, cfg.std_eps)", (ALGOS,)),
    Mutation(
        "gdpo handed the total rewards", "vlrl/trainer/rl.py",
        "decoupled_rewards(g, algo.std_eps) if gdpo else g.reward", "g.reward", (GDPO,),
    ),
    Mutation(
        "gdpo's components at weight 1", "vlrl/trainer/rl.py",
        "weights = [group.task.reward_weights[n] for n in names]", "weights = [1.0 for n in names]", (GDPO,),
    ),
    Mutation(
        "gdpo normalises the components' sum, not each", "vlrl/algos/advantages.py",
        "return (centred / (components.std(dim=0, keepdim=True) + std_eps) * weights).sum(dim=1)",
        "return (centred * weights).sum(dim=1)", (ALGOS, GDPO),
    ),
    Mutation(
        "remax's baseline ignored", "vlrl/algos/advantages.py",
        "return rewards - baseline[:, None].to(rewards.dtype)", "return rewards - 0 * baseline[:, None].to(rewards.dtype)",
        (ALGOS, REMAX),
    ),
    Mutation(
        "remax's baseline a sampled completion's, not the greedy one's", "vlrl/trainer/rl.py",
        "dataclasses.replace(params, n=1, temperature=0.0)", "dataclasses.replace(params, n=1)", (REMAX,),
    ),
    Mutation(
        "remax's greedy row sampled among the others", "vlrl/trainer/rl.py",
        "dataclasses.replace(params, n=G + 1, greedy=1)", "dataclasses.replace(params, n=G + 1)", (REMAX,),
    ),
    Mutation(
        "a greedy row drawn as a sampled one", "vlrl/rollout/decoding.py",
        "choice = torch.where(self.greedy_rows[index], self.greedy(drawn_from), choice)", "pass",
        (f"{HF_ENGINE}::test_greedy_rows_decode_as_a_greedy_call_and_the_sampled_rows_as_a_call_sampling_every_row",),
    ),
    Mutation(
        "remax's baseline scored without the overlong penalty", "vlrl/trainer/rl.py",
        "            reward += float(self.overlong(", "            reward += 0 * float(self.overlong(", (REMAX,),
    ),
    Mutation(
        "advantage_std ignored", "vlrl/algos/advantages.py",
        "adv = grpo(rewards, cfg.std_eps, cfg.advantage_std)", "adv = grpo(rewards, cfg.std_eps)", (ALGOS,),
    ),
    Mutation(
        "passk's advantage_std ignored", "vlrl/algos/advantages.py",
        "adv = passk(rewards, cfg.std_eps, cfg.advantage_std)", "adv = passk(rewards, cfg.std_eps)", (ALGOS,),
    ),
    Mutation(
        "std_eps ignored", "vlrl/algos/advantages.py",
        "adv = grpo(rewards, cfg.std_eps, cfg.advantage_std)", "adv = grpo(rewards, 1e-4, cfg.advantage_std)", (ALGOS,),
    ),
    Mutation(
        "positive and negative weights swapped", "vlrl/algos/advantages.py",
        "adv * cfg.positive_weight, adv * cfg.negative_weight", "adv * cfg.negative_weight, adv * cfg.positive_weight", (ALGOS,),
    ),
    # -- UniVG-R1's difficulty weights (rl.py) ----------------------------------------------------
    *family(
        "vlrl/trainer/rl.py", (DIFFICULTY,),
        ("difficulty.weighting ignored (never weighted)", 'if d.weighting == "none":', "if True:"),
        ("difficulty.weighting fixed to exp",
         "difficulty_weights(means, d.weighting, d.power)", 'difficulty_weights(means, "exp", d.power)'),
        ("difficulty.power ignored",
         "difficulty_weights(means, d.weighting, d.power)", "difficulty_weights(means, d.weighting)"),
        ("difficulty.reward ignored", "g.scores.components[d.reward]", 'g.scores.components["iou"]'),
    ),
    Mutation(
        "cpgd_weighting ignored", "vlrl/algos/advantages.py",
        "adv = cpgd(rewards, cfg.cpgd_weighting, cfg.std_eps)", 'adv = cpgd(rewards, "std", cfg.std_eps)', (ALGOS,),
    ),
    Mutation(
        "cpgd std weighting ignored", "vlrl/algos/advantages.py",
        "return centered / (rewards.std(dim=1, keepdim=True) + std_eps)", "return centered", (ALGOS,),
    ),
    # -- the optimizer step (run.py) ------------------------------------------------------------
    Mutation("lr_schedule ignored", "vlrl/trainer/run.py", 'if t.lr_schedule == "linear":', "if False:", (SCHEDULE,)),
    Mutation("warmup_steps ignored", "vlrl/trainer/run.py", "if position < t.warmup_steps:", "if False:", (MASK,)),
    Mutation(
        "lr_schedule_per ignored", "vlrl/trainer/run.py",
        'if self.t.lr_schedule_per == "step":', "if True:", (PER_UPDATE,),
    ),
    Mutation("lr_min_ratio ignored", "vlrl/trainer/run.py", "floor = t.lr_min_ratio", "floor = 0.0", (MIN_LR,)),
    Mutation(
        "prompts_per_step not checked against the processes", "vlrl/trainer/run.py",
        "if t.prompts_per_step % self.procs.world:", "if False:",
        ("tests/parallel/test_distributed.py::test_a_batch_that_does_not_split_evenly_is_refused",),
    ),
    Mutation(
        "a checkout not installed finds no plugins", "vlrl/plugins.py",
        "return EntryPoints(project_entry_points(pyproject)) if pyproject.is_file() else EntryPoints(())",
        "return EntryPoints(())",
        ("tests/rollout/test_plugins.py::test_a_checkout_run_without_installing_finds_its_plugins_in_its_pyproject",),
    ),
    Mutation(
        "re's classes read off the first plane only", "rewards/text.py",
        'codes = array.array("I", range(sys.maxunicode + 1))', 'codes = array.array("I", range(0x10000))',
        ("tests/rewards/test_public_patterns.py",),
    ),
    Mutation(
        "the lean step keeps the layers it looked up at its first rollout", "vlrl/rollout/hf.py",
        "        self.decode_forward.refresh()  # the lean step looks the model's layers up again\n", "",
        ("tests/models/test_decode_step.py::test_the_engine_decodes_with_weights_stepped_in_place_or_replaced_since_its_last_rollout",),
    ),
    Mutation("weight_decay ignored", "vlrl/parallel/base.py", "weight_decay=weight_decay, fused", "weight_decay=0.0, fused", (DECAY,)),
    Mutation(
        "adam_betas ignored", "vlrl/trainer/run.py", 'group["betas"] = tuple(self.t.adam_betas)', "pass",
        (f"{OPTIONS}::test_adam_betas_step_the_policy_as_adamw_with_those_betas_does",),
    ),
    Mutation(
        "max_grad_norm ignored", "vlrl/trainer/run.py",
        "self.strategy.clip_gradients(self.t.max_grad_norm)", "self.strategy.clip_gradients(1e9)", (ENTROPY,),
    ),
    Mutation(
        "seed ignored by the sampling generator", "vlrl/trainer/run.py",
        "self.generator = torch.Generator(device=self.device).manual_seed(t.seed)",
        "self.generator = torch.Generator(device=self.device).manual_seed(42)",
        (f"{TRAIN}::test_the_seed_decides_the_samples_and_save_every_and_keep_last_the_checkpoints",),
    ),
    Mutation("trainer.steps ignored", "vlrl/trainer/rl.py", "for step in range(first, t.steps + 1):",
             "for step in range(first, 3):", (ENTROPY,)),
    Mutation("lr ignored", "vlrl/trainer/run.py", "self.strategy.build_optimizer(t.lr, t.weight_decay)",
             "self.strategy.build_optimizer(1e-6, t.weight_decay)", (DECAY,)),
    Mutation(
        "resume=auto ignored (always a fresh run)", "vlrl/trainer/run.py", "return own[-1] if own else None",
        "return None",
        (f"{TRAIN}::test_resuming_from_a_checkpoint_gives_the_uninterrupted_run",),
    ),
    Mutation(
        "parallel ignored (always replicated)", "vlrl/parallel/__init__.py",
        'cls = strategy_class(t.parallel, f"{section}.parallel")', 'cls = strategy_class("replicated", f"{section}.parallel")',
        ("tests/rollout/test_plugins.py::test_an_engine_and_a_strategy_from_outside_the_package_train_with_their_own_options",),
    ),
    Mutation(
        "report_to ignored", "vlrl/trainer/logs.py", "open_trackers(t.report_to, run)", 'open_trackers(["jsonl"], run)',
        ("tests/trainer/test_trackers.py::test_a_run_reports_each_step_to_the_trackers_of_report_to",),
    ),
    Mutation(
        "progress ignored", "vlrl/trainer/logs.py", "enabled = self.enabled and self.t.progress", "enabled = self.enabled",
        ("tests/trainer/test_progress.py::test_sft_prints_plain_progress_lines_when_stdout_is_not_a_terminal",),
    ),
    Mutation(
        "log_every ignored", "vlrl/trainer/logs.py", "self.run.resume_step, t.log_every, fields",
        "self.run.resume_step, 10, fields",
        ("tests/trainer/test_progress.py::test_sft_prints_plain_progress_lines_when_stdout_is_not_a_terminal",),
    ),
    Mutation(
        "seed ignored by the data stream", "vlrl/trainer/run.py",
        "[s.weight for s in sources], t.seed)", "[s.weight for s in sources], 42)",
        (f"{TRAIN}::test_the_seed_decides_the_samples_and_save_every_and_keep_last_the_checkpoints",),
    ),
    Mutation(
        "save_every ignored", "vlrl/trainer/run.py",
        "if step % self.t.save_every == 0 or", "if False or",
        (f"{TRAIN}::test_the_seed_decides_the_samples_and_save_every_and_keep_last_the_checkpoints",),
    ),
    Mutation(
        "keep_last ignored", "vlrl/trainer/run.py", "self.t.keep_last,", "100,",
        (f"{TRAIN}::test_the_seed_decides_the_samples_and_save_every_and_keep_last_the_checkpoints",),
    ),
    Mutation(
        "log_samples_every ignored", "vlrl/trainer/rl.py", "step % t.log_samples_every == 0 or", "False or",
        (f"{TRAIN}::test_the_seed_decides_the_samples_and_save_every_and_keep_last_the_checkpoints",),
    ),
    Mutation(
        "max_consecutive_nonfinite ignored", "vlrl/trainer/run.py",
        "self.consecutive_nonfinite >= self.t.max_consecutive_nonfinite", "self.consecutive_nonfinite >= 3",
        (f"{TRAIN}::test_non_finite_updates_are_skipped_and_stop_the_run",),
    ),
    Mutation(
        "master_weights ignored", "vlrl/parallel/replicated.py",
        "MasterWeights(trainable, self.master_weights)", "MasterWeights(trainable, True)",
        ("tests/parallel/test_precision.py",),
    ),
    # -- the vLLM engine's options (rollout.vllm) reach vllm.LLM as vLLM names them ---------------
    *family(
        "vlrl/rollout/vllm.py", (VLLM_OPTIONS,),
        ("vllm tensor_parallel_size ignored", "tensor_parallel_size=v.tensor_parallel_size,", "tensor_parallel_size=1,"),
        ("vllm enforce_eager ignored", "enforce_eager=v.enforce_eager or not cuda,", "enforce_eager=not cuda,"),
        ("vllm max_model_len ignored", "if v.max_model_len:", "if False:"),
        ("vllm gpu_memory_utilization ignored",
         "gpu_memory_utilization=v.gpu_memory_utilization", "gpu_memory_utilization=0.3"),
        ("vllm sleep mode always on", "enable_sleep_mode=v.sleep", "enable_sleep_mode=True"),
        ("vllm sleep ignored between rollouts", "self.can_sleep = cuda and v.sleep", "self.can_sleep = cuda"),
        ("vllm kv_cache_memory_bytes ignored", "if v.kv_cache_memory_bytes:", "if False:"),
    ),
    *family(
        "vlrl/rollout/vllm.py",
        ("tests/app/test_plan.py::test_vllm_is_refused_where_its_share_holds_not_its_weights_and_one_sequence_of_its_context",),
        ("vllm max_model_len ignored by the plan", "length = run if auto_fit else options.max_model_len or shape.context",
         "length = run if auto_fit else shape.context"),
        ("vllm auto-fit planned as the model's whole context",
         "length = run if auto_fit else options.max_model_len or shape.context",
         "length = shape.context if auto_fit else options.max_model_len or shape.context"),
        ("vllm tensor_parallel_size ignored by the plan", "weights = shape.params * shape.dtype_bytes / tp",
         "weights = shape.params * shape.dtype_bytes"),
    ),
    Mutation(
        "the plan's sequence cache leaves out linear attention's states", "vlrl/models/memory.py",
        "        return tokens * self.kv_token_bytes + self.state_bytes", "        return tokens * self.kv_token_bytes",
        ("tests/app/test_plan.py::test_a_shapes_cache_bytes_are_what_the_static_step_allocates",),
    ),
    Mutation(
        "vllm memory planned as if it never slept", "vlrl/rollout/vllm.py",
        "return share, 0.0 if options.sleep else share", "return share, share", ("tests/app/test_plan.py", VLLM_OPTIONS),
    ),
    # -- parallelism (vlrl/parallel/, run.py) and what it touches --------------------------------
    Mutation(
        "fsdp2: no idle micro-batches for the processes with fewer", "vlrl/parallel/fsdp2.py",
        "        return planned + [[] for _ in range(self.procs.max(len(planned)) - len(planned))]", "        return planned",
        (f"{PARALLEL}::test_a_process_with_fewer_micro_batches_runs_empty_ones_only_when_forwards_are_collective",),
    ),
    Mutation(
        "fsdp2: an unused vision tower's gradients not reduced", "vlrl/parallel/fsdp2.py",
        "root.set_reduce_scatter_unused_params(True, recurse=False)", "root.set_reduce_scatter_unused_params(False, recurse=False)",
        (FSDP_FOUR,),
    ),
    Mutation(
        "fsdp2 on torch 2.11: an unused vision tower's gradients not reduced", "vlrl/parallel/fsdp2.py",
        "    root.register_forward_hook(touch_every_parameter)", "    pass", (FSDP_TWO,),
    ),
    Mutation(
        "fsdp2: bf16 weights stepped in place (no fp32 shards)", "vlrl/parallel/fsdp2.py",
        "upcast = upcast and dtype != torch.float32 and any(p.dtype == dtype for p in trainable)", "upcast = False",
        (FSDP_TWO,),
    ),
    Mutation(
        "fsdp2: cpu_offload ignored", "vlrl/parallel/fsdp2.py",
        "offload = CPUOffloadPolicy(pin_memory=torch.cuda.is_available()) if self.cpu_offload else OffloadPolicy()",
        "offload = OffloadPolicy()", (FSDP_TWO,),
    ),
    Mutation(
        "fsdp2: AdamW's state not restored on resume", "vlrl/parallel/fsdp2.py",
        '{"state": sharded["optimizer"], "param_groups": state["optimizer_groups"]},',
        '{"state": {}, "param_groups": state["optimizer_groups"]},', (FSDP_TWO,),
    ),
    Mutation(
        "a resumed process other than 0 reseeds instead of restoring its generators", "vlrl/trainer/run.py",
        "                restore_rng(own, self.generator)", "                pass", (FSDP_TWO,),
    ),
    Mutation(
        "gradient_checkpointing ignored", "vlrl/parallel/replicated.py",
        "        if self.gradient_checkpointing:\n            checkpoint_layers(model)",
        "        if False:\n            checkpoint_layers(model)", (RECOMPUTE,),
    ),
    Mutation(
        "a recomputed layer sees the KV cache as the forward left it", "vlrl/parallel/recompute.py",
        "            _set_cache_state(cache, before)", "            pass", (RECOMPUTE,),
    ),
    Mutation(
        "model.path's LoRA adapter kept trainable instead of merged", "vlrl/models/loading.py",
        "    base = lora_base(model_path) if path else None", "    base = lora_base(model_path)",
        ("tests/models/test_lora.py::test_rl_from_a_lora_sft_checkpoint_starts_from_and_keeps_as_reference_the_sft_model",),
    ),
    Mutation(
        "full weights without the LoRA merge", "vlrl/models/loading.py",
        "tensor = merged_weight(layer, tensor)", "tensor = tensor", (FSDP_TWO,),
    ),
    *family(
        "vlrl/models/policy.py", (LEAN_FORWARD,),
        ("model.lean_forward ignored (always lean)", "step = lean_forward(model) if lean else None",
         "step = lean_forward(model)"),
        ("model.lean_forward ignored (never lean)", "step = lean_forward(model) if lean else None", "step = None"),
    ),
    Mutation(
        "the policy's update forward not told model.lean_forward", "vlrl/trainer/update.py",
        "sampler=self.sampler if old.logp is None else None, lean=run.lean_forward,",
        "sampler=self.sampler if old.logp is None else None,", (LEAN_FORWARD,),
    ),
    *family(
        "vlrl/models/loading.py", ("tests/models/test_patch_embed.py",),
        ("model.patch_embedding ignored (always linear)", 'if cfg.patch_embedding == "linear":', "if True:"),
        ("model.patch_embedding ignored (never linear)", 'if cfg.patch_embedding == "linear":', "if False:"),
    ),
    *family(
        "vlrl/models/loading.py", (VISION_ATTENTION,),
        ("model.vision_attention ignored (always grouped)", 'if cfg.vision_attention == "grouped":', "if True:"),
        ("model.vision_attention ignored (never grouped)", 'if cfg.vision_attention == "grouped":', "if False:"),
    ),
    *family(
        "vlrl/models/vision_attention.py", (VISION_ATTENTION,),
        ("grouped vision attention's output left in the groups' order",
         "return out if groups.inverse is None else out.index_select(0, groups.inverse)", "return out"),
        ("the vision attention's groups kept after their cu_seqlens changed in place",
         "if tensor is cu_seqlens and kept == version:", "if tensor is cu_seqlens:"),
        ("the vision attention's groups keep empty chunks", "            if end > start:", "            if True:"),
        ("the vision attention's chunks grouped without reordering their tokens",
         "if sorted(grouped) == grouped:", "if True:"),
        ("grouped vision attention for any Qwen modeling file", "        type(module).__module__ in KNOWN",
         '        type(module).__module__.startswith("transformers.models.qwen")'),
        ("grouped vision attention under eager attention",
         'if self.config._attn_implementation != "sdpa":', "if False:"),
    ),
    # -- the HF engine (vlrl/rollout/hf.py, decoding.py, static.py) and the chunked update ---------
    Mutation(
        "rollout.hf.compact ignored", "vlrl/rollout/hf.py",
        "self.device, self.options.compact", "self.device, False", (HF_ENGINE,),
    ),
    Mutation(
        "rollout.hf.static_cache ignored (the device's default)", "vlrl/rollout/hf.py",
        "if options.static_cache is None else options.static_cache", "if True else options.static_cache", (HF_ENGINE,),
    ),
    *family(
        "vlrl/rollout/hf.py", (DECODE_STEP,),
        ("rollout.hf.lean_step ignored (never taken)", "return not why, f", "return False, f"),
        ("rollout.hf.lean_step=false ignored", "if asked is False:", "if False:"),
    ),
    *family(
        "vlrl/rollout/static.py", (LEAN_STATIC, STATIC_STEP),
        ("the static step never takes the lean step",
         "LeanStaticStep(model, held, self.length) if plan.lean else ModelStep(model)", "ModelStep(model)"),
        ("the lean static step attends to the slots not written yet", "written = slots <= self.length",
         "written = slots >= 0"),
        ("the lean static step reads a length the loop never advances",
         "LeanStaticStep(model, held, self.length)", "LeanStaticStep(model, held, self.length.clone())"),
        ("the lean static step's rope a position behind", "cos, sin = self.cos[position].unsqueeze(1)",
         "cos, sin = self.cos[position - 1].unsqueeze(1)"),
        ("the lean static step attends to the padding", "(attention_mask.bool() & written)[:, None, None, :]",
         "(torch.ones_like(attention_mask, dtype=torch.bool) & written)[:, None, None, :]"),
        ("the static step's shared slot never advances", "        self.length.add_(1)\n", ""),
        ("the static step's keys written a slot ahead", "self.keys.index_copy_(2, self.slot, key_states)",
         "self.keys.index_copy_(2, self.slot + 1, key_states)"),
    ),
    Mutation(
        "the lean static step keeps the first batch's parts", "vlrl/rollout/static.py", "self.forward.refresh()",
        "None", (STATIC_REFRESH,),
    ),
    Mutation(
        "the lean step's mask left boolean (SDPA converts it in every layer)", "vlrl/models/decode_step.py",
        'return None if mask is None else torch.where(mask, 0.0, float("-inf")).to(dtype)', "return mask",
        (OPERATOR_BENCH,),
    ),
    *family(
        "vlrl/rollout/hf.py", (RESERVED,),
        ("the dynamic loop's cache grows by concatenation", "if type(layer) is DynamicLayer else layer",
         "if False else layer"),
        ("a reserved cache layer copied at every token",
         "self.all_keys[:, :, self.length : end] = key_states",
         "self.all_keys = torch.cat([self.all_keys[:, :, : self.length], key_states, self.all_keys[:, :, end:]], 2)"),
    ),
    *family(
        "vlrl/models/decode_step.py", (DECODE_STEP,),
        ("the lean step's rope without its sign fold", "torch.cat((-sin, sin), dim=-1)", "torch.cat((sin, sin), dim=-1)"),
        ("the lean step attends to padding", "return None if bool(attention_mask.all()) else",
         "return None if True else"),
        ("the lean forward of completions sees the next token", ".tril(length - tokens)", ".tril(length - tokens + 1)"),
        ("the lean forward of completions attends to padding", "(causal & attention_mask.bool()[:, None, :])",
         "causal.expand(len(attention_mask), -1, -1)"),
        ("the lean forward bypasses recomputed layers under autograd",
         'if torch.is_grad_enabled() and any("forward" in vars(layer) for layer in layers):',
         "if False:"),
        ("the lean step's float mask lets every slot through", 'torch.where(mask, 0.0, float("-inf"))',
         "torch.where(mask, 0.0, 0.0)"),
        ("the lean step's key taken before its rope", "q, k = qk[:, :heads], qk[:, heads:]",
         "q, k = qk[:, :heads], k.transpose(1, 2)"),
        ("the lean step without Qwen3's head norms", "q, k = layer.head_norms[0](q), layer.head_norms[1](k)",
         "pass"),
        ("the lean step takes a rope whose tables change with the length",
         'if text.rope_parameters.get("rope_type", "default") != "default":', "if False:"),
        ("the lean step takes attention dropout", 'if getattr(text, "attention_dropout", 0.0):', "if False:"),
        ("the lean step under FSDP2", "if fsdp_sharded(model):", "if False:"),
        ("the lean step's rope tables never grow",
         "if self.cos is None or self.cos.dtype != dtype or top >= len(self.cos):",
         "if self.cos is None or self.cos.dtype != dtype:"),
        ("the lean step skips a Linear's hooks",
         "if type(module) is torch.nn.Linear and not (module._forward_hooks or module._forward_pre_hooks):",
         "if type(module) is torch.nn.Linear:"),
        ("the lean step refuses experts and linear attention", "    if fsdp_sharded(model):\n",
         "    if fsdp_sharded(model) or unusual_layers(model):\n"),
        ("the lean step skips linear attention",
         "x = x + layer.mixer(hidden_states=h, cache_params=cache, attention_mask=padding)", "x = x"),
        ("the lean step's linear attention takes the completions' padding",
         "padding = None if tokens == 1 else attention_mask[:, -tokens:]", "padding = None"),
        ("the lean step scales Qwen3.5's norms by their stored weight", "* (1.0 + weight.float())).type_as(x)",
         "* weight.float()).type_as(x)"),
        ("the lean step without Qwen3.5's attention gate",
         "return layer.o(out * torch.sigmoid(gate) if layer.gated else out)", "return layer.o(out)"),
        ("the lean step leaves Qwen3.5's partial rope unrotated",
         "return torch.cat((rotate(x[..., :width], cos, sin), x[..., width:]), dim=-1)",
         "return torch.cat((x[..., :width], x[..., width:]), dim=-1)"),
        ("the lean step skips the experts", "    if not hasattr(mlp, \"gate_proj\"):\n        return mlp\n",
         "    if not hasattr(mlp, \"gate_proj\"):\n        return lambda h: h\n"),
    ),
    Mutation(
        "experts counted as plain layers", "vlrl/models/decode_step.py",
        '[*kinds, "experts"] if getattr(text, "num_experts", 0) else kinds', "kinds", (f"{HF_ENGINE}::{EXPERTS}",),
    ),
    *family(
        "vlrl/models/loading.py", (LOADING,),
        ("forwards without gradient in inference mode under FSDP2",
         "torch.no_grad() if several or fsdp_sharded(model) else torch.inference_mode()", "torch.no_grad() if several else torch.inference_mode()"),
        ("forwards without gradient in inference mode among several processes",
         "torch.no_grad() if several or fsdp_sharded(model) else torch.inference_mode()",
         "torch.no_grad() if fsdp_sharded(model) else torch.inference_mode()"),
        ("forwards without gradient never in inference mode",
         "torch.no_grad() if several or fsdp_sharded(model) else torch.inference_mode()", "torch.no_grad()"),
    ),
    Mutation(
        "rollout.hf.check_every ignored", "vlrl/rollout/static.py",
        "count = min(self.plan.check_every, steps - done)", "count = min(8, steps - done)", (STATIC_STEP,),
    ),
    Mutation(
        "rollout.hf.smallest_bucket ignored", "vlrl/rollout/static.py",
        "buckets(rows, plan.smallest_bucket) if plan.compact", "buckets(rows, 8) if plan.compact", (STATIC_STEP,),
    ),
    *family(
        "vlrl/rollout/static.py", (f"{HF_ENGINE}::{WINDOW}", f"{HF_ENGINE}::{WIDENING}"),
        ("rollout.hf.smallest_window ignored (the whole cache)", "windows(length, plan.smallest_window)",
         "windows(length, 0)"),
        ("the window never widens", "        if window != self.window:", "        if window < self.window:"),
    ),
    Mutation(
        "compaction moves only half of the window's slots", "vlrl/rollout/static.py",
        "self.all_keys[:n, :, :window] = self.all_keys[live, :, :window]",
        "self.all_keys[:n, :, : window // 2] = self.all_keys[live, :, : window // 2]", (STATIC_STEP,),
    ),
    *family(
        "vlrl/rollout/static.py", (STATIC_STEP,),
        ("the static step refuses linear attention", 'kind not in ("experts", "linear_attention")',
         'kind != "experts"'),
        ("a linear-attention layer's recurrent state left in place at compaction",
         "self.all_recurrent[i][:n] = self.all_recurrent[i][live]",
         "self.all_recurrent[i][:n] = self.all_recurrent[i][:n]"),
        ("a linear-attention layer's convolution window left in place at compaction",
         "self.all_conv[i][:n] = self.all_conv[i][live]", "self.all_conv[i][:n] = self.all_conv[i][:n]"),
        ("a linear-attention layer decoded from a copy of its recurrent state",
         "self.all_recurrent[i][:rows]\n", "self.all_recurrent[i][:rows].clone()\n"),
    ),
    *family(
        "vlrl/rollout/static.py", (f"{HF_ENGINE}::{EXPERTS}",),
        ("the static step refuses experts whatever routes them",
         'if implementation not in ("grouped_mm", "batched_mm"):', "if True:"),
        ("the static step takes experts that pick their tokens with nonzero()",
         'if implementation not in ("grouped_mm", "batched_mm"):', "if False:"),
        ("the static step takes grouped_mm's host loop below compute capability 8.0",
         "torch.cuda.get_device_capability(device) < (8, 0)", "False"),
    ),
    Mutation(
        "rollout.hf.cuda_graphs ignored (the device's default)", "vlrl/rollout/hf.py",
        "graphs = cuda and not sharded if options.cuda_graphs is None else options.cuda_graphs",
        "graphs = cuda and not sharded", (HF_ENGINE, GRAPHS_ON_GPU),
    ),
    *family(
        "vlrl/rollout/static.py", (COMPILED,),
        ("rollout.hf.compile_step ignored (never compiled)",
         "compiled_forward(self.forward) if plan.compiled else self.forward", "self.forward"),
        ("the compiled step recompiled for each batch size", "torch.compile(forward, dynamic=True)",
         "torch.compile(forward)"),
        ("the compiled step's buffers no wider than the cache (compiled again at the whole window)",
         "UNREACHED_SLOTS = 16", "UNREACHED_SLOTS = 0"),
        ("the compiled step duck-sizes its inputs (compiled again when equal sizes part)",
         "fx_config.patch(use_duck_shape=False)", "fx_config.patch(use_duck_shape=True)"),
        ("the compiled step makes the model's numbers symbols (most of its compile time)",
         "dynamo_config.patch(specialize_int=True, specialize_float=True)", "dynamo_config.patch()"),
        ("the compiled step's positions strided by the batch",
         "torch.zeros(rows, 3, 1, dtype=torch.long, device=device).transpose(0, 1)",
         "torch.zeros(3, rows, 1, dtype=torch.long, device=device)"),
    ),
    *family(
        "vlrl/rollout/static.py", (COMPILED_EXPERTS,),
        ("the compiled step's graphs take float32 experts", "    if dtype == torch.bfloat16:\n        return \"\"\n",
         "    if True:\n        return \"\"\n"),
        ("the compiled step's graphs refuse batched_mm experts",
         'if core_model(model).config.get_text_config()._experts_implementation != "grouped_mm":', "if False:"),
    ),
    Mutation(
        "the compiled step's experts never asked about", "vlrl/rollout/hf.py",
        "if options.compile_step and graphs and (why := compiled_experts_refusal(self.model)):",
        "if options.compile_step and graphs and (why := ''):", (COMPILED_EXPERTS,),
    ),
    Mutation(
        "rollout.hf.compile_step leaves the CPU to the dynamic loop", "vlrl/rollout/hf.py",
        "wanted = (cuda or options.compile_step) if", "wanted = cuda if", (COMPILED,),
    ),
    Mutation(
        "the compiled step's log-probs taken as the trainer's", "vlrl/rollout/hf.py",
        "self.lora is None and not (self.static_plan and self.static_plan.compiled)", "self.lora is None", (COMPILED,),
    ),
    Mutation(
        "rollout.hf.merge_lora ignored", "vlrl/rollout/hf.py",
        "MergedLoRA(model) if self.options.merge_lora and adapted", "MergedLoRA(model) if adapted",
        (f"{LORA}::test_the_trainer_measures_and_corrects_the_merged_lora_engines_log_probs",),
    ),
    Mutation(
        "a compacted row draws another row's uniform", "vlrl/rollout/decoding.py",
        "mine = uniforms[index.clamp(max=self.rows - 1)]", "mine = uniforms[: len(index)]", (HF_ENGINE,),
    ),
    Mutation(
        "the static step leaves the stream past the dynamic loop's end", "vlrl/rollout/static.py",
        "            self.rewind(mark, taken)", "            pass", (HF_ENGINE,),
    ),
    Mutation(
        "rows compacted without their cache", "vlrl/rollout/static.py",
        "            layer.gather(live, self.window)", "            pass", (HF_ENGINE,),
    ),
    Mutation(
        "merged LoRA decoding taken for the trainer's own log-probs", "vlrl/rollout/hf.py",
        "self.exact_logprobs = self.lora is None", "self.exact_logprobs = True", (LORA,),
    ),
    Mutation(
        "model.lora.dropout ignored in SFT", "vlrl/models/lora.py",
        "            dropout.train()", "            pass", (f"{SFT}::{SFT_DROPOUT}", f"{LORA}::{ADAPTER_DROPOUT}"),
    ),
    Mutation(
        "the same adapter dropout masks at every step", "vlrl/models/lora.py",
        "        torch.manual_seed(seed)", "        pass", (f"{LORA}::{ADAPTER_DROPOUT}",),
    ),
    Mutation(
        "LoRA merged without its adapters", "vlrl/models/lora.py",
        "return (weight.float() + delta).to(weight.dtype)", "return weight.clone()", (LORA,),
    ),
    Mutation(
        "merged LoRA copies kept stale after the adapters move", "vlrl/models/lora.py",
        "                    copy.copy_(weight)", "                    pass",
        (f"{LORA}::test_lora_decodes_merged_as_the_unmerged_policy_samples_and_its_weights_stay_bit_identical",),
    ),
    Mutation(
        "chunked log-probs without the temperature", "vlrl/models/policy.py",
        "        return logits if self.temperature == 1 else logits / self.temperature",
        "        return logits", (POLICY,),
    ),
    Mutation(
        "the fused output layer's gradient without the temperature", "vlrl/models/policy.py",
        "                grad.div_(scorer.temperature)", "                pass", (POLICY,),
    ),
    # -- model families (vlrl/models/) and video decoding ------------------------------------------
    Mutation(
        "Qwen2.5-VL rope without the frames' times", "vlrl/models/qwen2_5_vl.py",
        'second_per_grid_ts=batch.vision.get("second_per_grid_ts"),', "", (POLICY,),
    ),
    Mutation("Qwen3-VL answers read as pixels", "vlrl/models/qwen3_vl.py", 'coord_frame = "norm1000"', 'coord_frame = "absolute"', (FAMILY,)),
    Mutation(
        "Qwen3-VL: a shuffled clip's timestamps shuffled too", "vlrl/models/qwen3_vl.py",
        '"frames_indices": sorted(clip.indices)}', '"frames_indices": clip.indices}', (FAMILY,),
    ),
    Mutation(
        "Qwen3-VL: a per-frame pixel budget for the whole clip", "vlrl/models/qwen3_vl.py",
        "pixels = clip.frames.shape[0] * clip.frames.shape[2] * clip.frames.shape[3]",
        "pixels = clip.frames.shape[2] * clip.frames.shape[3]", (FAMILY,),
    ),
    Mutation(
        "Qwen3.5: the recurrent state written in place (transformers' cache layer)", "vlrl/models/qwen3_5.py",
        "self.is_recurrent_states_initialized[state_idx] = True",
        "return super().update_recurrent_state(recurrent_states, state_idx)", (POLICY,),
    ),
    Mutation(
        "decord backend reads with PyAV", "vlrl/vision/video.py",
        '"decord": (_decord_probe, _decord_frames)', '"decord": (probe, _pyav_frames)', ("tests/vision/test_video.py",),
    ),
    # -- Vision-R1's stages and selective sample replay (config.py, trainer/replay.py, algos/replay.py)
    Mutation(
        "rollout.stages ignored", "vlrl/config.py",
        "zip(self.stages[:-1], every[:-1], strict=True)", "zip((), (), strict=True)", (STAGES,),
    ),
    Mutation(
        "replay.mode filter treated as ssr", "vlrl/trainer/replay.py", 'if cfg.mode == "filter":', "if False:",
        (f"{REPLAY}::test_filter_mode_trains_on_the_steps_effective_rows_only",),
    ),
    Mutation(
        "replayed rows trained without their stored difficulty weights", "vlrl/trainer/replay.py",
        "row_weights = None if not ordered or None in weights else", "row_weights = None if True else",
        (f"{REPLAY}::test_replayed_rows_train_with_their_stored_advantage_and_old_logprobs",),
    ),
    Mutation(
        "replay.keep_fraction ignored", "vlrl/trainer/replay.py",
        "int(cfg.keep_fraction * len(fresh))", "int(0.5 * len(fresh))", (REPLAY_OPTIONS,),
    ),
    Mutation(
        "replay.buffer_size ignored", "vlrl/trainer/replay.py",
        "maxlen=cfg.buffer_size or len(fresh) // 2", "maxlen=len(fresh) // 2", (REPLAY_OPTIONS,),
    ),
    *(replay_option_not_passed(option, default) for option, default in
      (("positive_fraction", "0.1"), ("positive_reward", "0.95"), ("alpha", "1.0"), ("eps", "1e-4"))),
    *family(
        "vlrl/algos/replay.py", (REPLAY_RULE,),
        ("replay positive_fraction fixed to the public 0.1",
         "positive[: int(positive_fraction * len(non_zero))]", "positive[: int(0.1 * len(non_zero))]"),
        ("replay positive_reward fixed to the public 0.95", "rewards.double() > positive_reward", "rewards.double() > 0.95"),
        ("replay alpha ignored by the current part",
         "weights = a[candidates].abs() ** alpha", "weights = a[candidates].abs()"),
        ("replay eps fixed to the public 1e-4",
         "buffer_advantages.double().abs() + eps)", "buffer_advantages.double().abs() + 1e-4)"),
    ),
)  # fmt: skip


def problems(mutations: tuple[Mutation, ...], root: Path) -> list[str]:
    """Mutations whose original text does not occur exactly once in their file, or that change nothing."""
    out = []
    for m in mutations:
        count = (root / m.path).read_text().count(m.original)
        if count != 1:
            out.append(f"{m.name}: {m.path} holds {m.original!r} {count} times, expected once")
        if m.original == m.replacement:
            out.append(f"{m.name}: the replacement equals the original")
    return out


def copy_tree(root: Path, target: Path) -> None:
    """The working tree's tracked and untracked files (not the ignored ones) under `target`."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, listed):
        source = root / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def run_tests(tree: Path, tests: tuple[str, ...], timeout: float) -> tuple[bool, str]:
    """(passed, tail of the output) of pytest on `tests` in `tree`."""
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests]
    try:
        done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, "timed out"
    return done.returncode == 0, (done.stdout + done.stderr)[-400:]


@dataclass
class Outcome:
    name: str
    path: str
    tests: list[str]
    killed: bool
    seconds: float


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", default=None, help="names (substrings) of the mutations to run")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per test run")
    args = parser.parse_args(argv)
    mutations = MUTATIONS
    if args.only:
        mutations = tuple(m for m in MUTATIONS if any(word in m.name for word in args.only))
    if args.list:
        print(json.dumps([asdict(m) for m in mutations], indent=1))
        return 0
    bad = problems(mutations, ROOT)
    if bad:
        print(json.dumps({"error": "malformed mutations", "problems": bad}, indent=1))
        return 1
    with tempfile.TemporaryDirectory(prefix="vlrl-mutants-") as temp:
        tree = Path(temp)
        copy_tree(ROOT, tree)
        baseline = tuple(dict.fromkeys(t for m in mutations for t in m.tests))
        passed, tail = run_tests(tree, baseline, args.timeout)
        if not passed:
            print(
                json.dumps(
                    {"error": "the tests fail without any mutation", "tests": baseline, "output": tail}, indent=1
                )
            )
            return 1
        outcomes = []
        for m in mutations:
            path = tree / m.path
            original = path.read_text()
            path.write_text(original.replace(m.original, m.replacement, 1))
            start = time.perf_counter()
            try:
                survived, _ = run_tests(tree, m.tests, args.timeout)
            finally:
                path.write_text(original)
            outcomes.append(Outcome(m.name, m.path, list(m.tests), not survived, round(time.perf_counter() - start, 1)))
            print(f"{'killed  ' if not survived else 'SURVIVED'} {m.name}", file=sys.stderr, flush=True)
    survivors = [o.name for o in outcomes if not o.killed]
    print(json.dumps({"mutations": [asdict(o) for o in outcomes], "survived": survivors}, indent=1))
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
