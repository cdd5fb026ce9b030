"""The ledger's Kafka consumer: every contract topic lands in the ledger, a replay adds nothing."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence

import pytest

from collectors.publish import Publisher
from ledger.base import LedgerError
from ledger.embedded import EmbeddedLedger
from ledger.ingest import LedgerIngest
from schemas import (
    ActionRecord,
    Counters,
    DeadLetter,
    Detection,
    Event,
    PortEvent,
    PortSample,
    Probe,
    dead_letter,
    encode,
)
from schemas.errors import ContractError
from schemas.topics import COUNTERS, DLQ

pytestmark = pytest.mark.integration


def _events(fabric: str, now: int) -> list:
    return [
        PortEvent(id=f"{fabric}-e1", ts=now, fabric=fabric, source="opensm",
                  device="leaf-su01-r3", port=5, state="down", trap=128),
        Counters(id=f"{fabric}-c1", ts=now, fabric=fabric, source="sim", device="leaf-su01-r3",
                 ports=[PortSample(port=p, symbol_errors=p, link_downed=1) for p in range(1, 9)]),
        Probe(id=f"{fabric}-p1", ts=now, fabric=fabric, source="probe", probe="ib_write_bw",
              src="node0001/mlx5_0", dst="node0002/mlx5_0", rail=0, size_bytes=1 << 20,
              bw_gbps=390.0, baseline_gbps=392.0),
        Detection(id=f"{fabric}-d1", ts=now, fabric=fabric, source="fabricwatch",
                  device="leaf-su01-r3", port=5, detection="flap",  # type: ignore[arg-type]
                  severity="critical", action="isolate_port",  # type: ignore[arg-type]
                  episode=f"flap/{fabric}/1"),
        ActionRecord(id=f"{fabric}-a1", ts=now, fabric=fabric, source="fabricwatch",
                     device="leaf-su01-r3", port=5, workflow_id="remediate/x", step="isolate",
                     actor="fabricwatch", outcome="done"),
    ]


async def _drain(ledger: EmbeddedLedger, bootstrap: str, group: str, expect_messages: int
                 ) -> int:
    # no hold: each drain stops once it has read its messages, and a held counter sample is
    # left to the next reader (the hold has its own test: test_ledger_late_samples.py)
    ingest = LedgerIngest(ledger, bootstrap, group_id=group, poll_ms=200, lateness_s=0)
    stop = asyncio.Event()
    task = asyncio.create_task(ingest.run(stop))
    deadline = time.monotonic() + 60
    while ingest.stats.messages < expect_messages and time.monotonic() < deadline:  # noqa: ASYNC110 - polling the consumer's own counter
        await asyncio.sleep(0.2)
    stop.set()
    stats = await task
    return stats.messages


async def test_every_topic_reaches_the_ledger_and_a_replay_adds_nothing(
        kafka_bootstrap: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    fabric = f"ingest-{uuid.uuid4().hex[:8]}"
    now = int(time.time() * 1000)
    async with Publisher(kafka_bootstrap) as publisher:
        await publisher.send_many(_events(fabric, now))
        bad = b'{"kind": "counters", "device": 7}'
        await publisher.send_raw(COUNTERS.name, b"x", bad)
        record = dead_letter(bad, ContractError("device: not a string", "device"),
                             source_topic=COUNTERS.name, partition=0, offset=1, now_ms=now)
        await publisher.send_raw(DLQ.name, None, encode(record))
        await publisher.flush()

    ledger = EmbeddedLedger(tmp_path / "ledger")
    ledger.migrate()
    try:
        # The session broker is shared: other tests' messages are there too; a fresh group
        # reads the topics from the start, so wait until ours have been consumed.
        async def ours_written() -> dict[str, int]:
            counts = {}
            for table in ("port_events", "counter_samples", "probes", "detections", "actions"):
                rows = ledger.query(f"SELECT count() AS n FROM {table} FINAL "  # noqa: S608
                                    "WHERE fabric = {f:String}", {"f": fabric})
                counts[table] = int(rows[0]["n"])
            return counts

        group = f"ledger-test-{uuid.uuid4().hex[:6]}"
        await _drain(ledger, kafka_bootstrap, group, 7)
        deadline = time.monotonic() + 60
        counts = await ours_written()
        while counts["actions"] == 0 and time.monotonic() < deadline:
            await _drain(ledger, kafka_bootstrap, group, 1)
            counts = await ours_written()
        assert counts == {"port_events": 1, "counter_samples": 8, "probes": 1,
                          "detections": 1, "actions": 1}
        dlq = ledger.query("SELECT count() AS n FROM dead_letters FINAL "
                           "WHERE reason = 'device: not a string'")
        assert int(dlq[0]["n"]) >= 1

        # A second group replays everything from the start: the ledger holds no duplicate.
        await _drain(ledger, kafka_bootstrap, f"ledger-replay-{uuid.uuid4().hex[:6]}", 7)
        assert await ours_written() == counts
    finally:
        ledger.close()




class _Failing:
    """A ledger whose engine is gone (a ClickHouse server down): every write fails."""

    def __init__(self) -> None:
        self.writes = 0

    def write(self, events: Sequence[Event | DeadLetter]) -> int:
        self.writes += 1
        raise LedgerError("the engine is gone")


async def _publish_counters(bootstrap: str, fabric: str, n: int) -> None:
    now = int(time.time() * 1000) - 60_000
    async with Publisher(bootstrap) as publisher:
        await publisher.send_many([
            Counters(id=f"{fabric}-{i}", ts=now + i, fabric=fabric, source="sim",
                     device=f"leaf-{i % 8}", ports=[PortSample(port=1, xmit_wait=i)])
            for i in range(n)])
        await publisher.flush()


async def _stored(ledger: EmbeddedLedger, fabric: str) -> int:
    rows = ledger.query("SELECT count() AS n FROM counter_samples FINAL "
                        "WHERE fabric = {f:String}", {"f": fabric})
    return int(rows[0]["n"])


async def test_a_failed_write_commits_nothing_and_its_batch_is_read_again(
        kafka_bootstrap: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    fabric = f"fail-{uuid.uuid4().hex[:8]}"
    group = f"fail-{fabric}"
    ledger = EmbeddedLedger(tmp_path / "ledger")
    ledger.migrate()
    try:
        # a first owner catches up past a marker (other tests' messages are read too) ...
        marker = f"{fabric}-marker"
        await _publish_counters(kafka_bootstrap, marker, 1)
        assert await _drain_fabric(ledger, kafka_bootstrap, group, marker, 1) == 1
        # ... then ours arrive, and the next owner's engine fails on their first write
        await _publish_counters(kafka_bootstrap, fabric, 40)
        failing = _Failing()
        second = LedgerIngest(failing, kafka_bootstrap, group_id=group, poll_ms=100,
                              topics=[COUNTERS.name], lateness_s=0)
        with pytest.raises(LedgerError, match="the engine is gone"):
            await asyncio.wait_for(second.run(asyncio.Event()), 60)
        assert failing.writes == 1
        assert await _stored(ledger, fabric) == 0
        # the owner after it reads our messages again: none was committed past
        assert await _drain_fabric(ledger, kafka_bootstrap, group, fabric, 40) == 40
    finally:
        ledger.close()


async def _drain_fabric(ledger: EmbeddedLedger, bootstrap: str, group: str, fabric: str,
                        want: int) -> int:
    ingest = LedgerIngest(ledger, bootstrap, group_id=group, poll_ms=100,
                          topics=[COUNTERS.name], lateness_s=0)
    stop = asyncio.Event()
    task = asyncio.create_task(ingest.run(stop))
    deadline = time.monotonic() + 60
    while await _stored(ledger, fabric) < want and time.monotonic() < deadline:  # noqa: ASYNC110 - polling the ledger itself
        await asyncio.sleep(0.2)
    stop.set()
    await task
    return await _stored(ledger, fabric)
