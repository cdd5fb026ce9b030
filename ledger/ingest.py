"""The ledger's Kafka consumer: every contract topic into the ledger, in batches, at least once.

One process owns the embedded ledger (chdb allows one per data folder), so one consumer
group, ``fabricwatch-ledger``, feeds it from every topic: port events, counters, probes,
topology, detections, runbook actions and evidence, job placements, incidents, maintenance
windows, the subnet manager's events and sweeps (``fabric.sm``), and dead letters. Offsets
are committed only after the batch is in the ledger; a
crash replays the uncommitted batch, which the ledger absorbs (its writes are idempotent on
the event id). A message that fails validation is skipped here, never written as data: the
stream worker dead-letters it to ``fabric.dlq``, and that record arrives here like any other.

Counter samples younger than the lateness bound (``ledger.counter_lateness_s``) are held,
uncommitted, and written in event-time order once it has passed (``ledger.hold``), so the
engine's deltas follow event time for a sample that arrives late or out of order within
the bound. Several processes share the group and each device's counters stay on one
partition (keyed by device), so each port has one writer at a time; a rebalance waits for
the batch in flight to be written and committed before the partition moves
(``on_partitions_revoked``), and the process that takes it carries on from the committed
offset, with the previous sample of every port read from the ledger.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener  # type: ignore[import-untyped]
from aiokafka.errors import CommitFailedError  # type: ignore[import-untyped]

from ledger.hold import SampleHold
from schemas import ContractError, CounterColumns, Counters, DeadLetter, Event
from schemas import topics as registry
from schemas.acceptance import (
    DEFAULT_BOUNDS,
    TimeBounds,
    accept,
    accept_dead_letter,
    at_arrival,
)

log = logging.getLogger(__name__)

GROUP_ID = "fabricwatch-ledger"
INGEST_TOPICS: tuple[registry.Topic, ...] = (
    registry.PORT_EVENTS, registry.COUNTERS, registry.PROBES, registry.TOPOLOGY,
    registry.DETECTIONS, registry.ACTIONS, registry.JOBS, registry.INCIDENTS,
    registry.MAINTENANCE, registry.SM, registry.DLQ,
)


class Writer(Protocol):
    def write(self, events: Sequence[Event | DeadLetter]) -> int: ...


@dataclass
class IngestStats:
    messages: int = 0
    rows: int = 0
    skipped: int = 0
    held: int = 0  # counter messages held at least once for their lateness
    batches: int = 0
    last_batch_s: float = 0.0
    by_topic: dict[str, int] = field(default_factory=dict)


def decode_record(topic: str, raw: bytes | None, received_ms: int | None = None,
                  bounds: TimeBounds = DEFAULT_BOUNDS) -> Event | DeadLetter | None:
    """The ledger's view of one message: an event, a dead letter, or None to skip.

    The same decision as the stream worker's (``schemas.acceptance``): what the worker
    refuses (a kind on the wrong topic, a ``ts`` out of bounds for its arrival) is skipped
    here and arrives as the worker's dead letter instead. An event stamped further ahead of
    its arrival than the slack is stored at its arrival plus the slack (``at_arrival``), as
    the detectors took it: the counter deltas and a port's latest state are not held back
    by one message from the future."""
    if raw is None:
        return None
    try:
        if topic == registry.DLQ.name:
            return accept_dead_letter(raw)
        spec = registry.BY_NAME.get(topic)
        if spec is None:
            return None
        return at_arrival(accept(spec, raw, received_ms=received_ms, bounds=bounds),
                          received_ms, bounds)
    except ContractError:
        return None


class _WaitForTheBatch(ConsumerRebalanceListener):  # type: ignore[misc]
    """Partitions move only between batches, and a moved partition's held samples go."""

    def __init__(self, ingest: LedgerIngest) -> None:
        self._ingest = ingest

    async def on_partitions_revoked(self, revoked: Any) -> None:
        async with self._ingest.busy:
            self._ingest.hold.drop(revoked)
            for tp in revoked:
                self._ingest.consumed.pop(tp, None)
                self._ingest.committed.pop(tp, None)

    async def on_partitions_assigned(self, assigned: Any) -> None:
        return None


