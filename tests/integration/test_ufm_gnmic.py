"""``fabricwatch poll ufm`` against the loopback UFM and ``consume gnmic`` on the real broker.

UFM: the poller runs as the real command, is stopped while UFM keeps producing events and
started again; every UFM event is published once per end: no duplicate, no gap.
gnmic: a topic filled with gnmic-format messages becomes contract events on the contract
topics, keyed per device (port), and the unmappable messages are dead-lettered with a reason.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import json
import os
import signal
import sys
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaConsumer  # type: ignore[import-untyped]
from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # type: ignore[import-untyped]
from aiokafka.structs import TopicPartition  # type: ignore[import-untyped]

from collectors.gnmic_map import GnmicMapper
from collectors.live.consume_gnmic import GnmicConsumer
from collectors.publish import Publisher
from schemas import Counters, PortEvent, decode, loads
from schemas.topics import COUNTERS, DLQ, PORT_EVENTS

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the fakes package
from fakes.ufm_server import PASSWORD, TELEMETRY_PATH, USER, FakeUfmServer  # noqa: E402

pytestmark = pytest.mark.integration

FABRICWATCH = Path(sys.executable).parent / "fabricwatch"
GNMIC = Path(__file__).resolve().parents[1] / "fixtures" / "gnmic"


async def _ends(bootstrap: str, topics: list[str]) -> dict[TopicPartition, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()
        parts = [TopicPartition(t, p) for t in topics for p in consumer.partitions_for_topic(t) or ()]
        return dict(await consumer.end_offsets(parts))
    finally:
        await consumer.stop()


async def _since(bootstrap: str, start: dict[TopicPartition, int]) -> list[Any]:
    """Every record after ``start`` up to the current end offsets."""
    end = await _ends(bootstrap, sorted({tp.topic for tp in start}))
    wanted = {tp: end[tp] for tp in start if end.get(tp, 0) > start[tp]}
    out: list[Any] = []
    if not wanted:
        return out
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign(list(wanted))
        for tp in wanted:
            consumer.seek(tp, start[tp])
        while wanted:
            batch = await consumer.getmany(timeout_ms=10_000)
            if not batch:
                raise AssertionError(f"records missing before the end offsets: {wanted}")
            for tp, records in batch.items():
                out += [r for r in records if r.offset < wanted.get(tp, -1)]
                if tp in wanted and records[-1].offset + 1 >= wanted[tp]:
                    del wanted[tp]
    finally:
        await consumer.stop()
    return out


def _env(bootstrap: str, state: Path, fabric: str) -> dict[str, str]:
    secret = state / "ufm-password"
    secret.write_text(PASSWORD + "\n")
    return {**os.environ, "FABRICWATCH_KAFKA__BOOTSTRAP": bootstrap,
            "FABRICWATCH_STATE_DIR": str(state), "FABRICWATCH_FABRIC": fabric,
            "FABRICWATCH_SECRETS__UFM_USERNAME": USER,
            "FABRICWATCH_SECRETS__UFM_PASSWORD_FILE": str(secret)}


def _last_id(state: Path) -> int:
    files = list((state / "poll").glob("ufm-*.json"))
    if not files:
        return 0
    try:
        return int(json.loads(files[0].read_text()).get("last_event_id") or 0)
    except ValueError:
        return 0  # caught mid-replace


async def _wait_for(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)


async def _stop(proc: asyncio.subprocess.Process) -> tuple[int, str]:
    proc.send_signal(signal.SIGTERM)
    _out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, err.decode()


async def test_ufm_poller_restart_mid_stream_no_duplicate_no_gap(kafka_bootstrap: str,
                                                                 tmp_path: Path) -> None:
    fabric = f"ufm-{uuid.uuid4().hex[:8]}"
    ufm = FakeUfmServer()
    url = await ufm.start()
    start = await _ends(kafka_bootstrap, [PORT_EVENTS.name, COUNTERS.name])
    argv = [str(FABRICWATCH), "poll", "ufm", "--url", url, "--telemetry-url",
            url + TELEMETRY_PATH, "--every", "1", "--backfill"]
    env = _env(kafka_bootstrap, tmp_path, fabric)
    new_ids: list[int] = []

    async def feed(first: int, count: int) -> None:
        for i in range(0, count, 2):
            new_ids.extend(ufm.add_link_events(first + i, 2, minute=20 + i // 60))
            await asyncio.sleep(0.4)

    try:
        proc = await asyncio.create_subprocess_exec(*argv, env=env, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE)
        await feed(98000, 6)
        await _wait_for(lambda: _last_id(tmp_path) >= 98005, 120, "the first poller's rounds")
        feeder = asyncio.create_task(feed(98006, 14))  # mid-stream: events go on arriving
        await asyncio.sleep(0.5)
        rc, err = await _stop(proc)
        assert rc == 0, err
        await feeder
        new_ids.extend(ufm.add_link_events(98020, 4))  # while nothing polls
        stopped_at = _last_id(tmp_path)
        assert 98005 <= stopped_at < 98020
        proc = await asyncio.create_subprocess_exec(*argv, env=env, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE)
        await _wait_for(lambda: _last_id(tmp_path) == 98023, 120, "the restarted poller")
        rc, err = await _stop(proc)
        assert rc == 0, err
    finally:
        await ufm.stop()

    records = await _since(kafka_bootstrap, start)
    mine = [(r.topic, r.key, decode(r.value)) for r in records
            if loads(r.value).get("fabric") == fabric]
    ports = [(key, e) for topic, key, e in mine if topic == PORT_EVENTS.name]
    link = collections.Counter((e.ufm_event_id, e.device, e.port, e.state)  # type: ignore[attr-defined]
                               for _k, e in ports if getattr(e, "ufm_event_id", None))
    expected = {(i, d, 5, "down" if (i - 98000) % 2 == 0 else "up")
                for i in new_ids for d in ("sw-leaf01", "sw-spine01")}
    expected |= {(97214, "sw-leaf01", 5, "down"), (97214, "sw-spine01", 5, "down"),
                 (97215, "sw-leaf01", 5, "up"), (97215, "sw-spine01", 5, "up"),
                 (97216, "node0042/mlx5_0", 1, "down"), (97217, "sw-leaf01", 12, "down"),
                 (97217, "node0042/mlx5_0", 1, "down")}
    assert set(link) == expected  # no gap
    assert max(link.values()) == 1  # no duplicate, across the restart too
    assert all(key == f"{e.device}:{e.port}".encode() for key, e in ports)
    marks = [e for _k, e in ports if "UFM mark" in (e.reason or "")]
    assert marks == []  # the mark's port came with its 702 event: one down, not two
    counters = {key for topic, key, e in mine if topic == COUNTERS.name}
    assert counters == {b"sw-leaf01", b"sw-spine01", b"node0042/mlx5_0"}


async def test_ufm_once_names_what_failed_and_publishes_the_rest(kafka_bootstrap: str,
                                                                 tmp_path: Path) -> None:
    fabric = f"ufm-{uuid.uuid4().hex[:8]}"
    ufm = FakeUfmServer()
    ufm.fail["/ufmRest/app/unhealthy_ports"] = 503
    url = await ufm.start()
    start = await _ends(kafka_bootstrap, [PORT_EVENTS.name])
    try:
        proc = await asyncio.create_subprocess_exec(
            str(FABRICWATCH), "poll", "ufm", "--url", url, "--once", "--backfill", "--insecure",
            env=_env(kafka_bootstrap, tmp_path, fabric), stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 120)
    finally:
        await ufm.stop()
    assert proc.returncode == 1
    report = json.loads(out.decode().strip().splitlines()[-1])
    assert report["published"] == {"events": 7}
    assert "HTTP 503" in report["failed"]["unhealthy_ports"]
    text = err.decode()
    assert "unhealthy_ports" in text and "--insecure" in text and "not read" in text
    assert PASSWORD not in text and PASSWORD not in out.decode()
    records = [r for r in await _since(kafka_bootstrap, start)
               if loads(r.value).get("fabric") == fabric]
    assert len(records) == 7


async def _create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        await admin.close()


async def test_gnmic_topic_to_contract_topics_and_dead_letters(kafka_bootstrap: str) -> None:
    fabric = f"gn-{uuid.uuid4().hex[:8]}"
    topic = f"gnmic-it-{uuid.uuid4().hex[:8]}"
    await _create_topic(kafka_bootstrap, topic, 1)
    messages = [(GNMIC / name).read_bytes() for name in (
        "event-format-srl-interface-statistics.json", "event-format-sonic-counters-db.json",
        "json-format-openconfig-counters.json", "event-format-openconfig-oper-status.json")]
    bad = [b"\x00\x01 not json",
           orjson.dumps([{"name": "cpu", "timestamp": 1795971600000000000,
                          "tags": {"source": "leaf-su01-r3", "interface_name": "Ethernet0"},
                          "values": {"/system/cpu/utilization": 3}}])]
    start = await _ends(kafka_bootstrap, [COUNTERS.name, PORT_EVENTS.name, DLQ.name])
    async with Publisher(kafka_bootstrap) as pub:  # what gnmic's Kafka output writes
        for value in [*messages, *bad]:
            await pub.send_raw(topic, b"leaf_sub", value)

    async def consume(group: str, expect: int) -> GnmicConsumer:
        stop = asyncio.Event()
        async with Publisher(kafka_bootstrap) as pub:
            consumer = GnmicConsumer(kafka_bootstrap, topic, pub, GnmicMapper(fabric),
                                     group_id=group)
            task = asyncio.create_task(consumer.run(stop, idle_ms=200))
            await _wait_for(lambda: consumer.stats.messages >= expect and consumer.stats.polls > 2,
                            120, "the consumer")
            stop.set()
            await asyncio.wait_for(task, 60)
        return consumer

    group = f"fabricwatch-gnmic-it-{uuid.uuid4().hex[:6]}"
    consumer = await consume(group, len(messages) + len(bad))
    assert (consumer.stats.messages, consumer.stats.dead_letters) == (6, 2)

    records = await _since(kafka_bootstrap, start)
    counters = [(r.key, decode(r.value)) for r in records if r.topic == COUNTERS.name
                and loads(r.value).get("fabric") == fabric]
    assert {k for k, _ in counters} == {b"clab-traps-srl1", b"leaf-su01-r3", b"spine-02"}
    assert all(isinstance(e, Counters) and k == e.device.encode() for k, e in counters)
    sonic = next(e for k, e in counters if k == b"leaf-su01-r3")
    assert (sonic.ports[0].pfc_pause_rx, sonic.ports[0].ecn_marked) == (1510, 425)  # type: ignore[union-attr]
    ports = [(r.key, decode(r.value)) for r in records if r.topic == PORT_EVENTS.name
             and loads(r.value).get("fabric") == fabric]
    assert [(k, e.state) for k, e in ports if isinstance(e, PortEvent)] == [
        (b"spine-02:16", "down"), (b"spine-02:16", "up")]
    letters = [loads(r.value) for r in records if r.topic == DLQ.name
               and loads(r.value).get("source_topic") == topic]
    assert [(d["offset"], base64.b64decode(d["raw_b64"])) for d in letters] == [
        (4, bad[0]), (5, bad[1])]
    assert "not JSON" in letters[0]["reason"]
    assert "mapping table" in letters[1]["reason"]

    # the group's offsets were committed: a restarted consumer has nothing to redo
    again = await consume(group, 0)
    assert again.stats.messages == 0


async def test_consume_gnmic_command_maps_and_dead_letters(kafka_bootstrap: str,
                                                           tmp_path: Path) -> None:
    fabric = f"gn-{uuid.uuid4().hex[:8]}"
    topic = f"gnmic-cli-{uuid.uuid4().hex[:8]}"
    await _create_topic(kafka_bootstrap, topic, 2)
    start = await _ends(kafka_bootstrap, [COUNTERS.name, DLQ.name])
    async with Publisher(kafka_bootstrap) as pub:
        await pub.send_raw(topic, b"a", (GNMIC / "event-format-sonic-counters-db.json").read_bytes())
        await pub.send_raw(topic, b"b", b'{"sync-response": true}')
        await pub.send_raw(topic, b"c", b'[{"name": "x", "timestamp": 5, "tags": {}, "values": {}}]')
    env = {**os.environ, "FABRICWATCH_KAFKA__BOOTSTRAP": kafka_bootstrap,
           "FABRICWATCH_STATE_DIR": str(tmp_path), "FABRICWATCH_FABRIC": fabric}
    proc = await asyncio.create_subprocess_exec(
        str(FABRICWATCH), "consume", "gnmic", "--topic", topic, "--bootstrap", kafka_bootstrap,
        env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    got: list[Any] = []

    async def poll() -> bool:
        got[:] = await _since(kafka_bootstrap, start)
        mine = [r for r in got if (r.topic == DLQ.name and loads(r.value).get("source_topic") == topic)
                or (r.topic == COUNTERS.name and loads(r.value).get("fabric") == fabric)]
        return len(mine) >= 2

    deadline = asyncio.get_running_loop().time() + 120
    while not await poll():
        assert asyncio.get_running_loop().time() < deadline, "nothing from the command"
        await asyncio.sleep(0.5)
    rc, err = await _stop(proc)
    assert rc == 0, err
    letters = [loads(r.value) for r in got if r.topic == DLQ.name
               and loads(r.value).get("source_topic") == topic]
    assert len(letters) == 1 and "no device" in letters[0]["reason"]  # the sync-response is no error
    assert "dead letter" in err
    counters = [r for r in got if r.topic == COUNTERS.name and loads(r.value).get("fabric") == fabric]
    assert [r.key for r in counters] == [b"leaf-su01-r3"]
