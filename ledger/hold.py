"""Counter samples held back for their lateness, released in event-time order. Pure: no I/O.

The engine takes each sample's delta against the port's last *stored* sample
(``sql/migrations/005_counter_deltas.sql``), so a sample written after a newer one of its
port can no longer take its place in the chain (012 keeps it in ``counter_late``). The
ingest therefore offers every ``Counters`` message here first, with its partition, offset
and arrival (the Kafka record's timestamp, as the acceptance takes it).

Each partition has a watermark: the latest arrival seen on it, and, while the consumer has
read the partition to its end, the consumer's clock too (nothing older can still be on
its way there). A sample is held while ``ts + lateness`` is beyond its partition's
watermark and released once the watermark passes it; what is released goes out oldest
first. So a sample that arrives at most ``lateness_ms`` after its ``ts`` is written in
event-time order with every other sample of its port (a port's samples are on one
partition), however far behind the consumer runs; a sample that arrives later than that is
written at once, and is late in the ledger only if a newer one of its port is stored.

The hold lives in Kafka, not in the process: a held message's offset is not committed
(``safe_offsets``), so a crash or a rebalance re-reads it, and a revoked partition's held
messages are simply dropped (``drop``) for its new owner to read again.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")
TP = TypeVar("TP", bound=Hashable)


@dataclass(order=True)
class _Held(Generic[T]):
    ts_ms: int
    offset: int  # equal ts: partition order
    item: T = field(compare=False)


class SampleHold(Generic[TP, T]):
    """Items of Kafka partitions ``TP`` held until their partition's watermark passes
    ``ts + lateness_ms``."""

    def __init__(self, lateness_ms: int) -> None:
        if lateness_ms < 0:
            raise ValueError("lateness_ms must be >= 0")
        self.lateness_ms = lateness_ms
        self._held: dict[TP, list[_Held[T]]] = {}
        self._watermark: dict[TP, int] = {}

    def __len__(self) -> int:
        return sum(len(h) for h in self._held.values())

    def watermark(self, tp: TP) -> int | None:
        return self._watermark.get(tp)

    def advance(self, tp: TP, now_ms: int) -> None:
        """Move ``tp``'s watermark to ``now_ms`` (never back): arrivals up to then are seen."""
        if now_ms > self._watermark.get(tp, now_ms - 1):
            self._watermark[tp] = now_ms

    def offer(self, tp: TP, offset: int, ts_ms: int, arrived_ms: int, item: T) -> bool:
        """Hold ``item`` (True) unless its lateness has passed already (False: write it)."""
        self.advance(tp, arrived_ms)
        if ts_ms + self.lateness_ms <= self._watermark[tp]:
            return False
        heapq.heappush(self._held.setdefault(tp, []), _Held(ts_ms, offset, item))
        return True

    def due(self) -> list[T]:
        """The held items their partitions' watermarks have passed, oldest ``ts`` first."""
        out: list[_Held[T]] = []
        for tp, heap in self._held.items():
            mark = self._watermark[tp]
            while heap and heap[0].ts_ms + self.lateness_ms <= mark:
                out.append(heapq.heappop(heap))
        out.sort()
        return [h.item for h in out]

    def drop(self, tps: Iterable[TP]) -> int:
        """Forget the items and watermarks of partitions this process no longer owns."""
        dropped = 0
        for tp in tps:
            dropped += len(self._held.pop(tp, []))
            self._watermark.pop(tp, None)
        return dropped

    def safe_offsets(self, consumed: Mapping[TP, int]) -> dict[TP, int]:
        """The offset to commit per partition: ``consumed`` (the next offset to read) unless
        an item of it is still held, then that item's offset (re-read after a crash)."""
        out = dict(consumed)
        for tp, heap in self._held.items():
            if heap and tp in out:
                out[tp] = min(out[tp], min(h.offset for h in heap))
        return out
