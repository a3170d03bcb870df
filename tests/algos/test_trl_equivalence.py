"""For every loss that TRL's GRPOTrainer also has, vlrl's loss and gradient equal TRL's: a real
GRPOTrainer (trl 1.16.0, the version pinned in the dev extra) computes its loss through its
public `compute_loss` on the tiny model, and vlrl's loss is computed from the same model's
log-probs with the same old and reference log-probs, advantages and masks; both losses and
the gradients they put on the model's weights must agree."""

from __future__ import annotations

import tempfile
from functools import cache

import pytest
import torch
import trl

from vlrl.algos.advantages import grpo
from vlrl.algos.losses import token_loss, token_weights
from vlrl.config import AlgoConfig

TRL_VERSION = "1.16.0"  # what these tests were written against; the dev extra pins it
MAX_COMPLETION_LENGTH = 12
SCRATCH = tempfile.TemporaryDirectory(prefix="trl-")  # the trainers' output_dir, removed at exit
ROWS, PROMPT_LENGTH = 8, 5
AGGREGATION = {
    "grpo": "seq_mean_token_mean",
    "bnpo": "token_mean",
    "dapo": "token_mean",
    "dr_grpo": "seq_mean_token_sum_norm",
    "cispo": "token_mean",  # TRL divides by the batch's tokens, as dapo
    "sapo": "seq_mean_token_mean",  # as grpo
    "luspo": "seq_mean_token_sum",  # each row's token sum, averaged over the rows
    "vespo": "token_mean",  # as dapo
}
VESPO = {"vespo_k_pos": 1.5, "vespo_lambda_pos": 2.5, "vespo_k_neg": 4.0, "vespo_lambda_neg": 1.0}  # none TRL's default
SAPO_TEMPERATURES = {"sapo_temperature_pos": 2.0, "sapo_temperature_neg": 3.0}  # not TRL's defaults: both read
CASES = [
    # loss_type, beta, epsilon_high, importance-sampling level, TRL's other options, vlrl's for them
    ("grpo", 0.0, 0.2, "token", {}, {}),
    ("grpo", 0.04, 0.28, "token", {}, {}),
    ("dr_grpo", 0.04, 0.28, "token", {}, {}),
    ("bnpo", 0.0, 0.28, "token", {}, {}),
    ("dapo", 0.04, 0.28, "token", {}, {}),
    ("grpo", 0.0, 0.2, "sequence", {}, {}),
    ("dapo", 0.04, 0.28, "sequence", {}, {}),
    # CISPO: epsilon_high is the weight's bound (ratios here reach ~2.7: some are bounded)
    ("cispo", 0.0, 2.0, "token", {}, {"loss": "cispo"}),
    ("cispo", 0.04, 5.0, "token", {}, {"loss": "cispo"}),
    ("sapo", 0.0, 0.2, "token", SAPO_TEMPERATURES, {"loss": "sapo", **SAPO_TEMPERATURES}),
    ("sapo", 0.04, 0.2, "sequence", {}, {"loss": "sapo"}),
    # INTELLECT-2's two-sided clip, TRL's delta, is dual-clip PPO's bound on negative advantages
    ("grpo", 0.0, 0.28, "token", {"delta": 1.5}, {"dual_clip": 1.5}),
    # DeepSeek-V3.2's KL times the ratio, TRL 1.16's default
    ("grpo", 0.04, 0.2, "token", {"use_bias_correction_kl": True}, {"kl_bias_correction": True}),
    ("dapo", 0.04, 0.28, "sequence", {"use_bias_correction_kl": True}, {"kl_bias_correction": True}),
    ("luspo", 0.0, 0.2, "sequence", {}, {}),
    ("luspo", 0.04, 0.28, "token", {}, {}),
    ("vespo", 0.0, 0.2, "token", {}, {"loss": "vespo"}),
    ("vespo", 0.04, 0.2, "token", VESPO, {"loss": "vespo", **VESPO}),
    # DeepSeek-V3.2's off-policy sequence mask, on the old log-probs and on a sampler's
    ("grpo", 0.0, 0.2, "token", {"off_policy_mask_threshold": 0.05}, {"off_policy_mask": 0.05}),
    ("dapo", 0.04, 0.28, "token", {"off_policy_mask_threshold": 0.05}, {"off_policy_mask": 0.05, "sampler": 0.5}),
]


def test_written_against_the_pinned_trl():
    assert trl.__version__ == TRL_VERSION, f"tests/algos/test_trl_equivalence.py was written against trl {TRL_VERSION}"


