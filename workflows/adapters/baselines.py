"""Pinned probe baselines for the runbook's probation: the ledger's, or kept in memory.

``LedgerBaselines`` reads ``probe_baselines`` (``ledger.baselines``) in a thread, since the
ledger client is synchronous; ``MemoryBaselines`` is for tests and the simulator's demo.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ledger.baselines import PinnedBaseline, current


class BaselinesUnavailable(RuntimeError):
    """No ledger to read baselines from: probation cannot judge (fails closed)."""


class LedgerBaselines:
    """``ledger`` is a ledger, or a function that connects one lazily (None: none reachable)."""

    def __init__(self, ledger: Any | Callable[[], Any]) -> None:
        self._ledger = ledger

    async def pinned(self, fabric: str, rail: int | None = None) -> list[PinnedBaseline]:
        def read() -> list[PinnedBaseline]:
            ledger = self._ledger() if callable(self._ledger) else self._ledger
            if ledger is None:
                raise BaselinesUnavailable("no ledger reachable for the pinned baselines")
            return current(ledger, fabric, rail)
        return await asyncio.to_thread(read)


class MemoryBaselines:
    def __init__(self, baselines: list[PinnedBaseline] | None = None) -> None:
        self.items: list[PinnedBaseline] = list(baselines or [])

    def pin(self, baseline: PinnedBaseline) -> None:
        key = (baseline.fabric, baseline.rail, baseline.probe, baseline.size_bytes,
               baseline.scale)
        self.items = [b for b in self.items
                      if (b.fabric, b.rail, b.probe, b.size_bytes, b.scale) != key]
        self.items.append(baseline)

    async def pinned(self, fabric: str, rail: int | None = None) -> list[PinnedBaseline]:
        return [b for b in self.items if b.fabric == fabric and (rail is None or b.rail == rail)]
