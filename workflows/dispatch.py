"""The dispatcher: ``fabric.detections`` in, one ``PortRemediation`` per port out.

A detection whose action is ``isolate_port`` is signal-with-started into
``remediate/{fabric}/{device}:{port}`` (``start_signal="detection"`` with
``id_conflict_policy=USE_EXISTING``): the first starts the runbook, later ones join it, and
the workflow ignores a detection id it has already seen, so a redelivered Kafka message
changes nothing. Offsets are committed only after Temporal accepted the start or signal
(at-least-once, made idempotent by the workflow id).

Where a port sits (SU, rail, node, peer, LID, GUID) and how many ports its SU and the fabric
have come from an ``Inventory`` built from the latest ``fabric.topology`` snapshot, with the
rail-optimized naming rule as a fallback for a port the topology does not know yet.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from aiokafka import (  # type: ignore[import-untyped]
    AIOKafkaConsumer,
    ConsumerRebalanceListener,
    TopicPartition,
)
from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy

from schemas import ContractError, decode
from schemas.events import Action, Detection, Topology
from schemas.policy import Policy
from schemas.topics import DETECTIONS, TOPOLOGY
from workflows.inventory import Inventory
from workflows.remediation.models import (
    ActivityTimeouts,
    DetectionRef,
    RemediationInput,
    RemediationResult,
    RunbookConfig,
    remediation_workflow_id,
)
from workflows.remediation.workflows import PortRemediation

log = logging.getLogger(__name__)


async def start_or_join(client: Client, inp: RemediationInput, *, task_queue: str
                        ) -> WorkflowHandle[PortRemediation, RemediationResult]:
    """Signal-with-start: start the port's runbook, or deliver the detection to it."""
    wf_id = remediation_workflow_id(inp.port.fabric, inp.port.device, inp.port.port)
    return await client.start_workflow(
        PortRemediation.run, inp, id=wf_id, task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        start_signal="detection", start_signal_args=[inp.detection])


@dataclass
class DispatchStats:
    seen: int = 0
    dispatched: int = 0
    ignored: int = 0
    invalid: int = 0


class Dispatcher:
    """Turns detections into runbook inputs and starts or joins them."""

    def __init__(self, client: Client, policy: Policy, inventory: Inventory, *,
                 task_queue: str, timeouts: ActivityTimeouts | None = None) -> None:
        self.client = client
        self.policy = policy
        self.inventory = inventory
        self.task_queue = task_queue
        self.timeouts = timeouts
        self.stats = DispatchStats()

    def runbook_input(self, det: Detection) -> RemediationInput:
        port = self.inventory.port_ref(det.fabric, det.device, det.port)
        cfg = RunbookConfig.from_policy(
            self.policy, fabric=det.fabric, detection=str(det.detection),
            su_ports=self.inventory.su_ports(port.su), fabric_ports=self.inventory.fabric_ports(),
            timeouts=self.timeouts)
        return RemediationInput(port=port, detection=DetectionRef.from_detection(det), config=cfg)

    async def handle(self, det: Detection) -> bool:
        """Dispatch one detection; True when a runbook was started or joined."""
        self.stats.seen += 1
        if det.action != Action.ISOLATE_PORT:
            self.stats.ignored += 1
            return False
        await start_or_join(self.client, self.runbook_input(det), task_queue=self.task_queue)
        self.stats.dispatched += 1
        return True

    async def handle_raw(self, raw: bytes) -> bool:
        try:
            event = decode(raw)
        except ContractError as exc:
            # The stream processors dead-letter bad messages; here they are only skipped.
            self.stats.invalid += 1
            log.warning("skipping an invalid detection: %s", exc)
            return False
        if isinstance(event, Topology):
            self.inventory.load(event)
            return False
        if not isinstance(event, Detection):
            self.stats.invalid += 1
            return False
        return await self.handle(event)


NEW_GROUP_LOOKBACK_MS = 15 * 60_000


