"""The stream worker through the real broker: detections, dead letters, a kill and a restart.

Each test runs ``fabricwatch worker`` as a real process (its own app id, so its own consumer
group, internal topics and state) against the session's Kafka broker, publishes contract
events with aiokafka and reads ``fabric.detections`` / ``fabric.dlq``. Expected detections
come from ``streams.replay`` over the same events: the worker must agree with it exactly.

The last test injects faults with the simulator: its ``lab`` fabric runs 40 steps (10 s
each) with a flap, a saturated counter, a degraded link and a BER ramp; the messages are
renamed to the test's own fabric and devices (the session broker is shared, and other tests
publish the same fabric) and the worker's detections must be exactly replay's.
"""

from __future__ import annotations

import asyncio
import base64
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from schemas import Counters, Event, PortSample, Probe, encode
from schemas.policy import Policy
from sim.faults import parse_spec
from sim.telemetry import Simulator
from sim.topology import generate
from streams.replay import replay

pytestmark = pytest.mark.integration

sys.path.insert(0, str(Path(__file__).parent))  # stream_helpers, shared with other tests

from stream_helpers import (  # noqa: E402
    M,
    Worker,
    assert_copies_identical,
    collect,
    committed,
    downs,
    expected,
    publish,
)


@pytest.fixture
def worker(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Worker]:
    w = Worker(kafka_bootstrap, tmp_path, f"fw-test-{uuid.uuid4().hex[:8]}")
    yield w
    w.stop()


# The counters off Faust's stream, in batches (streams/counters/batched.py)
BATCHED = {"FABRICWATCH_STREAMS__COUNTERS_BATCHED": "true"}


@pytest.fixture(params=[False, True], ids=["faust_counters", "batched_counters"])
def either_worker(request: pytest.FixtureRequest, kafka_bootstrap: str, tmp_path: Path
                  ) -> Iterator[Worker]:
    """A worker with the counters through Faust's agent, or through the batched consumer."""
    w = Worker(kafka_bootstrap, tmp_path, f"fw-test-{uuid.uuid4().hex[:8]}",
               env=BATCHED if request.param else None)
    yield w
    w.stop()


async def test_detections_dlq_and_carry_on(either_worker: Worker) -> None:
    worker = either_worker
    tag = worker.app_id
    fabric = tag  # its own (see test_kill_mid_stream_and_restart)
    base = int(time.time() * 1000) - 3600_000
    a, b = f"leaf-{tag}-a", f"leaf-{tag}-b"
    bad = b"\xff not json " + tag.encode()
    wrong_topic = encode(Probe(id=tag, ts=base, fabric="lab", source="probe",
                               probe="ib_write_bw", src="n1", dst="n2", rail=0, size_bytes=1,
                               bw_gbps=1.0))  # valid, but not a counters message
    events: list[Event | tuple[str, bytes]] = [
        *downs(a, 3, [0, 10 * M, 29 * M + 40_000], base, fabric=fabric),
        downs(a, 3, [0], base, fabric=fabric)[0],  # a duplicate (same id)
        ("fabric.port-events", bad),
        ("fabric.counters", wrong_topic),
        Counters(id=f"{tag}-c1", ts=base, fabric=fabric, source="perfquery", device=b,
                 ports=[PortSample(port=1, symbol_errors=65535, link_downed=0),
                        PortSample(port=7, link_downed=0)]),
        *downs(b, 7, [0, 60_000], base, fabric=fabric),  # after the bad bytes: carries on
        Counters(id=f"{tag}-c2", ts=base + 90_000, fabric=fabric, source="perfquery", device=b,
                 ports=[PortSample(port=7, link_downed=2)]),  # the trap at 1 min + one more
    ]
    want = expected(events)
    assert len(want) == 3
    await asyncio.to_thread(worker.start)
    await publish(worker.bootstrap, events)
    got = await collect(worker.bootstrap, "fabric.detections", len(want), tag.encode())
    ids = [orjson.loads(v)["id"] for v in got]
    assert set(ids) == want and len(ids) == len(want), worker.tail()
    kinds = sorted(orjson.loads(v)["detection"] for v in got)
    assert kinds == ["counter_saturated", "flap", "flap"]
    dlq = await collect(worker.bootstrap, "fabric.dlq", 1, base64.b64encode(bad))
    record = orjson.loads(dlq[0])
    assert record["source_topic"] == "fabric.port-events" and record["offset"] >= 0
    assert record["reason"].startswith("not valid JSON")
    wrong = await collect(worker.bootstrap, "fabric.dlq", 1, base64.b64encode(wrong_topic))
    assert "does not belong" in orjson.loads(wrong[0])["reason"]
    assert worker.proc is not None and worker.proc.poll() is None


