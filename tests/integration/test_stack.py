"""The local stack for real: Kafka round trips, a Temporal workflow, chdb MergeTree, the CLI.

Uses the session fixtures of tests/conftest.py; the CLI tests start stacks of their own on
other free ports to check cross-process status/down and that nothing outlives its owner.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer  # type: ignore[import-untyped]
from aiokafka.admin import AIOKafkaAdminClient  # type: ignore[import-untyped]
from aiokafka.structs import TopicPartition  # type: ignore[import-untyped]
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

from fabricwatch.stack import LocalStack, StackError
from fabricwatch.stack_config import free_ports
from runtime.settings import KafkaSettings, Settings, TemporalSettings
from schemas.topics import ALL_TOPICS
from tests.session_services import SessionService

pytestmark = pytest.mark.integration

FABRICWATCH = Path(sys.executable).parent / "fabricwatch"


# --------------------------------------------------------------------------- Kafka


async def test_contract_topics_exist_with_registry_partitions(kafka_bootstrap: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics([t.name for t in ALL_TOPICS])
    finally:
        await admin.close()
    counts = {d["topic"]: len(d["partitions"]) for d in described}
    assert counts == {t.name: t.partitions for t in ALL_TOPICS}


async def test_produce_and_consume_through_the_broker(kafka_bootstrap: str) -> None:
    topic = "fabric.port-events"
    run = uuid.uuid4().hex
    sent = {f"leaf-{i}:{i % 4 + 1}".encode(): f'{{"run":"{run}","n":{i}}}'.encode() for i in range(50)}
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        metas = [await fut for fut in [await producer.send(topic, v, key=k) for k, v in sent.items()]]
    finally:
        await producer.stop()
    # Same key, same partition: the contract's per-port ordering rests on it.
    by_key = {k: m.partition for k, m in zip(sent, metas, strict=True)}
    assert len({m.partition for m in metas}) > 1

    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        parts = [TopicPartition(topic, p) for p in sorted({m.partition for m in metas})]
        consumer.assign(parts)
        first = {}
        for m in metas:
            first[m.partition] = min(first.get(m.partition, m.offset), m.offset)
        for tp in parts:
            consumer.seek(tp, first[tp.partition])
        got: dict[bytes, bytes] = {}
        deadline = time.monotonic() + 30
        while len(got) < len(sent) and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=1000)
            for tp, records in batch.items():
                for r in records:
                    if run.encode() in r.value:
                        got[r.key] = r.value
                        assert by_key[r.key] == tp.partition
    finally:
        await consumer.stop()
    assert got == sent


async def test_consumer_group_commits_offsets(kafka_bootstrap: str) -> None:
    topic = "fabric.dlq"  # one partition: a group's committed offset is easy to reason about
    group = f"test-{uuid.uuid4().hex}"
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        meta = await producer.send_and_wait(topic, b"dead", key=b"k")
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=kafka_bootstrap, group_id=group,
                                enable_auto_commit=False, auto_offset_reset="latest")
    await consumer.start()
    try:
        await consumer.seek_to_committed()
        tp = TopicPartition(topic, meta.partition)
        consumer.seek(tp, meta.offset)
        record = await asyncio.wait_for(consumer.getone(), 30)
        assert record.value == b"dead"
        await consumer.commit()
        assert await consumer.committed(tp) == meta.offset + 1
    finally:
        await consumer.stop()


# --------------------------------------------------------------------------- Temporal


@activity.defn
async def shout(text: str) -> str:
    return text.upper()


@workflow.defn(sandboxed=False)  # defined in a test module, which the sandbox cannot re-import
class Greet:
    @workflow.run
    async def run(self, name: str) -> str:
        loud = await workflow.execute_activity(shout, name, start_to_close_timeout=timedelta(seconds=30))
        await workflow.sleep(timedelta(milliseconds=100))  # a durable timer through the server
        return f"hello {loud}"


async def test_trivial_workflow_runs_on_the_real_server(temporal_target: str) -> None:
    client = await Client.connect(temporal_target, namespace="default")
    queue = f"test-{uuid.uuid4().hex}"
    async with Worker(client, task_queue=queue, workflows=[Greet], activities=[shout]):
        result = await client.execute_workflow(Greet.run, "fabric", id=f"greet-{queue}",
                                               task_queue=queue,
                                               execution_timeout=timedelta(seconds=60))
    assert result == "hello FABRIC"
    handle = client.get_workflow_handle(f"greet-{queue}")
    desc = await handle.describe()
    assert desc.status is not None and desc.status.name == "COMPLETED"


def _kill_and_wait(stack: LocalStack, service: str) -> None:
    [status] = [st for st in stack.status() if st.name == service]
    assert status.pid is not None
    os.killpg(status.pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while stack.exited(service) is None and time.monotonic() < deadline:
        time.sleep(0.1)


async def test_a_session_server_that_ended_is_reported_and_started_again_once(
        tmp_path: Path) -> None:
    """What the session fixtures do when their Temporal server ends under them (as one did in
    CI, leaving five tests with "connection refused" and nothing said of why)."""
    port, ui_port = free_ports(2)
    stack = LocalStack(Settings(state_dir=tmp_path, temporal=TemporalSettings(
        port=port, ui_port=ui_port)), services=["temporal"], timeout=180)
    await asyncio.to_thread(stack.up)
    try:
        endings: list[str] = []
        kept = SessionService(stack, "temporal", endings)
        assert kept.alive() is stack and endings == []
        client = await Client.connect(stack.settings.temporal.target)
        await client.start_workflow("Nobody", id=f"kept-{uuid.uuid4().hex}", task_queue="none")

        await asyncio.to_thread(_kill_and_wait, stack, "temporal")
        assert await asyncio.to_thread(kept.alive) is stack
        assert len(endings) == 1 and "killed by SIGKILL" in endings[0], endings
        assert str(stack.log_path("temporal")) in endings[0]
        # on the same port and database file: the workflow started before is still there
        client = await Client.connect(stack.settings.temporal.target)
        assert [w async for w in client.list_workflows()] != []

        await asyncio.to_thread(_kill_and_wait, stack, "temporal")
        with pytest.raises(pytest.fail.Exception, match="started again once already"):
            kept.alive()
        assert len(endings) == 2
    finally:
        await asyncio.to_thread(stack.down)


# --------------------------------------------------------------------------- ClickHouse (chdb)


def test_chdb_mergetree_create_insert_query(tmp_path: Path) -> None:
    from chdb import session

    sess = session.Session(str(tmp_path / "chdb"))
    try:
        sess.query("CREATE DATABASE IF NOT EXISTS t")
        sess.query("CREATE TABLE t.port_counters (device String, port UInt16, ts DateTime64(3, 'UTC'),"
                   " symbol_errors UInt64) ENGINE = MergeTree ORDER BY (device, port, ts)")
        sess.query("INSERT INTO t.port_counters VALUES ('leaf-su01-r1', 1, 1700000000000, 3),"
                   " ('leaf-su01-r1', 1, 1700000060000, 7), ('spine-01', 9, 1700000000000, 0)")
        out = sess.query("SELECT device, max(symbol_errors) - min(symbol_errors) AS delta"
                         " FROM t.port_counters GROUP BY device ORDER BY device", "JSONEachRow")
        rows = [json.loads(line) for line in out.bytes().decode().splitlines() if line]
        engine = sess.query("SELECT engine FROM system.tables WHERE database = 't'", "CSV")
    finally:
        sess.close()
    assert rows == [{"device": "leaf-su01-r1", "delta": 4}, {"device": "spine-01", "delta": 0}]
    assert engine.bytes().decode().strip() == '"MergeTree"'


# --------------------------------------------------------------------------- settings fixture


def test_stack_settings_point_at_both_services(stack_settings: Settings, kafka_bootstrap: str,
                                               temporal_target: str) -> None:
    assert stack_settings.kafka.bootstrap_servers == kafka_bootstrap
    assert stack_settings.temporal.target == temporal_target
    assert stack_settings.state_dir.is_dir()


# --------------------------------------------------------------------------- the CLI, cross-process


def _cli_env(state: Path) -> dict[str, str]:
    kp, kc, tp, tu = free_ports(4)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FABRICWATCH_")}
    env.update(FABRICWATCH_STATE_DIR=str(state), FABRICWATCH_KAFKA__PORT=str(kp),
               FABRICWATCH_KAFKA__CONTROLLER_PORT=str(kc), FABRICWATCH_TEMPORAL__PORT=str(tp),
               FABRICWATCH_TEMPORAL__UI_PORT=str(tu))
    return env


def _cli(env: dict[str, str], *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(FABRICWATCH), "stack", *args], env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)


def _service_pids(state: Path) -> list[int]:
    pids = []
    for name in ("kafka", "temporal"):
        path = state / "run" / f"{name}.json"
        if path.exists():
            pids.append(json.loads(path.read_text())["pid"])
    return pids


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def _wait_gone(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


def test_cli_up_status_down_across_processes(tmp_path: Path) -> None:
    env = _cli_env(tmp_path / "state")
    up = _cli(env, "up")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        pids = _service_pids(tmp_path / "state")
        assert len(pids) == 2 and all(_alive(p) for p in pids)  # detached: outlive `stack up`
        status = _cli(env, "status", "--json")
        assert status.returncode == 0, status.stdout + status.stderr
        states = {json.loads(line)["name"]: json.loads(line)["state"] for line in status.stdout.splitlines()}
        assert states == {"kafka": "ready", "temporal": "ready"}
        again = _cli(env, "up")  # idempotent: finds both running
        assert again.returncode == 0 and _service_pids(tmp_path / "state") == pids
        # A second stack on the same ports is refused with the port named, before anything starts.
        other = dict(env, FABRICWATCH_STATE_DIR=str(tmp_path / "other"))
        clash = _cli(other, "up", "--only", "temporal")
        assert clash.returncode == 1
        assert f"temporal.port 127.0.0.1:{env['FABRICWATCH_TEMPORAL__PORT']} is in use" in clash.stderr
        assert not (tmp_path / "other" / "run" / "temporal.json").exists()
    finally:
        down = _cli(env, "down")
    assert down.returncode == 0 and "stopped: temporal, kafka" in down.stdout
    assert _wait_gone(pids, 5) == []
    status = _cli(env, "status")
    assert status.returncode == 3 and "stopped" in status.stdout
    assert (tmp_path / "state" / "logs" / "kafka.log").stat().st_size > 0
    assert (tmp_path / "state" / "kafka" / "cluster.id").read_text().strip()


@pytest.mark.parametrize("how", ["ctrl-c", "killed"])
def test_foreground_stack_leaves_no_orphans(tmp_path: Path, how: str) -> None:
    state = tmp_path / "state"
    env = _cli_env(state)
    pids: list[int] = []
    with subprocess.Popen([str(FABRICWATCH), "stack", "up", "--foreground", "--only", "temporal"],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as owner:
        try:
            assert owner.stdout is not None
            for line in owner.stdout:
                if "Ctrl-C stops the stack" in line:
                    break
            pids = _service_pids(state)
            assert len(pids) == 1 and _alive(pids[0])
            # Ctrl-C: the owner stops the stack in order; SIGKILL: the kernel's parent-death signal.
            owner.send_signal(signal.SIGINT if how == "ctrl-c" else signal.SIGKILL)
            owner.wait(timeout=60)
            assert _wait_gone(pids, 30) == []
        finally:
            if owner.poll() is None:
                owner.kill()
            for pid in pids:
                if _alive(pid):
                    os.killpg(pid, signal.SIGKILL)
    if how == "ctrl-c":
        assert owner.returncode == 0
        assert not (state / "run" / "temporal.json").exists()
    status = _cli(env, "status")
    assert "temporal  stopped" in status.stdout


def test_a_broker_that_dies_at_start_is_reported_with_its_log(tmp_path: Path) -> None:
    kp, kc = free_ports(2)
    # A heap too small for the JVM to start: java exits at once, as a broken install would.
    settings = Settings(state_dir=tmp_path, kafka=KafkaSettings(port=kp, controller_port=kc, heap="-Xmx1k"))
    with pytest.raises(StackError, match=r"kafka exited while starting; last lines of .*kafka\.log"):
        LocalStack(settings, services=["kafka"], timeout=60).up()
    assert not (tmp_path / "run" / "kafka.json").exists()
