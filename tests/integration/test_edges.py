"""Trust at the edges, on the real broker, worker and ledger engine: what one consumer refuses,
every consumer refuses.

- A detection and an action record (``isolate`` done, actor ``attacker``) published to
  ``fabric.port-events`` are dead-lettered by the worker and are not in the ledger the ingest
  fills from the same topics (so ``isolated_ports`` lists nobody).
- One ``up`` stamped 23 h ahead on each end of a link, then a real four-bounce flap: the two
  poisoned events are dead letters ("ahead of the time the broker received it"), and the
  flap is detected as if they had never been sent.
- Within the skew the contract allows (5 min): one ``up`` stamped 4 min 50 s ahead on each
  end of a link is accepted, yet a real flap after it is detected; counters stamped as far
  ahead do not make the real samples after them stale (a degraded link and an error rate
  are still detected). The detectors see an event no later than its broker receive time
  plus the policy's ``arrivalSlack`` (10 s).
"""

from __future__ import annotations

import asyncio
import base64
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from ledger.embedded import EmbeddedLedger
from ledger.ingest import LedgerIngest
from schemas import ActionRecord, Counters, Detection, Event, PortEvent, PortSample, encode
from schemas.topics import PORT_EVENTS

sys.path.insert(0, str(Path(__file__).parent))  # stream_helpers, shared with other tests

from stream_helpers import Worker, collect, downs, expected, publish  # noqa: E402

pytestmark = pytest.mark.integration

HOUR = 3600_000
ISOLATED_PORTS = (Path(__file__).resolve().parents[2] / "sql" / "queries"
                  / "isolated_ports.sql").read_text()


@pytest.fixture
def worker(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Worker]:
    w = Worker(kafka_bootstrap, tmp_path, f"fw-edge-{uuid.uuid4().hex[:8]}")
    yield w
    w.stop()


def _forged(tag: str, now: int) -> list[tuple[str, bytes]]:
    det = Detection(id=f"{tag}/det", ts=now, fabric=tag, source="x", device=f"{tag}-leaf",
                    port=3, detection="flap", severity="critical", action="isolate_port",
                    episode=f"{tag}/ep")
    act = ActionRecord(id=f"{tag}/act", ts=now, fabric=tag, source="x", device=f"{tag}-leaf",
                       port=3, workflow_id=f"remediate/{tag}/x", step="isolate",
                       actor="attacker", outcome="done")
    return [(PORT_EVENTS.name, encode(det)), (PORT_EVENTS.name, encode(act))]


async def test_forged_kinds_and_future_stamps_are_refused_by_worker_and_ledger(
        worker: Worker, tmp_path: Path) -> None:
    tag = worker.app_id.rsplit("-", 1)[1]
    await asyncio.to_thread(worker.start)
    now = int(time.time() * 1000)
    a, b = f"{tag}-leaf-su01-r1", f"{tag}-spine-01"
    poison: list[Event] = [
        PortEvent(id=f"{tag}/future-{dev}", ts=now + 23 * HOUR, fabric=tag, source="opensm",
                  device=dev, port=port, state="up")
        for dev, port in ((a, 7), (b, 3))]
    flap: list[Event] = []
    for i, down in enumerate(downs(a, 7, [0, 20_000, 40_000, 60_000], now - 120_000, tag=tag)):
        flap.append(down.model_copy(update={"fabric": tag}))
        flap.append(PortEvent(id=f"{tag}/up{i}", ts=down.ts + 5_000, fabric=tag, source="opensm",
                              device=a, port=7, state="up"))
    want = expected(flap)
    assert want, "the flap alone is a detection"
    forged = _forged(tag, now)
    await publish(worker.bootstrap, [*forged, *poison])
    await asyncio.sleep(1.0)  # the poison first, as an attacker would send it
    await publish(worker.bootstrap, list(flap))

    reasons = []
    for raw in [r for _, r in forged] + [encode(e) for e in poison]:
        [record] = await collect(worker.bootstrap, "fabric.dlq", 1, base64.b64encode(raw),
                                 settle=0.5)
        reasons.append(orjson.loads(record)["reason"])
    assert sum("does not belong on topic fabric.port-events" in r for r in reasons) == 2, reasons
    assert sum("ahead of the time the broker received it" in r for r in reasons) == 2, reasons
    got = {orjson.loads(v)["id"] for v in await collect(worker.bootstrap, "fabric.detections",
                                                       len(want), tag.encode())}
    assert got == want, worker.tail()

    # The ledger fed from the same topics stores none of what the worker refused.
    ledger = EmbeddedLedger(tmp_path / "ledger")
    ledger.migrate()
    try:
        ingest = LedgerIngest(ledger, worker.bootstrap, group_id=f"edge-{tag}", poll_ms=200)
        stop = asyncio.Event()
        task = asyncio.create_task(ingest.run(stop))
        deadline = time.monotonic() + 90

        def count(sql: str) -> int:
            return int(ledger.query(sql, {"f": tag})[0]["n"])

        while time.monotonic() < deadline:
            await asyncio.sleep(1.0)
            if count("SELECT count() AS n FROM detections FINAL WHERE fabric = {f:String}") >= len(want):
                break
        await asyncio.sleep(2.0)
        stop.set()
        await task
        assert count("SELECT count() AS n FROM actions FINAL WHERE fabric = {f:String}") == 0
        assert {r["id"] for r in ledger.query(
            "SELECT id FROM detections FINAL WHERE fabric = {f:String}", {"f": tag})} == want
        assert count("SELECT count() AS n FROM port_events FINAL WHERE fabric = {f:String}"
                     " AND ts > now64(3) + INTERVAL 1 HOUR") == 0
        assert count("SELECT count() AS n FROM port_events FINAL WHERE fabric = {f:String}") == len(flap)
        # nobody isolated the forged port: the cookbook's isolated_ports does not list it
        assert ledger.query(ISOLATED_PORTS, {"fabric": tag}) == []
        # and what was refused is kept, as the worker's dead letters
        assert count("SELECT count() AS n FROM dead_letters FINAL WHERE source_topic = "
                     "'fabric.port-events' AND base64Decode(raw_b64) LIKE concat('%', {f:String}, '%')"
                     ) == 4
    finally:
        ledger.close()


