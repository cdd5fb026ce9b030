"""Where the dispatcher starts reading ``fabric.detections``: a brand-new consumer group
looks back only ``new_group_lookback_ms`` (broker record time), a group with committed
offsets resumes exactly where it stopped.

The contract topics take the broker's receive time (LogAppendTime), so a record cannot be
made to look old by its producer: the test shortens the look-back to a few seconds and
lets real time pass instead."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer  # type: ignore[import-untyped]
from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # type: ignore[import-untyped]
from aiokafka.errors import KafkaTimeoutError  # type: ignore[import-untyped]
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from test_end_to_end import detection

from schemas import encode
from schemas.events import Action, Topology, TopologyLink
from schemas.policy import Policy
from schemas.topics import DETECTIONS
from workflows import dispatch
from workflows.dispatch import Dispatcher, _LookbackForNewGroup, consume_committed, run_dispatcher
from workflows.inventory import Inventory
from workflows.remediation.models import cable_workflow_id

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[3]


async def exists(client: Client, wf_id: str) -> bool:
    try:
        await client.get_workflow_handle(wf_id).describe()
        return True
    except RPCError:
        return False


LOOKBACK_MS = 4_000


async def send(bootstrap: str, fabric: str, port: int) -> str:
    det = detection(fabric, "leaf-su01-r1", port, f"{fabric}-p{port}", Action.ISOLATE_PORT)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        # a forged old CreateTime, which the broker replaces with its own receive time
        record = await producer.send_and_wait(DETECTIONS.name, encode(det), key=det.key.encode(),
                                              timestamp_ms=int(time.time() * 1000) - 7_200_000)
        assert abs(record.timestamp - time.time() * 1000) < 60_000, "LogAppendTime"
    finally:
        await producer.stop()
    return cable_workflow_id(fabric, (det.device, port), (f"node{port:04d}/mlx5_1", 1))


def inventory(fabric: str) -> Inventory:
    """The fabric's cables (the dispatcher acts on cabled ports only)."""
    inv = Inventory()
    inv.load(Topology(id=f"t-{fabric}", ts=int(time.time() * 1000), fabric=fabric,
                      source="ibnetdiscover", links=[
                          TopologyLink(a_device="leaf-su01-r1", a_port=p,
                                       b_device=f"node{p:04d}/mlx5_1", b_port=1)
                          for p in (1, 2, 3)]))
    return inv


async def age_past_the_lookback() -> None:
    await asyncio.sleep(LOOKBACK_MS / 1000 + 2)


async def run_for(client: Client, bootstrap: str, group: str, task_queue: str,
                  until_ids: list[str], fabric: str) -> None:
    """Run the dispatcher until every id in ``until_ids`` exists (or 60 s), then stop it."""
    dispatcher = Dispatcher(client, Policy(), inventory(fabric), task_queue=task_queue,
                            fabric=fabric)
    stop = asyncio.Event()
    task = asyncio.create_task(run_dispatcher(dispatcher, bootstrap, group_id=group,
                                              stop=stop, topology_wait_s=5,
                                              new_group_lookback_ms=LOOKBACK_MS))
    try:
        for _ in range(120):
            if all([await exists(client, i) for i in until_ids]):
                break
            await asyncio.sleep(0.5)
        await asyncio.sleep(2)  # room for anything else it would (wrongly) start
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


async def test_new_group_looks_back_and_old_group_resumes(
        wf_env: WorkflowEnvironment, kafka_bootstrap: str, task_queue: str) -> None:
    client = wf_env.client
    fabric = f"off{uuid.uuid4().hex[:6]}"
    group = f"g-{fabric}"
    started: list[str] = []
    try:
        stale = await send(kafka_bootstrap, fabric, 1)
        await age_past_the_lookback()
        recent = await send(kafka_bootstrap, fabric, 2)
        await run_for(client, kafka_bootstrap, group, task_queue, [recent], fabric)
        started += [recent]
        assert await exists(client, recent)
        assert not await exists(client, stale)  # received before the lookback
        # The group now has committed offsets: a detection sent while it was stopped,
        # however long ago, is read when it comes back.
        late = await send(kafka_bootstrap, fabric, 3)
        await age_past_the_lookback()
        await run_for(client, kafka_bootstrap, group, task_queue, [late], fabric)
        started += [late]
        assert await exists(client, late)
        assert not await exists(client, stale)
    finally:
        for wf_id in started:
            try:
                await client.get_workflow_handle(wf_id).terminate("test over")
            except RPCError:
                pass


