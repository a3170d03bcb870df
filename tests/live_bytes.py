"""Bytes a piece of code allocates on the CPU at its peak, from the storages its operators
create (a TorchDispatchMode sees each operator's outputs): where the plan counts temporaries
from the code, this measures them."""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class LiveBytes(TorchDispatchMode):
    """While entered: the bytes of the storages created inside that are still alive (`live`)
    and the most ever alive at once (`peak`). A storage made before (an in-place operator's
    output) is not counted."""

    def __init__(self, *before: torch.Tensor):
        super().__init__()
        self.live = self.peak = 0
        self.known = {t.untyped_storage().data_ptr() for t in before}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in tree_flatten(out)[0]:
            if not isinstance(tensor, torch.Tensor):
                continue
            storage = tensor.untyped_storage()
            address, size = storage.data_ptr(), storage.nbytes()
            if address in self.known or size == 0:
                continue
            self.known.add(address)
            self.live += size
            self.peak = max(self.peak, self.live)
            weakref.finalize(storage, self.freed, address, size)
        return out

    def freed(self, address: int, size: int) -> None:
        self.known.discard(address)
        self.live -= size
