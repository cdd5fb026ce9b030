"""The shared producer and ``fabricwatch ingest`` against the real Kafka broker.

Events parsed from the fixtures in tests/fixtures go out through ``collectors.publish.Publisher`` and
are read back from the contract topics: same bytes as ``schemas.encode``, the contract's
key, every event once. A bad file in an ingest batch publishes nothing at all.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer  # type: ignore[import-untyped]
from aiokafka.structs import TopicPartition  # type: ignore[import-untyped]

from collectors.ibdiags import parse_perfquery
from collectors.ibnetdiscover import parse_ibnetdiscover, parse_nodes
from collectors.lidmap import LidMap
from collectors.publish import Publisher, PublishError
from collectors.smlog import parse_opensm_log
from schemas import decode, encode, message_key
from schemas.events import Event
from schemas.topics import COUNTERS, PORT_EVENTS, TOPOLOGY, topic_for_kind

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures"
FABRICWATCH = Path(sys.executable).parent / "fabricwatch"
TS = 1_795_971_600_000  # 2026-11-29T17:00:00Z


async def _end_offsets(bootstrap: str, topics: list[str]) -> dict[TopicPartition, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        parts = [TopicPartition(t, p) for t in topics
                 for p in (consumer.partitions_for_topic(t) or await _partitions(consumer, t))]
        return dict(await consumer.end_offsets(parts))
    finally:
        await consumer.stop()


async def _partitions(consumer: AIOKafkaConsumer, topic: str) -> set[int]:
    await consumer._client.force_metadata_update()  # partitions of a topic not yet subscribed
    return consumer.partitions_for_topic(topic) or set()


async def _read_since(bootstrap: str, start: dict[TopicPartition, int],
                      ) -> list[tuple[str, bytes | None, bytes]]:
    """Every record written after ``start`` (up to the current end), as (topic, key, value)."""
    end = await _end_offsets(bootstrap, sorted({tp.topic for tp in start}))
    out: list[tuple[str, bytes | None, bytes]] = []
    wanted = [tp for tp in start if end[tp] > start[tp]]
    if not wanted:
        return out
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                max_partition_fetch_bytes=16 * 1024 * 1024,
                                fetch_max_bytes=64 * 1024 * 1024)
    await consumer.start()
    try:
        consumer.assign(wanted)
        for tp in wanted:
            consumer.seek(tp, start[tp])
        remaining = {tp: end[tp] for tp in wanted}
        while remaining:
            batch = await consumer.getmany(timeout_ms=5000)
            if not batch:
                raise AssertionError(f"records missing before the end offsets: {remaining}")
            for tp, records in batch.items():
                for record in records:
                    if record.offset < remaining.get(tp, -1):
                        out.append((tp.topic, record.key, record.value))
                if tp in remaining and records and records[-1].offset + 1 >= remaining[tp]:
                    del remaining[tp]
    finally:
        await consumer.stop()
    return out


def _events(fabric: str) -> list[Event]:
    topo_text = (FIXTURES / "ibnetdiscover" / "ufm-sdk-selene-compute-hdr.txt").read_text()
    fattree = (FIXTURES / "ibnetdiscover" / "topograph-ndr-fattree.txt").read_text()
    lids = LidMap.from_nodes(parse_nodes(fattree))
    events: list[Event] = [parse_ibnetdiscover(topo_text, fabric=fabric, ts=TS)]
    events += parse_perfquery(
        (FIXTURES / "perfquery" / "ibsim-basic-switch-port-saturated.txt").read_text(),
        fabric=fabric, ts=TS, lids=lids)
    events += parse_opensm_log(
        (FIXTURES / "opensm" / "ibsim-default-level-traps-128.log").read_text(),
        fabric=fabric, tz="UTC", year=2026, lids=lids).events
    return events


async def test_publisher_delivers_every_event_once_keyed_as_the_contract_says(
        kafka_bootstrap: str) -> None:
    fabric = f"pub-{uuid.uuid4().hex[:8]}"
    events = _events(fabric)
    assert len(events) == 4  # a 12,852-link topology, one counters batch, two port events
    topics = [TOPOLOGY.name, COUNTERS.name, PORT_EVENTS.name]
    start = await _end_offsets(kafka_bootstrap, topics)
    async with Publisher(kafka_bootstrap) as publisher:
        assert publisher.config["enable_idempotence"] is True
        assert publisher.config["acks"] == "all"
        sent = await publisher.send_many(events)
        acked = await publisher.flush()
    assert sent == acked == len(events)

    records = [r for r in await _read_since(kafka_bootstrap, start)
               if decode(r[2]).fabric == fabric]
    assert len(records) == len(events)
    by_id = {decode(value).id: (topic, key, value) for topic, key, value in records}
    for event in events:
        topic, key, value = by_id[event.id]
        assert topic == topic_for_kind(event.kind).name
        assert key == message_key(event).encode()
        assert value == encode(event)
    topology = decode(by_id[events[0].id][2])
    assert len(topology.links) == 12_852  # type: ignore[union-attr]


async def test_send_raw_and_use_outside_the_context(kafka_bootstrap: str) -> None:
    publisher = Publisher(kafka_bootstrap)
    with pytest.raises(PublishError, match="not started"):
        await publisher.flush()
    start = await _end_offsets(kafka_bootstrap, [COUNTERS.name])
    payload = b'{"raw": "' + uuid.uuid4().hex.encode() + b'"}'
    async with Publisher(kafka_bootstrap, linger_ms=0, compression=None) as publisher:
        await publisher.send_raw(COUNTERS.name, b"raw-key", payload)
    records = await _read_since(kafka_bootstrap, start)
    assert (COUNTERS.name, b"raw-key", payload) in records


def _ingest(args: list[str], bootstrap: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FABRICWATCH_KAFKA__BOOTSTRAP": bootstrap}
    return subprocess.run([str(FABRICWATCH), "ingest", *args], capture_output=True, text=True,
                          env=env, timeout=120, check=False)


async def test_ingest_publishes_and_a_bad_file_publishes_nothing(kafka_bootstrap: str,
                                                                 tmp_path: Path) -> None:
    fabric = f"ing-{uuid.uuid4().hex[:8]}"
    good = FIXTURES / "iblinkinfo" / "ibsim-ndr-fattree-down-ports.txt"
    truncated = tmp_path / "cut; rm -rf $HOME `id`.txt"  # metacharacters are only a name
    truncated.write_text(good.read_text()[:4990])  # cut inside a line
    start = await _end_offsets(kafka_bootstrap, [COUNTERS.name])

    bad = _ingest(["iblinkinfo", str(good), str(truncated), "--fabric", fabric,
                   "--ts", "2026-11-29T17:00:00Z"], kafka_bootstrap)
    assert bad.returncode == 2, bad.stderr
    assert f"{truncated}:" in bad.stderr
    assert [r for r in await _read_since(kafka_bootstrap, start)
            if decode(r[2]).fabric == fabric] == []

    ok = _ingest(["iblinkinfo", str(good), "--fabric", fabric, "--ts",
                  "2026-11-29T17:00:00Z"], kafka_bootstrap)
    assert ok.returncode == 0, ok.stderr
    mine = [decode(r[2]) for r in await _read_since(kafka_bootstrap, start)
            if decode(r[2]).fabric == fabric]
    assert len(mine) == 40  # the 40 switches that have down ports
    assert "published 40 events" in ok.stderr

