"""An endless, deterministic, resumable stream of sample indices."""

from __future__ import annotations

import random
from typing import Any


class IndexStream:
    """Epoch e visits every index once, in an order fixed by (seed, e); batches may span epochs.

    The state is two integers, so a checkpoint resumes exactly where the stream stood.
    """

    def __init__(self, size: int, seed: int):
        if size <= 0:
            raise ValueError("cannot stream from an empty dataset")
        self.size = size
        self.seed = seed
        self.epoch = 0
        self.position = 0
        self._order = self._permutation(0)

    def _permutation(self, epoch: int) -> list[int]:
        order = list(range(self.size))
        random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return order

    def take(self, n: int) -> list[int]:
        out = []
        while len(out) < n:
            if self.position == self.size:
                self.epoch += 1
                self.position = 0
                self._order = self._permutation(self.epoch)
            out.append(self._order[self.position])
            self.position += 1
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position, "size": self.size, "seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if (state["size"], state["seed"]) != (self.size, self.seed):
            raise ValueError(
                f"checkpoint's data stream had {state['size']} samples and seed {state['seed']}; "
                f"this run has {self.size} and {self.seed}: the data or seed changed since it was saved; resume with "
                "the data and seed it was trained on, or start a new run in another output_dir"
            )
        self.epoch, self.position = state["epoch"], state["position"]
        self._order = self._permutation(self.epoch)


class MixtureStream:
    """(source, index) draws: each draw picks a source by weight, then that source's next index.

    A draw's source is a function of (seed, draw number) and each source has its own
    IndexStream, so the whole state is a few integers and resumes exactly.
    """

    def __init__(self, sizes: list[int], weights: list[float], seed: int):
        self.streams = [IndexStream(size, seed + i) for i, size in enumerate(sizes)]
        self.weights = weights
        self.seed = seed
        self.draws = 0

    def take(self, n: int) -> list[tuple[int, int]]:
        out = []
        for _ in range(n):
            if len(self.streams) == 1:
                source = 0
            else:
                source = random.Random(self.seed * 1_000_003 + self.draws).choices(
                    range(len(self.streams)), self.weights
                )[0]
            self.draws += 1
            out.append((source, self.streams[source].take(1)[0]))
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"draws": self.draws, "streams": [s.state_dict() for s in self.streams]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if len(state["streams"]) != len(self.streams):
            raise ValueError(
                f"checkpoint's run drew from {len(state['streams'])} tasks; this run has {len(self.streams)}"
            )
        self.draws = state["draws"]
        for stream, saved in zip(self.streams, state["streams"], strict=True):
            stream.load_state_dict(saved)
