"""The dispatcher: ``fabric.detections`` in, one ``PortRemediation`` per cable out.

A detection whose action is ``isolate_port`` is resolved to its cable (both ends, from the
``fabric.topology`` inventory) and signal-with-started into
``remediate/{fabric}/{end_a}~{end_b}`` (``start_signal="detection"`` with
``id_conflict_policy=USE_EXISTING``): the first starts the runbook, a detection from either
end joins it, and the workflow ignores a detection id it has already seen.

A detection that carries ``incident`` (its port is a member of an open incident: a switch
or node reboot) or ``maintenance`` (inside a maintenance window) starts no port runbook;
it is recorded by the ledger and the incident is handled as one. One that also carries
``evidence.explains`` is the correlator's ``<id>/explained``: the detection it names was
published before that incident opened, and may have started the cable's runbook, which is
signalled ``explained`` (it stands down once all its detections are so explained).

Exactly once per episode: before starting, the dispatcher looks at the cable's last run. A
running one is joined; a closed one whose episodes (its own and the earlier ones it carried)
include the detection's episode means a replayed detection, and nothing happens; otherwise a
new runbook starts that carries the closed runs of the policy's repeat window (so the
workflow knows a repeat offender). The namespace's retention must cover that window.
Offsets are committed only after Temporal accepted the start or signal (at-least-once, made
idempotent by the workflow id and the episode rule).

Where a port sits (SU, rail, node, peer, LID, GUID) and how many ports its SU and the fabric
have come from an ``Inventory`` built from the latest ``fabric.topology`` snapshot.

The inventory decides who may act (``may_act``, a gate of its own before the episode rule):
a detection for a port that no snapshot of its fabric has cabled starts nothing; it is
recorded (a ``unknown_device`` detection, action ``page``) once per port, and paged once per
device through the ticket adapter. While no snapshot of the fabric has been seen at all,
nothing can be told apart, so nothing starts either (fail closed): each such port is
recorded, with the reason ``no topology``, and the fabric is paged once. A fabric in shadow
mode is recorded and not paged. A name is never interpreted, only compared and shown
escaped (control and bidirectional-format characters as ``\\uXXXX``).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
import unicodedata
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka import (  # type: ignore[import-untyped]
    AIOKafkaConsumer,
    ConsumerRebalanceListener,
    TopicPartition,
)
from aiokafka.errors import CommitFailedError  # type: ignore[import-untyped]
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from schemas import ContractError
from schemas.acceptance import TimeBounds, accept
from schemas.events import Action, Detection, DetectionKind, Severity, Topology
from schemas.policy import Policy
from schemas.topics import DETECTIONS, TOPOLOGY, Topic
from streams.incidents.logic import explains
from workflows.adapters.base import RecordSink, Ticketing
from workflows.inventory import Inventory
from workflows.remediation.models import (
    ActivityTimeouts,
    DetectionRef,
    Explained,
    PriorRun,
    RemediationInput,
    RemediationResult,
    RunbookConfig,
    cable_workflow_id,
)
from workflows.remediation.workflows import PortRemediation

log = logging.getLogger(__name__)


def runbook_id(inp: RemediationInput) -> str:
    """The cable's runbook id (the port's alone when its peer is unknown)."""
    peer = (inp.peer.device, inp.peer.port) if inp.peer is not None else None
    return cable_workflow_id(inp.port.fabric, (inp.port.device, inp.port.port), peer)


async def start_or_join(client: Client, inp: RemediationInput, *, task_queue: str
                        ) -> WorkflowHandle[PortRemediation, RemediationResult]:
    """Signal-with-start: start the cable's runbook, or deliver the detection to it."""
    wf_id = runbook_id(inp)
    return await client.start_workflow(
        PortRemediation.run, inp, id=wf_id, task_queue=task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        start_signal="detection", start_signal_args=[inp.detection])


