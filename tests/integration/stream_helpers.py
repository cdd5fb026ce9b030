"""The stream worker as a real process, and the broker round trips its tests share.

``Worker`` runs ``fabricwatch worker`` with its own app id (so its own consumer group,
internal topics and state) against the session's broker; ``publish`` sends contract events
(or raw ``(topic, bytes)`` pairs) and ``collect`` reads a topic back.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from schemas import Event, PortEvent, encode, message_key
from schemas.policy import Policy
from schemas.topics import topic_for_kind
from streams.replay import replay

M = 60_000
FABRICWATCH = str(Path(sys.executable).parent / "fabricwatch")


class Worker:
    """One ``fabricwatch worker`` process and its log."""

    def __init__(self, bootstrap: str, state_dir: Path, app_id: str,
                 agents: str = "all", env: dict[str, str] | None = None,
                 index: int = 0) -> None:
        self.env = env or {}  # more of the worker's settings
        self.index = index  # one of several processes of the app (--index)
        self.bootstrap = bootstrap
        self.state_dir = state_dir
        self.app_id = app_id
        self.agents = agents  # fabricwatch worker --agents
        self.log = state_dir / ((f"worker-{app_id}.log" if agents == "all"
                                 else f"worker-{app_id}-{agents}.log") if index == 0
                                else f"worker-{app_id}-{agents}-{index}.log")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, ledger: bool = False, policy: Path | None = None,
              plan: Path | None = None) -> None:
        env = {**os.environ, "FABRICWATCH_STATE_DIR": str(self.state_dir),
               "FABRICWATCH_KAFKA__BOOTSTRAP": self.bootstrap, **self.env}
        if policy is not None:
            env["FABRICWATCH_POLICY_PATH"] = str(policy)
        if plan is not None:  # the cable plan: degraded-link expectations, ECMP uplinks
            env["FABRICWATCH_PLAN_PATH"] = str(plan)
        start_at = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [FABRICWATCH, "worker", "--ledger" if ledger else "--no-ledger",
                 "--app-id", self.app_id, "--agents", self.agents,
                 "--index", str(self.index)],
                stdout=out, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            text = self.log.read_bytes()[start_at:]
            if b"Worker ready" in text:
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited: {text[-3000:].decode(errors='replace')}")
            time.sleep(0.2)
        raise AssertionError("worker not ready in 120 s")

    def tail(self) -> str:
        return self.log.read_bytes()[-4000:].decode(errors="replace")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self, wait_s: float = 30.0) -> bool:
        """Ask the worker to stop (SIGTERM), and kill it after ``wait_s``; False when it had
        to be killed (its shutdown, the ledger sink's last flush among it, did not run)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(wait_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                return False
        return True


async def _partitions(consumer: AIOKafkaConsumer, topic: str) -> list[TopicPartition]:
    parts = consumer.partitions_for_topic(topic) or set()
    if not parts:
        await consumer._client.force_metadata_update()  # noqa: SLF001 - first lookup
        parts = consumer.partitions_for_topic(topic) or set()
    assert parts, topic
    return [TopicPartition(topic, p) for p in sorted(parts)]


async def committed(bootstrap: str, group: str, topic: str) -> int:
    """The offsets ``group`` has committed on ``topic``, summed over its partitions."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        return sum([await consumer.committed(tp) or 0
                    for tp in await _partitions(consumer, topic)])
    finally:
        await consumer.stop()


async def offsets(bootstrap: str, topic: str) -> tuple[int, int]:
    """``topic``'s beginning and end offsets, each summed over its partitions."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = await _partitions(consumer, topic)
        starts, ends = await consumer.beginning_offsets(tps), await consumer.end_offsets(tps)
        return sum(starts.values()), sum(ends.values())
    finally:
        await consumer.stop()


async def publish(bootstrap: str, events: list[Event | tuple[str, bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                enable_idempotence=True, linger_ms=5)
    await producer.start()
    try:
        for ev in events:
            if isinstance(ev, tuple):
                await producer.send(ev[0], ev[1], key=b"bad")
            else:
                await producer.send(topic_for_kind(ev.kind).name, encode(ev),
                                    key=message_key(ev).encode())
        await producer.flush()
    finally:
        await producer.stop()


async def collect(bootstrap: str, topic: str, want: int, prefix: bytes,
                  wait_s: float = 90.0, settle: float = 3.0, by_id: bool = False
                  ) -> list[bytes]:
    """Values on ``topic`` containing ``prefix``: wait for ``want`` (``by_id``: ``want``
    distinct ids, a copy redelivered after a restart being no more), then ``settle`` more."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap,
                                auto_offset_reset="earliest", group_id=None)
    await consumer.start()
    got: list[bytes] = []
    distinct: set[object] = set()
    try:
        deadline = time.monotonic() + wait_s
        settled_at: float | None = None
        while time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=300)
            for records in batch.values():
                for r in records:
                    if r.value and prefix in r.value:
                        got.append(r.value)
                        distinct.add(_identity(r.value) if by_id else len(got))
            if len(distinct) >= want and settled_at is None:
                settled_at = time.monotonic() + settle
            if settled_at is not None and time.monotonic() >= settled_at:
                break
    finally:
        await consumer.stop()
    return got


def _identity(value: bytes) -> object:
    try:
        obj = orjson.loads(value)
    except orjson.JSONDecodeError:
        return value
    return obj.get("id", value) if isinstance(obj, dict) else value


def downs(device: str, port: int, times: list[int], base: int, tag: str = "t",
          fabric: str = "lab") -> list[Event]:
    return [PortEvent(id=f"{device}:{port}/{tag}{i}", ts=base + t, fabric=fabric,
                      source="opensm", device=device, port=port, state="down")
            for i, t in enumerate(times)]


def expected(events: list[Event | tuple[str, bytes]]) -> set[str]:
    lines = [encode(e) for e in events if not isinstance(e, tuple)]
    return {d.id for d in replay(lines, Policy(), on_error=None)}


def assert_copies_identical(values: list[bytes]) -> None:
    """Every output published more than once is the same bytes each time.

    The worker is at least once: a message redelivered after a rebalance (or a produce
    retried after a leader change) repeats its outputs, and the ids are deterministic, so
    the ledger and the dispatcher keep the first of each. A copy that differs would be two
    different outputs under one id, which is what must never happen.
    """
    first: dict[str, bytes] = {}
    for value in values:
        ident = orjson.loads(value)["id"]
        seen = first.setdefault(ident, value)
        assert seen == value, (ident, seen, value)
