"""SIGTERM (preemption) and SIGINT (Ctrl-C) stop a run after the step in flight, checkpointed;
a rerun resumes with no finished step lost; a second signal exits at once."""

from __future__ import annotations

import signal
import time

import pytest
from conftest import HELD_TASK, checkpoint_steps, logged_steps, tiny_run

from vlrl.config import load_config
from vlrl.trainer.rl import train


def test_sigterm_during_a_step_checkpoints_that_step_and_a_rerun_resumes_after_it(
    tmp_path, rec_data, tiny_qwen25, vlrl_process
):
    run_dir, hold = tmp_path / "run", tmp_path / "hold"
    args = ["train", *tiny_run(run_dir, rec_data, **{"task.name": HELD_TASK, "trainer.steps": 50})]
    run = vlrl_process(args, env={"VLRL_TEST_HOLD": str(hold)})
    run.wait_for(lambda: logged_steps(run_dir / "metrics.jsonl"))  # step 1 is done
    hold.touch()
    run.wait_for(hold.with_suffix(".entered").exists)  # a later step is scoring its completions
    run.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    hold.unlink()  # the step in flight goes on
    status, out, err = run.finish()

    steps = logged_steps(run_dir / "metrics.jsonl")
    assert status == 128 + signal.SIGTERM, out + err
    assert "Traceback" not in out + err
    assert 2 <= steps[-1] < 50 and steps == list(range(1, steps[-1] + 1))
    assert checkpoint_steps(run_dir) == [steps[-1]]  # save_every=100: only the stop saved it
    assert f"stopped by SIGTERM after step {steps[-1]}" in out
    assert f"step-{steps[-1]:07d}" in out  # where the checkpoint is

    # The same command, run again (here for one more step), continues after the checkpoint.
    train(load_config(None, tiny_run(run_dir, rec_data, **{"task.name": HELD_TASK, "trainer.steps": steps[-1] + 1})))
    assert logged_steps(run_dir / "metrics.jsonl") == list(range(1, steps[-1] + 2))


def test_sigterm_during_the_last_step_finds_the_run_finished_and_exits_0(tmp_path, rec_data, tiny_qwen25, vlrl_process):
    """The step in flight is the last: checkpointed as every last step is, nothing left to resume,
    so the run is not reported stopped (a scheduler that requeues on 143 would rerun it for nothing)."""
    run_dir, hold = tmp_path / "run", tmp_path / "hold"
    args = ["train", *tiny_run(run_dir, rec_data, **{"task.name": HELD_TASK, "trainer.steps": 1})]
    hold.touch()
    run = vlrl_process(args, env={"VLRL_TEST_HOLD": str(hold)})
    run.wait_for(hold.with_suffix(".entered").exists)  # step 1, the last, is scoring its completions
    run.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    hold.unlink()
    status, out, err = run.finish()
    assert status == 0, out + err
    assert "stopped by" not in out and logged_steps(run_dir / "metrics.jsonl") == [1]
    assert checkpoint_steps(run_dir) == [1]


def test_ctrl_c_during_sft_stops_cleanly_with_status_130(tmp_path, rec_data, tiny_qwen25, vlrl_process):
    run_dir = tmp_path / "sft"
    run = vlrl_process(["sft", *tiny_run(run_dir, rec_data, "sft", **{"sft.steps": 1000})])
    run.wait_for(lambda: logged_steps(run_dir / "metrics.jsonl"))
    run.proc.send_signal(signal.SIGINT)
    status, out, err = run.finish(timeout=60)

    steps = logged_steps(run_dir / "metrics.jsonl")
    assert status == 128 + signal.SIGINT, out + err
    assert "Traceback" not in out + err and "KeyboardInterrupt" not in out + err
    assert steps == list(range(1, steps[-1] + 1)) and steps[-1] < 1000
    assert checkpoint_steps(run_dir) == [steps[-1]]


def test_a_second_signal_exits_at_once_and_keeps_the_last_checkpoint(tmp_path, rec_data, tiny_qwen25, vlrl_process):
    run_dir, hold = tmp_path / "run", tmp_path / "hold"
    args = [
        "train",
        *tiny_run(run_dir, rec_data, **{"task.name": HELD_TASK, "trainer.steps": 50, "trainer.save_every": 1}),
    ]
    run = vlrl_process(args, env={"VLRL_TEST_HOLD": str(hold)})
    run.wait_for(lambda: checkpoint_steps(run_dir))
    hold.touch()
    run.wait_for(hold.with_suffix(".entered").exists)
    run.proc.send_signal(signal.SIGTERM)
    time.sleep(1.5)  # past the window in which a launcher's forwarded copy counts as the same signal
    run.proc.send_signal(signal.SIGTERM)
    status, out, err = run.finish(timeout=10)  # while the step is still held: it did not wait for it

    assert status == 128 + signal.SIGTERM, out + err
    assert "again: stopping now" in err and "Traceback" not in out + err
    held_step = logged_steps(run_dir / "metrics.jsonl")[-1] + 1
    assert checkpoint_steps(run_dir)[-1] == held_step - 1  # the in-flight step was not saved; the last one is whole
    assert not list((run_dir / "checkpoints").glob(".tmp-*"))


