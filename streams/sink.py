"""The ledger sink: detections and dead letters batched into ``Ledger.write`` off the event loop.

Agents ``add`` events; a flush happens when ``max_batch`` events wait or every
``interval_s`` (the app's timer), in a thread so chdb's blocking insert never stalls the
consumer. Writes are idempotent in the ledger (keyed on the event id), so a batch retried
after an error, or replayed after a restart, does no harm. When the ledger keeps failing the
buffer is capped at ``max_buffer`` (oldest dropped and counted): ``fabric.detections`` stays
the source of truth and the ledger can be backfilled from it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from schemas import DeadLetter, Detection, Event

log = logging.getLogger(__name__)
T = TypeVar("T")


class LedgerWriter(Protocol):
    def write(self, events: Sequence[Event | DeadLetter]) -> int: ...

    def close(self) -> None: ...


class LedgerSink:
    """A batching, retrying, bounded sink over a blocking ``Ledger.write``."""

    def __init__(self, open_ledger: Callable[[], LedgerWriter], *, max_batch: int = 5000,
                 max_buffer: int = 200_000) -> None:
        self._open = open_ledger
        self._ledger: LedgerWriter | None = None
        self._buffer: list[Detection | DeadLetter] = []
        self._lock = asyncio.Lock()
        self.max_batch = max_batch
        self.max_buffer = max_buffer
        self.written = 0
        self.dropped = 0
        self.failures = 0

    def add(self, events: Sequence[Detection | DeadLetter]) -> bool:
        """Queue events; True when a batch is full and the caller should ``flush``."""
        self._buffer.extend(events)
        over = len(self._buffer) - self.max_buffer
        if over > 0:
            del self._buffer[:over]
            self.dropped += over
            log.error("ledger sink over %d buffered events: dropped %d oldest",
                      self.max_buffer, over)
        return len(self._buffer) >= self.max_batch

    async def flush(self) -> int:
        async with self._lock:
            if not self._buffer:
                return 0
            batch = self._buffer[: self.max_batch]
            try:
                written = await asyncio.to_thread(self._write, batch)
            except Exception as exc:  # the ledger's own errors, chdb's, the network's
                self.failures += 1
                log.warning("ledger write of %d events failed (will retry): %s", len(batch), exc)
                return 0
            del self._buffer[: len(batch)]
            self.written += len(batch)
            return written

    async def read(self, fn: Callable[[Any], T]) -> T:
        """``fn(ledger)`` on the sink's own ledger, off the loop (one ledger per process:
        an embedded chdb folder admits one)."""
        async with self._lock:
            return await asyncio.to_thread(self.read_blocking, fn)

    def read_blocking(self, fn: Callable[[Any], T]) -> T:
        """``fn(ledger)`` now, in this thread (before the event loop runs)."""
        if self._ledger is None:
            self._ledger = self._open()
        return fn(self._ledger)

    def _write(self, batch: list[Detection | DeadLetter]) -> int:
        if self._ledger is None:
            self._ledger = self._open()
        return self._ledger.write(batch)

    async def close(self) -> None:
        for _ in range(1 + len(self._buffer) // self.max_batch):
            if not await self.flush():
                break
        if self._ledger is not None:
            await asyncio.to_thread(self._ledger.close)
            self._ledger = None
