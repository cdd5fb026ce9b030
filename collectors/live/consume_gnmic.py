"""``fabricwatch consume gnmic --topic T``: gnmic's Kafka output, as gnmic writes it, into the contract.

Reads the topic gnmic's Kafka output writes (``format: event`` or ``json``) in a consumer
group of its own (``fabricwatch-gnmic-<topic>`` unless told otherwise), maps each message with
``collectors.gnmic_map.GnmicMapper`` and publishes the ``counters`` (key: device) and
``port_event``s (key: ``device:port``) through the shared ``Publisher``. A message that cannot
be mapped goes to ``fabric.dlq`` with the reason, its source topic, partition and offset,
and its bytes as they came.

At least once: offsets are committed only after the broker acknowledged every event and
dead letter of the batch; a crash in between re-reads the batch, whose event ids are
content hashes, so consumers drop the repeats. A new group starts at the topic's beginning.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer  # type: ignore[import-untyped]

from collectors.gnmic_map import GnmicMapError, GnmicMapper
from schemas import dead_letter, encode
from schemas.topics import DLQ

log = logging.getLogger(__name__)


class PublisherLike(Protocol):
    async def send_many(self, events: Any) -> Any: ...

    async def send_raw(self, topic: str, key: bytes | None, value: bytes) -> Any: ...

    async def flush(self) -> Any: ...


@dataclass
class ConsumeStats:
    messages: int = 0
    events: int = 0
    dead_letters: int = 0
    batches: int = 0
    polls: int = 0  # reads of the topic, empty or not: the consumer is alive


def group_for(topic: str) -> str:
    return f"fabricwatch-gnmic-{topic}"


class GnmicConsumer:
    def __init__(self, bootstrap: str, topic: str, publisher: PublisherLike, mapper: GnmicMapper,
                 *, group_id: str | None = None, batch: int = 500,
                 on_dead_letter: Callable[[str], None] | None = None) -> None:
        if not topic:
            raise ValueError("a topic is needed")
        self.bootstrap = bootstrap
        self.topic = topic
        self.publisher = publisher
        self.mapper = mapper
        self.group_id = group_id or group_for(topic)
        self.batch = batch
        self.on_dead_letter = on_dead_letter
        self.stats = ConsumeStats()

    async def handle(self, value: bytes | None, *, partition: int, offset: int) -> None:
        """One record: its events, or its dead letter, enqueued on the publisher."""
        self.stats.messages += 1
        raw = value or b""
        try:
            result = self.mapper.map(raw)
        except Exception as exc:  # noqa: BLE001 - one message never stops the consumer
            if not isinstance(exc, GnmicMapError):
                log.exception("mapping %s[%d]@%d failed", self.topic, partition, offset)
                exc = GnmicMapError(f"processing failed: {exc!r}"[:500], "")
            letter = dead_letter(raw, exc, source_topic=self.topic, partition=partition,
                                 offset=offset)
            await self.publisher.send_raw(DLQ.name, self.topic.encode(), encode(letter))
            self.stats.dead_letters += 1
            if self.on_dead_letter is not None:
                self.on_dead_letter(self.topic)
            log.warning("dead letter %s[%d]@%d: %s", self.topic, partition, offset, exc)
            return
        events = [*result.counters, *result.port_events]
        if events:
            await self.publisher.send_many(events)
            self.stats.events += len(events)

    async def run(self, stop: asyncio.Event, *, idle_ms: int = 1000) -> None:
        consumer = AIOKafkaConsumer(
            self.topic, bootstrap_servers=self.bootstrap, group_id=self.group_id,
            enable_auto_commit=False, auto_offset_reset="earliest",
            client_id="fabricwatch-consume-gnmic")
        await consumer.start()
        try:
            while not stop.is_set():
                records = await consumer.getmany(timeout_ms=idle_ms, max_records=self.batch)
                self.stats.polls += 1
                if not records:
                    continue
                started = time.monotonic()
                for tp, batch in records.items():
                    for record in batch:
                        await self.handle(record.value, partition=tp.partition,
                                          offset=record.offset)
                await self.publisher.flush()  # acknowledged before the offsets move
                await consumer.commit()
                self.stats.batches += 1
                log.debug("batch of %d in %.3f s", sum(map(len, records.values())),
                          time.monotonic() - started)
        finally:
            await consumer.stop()
