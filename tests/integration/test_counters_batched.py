"""The batched counters consumer through the real broker: a second worker joins mid-stream.

Two ``fabricwatch worker`` processes of one app id with the counters off Faust's stream
(``FABRICWATCH_STREAMS__COUNTERS_BATCHED``): the first takes every counters partition, the
second joins while counters are arriving, so the first finishes and commits its batch, gives
up half the partitions and drops their states, and the second restores them from the
changelogs. The detections must be replay's, each published once or as identical copies.
(The kill -9 and the replay comparisons of one batched worker: ``test_streams.py``.)
"""

from __future__ import annotations

import asyncio
import math
import re
import signal
import sys
import time
import uuid
from pathlib import Path

import orjson
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner

from schemas import Counters, Event, PortSample, encode, message_key
from schemas import topics as registry

pytestmark = pytest.mark.integration

sys.path.insert(0, str(Path(__file__).parent))

from stream_helpers import (  # noqa: E402
    Worker,
    assert_copies_identical,
    collect,
    committed,
    expected,
    offsets,
    publish,
)

BATCHED = {"FABRICWATCH_STREAMS__COUNTERS_BATCHED": "true"}


def rounds(tag: str, base: int, first: int, last: int) -> list[Event | tuple[str, bytes]]:
    """30 devices at 10 s: every fifth with symbol errors rising on port 1 (an error-rate
    episode), every seventh with its port 2 going down twice a round (counter downs, flaps).
    Their fabric is the test's own: the stale detector's scope is a fabric, and the shared
    topic holds other tests' (and the collectors' wall-clock) counters of ``lab``."""
    out: list[Event | tuple[str, bytes]] = []
    for r in range(first, last):
        for d in range(30):
            errs = d % 5 == 0 and r >= 10
            downs = 2 * max(0, r - 20) if d % 7 == 0 else 0
            out.append(Counters(
                id=f"{tag}-{d}-{r}", ts=base + r * 10_000, fabric=tag, source="gnmi",
                device=f"leaf-{tag}-{d}",
                ports=[PortSample(port=p, symbol_errors=(r - 9) * 400 if errs and p == 1 else 0,
                                  link_downed=downs if p == 2 else 0, rcv_errors=0)
                       for p in range(1, 9)]))
    return out


def touched(events: list[Event | tuple[str, bytes]]) -> set[int]:
    """The counters partitions these events land on (the producer's default partitioner)."""
    partitioner = DefaultPartitioner()
    all_partitions = list(range(registry.COUNTERS.partitions))
    return {partitioner(message_key(e).encode(), all_partitions, all_partitions)
            for e in events if not isinstance(e, tuple)}


def assert_read_back(log: bytes, moved: set[int], worker: Worker) -> None:
    """Every partition the worker took after waking, where another worker committed records
    meanwhile, was read back from the changelogs at the first assignment that gave it (the
    warning path when it still held the states, a plain restore when the lost membership
    had already dropped them), never judged on the states it kept."""
    seen: set[int] = set()
    assignments = re.findall(rb"partitions \[([0-9, ]*)\] assigned \(\[([0-9, ]*)\] restored",
                             log)
    assert assignments, worker.tail()[-2000:]
    for assigned, restored in assignments:
        got = {int(p) for p in assigned.split(b",") if p.strip()}
        back = {int(p) for p in restored.split(b",") if p.strip()}
        first = (got - seen) & moved
        assert first <= back, (sorted(first - back), worker.tail()[-2000:])
        seen |= got
    assert seen & moved, (sorted(seen), sorted(moved))  # it did take some of them back


async def assert_replay_detections(bootstrap: str, tag: str, want: set[str], one: Worker,
                                   two: Worker) -> None:
    """The two workers published exactly replay's detections, each once or as identical
    copies."""
    got = await collect(bootstrap, "fabric.detections", len(want), tag.encode(),
                        wait_s=150, settle=8.0, by_id=True)
    ids = {orjson.loads(v)["id"] for v in got}
    assert ids == want, (sorted(want - ids)[:5], sorted(ids - want)[:5],
                         one.tail()[-2000:], two.tail()[-1500:])
    assert_copies_identical(got)