async def closed_runs(client: Client, wf_id: str, *, now_ms: int, window_s: float
                      ) -> tuple[bool, list[PriorRun]]:
    """(a run of ``wf_id`` is running, the closed runs of the repeat window, newest last).

    A closed run hands on the earlier runs it carried, so the chain reaches back as far as the
    window. A run that did not complete (terminated, failed: only before this version) has no
    result; it is counted with its close time and no episodes.
    """
    handle = client.get_workflow_handle_for(PortRemediation.run, wf_id)
    try:
        desc = await handle.describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return False, []
        raise
    if desc.status == WorkflowExecutionStatus.RUNNING:
        return True, []
    closed_ms = int(desc.close_time.timestamp() * 1000) if desc.close_time else now_ms
    try:
        result = await handle.result(follow_runs=False)
    except WorkflowFailureError:
        runs = [PriorRun(run_id=desc.run_id, closed_ts=closed_ms, outcome=desc.status.name
                         if desc.status else "closed")]
    else:
        runs = [*result.prior, PriorRun(
            run_id=desc.run_id, closed_ts=result.closed_ts or closed_ms, outcome=result.outcome,
            fixed_by=result.fixed_by, episodes=list(result.episodes))]
    since = now_ms - int(window_s * 1000)
    return False, [r for r in runs if r.closed_ts >= since]


@dataclass
class DispatchStats:
    seen: int = 0
    dispatched: int = 0
    ignored: int = 0
    invalid: int = 0
    duplicate: int = 0  # the episode already had a runbook that closed
    unknown: int = 0  # a port the inventory does not have (or no topology yet): no runbook
    held: int = 0  # part of an incident or inside a maintenance window: no port runbook
    explained: int = 0  # a running runbook told its detection was an incident's


# Who records and pages an unknown port (the ``source`` of its ``unknown_device`` detection).
SOURCE = "fabricwatch"
NO_TOPOLOGY = "no topology of this fabric has been seen yet"
NOT_CABLED = "no topology snapshot of this fabric has this port cabled"
# Ports of one fabric recorded one by one before the dispatcher stops (a flood of invented
# names must not become a flood of records and pages, or an unbounded set); one page says so.
MAX_REPORTED = 1000
MAX_REPORTED_ALL = 16 * MAX_REPORTED  # over every fabric: the set stays bounded
# Causes (a fabric without topology, a device not cabled) paged before the dispatcher stops
# paging new ones (a fabric name invented per message must not be a page each).
MAX_PAGED = 100


def _cause(det: Detection, reason: str) -> tuple[str, ...]:
    """What one page is about: the fabric while it has no topology, else the device."""
    return ((det.fabric, reason) if reason == NO_TOPOLOGY
            else (det.fabric, det.device, reason))


def _page_key(cause: tuple[str, ...]) -> str:
    """A page's key (it reaches HTTP headers, Idempotency-Key): a digest, never a raw name."""
    return "unknown_device/" + hashlib.sha256("\0".join(cause).encode()).hexdigest()[:20]


def shown(name: str) -> str:
    """A name as a page may show it: control, format (U+202E and other bidirectional
    overrides) and other invisible characters escaped, so a name cannot disguise itself."""
    return "".join(c if unicodedata.category(c)[0] not in "CZ" or c == " "
                   else f"\\u{ord(c):04x}" for c in name)


