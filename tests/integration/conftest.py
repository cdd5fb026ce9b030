"""Integration modules share one broker: after a module, its contract topics are truncated.

Every stream worker a test starts has a new consumer group, and a new group reads the
contract topics from the beginning: without this, each test's worker first works through
every earlier module's messages (tens of thousands of port events and detections by the
end of the session), and the last modules measured that backlog rather than themselves.
Records are deleted up to the end offsets (``DeleteRecords``) after each module that used
the session's broker; compacted topics refuse it and keep theirs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import pytest
from aiokafka import TopicPartition  # type: ignore[import-untyped]
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete  # type: ignore[import-untyped]

from schemas.topics import ALL_TOPICS

log = logging.getLogger(__name__)


async def truncate_contract_topics(bootstrap: str) -> int:
    """Delete every record of the contract topics (those that exist and allow it);
    returns how many partitions were truncated."""
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        existing = await consumer.topics()
        # topics() fetches names only; the partitions need the client's own metadata
        await consumer._client.force_metadata_update()
        tps = [TopicPartition(t.name, p) for t in ALL_TOPICS if t.name in existing
               for p in sorted(consumer.partitions_for_topic(t.name) or ())]
        if not tps:
            return 0
        ends = await consumer.end_offsets(tps)
        done = 0
        for tp in tps:  # one at a time: a compacted topic's refusal spoils no other
            if ends[tp] <= 0:
                continue
            try:
                await admin.delete_records({tp: RecordsToDelete(ends[tp])}, timeout_ms=10_000)
                done += 1
            except Exception as exc:  # a compacted topic (policy), or a broker's refusal
                log.info("not truncated: %s (%r)", tp, exc)
        return done
    finally:
        await admin.close()
        await consumer.stop()


@pytest.fixture(scope="module", autouse=True)
def _truncated_after_module(request: pytest.FixtureRequest) -> Iterator[None]:
    items = [i for i in request.session.items if i.module is request.module]
    # Asked for before the module's tests run (pytest refuses new fixtures in a teardown);
    # a module that never uses the session's broker does not start it.
    kafka = (request.getfixturevalue("_kafka_stack")
             if any("kafka_bootstrap" in i.fixturenames for i in items) else None)
    yield
    if kafka is not None:
        asyncio.run(truncate_contract_topics(kafka.alive().settings.kafka.bootstrap_servers))