async def test_a_worker_joining_takes_half_the_counters_with_their_states(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    app_id = f"fw-batched-{uuid.uuid4().hex[:8]}"
    tag = app_id.rsplit("-", 1)[1]
    base = int(time.time() * 1000) - 4 * 3600_000
    first, second = rounds(tag, base, 0, 25), rounds(tag, base, 25, 50)
    want = expected(first + second)
    kinds = {i.split("/", 1)[0].removeprefix("det:") for i in want}
    assert {"flap", "error_rate"} <= kinds, kinds
    one = Worker(kafka_bootstrap, tmp_path, app_id, env=BATCHED)
    two = Worker(kafka_bootstrap, tmp_path, app_id, env=BATCHED, index=1)
    try:
        await asyncio.to_thread(one.start)
        await publish(kafka_bootstrap, first)
        await collect(kafka_bootstrap, "fabric.detections", 1, tag.encode(), settle=0.0)
        await asyncio.to_thread(two.start)
        await publish(kafka_bootstrap, second)
        await assert_replay_detections(kafka_bootstrap, tag, want, one, two)
        # the second worker did take partitions, and restored their states
        assert b"revoked" in one.log.read_bytes()
        restored = re.findall(rb"assigned \(\[[0-9, ]+\] restored, (\d+) state record",
                              two.log.read_bytes())
        assert restored and int(restored[0]) > 0, two.tail()[-1500:]
    finally:
        two.stop()
        one.stop()


async def test_a_worker_out_of_the_group_a_while_reads_back_what_another_committed(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    # The first worker stops (SIGSTOP) past its session timeout while counters arrive: the
    # second takes every partition and commits past the first's states. Woken, the first
    # rejoins with states that are behind those offsets: it must read them back, not judge
    # on them, and the detections stay replay's.
    app_id = f"fw-batched-{uuid.uuid4().hex[:8]}"
    tag = app_id.rsplit("-", 1)[1]
    base = int(time.time() * 1000) - 4 * 3600_000
    parts = [rounds(tag, base, a, b) for a, b in ((0, 15), (15, 35), (35, 50))]
    want = expected([e for part in parts for e in part])
    one = Worker(kafka_bootstrap, tmp_path, app_id, env=BATCHED)
    two = Worker(kafka_bootstrap, tmp_path, app_id, env=BATCHED, index=1)
    try:
        await asyncio.to_thread(one.start)
        await asyncio.to_thread(two.start)
        await asyncio.sleep(5)  # both in the group, the partitions shared
        await publish(kafka_bootstrap, parts[0])
        await collect(kafka_bootstrap, "fabric.detections", 1, tag.encode(), settle=2.0)
        assert one.proc is not None
        one.proc.send_signal(signal.SIGSTOP)
        try:
            await asyncio.sleep(15)  # past the 10 s session: the second takes them all
            await publish(kafka_bootstrap, parts[1])
            await asyncio.sleep(15)  # ...and applies and commits them
        finally:
            woken_at = len(one.log.read_bytes())
            one.proc.send_signal(signal.SIGCONT)
        await asyncio.sleep(15)  # the first rejoins and takes its share back
        await publish(kafka_bootstrap, parts[2])
        await assert_replay_detections(kafka_bootstrap, tag, want, one, two)
        woken = one.log.read_bytes()[woken_at:]
        assert_read_back(woken, touched(parts[1]), one)
        # the Faust agents' fence saw the stall and waited for the group (streams.fence)
        assert b"membership fence: this worker stood still" in woken, one.tail()[-2000:]
        assert b"membership fence: the group rejoined" in woken, one.tail()[-2000:]
    finally:
        if one.proc is not None and one.proc.poll() is None:
            one.proc.send_signal(signal.SIGCONT)
        two.stop()
        one.stop()


async def committed_to_the_end(bootstrap: str, app_id: str, worker: Worker) -> None:
    """Wait until the batched group has committed everything on the counters topic (an
    interval's flush runs with no new fetch too)."""
    _, end = await offsets(bootstrap, registry.COUNTERS.name)
    deadline = time.monotonic() + 60
    while await committed(bootstrap, f"{app_id}-counters", registry.COUNTERS.name) < end:
        assert time.monotonic() < deadline, worker.tail()[-1500:]
        await asyncio.sleep(1)


async def changelog_records(bootstrap: str, topic: str) -> int:
    """Records written to ``topic`` so far (end minus beginning offsets, all partitions)."""
    start, end = await offsets(bootstrap, topic)
    return end - start


async def test_a_trickle_of_counters_writes_each_state_once_a_commit_interval(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    # 12 rounds of 30 devices, one round every 0.6 s: a write per batch is a record per
    # device and fetch; once a 5 s commit interval it is at most one per device and
    # interval. The offsets still reach the end once the trickle stops (the interval's
    # flush runs with no new fetch), and the detections are replay's.
    app_id = f"fw-batched-{uuid.uuid4().hex[:8]}"
    tag = app_id.rsplit("-", 1)[1]
    base = int(time.time() * 1000) - 4 * 3600_000
    events = rounds(tag, base, 0, 25)
    want = expected(events)
    worker = Worker(kafka_bootstrap, tmp_path, app_id, env=BATCHED)
    try:
        await asyncio.to_thread(worker.start)
        by_round = [events[r * 30:(r + 1) * 30] for r in range(25)]
        await publish(kafka_bootstrap, [e for part in by_round[:13] for e in part])
        await collect(kafka_bootstrap, "fabric.detections", 1, tag.encode(), settle=0.0)
        await committed_to_the_end(kafka_bootstrap, app_id, worker)  # all of it flushed
        before = await changelog_records(kafka_bootstrap,
                                         f"{app_id}-counters-batched-changelog")
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all",
                                    linger_ms=5)
        await producer.start()
        started = time.monotonic()
        try:
            for part in by_round[13:]:  # one producer: a round is sent in milliseconds
                for ev in part:
                    await producer.send(registry.COUNTERS.name, encode(ev),
                                        key=message_key(ev).encode())
                await producer.flush()
                await asyncio.sleep(0.6)
        finally:
            await producer.stop()
        took = time.monotonic() - started
        got = await collect(kafka_bootstrap, "fabric.detections", len(want), tag.encode(),
                            wait_s=120, settle=8.0, by_id=True)
        assert {orjson.loads(v)["id"] for v in got} == want
        assert_copies_identical(got)
        trickle = await changelog_records(kafka_bootstrap,
                                          f"{app_id}-counters-batched-changelog") - before
        # at most one record per device and 5 s interval the trickle touched (~8 s: 3),
        # where a write per fetch is one per device and round (360)
        intervals = math.ceil(took / 5.0) + 1
        assert intervals <= 4, took
        assert 30 <= trickle <= 30 * intervals, (trickle, took)
        await committed_to_the_end(kafka_bootstrap, app_id, worker)
    finally:
        worker.stop()
