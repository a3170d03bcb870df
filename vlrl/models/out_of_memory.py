"""What the recoveries from the GPU running out of memory share: the update's (trainer/budget.py)
and the engine calls' (rollout/parts.py). The error said in one line, and the failed pass's
memory given back before the work is done again in smaller pieces."""

from __future__ import annotations

import gc

import torch


def first_line(error: torch.OutOfMemoryError) -> str:
    """The error's first line: CUDA's names the allocation that failed and the card's capacity."""
    text = str(error).strip()
    return text.splitlines()[0] if text else "out of memory"


def release() -> None:
    """Once the failed pass's tensors are dropped (out of the except clause, its traceback is
    gone): cycles collected, and the caching allocator's free blocks given back to the driver,
    so the pieces to come find fewer, larger ones."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
