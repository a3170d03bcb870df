"""`vlrl train` on the tiny model: weights change, resuming equals not stopping, bad updates are skipped."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from vlrl.cli import main
from vlrl.config import load_config
from vlrl.trainer.rl import train

TOY_TASK = f"{Path(__file__).parent.parent / 'fixtures' / 'toy_task.py'}:BriefGrounding"
TIMING_KEYS = {"time_rollout", "time_reward", "time_update", "time_step"}


def tiny_overrides(run_dir: Path, data: Path, **extra) -> list[str]:
    values = {
        "model.path": "tiny:qwen2_5_vl",
        "model.dtype": "float32",  # also on a GPU, where auto is bfloat16: these tests compare to 1e-5
        "model.max_pixels": 50176,
        "data.train": str(data),
        "task.name": TOY_TASK,
        "rollout.num_generations": 4,
        "rollout.max_new_tokens": 12,
        "trainer.output_dir": str(run_dir),
        "trainer.prompts_per_step": 2,
        "trainer.steps": 3,
        "trainer.lr": 1e-3,
        "trainer.progress": False,
        "trainer.save_every": 100,
        **extra,
    }
    return [f"{k}={v}" for k, v in values.items()]


def metrics(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if k not in TIMING_KEYS} for row in rows]


def test_counts_of_events_are_told_from_means_when_processes_are_combined():
    from vlrl.trainer.rl import is_count

    counted = ["reward_failures/iou", "refcoco/reward_failures/format", "oversized_completions", "counting/accuracy_failures", "thinking_failures"]  # fmt: skip
    averaged = ["reward", "reward/iou", "refcoco/reward", "skipped_samples", "data_skipped_records", "kl", "accuracy"]
    assert [is_count(k) for k in counted] == [True] * 5 and not any(is_count(k) for k in averaged)


def test_train_command_runs_and_changes_the_weights(tmp_path, rec_data, tiny_qwen25, capsys):
    run_dir = tmp_path / "run"
    assert main(["train", *tiny_overrides(run_dir, rec_data)]) == 0
    out = capsys.readouterr().out
    assert f"run directory: {run_dir}" in out and "checkpoint:" in out
    rows = metrics(run_dir)
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r["reward_std"] > 0 for r in rows)
    assert {"reward/format", "reward/iou", "reward/brevity", "loss", "kl", "grad_norm", "entropy"} <= rows[0].keys()
    before = load_file(tiny_qwen25 / "model.safetensors")
    after = load_file(run_dir / "checkpoints" / "step-0000003" / "model.safetensors")
    changed = [name for name in before if not torch.equal(before[name], after[name])]
    assert any(n.startswith("model.layers") for n in changed) and any(n.startswith("visual.") for n in changed)
    # Its processor states the image budget the run trained at (model.max_pixels), not its base's 200,704
    saved = json.loads((run_dir / "checkpoints" / "step-0000003" / "processor_config.json").read_text())
    assert saved["image_processor"]["size"]["longest_edge"] == 50176
    # samples.jsonl: a group's completions with what they answered, as TRL's completions table
    lines = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    records = {str(i): r for i, r in enumerate(json.loads(rec_data.read_text()))}
    first = lines[0]
    assert {
        "step",
        "id",
        "prompt",
        "images",
        "target",
        "completion",
        "rewards",
        "reward",
        "accuracy",
        "advantage",
    } <= first.keys()
    assert (
        records[first["id"]]["normal_caption"] in first["prompt"]
        and first["target"] == records[first["id"]]["solution"]
    )
    assert [Path(p).name for p in first["images"]] == [Path(records[first["id"]]["image"]).name]
    assert all(Path(p).is_file() for p in first["images"])


def test_resuming_from_a_checkpoint_gives_the_uninterrupted_run(tmp_path, rec_data, tiny_qwen25, monkeypatch):
    from vlrl.trainer.rl import RLTrainer

    straight = tmp_path / "straight"
    train(load_config(None, tiny_overrides(straight, rec_data, **{"trainer.steps": 4, "trainer.save_every": 2})))
    resumed = tmp_path / "resumed"
    train(load_config(None, tiny_overrides(resumed, rec_data, **{"trainer.steps": 2, "trainer.save_every": 2})))
    # The second half, as a new process would run it: same command, more steps, resume=auto. It
    # takes steps 3 and 4 only (a fresh run, seeded alike, would take all four to the same end).
    updates = []
    update = RLTrainer.update
    monkeypatch.setattr(RLTrainer, "update", lambda self, *args, **kw: updates.append(1) or update(self, *args, **kw))
    train(load_config(None, tiny_overrides(resumed, rec_data, **{"trainer.steps": 4, "trainer.save_every": 2})))
    assert len(updates) == 2

    assert metrics(resumed) == metrics(straight)
    a = load_file(straight / "checkpoints" / "step-0000004" / "model.safetensors")
    b = load_file(resumed / "checkpoints" / "step-0000004" / "model.safetensors")
    assert all(torch.equal(a[name], b[name]) for name in a)


def test_a_run_from_another_runs_checkpoint_resumes_as_uninterrupted_after_that_checkpoint_is_gone(
    tmp_path, rec_data, capsys
):
    from tests.trainer.test_sft import sft_overrides
    from vlrl.trainer.sft import train_sft

    # Qwen2-VL, not the default family: the resumed run must read its data in that family's frame
    sft_options = {"sft.steps": 1, "model.path": "tiny:qwen2_vl"}
    sft = train_sft(load_config(None, sft_overrides(tmp_path / "sft", rec_data, **sft_options)))
    rl = {"model.path": sft.checkpoint, "algo.beta": 0.04, "trainer.save_every": 1}  # the reference is the SFT model
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train(load_config(None, tiny_overrides(straight, rec_data, **rl, **{"trainer.steps": 2})))
    train(load_config(None, tiny_overrides(resumed, rec_data, **rl, **{"trainer.steps": 1})))
    shutil.rmtree(tmp_path / "sft")  # its run pruned the checkpoint (keep_last), or was deleted
    capsys.readouterr()
    train(load_config(None, tiny_overrides(resumed, rec_data, **rl, **{"trainer.steps": 2})))
    assert f"is gone; the run reads the base it kept, {resumed / 'base'}\n" in capsys.readouterr().out
    assert metrics(resumed) == metrics(straight)  # the same reference, so the same KL and updates


def test_a_tasks_metric_that_is_not_a_number_is_said_and_left_out_of_the_held_out_evaluation(
    tmp_path, rec_data, capsys
):
    task = TOY_TASK.replace("BriefGrounding", "UnsoundMetrics")
    run = tmp_path / "unsound"
    overrides = {"task.name": task, "data.eval": rec_data, "eval.every": 1, "eval.limit": 2, "trainer.steps": 1}
    assert main(["train", *tiny_overrides(run, rec_data, **overrides)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "warning: task unsound_metrics's metric 'coverage' is 'None', not a number: left out" in out
    assert "warning: task unsound_metrics's metric 'label' is 'high', not a number: left out" in out
    rows = metrics(run)
    assert "eval/acc@0.5" in rows[0] and "eval/coverage" not in rows[0] and "eval/label" not in rows[0]


def test_a_headline_metric_no_evaluation_reports_is_said_once(tmp_path, rec_data, capsys):
    overrides = {"data.eval": rec_data, "eval.every": 1, "eval.limit": 2, "trainer.steps": 2}
    overrides["eval.headline"] = "[acc@0.5, acc@O.5]"
    assert main(["train", *tiny_overrides(tmp_path / "run", rec_data, **overrides)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    said = "warning: eval.headline names 'acc@O.5', which no held-out evaluation reports; they report: acc@0.1, "
    assert out.count(said) == 1 and out.count("held-out step") == 2
    assert "held-out step 1 | brief_grounding (2 samples of" in out


@pytest.mark.parametrize("rank", [0, 1])
def test_only_the_process_that_evaluates_warns_of_a_headline_no_evaluation_reports(
    rank, tmp_path, rec_data, tiny_qwen25
):
    """Process 0 evaluates the held-out splits; another process, with none of them, took every
    eval.headline name for one no evaluation reports and warned of it (2-process runs)."""
    import dataclasses
    import io

    from rich.console import Console

    from tests.rollout.test_rollout_seam import make_trainer

    trainer = make_trainer(tmp_path, rec_data, engine="hf", **{"eval.headline": "[acc@0.5]"})
    trainer.run.procs = dataclasses.replace(trainer.run.procs, rank=rank, world=2)  # as that process sees itself
    trainer.held_out = []  # as process 1 holds them; process 0's here evaluate nothing either
    trainer.console = Console(file=io.StringIO(), width=200)
    assert trainer.evaluate_held_out(step=1) == {}
    said = "eval.headline names 'acc@0.5', which no held-out evaluation reports" in trainer.console.file.getvalue()
    assert said == (rank == 0)


def test_micro_batch_size_does_not_change_the_gradient(tmp_path, rec_data, tiny_qwen25, monkeypatch):
    from rich.console import Console

    from vlrl.trainer.batch import RolloutBatch, longest_first, micro_batches, padded_tokens, unpadded_tokens
    from vlrl.trainer.rl import RLTrainer

    cfg = load_config(None, tiny_overrides(tmp_path, rec_data, **{"algo.beta": 0.04, "trainer.max_grad_norm": 1e9}))
    trainer = RLTrainer(cfg, Console(quiet=True))
    model = trainer.run.model
    with torch.no_grad():  # let the policy drift from the reference so the KL term has a gradient
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    task, samples = trainer.sources[0].task, trainer.sources[0].train.samples[:3]
    groups, _ = trainer.generate_groups([(task, s) for s in samples], step=1)
    batch = RolloutBatch.from_groups(groups, trainer.run.pad_id)
    batch.completion_mask[1::2, 3:] = 0  # every second completion 3 tokens long: the two packings differ
    advantages = torch.randn(len(batch.prompt_index), generator=torch.Generator().manual_seed(1))
    start = {n: p.detach().clone() for n, p in model.named_parameters()}

    def gradient_step(budget: int) -> tuple[dict, dict]:
        trainer.run.budget.tokens = budget
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(start[n])
        trainer.run.optimizer = torch.optim.SGD(trainer.run.strategy.parameters, lr=1.0)
        trainer.run.scheduler = torch.optim.lr_scheduler.LambdaLR(trainer.run.optimizer, lambda s: 1.0)
        stats, skipped = trainer.update(batch, advantages)
        assert skipped == 0
        return {n: start[n] - p.detach() for n, p in model.named_parameters()}, stats

    whole, whole_stats = gradient_step(100000)
    for packing in (micro_batches, longest_first):  # in the rows' order, and longest (prompt and completion) first
        monkeypatch.setattr("vlrl.trainer.update.update_micro_batches", packing)
        split, split_stats = gradient_step(300)
        plan = trainer.updater.plan(batch, list(range(len(batch.prompt_index))))
        rows = (batch.prompt_index.tolist(), [len(p) for p in batch.prompts], batch.lengths())
        assert len(plan) > 1 and plan == packing(*rows, 300)
        # the logged share of the trained forwards' tokens that were padding
        assert split_stats["update_padding"] == pytest.approx(
            1 - unpadded_tokens(plan, *rows) / padded_tokens(plan, *rows)
        )
        assert split_stats["loss"] == pytest.approx(whole_stats["loss"], rel=1e-5, abs=1e-7)
        assert split_stats["kl"] == pytest.approx(whole_stats["kl"], rel=1e-5)
        for name in whole:
            torch.testing.assert_close(whole[name], split[name], rtol=1e-4, atol=1e-7, msg=name)
    assert longest_first(*rows, 300) != micro_batches(*rows, 300)  # two packings, each compared with the whole batch
    assert whole_stats["update_padding"] > 0  # one micro-batch: every completion padded to the longest


def test_the_seed_decides_the_samples_and_save_every_and_keep_last_the_checkpoints(tmp_path, rec_data, tiny_qwen25):
    """trainer.seed draws the prompts (the data stream) and the completions (the sampling
    generator: on a one-record dataset only it differs); save_every=1 checkpoints every step,
    keep_last=2 keeps the last two; log_samples_every=2 logs completions at step 1 and every
    second step."""
    one = tmp_path / "one.json"
    one.write_text(json.dumps(json.loads(rec_data.read_text())[:1]))
    logged = {}
    for name, seed, data, steps in (("a", 1, rec_data, 3), ("b", 2, rec_data, 1), ("c", 1, one, 1), ("d", 2, one, 1)):
        extra = {"trainer.seed": seed, "trainer.steps": steps, "trainer.save_every": 1, "trainer.keep_last": 2,
                 "trainer.log_samples_every": 2, "data.image_root": str(rec_data.parent)}  # fmt: skip
        train(load_config(None, tiny_overrides(tmp_path / name, data, **extra)))
        logged[name] = [json.loads(line) for line in (tmp_path / name / "samples.jsonl").read_text().splitlines()]
    assert sorted({row["step"] for row in logged["a"]}) == [1, 2]
    assert sorted(p.name for p in (tmp_path / "a" / "checkpoints").glob("step-*")) == ["step-0000002", "step-0000003"]
    first = {
        name: [(row["id"], row["completion"]) for row in rows if row["step"] == 1] for name, rows in logged.items()
    }
    assert first["a"][0][0] != first["b"][0][0]  # another seed, other prompts
    assert {i for i, _ in first["c"] + first["d"]} == {"0"} and first["c"] != first[
        "d"
    ]  # one prompt, other completions


def test_non_finite_updates_are_skipped_and_stop_the_run(tmp_path, rec_data, tiny_qwen25, monkeypatch, recwarn):
    import vlrl.algos.losses as losses

    original = losses.policy_loss

    def nan_loss(*args):
        terms = original(*args)
        terms.per_token = terms.per_token * float("nan")
        return terms

    monkeypatch.setattr(losses, "policy_loss", nan_loss)
    run = tmp_path / "nan"
    cfg = load_config(
        None, tiny_overrides(run, rec_data, **{"trainer.steps": 5, "trainer.max_consecutive_nonfinite": 2})
    )
    with pytest.raises(RuntimeError, match="2 steps in a row skipped an update for a non-finite loss"):
        train(cfg)
    rows = metrics(run)
    assert [r["skipped_updates"] for r in rows] == [1, 2]
    assert not (run / "checkpoints").exists() or not list((run / "checkpoints").iterdir())
    assert not [w for w in recwarn if "lr_scheduler.step()" in str(w.message)]  # torch's advice does not apply


def test_a_policy_that_diverges_stops_the_run_and_names_the_checkpoint_to_rewind_to(tmp_path, rec_data, capsys):
    run = tmp_path / "diverged"
    kept = {"trainer.save_every": 1, "trainer.keep_last": 3}
    assert main(["train", *tiny_overrides(run, rec_data, **kept, **{"trainer.steps": 2})]) == 0
    # Resumed at a learning rate whose first step moves every weight by ~1e30 (Adam's step is ~lr):
    # the update of step 3 has a finite loss and gradient, and step 4 samples from non-finite logits.
    capsys.readouterr()
    assert main(["train", *tiny_overrides(run, rec_data, **kept, **{"trainer.steps": 5, "trainer.lr": 1e30})]) == 2
    out = capsys.readouterr().out
    checkpoints = run / "checkpoints"
    assert "error: stopped at step 4: the policy gives non-finite log-probs" in out
    assert f"{checkpoints / 'step-0000003'} holds those weights" in out
    assert f"trainer.resume={checkpoints / 'step-0000002'} trainer.lr=" in out
    assert [r["step"] for r in metrics(run)] == [1, 2, 3]  # nothing of step 4 logged
    # The advice works: rewound to step 2 at the first learning rate, the run trains to its end.
    rewind = tiny_overrides(
        run, rec_data, **kept, **{"trainer.steps": 5, "trainer.resume": checkpoints / "step-0000002"}
    )
    assert main(["train", *rewind]) == 0
    assert [r["step"] for r in metrics(run)] == [1, 2, 3, 4, 5]


def unfinite_at(monkeypatch, steps: set[int]) -> None:
    """The optimizer steps of `steps` (1-based, a set the test may change) are told their loss is not finite."""
    from vlrl.trainer.run import Run

    original = Run.optimizer_step
    monkeypatch.setattr(
        Run, "optimizer_step", lambda self, finite: original(self, finite and self.step + 1 not in steps)
    )


def test_skipped_updates_add_up_over_a_run_and_its_resume_and_only_consecutive_ones_stop_it(
    tmp_path, rec_data, tiny_qwen25, monkeypatch
):
    limit = {"trainer.max_consecutive_nonfinite": 2}
    unfinite_at(monkeypatch, unfinite_steps := {1, 3})  # two skipped updates, a good one between them: the run goes on
    apart = tmp_path / "apart"
    train(load_config(None, tiny_overrides(apart, rec_data, **limit, **{"trainer.steps": 4})))
    assert [r["skipped_updates"] for r in metrics(apart)] == [1, 1, 2, 2]
    # Stopped after a skipped update at step 2, resumed with another at step 3: the second in a row
    unfinite_steps.clear()
    unfinite_steps.update({2, 3})
    run = tmp_path / "resumed"
    train(load_config(None, tiny_overrides(run, rec_data, **limit, **{"trainer.steps": 2})))
    with pytest.raises(
        RuntimeError, match=r"stopped at step 3: 2 steps in a row skipped an update for a non-finite loss"
    ):
        train(load_config(None, tiny_overrides(run, rec_data, **limit, **{"trainer.steps": 4})))
    assert [r["skipped_updates"] for r in metrics(run)] == [0, 1, 2]


def test_each_steps_metrics_are_those_of_its_groups_and_its_samples_carry_their_own_advantages(
    tmp_path, rec_data, tiny_qwen25, monkeypatch
):
    from vlrl.algos.advantages import grpo
    from vlrl.rollout.hf import HFEngine
    from vlrl.trainer.rl import RLTrainer

    sample = HFEngine.generate

    def uneven(self, *args):  # completions cut to several lengths: the longest and the padding show
        generations = sample(self, *args)
        for c, keep in (
            (c, max(1, len(c.token_ids) - 3 * j)) for g in generations for j, c in enumerate(g.completions)
        ):
            c.truncated = c.truncated and keep == len(c.token_ids)
            c.token_ids, c.logprobs, c.entropies = c.token_ids[:keep], c.logprobs[:keep], c.entropies[:keep]
        return generations

    monkeypatch.setattr(HFEngine, "generate", uneven)
    drawn = []  # each step's scored groups
    generate = RLTrainer.generate_groups
    monkeypatch.setattr(
        RLTrainer, "generate_groups", lambda self, items, step: drawn.append(generate(self, items, step)) or drawn[-1]
    )
    run = tmp_path / "run"
    train(load_config(None, tiny_overrides(run, rec_data, **{"trainer.log_samples_every": 1})))
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert [len(groups) for groups, _ in drawn] == [2, 2, 2]
    for step, (row, (groups, _)) in enumerate(zip(rows, drawn, strict=True), start=1):
        rewards = torch.stack([g.reward for g in groups])
        completions = [c for g in groups for c in g.completions]
        lengths = torch.tensor([len(c.token_ids) for c in completions], dtype=torch.float32)
        assert lengths.max() > lengths.mean()
        entropies = [e for c in completions for e in c.entropies]
        advantages = grpo(rewards)
        expected = {
            "reward": rewards.mean(),
            "reward_std": rewards.std(dim=1).mean(),
            "frac_groups_zero_std": (rewards.std(dim=1) == 0).float().mean(),
            "advantage_abs": advantages.abs().mean(),
            "completion_length": lengths.mean(),
            "completion_length_max": lengths.max(),
            "truncated_frac": sum(c.truncated for c in completions) / len(completions),
            "entropy": sum(entropies) / len(entropies),
            "accuracy": torch.cat([g.accuracy for g in groups]).mean(),
            "reward/iou": sum(v for g in groups for v in g.scores.components["iou"]) / len(completions),
        }
        assert {k: row[k] for k in expected} == pytest.approx({k: float(v) for k, v in expected.items()}, abs=1e-5)
        assert row["time_step"] == pytest.approx(row["time_rollout"] + row["time_update"], abs=1e-9)
        assert (row["sampling_rounds"], row["skipped_samples"], row["optimizer_steps"]) == (1, 0, 1.0)
        assert ("data_skipped_records" in row) == (step == 1)
        # samples.jsonl: the step's first group, each completion with its own reward and advantage
        logged = [s for s in samples if s["step"] == step]
        assert [s["completion"] for s in logged] == [c.text for c in groups[0].completions]
        assert [s["reward"] for s in logged] == pytest.approx(rewards[0].tolist())
        assert [s["advantage"] for s in logged] == pytest.approx(advantages[0].tolist(), abs=1e-5)


def test_an_update_whose_gradient_is_not_finite_is_skipped_though_its_loss_is_finite(
    tmp_path, rec_data, tiny_qwen25, monkeypatch
):
    from vlrl.parallel.replicated import Replicated

    clip = Replicated.clip_gradients
    monkeypatch.setattr(Replicated, "clip_gradients", lambda self, max_norm: clip(self, max_norm) * float("inf"))
    run = tmp_path / "run"
    train(load_config(None, tiny_overrides(run, rec_data, **{"trainer.steps": 1})))
    (row,) = metrics(run)
    assert row["skipped_updates"] == 1 and row["grad_norm"] is None and row["loss"] is not None
    before = load_file(tiny_qwen25 / "model.safetensors")
    after = load_file(run / "checkpoints" / "step-0000001" / "model.safetensors")
    assert all(torch.equal(before[name].float(), after[name].float()) for name in before)


def test_a_skipped_update_moves_no_weight_and_leaves_no_gradient_to_the_next(tmp_path, rec_data, tiny_qwen25):
    from rich.console import Console

    from vlrl.trainer.rl import RLTrainer

    run = RLTrainer(load_config(None, tiny_overrides(tmp_path, rec_data)), Console(quiet=True)).run
    for p in run.params:
        p.grad = torch.ones_like(p)
    before = [p.detach().clone() for p in run.params]
    _, applied = run.optimizer_step(False)  # a non-finite loss on some process
    assert not applied
    assert all(torch.equal(a, p) for a, p in zip(before, run.params, strict=True))
    assert all(p.grad is None or not p.grad.any() for p in run.params)


def test_a_model_whose_own_samples_have_non_finite_log_probs_stops_at_step_1_before_any_update(
    tmp_path, rec_data, tiny_qwen25, monkeypatch
):
    from vlrl.rollout.hf import HFEngine

    generate = HFEngine.generate

    def non_finite(self, *args):
        generations = generate(self, *args)
        for c in (c for g in generations for c in g.completions):
            c.logprobs = [float("nan")] * len(c.token_ids)
        return generations

    monkeypatch.setattr(HFEngine, "generate", non_finite)
    run = tmp_path / "run"
    with pytest.raises(RuntimeError) as stop:
        train(load_config(None, tiny_overrides(run, rec_data)))
    assert str(stop.value) == (
        "stopped at step 1: the model at model.path gives non-finite log-probs on its own samples, before any "
        "update (its weights, or a model.dtype too narrow for them)"
    )
    assert not (run / "metrics.jsonl").is_file() or not metrics(run)  # nothing of step 1 logged
