"""The lab's commands as an operator runs them, each a process of its own:
``fabricwatch lab up`` / ``inject`` / ``run`` / ``down``, ``poll ibdiags --lab --once`` and
``tail opensm PATH --lab``, with the real broker."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer  # type: ignore[import-untyped]

from fabricwatch.lab import LabStack
from schemas import PortEvent, Topology, decode
from schemas.topics import PORT_EVENTS, TOPOLOGY
from sim.topology import generate

pytestmark = [pytest.mark.lab, pytest.mark.integration]
FABRICWATCH = str(Path(sys.executable).parent / "fabricwatch")


def fw(env: dict[str, str], *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([FABRICWATCH, *args], env=env, capture_output=True, text=True,  # noqa: S603
                          timeout=timeout, check=False)


def start(env: dict[str, str], log: Path, *args: str) -> subprocess.Popen[bytes]:
    """A long-running command in a session of its own (stopped with its process group)."""
    with log.open("wb") as out:
        return subprocess.Popen([FABRICWATCH, *args], env=env, stdout=out,  # noqa: S603
                                stderr=subprocess.STDOUT, start_new_session=True)


async def collect(bootstrap: str, topic: str, fabric: str, want: int, within: float) -> list:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=None,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    got: list = []
    deadline = time.monotonic() + within
    try:
        while len(got) < want and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                got += [e for e in (decode(r.value) for r in records) if e.fabric == fabric]
    finally:
        await consumer.stop()
    return got


async def test_lab_commands_poll_and_tail(tmp_path: Path, kafka_bootstrap: str) -> None:
    if shutil.which("ibsim") is None:
        pytest.skip("the ibsim binary is absent (make lab-deps)")
    fabric = f"cli{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "FABRICWATCH_STATE_DIR": str(tmp_path / "state"),
           "FABRICWATCH_KAFKA__BOOTSTRAP": kafka_bootstrap, "FABRICWATCH_FABRIC": fabric}
    net = tmp_path / "lab.net"
    net.write_text(generate("lab").to_ibnetdiscover(), encoding="utf-8")
    up = fw(env, "lab", "up", "--topology", str(net))
    assert up.returncode == 0, up.stderr
    tail: subprocess.Popen[bytes] | None = None
    try:
        assert fw(env, "lab", "status").returncode == 0
        pq = fw(env, "lab", "run", "perfquery", "1", "1")
        assert pq.returncode == 0 and "# Port counters: Lid 1 port 1" in pq.stdout
        poll = fw(env, "poll", "ibdiags", "--lab", "--once")
        assert poll.returncode == 0, poll.stderr
        assert '"failed": {}' in poll.stdout
        topo = await collect(kafka_bootstrap, TOPOLOGY.name, fabric, 1, 30)
        assert isinstance(topo[0], Topology) and len(topo[0].links) == 32
        log = LabStack(tmp_path / "state").opensm_log
        tail = start(env, tmp_path / "tail.log", "tail", "opensm", str(log), "--lab")
        await asyncio.sleep(4)  # the follower reads the topology topic, then the log
        flap = fw(env, "lab", "inject", "flap", "leaf-su01-r1:5", "--count", "2", "--every", "2")
        assert flap.returncode == 0, flap.stderr
        events = await collect(kafka_bootstrap, PORT_EVENTS.name, fabric, 6, 30)
        mine = {(e.device, e.port, e.state) for e in events if isinstance(e, PortEvent)}
        # a leaf-spine cable: both switch ends are found by the trap scan
        assert {("leaf-su01-r1", 5, "down"), ("leaf-su01-r1", 5, "up"),
                ("spine-su01-s1", 3, "down"), ("spine-su01-s1", 3, "up")} <= mine, (
            mine, (tmp_path / "tail.log").read_text())
    finally:
        if tail is not None:
            os.killpg(tail.pid, signal.SIGTERM)
            tail.wait(20)
        down = fw(env, "lab", "down")
    assert down.returncode == 0 and "opensm, ibsim" in down.stdout
    assert fw(env, "lab", "status").returncode == 3