@cache
def trainer(tiny_path: str, loss_type: str, beta: float, epsilon_high: float, level: str, extra: tuple = ()):
    """A GRPOTrainer on a fresh copy of the tiny model, in eval mode (its loss is then not scaled
    for gradient accumulation, which a training loop would set up); `extra`, GRPOConfig's other
    options as (name, value) pairs."""
    from datasets import Dataset
    from transformers import AutoModelForImageTextToText, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    model = AutoModelForImageTextToText.from_pretrained(tiny_path, dtype=torch.float32)
    args = GRPOConfig(
        output_dir=SCRATCH.name,
        loss_type=loss_type,
        beta=beta,
        epsilon=0.2,
        epsilon_high=epsilon_high,
        importance_sampling_level=level,
        max_completion_length=MAX_COMPLETION_LENGTH,
        per_device_train_batch_size=ROWS,
        num_generations=4,
        report_to=[],
        use_cpu=True,
        bf16=False,
        # TRL 1.16's default weighs the KL by the ratio, vlrl's does with algo.kl_bias_correction
        **{"use_bias_correction_kl": False, **dict(extra)},
    )
    reward = lambda completions, **kwargs: [0.0] * len(completions)  # noqa: E731 - never called
    grpo_trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=args,
        train_dataset=Dataset.from_list([{"prompt": "x"}] * ROWS),
        processing_class=AutoTokenizer.from_pretrained(tiny_path),
    )
    grpo_trainer.model.eval()
    return grpo_trainer