async def test_kill_mid_stream_and_restart(either_worker: Worker) -> None:
    worker = either_worker
    tag = worker.app_id
    # A fabric of its own: the stale detector's scope is the fabric, and every worker reads
    # fabric.counters from the beginning, where the module's earlier tests left their devices
    # (an hour old, not six). One of them on this test's counters partition made that lane's
    # clock five hours ahead, and this device stale (plus its end), ids replay of this test's
    # events alone cannot have; with either worker, killed or not, when the key hashed there.
    fabric = tag
    base = int(time.time() * 1000) - 6 * 3600_000
    events: list[Event | tuple[str, bytes]] = []
    # 300 ports, each flapping twice (two episodes), plus counter batches in between.
    for p in range(300):
        dev = f"leaf-{tag}-{p // 50}"
        events += downs(dev, p % 50, [0, M, 2 * M, 3 * M, 40 * M, 41 * M, 42 * M],
                        base + p * 1000, fabric=fabric)
    for i in range(200):
        events.append(Counters(
            id=f"{tag}-c{i}", ts=base + i * 10_000, fabric=fabric, source="perfquery",
            device=f"leaf-{tag}-ctr", ports=[PortSample(port=q, link_downed=0,
                                                        symbol_errors=min(i, 65535))
                                             for q in range(1, 33)]))
    want = expected(events)
    assert len(want) > 600
    await asyncio.to_thread(worker.start)
    sender = asyncio.create_task(publish(worker.bootstrap, events))
    # kill the worker as soon as it has published some detections, mid-stream
    first = await collect(worker.bootstrap, "fabric.detections", 20, tag.encode(), settle=0.0)
    assert len(first) >= 20
    await asyncio.to_thread(worker.kill)
    await sender
    await asyncio.to_thread(worker.start)
    got = await collect(worker.bootstrap, "fabric.detections", len(want), tag.encode(),
                        wait_s=180, settle=5.0, by_id=True)
    by_id: dict[str, set[bytes]] = {}
    for v in got:
        by_id.setdefault(orjson.loads(v)["id"], set()).add(v)
    assert set(by_id) == want, worker.tail()  # nothing lost, nothing extra
    # a redelivered detection is byte-identical: the same id and episode
    assert all(len(copies) == 1 for copies in by_id.values()), worker.tail()


async def test_detections_reach_the_ledger(worker: Worker) -> None:
    from ledger import open_ledger
    from runtime.settings import Settings

    tag = worker.app_id
    base = int(time.time() * 1000) - 3600_000
    events: list[Event | tuple[str, bytes]] = [
        *downs(f"leaf-{tag}-l", 5, [0, M, 2 * M], base), ("fabric.port-events", b"[1, 2]")]
    want = expected(events)
    await asyncio.to_thread(worker.start, True)
    await publish(worker.bootstrap, events)
    got = await collect(worker.bootstrap, "fabric.detections", len(want), tag.encode())
    assert {orjson.loads(v)["id"] for v in got} == want
    await asyncio.sleep(2)  # the sink flushes every second
    # stopping releases the embedded ledger's folder, after the sink's last flush
    assert await asyncio.to_thread(worker.stop, 90.0), worker.tail()
    ledger = open_ledger(Settings(state_dir=worker.state_dir))
    try:
        rows = ledger.query("SELECT id FROM detections")
    finally:
        ledger.close()
    # (the worker also handled other tests' events still in the shared topics)
    assert {r["id"] for r in rows if tag in r["id"]} == want, worker.tail()


