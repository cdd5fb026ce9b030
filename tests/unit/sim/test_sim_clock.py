"""A real-time simulator stamps nothing after the wall clock.

Each step emits ``(now, now + interval]``; started at ``now`` and sent at once, its samples
(and the detections taken from them) were stamped up to an interval in the future, and
detection to isolation came out negative against the runbook's clock.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import orjson

from sim.run import run, start_ms_for
from sim.telemetry import Message, Simulator
from sim.topology import generate

LAB = generate("lab")


class ClockSink:
    """Keeps, for each step sent, the wall clock at the send and the latest ts in it."""

    def __init__(self) -> None:
        self.sends: list[tuple[int, int]] = []

    async def send(self, messages: Sequence[Message]) -> None:
        wall = int(time.time() * 1000)
        latest = max(int(orjson.loads(m.value)["ts"]) for m in messages)
        self.sends.append((wall, latest))


def _run(start_ms: int, interval_s: float, steps: int) -> list[tuple[int, int]]:
    sink = ClockSink()
    sim = Simulator(LAB, start_ms=start_ms, interval_s=interval_s)
    asyncio.run(run(sim, sink, steps=steps, speedup=1.0))
    return sink.sends


def test_real_time_steps_are_stamped_no_later_than_they_are_sent() -> None:
    interval_s = 0.4
    sends = _run(start_ms_for(int(time.time() * 1000), int(interval_s * 1000)), interval_s, 4)
    assert len(sends) == 4
    for wall, latest in sends:
        assert latest <= wall, f"a message stamped {latest - wall} ms after it was sent"
    # and the clock keeps up: each step is stamped within an interval of its send
    assert all(wall - latest < interval_s * 1000 + 250 for wall, latest in sends)


def test_starting_at_now_stamped_the_future() -> None:
    """The old start (``now``): the check above fails on it, so it would have caught it."""
    interval_s = 0.4
    sends = _run(int(time.time() * 1000), interval_s, 2)
    assert any(latest > wall for wall, latest in sends)


def test_start_times() -> None:
    assert start_ms_for(100_000, 2_000) == 98_000
    assert start_ms_for(100_000, 2_000, duration_s=60, speedup=1.0) == 98_000
    # faster than real time over a duration: the whole run lies in the past
    assert start_ms_for(100_000, 2_000, duration_s=60, speedup=10) == 40_000
    assert start_ms_for(100_000, 2_000, duration_s=60, speedup=0) == 40_000