class _ConsumerView:
    """The real consumer as the look-back's listener sees it; subclasses change one answer."""

    def __init__(self, consumer: AIOKafkaConsumer) -> None:
        self._consumer = consumer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)


class _RecordAfterTheTimeQuery(_ConsumerView):
    """A record lands in an empty partition just after the look-back's time query has
    answered: the moment in which the end offset used to be taken, too late."""

    def __init__(self, consumer: AIOKafkaConsumer, land: Callable[[], Awaitable[None]]) -> None:
        super().__init__(consumer)
        self._land = land

    async def offsets_for_times(self, query: dict[Any, int]) -> dict[Any, Any]:
        found: dict[Any, Any] = await self._consumer.offsets_for_times(query)
        await self._land()
        return found


async def _new_topic(bootstrap: str, partitions: int) -> str:
    """A topic of its own (the producer's record time: CreateTime, unlike the contract's)."""
    topic = f"lookback-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()
    return topic


class _PlacedAt(_LookbackForNewGroup):
    """The look-back's listener, noting where it left each partition."""

    positions: dict[int, int] | None = None

    async def on_partitions_assigned(self, assigned: Any) -> None:
        await super().on_partitions_assigned(assigned)
        self.positions = {tp.partition: await self.consumer.position(tp) for tp in assigned}


async def test_a_detection_landing_while_a_new_group_is_placed_is_read(
        kafka_bootstrap: str) -> None:
    # Seen in the isolation benchmark: a fresh group's partition found nothing recent, was
    # sent to its end by seek_to_end, which resolved after a detection had landed there,
    # and the detection was committed without a runbook.
    topic = await _new_topic(kafka_bootstrap, 3)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=f"g-{topic}",
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        landed = asyncio.Event()

        async def land() -> None:
            if not landed.is_set():
                landed.set()
                await producer.send_and_wait(topic, b"meanwhile", partition=1)

        lookback = _PlacedAt(_RecordAfterTheTimeQuery(consumer, land), 60_000)
        consumer.subscribe([topic], listener=lookback)
        read: list[bytes] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (read and lookback.positions):
            batches = await consumer.getmany(timeout_ms=500)
            read += [m.value for tp, ms in batches.items() for m in ms
                     if not lookback.before_start(tp, m.timestamp)]
        assert landed.is_set(), "the group was never placed"
        # every partition starts where it ended before the time query (empty: 0), so the
        # record that landed after it is read, whatever the fetcher's own reset does
        assert lookback.positions == {0: 0, 1: 0, 2: 0}
        assert read == [b"meanwhile"]
    finally:
        await consumer.stop()
        await producer.stop()


class _SlowToPlace(_ConsumerView):
    """The committed-offset questions answered slowly (a busy broker, twelve partitions asked
    one after another): the window in which aiokafka's fetcher already reads a fresh
    partition from its reset position, earliest."""

    async def committed(self, tp: Any) -> Any:
        await asyncio.sleep(1.0)
        return await self._consumer.committed(tp)


class _CannotPlace(_ConsumerView):
    """The committed-offset question fails (a broker that took the group's join and does not
    answer it)."""

    async def committed(self, tp: Any) -> Any:
        raise KafkaTimeoutError("no answer")


async def _retained_record_read_by(bootstrap: str, listener: Callable[[Any], Any],
                                   placed: Callable[[Any], bool]) -> tuple[Any, list[bytes],
                                                                           set[int]]:
    """A one-partition topic holding a two-hour-old record, read by a new group whose
    look-back listener is ``listener(consumer)`` until ``placed(listener)`` and five reads
    more. Returns the listener, what was handed over past its look-back, what is paused."""
    topic = await _new_topic(bootstrap, 1)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=f"g-{topic}",
                                enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        await producer.send_and_wait(topic, b"retained", partition=0,
                                     timestamp_ms=int(time.time() * 1000) - 7_200_000)
        await consumer.start()
        lookback = listener(consumer)
        consumer.subscribe([topic], listener=lookback)
        handed: list[bytes] = []
        deadline = time.monotonic() + 20
        rounds_after = 5
        while time.monotonic() < deadline and rounds_after:
            batches = await consumer.getmany(timeout_ms=200)
            handed += [m.value for tp, ms in batches.items() for m in ms
                       if not lookback.before_start(tp, m.timestamp)]
            if placed(lookback):
                rounds_after -= 1
        return lookback, handed, {tp.partition for tp in consumer.paused()}
    finally:
        await consumer.stop()
        await producer.stop()


