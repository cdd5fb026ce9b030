"""The Temporal worker of the runbooks: registers every workflow and the activities given to it.

``run_worker(settings, client, fabric_activities, budget_activities, ...)`` runs until
``stop`` is set (or the task is cancelled). The client must use ``pydantic_data_converter``
(``connect(settings)`` builds one), because every input and output is a pydantic model.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Worker

from runtime.settings import Settings
from workflows.audit import AuditActivities, TopologyAudit
from workflows.budget.activities import BudgetActivities
from workflows.budget.workflows import IsolationBudget
from workflows.incident.activities import IncidentActivities
from workflows.incident.workflows import IncidentRunbook
from workflows.remediation.activities import EvidenceActivities, FabricActivities
from workflows.remediation.workflows import PortRemediation

WORKFLOWS: tuple[type, ...] = (PortRemediation, IsolationBudget, TopologyAudit, IncidentRunbook)


async def connect(settings: Settings, *, target: str | None = None) -> Client:
    """A client to the configured Temporal frontend with the pydantic converter."""
    return await Client.connect(target or settings.temporal.target,
                                namespace=settings.temporal.namespace,
                                data_converter=pydantic_data_converter)


def incident_activities(fabric: FabricActivities, budget: BudgetActivities
                        ) -> IncidentActivities:
    """The incident runbook's activities with the worker's notifier: the one its pages go
    through (``NotifierTicketing``), else its ticket system's pages."""
    from workflows.adapters.notify import Notifier, TicketingNotifier

    notifier: Notifier = getattr(fabric.ticketing, "notifier", None) or TicketingNotifier(
        fabric.ticketing)
    return IncidentActivities(budget.client, notifier, budget.task_queue,
                              records=fabric.records)


def activity_functions(fabric: FabricActivities, budget: BudgetActivities,
                       audit: AuditActivities | None = None,
                       incident: IncidentActivities | None = None) -> list[Callable[..., Any]]:
    incident = incident or incident_activities(fabric, budget)
    funcs: list[Callable[..., Any]] = [
        fabric.record_action, fabric.capture_evidence, fabric.isolate_port,
        fabric.unisolate_port, fabric.reset_counters, fabric.repair_step, fabric.fence_node,
        fabric.unfence_node, fabric.run_check, fabric.ticket, fabric.open_breaker,
        fabric.port_state, budget.acquire, budget.release, budget.rail_hold, budget.rail_release,
        incident.notify, incident.join, incident.signal_runbooks, incident.record,
    ]
    if audit is not None:
        funcs.append(audit.audit_topology)
    return funcs


def build_worker(client: Client, task_queue: str, activities: Sequence[Callable[..., Any]],
                 *, identity: str | None = None,
                 graceful_shutdown: timedelta = timedelta(seconds=10)) -> Worker:
    return Worker(
        client, task_queue=task_queue, workflows=list(WORKFLOWS), activities=list(activities),
        # activities are async; this executor is only for any sync activity added later
        activity_executor=concurrent.futures.ThreadPoolExecutor(max_workers=8),
        graceful_shutdown_timeout=graceful_shutdown,
        identity=identity,
    )


async def run_worker(settings: Settings, client: Client, fabric: FabricActivities,
                     budget: BudgetActivities | None = None, audit: AuditActivities | None = None,
                     *, task_queue: str | None = None,
                     stop: asyncio.Event | None = None) -> None:
    """Run the worker on ``settings.temporal.task_queue`` until ``stop`` is set."""
    from workflows.incident.activities import default_config

    queue = task_queue or settings.temporal.task_queue
    budget = budget or BudgetActivities(client, queue)
    incident = incident_activities(fabric, budget)
    incident.config = default_config(settings.notify.horizon_s)
    worker = build_worker(client, queue, activity_functions(fabric, budget, audit, incident))
    if stop is None:
        await worker.run()
        return
    async with worker:
        await stop.wait()


async def run_evidence_worker(client: Client, task_queue: str, evidence: EvidenceActivities,
                              *, stop: asyncio.Event) -> None:
    """Serve the evidence activity alone on ``task_queue`` (no workflows) until ``stop``."""
    worker = Worker(client, task_queue=task_queue, activities=[evidence.capture_evidence],
                    graceful_shutdown_timeout=timedelta(seconds=10))
    async with worker:
        await stop.wait()
