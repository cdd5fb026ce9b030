"""The membership fence: events wait while a stall may have cost the membership, and an
event of an older generation than the app's is skipped, not applied."""

from __future__ import annotations

import asyncio
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


class _Consumer:  # what the fence touches of Faust's consumer (a real one opens sockets)
    def __init__(self) -> None:
        self._unacked_messages: set[Any] = set()


def stream_of(f: MembershipFence, now: list[float]) -> Any:
    app = faust.App("fence-test", broker="kafka://127.0.0.1:1")
    app.consumer = _Consumer()
    cls = fenced_stream(f, clock=lambda: now[0])
    return cls(app=app, channel=None)


class _Message:
    def __init__(self, generation: int) -> None:
        self.generation_id = generation
        self.acked = False


class _Event:  # an object a weak reference can point at, as Faust keeps the current event
    def __init__(self, generation: int) -> None:
        self.message = _Message(generation)


def event(generation: int) -> Any:
    return _Event(generation)


def current(stream: Any, ev: Any) -> Any:
    stream._set_current_event(ev)  # as Faust's iterators do, the task's context variable
    return ev


def test_the_stream_skips_an_event_of_an_older_generation() -> None:
    f, now = fence(), [0.0]
    stream = stream_of(f, now)
    stream.app.consumer_generation_id = 3
    processor = stream._processors[0]
    now_ = current(stream, event(3))
    assert processor("v") == "v"  # not a coroutine: the hot path awaits nothing
    assert not now_.message.acked
    old = current(stream, event(2))
    stream.app.consumer._unacked_messages.add(old.message)
    with pytest.raises(Skip):
        processor("v")
    # handled, its offset not recorded (Faust's ack then leaves it alone)
    assert old.message.acked and old.message not in stream.app.consumer._unacked_messages
    current(stream, None)  # a value with no event (an iterable channel)
    assert processor("w") == "w"


def test_an_event_in_doubt_waits_and_is_skipped_when_the_group_moved_on() -> None:
    f, now = fence(), [0.0]
    stream = stream_of(f, now)
    app = stream.app
    app.consumer_generation_id = 8
    f.beat(0.0, 8)
    now[0] = 25.0  # the process stood still 25 s
    held = current(stream, event(8))  # (Faust holds a weak reference: keep it alive)
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
        assert held.message.acked

    asyncio.run(run())


def test_an_event_in_doubt_is_applied_when_the_membership_held() -> None:
    f, now = fence(), [0.0]
    stream = stream_of(f, now)
    stream.app.consumer_generation_id = 8
    f.beat(0.0, 8)
    now[0] = 6.0
    held = current(stream, event(8))
    waiting = stream._processors[0]("v")
    assert asyncio.iscoroutine(waiting)

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
    assert not held.message.acked  # applied as usual: Faust acks it after the agent


def test_a_cloned_stream_keeps_one_fence_and_it_judges_the_clone_s_events() -> None:
    f, now = fence(), [0.0]
    stream = stream_of(f, now)
    clone = stream.clone()
    fences = [p for p in clone._processors if getattr(p, "membership_fence", False)]
    assert len(fences) == 1
    clone.app.consumer_generation_id = 5
    held = current(clone, event(4))  # the clone's, the parent's current_event untouched
    assert stream.current_event is None and held is not None
    with pytest.raises(Skip):
        fences[0]("v")
