"""Pinned probe baselines for the runbook's probation: the ledger's, or kept in memory.

``LedgerBaselines`` reads ``probe_baselines`` (``ledger.baselines``) in a thread, since the
ledger client is synchronous; ``MemoryBaselines`` is for tests and the simulator's demo.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ledger.baselines import PinnedBaseline, current


class LedgerBaselines:
    def __init__(self, ledger: Any) -> None:
        self._ledger = ledger

    async def pinned(self, fabric: str, rail: int | None = None) -> list[PinnedBaseline]:
        return await asyncio.to_thread(current, self._ledger, fabric, rail)


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
