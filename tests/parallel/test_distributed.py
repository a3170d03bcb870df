"""Data-parallel training across processes (torchrun / accelerate launch), on CPU with gloo."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from torch._inductor.runtime.cache_dir_utils import default_cache_dir

from vlrl.config import load_config
from vlrl.parallel.distributed import Processes
from vlrl.trainer.sft import train_sft

ROOT = Path(__file__).resolve().parents[2]


def torchrun_command(processes: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes)]


TORCHRUN = torchrun_command(2)


def torchrun_env(tmp: Path) -> dict[str, str]:
    """CPU processes over gloo, also on a machine with one GPU (which two processes cannot split),
    one thread each, this checkout importable; their temporary files (the launcher's
    torchelastic_* log folders among them) under `tmp`, removed with the test's. Except
    torch's compile cache: it stays where every other process of the suite finds it (torch's
    default, under the system's temporary folder), or vLLM's CPU kernels, compiled with inductor
    even in eager mode, were compiled anew by both processes of every such run (15 s of the
    data-parallel vLLM test's 50, 2026-11-28)."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {
        **os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path, "CUDA_VISIBLE_DEVICES": "", "TMPDIR": str(tmp),
        "TORCHINDUCTOR_CACHE_DIR": os.environ.get("TORCHINDUCTOR_CACHE_DIR", default_cache_dir()),
    }  # fmt: skip


def torchrun(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """Two CPU processes (`torchrun_env`, temporary files under `cwd`)."""
    env = torchrun_env(cwd)
    return subprocess.run([*TORCHRUN, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_one_process_is_a_no_op():
    procs = Processes()
    param = torch.nn.Parameter(torch.ones(2))
    param.grad = torch.tensor([1.0, 3.0])
    procs.average_gradients([param])
    assert param.grad.tolist() == [1.0, 3.0]
    assert procs.share([1, 2, 3]) == [1, 2, 3] and procs.all_true(False) is False
    assert procs.mean_metrics({"step": 1, "loss": 2.0}) == {"step": 1, "loss": 2.0}


WORKER = textwrap.dedent(
    """
    import json, sys, torch
    from vlrl.algos.losses import token_weights
    from vlrl.parallel.distributed import PeerFailed, Processes

    procs = Processes.from_env()
    r = procs.rank

    def outcome(block, fails_on):  # what each process saw of `block` failing on one: its error, or PeerFailed
        try:
            with block():
                if r == fails_on:
                    raise ValueError("bad file")
        except ValueError:
            return "own"
        except PeerFailed:
            return "peer"
        return "ok"

    failures = {"main_first": outcome(procs.main_first, 0), "together": outcome(procs.together, 1),
                "none": outcome(procs.together, None)}
    # Per-token losses x * c over unequal shares: rank 0 has two rows (5 tokens), rank 1 one row (1 token).
    mask = [torch.tensor([[1.0, 1, 1], [1, 1, 0]]), torch.tensor([[1.0, 0, 0]])][r]
    coef = [torch.tensor([[1.0, 2, 3], [4, 5, 0]]), torch.tensor([[6.0, 0, 0]])][r]
    whole_batch_gradients = {}
    for aggregation in ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm", "micro_token_mean"):
        x = torch.nn.Parameter(torch.zeros(1))
        w = token_weights(  # as the update passes them (vlrl/trainer/update.py), blocks of 1 row: 2 and 1
            mask, aggregation, 3, rows=procs.mean(mask.shape[0]), tokens=procs.mean(float(mask.sum())),
            micro_rows=1, micro_batches=procs.mean(mask.shape[0]),
        )
        (x * coef * w).sum().backward()
        procs.average_gradients([x])
        whole_batch_gradients[aggregation] = x.grad.item()
    shared, only_rank1, unused = (torch.nn.Parameter(torch.zeros(2)) for _ in range(3))
    shared.grad = torch.tensor([1.0, 2.0]) * (r + 1)  # rank 0: [1, 2], rank 1: [2, 4]
    if r == 1:
        only_rank1.grad = torch.tensor([4.0, 4.0])
    procs.average_gradients([shared, only_rank1, unused])
    out = {
        "shared": shared.grad.tolist(),
        "only_rank1": only_rank1.grad.tolist(),
        "unused": unused.grad is None,
        "share": procs.share(list(range(6))),
        "all_true": procs.all_true(r == 0),
        "all_true_both": procs.all_true(True),
        "metrics": procs.mean_metrics(
            {"step": 3, "loss": float(r), "failures": 2.0 + r, **({"extra": 5.0} if r == 1 else {})},
            counts=lambda key: key == "failures",
        ),
        "max": procs.max(r + 1),  # collectives go on after the failures
        "failures": failures,
        "whole_batch_gradients": whole_batch_gradients,
    }
    open(sys.argv[1] + f".{r}", "w").write(json.dumps(out))
    """
)


def test_processes_on_gpus_join_a_group_that_also_reduces_cpu_tensors(monkeypatch):
    """NCCL reduces CUDA tensors only; FSDP2's CPU offload reduces its gradient norm over CPU
    shards: the launcher's group has gloo beside NCCL, as fsdp2.ensure_process_group's group of
    one has. No GPU here: the calls are recorded."""
    import torch.distributed as dist

    calls = []
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: calls.append(("set_device", device)))
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda backend, **kw: calls.append((backend, kw["device_id"])))
    monkeypatch.setattr(dist, "get_rank", lambda: 1)
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)
    monkeypatch.setattr("atexit.register", lambda fn: None)
    procs = Processes.from_env()
    assert (procs.rank, procs.world, procs.local_rank) == (1, 2, 1)
    assert calls == [("set_device", 1), ("cuda:nccl,cpu:gloo", torch.device("cuda", 1))]


