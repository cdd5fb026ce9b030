"""Watchers that fill the demo's ``LiveState``: Kafka offsets and lag, detections, runbooks.

Each watcher reads from the real services and never writes to them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition  # type: ignore[import-untyped]
from aiokafka.admin import AIOKafkaAdminClient  # type: ignore[import-untyped]

from fabricwatch.demo.view import LiveState, TopicRate
from schemas import ContractError, Detection, Incident, decode
from schemas.topics import DETECTIONS, INCIDENTS

RATE_WINDOW_S = 12.0


async def watch_topics(state: LiveState, bootstrap: str, topics: Sequence[str],
                       group_id: str | None, *, every_s: float = 1.0) -> None:
    """Events/s per topic from end offsets, and the detectors' lag from committed offsets."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await consumer.start()
    await admin.start()
    try:
        # (time, end offset) per topic over the last RATE_WINDOW_S: simulators publish in
        # bursts once per interval, so a one-second rate would read 0 most of the time.
        history: dict[str, deque[tuple[float, int]]] = {}
        while True:
            partitions = []
            for topic in topics:
                for p in await topic_partitions(consumer, topic):
                    partitions.append(TopicPartition(topic, p))
            ends = await consumer.end_offsets(partitions) if partitions else {}
            committed: dict[TopicPartition, int] = {}
            if group_id:
                with contextlib.suppress(Exception):  # the group may not exist yet
                    committed = await committed_offsets(admin, group_id)
            now = time.monotonic()
            for topic in topics:
                end = sum(v for tp, v in ends.items() if tp.topic == topic)
                points = history.setdefault(topic, deque())
                points.append((now, end))
                while len(points) > 1 and now - points[0][0] > RATE_WINDOW_S:
                    points.popleft()
                prev_t, prev_end = points[0]
                rate = (end - prev_end) / (now - prev_t) if now > prev_t else 0.0
                lag = None
                tps = [tp for tp in ends if tp.topic == topic]
                if tps and any(tp in committed for tp in tps):
                    lag = lag_of({tp: ends[tp] for tp in tps}, committed)
                state.topics[topic] = TopicRate(end_offset=end, per_s=max(rate, 0.0), lag=lag)
            await asyncio.sleep(every_s)
    finally:
        await consumer.stop()
        await admin.close()


async def committed_offsets(admin: AIOKafkaAdminClient, group_id: str
                            ) -> dict[TopicPartition, int]:
    """A consumer group's committed offset per partition (none for a partition it never
    committed)."""
    offsets = await admin.list_consumer_group_offsets(group_id)
    return {tp: meta.offset for tp, meta in offsets.items()}


def lag_of(ends: Mapping[TopicPartition, int], committed: Mapping[TopicPartition, int]) -> int:
    """Messages in ``ends``' partitions past the committed offsets (all, when none)."""
    return sum(max(0, end - committed.get(tp, 0)) for tp, end in ends.items())


async def topic_partitions(consumer: AIOKafkaConsumer, topic: str) -> set[int]:
    """The topic's partitions, refreshing the metadata when the consumer has none for it yet
    (a consumer subscribed to nothing knows no topic's partitions)."""
    known = consumer.partitions_for_topic(topic)
    if known:
        return set(known)
    with contextlib.suppress(Exception):
        await consumer._client.force_metadata_update()  # noqa: SLF001 - aiokafka has no public refresh
    return consumer.partitions_for_topic(topic) or set()


async def _watch(topic: str, reset: str, bootstrap: str, kind: type[Any],
                 take: Callable[[Any], None]) -> None:
    """Every contract event of ``kind`` on ``topic`` (from ``reset``) to ``take``, as it comes;
    a record that is not one is passed over (the worker dead-letters it)."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset=reset,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        async for message in consumer:
            if message.value is None:
                continue
            try:
                event = decode(message.value)
            except ContractError:
                continue
            if isinstance(event, kind):
                take(event)
    finally:
        await consumer.stop()


async def watch_detections(state: LiveState, bootstrap: str) -> None:
    """Every detection from the demo's start, as it fires."""
    await _watch(DETECTIONS.name, "latest", bootstrap, Detection, state.add_detection)


async def watch_incidents(state: LiveState, bootstrap: str) -> None:
    """Every incident message from the demo's start (the latest per incident is kept)."""
    await _watch(INCIDENTS.name, "earliest", bootstrap, Incident, state.add_incident)