async def test_a_new_group_takes_nothing_from_before_its_look_back_while_being_placed(
        kafka_bootstrap: str) -> None:
    # Without the pause, getmany handed the retained record over during the listener's
    # first await, before the look-back's start was known: a fresh dispatcher group would
    # have started runbooks for detections up to the topic's retention old.
    lookback, handed, paused = await _retained_record_read_by(
        kafka_bootstrap, lambda c: _PlacedAt(_SlowToPlace(c), 60_000),
        lambda lb: lb.positions is not None)
    assert lookback.positions == {0: 1}, "placed at the end: nothing inside the look-back"
    assert handed == []
    assert paused == set()


async def test_a_placement_that_fails_hands_nothing_over(kafka_bootstrap: str) -> None:
    # Fail closed: the partitions stay paused and the listener says why (consume_committed
    # raises it, which ends the runbook worker; its restart places again).
    lookback, handed, paused = await _retained_record_read_by(
        kafka_bootstrap, lambda c: _LookbackForNewGroup(_CannotPlace(c), 60_000),
        lambda lb: lb.failed is not None)
    assert isinstance(lookback.failed, KafkaTimeoutError)
    assert paused == {0}
    assert handed == []


async def test_consume_committed_raises_when_a_new_group_cannot_be_placed(
        kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The consumer itself, not only its listener: paused partitions would otherwise leave it
    # polling nothing for ever. Nothing is handed over and nothing committed, so the group
    # is still new when the worker's restart places it again.
    topic = await _new_topic(kafka_bootstrap, 1)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"inside the look-back", partition=0)
    finally:
        await producer.stop()
    monkeypatch.setattr(dispatch, "_LookbackForNewGroup",
                        lambda consumer, ms: _LookbackForNewGroup(_CannotPlace(consumer), ms))
    handed: list[bytes] = []

    async def handle(raw: bytes, received_ms: int | None) -> None:
        handed.append(raw)

    with pytest.raises(RuntimeError, match="could not be placed") as raised:
        await asyncio.wait_for(consume_committed(
            topic, kafka_bootstrap, f"g-{topic}", handle, stop=asyncio.Event(),
            lookback_ms=60_000, max_records=10, what="a test record"), 30)
    assert isinstance(raised.value.__cause__, KafkaTimeoutError)
    assert handed == []
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        assert await admin.list_consumer_group_offsets(f"g-{topic}") == {}
    finally:
        await admin.close()


# The runbook worker as operators start it, except that its detections group cannot be
# placed (the broker took the join and answers no offset question).
_UNPLACEABLE = f"""
import workflows.dispatch as d
from aiokafka.errors import KafkaTimeoutError

class Unplaceable(d._LookbackForNewGroup):
    async def _place(self, partitions):
        if any(tp.topic == {DETECTIONS.name!r} for tp in partitions):
            raise KafkaTimeoutError("no answer")
        await super()._place(partitions)

d._LookbackForNewGroup = Unplaceable
from fabricwatch.cli import main
main()
"""


def _exit_code(argv: list[str], env: dict[str, str], log: Path, within: float) -> int | None:
    """The process's exit code, None (and killed) if it still runs after ``within``."""
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            return proc.wait(within)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return None


async def test_the_runbook_worker_exits_when_its_detections_cannot_be_placed(
        wf_env: WorkflowEnvironment, kafka_bootstrap: str, tmp_path: Path) -> None:
    # Fail closed ends the process (non-zero, so its supervisor restarts it and the restart
    # places again); a worker that kept serving would start no runbook for any detection.
    fabric = f"unp{uuid.uuid4().hex[:6]}"
    env = {**os.environ, "FABRICWATCH_STATE_DIR": str(tmp_path / "state"),
           "FABRICWATCH_FABRIC": fabric,
           "FABRICWATCH_TEMPORAL__ADDRESS": wf_env.client.service_client.config.target_host,
           "FABRICWATCH_TEMPORAL__TASK_QUEUE": f"q-{fabric}",
           "FABRICWATCH_KAFKA__BOOTSTRAP": kafka_bootstrap}
    log = tmp_path / "worker.log"
    code = await asyncio.to_thread(
        _exit_code, [sys.executable, "-c", _UNPLACEABLE, "runbook-worker"], env, log, 90)
    out = log.read_text(errors="replace")
    assert code not in (None, 0), f"exit code {code}:\n{out[-3000:]}"
    assert f"{DETECTIONS.name}: a new assignment could not be placed" in out, out[-3000:]
