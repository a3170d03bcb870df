"""A log torn by a stop mid-write is repaired on resume: the torn tail dropped and reported, no step twice."""

from __future__ import annotations

import json

from conftest import copy_run, logged_steps

from vlrl.cli import main
from vlrl.trainer.trackers import drop_steps_after


def test_a_torn_last_line_is_dropped_reported_and_the_rerun_logs_each_step_once(tmp_path, finished_run, capsys):
    run_dir, overrides = copy_run(finished_run, tmp_path / "run", **{"trainer.steps": 3})
    metrics, samples = run_dir / "metrics.jsonl", run_dir / "samples.jsonl"
    # Step 3 was logged after the checkpoint of step 2, then the run died writing a line.
    with open(metrics, "a") as handle:
        handle.write(json.dumps({"step": 3, "reward": 0.5}) + "\n" + '{"step": 4, "rew')
    with open(samples, "a") as handle:
        handle.write('{"step": 3, "completion": "<think>cut')
    assert main(["train", *overrides]) == 0
    out = capsys.readouterr().out
    assert f"{metrics}:4: dropped a line that is not a whole JSON record" in out
    assert f"{metrics}: dropped the lines of step 3, which no checkpoint holds (they are trained again)" in out
    assert f"{samples}:" in out
    assert logged_steps(metrics) == [1, 2, 3]
    assert all(json.loads(line) for line in samples.read_text().split("\n") if line)


def test_lines_split_at_newlines_only(tmp_path):
    log = tmp_path / "samples.jsonl"
    text = "a\u2028b\x1cc\x0bd\x0ce\x85f"  # characters JSON allows raw in a string, which splitlines() splits at
    log.write_text(json.dumps({"step": 1, "completion": text}, ensure_ascii=False) + "\n")
    assert drop_steps_after(log, 1) == []
    assert json.loads(log.read_text().split("\n")[0])["completion"] == text


def test_a_full_disk_while_logging_stops_the_run_in_one_line_and_the_rerun_resumes(
    tmp_path, finished_run, monkeypatch, capsys
):
    """ENOSPC writing metrics.jsonl at step 4: the run stops there, naming the file and the
    checkpoint of step 3 (a traceback before); freed, the same command resumes from step 3."""
    from vlrl.trainer.trackers import JsonlLog

    run_dir, overrides = copy_run(finished_run, tmp_path / "run", **{"trainer.steps": 4, "trainer.save_every": 1})
    metrics = run_dir / "metrics.jsonl"
    write = JsonlLog.write

    def full(self, record):
        if self.path == metrics and record["step"] == 4:  # as a full disk fails: at the flush, no file named
            with open(metrics, "a") as handle:
                handle.write('{"step": 4, "rew')  # what fitted
            self._handle = open("/dev/full", "a", encoding="utf-8")  # closed by the run
        write(self, record)

    monkeypatch.setattr(JsonlLog, "write", full)
    assert main(["train", *overrides]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert f"error: stopped at step 4: {metrics}: No space left on device" in out
    assert f"{run_dir / 'checkpoints' / 'step-0000003'} is intact" in out
    monkeypatch.setattr(JsonlLog, "write", write)
    assert main(["train", *overrides]) == 0
    assert logged_steps(metrics) == [1, 2, 3, 4]


def test_a_full_disk_when_a_resumed_run_cuts_its_logs_back_is_one_line(tmp_path, finished_run, monkeypatch, capsys):
    import errno

    import vlrl.trainer.run as run

    def full(path, step):
        raise OSError(errno.ENOSPC, "No space left on device")

    run_dir, overrides = copy_run(finished_run, tmp_path / "run", **{"trainer.steps": 3})
    monkeypatch.setattr(run, "drop_steps_after", full)
    assert main(["train", *overrides]) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert f"error: No space left on device: the run's logs in {run_dir} cannot be written at its start" in out