def test_ctrl_c_before_training_starts_prints_one_line_and_leaves_no_run_directory(
    tmp_path, rec_data, capsys, monkeypatch
):
    import vlrl.trainer.run as run_module
    from vlrl.cli import main

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt  # Ctrl-C while the model loads

    monkeypatch.setattr(run_module, "load_model", interrupted)
    (tmp_path / "runs" / "kept").mkdir(parents=True)
    run_dir = tmp_path / "runs" / "mine" / "run"
    assert main(["train", *tiny_run(run_dir, rec_data)]) == 128 + signal.SIGINT
    assert capsys.readouterr().out == "interrupted\n"
    assert not (tmp_path / "runs" / "mine").exists()  # nor the folder made for it
    assert (tmp_path / "runs" / "kept").is_dir()  # the folders it did not make stay


def test_sigterm_during_an_evaluation_ends_it_as_ctrl_c_does_leaving_no_output_directory(
    tmp_path, rec_data, capsys, monkeypatch
):
    """Outside a training loop SIGTERM ends the command as Ctrl-C does: one line, status 143, and
    the output directory it made and did not fill removed (Python's default ended the process
    there and then, an empty directory left behind)."""
    import os

    import vlrl.eval.harness as harness
    from vlrl.cli import main

    def terminated(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)  # while the evaluation runs
        time.sleep(5)
        raise AssertionError("SIGTERM did not stop the evaluation")

    def outside(signum, frame):  # stands in for the default, which would end the test's process
        raise AssertionError("SIGTERM reached the handler outside the command")

    monkeypatch.setattr(harness, "generate", terminated)
    out = tmp_path / "evals" / "mine"
    args = ["eval", "--task", f"refcoco={rec_data}", "--model", "tiny:qwen2_5_vl", "--out", str(out), "--limit", "2"]
    previous = signal.signal(signal.SIGTERM, outside)
    try:
        assert main(args) == 128 + signal.SIGTERM
        assert signal.getsignal(signal.SIGTERM) is outside  # the command's handler is gone with it
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert capsys.readouterr().out.splitlines()[-1] == "terminated"
    assert not (tmp_path / "evals").exists()


def test_a_repeat_within_the_window_is_the_same_request_and_a_later_one_exits_at_once(tmp_path, monkeypatch):
    from vlrl.trainer import stops

    exits = []
    monkeypatch.setattr(stops.os, "_exit", exits.append)
    with stops.StopSignals(tmp_path) as signals:
        signals._handle(signal.SIGTERM, None)
        signals._handle(signal.SIGTERM, None)  # a launcher's forwarded copy, milliseconds later
        assert signals.received == signal.SIGTERM and exits == []
        signals._first_at -= stops.REPEAT_WINDOW_S + 0.5
        signals._handle(signal.SIGINT, None)
    assert exits == [128 + signal.SIGINT]


def test_a_signal_the_process_was_started_with_ignored_stays_ignored(tmp_path):
    """`vlrl train &` in a script, or under nohup, starts with SIGINT (or SIGTERM) ignored: a
    Ctrl-C at the terminal is not meant for it, and the training loop and the commands keep it
    so; the other signal still stops the run."""
    import os

    from vlrl.trainer.stops import StopSignals, Terminated, terminated_as_interrupt

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with StopSignals(tmp_path) as signals:
            assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGINT)
            assert signals.received == 0
            os.kill(os.getpid(), signal.SIGTERM)
            assert signals.received == signal.SIGTERM
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)

    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with terminated_as_interrupt():
            os.kill(os.getpid(), signal.SIGTERM)
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
    except Terminated:
        pytest.fail("an ignored SIGTERM ended the command")
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_failed_write_is_told_with_the_file_it_names():
    import errno

    from vlrl.trainer.stops import os_failure

    err = OSError(errno.ENOSPC, "No space left on device", "/runs/a/metrics.jsonl")
    assert os_failure(err) == "/runs/a/metrics.jsonl: No space left on device"
    assert os_failure(OSError(errno.ENOSPC, "No space left on device")) == "No space left on device"
