"""The dispatcher takes messages through the same acceptance as the worker and the ledger:
a detection on the wrong topic, or stamped far ahead of its arrival, starts nothing. And
``consume_committed`` commits a new group's placement by its rules (on a scripted consumer)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest
from aiokafka import TopicPartition  # type: ignore[import-untyped]
from aiokafka.errors import CommitFailedError  # type: ignore[import-untyped]

from schemas import Detection, encode
from schemas.policy import Policy
from schemas.topics import DETECTIONS, TOPOLOGY
from workflows import dispatch
from workflows.dispatch import Dispatcher
from workflows.inventory import Inventory

NOW = 1_795_971_600_000


class NoTemporal:
    """Any call to Temporal fails the test: a refused message must not reach it."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the dispatcher called Temporal ({name}) for a refused message")


def _dispatcher() -> Dispatcher:
    return Dispatcher(NoTemporal(), Policy(), Inventory(), task_queue="q")  # type: ignore[arg-type]


def _detection(ts: int) -> bytes:
    return encode(Detection(id=f"d{ts}", ts=ts, fabric="f", source="streams",
                            device="leaf-su01-r1", port=3, detection="flap",
                            severity="critical", action="isolate_port", episode=f"e{ts}"))


async def test_a_detection_on_the_topology_topic_starts_nothing() -> None:
    disp = _dispatcher()
    assert not await disp.handle_raw(_detection(NOW), TOPOLOGY, NOW)
    assert disp.stats.invalid == 1 and disp.stats.dispatched == 0


async def test_a_detection_stamped_a_day_ahead_of_its_arrival_starts_nothing() -> None:
    disp = _dispatcher()
    assert not await disp.handle_raw(_detection(NOW + 23 * 3600_000), DETECTIONS, NOW)
    assert disp.stats.invalid == 1 and disp.stats.dispatched == 0


def test_a_fresh_partition_skips_records_from_before_its_look_back() -> None:
    from workflows.dispatch import _LookbackForNewGroup

    lookback = _LookbackForNewGroup(consumer=None, lookback_ms=4000)
    lookback._since["detections-0"] = 10_000  # placed at record time 10 s
    assert lookback.before_start("detections-0", 9_999)
    assert not lookback.before_start("detections-0", 10_000)
    assert not lookback.before_start("detections-0", None)  # no broker time: not judged here
    assert not lookback.before_start("detections-1", 1)  # a partition that resumed its offsets


async def test_a_detection_of_an_incident_or_a_maintenance_window_starts_nothing() -> None:
    disp = _dispatcher()
    base = Detection(id="d-inc", ts=NOW, fabric="f", source="fabricwatch",
                     device="leaf-su01-r1", port=33, detection="flap", severity="critical",
                     action="isolate_port", episode="flap/leaf-su01-r1:33/1")
    member = base.model_copy(update={"incident": "inc/switch_reboot/spine-1/1"})
    assert not await disp.handle_raw(encode(member), DETECTIONS, NOW)
    windowed = base.model_copy(update={"id": "d-mw", "maintenance": "mw-1"})
    assert not await disp.handle_raw(encode(windowed), DETECTIONS, NOW)
    assert disp.stats.held == 2 and disp.stats.dispatched == 0 and disp.stats.invalid == 0


def test_a_fresh_partition_starts_at_its_first_recent_record_else_at_its_end_before_the_query(
) -> None:
    from aiokafka.structs import OffsetAndTimestamp  # type: ignore[import-untyped]

    from workflows.dispatch import start_offsets

    ends = {"d-0": 7, "d-1": 0, "d-2": 12}
    found = {"d-0": OffsetAndTimestamp(5, 10_000), "d-1": None,
             "d-2": OffsetAndTimestamp(13, 10_500)}  # records from 12 on came after the end query
    assert start_offsets(["d-0", "d-1", "d-2"], ends, found) == {"d-0": 5, "d-1": 0, "d-2": 12}


TP = TopicPartition(DETECTIONS.name, 0)
Step = Callable[["_Consumer"], Awaitable[None]]