class LedgerIngest:
    """Consume the contract topics and write them to ``writer`` in batches."""

    def __init__(self, writer: Writer, bootstrap: str, *, group_id: str = GROUP_ID,
                 max_records: int = 5000, poll_ms: int = 500,
                 topics: Sequence[str] | None = None,
                 consumer_factory: Callable[..., Any] = AIOKafkaConsumer,
                 bounds: TimeBounds = DEFAULT_BOUNDS, lateness_s: float = 30.0) -> None:
        self._writer = writer
        self._bounds = bounds
        self._topics = list(topics or [t.name for t in INGEST_TOPICS])
        self._max_records = max_records
        self._poll_ms = poll_ms
        self._consumer = consumer_factory(
            bootstrap_servers=bootstrap, group_id=group_id,
            enable_auto_commit=False, auto_offset_reset="earliest",
            max_partition_fetch_bytes=8 * 1024 * 1024, fetch_max_bytes=64 * 1024 * 1024)
        self.hold: SampleHold[Any, Event | DeadLetter] = SampleHold(round(lateness_s * 1000))
        # the next offset to read of every partition this process has read from
        self.consumed: dict[Any, int] = {}
        # held by a batch's write and commit; a rebalance waits for it
        self.busy = asyncio.Lock()
        self.committed: dict[Any, int] = {}
        self.stats = IngestStats()
        # a write failed, or the loop broke: nothing more is committed by this process (what
        # it read and did not write is read again by the partitions' next owner)
        self._failed = False

    async def run(self, stop: asyncio.Event) -> IngestStats:
        self._consumer.subscribe(self._topics, listener=_WaitForTheBatch(self))
        await self._consumer.start()
        try:
            while not stop.is_set():
                batches = await self._consumer.getmany(timeout_ms=self._poll_ms,
                                                      max_records=self._max_records)
                async with self.busy:
                    await self._batch(batches)
        except BaseException:
            # a failed write, or any other break: the offsets read are not all written
            self._failed = True
            raise
        finally:
            try:
                async with self.busy:
                    await self._commit()
            finally:
                await self._consumer.stop()
        return self.stats

    async def _batch(self, batches: dict[Any, list[Any]]) -> None:
        now = time.time_ns() // 1_000_000
        events: list[Event | DeadLetter] = []
        for tp, messages in batches.items():
            self.stats.by_topic[tp.topic] = self.stats.by_topic.get(tp.topic, 0) + len(messages)
            for message in messages:
                record = decode_record(tp.topic, message.value, message.timestamp,
                                       self._bounds)
                arrived = message.timestamp if message.timestamp and message.timestamp > 0 \
                    else now
                if record is None:
                    self.stats.skipped += 1
                elif isinstance(record, Counters | CounterColumns) and self.hold.offer(
                        tp, message.offset, record.ts, arrived, record):
                    self.stats.held += 1
                else:
                    events.append(record)
            self.stats.messages += len(messages)
            if messages:
                self.consumed[tp] = messages[-1].offset + 1
        for tp, next_offset in self.consumed.items():
            # read to its end: whatever reaches it from now on arrives after ``now``
            highwater = self._consumer.highwater(tp)
            if highwater is not None and next_offset >= highwater:
                self.hold.advance(tp, now)
        events.extend(self.hold.due())
        if not events and not batches:
            if self.consumed:
                await self._commit()  # a release of held samples only: nothing to write
            return
        started = time.perf_counter()
        if events:
            # chdb's insert blocks; a thread keeps the consumer's heartbeats going.
            self.stats.rows += await asyncio.to_thread(self._writer.write, events)
        self.stats.last_batch_s = time.perf_counter() - started
        self.stats.batches += 1
        await self._commit()

    async def _commit(self) -> None:
        """Commit what is written: up to the first held message of each partition."""
        if self._failed:
            return
        offsets = self.hold.safe_offsets(self.consumed)
        assigned = self._consumer.assignment()
        offsets = {tp: offset for tp, offset in offsets.items()
                   if tp in assigned and self.committed.get(tp) != offset}
        if not offsets:
            return
        try:
            await self._consumer.commit(offsets)
        except CommitFailedError as exc:
            # the group moved on without us (a missed heartbeat): whoever owns the partitions
            # now re-reads from the last commit, and the ledger absorbs the replay
            log.warning("ledger ingest: commit failed, the batch will be re-read: %s", exc)
            return
        self.committed.update(offsets)