class Dispatcher:
    """Turns detections into runbook inputs and starts or joins them."""

    def __init__(self, client: Client, policy: Policy, inventory: Inventory, *,
                 task_queue: str, timeouts: ActivityTimeouts | None = None,
                 fabric: str | None = None, ticketing: Ticketing | None = None,
                 records: RecordSink | None = None,
                 evidence_task_queue: str | None = None) -> None:
        # fabric: this dispatcher's only fabric (the inventory holds one fabric's topology, a
        # runbook worker acts on one fabric's controller); None takes every fabric
        self.fabric = fabric
        self.client = client
        self.policy = policy
        self.inventory = inventory
        self.task_queue = task_queue
        self.evidence_task_queue = evidence_task_queue
        self.timeouts = timeouts
        self.bounds = TimeBounds.from_policy(policy)
        self.stats = DispatchStats()
        # unknown ports: recorded to ``records`` and paged through ``ticketing`` once each
        self.ticketing = ticketing
        self.records = records
        self._reported: set[tuple[str, str, str, int]] = set()  # ports recorded
        self._counted: dict[str, int] = {}  # ports recorded, per fabric
        self._paged: set[tuple[str, ...]] = set()  # causes paged: a fabric or a device
        self._flooded: set[tuple[str, ...]] = set()  # limits passed, their page sent

    def runbook_input(self, det: Detection) -> RemediationInput:
        port, peer = self.inventory.cable(det.fabric, det.device, det.port,
                                          self.policy.fabric_health.isolate_end)
        cfg = RunbookConfig.from_policy(
            self.policy, fabric=det.fabric, detection=str(det.detection),
            su_ports=self.inventory.su_ports(port.su), fabric_ports=self.inventory.fabric_ports(),
            timeouts=self.timeouts)
        if self.evidence_task_queue:
            cfg = cfg.model_copy(update={"evidence_task_queue": self.evidence_task_queue})
        return RemediationInput(port=port, peer=peer, detection=DetectionRef.from_detection(det),
                                config=cfg)

    async def handle(self, det: Detection) -> bool:
        """Dispatch one detection; True when a runbook was started or joined."""
        self.stats.seen += 1
        if det.action != Action.ISOLATE_PORT or (self.fabric is not None
                                                  and det.fabric != self.fabric):
            self.stats.ignored += 1
            return False
        if det.incident is not None or det.maintenance is not None:
            # one cause, one incident (streams.incidents): its members get no runbook each
            self.stats.held += 1
            log.info("detection %s on %s: no port runbook (incident %s, maintenance %s)",
                     det.id, det.key, det.incident, det.maintenance)
            if explains(det) is not None:
                await self.explain(det)
            return False
        if not await self.may_act(det):
            return False
        inp = self.runbook_input(det)
        running, prior = await closed_runs(
            self.client, runbook_id(inp), now_ms=int(time.time() * 1000),
            window_s=inp.config.repeat_window_s)
        if not running and any(det.episode in r.episodes for r in prior):
            # a replayed detection of an episode whose runbook has closed: nothing to do
            self.stats.duplicate += 1
            log.info("detection %s: episode %s already had runbook %s", det.id, det.episode,
                     runbook_id(inp))
            return False
        if prior:
            inp = inp.model_copy(update={"prior": prior})
        await start_or_join(self.client, inp, task_queue=self.task_queue)
        self.stats.dispatched += 1
        return True

    async def explain(self, det: Detection) -> None:
        """The correlator's ``<id>/explained``: a detection published before the incident
        that takes its downs opened. The cable's running runbook, which that detection may
        have started, is told (``explained``); it stands down once all its detections are
        so explained. A cable with no running runbook has nothing to stand down."""
        if not self.inventory.knows(det.fabric, det.device, det.port):
            return  # never cabled: no runbook was started for it
        wf_id = runbook_id(self.runbook_input(det))
        running, _ = await closed_runs(self.client, wf_id, now_ms=int(time.time() * 1000),
                                       window_s=0)
        if not running:
            return
        note = Explained(detection=str(explains(det)), incident=str(det.incident),
                         episode=det.episode)
        await self.client.get_workflow_handle(wf_id).signal(PortRemediation.explained, note)
        self.stats.explained += 1
        log.info("runbook %s: detection %s explained by incident %s", wf_id, note.detection,
                 note.incident)

    async def may_act(self, det: Detection) -> bool:
        """The inventory's gate: True when the fabric's topology has cabled the port.

        Otherwise the detection starts nothing: the port is recorded as ``unknown_device``
        the first time (per reason and port), and its cause paged once: once for a fabric
        no topology has been seen of, once for a device it has not cabled, however many of
        their ports are detected (each is in the ledger). A detection in shadow mode (its
        fabric's, or its kind's) is recorded and pages nothing: its runbook would not page
        either; a later detection of the port that is not in shadow pages its cause. A
        record or page that fails is logged and tried again at the port's next detection;
        it never starts a runbook. Past ``MAX_REPORTED`` ports of one fabric, that fabric's
        are no longer recorded one by one: one page says so (a fabric in shadow: none).
        """
        known = self.inventory.knows(det.fabric, det.device, det.port)
        if known:
            return True
        self.stats.unknown += 1
        reason = NO_TOPOLOGY if known is None else NOT_CABLED
        key = (reason, det.fabric, det.device, det.port)
        log.warning("detection %s for %s:%d of fabric %s starts no runbook: %s", det.id,
                    shown(det.device), det.port, shown(det.fabric), reason)
        shadow = self.policy.fabric_health.shadow
        quiet = shadow.applies(det.fabric, str(det.detection))
        recorded = key in self._reported
        if recorded and (quiet or _cause(det, reason) in self._paged):
            return False
        if not recorded and len(self._reported) >= MAX_REPORTED_ALL:
            if not (shadow.all or det.fabric in shadow.fabrics):
                await self._flood_page(
                    ("flood",), f"more than {MAX_REPORTED_ALL} unknown ports over all "
                    "fabrics: each starts no runbook; no more records or pages for them "
                    "from this dispatcher", {})
            return False
        if not recorded and self._counted.get(det.fabric, 0) >= MAX_REPORTED:
            if not (shadow.all or det.fabric in shadow.fabrics):
                await self._flood_page(
                    ("flood", det.fabric), f"more than {MAX_REPORTED} unknown ports in fabric "
                    f"{shown(det.fabric)}: each starts no runbook; no more records or pages "
                    "for them from this dispatcher", {"fabric": shown(det.fabric)})
            return False
        try:
            await self.report_unknown(det, reason, record=not recorded, page=not quiet)
        except Exception:  # noqa: BLE001 - a ticket or ledger outage must not stop dispatch
            log.exception("could not record or page unknown port %s:%d", shown(det.device),
                          det.port)
            return False
        if not recorded:
            self._reported.add(key)
            self._counted[det.fabric] = self._counted.get(det.fabric, 0) + 1
        return False

    async def _flood_page(self, cause: tuple[str, ...], summary: str,
                          details: dict[str, Any]) -> None:
        """One page, once, that a limit was passed (its failure is logged, not retried)."""
        if cause in self._flooded or self.ticketing is None:
            return
        self._flooded.add(cause)
        log.error("unknown ports: %s", summary)
        try:
            await self.ticketing.page(_page_key(cause), summary,
                                      {**details, "detection": "unknown_device"})
        except Exception:  # noqa: BLE001 - logged
            log.exception("could not page that a limit of unknown ports was passed")

    async def report_unknown(self, det: Detection, reason: str, *, record: bool = True,
                             page: bool = True) -> Detection:
        """Record the port's ``unknown_device`` detection (one id per reason and port) and,
        with ``page``, page its cause the first time: the fabric (no topology yet) or the
        device (not cabled). The ports of one cause share the page's key as their episode."""
        digest = hashlib.sha256(f"{det.fabric}\0{det.device}\0{det.port}\0{reason}".encode()
                                ).hexdigest()[:20]
        # one cause, one page: a fabric without topology is one fact, not one per port
        cause = _cause(det, reason)
        # the page key reaches HTTP headers (Idempotency-Key): a digest, never the raw name
        page_key = _page_key(cause)
        name = f"{shown(det.device)}:{det.port}"
        shadow = not page
        if page and cause not in self._paged and len(self._paged) >= MAX_PAGED:
            await self._flood_page(("causes",), f"more than {MAX_PAGED} causes of unknown "
                                   "ports paged: each further one is recorded, not paged", {})
            page = False
        unknown = Detection(
            # the device is in its own field: an id of two long names could pass 512 chars
            id=f"unknown_device/{det.fabric}/{digest}", ts=det.ts,
            fabric=det.fabric, source=SOURCE, device=det.device, port=det.port,
            detection=DetectionKind.UNKNOWN_DEVICE, severity=Severity.WARNING,
            action=Action.PAGE, episode=page_key,
            evidence={"reason": reason, "shown": name, "detection_id": det.id,
                      "detection": str(det.detection), "episode": det.episode,
                      "topology_ts": self.inventory.snapshot_ts,
                      "paged": page or cause in self._paged,
                      **({"shadow": True} if shadow else {})})
        if record and self.records is not None:
            await self.records.write([unknown])
        if page and self.ticketing is not None and cause not in self._paged:
            # no time and no triggering detection in the page: a restarted dispatcher's page
            # has the same body, so a receiver that deduplicates by Idempotency-Key drops it
            subject = (f"fabric {shown(det.fabric)}: no runbook starts ({reason}; first "
                       f"port {name})" if reason == NO_TOPOLOGY
                       else f"unknown device {name} in fabric {shown(det.fabric)}: no "
                       f"runbook started ({reason})")
            # a fabric-wide page names no port in its labels: its first port is a detail
            where = {"first_port": name} if reason == NO_TOPOLOGY else {"port": name}
            await self.ticketing.page(page_key, subject, {
                "fabric": shown(det.fabric), **where, "reason": reason,
                "detection": "unknown_device",
                "more": "further ports of this cause are recorded in the ledger "
                        "(detections, unknown_device), not paged"})
            self._paged.add(cause)
        return unknown

    async def take_topology(self, raw: bytes, received_ms: int | None = None) -> None:
        """A ``fabric.topology`` message, decoded and validated in a thread: a 100k-port
        snapshot takes seconds, and on the event loop it stalled the worker's activities,
        the detections and the consumer group's heartbeats (the member was evicted, its
        commit failed). Loaded into the inventory on the loop, as ``handle_raw`` does."""
        try:
            event = await asyncio.to_thread(accept, TOPOLOGY, raw, received_ms=received_ms,
                                            bounds=self.bounds)
        except ContractError as exc:
            self.stats.invalid += 1
            log.warning("skipping an invalid topology: %s", exc)
            return
        if isinstance(event, Topology) and (self.fabric is None or event.fabric == self.fabric):
            self.inventory.load(event)

    async def handle_raw(self, raw: bytes, topic: Topic = DETECTIONS,
                         received_ms: int | None = None) -> bool:
        """One message of ``topic``, taken through the same acceptance as the stream worker
        and the ledger (``schemas.acceptance``): what they refuse starts nothing here."""
        try:
            event = accept(topic, raw, received_ms=received_ms, bounds=self.bounds)
        except ContractError as exc:
            # The stream processors dead-letter bad messages; here they are only skipped.
            self.stats.invalid += 1
            log.warning("skipping an invalid detection: %s", exc)
            return False
        if isinstance(event, Topology):
            if self.fabric is None or event.fabric == self.fabric:
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

    async def topology_read() -> None:
        try:
            await asyncio.wait_for(caught_up.wait(), topology_wait_s)
        except TimeoutError:
            log.warning("topology not read within %.0f s; placing ports by name", topology_wait_s)

    async def handle(raw: bytes, received_ms: int | None) -> None:
        await dispatcher.handle_raw(raw, DETECTIONS, received_ms)

    try:
        await consume_committed(DETECTIONS.name, bootstrap, group_id, handle, stop=stop,
                                lookback_ms=new_group_lookback_ms, max_records=500,
                                what="a runbook start", ready=topology_read)
    finally:
        topo_task.cancel()
        await asyncio.gather(topo_task, return_exceptions=True)


