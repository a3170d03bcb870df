"""trainer.halve_on_oom (vlrl/trainer/budget.py): where a micro-batch runs the GPU out of memory,
the update's work since the optimizer step before is undone and done again at half the token
budget, which the run keeps; the step then equals one taken at that budget from the start. The
error is torch's own (torch.OutOfMemoryError), raised here where a CUDA allocation would fail:
after a micro-batch's forward or inside its backward, with earlier micro-batches' gradients
already accumulated."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from rich.console import Console

from tests.trainer.test_sft import sft_overrides
from tests.trainer.test_train import tiny_overrides
from vlrl.config import TrainerConfig, load_config
from vlrl.trainer import sft as sft_module
from vlrl.trainer import update as update_module
from vlrl.trainer.batch import RolloutBatch, update_micro_batches
from vlrl.trainer.budget import TokenBudget
from vlrl.trainer.sft import train_sft

CUDA_MESSAGE = "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB"


def out_of_memory(*_):
    raise torch.OutOfMemoryError(CUDA_MESSAGE)


def failing(monkeypatch, module, name: str, fails: set[tuple[bool, int]], where: str = "forward") -> list:
    """`module.name` (a micro-batch's log-probs) fails its n-th call with gradient (True, n) or
    without (False, n), counted from 1: after its forward, or in the backward through what it
    returned. Returns the calls, (grad, rows)."""
    real, calls = getattr(module, name), []

    def wrapped(*args, **kwargs):
        grad = torch.is_grad_enabled()
        calls.append((grad, len(args[2])))
        out = real(*args, **kwargs)
        if (grad, sum(1 for g, _ in calls if g == grad)) in fails:
            if where == "backward" and grad:
                scores = out if hasattr(out, "logp") else out[0]  # update's (TokenLogprobs, width)
                scores.logp.register_hook(out_of_memory)
            else:
                out_of_memory()
        return out

    monkeypatch.setattr(module, name, wrapped)
    return calls


@pytest.fixture
def trainer(tmp_path, rec_data, tiny_qwen25):
    from vlrl.trainer.rl import RLTrainer

    overrides = {"algo.beta": 0.04, "trainer.max_grad_norm": 1e9}
    trainer = RLTrainer(load_config(None, tiny_overrides(tmp_path, rec_data, **overrides)), Console(quiet=True))
    with torch.no_grad():  # the policy apart from the reference: the KL term has a gradient
        for p in trainer.run.model.parameters():
            p.add_(0.01 * torch.randn_like(p, generator=torch.Generator().manual_seed(3)))
    return trainer


def update_at(trainer, batch, advantages, budget: int) -> tuple[dict, dict]:
    """One update from the same weights with a plain SGD step: each weight's move, and the stats."""
    run = trainer.run
    start = getattr(trainer, "start", None) or {n: p.detach().clone() for n, p in run.model.named_parameters()}
    trainer.start = start
    with torch.no_grad():
        for n, p in run.model.named_parameters():
            p.copy_(start[n])
    run.optimizer = torch.optim.SGD(run.strategy.parameters, lr=1.0)
    run.scheduler = torch.optim.lr_scheduler.LambdaLR(run.optimizer, lambda s: 1.0)
    run.budget.tokens = budget
    stats, skipped = trainer.update(batch, advantages)
    assert skipped == 0
    return {n: start[n] - p.detach() for n, p in run.model.named_parameters()}, stats


def step_batch(trainer) -> tuple[RolloutBatch, torch.Tensor, int]:
    """Two prompts' groups and advantages, and a budget that holds both groups in one micro-batch,
    half of it one group each, a quarter one row each."""
    task, samples = trainer.sources[0].task, trainer.sources[0].train.samples[:2]
    groups, _ = trainer.generate_groups([(task, s) for s in samples], step=1)
    batch = RolloutBatch.from_groups(groups, trainer.run.pad_id)
    budget = 2 * (max(len(p) for p in batch.prompts) + 4 * max(batch.lengths()))
    shape = (batch.prompt_index.tolist(), [len(p) for p in batch.prompts], batch.lengths())
    assert [len(update_micro_batches(*shape, b)) for b in (budget, budget // 2, budget // 4)] == [1, 2, 8]
    return batch, torch.linspace(-1.0, 1.0, len(batch.prompt_index)), budget


@pytest.mark.parametrize(
    "where, mini_batches, redone",
    [
        ("forward", 1, 8),  # one optimizer step: the first group's gradient accumulated, dropped
        ("backward", 2, 4),  # two: the first one's sums kept, the second's dropped
    ],
)
def test_an_update_that_runs_out_of_memory_is_done_again_at_half_the_budget_as_a_run_at_that_budget(
    trainer, monkeypatch, where, mini_batches, redone
):
    """The reference's no-gradient pass fails (one micro-batch of both groups): it is done again
    at half the budget, one group a micro-batch. The update's second micro-batch fails: the
    work of its optimizer step is undone and done again at a quarter, one row a micro-batch.
    Weights, loss, KL and token counts then equal an update at a quarter of the budget from the
    start."""
    trainer.cfg.algo.mini_batches = mini_batches
    batch, advantages, budget = step_batch(trainer)
    expected, expected_stats = update_at(trainer, batch, advantages, budget // 4)
    calls = failing(monkeypatch, update_module, "rows_logprobs", {(False, 1), (True, 2)}, where)
    got, stats = update_at(trainer, batch, advantages, budget)
    assert trainer.run.budget.tokens == budget // 4  # kept for the rest of the run
    # the reference: 1 micro-batch failed, 2 done; the update: 1 done and 1 failed, then done again
    assert calls == [(False, 8), (False, 4), (False, 4), (True, 4), (True, 4), *[(True, 1)] * redone]
    assert stats.keys() == expected_stats.keys()
    for key in stats:
        assert stats[key] == pytest.approx(expected_stats[key], rel=1e-5, abs=1e-7), key
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=1e-4, atol=1e-7, msg=name)


def test_with_halve_on_oom_off_running_out_of_memory_ends_the_update_at_the_budget_set(trainer, monkeypatch):
    batch, advantages, budget = step_batch(trainer)
    trainer.run.budget.halve_on_oom = False
    failing(monkeypatch, update_module, "rows_logprobs", {(True, 1)})
    with pytest.raises(torch.OutOfMemoryError, match="Tried to allocate"):
        update_at(trainer, batch, advantages, budget)
    assert trainer.run.budget.tokens == budget


def test_a_micro_batch_of_one_row_that_runs_out_of_memory_ends_the_run_with_what_would_fit(trainer, monkeypatch):
    """Halved while a micro-batch held more than one row, then the error names the budget and
    what else would fit."""
    batch, advantages, budget = step_batch(trainer)
    calls = failing(monkeypatch, update_module, "rows_logprobs", {(False, n) for n in range(1, 20)})
    with pytest.raises(
        torch.OutOfMemoryError,
        match=r"one row a micro-batch \(CUDA out of memory\. Tried.*\) \(trainer.token_budget now \d+\)",
    ):
        update_at(trainer, batch, advantages, budget)
    assert calls == [(False, 8), (False, 4), (False, 1)]  # each attempt fails its first micro-batch
    assert trainer.run.budget.tokens == budget // 4


class OneOfTwo:
    """Processes as the main one of two sees them; the other fails its first attempt."""

    world, main = 2, True

    def __init__(self) -> None:
        self.agreed: list[bool] = []

    def all_true(self, flag: bool) -> bool:
        self.agreed.append(flag)
        return flag and len(self.agreed) > 1

    def max(self, value: int) -> int:
        return value


def test_when_another_process_runs_out_of_memory_every_process_undoes_its_work_and_halves(capsys):
    procs, done, undone = OneOfTwo(), [], []
    budget = TokenBudget(1000, True, True, procs, Console(), "trainer")  # type: ignore[arg-type]
    result = budget.attempt(lambda: done.append(budget.tokens) or "step", lambda: undone.append(1), lambda: [[0, 1]])
    assert (result, done, undone, procs.agreed, budget.tokens) == ("step", [1000, 500], [1], [True, True], 500)
    assert "ran out of GPU memory (on another process)" in capsys.readouterr().out


@pytest.mark.parametrize(
    "strategy, processes, reset, recovers",
    [
        ("replicated", 2, False, True),  # forwards are each process's own
        ("fsdp2", 1, True, True),
        ("fsdp2", 1, False, False),  # torch 2.11: no FSDPModule.reset_iter_state
        ("fsdp2", 2, True, False),  # the others would wait inside the failed all-gather
    ],
)
def test_a_failed_pass_is_done_again_only_where_the_strategy_can_discard_it(strategy, processes, reset, recovers):
    """Elsewhere the error ends the update at once, without any collective of the budget's."""
    from vlrl.parallel.fsdp2 import FSDP2
    from vlrl.parallel.replicated import Replicated

    cls = {"replicated": Replicated, "fsdp2": FSDP2}[strategy]
    chosen = cls.__new__(cls)
    procs = SimpleNamespace(world=processes, main=True, all_true=out_of_memory, max=out_of_memory)
    chosen.procs, chosen.model = procs, SimpleNamespace(**({"reset_iter_state": None} if reset else {}))
    budget = TokenBudget.of_run(TrainerConfig(), "trainer", procs, chosen, Console())  # type: ignore[arg-type]
    assert budget.recoverable == recovers
    if not recovers:
        with pytest.raises(torch.OutOfMemoryError, match="Tried to allocate"):
            budget.attempt(out_of_memory, lambda: None, lambda: [[0, 1]])


def test_under_fsdp2_a_backward_that_failed_leaves_no_gradient_to_the_pass_done_again(tmp_path, rec_data, tiny_qwen25):
    """On one process: the failed backward had computed the upper layers' and the root unit's
    gradients, on parameters FSDP2 gathered; torch's reset (reset_iter_state) reshards them but
    keeps those gradients, which the next backward would add to (vlrl.parallel.fsdp2.discard_pass
    drops them). The weights then equal an update at the budget it went on with."""
    import torch.distributed as dist

    from vlrl.models.loading import core_model
    from vlrl.trainer.rl import RLTrainer

    def updated(run_dir, fails: bool) -> tuple[dict, int]:
        options = {"trainer.parallel": "fsdp2", "algo.beta": 0.0}
        trainer = RLTrainer(load_config(None, tiny_overrides(run_dir, rec_data, **options)), Console(quiet=True))
        batch, advantages, budget = step_batch(trainer)
        backwards = []

        def second_fails(module, grad_output):
            backwards.append(module)
            if len(backwards) == 2:  # in the second micro-batch's backward, above the lowest layers
                out_of_memory()

        if fails:
            core_model(trainer.run.model).model.language_model.layers[1].register_full_backward_pre_hook(second_fails)
        trainer.run.budget.tokens = budget // 2 if fails else budget // 4
        trainer.update(batch, advantages)
        weights = {name: tensor.clone() for name, tensor in trainer.run.strategy.full_weights(device="cpu")}
        return weights, trainer.run.budget.tokens

    try:
        expected, set_at_quarter = updated(tmp_path / "quarter", fails=False)
        got, went_on_at = updated(tmp_path / "failed", fails=True)
    finally:
        dist.destroy_process_group()  # the one-process group FSDP2 made in this process
    assert went_on_at == set_at_quarter  # the failed run, set at half, went on at a quarter
    for name, tensor in expected.items():
        torch.testing.assert_close(got[name], tensor, rtol=0, atol=1e-6, msg=name)


def test_an_sft_step_that_runs_out_of_memory_is_done_again_at_half_the_budget_and_the_run_logs_it(
    tmp_path, rec_data, tiny_qwen25, monkeypatch, capsys
):
    """Step 1's second micro-batch fails in its backward; the run's weights then equal a run's at
    half the budget from the start (LoRA adapters with dropout: the attempt done again draws the
    step's masks anew, as that run does), and each step from then on logs the budget it went on
    with."""
    runs = {}
    for name, budget, fails in (("half", 200, set()), ("oom", 400, {(True, 2)})):
        monkeypatch.undo()
        calls = failing(monkeypatch, sft_module, "completion_logprobs", fails, "backward")
        overrides = {"sft.steps": 2, "sft.token_budget": budget, "sft.prompts_per_step": 4, "sft.lr": 1e-2}
        overrides |= {"model.lora.r": 4, "model.lora.dropout": 0.5}
        train_sft(load_config(None, sft_overrides(tmp_path / name, rec_data, **overrides)))
        rows = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        runs[name] = rows, calls
    (half, half_calls), (oom, oom_calls) = runs["half"], runs["oom"]
    assert [len(c) for c in (half_calls, oom_calls)] == [8, 10]  # one row a micro-batch at 200; two failed at 400
    assert [r.get("token_budget") for r in oom] == [200, 200] and "token_budget" not in half[0]
    for got, expected in zip(oom, half, strict=True):
        assert got["loss"] == pytest.approx(expected["loss"], rel=1e-5)
        assert got["grad_norm"] == pytest.approx(expected["grad_norm"], rel=1e-5)
    out = capsys.readouterr().out
    assert "ran out of GPU memory (CUDA out of memory. Tried to allocate 2.00 GiB" in out
    assert "sft.token_budget 200" in out


@pytest.mark.parametrize("strategy", ["replicated", "fsdp2"])
def test_a_rollout_that_runs_out_of_memory_is_sampled_again_one_group_a_call_as_a_run_sampling_so_from_the_start(
    tmp_path, rec_data, tiny_qwen25, strategy
):
    """Step 1's rollout fails in the policy's first forward (its prefill of both prompts, before
    any draw): it samples again one prompt a call (8 rows halved to 4), kept for step 2, and the
    run's completions, metrics and weights equal those of a run that sampled so from the start
    (rollout.max_rows=4).
    Under FSDP2 (one process) the failed forward ran inside the gathered weights, which torch's
    reset reshards (`Strategy.discard_pass`)."""
    import torch.distributed as dist

    from vlrl.models.loading import core_model
    from vlrl.trainer.rl import RLTrainer

    discarded = []

    def trained(run_dir, fails: bool) -> tuple[list[dict], dict]:
        overrides = {"trainer.parallel": strategy, "trainer.steps": 2, "algo.beta": 0.0}
        if not fails:
            overrides["rollout.max_rows"] = 4  # the parts the failed run goes on in, set from the start
        trainer = RLTrainer(load_config(None, tiny_overrides(run_dir, rec_data, **overrides)), Console(quiet=True))
        forwards, strategy_of_run = [], trainer.run.strategy
        discard = strategy_of_run.discard_pass
        strategy_of_run.discard_pass = lambda model: discarded.append(model is trainer.run.model) or discard(model)

        def first_fails(module, args):
            forwards.append(len(args[0]))
            if len(forwards) == 1:
                out_of_memory()

        if fails:
            layer = core_model(trainer.run.model).model.language_model.layers[0].self_attn.q_proj
            layer.register_forward_pre_hook(first_fails)
        trainer.train()
        weights = {name: tensor.clone() for name, tensor in trainer.run.strategy.full_weights(device="cpu")}
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in r.items() if not k.startswith("time_")} for r in rows], weights

    try:
        expected, expected_weights = trained(tmp_path / "parts", fails=False)
        got, weights = trained(tmp_path / "failed", fails=True)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()  # the one-process group FSDP2 made in this process
    assert [r.pop("rollout_rows") for r in got] == [4, 4]  # halved: logged; set (rollout.max_rows): not
    # what the failed forward left reset (on a CPU its numbers do not show a root forward left unfinished)
    assert discarded == [True]
    assert got[0].keys() == expected[0].keys()
    for row, want in zip(got, expected, strict=True):
        for key, value in want.items():
            assert row[key] == pytest.approx(value, rel=1e-5, abs=1e-7), key
    for name, tensor in expected_weights.items():
        torch.testing.assert_close(weights[name], tensor, rtol=0, atol=1e-6, msg=name)


@pytest.mark.parametrize("off", ["halve_on_oom", "recovers"])
def test_with_halve_on_oom_off_a_rollout_that_runs_out_of_memory_ends_the_run(
    tmp_path, rec_data, tiny_qwen25, monkeypatch, off
):
    """trainer.halve_on_oom=false, or a strategy that cannot discard a failed forward
    (`Strategy.recovers`: FSDP2 on several processes, where torch's reset reshards the gathered
    weights and the forward done again would all-gather on that process alone): the error ends
    the run at its first call, and no held-out evaluation recovers either."""
    from vlrl.parallel.replicated import Replicated
    from vlrl.trainer.rl import RLTrainer

    if off == "recovers":
        monkeypatch.setattr(Replicated, "recovers", lambda self: False)
    overrides = tiny_overrides(
        tmp_path, rec_data, **({"trainer.halve_on_oom": "false"} if off == "halve_on_oom" else {})
    )
    trainer = RLTrainer(load_config(None, overrides), Console(quiet=True))
    assert not trainer.eval_rows.halve_on_oom
    real, calls = trainer.engine.generate, []

    def first_fails(prompts, params, generator=None):
        calls.append(len(prompts))
        if len(calls) == 1:  # a second call, in parts, would go on
            out_of_memory()
        return real(prompts, params, generator)

    monkeypatch.setattr(trainer.engine, "generate", first_fails)
    with pytest.raises(torch.OutOfMemoryError, match="Tried to allocate"):
        trainer.train()
    assert calls == [2]
