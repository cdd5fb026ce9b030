"""The incident consumer: ``fabric.incidents`` in, one ``IncidentRunbook`` per incident out.

Every message is signal-with-started into ``incident/{fabric}/{incident id}`` (signal
``incident``, ``USE_EXISTING``): the first message starts the runbook (which pages), later
ones update it, the ``closed`` one ends it. Exactly once: the id reuse policy
``REJECT_DUPLICATE`` refuses a new run of an incident whose runbook has finished, so a
replayed message (a new consumer group, a restart before the commit) pages nobody again.
Offsets are committed only after Temporal accepted the batch (at-least-once, made
idempotent by the id, and by the runbook ignoring a message older than the last it saw).

Breaker incidents (``breaker/{su}``) are the runbooks' own (``incident_join``); the records
their runbook publishes (source ``fabricwatch-runbooks``) are skipped here.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from schemas import ContractError
from schemas.acceptance import DEFAULT_BOUNDS, TimeBounds, accept
from schemas.events import Incident, IncidentCause
from schemas.topics import INCIDENTS
from workflows.incident.models import (
    BREAKER_PREFIX,
    IncidentConfig,
    IncidentInput,
    IncidentSnapshot,
    incident_workflow_id,
)

log = logging.getLogger(__name__)
RUNBOOKS_SOURCE = "fabricwatch-runbooks"  # the source of the breaker incidents' own records


@dataclass
class IncidentStats:
    seen: int = 0
    delivered: int = 0
    finished: int = 0  # the incident's runbook had already closed: nothing to do
    invalid: int = 0
    ignored: int = 0  # another fabric's, or a breaker incident's own record
    planned: int = 0  # inside a maintenance window: recorded by the ledger, nobody paged


class IncidentDispatcher:
    def __init__(self, client: Client, *, task_queue: str,
                 config: IncidentConfig | None = None, fabric: str | None = None,
                 bounds: TimeBounds = DEFAULT_BOUNDS) -> None:
        self.client = client
        self.task_queue = task_queue
        self.config = config or IncidentConfig()
        self.fabric = fabric
        self.bounds = bounds
        self.stats = IncidentStats()

    async def handle(self, ev: Incident) -> bool:
        """Start or signal the incident's runbook; False when it had already finished."""
        self.stats.seen += 1
        if self.fabric is not None and ev.fabric != self.fabric:
            self.stats.ignored += 1
            return False
        if ev.incident.startswith(BREAKER_PREFIX) and ev.source == RUNBOOKS_SOURCE:
            # the runbooks' own breaker incident, recorded by its runbook: nothing to start
            self.stats.ignored += 1
            return False
        if ev.cause == IncidentCause.MAINTENANCE:
            # planned work: whoever opened the window is on it; its detections start nothing
            # and the ledger keeps the incident, but a page would be noise
            self.stats.planned += 1
            log.info("incident %s is inside maintenance (%s): not paged", ev.incident, ev.root)
            return False
        snap = IncidentSnapshot.from_event(ev)
        wf_id = incident_workflow_id(ev.fabric, ev.incident)
        reuse = WorkflowIDReusePolicy.REJECT_DUPLICATE
        try:
            await self.client.start_workflow(
                "IncidentRunbook", IncidentInput(snapshot=snap, config=self.config), id=wf_id,
                task_queue=self.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                id_reuse_policy=reuse, start_signal="incident", start_signal_args=[snap])
        except WorkflowAlreadyStartedError:
            self.stats.finished += 1
            log.info("incident %s: its runbook %s has finished; message ignored",
                     ev.incident, wf_id)
            return False
        self.stats.delivered += 1
        return True

    async def handle_raw(self, raw: bytes, received_ms: int | None = None) -> bool:
        try:
            event = accept(INCIDENTS, raw, received_ms=received_ms, bounds=self.bounds)
        except ContractError as exc:
            self.stats.invalid += 1
            log.warning("skipping an invalid incident message: %s", exc)
            return False
        if not isinstance(event, Incident):
            self.stats.invalid += 1
            return False
        return await self.handle(event)


NEW_GROUP_LOOKBACK_MS = 6 * 3600_000


async def run_incident_consumer(dispatcher: IncidentDispatcher, bootstrap: str, *,
                                group_id: str = "fabricwatch-incidents",
                                stop: asyncio.Event | None = None,
                                new_group_lookback_ms: int = NEW_GROUP_LOOKBACK_MS) -> None:
    """Consume ``fabric.incidents`` until ``stop``; commit after Temporal took each batch.

    A group with committed offsets resumes from them. A new group starts
    ``new_group_lookback_ms`` back (by record time), as the detection dispatcher does: a
    first deployment does not page for every incident the topic still retains; an older
    incident still open is picked up at its next message.
    """
    from workflows.dispatch import consume_committed

    async def handle(raw: bytes, received_ms: int | None) -> None:
        await dispatcher.handle_raw(raw, received_ms)

    await consume_committed(INCIDENTS.name, bootstrap, group_id, handle,
                            stop=stop or asyncio.Event(), lookback_ms=new_group_lookback_ms,
                            max_records=200, what="an incident start")
