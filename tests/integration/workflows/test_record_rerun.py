"""A runbook record re-run after a crash is the same row, on the real chdb ledger and the
real broker.

The record is a local activity: when the worker dies after writing it but before the
workflow task completes, the retried task runs it again with the same id (a sequence number
in the run) and a later ``workflow.now()``. The ``actions`` table's sort key includes
``ts``, so before ``Ledger.write`` kept one row per record id such a re-run was a second
row under FINAL (and ``isolate`` twice in the port's history)."""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from collectors.publish import Publisher
from ledger.embedded import EmbeddedLedger
from ledger.ingest import LedgerIngest
from workflows.adapters.k8s import NoFencer
from workflows.adapters.records import KafkaSink, LedgerSink
from workflows.remediation.activities import FabricActivities
from workflows.remediation.models import PortRef, RecordInput

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: the fakes package
from fakes.ticketing import RecordingTicketing  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[EmbeddedLedger]:
    led = EmbeddedLedger(tmp_path / "ledger")
    try:
        led.migrate()
        yield led
    finally:
        led.close()


def activities(records: object) -> FabricActivities:
    return FabricActivities(records=records, controller=None, evidence=None,  # type: ignore[arg-type]
                            checker=None, fencer=NoFencer(),  # type: ignore[arg-type]
                            ticketing=RecordingTicketing())


def record(fabric: str, seq: int, ts: int) -> RecordInput:
    wf = f"remediate/{fabric}/leaf-su01-r1:3~node0002/mlx5_1:1"
    return RecordInput(record_id=f"{wf}/run-1/{seq}", workflow_id=wf,
                       port=PortRef(fabric=fabric, device="leaf-su01-r1", port=3), ts=ts,
                       step="isolate", outcome="done", note="isolated")


def rows(ledger: EmbeddedLedger, fabric: str) -> list[dict[str, object]]:
    return ledger.query("SELECT id, step, toUnixTimestamp64Milli(ts) AS ms FROM actions FINAL "
                        "WHERE fabric = {f:String} ORDER BY id", {"f": fabric})


async def test_the_record_activity_run_twice_is_one_row(ledger: EmbeddedLedger) -> None:
    fabric = f"rr{uuid.uuid4().hex[:6]}"
    now = int(time.time() * 1000)
    env = ActivityEnvironment()
    acts = activities(LedgerSink(ledger))
    first = record(fabric, 7, now)
    await env.run(acts.record_action, first)
    await env.run(acts.record_action, first)  # an activity retry: the same input
    # the retried workflow task decides again, 7 s later: same id, a later ts
    await env.run(acts.record_action, first.model_copy(update={"ts": now + 7_000}))
    await env.run(acts.record_action, record(fabric, 8, now + 7_000))  # the next record
    assert rows(ledger, fabric) == [
        {"id": first.record_id, "step": "isolate", "ms": now},
        {"id": record(fabric, 8, 0).record_id, "step": "isolate", "ms": now + 7_000}]


async def test_a_rerun_through_the_broker_is_one_row(kafka_bootstrap: str,
                                                     ledger: EmbeddedLedger) -> None:
    """``--records kafka``: both runs reach ``fabric.actions``; the ledger's ingest stores
    one (the two may even land in one ingest batch)."""
    fabric = f"rk{uuid.uuid4().hex[:6]}"
    now = int(time.time() * 1000)
    env = ActivityEnvironment()
    async with Publisher(kafka_bootstrap) as pub:
        acts = activities(KafkaSink(pub))
        first = record(fabric, 3, now)
        await env.run(acts.record_action, first)
        await env.run(acts.record_action, first.model_copy(update={"ts": now + 9_000}))
        await env.run(acts.record_action, record(fabric, 4, now + 9_000))
    ingest = LedgerIngest(ledger, kafka_bootstrap, group_id=f"g-{fabric}", poll_ms=200)
    stop = asyncio.Event()
    task = asyncio.create_task(ingest.run(stop))
    try:
        for _ in range(180):  # the ingest polls; up to 90 s
            if len(rows(ledger, fabric)) >= 2:
                break
            await asyncio.sleep(0.5)
        await asyncio.sleep(2.0)  # room for a second row, if it were stored
    finally:
        stop.set()
        await task
    assert [(r["id"], r["ms"]) for r in rows(ledger, fabric)] == [
        (first.record_id, now), (record(fabric, 4, 0).record_id, now + 9_000)]


async def test_records_to_the_ledger_reach_the_breaker_too(kafka_bootstrap: str,
                                                          ledger: EmbeddedLedger) -> None:
    """``--records ledger``: the record is in the ledger at once, and its copy on
    ``fabric.actions`` is what the stream-side breaker counts the isolation from; the
    ledger's ingest storing that copy again keeps one row."""
    from aiokafka import AIOKafkaConsumer  # type: ignore[import-untyped]

    from schemas import ActionRecord, DetectionKind, decode
    from schemas import topics as registry
    from schemas.policy import Policy
    from streams.common import make_detection
    from streams.engine import Context, Engine

    fabric = f"rl{uuid.uuid4().hex[:6]}"
    now = int(time.time() * 1000)
    env = ActivityEnvironment()
    async with Publisher(kafka_bootstrap) as pub:
        acts = activities(LedgerSink(ledger, actions=pub))
        first = record(fabric, 5, now)
        await env.run(acts.record_action, first)
    assert [r["id"] for r in rows(ledger, fabric)] == [first.record_id]

    seen: list[ActionRecord] = []
    consumer = AIOKafkaConsumer(registry.ACTIONS.name, bootstrap_servers=kafka_bootstrap,
                                group_id=f"breaker-{fabric}", auto_offset_reset="earliest")
    await consumer.start()
    try:
        deadline = time.monotonic() + 90
        while not seen and time.monotonic() < deadline:
            for messages in (await consumer.getmany(timeout_ms=500)).values():
                for message in messages:
                    event = decode(message.value)
                    if isinstance(event, ActionRecord) and event.fabric == fabric:
                        seen.append(event)
    finally:
        await consumer.stop()
    assert [(r.id, r.step, r.port) for r in seen] == [(first.record_id, "isolate", 3)]

    # the breaker's accounting, fed what it reads from the topic: su01 of 100 ports has a
    # budget of one at 1%; with port 3 isolated, a request for port 4 finds it full
    engine = Engine(Policy(), Context(ports_per_su={"su01": 100}))
    assert engine.feed(seen[0]) == []
    fired = engine.feed(make_detection(
        kind=DetectionKind.FLAP, fabric=fabric, device="leaf-su01-r1", port=4, ts=now + 1000,
        action="isolatePort", episode=f"flap/{fabric}:4", evidence={}))
    assert [(d.detection.value, d.port, d.evidence["isolated"]) for d in fired] == [
        ("breaker_open", 4, ["leaf-su01-r1:3"])]

    ingest = LedgerIngest(ledger, kafka_bootstrap, group_id=f"g-{fabric}", poll_ms=200)
    stop = asyncio.Event()
    task = asyncio.create_task(ingest.run(stop))
    try:
        for _ in range(120):
            if ingest.stats.by_topic.get(registry.ACTIONS.name):
                break
            await asyncio.sleep(0.5)
        await asyncio.sleep(2.0)
    finally:
        stop.set()
        await task
    assert ingest.stats.by_topic.get(registry.ACTIONS.name)
    assert [r["id"] for r in rows(ledger, fabric)] == [first.record_id]
