"""A switch reboot through the real broker and stream worker: one incident on
``fabric.incidents``, its members' detections carry it, and the dispatcher (on the real
Temporal server) starts no runbook for them while a real flap beside it still gets one."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from schemas import (
    Counters,
    Detection,
    Event,
    Incident,
    Maintenance,
    PortEvent,
    PortSample,
    Topology,
    TopologyLink,
    decode,
    encode,
)
from schemas.policy import Policy
from schemas.topics import DETECTIONS
from streams.replay import replay_all
from workflows.dispatch import Dispatcher
from workflows.inventory import Inventory

pytestmark = pytest.mark.integration

sys.path.insert(0, str(Path(__file__).parent))  # stream_helpers, shared with other tests

from stream_helpers import FABRICWATCH, Worker, collect, publish  # noqa: E402

S = 1000
POLICY = "fabricHealth: {incidents: {settle: 3s}}\n"


@pytest.fixture
def worker(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Worker]:
    w = Worker(kafka_bootstrap, tmp_path, f"fw-inc-{uuid.uuid4().hex[:8]}")
    yield w
    w.stop()


async def record_times(bootstrap: str, topic: str, prefix: bytes) -> list[tuple[int, int]]:
    """(timestamp type, timestamp) of the topic's records that contain ``prefix``."""
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=None,
                                auto_offset_reset="earliest")
    await consumer.start()
    try:
        batch = await consumer.getmany(timeout_ms=5000)
        return [(r.timestamp_type, r.timestamp) for records in batch.values()
                for r in records if r.value and prefix in r.value]
    finally:
        await consumer.stop()


def history(fabric: str, base: int) -> list[Event]:
    links = [TopologyLink(a_device=f"leaf-su01-r{i}", a_port=33, b_device="spine-1",
                          b_port=i, width="4X", speed="NDR") for i in range(1, 9)]
    links += [TopologyLink(a_device="leaf-su01-r2", a_port=3, b_device="node03/mlx5_1",
                           b_port=1, width="4X", speed="NDR")]
    events: list[Event] = [
        Topology(id=f"{fabric}-topo", ts=base, fabric=fabric, source="ibnetdiscover",
                 links=links),
        Maintenance(id=f"{fabric}-mw", ts=base, fabric=fabric, source="fabricwatch",
                    window=f"mw-{fabric}", scope="device", target="leaf-su01-r7", start=base,
                    end=base + 3600 * S, reason="optics swap", actor="test")]

    def pe(device: str, port: int, t: int, state: str = "down") -> PortEvent:
        return PortEvent(id=f"{fabric}/{device}:{port}/{t}/{state}", ts=base + t,
                         fabric=fabric, source="opensm", device=device, port=port,
                         state=state)

    # spine-1 reboots: every link down within 2 s, back after 100 s, three bounce twice
    # while it settles (within the policy's 3 s of the last change: a bounce later than that
    # is after the incident, however soon the clock gets there)
    events += [pe(f"leaf-su01-r{i}", 33, 10 * S + i * 200) for i in range(1, 9)]
    events += [pe(f"leaf-su01-r{i}", 33, 110 * S + i * 100, "up") for i in range(1, 9)]
    for k in (1, 2):
        for i in (2, 5, 7):
            events += [pe(f"leaf-su01-r{i}", 33, (110 + 2 * k) * S),
                       pe(f"leaf-su01-r{i}", 33, (111 + 2 * k) * S, "up")]
    # a member that came back at 2X: an isolating detection, but of the incident
    events.append(Counters(id=f"{fabric}-c2x", ts=base + 111 * S, fabric=fabric,
                           source="perfquery", device="leaf-su01-r3",
                           ports=[PortSample(port=33, width="2X", speed="NDR")]))
    # a real flap on another port of another cable in the same minutes
    for k in range(3):
        events += [pe("leaf-su01-r2", 3, (40 + 20 * k) * S),
                   pe("leaf-su01-r2", 3, (42 + 20 * k) * S, "up")]
    # and one inside the maintenance window of leaf-su01-r7: recorded, starts nothing
    for k in range(3):
        events += [pe("leaf-su01-r7", 9, (40 + 20 * k) * S),
                   pe("leaf-su01-r7", 9, (42 + 20 * k) * S, "up")]
    return events


