"""The update's output layer on the GPU (`ScoredChunks`, vlrl/models/policy.py): at Qwen's
151,936-token vocabulary in bf16, 3,000 tokens scored 1,024 at a time give the log-probs,
entropies and gradients autograd gives through every token's logits at once (to bf16
rounding), and the fused pass's peak memory is under half that one's (issue 25: no more memory than before at any token
budget; on the CPU, bench/update_memory.py measures it).

On the CPU (VLRL_GPU_TIER_ON_CPU=1) a small vocabulary, and no memory comparison; `scored` is
also the CPU suite's bit-for-bit check (tests/models/test_policy.py)."""

from __future__ import annotations

import pytest
import torch

from vlrl.models.policy import SamplingFilter, SeenTokens, TokenScorer

pytestmark = pytest.mark.gpu


def scored(
    device: torch.device,
    chunk_tokens: int,
    shape: tuple[int, int, int],
    dtype=torch.bfloat16,
    sampler: bool = False,
    entropy_coef: float = 0.0,
    penalty: float = 1.0,
) -> tuple[list[torch.Tensor], int]:
    """Columns, and the hidden states', weight's and bias's gradients of a weighted log-prob
    sum (minus `entropy_coef` times the entropies, an entropy bonus), from a head and hidden
    states drawn from one seed (the entropy a column, and with `sampler` the top-p
    distribution's log-prob, with `penalty` that of the draw penalizing each of three rows'
    seen tokens); and the pass's peak allocated bytes on CUDA. `chunk_tokens` 0: autograd
    through every token's logits at once."""
    tokens, hidden_size, vocabulary = shape
    generator = torch.Generator(device=device).manual_seed(0)
    head = torch.nn.Linear(hidden_size, vocabulary, device=device, dtype=dtype)
    with torch.no_grad():
        for p in head.parameters():
            p.copy_(torch.randn(p.shape, generator=generator, device=device) * 0.02)
    hidden = torch.randn(tokens, hidden_size, generator=generator, device=device).to(dtype).requires_grad_()
    ids = torch.randint(0, vocabulary, (tokens,), generator=generator, device=device)
    weights = torch.randn(tokens, generator=generator, device=device)
    banned = torch.zeros(vocabulary, dtype=torch.bool, device=device)
    top_p = SamplingFilter(banned, top_p=0.9, repetition_penalty=penalty) if sampler else None
    scorer = TokenScorer(0.7, True, top_p, chunk_tokens=chunk_tokens)
    seen = None
    if penalty != 1:  # the tokens as three rows' completions, each after a prompt of 40 ids
        per = tokens // 3
        prompt = torch.randint(0, vocabulary, (3, 40), generator=generator, device=device)
        grid = torch.arange(per, device=device)
        rows = torch.arange(3, device=device).repeat_interleave(per)
        seen = SeenTokens(prompt, ids.view(3, per), rows, grid.repeat(3))
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    columns = scorer.of_hidden(head, hidden, ids, seen) if chunk_tokens else scorer.of_logits(head(hidden), ids, seen)
    ((columns[:, 0] - entropy_coef * columns[:, 1]) * weights).sum().backward()
    peak = torch.cuda.max_memory_allocated() - before if cuda else 0
    return [columns.detach(), hidden.grad, head.weight.grad, head.bias.grad], peak


@pytest.mark.parametrize("entropy_coef", [0.0, 0.5])
def test_the_fused_output_layer_scores_as_autograd_does_and_holds_less(device, entropy_coef):
    """With an entropy bonus too (algo.entropy_coef): its gradient, added in the chunks'
    backward pass, is autograd's through the entropy of the full logits."""
    cuda = device.type == "cuda"
    shape = (3000, 1024, 151936) if cuda else (300, 64, 2048)
    fused, fused_peak = scored(device, 1024 if cuda else 128, shape, entropy_coef=entropy_coef)
    full, full_peak = scored(device, 0, shape, entropy_coef=entropy_coef)
    columns, reference = fused[0], full[0]
    # float32 from bf16 logits, which a GEMM of another row count may round otherwise by an ulp
    torch.testing.assert_close(columns, reference, rtol=0, atol=2e-2)
    for got, want in zip(fused[1:], full[1:], strict=True):
        # bf16 gradients, the weight's and bias's summed chunk by chunk: an entry that is a sum of
        # cancelling terms may round far off relatively, so the whole gradient is compared
        error = float((got.float() - want.float()).norm() / want.float().norm())
        assert error < 1e-2, error
    if cuda:  # every token's float32 logits: 1.8 GB, and copies of them in the backward pass
        assert fused_peak < full_peak / 2, (fused_peak, full_peak)


def test_under_a_repetition_penalty_the_chunks_sampled_column_is_the_full_logits(device):
    """The draw a foreign engine makes with rollout.repetition_penalty (each row's prompt and
    completion so far penalized, `SeenTokens`), scored chunk by chunk as from every token's
    logits at once; the penalty moves it."""
    cuda = device.type == "cuda"
    shape = (3000, 1024, 151936) if cuda else (300, 64, 2048)
    fused, _ = scored(device, 1024 if cuda else 128, shape, sampler=True, penalty=1.3)
    full, _ = scored(device, 0, shape, sampler=True, penalty=1.3)
    torch.testing.assert_close(fused[0], full[0], rtol=0, atol=2e-2)  # log-prob, entropy, sampled
    plain, _ = scored(device, 0, shape, sampler=True)
    assert not torch.allclose(full[0][:, 2], plain[0][:, 2])
