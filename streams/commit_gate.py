"""Which consumer offsets a commit may pass: only those whose table changelog records are
already on their way to the broker.

A Faust agent changes a table while it handles a message; the table queues the changelog
record in the producer's buffer and the message is acked. Committing that offset before the
record has left the buffer lets a kill -9 restart from a state that lacks the message, which
is never read again. The gate keeps each commit's offsets with the count of records queued
when they were acked (its *mark*) and lets them through once the buffer has handed that many
records on. It never waits itself: what is not ready goes with a later commit.

Pure bookkeeping; ``streams.transport`` counts the records and asks it at every commit.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterable, Mapping
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class CommitGate(Generic[K]):
    def __init__(self) -> None:
        self._waiting: deque[tuple[int, dict[K, int]]] = deque()

    def offer(self, offsets: Mapping[K, int], mark: int) -> None:
        """Offsets acked while ``mark`` records had been queued, in commit order."""
        if not offsets:
            return
        if self._waiting and mark < self._waiting[-1][0]:
            raise ValueError(f"mark {mark} before the last offered {self._waiting[-1][0]}")
        self._waiting.append((mark, dict(offsets)))

    def ready(self, handed: int) -> dict[K, int]:
        """Take the offsets whose marks ``handed`` records cover, the highest per key."""
        out: dict[K, int] = {}
        while self._waiting and self._waiting[0][0] <= handed:
            for key, offset in self._waiting.popleft()[1].items():
                if offset > out.get(key, -1):
                    out[key] = offset
        return out

    def forget(self, keys: Iterable[K]) -> None:
        """Drop what waits for ``keys`` (partitions revoked: their new owner commits them)."""
        gone = set(keys)
        kept: deque[tuple[int, dict[K, int]]] = deque()
        for mark, offsets in self._waiting:
            left = {k: o for k, o in offsets.items() if k not in gone}
            if left:
                kept.append((mark, left))
        self._waiting = kept

    @property
    def last_mark(self) -> int:
        """The mark everything waiting is covered by (0 when nothing waits)."""
        return self._waiting[-1][0] if self._waiting else 0

    def __len__(self) -> int:
        return len(self._waiting)