async def test_switch_reboot_is_one_incident_and_starts_no_runbook(
        worker: Worker, temporal_target: str, tmp_path: Path) -> None:
    fabric = f"inc-{worker.app_id}"
    base = int(time.time() * 1000) - 10 * 60 * S
    events = history(fabric, base)
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(POLICY)
    want = list(replay_all([encode(e) for e in events], Policy.from_yaml(POLICY),
                           on_error=None))
    want_dets = {d.id: d for d in want if isinstance(d, Detection)}
    assert {(d.detection.value, d.key, d.incident is not None, d.maintenance)
            for d in want_dets.values()} == {
        ("degraded_link", "leaf-su01-r3:33", True, None),
        ("flap", "leaf-su01-r2:3", False, None),
        ("flap", "leaf-su01-r7:9", False, f"mw-{fabric}")}

    await asyncio.to_thread(worker.start, False, policy_file)
    await publish(worker.bootstrap, events[:2])
    # the correlator knows the cabling and the window before the reboot (topics of their
    # own, read apart from the port events)
    deadline = time.monotonic() + 90
    while not all(line in worker.log.read_bytes() for line in (
            f"cabling of {fabric}:".encode(), f"maintenance window mw-{fabric} ".encode())):
        assert time.monotonic() < deadline, worker.tail()
        await asyncio.sleep(0.5)
    prefix = f'"fabric":"{fabric}"'.encode()
    # the reboot's downs, then (as on a live fabric, where the links come back minutes
    # later) the rest once the incident is open: an excuse reaches the flap detector after
    # the correlator's decision, so downs judged before it (a backlog read in one burst)
    # may still fire, and such a detection would carry the incident and start nothing
    await publish(worker.bootstrap, events[2:10])
    assert await collect(worker.bootstrap, "fabric.incidents", 1, prefix, settle=0), \
        worker.tail()
    await publish(worker.bootstrap, events[10:])
    # open, four members' updates and the close; one more update when a down read after
    # the open moves its start back (the worker reads the leaves' partitions in any order)
    deadline = time.monotonic() + 120
    while True:
        raw_incs = await collect(worker.bootstrap, "fabric.incidents", 6, prefix, wait_s=120)
        incs = [decode(v) for v in raw_incs]
        if incs[-1].state == "closed" or time.monotonic() > deadline:  # type: ignore[union-attr]
            break
        await asyncio.sleep(1)
    assert all(isinstance(i, Incident) for i in incs)
    assert len({i.incident for i in incs}) == 1, worker.tail()  # type: ignore[union-attr]
    states = [i.state for i in incs]  # type: ignore[union-attr]
    assert states[0] == "open" and states[-1] == "closed", (states, worker.tail())
    last = incs[-1]
    assert isinstance(last, Incident)
    assert (last.cause.value, last.root) == ("switch_reboot", "spine-1")
    assert len(last.members) == 16 and last.ended == base + 115 * S

    # the topic stamps records with the broker's receive time, as every contract topic
    stamps = await record_times(worker.bootstrap, "fabric.incidents", prefix)
    assert stamps and all(kind == 1 and abs(t - time.time() * 1000) < 300_000
                          for kind, t in stamps), stamps  # 1: LogAppendTime

    raw_dets = await collect(worker.bootstrap, "fabric.detections", 3, prefix)
    got = {d.id: d for d in map(decode, raw_dets) if isinstance(d, Detection)}
    assert set(got) == set(want_dets), (sorted(got), sorted(want_dets), worker.tail()[-1500:])
    for det_id, det in got.items():
        assert (det.incident is None) == (want_dets[det_id].incident is None)
        assert det.maintenance == want_dets[det_id].maintenance
    assert {d.incident for d in got.values() if d.incident} == {last.incident}

    # the dispatcher on the real Temporal server: nothing for the member, a runbook for the
    # real flap (this test's fabric only: the session broker holds other tests' detections)
    client = await Client.connect(temporal_target, data_converter=pydantic_data_converter)
    inventory = Inventory()
    inventory.load(events[0])  # type: ignore[arg-type]
    disp = Dispatcher(client, Policy(), inventory, task_queue=f"tq-{uuid.uuid4().hex[:8]}",
                      fabric=fabric)
    for raw in raw_dets:
        await disp.handle_raw(raw, DETECTIONS, None)
    assert (disp.stats.held, disp.stats.dispatched) == (2, 1)
    ids: list[str] = []
    deadline = time.monotonic() + 30
    while not ids and time.monotonic() < deadline:  # visibility is eventually consistent
        ids = [wf.id async for wf in client.list_workflows(
            "WorkflowType = 'PortRemediation'") if wf.id.startswith(f"remediate/{fabric}/")]
        await asyncio.sleep(0.5)
    assert ids == [f"remediate/{fabric}/leaf-su01-r2:3~node03/mlx5_1:1"]
    for wf_id in ids:  # no worker serves this queue: leave nothing running
        await client.get_workflow_handle(wf_id).terminate("test over")
    assert orjson.loads(raw_incs[0])["kind"] == "incident"


def cli(bootstrap: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "FABRICWATCH_KAFKA__BOOTSTRAP": bootstrap}
    return subprocess.run([FABRICWATCH, "maintenance", *args], capture_output=True, env=env,
                          check=False, timeout=120)


def test_maintenance_cli_add_list_end(kafka_bootstrap: str) -> None:
    fabric = f"mw-{uuid.uuid4().hex[:8]}"
    add = cli(kafka_bootstrap, "add", "--device", "spine-7", "--fabric", fabric, "--for", "2h",
              "--reason", "firmware upgrade", "--exclusion")
    assert add.returncode == 0, add.stderr
    window = add.stdout.decode().strip()
    listed = cli(kafka_bootstrap, "list", "--format", "json")
    assert listed.returncode == 0, listed.stderr
    (row,) = [r for r in orjson.loads(listed.stdout) if r["window"] == window]
    assert (row["scope"], row["target"], row["fabric"], row["exclusion"], row["in_force"]) == (
        "device", "spine-7", fabric, True, True)
    assert 7190_000 <= row["end"] - row["start"] <= 7200_000
    table = cli(kafka_bootstrap, "list")
    assert window.encode() in table.stdout and b"firmware upgrade" in table.stdout
    ended = cli(kafka_bootstrap, "end", window)
    assert ended.returncode == 0, ended.stderr
    after = orjson.loads(cli(kafka_bootstrap, "list", "--format", "json").stdout)
    assert window not in {r["window"] for r in after}
    every = orjson.loads(cli(kafka_bootstrap, "list", "--all", "--format", "json").stdout)
    (row,) = [r for r in every if r["window"] == window]
    assert row["state"] == "ended" and not row["in_force"]
    assert cli(kafka_bootstrap, "end", "mw-nosuchwindow").returncode == 2