async def run_dispatcher(dispatcher: Dispatcher, bootstrap: str, *,
                         group_id: str = "fabricwatch-runbooks",
                         stop: asyncio.Event | None = None,
                         topology_wait_s: float = 30.0,
                         new_group_lookback_ms: int = NEW_GROUP_LOOKBACK_MS) -> None:
    """Consume ``fabric.topology`` (whole, for the inventory) and ``fabric.detections``.

    Detections wait (up to ``topology_wait_s``) until the topology topic has been read to
    the end once, so the first runbooks know their SU sizes and cable peers.

    A group that has committed offsets resumes from them, so nothing published while the
    dispatcher was down is skipped. A brand-new group starts ``new_group_lookback_ms`` back
    (by the broker's record time), not at the start of the topic: replaying a week of
    retained detections would re-open runbooks for ports repaired long ago.
    """
    stop = stop or asyncio.Event()
    caught_up = asyncio.Event()
    topo_task = asyncio.create_task(_follow_topology(dispatcher, bootstrap, stop, caught_up))
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group_id,
        enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    lookback = _LookbackForNewGroup(consumer, new_group_lookback_ms)
    consumer.subscribe([DETECTIONS.name], listener=lookback)
    try:
        try:
            await asyncio.wait_for(caught_up.wait(), topology_wait_s)
        except TimeoutError:
            log.warning("topology not read within %.0f s; placing ports by name", topology_wait_s)
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=500, max_records=500)
            for _tp, messages in batches.items():
                for msg in messages:
                    await _until_accepted(dispatcher, msg.value, stop)
            if (batches or lookback.placed) and not stop.is_set():
                # after Temporal accepted every start/signal of the batch: at-least-once.
                # Also right after a new group was placed, so a partition that stays quiet
                # is not "new" (and looked back on) again at the next start.
                await consumer.commit()
                lookback.placed = False
    finally:
        await consumer.stop()
        topo_task.cancel()
        await asyncio.gather(topo_task, return_exceptions=True)


class _LookbackForNewGroup(ConsumerRebalanceListener):  # type: ignore[misc]
    """On assignment, a partition without a committed offset starts ``lookback_ms`` back."""

    def __init__(self, consumer: Any, lookback_ms: int) -> None:
        self.consumer = consumer
        self.lookback_ms = lookback_ms
        self.placed = False

    async def on_partitions_revoked(self, revoked: Any) -> None:
        pass

    async def on_partitions_assigned(self, assigned: Any) -> None:
        fresh = [tp for tp in assigned if await self.consumer.committed(tp) is None]
        if not fresh:
            return
        since = int(time.time() * 1000) - self.lookback_ms
        found = await self.consumer.offsets_for_times({tp: since for tp in fresh})
        for tp in fresh:
            at = found.get(tp)
            if at is None:  # nothing that recent: only what arrives from now on
                await self.consumer.seek_to_end(tp)
            else:
                self.consumer.seek(tp, at.offset)
        self.placed = True
        log.info("new dispatcher group: %d partition(s) start %d s back", len(fresh),
                 self.lookback_ms // 1000)


async def _until_accepted(dispatcher: Dispatcher, raw: bytes, stop: asyncio.Event) -> None:
    """Dispatch one message, retrying while Temporal is unreachable (a server restart must not
    stop the dispatcher, nor skip a detection: the offset is committed only after this)."""
    from temporalio.service import RPCError

    delay = 0.5
    while not stop.is_set():
        try:
            await dispatcher.handle_raw(raw)
            return
        except RPCError as exc:
            log.warning("Temporal refused a start (%s); retrying in %.1f s", exc.message, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)


async def _follow_topology(dispatcher: Dispatcher, bootstrap: str, stop: asyncio.Event,
                           caught_up: asyncio.Event) -> None:
    """Read every topology snapshot from the start (no group: each dispatcher needs all)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                max_partition_fetch_bytes=32 * 1024 * 1024,
                                fetch_max_bytes=64 * 1024 * 1024)
    await consumer.start()
    try:
        parts = consumer.partitions_for_topic(TOPOLOGY.name)
        if parts is None:
            await consumer._client.force_metadata_update()
            parts = consumer.partitions_for_topic(TOPOLOGY.name) or set()
        tps = [TopicPartition(TOPOLOGY.name, p) for p in sorted(parts)]
        if not tps:
            caught_up.set()
            return
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=1000)
            for _tp, messages in batches.items():
                for msg in messages:
                    await dispatcher.handle_raw(msg.value)
            if not caught_up.is_set():
                positions = {tp: await consumer.position(tp) for tp in tps}
                if all(positions[tp] >= ends[tp] for tp in tps):
                    caught_up.set()
    finally:
        caught_up.set()
        await consumer.stop()
