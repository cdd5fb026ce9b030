"""Through the real broker: the host agent on a changing fake sysfs tree, and a silent host
becoming `stale` in the real stream worker exactly as replay says.

The sysfs tree is built from the real sysfs fixture (no HCA here); everything else is real:
``fabricwatch agent`` and ``fabricwatch worker`` as processes, Kafka from the session.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from schemas import Counters, PortEvent, PortSample, decode, encode, message_key
from schemas.policy import Policy
from schemas.topics import topic_for_kind
from streams.replay import replay
from streams.stale.logic import IDLE_WALL_MS

pytestmark = pytest.mark.integration

FABRICWATCH = str(Path(sys.executable).parent / "fabricwatch")
_spec = importlib.util.spec_from_file_location(
    "sysfs_tree", Path(__file__).resolve().parents[1] / "sysfs_tree.py")
assert _spec is not None and _spec.loader is not None
tree = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tree)


async def consume(bootstrap: str, topics: list[str], fabric: str, until: object,
                  wait_s: float = 90.0) -> list[object]:
    """Events of ``fabric`` on ``topics`` until ``until(events)`` is true (or the wait ends)."""
    consumer = AIOKafkaConsumer(*topics, bootstrap_servers=bootstrap,
                                auto_offset_reset="earliest", group_id=None)
    await consumer.start()
    got: list[object] = []
    try:
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=300)
            for records in batch.values():
                for rec in records:
                    if rec.value and f'"fabric":"{fabric}"'.encode() in rec.value:
                        got.append(decode(rec.value))
            if until(got):  # type: ignore[operator]
                break
    finally:
        await consumer.stop()
    return got


@pytest.fixture
def agent_proc(tmp_path: Path, kafka_bootstrap: str) -> Iterator[tuple[Path, str]]:
    ib = tree.build(tmp_path / "sys", hcas=8)
    fabric = f"agent-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "FABRICWATCH_KAFKA__BOOTSTRAP": kafka_bootstrap,
           "FABRICWATCH_FABRIC": fabric, "FABRICWATCH_STATE_DIR": str(tmp_path / "state")}
    log = (tmp_path / "agent.log").open("wb")
    proc = subprocess.Popen([FABRICWATCH, "agent", "--sysfs-root", str(tmp_path / "sys"),
                             "--host", "node0042", "--interval", "0.5"],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        yield ib, fabric
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()


async def test_agent_publishes_one_message_per_round_and_the_changes(
        agent_proc: tuple[Path, str], kafka_bootstrap: str) -> None:
    ib, fabric = agent_proc

    def first(events: list[object]) -> bool:
        return any(isinstance(e, Counters) for e in events)

    got = await consume(kafka_bootstrap, ["fabric.counters"], fabric, first)
    assert got, "no counters message from the agent"
    (ib / "mlx5_3/ports/1/counters/symbol_error").write_text("41\n")
    (ib / "mlx5_5/ports/1/state").write_text("1: DOWN\n")

    def changed(events: list[object]) -> bool:
        return (any(isinstance(e, PortEvent) for e in events)
                and any(isinstance(e, Counters) and e.ports[3].symbol_errors == 41
                        for e in events))

    got = await consume(kafka_bootstrap, ["fabric.counters", "fabric.port-events"], fabric,
                        changed)
    counters = [e for e in got if isinstance(e, Counters)]
    downs = [e for e in got if isinstance(e, PortEvent)]
    assert all(c.device == "node0042" and len(c.ports) == 8 for c in counters)
    assert [c.ports[3].symbol_errors for c in counters][:1] == [0]
    assert counters[-1].ports[3].symbol_errors == 41
    assert [(e.device, e.port, e.state) for e in downs] == [("node0042/mlx5_5", 1, "down")]
    # the port event came with the round that first read the new state
    first_down = next(c for c in counters
                      if (c.ports[5].model_extra or {}).get("state") == "DOWN")
    assert downs[0].ts == first_down.ts
    ts = [c.ts for c in counters]
    assert ts == sorted(ts) and all(300 <= b - a <= 2000 for a, b in zip(ts, ts[1:], strict=False))


def host_history(fabric: str, start: int) -> list[Counters]:
    """Six hosts of two HCAs at 1 s for 40 s; host h3 silent from 10 s to 25 s."""
    out = []
    for t in range(40):
        for h in range(6):
            if h == 3 and 10 <= t < 25:
                continue
            out.append(Counters(
                id=f"{fabric}-h{h}-{t}", ts=start + t * 1000 + h * 11, fabric=fabric,
                source="host_agent", device=f"h{h}",
                ports=[PortSample(port=1, device=f"h{h}/mlx5_{k}", symbol_errors=0,
                                  xmit_wait=t) for k in range(2)]))
    return out


@pytest.mark.parametrize("batched", [False, True], ids=["faust_counters", "batched_counters"])
async def test_worker_fires_stale_once_and_ends_it_like_replay(tmp_path: Path,
                                                               kafka_bootstrap: str,
                                                               batched: bool) -> None:
    """Live, as in production: the worker runs while the hosts' rounds arrive (paced at
    50 ms a round, so the partitions interleave as they do live, and in real time, 1 s a
    round, while h3 is silent: a silence must last in wall time too, or it is a burst of
    the others'). Same detection ids, kinds, ports and episodes as replay; the opening's
    ``ts`` (when the silence was seen) may differ by the check's place in the others'
    rounds (the worker's clock is the slowest delivering partition, replay's the file)
    and by the wall time a quiet partition holds the clock (``IDLE_WALL_MS``)."""
    fabric = f"stale-{uuid.uuid4().hex[:8]}"
    events = host_history(fabric, int(time.time() * 1000) - 600_000)
    want = {d.id: d for d in replay([encode(e) for e in events], Policy(), on_error=None)}
    assert sorted((d.detection.value, d.device) for d in want.values()) == [
        ("stale", "h3/mlx5_0"), ("stale", "h3/mlx5_1"),
        ("stale_end", "h3/mlx5_0"), ("stale_end", "h3/mlx5_1")]
    app_id = f"fw-stale-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "FABRICWATCH_STATE_DIR": str(tmp_path),
           "FABRICWATCH_KAFKA__BOOTSTRAP": kafka_bootstrap,
           # the counters off Faust's stream, in batches (streams/counters/batched.py)
           "FABRICWATCH_STREAMS__COUNTERS_BATCHED": "true" if batched else "false"}
    log_path = tmp_path / "worker.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(  # noqa: ASYNC220 - starting it is quick; it runs apart
            [FABRICWATCH, "worker", "--no-ledger", "--app-id", app_id],
            stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 150
        while b"Worker ready" not in log_path.read_bytes():
            assert proc.poll() is None and time.monotonic() < deadline, \
                log_path.read_bytes()[-3000:].decode(errors="replace")
            await asyncio.sleep(0.2)
        await asyncio.sleep(3)  # partitions assigned
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all",
                                    enable_idempotence=True, linger_ms=0)
        await producer.start()
        try:
            for t in range(40):
                for e in events:
                    if (e.ts - events[0].ts) // 1000 == t:
                        await producer.send(topic_for_kind(e.kind).name, encode(e),
                                            key=message_key(e).encode())
                await producer.flush()
                await asyncio.sleep(1.0 if 10 <= t < 25 else 0.05)
        finally:
            await producer.stop()

        def done(got: list[object]) -> bool:
            return len({getattr(d, "id", None) for d in got}) >= len(want)

        got = await consume(kafka_bootstrap, ["fabric.detections"], fabric, done, wait_s=120)
        await asyncio.sleep(3)  # nothing more may come
        got = await consume(kafka_bootstrap, ["fabric.detections"], fabric,
                            lambda _: False, wait_s=3)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    tail = log_path.read_bytes()[-3000:].decode(errors="replace")
    by_id = {d.id: d for d in got}  # type: ignore[attr-defined]
    assert set(by_id) == set(want), tail
    # at least once: a redelivered output is only ever an identical copy of the first
    assert all(d == by_id[d.id] for d in got), tail  # type: ignore[attr-defined]
    for i, d in want.items():
        w = by_id[i]
        assert (w.detection, w.device, w.port, w.episode, w.action) == (  # type: ignore[attr-defined]
            d.detection, d.device, d.port, d.episode, d.action)
        if d.detection.value == "stale_end":
            assert w.ts == d.ts  # type: ignore[attr-defined]
        else:  # seen after more than three of its intervals, within a few more and the
            # wall time its quiet partition held the clock
            silent = w.ts - w.evidence["last_report_ts"]  # type: ignore[attr-defined]
            assert 3000 < silent <= 8000 + IDLE_WALL_MS, silent
