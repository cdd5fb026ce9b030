"""`sim run` publishing into the real broker: every message lands on its contract topic, keyed
as the contract says, and decodes; the CLI does the same in a process of its own."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer  # type: ignore[import-untyped]

from schemas import Counters, PortEvent, Probe, Topology, decode, message_key
from sim.controller import SimController
from sim.faults import parse_spec
from sim.run import run_to_kafka
from sim.telemetry import Simulator
from sim.topology import Params, generate

pytestmark = pytest.mark.integration

FABRICWATCH = Path(sys.executable).parent / "fabricwatch"
TOPICS = ["fabric.counters", "fabric.port-events", "fabric.probes", "fabric.topology",
          "fabric.sm"]


async def _ends(bootstrap: str) -> dict[Any, int]:
    """The end offset of every partition of the sim's topics, before a test publishes."""
    from aiokafka import TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        await consumer._client.force_metadata_update()  # noqa: SLF001 - no public refresh
        tps = [TopicPartition(t, p) for t in TOPICS
               for p in sorted(consumer.partitions_for_topic(t) or ())]
        assert tps, "the sim's topics have no partitions in the metadata"
        return dict(await consumer.end_offsets(tps))
    finally:
        await consumer.stop()


async def _consume(bootstrap: str, fabric: str, expect: int, start: dict[Any, int],
                   timeout_s: float = 60.0) -> list[tuple[str, bytes, bytes]]:
    """This fabric's messages after ``start`` (from ``_ends``): the session broker holds
    every other test's traffic too, and reading it all from the beginning is slow."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                group_id=None)
    await consumer.start()
    found: list[tuple[str, bytes, bytes]] = []
    marker = f'"fabric":"{fabric}"'.encode()
    try:
        consumer.assign(list(start))
        for tp, offset in start.items():
            consumer.seek(tp, offset)
        deadline = time.monotonic() + timeout_s
        while len(found) < expect and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500, max_records=5000)
            for records in batch.values():
                found += [(r.topic, r.key, r.value) for r in records if marker in r.value]
    finally:
        await consumer.stop()
    return found


async def test_sim_run_publishes_to_the_broker(kafka_bootstrap: str, tmp_path: Path) -> None:
    fabric = f"simit-{uuid.uuid4().hex[:8]}"
    fab = generate(Params(sus=1, nodes_per_su=4, rails=4, spines_per_su=2, fabric=fabric))
    controller = SimController(tmp_path)
    simulator = Simulator(fab, faults=[parse_spec("flap:leaf-su01-r3:2,count=2,every=10s,at=5s")],
                          controller=controller, start_ms=int(time.time() * 1000) - 60_000,
                          interval_s=10, probe_every=1, topology_every=3)
    start = await _ends(kafka_bootstrap)
    stats = await run_to_kafka(simulator, kafka_bootstrap, steps=3, speedup=0)
    assert stats.steps == 3
    assert stats.port_samples == 3 * fab.port_count()
    found = await _consume(kafka_bootstrap, fabric, stats.messages, start)
    assert len(found) == stats.messages
    events = [(topic, key, decode(value)) for topic, key, value in found]
    for topic, key, event in events:
        assert key == message_key(event).encode()
        assert topic == {"counters": "fabric.counters", "port_event": "fabric.port-events",
                         "probe": "fabric.probes", "topology": "fabric.topology",
                         "sm_event": "fabric.sm"}[event.kind]
    counters = [e for _, _, e in events if isinstance(e, Counters)]
    assert len(counters) == 3 * len(fab.devices())
    downs = [e for _, _, e in events if isinstance(e, PortEvent) and e.state == "down"]
    assert [(e.device, e.port) for e in downs] == [("leaf-su01-r3", 2)] * 2
    assert any(isinstance(e, Probe) for _, _, e in events)
    assert sum(isinstance(e, Topology) for _, _, e in events) == 1


def test_sim_run_cli(kafka_bootstrap: str, tmp_path: Path) -> None:
    import asyncio

    fabric = f"simcli-{uuid.uuid4().hex[:8]}"
    faults = tmp_path / "faults.yaml"
    faults.write_text("- link_down:leaf-su01-r0:1,at=15s\n")
    start = asyncio.run(_ends(kafka_bootstrap))
    result = subprocess.run(
        [str(FABRICWATCH), "sim", "run", "--preset", "lab", "--fabric", fabric,
         "--interval", "10s", "--duration", "40s", "--speedup", "0", "--faults", str(faults),
         "--fault", "degraded_speed:node0002/mlx5_1:1", "--bootstrap", kafka_bootstrap,
         "--state-dir", str(tmp_path / "state")],
        capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    found = asyncio.run(_consume(kafka_bootstrap, fabric, 4 * 22 + 1, start))
    events = [decode(v) for _, _, v in found]
    assert sum(isinstance(e, Counters) for e in events) == 4 * 22  # 22 devices in lab
    downs = [e for e in events if isinstance(e, PortEvent)]
    assert [(e.device, e.port, e.state) for e in downs] == [("leaf-su01-r0", 1, "down")]
    hca = [s for e in events if isinstance(e, Counters) and e.device == "node0002/mlx5_1"
           for s in e.ports]
    assert hca and all(s.speed == "HDR" for s in hca)


def test_sim_cli_bad_input_exits_2(tmp_path: Path) -> None:
    for args in (["--fault", "flap:no-such-switch:1"], ["--preset", "huge"],
                 ["--interval", "soon"], ["--faults", str(tmp_path / "missing.yaml")]):
        result = subprocess.run([str(FABRICWATCH), "sim", "run", "--print", "--duration", "10s",
                                 "--state-dir", str(tmp_path), *args],
                                capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 2, (args, result.stderr)
        assert "Error" in result.stderr


def test_sim_run_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    import json
    import signal

    out_path = tmp_path / "out.jsonl"
    with open(out_path, "wb") as out:  # a file, not a pipe nobody reads until the end
        proc = subprocess.Popen([str(FABRICWATCH), "sim", "run", "--preset", "lab", "--print",
                                 "--interval", "1s", "--state-dir", str(tmp_path)],
                                stdout=out, stderr=subprocess.PIPE)
        time.sleep(4)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    stats = json.loads(err.decode().strip().splitlines()[-1])
    assert stats["steps"] >= 2 and stats["behind_steps"] == 0
    lines = out_path.read_bytes().decode().splitlines()
    assert len(lines) == stats["messages"]
    assert all(decode(line.encode()).fabric == "lab" for line in lines)