def test_gradients_are_averaged_and_decisions_agreed_across_processes(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    result = torchrun([str(script), str(tmp_path / "out")], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"out.{r}").read_text()) for r in range(2)]
    for r, out in enumerate(ranks):
        assert out["shared"] == [1.5, 3.0]  # the mean of [1, 2] and [2, 4]
        assert out["only_rank1"] == [2.0, 2.0]  # the other process counts as a zero gradient
        assert out["unused"]  # no gradient anywhere: none, as on one process
        assert out["share"] == [[0, 1, 2], [3, 4, 5]][r]
        assert out["all_true"] is False and out["all_true_both"] is True
        # averaged, counts added up, the step kept, a key only process 1 has kept too (process 0
        # may have had no sample in a step: its reward is process 1's)
        assert out["metrics"] == {"step": 3, "loss": 0.5, "failures": 5.0, "extra": 5.0}
        assert out["max"] == 2
        # A failure on one process stops the others at once, rather than at their next collective.
        assert out["failures"] == {"main_first": ["own", "peer"][r], "together": ["peer", "own"][r], "none": "ok"}
        # The averaged gradient is the one over all six tokens at once, however unequal the shares.
        # micro_token_mean: the mean of the three blocks' token means, two on rank 0 and one on rank 1
        # (each process's own block count as the divisor would give (2 + 4.5) / 2 and 6, then 4.625).
        expected = {
            "token_mean": 21 / 6,
            "seq_mean_token_mean": (2 + 4.5 + 6) / 3,
            "seq_mean_token_sum_norm": 21 / 9,
            "micro_token_mean": (2 + 4.5 + 6) / 3,
        }
        assert out["whole_batch_gradients"] == pytest.approx(expected, rel=1e-6)


