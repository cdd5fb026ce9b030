"""Pinned probe baselines as the probe detector looks them up. Pure: the worker refreshes it.

A pin (``fabricwatch baseline pin``, ``ledger.baselines``) is what a person saw a healthy
rail carry for one (probe, size, scale); the detector prefers it to a learned baseline, which
a fabric that has been slowly degrading since it was first probed would have learned wrong.
"""

from __future__ import annotations

from collections.abc import Iterable

from ledger.baselines import PinnedBaseline
from schemas import Probe


class Pins:
    """(fabric, rail, probe, size, scale) -> Gb/s; call it as the detector's ``pinned``."""

    def __init__(self, baselines: Iterable[PinnedBaseline] = ()) -> None:
        self._by: dict[tuple[str, int, str, int, int], float] = {}
        self.replace(baselines)

    def replace(self, baselines: Iterable[PinnedBaseline]) -> None:
        self._by = {(b.fabric, b.rail, b.probe, b.size_bytes, b.scale): b.gbps
                    for b in baselines}

    def __len__(self) -> int:
        return len(self._by)

    def __call__(self, probe: Probe, scale: int) -> float | None:
        return self._by.get((probe.fabric, probe.rail, probe.probe, probe.size_bytes, scale))