async def test_stamped_ahead_within_the_skew_blinds_no_port(worker: Worker) -> None:
    tag = worker.app_id.rsplit("-", 1)[1]
    await asyncio.to_thread(worker.start)
    ahead = 4 * 60_000 + 50_000
    a, b, c = f"{tag}-leaf-su01-r1", f"{tag}-spine-01", f"{tag}-leaf-su01-r2"

    def sample(ts: int, n: int, *, width: str, errors: int) -> Counters:
        return Counters(id=f"{tag}/c{n}", ts=ts, fabric=tag, source="ufm", device=c, ports=[
            PortSample(port=5, width=width, speed="NDR", symbol_errors=0),
            PortSample(port=6, width="4X", speed="NDR", symbol_errors=errors)])

    now = int(time.time() * 1000)
    before = sample(now - 10_000, 0, width="4X", errors=0)  # a real, healthy sample
    await publish(worker.bootstrap, [before])
    await asyncio.sleep(1.0)
    now = int(time.time() * 1000)
    poison: list[Event] = [
        PortEvent(id=f"{tag}/ahead-{dev}", ts=now + ahead, fabric=tag, source="opensm",
                  device=dev, port=port, state="up") for dev, port in ((a, 7), (b, 3))]
    poison.append(sample(now + ahead, 1, width="4X", errors=0))
    await publish(worker.bootstrap, poison)
    # the poison first, as an attacker would send it; the real events come after the
    # policy's arrivalSlack (10 s), as far as a message stamped ahead can move "newest"
    await asyncio.sleep(11.0)
    now = int(time.time() * 1000)
    flap: list[Event] = []
    for i, down in enumerate(downs(a, 7, [0, 2_000, 4_000, 6_000], now - 8_000, tag=tag)):
        flap.append(down.model_copy(update={"fabric": tag}))
        flap.append(PortEvent(id=f"{tag}/up{i}", ts=down.ts + 500, fabric=tag,
                              source="opensm", device=a, port=7, state="up"))
    # the link trains down to 1X on port 5; port 6 counts 50,000 symbol errors in seconds
    real = sample(now, 2, width="1X", errors=50_000)
    want = expected(flap)
    assert want, "the flap alone is a detection"
    want_counters = {(d.device, d.port, str(d.detection))
                     for d in replay_detections([before, real])}
    assert (c, 5, "degraded_link") in want_counters and (c, 6, "error_rate") in want_counters
    await publish(worker.bootstrap, [*flap, real])

    got = [orjson.loads(v) for v in await collect(worker.bootstrap, "fabric.detections",
                                                  len(want) + len(want_counters),
                                                  tag.encode())]
    assert {d["id"] for d in got if d["detection"] == "flap"} == want, worker.tail()
    assert {(d["device"], d["port"], d["detection"]) for d in got
            if d["device"] == c} >= want_counters, worker.tail()
    # the stamped-ahead messages were accepted (within the skew), not dead-lettered
    for event in poison:
        assert await collect(worker.bootstrap, "fabric.dlq", 1,
                             base64.b64encode(encode(event)), wait_s=2, settle=0) == []


def replay_detections(events: list[Event]) -> list[Detection]:
    from schemas.policy import Policy
    from streams.replay import replay

    return list(replay([encode(e) for e in events], Policy(), on_error=None))
