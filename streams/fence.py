"""The membership fence: a worker that stood still past its group session applies nothing
until it knows whether it is still a member.

A whole worker process that stops (SIGSTOP, a paused VM, a swap storm) for longer than the
group's session timeout is dropped from the group, and another worker takes its partitions,
reads on from the committed offsets and writes the states that follow to the tables'
changelogs. The woken worker does not know this yet: for the instant before its heartbeat
fails it still holds events fetched for its old assignment, and Faust passes them (their
generation is still the app's). Applied, they write states older than the other worker's to
the changelog. When the partition comes back, Faust's recovery reads the changelog from the
store's own last write, now that stale record, and never applies the other worker's states:
the stale state wins (seen once in CI as two extra flap episodes).

So every stream of the app runs one processor first (``fenced_stream``): while the fence is in
doubt the event waits; after it, an event of an older generation than the app's is skipped
(acked without being applied, as Faust skips one it sees first). The doubt begins when the
worker's clock jumps by half a session between two beats of a ticker (or between the last
beat and an event) and ends when the group has handed out a new generation, or when a few
heartbeats have passed with no rebalance started (the membership held: the stall was
shorter than the broker's session check, or only this loop stood still).

What it cannot fence: a changelog record queued before the stall and sent after it (the
producer buffer drains in milliseconds, so the window is that narrow); closing that needs
transactional writes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import faust
from faust.exceptions import Skip
from faust.streams import current_event

log = logging.getLogger(__name__)

BEAT_S = 0.5  # the ticker's period: a stall is measured to about this
POLL_S = 0.1  # how often a waiting event looks again


@dataclass
class MembershipFence:
    """Pure bookkeeping of one worker's doubt about its group membership (times in
    monotonic seconds; ``generation`` is the app's consumer generation when asked)."""

    session_timeout_s: float
    heartbeat_interval_s: float
    beat_at: float | None = None
    doubt_since: float | None = None
    doubt_generation: int = 0
    stalls: int = 0

    @property
    def stall_s(self) -> float:
        """A clock jump this long between beats may have cost the membership."""
        return self.session_timeout_s / 2

    @property
    def grace_s(self) -> float:
        """With no rebalance started this long after the doubt, the membership held: a
        dropped member's first heartbeat after waking fails at once."""
        return 2 * self.heartbeat_interval_s + 1.0

    def beat(self, now: float, generation: int) -> None:
        self._notice(now, generation)
        self.beat_at = now

    def holds(self, now: float, generation: int, rebalancing: bool) -> bool:
        """May an event be applied now? False while the membership is in doubt."""
        self.beat(now, generation)  # an event in hand is a sign of life too
        if self.doubt_since is None:
            return True
        if generation != self.doubt_generation:
            log.warning("membership fence: the group rejoined (generation %d -> %d); events "
                        "of the old generation are dropped", self.doubt_generation, generation)
        elif not rebalancing and now - self.doubt_since >= self.grace_s:
            log.warning("membership fence: no rebalance %.1f s after the stall, the "
                        "membership held", now - self.doubt_since)
        else:
            return False
        self.doubt_since = None
        return True

    def _notice(self, now: float, generation: int) -> None:
        if self.doubt_since is not None or self.beat_at is None:
            return
        stood = now - self.beat_at
        if stood >= self.stall_s:
            self.doubt_since = now
            self.doubt_generation = generation
            self.stalls += 1
            self.beat_at = now  # one stall, one doubt
            log.warning("membership fence: this worker stood still %.1f s (session %.1f s); "
                        "no event is applied until its membership is known", stood,
                        self.session_timeout_s)


BOOTTIME: int | None = getattr(time, "CLOCK_BOOTTIME", None)


def _clock() -> float:
    """Seconds that go on while the machine sleeps (a suspended or paused VM's members are
    dropped too), monotonic where the system has no such clock."""
    return time.clock_gettime(BOOTTIME) if BOOTTIME is not None else time.monotonic()


def _skip(app: Any, message: Any) -> Skip:
    """Skip an event of an older generation as handled without recording its offset: Faust
    has forgotten the partition's acks and committed offset at the revocation, and an ack
    now could let the next commit pass it before the new generation reads it again."""
    message.acked = True
    app.consumer._unacked_messages.discard(message)  # noqa: SLF001 - the ack it skips
    return Skip()


def fenced_stream(fence: MembershipFence,
                  clock: Callable[[], float] = _clock) -> type[faust.Stream[Any]]:
    """A ``faust.Stream`` class whose every stream passes its events through ``fence`` first
    (the app's ``Stream`` setting, so no agent can be declared without it)."""

    class FencedStream(faust.Stream[Any]):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            if not any(getattr(p, "membership_fence", False) for p in self._processors):
                self._processors.insert(0, self._fence_processor())

        def _fence_processor(self) -> Callable[[Any], Any]:
            stream = self

            def fence_events(value: Any) -> Any:
                # Plain on the hot path: Faust awaits what a processor returns only when
                # it is awaitable, so only an event in doubt costs a coroutine. The event
                # is the task's (a context variable): a clone shares this processor.
                event = current_event()
                if event is None:
                    return value
                app = stream.app
                if not fence.holds(clock(), app.consumer_generation_id, app.rebalancing):
                    return wait_then_check(event, value)
                if event.message.generation_id != app.consumer_generation_id:
                    raise _skip(app, event.message)
                return value

            async def wait_then_check(event: Any, value: Any) -> Any:
                app = stream.app
                # polled: the consumer's thread sets the generation, with nothing to await
                while not fence.holds(clock(), app.consumer_generation_id,  # noqa: ASYNC110
                                      app.rebalancing):
                    await asyncio.sleep(POLL_S)
                if event.message.generation_id != app.consumer_generation_id:
                    raise _skip(app, event.message)
                return value

            fence_events.membership_fence = True  # type: ignore[attr-defined]
            return fence_events

    return FencedStream


def start_ticker(app: faust.App, fence: MembershipFence,
                 clock: Callable[[], float] = _clock) -> None:
    """Beat ``fence`` every ``BEAT_S`` from the app's loop while the worker runs.

    The fence needs ``stream_wait_empty`` off: with it, a rebalance would wait (without a
    timeout) for the streams to empty, while an event in doubt waits for the rebalance."""
    if app.conf.stream_wait_empty:
        raise ValueError("the membership fence needs stream_wait_empty=False")

    @app.timer(BEAT_S, name="membership-fence")  # type: ignore[untyped-decorator]
    async def beat() -> None:
        fence.beat(clock(), app.consumer_generation_id)