# --- faults from the simulator -------------------------------------------------------

_NAMES = ("device", "a_device", "b_device", "src", "dst")


def rename(raw: bytes, tag: str) -> tuple[str, bytes, bytes]:
    """The message with this test's fabric and device names, and its contract key."""
    obj: dict[str, Any] = orjson.loads(raw)
    obj["fabric"] = tag
    obj["id"] = f"{tag}/{obj['id']}"
    for holder in [obj, *obj.get("links", [])]:
        for name in _NAMES:
            if isinstance(holder.get(name), str):
                holder[name] = f"{tag}-{holder[name]}"
    kind = obj["kind"]
    if kind == "port_event":
        topic, key = "fabric.port-events", f"{obj['device']}:{obj['port']}"
    elif kind in ("counters", "counter_columns"):
        topic, key = "fabric.counters", obj["device"]
    elif kind == "probe":
        topic, key = "fabric.probes", str(obj["rail"])
    elif kind == "sm_event":
        topic, key = "fabric.sm", obj["fabric"]
    else:
        topic, key = "fabric.topology", obj["fabric"]
    return topic, key.encode(), orjson.dumps(obj)


def sim_messages(tag: str, columnar: bool = False
                 ) -> tuple[list[tuple[str, bytes, bytes]], dict[str, Any]]:
    """The lab fabric's 40 steps with four faults, renamed for ``tag``, and replay's
    detections of them by id (``columnar``: the counters as counter_columns)."""
    faults = [parse_spec("flap:leaf-su01-r0:1,count=4,every=60s,at=30s"),
              parse_spec("counter_saturation:leaf-su01-r1:2,at=20s"),
              parse_spec("degraded_width:leaf-su01-r2:3,at=40s"),
              parse_spec("ber:leaf-su01-r3:4,at=10s")]
    sim = Simulator(generate("lab"), faults=faults, seed=7,
                    start_ms=int(time.time() * 1000) - 3600_000, columnar=columnar)
    messages = [rename(m.value, tag) for step in sim.run_steps(40) for m in step.messages]
    assert any(b'"kind":"counter_columns"' in m[2] for m in messages) == columnar
    want = {d.id: d for d in replay([m[2] for m in messages], Policy(), on_error=None)}
    kinds = {(d.detection.value, d.device.removeprefix(f"{tag}-"), d.port)
             for d in want.values()}
    assert {("flap", "leaf-su01-r0", 1), ("counter_saturated", "leaf-su01-r1", 2),
            ("degraded_link", "leaf-su01-r2", 3), ("ber", "leaf-su01-r3", 4)} <= kinds
    return messages, want


