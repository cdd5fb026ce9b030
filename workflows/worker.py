"""The Temporal worker of the runbooks: registers every workflow and the activities given to it.

``run_worker(settings, client, fabric_activities, budget_activities, ...)`` runs until
``stop`` is set (or the task is cancelled). The client must use ``pydantic_data_converter``
(``connect(settings)`` builds one), because every input and output is a pydantic model.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib.util
import logging
import os
import py_compile
import sys
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
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

log = logging.getLogger(__name__)


def workflow_module_files(workflows: Sequence[type] = WORKFLOWS) -> list[str]:
    """The source files the sandbox executes afresh for every workflow run: each workflow
    class's module and the packages above it (what they import is passed through)."""
    files: dict[str, None] = {}
    for cls in workflows:
        parts = cls.__module__.split(".")
        for i in range(1, len(parts) + 1):
            path = getattr(sys.modules.get(".".join(parts[:i])), "__file__", None)
            if path and path.endswith(".py"):
                files[path] = None
    return list(files)


def bytecode_current(path: str) -> bool:
    """Whether the import system would load ``path``'s cached bytecode instead of compiling
    it: the cache exists, is this interpreter's, and matches the source (timestamp and
    size, or the source hash for a hash-based cache)."""
    try:
        head = Path(importlib.util.cache_from_source(path)).read_bytes()[:16]
        stat = os.stat(path)
    except OSError:
        return False
    if len(head) < 16 or head[:4] != importlib.util.MAGIC_NUMBER:
        return False
    flags = int.from_bytes(head[4:8], "little")
    if flags == 0:
        return (int.from_bytes(head[8:12], "little") == int(stat.st_mtime) & 0xFFFFFFFF
                and int.from_bytes(head[12:16], "little") == stat.st_size & 0xFFFFFFFF)
    return head[8:16] == importlib.util.source_hash(Path(path).read_bytes())


def write_bytecode(files: Sequence[str]) -> list[str]:
    """Make sure each file has current cached bytecode where the import system looks.

    The workflow sandbox imports the workflow's module anew for every workflow it starts
    (and for every one it takes back into its cache), through the normal loader: with a
    current .pyc that is a read, without one a compile of the source (the runbook module:
    ~20 ms of CPU holding the event loop, more than the rest of a run's first workflow
    task). Images commonly set PYTHONDONTWRITEBYTECODE, which leaves no .pyc behind, so the
    worker writes them itself; an installed package (pip compiles at install) already has
    them, which is all a read-only image needs. Returns the files left without one (their
    runs compile them, and it says so).
    """
    failed = []
    for path in files:
        if bytecode_current(path):
            continue
        try:
            py_compile.compile(path, cfile=importlib.util.cache_from_source(path), doraise=True,
                               invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
        except (OSError, py_compile.PyCompileError) as exc:
            failed.append(path)
            log.warning("no bytecode cache for %s (%s): the workflow sandbox compiles it on "
                        "every workflow run", path, exc)
    return failed


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
    write_bytecode(workflow_module_files())
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
