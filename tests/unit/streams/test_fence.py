"""The membership fence: events wait while a stall may have cost the membership, and an
event of an older generation than the app's is skipped, not applied."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import faust
import pytest
from faust.exceptions import Skip

from streams.fence import MembershipFence, fenced_stream

SESSION, HEARTBEAT = 10.0, 3.0


def fence() -> MembershipFence:
    return MembershipFence(SESSION, HEARTBEAT)


def test_a_worker_that_beats_on_time_is_never_in_doubt() -> None:
    f = fence()
    assert f.holds(0.0, 1, False)  # before the first beat: nothing to measure from
    for i in range(1, 40):
        f.beat(i * 0.5, 1)
        assert f.holds(i * 0.5 + 0.1, 1, False)
    f.beat(24.0, 1)  # 4.5 s late: shorter than half a session
    assert f.holds(24.0, 1, False) and f.stalls == 0


def test_a_stall_seen_by_the_ticker_holds_events_until_the_group_rejoins() -> None:
    f = fence()
    f.beat(0.0, 4)
    f.beat(30.0, 4)  # woke after 30 s: the broker has dropped this member
    assert f.stalls == 1
    assert not f.holds(30.1, 4, False)
    assert not f.holds(31.0, 4, True)  # the rebalance has begun
    assert not f.holds(60.0, 4, True)  # however long it takes
    assert f.holds(60.5, 5, False)  # a new generation: the doubt is over
    f.beat(61.0, 5)
    assert f.holds(61.0, 5, False) and f.stalls == 1


def test_a_stall_seen_first_by_an_event_counts_the_same() -> None:
    # After a wake the loop may run the agent before the ticker: the event measures the
    # gap from the last beat itself.
    f = fence()
    f.beat(0.0, 2)
    assert not f.holds(12.0, 2, False)
    f.beat(12.0, 2)  # the ticker's late beat is the same stall, not a second one
    assert f.stalls == 1
    assert f.holds(12.5, 3, False)


def test_with_no_rebalance_a_few_heartbeats_later_the_membership_held() -> None:
    f = fence()
    f.beat(0.0, 7)
    f.beat(6.0, 7)  # past half a session, short of the broker's check
    grace = 2 * HEARTBEAT + 1.0
    assert not f.holds(6.0 + grace - 0.1, 7, False)
    assert f.holds(6.0 + grace, 7, False)


def stream_of(f: MembershipFence, now: list[float]) -> Any:
    app = faust.App("fence-test", broker="kafka://127.0.0.1:1")
    cls = fenced_stream(f, clock=lambda: now[0])
    return cls(app=app, channel=None)


def event(generation: int) -> Any:
    return SimpleNamespace(message=SimpleNamespace(generation_id=generation))


def test_the_stream_skips_an_event_of_an_older_generation() -> None:
    f, now = fence(), [0.0]
    stream = stream_of(f, now)
    stream.app.consumer_generation_id = 3
    processor = stream._processors[0]
    stream.current_event = event(3)
    assert processor("v") == "v"  # not a coroutine: the hot path awaits nothing
    stream.current_event = event(2)
    with pytest.raises(Skip):
        processor("v")
    stream.current_event = None  # a value with no event (an iterable channel)
    assert processor("w") == "w"


def test_an_event_in_doubt_waits_and_is_skipped_when_the_group_moved_on() -> None:
    f, now = fence(), [0.0]
    stream = stream_of(f, now)
    app = stream.app
    app.consumer_generation_id = 8
    f.beat(0.0, 8)
    now[0] = 25.0  # the process stood still 25 s
    stream.current_event = event(8)
    waiting = stream._processors[0]("v")
    assert asyncio.iscoroutine(waiting)

    async def rejoin_later() -> None:
        await asyncio.sleep(0.3)
        app.rebalancing = True
        await asyncio.sleep(0.3)
        app.consumer_generation_id = 9
        app.rebalancing = False

    async def run() -> None:
        task = asyncio.ensure_future(rejoin_later())
        with pytest.raises(Skip):
            await waiting
        assert task.done()  # it waited for the new generation

    asyncio.run(run())


def test_an_event_in_doubt_is_applied_when_the_membership_held() -> None:
    f, now = fence(), [0.0]
    stream = stream_of(f, now)
    stream.app.consumer_generation_id = 8
    f.beat(0.0, 8)
    now[0] = 6.0
    stream.current_event = event(8)
    waiting = stream._processors[0]("v")

    async def run() -> Any:
        async def clock_runs() -> None:
            while now[0] < 20.0:
                await asyncio.sleep(0.05)
                now[0] += 1.0
        ticking = asyncio.ensure_future(clock_runs())
        try:
            return await waiting
        finally:
            ticking.cancel()

    assert asyncio.run(run()) == "v"


def test_a_cloned_stream_keeps_one_fence() -> None:
    f, now = fence(), [0.0]
    stream = stream_of(f, now)
    clone = stream.clone()
    assert sum(getattr(p, "membership_fence", False) for p in clone._processors) == 1