def completion_logprobs(model, input_ids, attention_mask) -> torch.Tensor:
    """log p of each completion token under the model's plain forward (temperature 1, as TRL's)."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, PROMPT_LENGTH - 1 : -1]
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, input_ids[:, PROMPT_LENGTH:, None]).squeeze(-1)


def vlrl_loss(logp, old_logp, ref_logp, advantages, mask, loss_type, beta, epsilon_high, level, options, sampling):
    options = {"aggregation": AGGREGATION[loss_type], **options}
    cfg = AlgoConfig(epsilon=0.2, epsilon_high=epsilon_high, ratio_level=level, beta=beta, **options)
    cfg.validate("algo")
    ref_logp = ref_logp if beta else None
    per_token = token_loss(logp, old_logp, advantages, mask, cfg, ref_logp=ref_logp, sampling_logp=sampling).per_token
    return (per_token * token_weights(mask, cfg.aggregation, MAX_COMPLETION_LENGTH)).sum()


def gradients(model, loss) -> dict[str, torch.Tensor]:
    model.zero_grad()
    loss.backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("loss_type,beta,epsilon_high,level,theirs,ours", CASES)
def test_loss_and_gradient_equal_trls_compute_loss(tiny_qwen25, loss_type, beta, epsilon_high, level, theirs, ours):
    grpo_trainer = trainer(str(tiny_qwen25), loss_type, beta, epsilon_high, level, tuple(theirs.items()))
    model = grpo_trainer.model
    vocab = model.config.get_text_config().vocab_size
    for seed in (0, 1):
        g = torch.Generator().manual_seed(seed)
        prompt_ids = torch.randint(0, vocab, (ROWS, PROMPT_LENGTH), generator=g)
        completion_ids = torch.randint(0, vocab, (ROWS, MAX_COMPLETION_LENGTH), generator=g)
        lengths = torch.randint(1, MAX_COMPLETION_LENGTH + 1, (ROWS,), generator=g)
        mask = (torch.arange(MAX_COMPLETION_LENGTH)[None, :] < lengths[:, None]).long()
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([torch.ones_like(prompt_ids), mask], dim=1)
        advantages = grpo(torch.rand(2, 4, generator=g).round()).view(-1)
        with torch.no_grad():
            base = completion_logprobs(model, input_ids, attention_mask)
        old_logp = base + 0.3 * torch.randn(base.shape, generator=g)  # ratios well outside [0.8, 1.28] too
        ref_logp = base + 0.2 * torch.randn(base.shape, generator=g)
        sampling = None  # "sampler": an engine's log-probs, that much noise off the old ones (TRL reads them)
        if "sampler" in ours:
            sampling = old_logp + ours["sampler"] * torch.randn(base.shape, generator=g)
        inputs = {
            "prompt_ids": prompt_ids,
            "prompt_mask": torch.ones_like(prompt_ids),
            "completion_ids": completion_ids,
            "completion_mask": mask,
            "advantages": advantages,
            "old_per_token_logps": old_logp,
            "ref_per_token_logps": ref_logp,
            "num_items_in_batch": mask.sum(),
            **({} if sampling is None else {"sampling_per_token_logps": sampling}),
        }
        their_loss = grpo_trainer.compute_loss(model, inputs)
        their_grads = gradients(model, their_loss)
        logp = completion_logprobs(model, input_ids, attention_mask)
        options = {k: v for k, v in ours.items() if k != "sampler"}
        args = (advantages, mask.float(), loss_type, beta, epsilon_high, level, options, sampling)
        our_loss = vlrl_loss(logp, old_logp, ref_logp, *args)
        our_grads = gradients(model, our_loss)
        torch.testing.assert_close(our_loss, their_loss, rtol=1e-5, atol=1e-6)
        assert their_grads.keys() == our_grads.keys() and their_grads
        for name, grad in their_grads.items():
            torch.testing.assert_close(our_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("coef", [None, 0.5], ids=["the model's coefficient", "0.5"])
@pytest.mark.parametrize("lean", [True, False], ids=["lean step", "model's forward"])
@pytest.mark.parametrize("arch", ["qwen3_vl_moe", "qwen3_5_moe"])
def test_a_mixture_of_experts_load_balancing_loss_and_gradient_equal_trls(arch, coef, lean):
    """TRL 1.16 adds router_aux_loss_coef (None: the text config's, 0.001) x transformers'
    load-balancing loss over each forward's prompt and completion tokens to a mixture of experts'
    loss. vlrl's (algo.router_aux_loss_coef), over its prefixes shared per prompt, counts a
    prompt once for each of its completions: the same loss, the same gradient, through the lean
    step and the model's forward. Two prompts of four completions, one prompt left-padded."""
    from vlrl.models.batch import Prompt, collate
    from vlrl.models.build import TinySpec
    from vlrl.models.policy import completion_logprobs
    from vlrl.models.routing import RouterLogits, router_aux_coef
    from vlrl.models.tiny import tiny_checkpoint

    grpo_trainer = trainer(str(tiny_checkpoint(TinySpec(arch=arch))), "grpo", 0.0, 0.2, "token",
                           (("router_aux_loss_coef", coef),))  # fmt: skip
    model, pad_id = grpo_trainer.model, grpo_trainer.processing_class.pad_token_id
    assert grpo_trainer.aux_loss_enabled
    g = torch.Generator().manual_seed(0)
    high = min(grpo_trainer.processing_class.all_special_ids)  # text tokens: no image placeholder
    prompts = [torch.randint(0, high, (n,), generator=g) for n in (PROMPT_LENGTH, PROMPT_LENGTH - 2)]
    batch = collate([Prompt(ids, torch.zeros_like(ids), {}, "") for ids in prompts], pad_id)
    rows = torch.arange(ROWS) // (ROWS // 2)
    completion_ids = torch.randint(0, high, (ROWS, MAX_COMPLETION_LENGTH), generator=g)
    lengths = torch.randint(1, MAX_COMPLETION_LENGTH + 1, (ROWS,), generator=g)
    mask = (torch.arange(MAX_COMPLETION_LENGTH)[None, :] < lengths[:, None]).long()
    advantages = grpo(torch.rand(2, 4, generator=g).round()).view(-1)

    def ours() -> tuple[torch.Tensor, torch.Tensor]:
        router = RouterLogits(model)
        with router.over(batch.attention_mask, rows, mask):
            scored = completion_logprobs(model, batch, rows, completion_ids, mask, lean=lean)
        return scored.logp, router.loss()

    with torch.no_grad():
        base, _ = ours()
    old_logp = base + 0.3 * torch.randn(base.shape, generator=g)
    inputs = {
        "prompt_ids": batch.input_ids[rows],
        "prompt_mask": batch.attention_mask[rows],
        "completion_ids": completion_ids,
        "completion_mask": mask,
        "advantages": advantages,
        "old_per_token_logps": old_logp,
        "num_items_in_batch": mask.sum(),
    }
    their_loss = grpo_trainer.compute_loss(model, inputs)  # eval mode: the term not divided by accumulation steps
    their_grads = gradients(model, their_loss)
    logp, aux = ours()
    args = (advantages, mask.float(), "grpo", 0.0, 0.2, "token", {}, None)
    our_loss = vlrl_loss(logp, old_logp, None, *args) + router_aux_coef(coef, model) * aux
    our_grads = gradients(model, our_loss)
    assert router_aux_coef(coef, model) == (0.001 if coef is None else coef)
    assert float(aux.detach()) == pytest.approx(grpo_trainer._metrics["eval"]["aux_loss"][-1], rel=1e-5)
    torch.testing.assert_close(our_loss, their_loss, rtol=1e-5, atol=1e-7)
    assert their_grads.keys() == our_grads.keys()
    for name, grad in their_grads.items():
        torch.testing.assert_close(our_grads[name], grad, rtol=1e-4, atol=1e-7, msg=name)


def test_advantages_equal_trl_group_normalisation():
    rewards = torch.tensor([[1.0, 0.0, 0.5, 0.25], [2.0, 2.0, 2.0, 2.0], [0.0, 1.0, 1.0, 1.0]])
    # TRL: mean and std (unbiased) per group, advantages = (r - mean) / (std + 1e-4)
    mean = rewards.mean(dim=1).repeat_interleave(4)
    std = rewards.std(dim=1).repeat_interleave(4)
    expected = (rewards.view(-1) - mean) / (std + 1e-4)
    torch.testing.assert_close(grpo(rewards).view(-1), expected)