async def send_all(bootstrap: str, messages: list[tuple[str, bytes, bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                enable_idempotence=True, linger_ms=5)
    await producer.start()
    try:
        for topic, key, value in messages:
            await producer.send(topic, value, key=key)
        await producer.flush()
    finally:
        await producer.stop()


def assert_replays(got: list[bytes], want: dict[str, Any], tail: str) -> None:
    """``got`` is replay's detections."""
    ids = [orjson.loads(v)["id"] for v in got]
    assert_copies_identical(got)  # at least once: a redelivery repeats its outputs exactly
    # breaker_open is first come, first served across an SU's ports: which port's request
    # finds the budget spent depends on how the agents' outputs interleave, which file
    # order does not fix. The number of refusals is the same; everything else is exact.
    def split(xs: list[str]) -> tuple[list[str], list[str]]:
        return (sorted(x for x in xs if "breaker_open" not in x),
                [x.rsplit("/", 2)[1] for x in xs if "breaker_open" in x])

    got_exact, got_breaker = split(ids)
    want_exact, want_breaker = split(list(want))
    assert got_exact == want_exact, tail
    assert sorted(got_breaker) == sorted(want_breaker)


@pytest.mark.parametrize("columnar", [False, True], ids=["counters", "counter_columns"])
async def test_sim_faults_give_exactly_replays_detections(either_worker: Worker,
                                                          columnar: bool) -> None:
    """(The columnar form: the worker's column checks against replay's per-sample rules.)"""
    worker = either_worker
    tag = f"t{worker.app_id.rsplit('-', 1)[1]}{'c' if columnar else ''}"
    messages, want = sim_messages(tag, columnar)
    await send_all(worker.bootstrap, messages)
    await asyncio.to_thread(worker.start)
    got = await collect(worker.bootstrap, "fabric.detections", len(want),
                        f'"fabric":"{tag}"'.encode(), wait_s=150, settle=5.0, by_id=True)
    assert_replays(got, want, worker.tail())


async def test_trap_path_apart_gives_exactly_replays_detections(kafka_bootstrap: str,
                                                                  tmp_path: Path) -> None:
    """``--agents traps`` beside ``--agents rest`` (one app id): the same detections as one
    worker and as replay, each published once or as identical copies."""
    app_id = f"fw-test-{uuid.uuid4().hex[:8]}"
    rest = Worker(kafka_bootstrap, tmp_path, app_id, agents="rest")
    traps = Worker(kafka_bootstrap, tmp_path, app_id, agents="traps")
    tag = f"t{app_id.rsplit('-', 1)[1]}"
    messages, want = sim_messages(tag)
    assert {d.detection.value for d in want.values()} >= {"flap", "breaker_open"}
    try:
        await send_all(kafka_bootstrap, messages)
        await asyncio.to_thread(rest.start)
        await asyncio.to_thread(traps.start)
        prefix = f'"fabric":"{tag}"'.encode()
        got = await collect(kafka_bootstrap, "fabric.detections", len(want), prefix,
                            wait_s=150, settle=5.0, by_id=True)
        assert_replays(got, want, traps.tail() + rest.tail())
        # each process consumed only its own inputs: counters in "rest", traps in "traps"
        assert await committed(kafka_bootstrap, f"{app_id}-traps", "fabric.counters") == 0
        assert await committed(kafka_bootstrap, f"{app_id}-traps", "fabric.port-events") > 0
        assert await committed(kafka_bootstrap, f"{app_id}-rest", "fabric.port-events") == 0
        assert await committed(kafka_bootstrap, f"{app_id}-rest", "fabric.counters") > 0
    finally:
        traps.stop()
        rest.stop()


@pytest.mark.parametrize("after", [1, 5])
async def test_trap_path_apart_killed_mid_stream_gives_exactly_replays_detections(
        kafka_bootstrap: str, tmp_path: Path, after: int) -> None:
    """The trap path apart, killed with SIGKILL once it has published ``after`` detections
    and restarted: replay's detections all the same, each once or as identical copies
    (refusals of the breaker by count, as ``assert_replays`` says)."""
    app_id = f"fw-test-{uuid.uuid4().hex[:8]}"
    rest = Worker(kafka_bootstrap, tmp_path, app_id, agents="rest")
    traps = Worker(kafka_bootstrap, tmp_path, app_id, agents="traps")
    tag = f"t{app_id.rsplit('-', 1)[1]}"
    messages, want = sim_messages(tag)
    prefix = f'"fabric":"{tag}"'.encode()
    try:
        # all sent first, as the test of the two apart does (a burst sent while the rest
        # reads it moves its partitions' event-time lanes unevenly, which the stale
        # detector may read as a silence: not what this test is about)
        await send_all(kafka_bootstrap, messages)
        await asyncio.to_thread(rest.start)
        await asyncio.to_thread(traps.start)
        first = await collect(kafka_bootstrap, "fabric.detections", after, prefix,
                              settle=0.0)
        assert len(first) >= after
        await asyncio.to_thread(traps.kill)
        await asyncio.to_thread(traps.start)
        got = await collect(kafka_bootstrap, "fabric.detections", len(want), prefix,
                            wait_s=180, settle=5.0, by_id=True)
        assert_copies_identical(got)  # a redelivery after the kill repeats its outputs
        once = list({orjson.loads(v)["id"]: v for v in got}.values())
        assert_replays(once, want, traps.tail() + rest.tail())
    finally:
        traps.stop()
        rest.stop()