@pytest.mark.slow  # over 20 s on an idle 2-core machine
def test_sft_and_rl_train_on_two_processes_with_one_run_directory(tmp_path, rec_data, tiny_qwen25):
    common = ["model.path=tiny:qwen2_5_vl", "model.max_pixels=12544", f"data.train={rec_data}", "task.name=refcoco"]
    sft_dir, rl_dir = tmp_path / "sft", tmp_path / "rl"
    sft_args = [
        "-m",
        "vlrl.cli",
        "sft",
        *common,
        f"sft.output_dir={sft_dir}",
        "sft.prompts_per_step=4",
        "sft.save_every=3",
    ]
    sft = torchrun([*sft_args, "sft.steps=3", "sft.progress=false"], tmp_path)
    assert sft.returncode == 0, sft.stderr[-3000:]
    assert sft.stdout.count("run directory:") == 1  # process 0 prints the run's files
    checkpoint = sft_dir / "checkpoints" / "step-0000003"
    assert checkpoint.is_dir()
    rows = [json.loads(line) for line in (sft_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2, 3]  # one process writes the log, once per step
    # The step's numbers, as one process logs them: its tokens in all, the perplexity of its loss.
    alone = tmp_path / "sft-alone"
    train_sft(
        load_config(
            None, [*common, f"sft.output_dir={alone}", "sft.steps=3", "sft.prompts_per_step=4", "sft.progress=false"]
        )
    )
    single = [json.loads(line) for line in (alone / "metrics.jsonl").read_text().splitlines()]
    assert [r["target_tokens"] for r in rows] == [r["target_tokens"] for r in single]
    assert [r["loss"] for r in rows] == pytest.approx([r["loss"] for r in single], rel=1e-5)
    assert all(r["perplexity"] == pytest.approx(math.exp(r["loss"]), rel=1e-12) for r in rows)
    resumed = torchrun([*sft_args, "sft.steps=4", "sft.progress=false"], tmp_path)  # both resume; process 0 says so
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert resumed.stdout.count(f"resumed from {checkpoint} (step 3)") == 1, resumed.stdout
    script = tmp_path / "rl_worker.py"
    script.write_text(RL_WORKER)
    toy_task = f"task.name={ROOT / 'tests' / 'fixtures' / 'toy_task.py'}:BriefGrounding"  # a dense reward: it moves
    rl = torchrun(
        [
            str(script),
            str(tmp_path / "weights"),
            *common,
            toy_task,
            f"model.path={checkpoint}",
            f"trainer.output_dir={rl_dir}",
        ],
        tmp_path,
    )
    assert rl.returncode == 0, rl.stderr[-3000:]
    rows = [json.loads(line) for line in (rl_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2] and all("reward" in row and "kl" in row for row in rows)
    assert (rl_dir / "checkpoints" / "step-0000002").is_dir()
    # Different prompts and samples per process (Processes.share), one averaged update: the weights agree.
    sums = [json.loads((tmp_path / f"weights.{r}").read_text()) for r in range(2)]
    assert sums[0]["moved"] > 0 and sums[0]["checksum"] == sums[1]["checksum"]
    assert sums[0]["stream"] == sums[1]["stream"]  # refilling groups kept the data streams in step


RL_WORKER = textwrap.dedent(
    """
    import json, sys, torch
    from rich.console import Console
    from vlrl.config import load_config
    from vlrl.trainer.rl import RLTrainer

    overrides = [*sys.argv[2:], "trainer.steps=2", "trainer.prompts_per_step=2", "rollout.num_generations=4",
                 "rollout.max_new_tokens=12", "trainer.lr=1e-3", "trainer.save_every=2", "trainer.progress=false", "algo.beta=0.04",
                 "algo.dynamic_sampling=true"]
    trainer = RLTrainer(load_config(None, overrides), Console(quiet=True))
    start = [p.detach().clone() for p in trainer.run.params]
    trainer.train()
    params = trainer.run.params
    out = {
        "checksum": sum(float(p.double().sum()) * (i + 1) for i, p in enumerate(params)),
        "moved": sum(float((p - s).abs().sum()) for p, s in zip(params, start)),
        "stream": trainer.run.stream.state_dict(),
    }
    open(sys.argv[1] + f".{trainer.run.procs.rank}", "w").write(json.dumps(out))
    """
)


class TwoProcesses(Processes):
    """A run's processes as two, in this process: for the checks made before any collective."""

    @classmethod
    def from_env(cls) -> Processes:
        return cls(rank=0, world=2)


def test_a_batch_that_does_not_split_evenly_is_refused(tmp_path, rec_data, tiny_qwen25, monkeypatch):
    """The run's processes as two, in this process: the check comes before the run's first
    collective (a launched pair of processes took 17 s to say the same). Only the run sees two:
    the collectives around it would wait for a second process."""
    from vlrl.config import ConfigError, load_config
    from vlrl.trainer import run
    from vlrl.trainer.sft import train_sft

    monkeypatch.setattr(run, "Processes", TwoProcesses)
    overrides = ["model.path=tiny:qwen2_5_vl", f"data.train={rec_data}", "task.name=refcoco"]
    overrides += [f"sft.output_dir={tmp_path / 'sft'}", "sft.steps=1", "sft.prompts_per_step=3"]
    with pytest.raises(ConfigError, match=r"sft.prompts_per_step \(3\) must divide evenly among the 2 training"):
        train_sft(load_config(None, overrides))
    assert not (tmp_path / "sft").exists()  # refused before the run directory was made


@pytest.mark.parametrize(
    "command, status, printed",
    [(["tasks", "list"], 0, "refcoco"), (["tasks", "list", "--no-such-flag"], 2, "unrecognized arguments"),
     (["boom"], 1, "ZeroDivisionError"),
     (["peer gone"], 2, "error: stopped: another process failed (its error is printed above)"),
     # a process of ~3.5 s: a one-line error, as "peer gone" is
     pytest.param(["config", "show"], 2, "needs the YAML config file", marks=pytest.mark.slow)],
)  # fmt: skip
def test_a_process_of_several_ends_after_its_exit_handlers_without_the_interpreters_finalization(
    command, status, printed
):
    """`vlrl` as one of several processes (WORLD_SIZE > 1) ends through `exit_process`, whether
    its command succeeded, failed in one line, misused its arguments or raised: its exit handlers
    run (leaving the group is one), what it printed is flushed, its status is the command's, and
    the interpreter's finalization, where a gloo thread freeing its last collective aborted the
    process, never runs (here: an object finalized only then says nothing)."""
    script = textwrap.dedent(
        """
        import atexit, sys
        import vlrl.cli

        class Finalized:
            def __del__(self):
                print("finalized", flush=True)

        kept = Finalized()  # a module global: freed only by the interpreter's finalization
        atexit.register(lambda: print("exit handler"))
        if sys.argv[1:] == ["boom"]:
            sys.argv[1:] = ["tasks", "list"]
            vlrl.cli.cmd_tasks = lambda args: 1 / 0  # an unexpected error inside the command
        if sys.argv[1:] == ["peer gone"]:  # a collective broken by another process's end, as gloo says it
            sys.argv[1:] = ["tasks", "list"]
            def gone(args):
                raise RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:561] Connection closed by peer")
            vlrl.cli.cmd_tasks = gone
        sys.exit(vlrl.cli.main(sys.argv[1:]))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WORLD_SIZE": "2", "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-c", script, *command], env=env, capture_output=True, text=True)
    assert done.returncode == status, done.stderr
    assert printed in done.stdout + done.stderr
    assert done.stdout.endswith("exit handler\n") and "finalized" not in done.stdout, done.stdout[-500:]


def test_a_process_of_several_imports_no_model_code_to_end():
    """`vlrl` under a launcher imports vlrl.parallel.distributed to end, also after a usage error:
    the package's __init__ imported the Strategy seam and with it vlrl.models and transformers
    (6 s more for each process to say its error)."""
    script = "import sys, vlrl.parallel.distributed; print('HEAVY', [m for m in ('vlrl.models', 'transformers') if m in sys.modules])"
    done = subprocess.run(
        [sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True
    )
    assert done.returncode == 0 and "HEAVY []" in done.stdout, done.stderr[-2000:]


EXIT_WORKER = textwrap.dedent(
    """
    import atexit, sys, time
    from vlrl.parallel.distributed import PeerFailed, Processes, exit_process

    procs = Processes.from_env()
    try:
        with procs.together():
            if procs.rank == 0:
                raise ValueError("its own error")
    except ValueError as err:  # process 0 closes its trackers (slowly: a remote server), then says why
        time.sleep(1.0)
        print(f"rank 0: {err}", flush=True)
        # and a tracker's own exit handler takes its time too (MLflow's)
        atexit.register(lambda: (time.sleep(1.0), print("rank 0: exit handler done", flush=True)))
    except PeerFailed:
        pass
    exit_process(2)
    """
)


def test_a_process_stopped_by_anothers_error_waits_for_it_to_end_before_ending(tmp_path):
    """torchrun stops every process as soon as one ends with an error, and names the first to end
    the root cause: had process 1 (stopped by process 0's error) ended at once, process 0 was
    stopped while it closed its trackers, before it printed its error; had it ended once process
    0 came to its end, process 0 was stopped in its exit handlers, and process 1 named."""
    script = tmp_path / "worker.py"
    script.write_text(EXIT_WORKER)
    env = torchrun_env(tmp_path)
    launch = [*TORCHRUN[:3], "--monitor-interval", "0.05", *TORCHRUN[3:], str(script)]
    done = subprocess.run(launch, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "rank 0: its own error" in done.stdout, done.stdout + done.stderr[-2000:]
    assert "rank 0: exit handler done" in done.stdout, done.stdout + done.stderr[-2000:]
    root_cause = " ".join(done.stderr.split("Root Cause")[1].split())
    assert root_cause.split("rank : ")[1].startswith("0 (local_rank: 0) exitcode : 2"), root_cause


ENDING_WORKER = textwrap.dedent(
    """
    import atexit, os, sys
    import torch.distributed as dist
    from vlrl.parallel import distributed as D

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    store, key = D.dist.distributed_c10d._get_default_store(), "vlrl/ended/0"
    if sys.argv[1] == "stopped":
        D.PeerFailed()
    atexit.register(lambda: print("in its exit handlers:", store.add(key, 0), flush=True))
    real_exit = os._exit
    os._exit = lambda status: (print("at its end:", store.add(key, 0), flush=True), real_exit(status))
    D.exit_process(0)
    """
)


@pytest.mark.parametrize("how, counted", [("failing", ["0", "1"]), ("stopped", ["1", "1"])])
def test_a_process_counts_itself_ended_after_its_exit_handlers_unless_another_stopped_it(how, counted):
    """The failing (or finished) process is counted once its exit handlers are done, just before
    it ends; one stopped by another's error at once, before it waits."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", ENDING_WORKER, how], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["in", "its", "exit", "handlers:", counted[0], "at", "its", "end:", counted[1]]


def test_stopped_processes_wait_for_the_failing_one_to_end_and_not_for_each_other():
    """Three processes, one failing: the two it stopped count themselves ended on arriving, so
    they wait for it alone (had they not, each waited for the other until the deadline, where a
    launcher does not end them first); it counts itself once its exit handlers are done."""
    import threading

    import torch.distributed as dist

    from vlrl.parallel.distributed import _Ending

    store = dist.HashStore()
    stopped = [_Ending(store, "k", 3) for _ in range(2)]
    waited: list[float] = []

    def stop(ending: _Ending) -> None:
        start = time.monotonic()
        ending.say_ended()
        ending.wait_for_the_others(30.0)
        waited.append(time.monotonic() - start)

    threads = [threading.Thread(target=stop, args=(e,)) for e in stopped]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    assert not waited  # the failing one has not ended yet
    _Ending(store, "k", 3).say_ended()
    for thread in threads:
        thread.join(timeout=30)
    assert len(waited) == 2 and all(0.5 <= seconds < 5 for seconds in waited), waited


@pytest.mark.slow  # ~25 s: three processes start, and MLflow in each
def test_a_tracker_that_does_not_start_stops_every_process_in_one_line(tmp_path, rec_data, tiny_qwen25):
    """Process 0 opens the trackers: its error, and the others told, not a gloo traceback on them."""
    run_dir = tmp_path / "sft"
    args = ["-m", "vlrl.cli", "sft", "model.path=tiny:qwen2_5_vl", "model.max_pixels=12544", f"data.train={rec_data}"]
    args += ["task.name=refcoco", f"sft.output_dir={run_dir}", "sft.steps=1", "sft.prompts_per_step=2"]
    env = {**torchrun_env(tmp_path), "MLFLOW_TRACKING_URI": "nowhere://store"}
    done = subprocess.run(
        [*TORCHRUN, *args, "sft.report_to=[mlflow]"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    out = " ".join((done.stdout + done.stderr).split())
    assert done.returncode != 0
    assert "sft.report_to mlflow: MLflow's tracking store 'nowhere://store' did not open" in out
    assert "error: stopped: another process failed (its error is printed above)" in out
    # no traceback of a process (torchrun prints its own, naming process 0 the root cause)
    assert "Connection closed by peer" not in out and 'vlrl/trainer/run.py", line' not in out
    assert "rank : 0 (local_rank: 0) exitcode : 2" in out.split("Root Cause")[1] and not run_dir.exists()


def test_only_a_collective_broken_by_another_process_is_told_as_that_processs_failure():
    from vlrl.parallel.distributed import peer_gone

    gloo = RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:561] Connection closed by peer [::1]:7")
    own = ConnectionResetError(104, "Connection reset by peer")  # a process's own socket: a reward server's
    assert peer_gone(gloo) and peer_gone(torch.distributed.DistBackendError("NCCL communicator was aborted"))
    assert not peer_gone(own) and not peer_gone(RuntimeError("CUDA out of memory"))
