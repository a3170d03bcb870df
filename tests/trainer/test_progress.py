"""Progress where no terminal watches (nohup, SLURM, a log file): a plain line every
log_every steps, with the means since the previous line, seconds per step and time left."""

from __future__ import annotations

import io
import json
import re

from rich.console import Console

from tests.trainer.test_sft import sft_overrides
from vlrl.config import load_config
from vlrl.progress import ProgressReport, duration
from vlrl.trainer.sft import train_sft

LINE = re.compile(r"^train step (\d+)/10 \| (.*) \| ([0-9.e+-]+) s/step \| (ETA \S+|done in \S+)$")


def lines(console: Console) -> list[str]:
    return console.file.getvalue().splitlines()


def feed(report: ProgressReport, steps: range) -> None:
    for step in steps:
        metrics = {"step": step, "reward": float(step), "accuracy": 0.5, "loss": 9.0}
        if step % 2 == 0:
            metrics["kl"] = 0.01 * step
        report.advance(1, metrics)


def test_without_a_terminal_a_line_every_n_steps_holds_the_means_since_the_last():
    console = Console(file=io.StringIO(), width=300)
    assert not console.is_terminal
    with ProgressReport(console, "train", total=10, every=4, fields=("reward", "accuracy", "kl")) as report:
        feed(report, range(1, 11))
    printed = lines(console)
    parsed = [LINE.match(line) for line in printed]
    assert all(parsed), printed
    assert [int(m.group(1)) for m in parsed] == [1, 4, 8, 10]  # the first, every 4th, the last
    assert [m.group(2) for m in parsed] == [
        "reward 1 | accuracy 0.5",  # step 1 logged no kl
        "reward 3 | accuracy 0.5 | kl 0.03",  # steps 2-4: kl at 2 and 4
        "reward 6.5 | accuracy 0.5 | kl 0.07",  # steps 5-8
        "reward 9.5 | accuracy 0.5 | kl 0.1",  # steps 9-10
    ]
    assert [m.group(4).split()[0] for m in parsed] == ["ETA", "ETA", "ETA", "done"]


def test_a_resumed_run_prints_on_the_same_steps():
    console = Console(file=io.StringIO(), width=300)
    with ProgressReport(console, "train", total=10, done=5, every=4, fields=("reward",)) as report:
        feed(report, range(6, 11))
    assert [int(LINE.match(line).group(1)) for line in lines(console)] == [6, 8, 10]


def test_on_a_terminal_the_bar_is_drawn_and_no_lines_are_printed():
    console = Console(file=io.StringIO(), width=300, force_terminal=True)
    with ProgressReport(console, "train", total=10, every=1, fields=("reward",)) as report:
        feed(report, range(1, 11))
    out = console.file.getvalue()
    assert "10/10" in out and "reward 10.000" in out  # the bar and its status
    assert not re.search(r"train step \d+/10 \|", out)


def test_eval_progress_counts_samples_and_prints_every_n_batches():
    console = Console(file=io.StringIO(), width=300)
    with ProgressReport(console, "eval refcoco", total=10, every=2, unit="sample") as report:
        for batch in (4, 4, 2):
            report.advance(batch)
    printed = lines(console)
    assert [line.split(" | ")[0] for line in printed] == [
        "eval refcoco 4/10",
        "eval refcoco 8/10",
        "eval refcoco 10/10",
    ]
    assert all(re.search(r" \| [0-9.e+]+ samples/s \| ", line) for line in printed)
    assert printed[-1].endswith(tuple(f"done in {s}s" for s in range(60)))


def test_duration_reads_like_a_clock():
    assert [duration(s) for s in (7.2, 65, 3725)] == ["7s", "1m05s", "1h02m05s"]


def test_sft_prints_plain_progress_lines_when_stdout_is_not_a_terminal(tmp_path, rec_data, tiny_qwen25):
    console = Console(file=io.StringIO(), width=300)
    run_dir = tmp_path / "sft"
    overrides = sft_overrides(run_dir, rec_data, **{"sft.steps": 5, "sft.progress": True, "sft.log_every": 2})
    train_sft(load_config(None, overrides), console)
    losses = [json.loads(line)["loss"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    progress = [line for line in lines(console) if line.startswith("sft step ")]
    assert [line.split(" | ")[0] for line in progress] == [
        "sft step 1/5",
        "sft step 2/5",
        "sft step 4/5",
        "sft step 5/5",
    ]
    means = [losses[0], losses[1], (losses[2] + losses[3]) / 2, losses[4]]
    assert [line.split(" | ")[1] for line in progress] == [f"loss {m:.4g}" for m in means]
    quiet = Console(file=io.StringIO(), width=300)
    overrides = sft_overrides(tmp_path / "quiet", rec_data, **{"sft.steps": 1, "sft.progress": False})
    train_sft(load_config(None, overrides), quiet)
    assert not [line for line in lines(quiet) if line.startswith("sft step ")]  # sft.progress=false: none
