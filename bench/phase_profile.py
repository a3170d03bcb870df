"""Where one RL step's time goes, by kernel: the rollout and the update of one step, each under
torch's profiler, summarized as JSON (what bench/recipe_on_gpu.py --profile writes).

A phase's figures: its wall seconds; on CUDA the kernels' summed time and count, their share of
the wall time (the rest is the device waiting for the host), and the kernels taking the most
time, by name; on the CPU the operators by self time instead. Kernels replayed from a CUDA graph
are traced one by one (CUPTI), so the decoding step's kernels count even when it is captured.
The step profiled is slower than the others (the tracing), so its figures are not a step's
time: recipe_on_gpu.py leaves it out of its medians.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

TOP = 30  # kernels (or CPU operators) listed per phase


def summary(prof: profile, seconds: float, on_cuda: bool) -> dict[str, Any]:
    """A phase's wall seconds and the events that took its time, largest first."""
    events = prof.key_averages()
    if on_cuda:
        kinds = [e for e in events if e.device_type == DeviceType.CUDA]
        time_of = lambda e: e.self_device_time_total  # noqa: E731 (microseconds)
    else:
        kinds = list(events)
        time_of = lambda e: e.self_cpu_time_total  # noqa: E731
    total_us = sum(time_of(e) for e in kinds)
    top = sorted(kinds, key=time_of, reverse=True)[:TOP]
    return {
        "wall_s": round(seconds, 3),
        "measured": "kernels" if on_cuda else "cpu operators (self time)",
        "total_ms": round(total_us / 1000, 1),
        "count": sum(e.count for e in kinds),
        "share_of_wall": round(total_us / 1e6 / seconds, 3) if seconds else None,
        "top": [
            {
                "name": e.key[:160],
                "calls": e.count,
                "ms": round(time_of(e) / 1000, 2),
                "share": round(time_of(e) / total_us, 4) if total_us else None,
            }
            for e in top
        ],
    }


def profile_step(trainer, step: int, on_cuda: bool, into: dict[str, Any]) -> None:
    """Wrap `trainer`'s rollout (`collect`) and `update`, each called once a step, so that their
    `step`-th calls run under the profiler and their summaries land in `into` under "rollout" and
    "update"."""
    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA] if on_cuda else [ProfilerActivity.CPU]

    def profiled(name: str, phase):
        calls = 0

        def run(*args, **kwargs):
            nonlocal calls
            calls += 1
            if calls != step:
                return phase(*args, **kwargs)
            with profile(activities=activities) as prof:
                start = time.perf_counter()
                result = phase(*args, **kwargs)
                if on_cuda:
                    torch.cuda.synchronize()
                seconds = time.perf_counter() - start
            into[name] = summary(prof, seconds, on_cuda)
            return result

        return run

    trainer.collect = profiled("rollout", trainer.collect)
    trainer.update = profiled("update", trainer.update)