class _Consumer:
    """The consumer ``consume_committed`` builds, scripted: its n-th getmany runs the n-th
    round's steps (placements of a new partition), its n-th commit the n-th commit step;
    past the last round it stops the loop. Each commit is noted with its round and whether
    a placement was running."""

    def __init__(self, stop: asyncio.Event, rounds: Sequence[Sequence[Step]],
                 commits: Sequence[Step]) -> None:
        self._stop, self._rounds, self._commits = stop, rounds, commits
        self.round = 0
        self.commits: list[tuple[int, bool]] = []
        self.listener: Any = None
        self.answer = asyncio.Event()  # the broker answers the placement's first question
        self.answer.set()
        self.placement: asyncio.Task[None] | None = None

    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    def pause(self, *tps: Any) -> None: ...
    def resume(self, *tps: Any) -> None: ...
    def seek(self, tp: Any, offset: int) -> None: ...

    def subscribe(self, topics: list[str], listener: Any) -> None:
        self.listener = listener

    async def committed(self, tp: Any) -> None:
        await self.answer.wait()  # None: a partition of a new group

    async def end_offsets(self, tps: list[Any]) -> dict[Any, int]:
        return dict.fromkeys(tps, 0)

    async def offsets_for_times(self, query: dict[Any, int]) -> dict[Any, None]:
        return dict.fromkeys(query)

    async def getmany(self, timeout_ms: int, max_records: int) -> dict[Any, list[Any]]:
        self.round += 1
        if self.round > len(self._rounds):
            self._stop.set()
            return {}
        for step in self._rounds[self.round - 1]:
            await step(self)
        return {}

    async def commit(self) -> None:
        self.commits.append((self.round, self.listener.placing))
        if len(self.commits) <= len(self._commits):
            await self._commits[len(self.commits) - 1](self)


async def place(c: _Consumer) -> None:
    await c.listener.on_partitions_assigned([TP])


async def start_placing(c: _Consumer) -> None:
    c.answer.clear()
    c.placement = asyncio.create_task(place(c))
    await asyncio.sleep(0)  # the placement waits for its first answer


async def finish_placing(c: _Consumer) -> None:
    c.answer.set()
    assert c.placement is not None
    await c.placement


async def rebalanced(c: _Consumer) -> None:
    raise CommitFailedError("the group rebalanced")


async def _commits(monkeypatch: pytest.MonkeyPatch, rounds: Sequence[Sequence[Step]],
                   commits: Sequence[Step] = ()) -> list[tuple[int, bool]]:
    stop = asyncio.Event()
    consumer = _Consumer(stop, rounds, commits)
    monkeypatch.setattr(dispatch, "AIOKafkaConsumer", lambda **_: consumer)

    async def handle(raw: bytes, received_ms: int | None) -> None:
        raise AssertionError("no record was sent")

    await asyncio.wait_for(dispatch.consume_committed(
        DETECTIONS.name, "broker:9092", "g", handle, stop=stop, lookback_ms=60_000,
        max_records=10, what="a test"), 10)
    return consumer.commits


async def test_consume_committed_commits_no_placement_while_another_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Two rebalances in a row: the first placement is due for a commit while the second
    # runs, when a partition's position is the fetcher's reset (earliest); committed then,
    # the partition would no longer be new and the look-back would be skipped.
    assert await _commits(monkeypatch, [[place, start_placing], [finish_placing]]) == [
        (2, False)]


async def test_consume_committed_commits_a_placement_again_after_a_rebalanced_commit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A commit the rebalance refused does not stop the consumer, and the placement is still
    # due: a quiet partition left uncommitted would be looked back on again at each start.
    assert await _commits(monkeypatch, [[place], []], [rebalanced]) == [(1, False), (2, False)]


async def test_consume_committed_commits_a_placement_made_during_its_commit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The flag is taken before the commit: a placement that lands while the commit waits is
    # committed at the next round, not cleared with the one just committed.
    assert await _commits(monkeypatch, [[place], []], [place]) == [(1, False), (2, False)]
