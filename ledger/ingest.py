"""The ledger's Kafka consumer: every contract topic into the ledger, in batches, at least once.

One process owns the embedded ledger (chdb allows one per data folder), so one consumer
group, ``fabricwatch-ledger``, feeds it from every topic: port events, counters, probes,
topology, detections, runbook actions and evidence, job placements, incidents, maintenance
windows, the subnet manager's events and sweeps (``fabric.sm``), and dead letters. Offsets
are committed only after the batch is in the ledger; a
crash replays the uncommitted batch, which the ledger absorbs (its writes are idempotent on
the event id). A message that fails validation is skipped here, never written as data: the
stream worker dead-letters it to ``fabric.dlq``, and that record arrives here like any other.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer  # type: ignore[import-untyped]

from schemas import ContractError, DeadLetter, Event
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


class LedgerIngest:
    """Consume the contract topics and write them to ``writer`` in batches."""

    def __init__(self, writer: Writer, bootstrap: str, *, group_id: str = GROUP_ID,
                 max_records: int = 5000, poll_ms: int = 500,
                 topics: Sequence[str] | None = None,
                 consumer_factory: Callable[..., Any] = AIOKafkaConsumer,
                 bounds: TimeBounds = DEFAULT_BOUNDS) -> None:
        self._writer = writer
        self._bounds = bounds
        self._topics = list(topics or [t.name for t in INGEST_TOPICS])
        self._max_records = max_records
        self._poll_ms = poll_ms
        self._consumer = consumer_factory(
            *self._topics, bootstrap_servers=bootstrap, group_id=group_id,
            enable_auto_commit=False, auto_offset_reset="earliest",
            max_partition_fetch_bytes=8 * 1024 * 1024, fetch_max_bytes=64 * 1024 * 1024)
        self.stats = IngestStats()

    async def run(self, stop: asyncio.Event) -> IngestStats:
        await self._consumer.start()
        try:
            while not stop.is_set():
                batches = await self._consumer.getmany(timeout_ms=self._poll_ms,
                                                      max_records=self._max_records)
                if not batches:
                    continue
                events: list[Event | DeadLetter] = []
                for tp, messages in batches.items():
                    self.stats.by_topic[tp.topic] = (self.stats.by_topic.get(tp.topic, 0)
                                                     + len(messages))
                    for message in messages:
                        record = decode_record(tp.topic, message.value, message.timestamp,
                                               self._bounds)
                        if record is None:
                            self.stats.skipped += 1
                        else:
                            events.append(record)
                    self.stats.messages += len(messages)
                started = time.perf_counter()
                if events:
                    # chdb's insert blocks; a thread keeps the consumer's heartbeats going.
                    self.stats.rows += await asyncio.to_thread(self._writer.write, events)
                self.stats.last_batch_s = time.perf_counter() - started
                self.stats.batches += 1
                await self._consumer.commit()
        finally:
            await self._consumer.stop()
        return self.stats
