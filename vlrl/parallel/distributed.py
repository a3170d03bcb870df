"""Data parallelism across processes started by `accelerate launch` or `torchrun`.

Each process holds the whole model, samples and scores its own share of every step's prompts,
and computes its loss on them; gradients are averaged across processes before each optimizer
step, so every process applies the same update and the weights stay identical. Losses are
normalized by the whole step's sizes (`mean`), so the averaged gradient is the gradient one
process would compute over all the prompts. Process 0 writes the logs and checkpoints and runs
held-out evaluation. Without a launcher (no WORLD_SIZE in the environment) everything here is
a no-op on one process.

Gradients are all-reduced by hand rather than through DistributedDataParallel: the number of
token-budgeted micro-batches differs between processes, and DDP needs every process to run
the same number of backward passes.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import NoReturn

import torch
import torch.distributed as dist


def _leave_group() -> None:
    """At exit: leave the process group, unless something (vLLM's shutdown) already did."""
    if dist.is_initialized():
        dist.destroy_process_group()


def exit_process(status: int) -> NoReturn:
    """End one of several processes once its command is done: the exit handlers (leaving the
    group among them), then the end, without the interpreter's finalization. There a gloo
    worker thread still letting go of its last collective (a completed all-reduce whose tensors
    it held a moment longer) needs the GIL the finalizing interpreter no longer gives, and the
    process aborts ("terminate called without an active exception") after its work is done:
    about 1 two-process run in 60 under load, a core showing ProcessGroupGloo::runLoop freeing
    an AsyncAllreduceWork during Py_FinalizeEx (pytorch PR 179291 names the mechanism). Leaving
    the group does not join those threads: transformers' from_pretrained keeps the group
    alive past destroy_process_group. Every file the run writes is closed by then; stdout and
    stderr are flushed first, as the launcher may end this process while it waits. A process
    that another's error stopped waits for that one to end first (`_Ending`)."""
    ending = _Ending.join()
    try:
        if PeerFailed.raised:  # stopped by another's error: counted as ended now, then waits for it
            ending.say_ended()
            _flush()
            ending.wait_for_the_others(EXIT_WAIT_S)
            time.sleep(EXIT_GRACE_S)
        atexit._run_exitfuncs()  # what the interpreter's exit runs first, in the same order
    finally:
        _flush()
        if not PeerFailed.raised:
            ending.say_ended()
        os._exit(status)


def _flush() -> None:
    sys.stdout.flush()
    sys.stderr.flush()


class PeerFailed(RuntimeError):
    """Another process stopped with an error of its own (printed by it); this one stops too, and
    waits for the others to end (`exit_process`)."""

    raised = False  # whether this process raised one

    def __init__(self, *args: object):
        super().__init__(*args)
        PeerFailed.raised = True


PEER_FAILED = "stopped: another process failed (its error is printed above)"
EXIT_WAIT_S = 120.0  # how long a process stopped by another's error waits for it to end (closing its trackers)
# And then a moment more: the failing process says it ended just before os._exit, but its exit
# (a torch process's memory unmapped) is seen by torchrun only once done, which under load took
# longer than the stopped process's own exit handlers: torchrun then named the stopped process
# the root cause (seen once in a `make test` on 2 busy cores).
EXIT_GRACE_S = 2.0


def peer_gone(err: BaseException) -> bool:
    """Whether `err` is a collective failing because another process has gone (its own error,
    printed by it): a backend's error, or gloo's transport finding its peer's connection closed
    (a process's own network errors, which name no gloo source file, are not this)."""
    text = str(err)
    closed = any(words in text for words in ("Connection closed by peer", "Connection reset by peer"))
    return isinstance(err, dist.DistBackendError) or (closed and "gloo" in text)


@dataclass(frozen=True)
class _Ending:
    """How the processes end in order: torchrun stops every process as soon as one ends with an
    error, and names the first to end the root cause. A process stopped by another's error
    (`PeerFailed`) so waits until that one has ended: has said why, closed its trackers and run
    its exit handlers (MLflow's take seconds). Each process adds itself to a count in the
    launcher's store: a stopped one on arriving, any other once its exit handlers are done, just
    before it ends. The store is held from before the exit handlers, which leave the group."""

    store: dist.Store | None
    key: str = ""
    world: int = 1

    @classmethod
    def join(cls) -> _Ending:
        if not dist.is_initialized():
            return cls(None)
        key = f"vlrl/ended/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
        try:
            return cls(dist.distributed_c10d._get_default_store(), key, dist.get_world_size())
        except Exception:  # a group without a store: nothing to wait on
            return cls(None)

    def say_ended(self) -> None:
        if self.store is not None:
            with contextlib.suppress(Exception):  # a store gone with its launcher: nothing to tell
                self.store.add(self.key, 1)

    def wait_for_the_others(self, seconds: float) -> None:
        """Wait (at most `seconds`) until every other process has ended or is stopped too."""
        if self.store is None:
            return
        with contextlib.suppress(Exception):  # a store gone with its launcher (or process 0): they have ended
            deadline = time.monotonic() + seconds
            while self.store.add(self.key, 0) < self.world and time.monotonic() < deadline:
                time.sleep(0.05)


@dataclass(frozen=True)
class Processes:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @classmethod
    def from_env(cls) -> Processes:
        """The launcher's process group (WORLD_SIZE, RANK, LOCAL_RANK), joined on first use."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world == 1:
            return cls()
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if not dist.is_initialized():
            # Long timeout: the other processes wait while process 0 evaluates or checkpoints.
            timeout = timedelta(hours=2)
            if torch.cuda.is_available():
                torch.cuda.set_device(local_rank)
                # gloo beside NCCL for collectives of CPU tensors: FSDP2's CPU offload keeps the
                # gradient shards there, and its gradient norm is reduced over them.
                device = torch.device("cuda", local_rank)
                dist.init_process_group("cuda:nccl,cpu:gloo", timeout=timeout, device_id=device)
            else:
                dist.init_process_group("gloo", timeout=timeout)
            atexit.register(_leave_group)  # gloo aborts at exit if the group is left open
        return cls(dist.get_rank(), dist.get_world_size(), local_rank)

    @property
    def main(self) -> bool:
        return self.rank == 0

    def device(self) -> torch.device:
        if torch.cuda.is_available():
            return torch.device("cuda", self.local_rank) if self.world > 1 else torch.device("cuda")
        return torch.device("cpu")

    def share(self, items: list) -> list:
        """This process's contiguous share of a step's items (the count divides evenly)."""
        n = len(items) // self.world
        return items[self.rank * n : (self.rank + 1) * n]

    def _comm_device(self) -> torch.device:
        return self.device() if dist.get_backend() == "nccl" else torch.device("cpu")

    def _reduce(self, value: float, op: dist.ReduceOp) -> float:
        if self.world == 1:
            return value
        tensor = torch.tensor([float(value)], dtype=torch.float64, device=self._comm_device())
        dist.all_reduce(tensor, op=op)
        return float(tensor.item())

    def mean(self, value: float) -> float:
        return self._reduce(value, dist.ReduceOp.SUM) / self.world

    def max(self, value: int) -> int:
        return int(self._reduce(value, dist.ReduceOp.MAX))

    def all_true(self, flag: bool) -> bool:
        return self._reduce(1.0 if flag else 0.0, dist.ReduceOp.MIN) > 0

    def average_gradients(self, params: list[torch.nn.Parameter]) -> None:
        """Every gradient becomes the mean over processes; a parameter that no process gave a
        gradient keeps none, as on one process (AdamW then leaves it alone)."""
        if self.world == 1:
            return
        has_grad = torch.tensor([p.grad is not None for p in params], dtype=torch.float32, device=self._comm_device())
        dist.all_reduce(has_grad, op=dist.ReduceOp.MAX)
        for p, anywhere in zip(params, has_grad.tolist(), strict=True):
            if not anywhere:
                continue
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            p.grad /= self.world

    def mean_metrics(
        self, metrics: dict[str, float], counts: Callable[[str], bool] = lambda key: False
    ) -> dict[str, float]:
        """Each metric averaged over the processes that logged it (a process may have none of a
        mixture task's samples, or no sample at all in a step), those that count events
        (`counts(key)`) added up instead; every process's keys, process 0's first."""
        if self.world == 1:
            return metrics
        gathered: list[dict[str, float]] = [{} for _ in range(self.world)]
        dist.all_gather_object(gathered, metrics)
        out = {}
        for key in dict.fromkeys(k for m in gathered for k in m):
            values = [m[key] for m in gathered if key in m]
            out[key] = values[0] if key == "step" else sum(values) if counts(key) else sum(values) / len(values)
        return out

    def gather(self, items: list) -> list:
        """Every process's `items`, concatenated in process order (the same list on each process)."""
        if self.world == 1:
            return list(items)
        gathered: list[list] = [[] for _ in range(self.world)]
        dist.all_gather_object(gathered, items)
        return [item for part in gathered for item in part]

    def barrier(self) -> None:
        if self.world > 1:
            dist.barrier()

    @contextlib.contextmanager
    def together(self) -> Iterator[None]:
        """A block every process enters (work that may fail on some: a file only one of them
        reads, a folder only process 0 makes): if it raises on any process, every process
        raises, the others `PeerFailed`, instead of waiting at the next collective for one that
        has gone (and printing a traceback when its connection closes)."""
        try:
            yield
        except BaseException:
            self.all_true(False)
            raise
        if not self.all_true(True):
            raise PeerFailed(PEER_FAILED)

    @contextlib.contextmanager
    def main_first(self) -> Iterator[None]:
        """Process 0 runs the block first (writing synthetic data, say), then the others; if it
        raises on process 0, the others raise `PeerFailed` without running it."""
        if self.main:
            with self.together():
                yield
        else:
            with self.together():
                pass
            yield