async def consume_committed(topic: str, bootstrap: str, group_id: str,
                            handle: Callable[[bytes, int | None], Awaitable[object]], *,
                            stop: asyncio.Event, lookback_ms: int, max_records: int,
                            what: str, ready: Callable[[], Awaitable[None]] | None = None
                            ) -> None:
    """Consume ``topic`` in group ``group_id`` until ``stop``: each record to ``handle``
    (retried while Temporal is unreachable), offsets committed only after the whole batch
    was taken, so a restart skips nothing (at-least-once). A group with committed offsets
    resumes from them; a new one starts ``lookback_ms`` back by record time. ``ready`` is
    awaited once before the first batch (the detection dispatcher waits for the topology)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group_id,
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    lookback = _LookbackForNewGroup(consumer, lookback_ms)
    consumer.subscribe([topic], listener=lookback)
    try:
        if ready is not None:
            await ready()
        uncommitted = False
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=500, max_records=max_records)
            if lookback.failed is not None:
                # its partitions stay paused: fail closed, the worker's restart places again
                raise RuntimeError(f"{topic}: a new assignment could not be placed "
                                   f"({lookback.failed!r}); nothing was taken from it"
                                   ) from lookback.failed
            for tp, messages in batches.items():
                for msg in messages:
                    if not lookback.before_start(tp, msg.timestamp):
                        await _until_accepted(handle, msg.value, msg.timestamp, stop, what)
            uncommitted = uncommitted or bool(batches)
            # Not while an assignment is being placed: a fresh partition's position is then
            # the fetcher's reset (earliest), and committed it would no longer be fresh.
            if (uncommitted or lookback.placed) and not stop.is_set() and not lookback.placing:
                # after Temporal accepted every start/signal of the batch: at-least-once.
                # Also right after a new group was placed, so a partition that stays quiet
                # is not "new" (and looked back on) again at the next start. The flag is
                # taken before the commit: a placement during it is committed next time.
                placed, lookback.placed = lookback.placed, False
                try:
                    await consumer.commit()
                except CommitFailedError as exc:
                    # The group rebalanced under us (a member joined or left, or this one
                    # missed its heartbeats): the batch's records are read again by whoever
                    # has their partitions now, and a start or signal taken twice is one
                    # runbook (workflow id, episode rule). Not a reason to stop the worker.
                    lookback.placed = lookback.placed or placed
                    log.warning("%s: offsets not committed, the group rebalanced (%s); "
                                "the batch will be read again", topic, exc)
                uncommitted = False
    finally:
        await consumer.stop()


def start_offsets(fresh: list[Any], ends: Mapping[Any, int],
                  found: Mapping[Any, Any]) -> dict[Any, int]:
    """Where each fresh partition starts: its first record since the look-back's start
    (``found``, from ``offsets_for_times``), else the end it had before that query."""
    out: dict[Any, int] = {}
    for tp in fresh:
        at = found.get(tp)
        out[tp] = ends[tp] if at is None else min(at.offset, ends[tp])
    return out


class _LookbackForNewGroup(ConsumerRebalanceListener):  # type: ignore[misc]
    """On assignment, a partition without a committed offset starts ``lookback_ms`` back."""

    def __init__(self, consumer: Any, lookback_ms: int) -> None:
        self.consumer = consumer
        self.lookback_ms = lookback_ms
        self.placed = False  # a placement not committed yet
        self.placing = False
        self.failed: BaseException | None = None
        self._since: dict[Any, int] = {}  # fresh partition -> the record time it starts at

    def before_start(self, tp: Any, received_ms: int | None) -> bool:
        """A record of a fresh partition older than where it was placed: skipped. Records
        the fetcher read from its reset position before the seek, or after an offset out of
        range (reset to earliest), are judged by their time."""
        since = self._since.get(tp)
        return since is not None and received_ms is not None and received_ms < since

    async def on_partitions_revoked(self, revoked: Any) -> None:
        pass

    async def on_partitions_assigned(self, assigned: Any) -> None:
        # aiokafka's fetcher starts on a new assignment (at earliest, for a partition without
        # a committed offset) while this listener runs, and getmany hands its records over:
        # paused until every partition is placed, so a fresh group never acts on retained
        # detections from before its look-back. A placement that fails leaves them paused
        # and ``failed`` set, which stops the consumer (fail closed).
        partitions = list(assigned)
        if not partitions:
            return
        self.consumer.pause(*partitions)
        self.placing = True
        try:
            await self._place(partitions)
        except Exception as exc:  # noqa: BLE001 - handed to consume_committed, which raises
            self.failed = exc
            return
        finally:
            self.placing = False
        self.consumer.resume(*partitions)

    async def _place(self, partitions: list[Any]) -> None:
        fresh = []
        for tp in partitions:
            if await self.consumer.committed(tp) is None:
                fresh.append(tp)
            else:
                self._since.pop(tp, None)  # resumes from its offsets, whatever their time
        if not fresh:
            return
        since = int(time.time() * 1000) - self.lookback_ms
        self._since.update(dict.fromkeys(fresh, since))
        # The end offsets before the time query: a record that lands after the query found
        # nothing recent is at or past them, so it is read. (seek_to_end resolved the end
        # later, one partition after another, and skipped a detection published meanwhile:
        # the benchmark's first runbook on a fresh group, now and then.)
        ends = await self.consumer.end_offsets(fresh)
        found = await self.consumer.offsets_for_times({tp: since for tp in fresh})
        for tp, offset in start_offsets(fresh, ends, found).items():
            self.consumer.seek(tp, offset)
        self.placed = True
        log.info("new dispatcher group: %d partition(s) start %d s back", len(fresh),
                 self.lookback_ms // 1000)


async def _until_accepted(handle: Callable[[bytes, int | None], Awaitable[object]], raw: bytes,
                          received_ms: int | None, stop: asyncio.Event, what: str) -> None:
    """Hand one record over, retrying while Temporal is unreachable (a server restart must not
    stop the consumer, nor skip a record: the offset is committed only after this)."""
    from temporalio.service import RPCError

    delay = 0.5
    while not stop.is_set():
        try:
            await handle(raw, received_ms)
            return
        except RPCError as exc:
            log.warning("Temporal refused %s (%s); retrying in %.1f s", what, exc.message, delay)
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
                    await dispatcher.take_topology(msg.value, msg.timestamp)
            if not caught_up.is_set():
                positions = {tp: await consumer.position(tp) for tp in tps}
                if all(positions[tp] >= ends[tp] for tp in tps):
                    caught_up.set()
    finally:
        caught_up.set()
        await consumer.stop()
