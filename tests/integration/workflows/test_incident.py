"""The incident runbook on the real Temporal dev server: one page for an incident of 50
ports, one update when a member joins, ack, resolve on the stream's ``closed`` message, a
replayed message paging nobody; and the breaker: budget refusals join the SU's breaker
incident (one page, no page per port) whose approve reaches every member runbook."""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr
from temporalio.client import Client, WorkflowHandle
from temporalio.testing import WorkflowEnvironment
from test_remediation import make_input, start, until, wid
from wf_helpers import FileFabric, TicketServer, fabric_activities

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: the fakes package
from fakes.alert_receivers import PagerDutyServer  # noqa: E402

from schemas.events import Incident, IncidentCause
from workflows.adapters.notify import FileNotifier, Notifier, PagerDutyNotifier, read_alerts_file
from workflows.adapters.records import MemorySink
from workflows.budget.activities import BudgetActivities
from workflows.incident.activities import IncidentActivities
from workflows.incident.dispatch import IncidentDispatcher
from workflows.incident.models import (
    Decision,
    IncidentConfig,
    IncidentView,
    alert_key,
    breaker_incident,
    incident_workflow_id,
)
from workflows.incident.workflows import IncidentRunbook
from workflows.remediation.models import AbortRequest
from workflows.remediation.workflows import PortRemediation
from workflows.worker import activity_functions, build_worker

pytestmark = pytest.mark.integration

CFG = IncidentConfig(debounce_s=0.5, notify_timeout_s=10, signal_timeout_s=10)


@asynccontextmanager
async def incident_worker(client: Client, task_queue: str, alerts: Path, fabric: FileFabric,
                          tickets: TicketServer, notifier: Notifier | None = None
                          ) -> AsyncIterator[Any]:
    acts, sink = fabric_activities(fabric, tickets.url)
    incident = IncidentActivities(client, notifier or FileNotifier(alerts), task_queue,
                                  records=sink)
    worker = build_worker(client, task_queue, activity_functions(
        acts, BudgetActivities(client, task_queue), incident=incident))
    try:
        async with worker:
            yield sink
    finally:
        await acts.aclose()


def incident_event(fab: str, inc: str, state: str, members: list[str], *,
                   ts: int | None = None, ended: int | None = None) -> Incident:
    now = ts or int(time.time() * 1000)
    return Incident(id=f"{inc}/{state}/{now}", ts=now, fabric=fab, source="correlator",
                    incident=inc, cause=IncidentCause.SWITCH_REBOOT, root="spine-07",
                    state=state, started=now - 2000, ended=ended, members=members)  # type: ignore[arg-type]


async def until_view(handle: WorkflowHandle[Any, Any], pred: Callable[[IncidentView], bool],
                     within: float = 30.0) -> IncidentView:
    deadline = asyncio.get_running_loop().time() + within
    while True:
        view: IncidentView = await handle.query(IncidentRunbook.status)
        if pred(view):
            return view
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"incident never reached the state: {view}")
        await asyncio.sleep(0.1)


def alerts_of(path: Path, key: str) -> list[dict[str, Any]]:
    return [a for a in read_alerts_file(path) if a["key"] == key]


async def test_one_page_for_fifty_ports_update_ack_resolve(
        wf_env: WorkflowEnvironment, tmp_path: Path, ticket_server: TicketServer,
        task_queue: str) -> None:
    client = wf_env.client
    fab = f"f{uuid.uuid4().hex[:8]}"
    inc = f"inc-{uuid.uuid4().hex[:8]}"
    alerts = tmp_path / "alerts.jsonl"
    key = alert_key(fab, inc)
    members = [f"spine-07:{i}" for i in range(1, 51)]
    dispatcher = IncidentDispatcher(client, task_queue=task_queue, config=CFG)
    async with incident_worker(client, task_queue, alerts, FileFabric(tmp_path),
                               ticket_server) as sink:
        opened = incident_event(fab, inc, "open", members)
        assert await dispatcher.handle(opened)
        handle = client.get_workflow_handle_for(IncidentRunbook.run, incident_workflow_id(fab, inc))
        view = await until_view(handle, lambda v: v.alerts_sent == 1)
        assert view.members == sorted(members) and view.waiting_for == "ack"
        assert await dispatcher.handle(opened)  # the same message again (a redelivery)
        await asyncio.sleep(1.5)
        (page,) = alerts_of(alerts, key)  # one page for fifty ports
        assert page["action"] == "trigger" and page["details"]["member_count"] == 50
        assert page["labels"] == {"incident": inc, "cause": "switch_reboot",
                                  "root": "spine-07"}

        # a member more: the one alert is updated
        await dispatcher.handle(incident_event(fab, inc, "update", [*members, "spine-07:51"]))
        await until_view(handle, lambda v: v.alerts_sent == 2)
        assert [a["action"] for a in alerts_of(alerts, key)] == ["trigger", "update"]
        assert alerts_of(alerts, key)[-1]["details"]["member_count"] == 51
        # an older message than the last one changes nothing
        await dispatcher.handle(incident_event(fab, inc, "update", members[:3],
                                               ts=opened.ts - 1))

        await handle.signal(IncidentRunbook.ack, Decision(actor="oncall-ann"))
        view = await until_view(handle, lambda v: v.acked_by == "oncall-ann")
        assert view.waiting_for == "close" and len(view.members) == 51

        closed = incident_event(fab, inc, "closed", [*members, "spine-07:51"],
                                ended=int(time.time() * 1000))
        await dispatcher.handle(closed)
        result = await asyncio.wait_for(handle.result(), 30)
        assert result.outcome == "closed" and len(result.members) == 51
        assert [a["action"] for a in alerts_of(alerts, key)] == [
            "trigger", "update", "acknowledge", "resolve"]
        assert alerts_of(alerts, key)[-1]["ended_ms"] == closed.ended

        # replayed after the end (a new consumer group): nobody is paged again
        assert not await dispatcher.handle(opened)
        assert not await dispatcher.handle(closed)
        assert dispatcher.stats.finished == 2
        assert len(alerts_of(alerts, key)) == 4
        # who was told is in the ledger: a page record per delivered message, on the root
        told = [a for a in sink.actions() if a.workflow_id == inc and a.step == "page"]
        assert [(a.device, a.port, a.note.split(" ")[0]) for a in told] == [
            ("spine-07", 0, act) for act in ("trigger", "update", "acknowledge", "resolve")]
        assert all(a.outcome == "done" and "file" in (a.note or "") for a in told)


async def test_a_human_close_resolves(wf_env: WorkflowEnvironment, tmp_path: Path,
                                      ticket_server: TicketServer, task_queue: str) -> None:
    client = wf_env.client
    fab = f"f{uuid.uuid4().hex[:8]}"
    inc = f"inc-{uuid.uuid4().hex[:8]}"
    alerts = tmp_path / "alerts.jsonl"
    dispatcher = IncidentDispatcher(client, task_queue=task_queue, config=CFG)
    async with incident_worker(client, task_queue, alerts, FileFabric(tmp_path),
                               ticket_server):
        await dispatcher.handle(incident_event(fab, inc, "open", ["spine-07:1"]))
        handle = client.get_workflow_handle_for(IncidentRunbook.run, incident_workflow_id(fab, inc))
        await until_view(handle, lambda v: v.alerts_sent == 1)
        await handle.signal(IncidentRunbook.close, Decision(actor="oncall-bo", note="fixed"))
        result = await asyncio.wait_for(handle.result(), 30)
    assert result.outcome == "closed_by_human"
    assert [a["action"] for a in alerts_of(alerts, alert_key(fab, inc))] == [
        "trigger", "resolve"]


async def test_breaker_refusals_join_the_su_incident_and_page_once(
        wf_env: WorkflowEnvironment, tmp_path: Path, ticket_server: TicketServer,
        task_queue: str) -> None:
    """SU limit 1: the first port isolates; the next three are refused. They publish their
    breaker_open detections but page nobody themselves: they join the SU's breaker incident,
    which pages once, lists them, and its one approve lets all three go on."""
    client = wf_env.client
    fabric = FileFabric(tmp_path)
    fab = f"f{uuid.uuid4().hex[:8]}"
    alerts = tmp_path / "alerts.jsonl"
    holder = make_input("leaf-su03-r1", 1, su="su03", su_limit=1, fabric=fab)
    refused = [make_input(f"leaf-su03-r{i}", i, su="su03", su_limit=1, fabric=fab)
               for i in (2, 3, 4)]
    inc_id = incident_workflow_id(fab, breaker_incident("su03"))
    key = alert_key(fab, breaker_incident("su03"))
    async with incident_worker(client, task_queue, alerts, fabric, ticket_server) as sink:
        hh = await start(client, holder, task_queue)
        await until(hh, lambda s: s.waiting_for == "clean-and-reseat")
        handles = [await start(client, inp, task_queue) for inp in refused]
        for h in handles:
            st = await until(h, lambda s: s.state == "awaiting_approval")
            assert st.incident == inc_id and not st.isolated
        inc = client.get_workflow_handle_for(IncidentRunbook.run, inc_id)
        view = await until_view(inc, lambda v: len(v.runbooks) == 3 and v.alerts_sent >= 1)
        assert view.cause == "breaker" and view.root == "su03" and view.su == "su03"
        assert view.members == sorted(i.port.key for i in refused)
        assert view.waiting_for == "approve"
        # the joins after the first are one debounced update (5 s by default)
        deadline = time.monotonic() + 30
        while alerts_of(alerts, key)[-1]["details"]["member_count"] != 3:  # noqa: ASYNC110
            assert time.monotonic() < deadline, alerts_of(alerts, key)
            await asyncio.sleep(0.2)
        sent = alerts_of(alerts, key)
        assert [a["action"] for a in sent].count("trigger") == 1  # one page for the SU
        assert sent[-1]["details"]["member_count"] == 3
        # no page per port: the runbooks' own pages would have gone to the ticket webhook
        for inp in refused:
            assert ticket_server.ops(wid(inp), "page") == []
        breakers = [r for r in sink.records.values() if getattr(r, "detection", "")
                    == "breaker_open"]
        assert sorted(b.device for b in breakers) == ["leaf-su03-r2", "leaf-su03-r3",
                                                      "leaf-su03-r4"]

        await inc.signal(IncidentRunbook.approve, Decision(actor="lead-eve",
                                                           note="known firmware wave"))
        result = await asyncio.wait_for(inc.result(), 60)
        assert result.outcome == "closed_by_human" and len(result.members) == 3
        for h in handles:  # each member runbook got the one approve and went on
            st = await until(h, lambda s: s.waiting_for == "clean-and-reseat")
            assert st.isolated
            assert any(e.step == "approve" and e.actor == "lead-eve" for e in st.history)
        assert alerts_of(alerts, key)[-1]["action"] == "resolve"
        # recorded as the stream's incidents are (the ledger's incidents_current)
        own = sorted((r for r in sink.records.values() if isinstance(r, Incident)),
                     key=lambda r: r.ts)
        assert own[0].state == "open" and own[-1].state == "closed"
        assert own[-1].incident == "breaker/su03" and own[-1].cause == "breaker"
        assert own[-1].root == "su03" and own[-1].members == view.members
        assert own[-1].source == "fabricwatch-runbooks"
        # the consumer skips these records of the runbooks' own: nothing starts again
        assert not await IncidentDispatcher(client, task_queue=task_queue).handle(own[-1])

        for h in (hh, *handles):
            await h.signal(PortRemediation.abort, AbortRequest(actor="t"))
            await asyncio.wait_for(h.result(), 60)


async def test_an_undelivered_page_is_retried_never_counted_as_sent(
        wf_env: WorkflowEnvironment, tmp_path: Path, ticket_server: TicketServer,
        task_queue: str) -> None:
    """PagerDuty (a loopback server that checks the Events API v2 schema) is down for the
    first attempts: the incident's page is retried until accepted, and only then counted;
    ack and close reach it as acknowledge and resolve with the incident's dedup_key."""
    pd = PagerDutyServer()
    await pd.start()
    pd.fail_next = 2
    notifier = PagerDutyNotifier(SecretStr("0123456789abcdef0123456789abcdef"), url=pd.url)
    client = wf_env.client
    fab = f"f{uuid.uuid4().hex[:8]}"
    inc = f"inc-{uuid.uuid4().hex[:8]}"
    try:
        async with incident_worker(client, task_queue, tmp_path / "unused.jsonl",
                                   FileFabric(tmp_path), ticket_server, notifier):
            dispatcher = IncidentDispatcher(client, task_queue=task_queue, config=CFG)
            await dispatcher.handle(incident_event(fab, inc, "open", ["spine-07:1"]))
            handle = client.get_workflow_handle_for(IncidentRunbook.run,
                                                    incident_workflow_id(fab, inc))
            await asyncio.sleep(1.0)
            view = await handle.query(IncidentRunbook.status)
            assert view.alerts_sent == 0 and pd.events == []  # down: not sent, not counted
            view = await until_view(handle, lambda v: v.alerts_sent == 1, within=60)
            assert view.receivers == ["pagerduty"] and pd.fail_next == 0
            await handle.signal(IncidentRunbook.ack, Decision(actor="oncall-ann"))
            await until_view(handle, lambda v: v.alerts_sent == 2)
            await handle.signal(IncidentRunbook.close, Decision(actor="oncall-ann"))
            await asyncio.wait_for(handle.result(), 30)
        key = alert_key(fab, inc)
        assert [e["event_action"] for e in pd.events] == ["trigger", "acknowledge", "resolve"]
        assert {e["dedup_key"] for e in pd.events} == {key}
        assert pd.incidents[key] == "resolved" and pd.refused == []
        assert not (tmp_path / "unused.jsonl").exists()
    finally:
        await notifier.aclose()
        await pd.stop()


async def test_a_refused_alert_is_shown_not_counted_and_the_incident_goes_on(
        wf_env: WorkflowEnvironment, tmp_path: Path, ticket_server: TicketServer,
        task_queue: str) -> None:
    pd = PagerDutyServer()
    await pd.start()
    notifier = PagerDutyNotifier(SecretStr("not-an-integration-key"), url=pd.url)
    client = wf_env.client
    fab = f"f{uuid.uuid4().hex[:8]}"
    inc = f"inc-{uuid.uuid4().hex[:8]}"
    try:
        async with incident_worker(client, task_queue, tmp_path / "unused.jsonl",
                                   FileFabric(tmp_path), ticket_server, notifier):
            await IncidentDispatcher(client, task_queue=task_queue, config=CFG).handle(
                incident_event(fab, inc, "open", ["spine-07:1"]))
            handle = client.get_workflow_handle_for(IncidentRunbook.run,
                                                    incident_workflow_id(fab, inc))
            view = await until_view(handle, lambda v: v.alert_error is not None)
            assert view.alerts_sent == 0 and "routing_key" in view.alert_error
            assert "not-an-integration-key" not in view.alert_error
            await handle.signal(IncidentRunbook.close, Decision(actor="oncall-bo"))
            result = await asyncio.wait_for(handle.result(), 30)
        assert result.outcome == "closed_by_human" and result.alerts_sent == 0
        assert pd.events == [] and len(pd.refused) == 2  # the trigger and the resolve
    finally:
        await notifier.aclose()
        await pd.stop()


async def test_a_runbook_page_is_one_alert_resolved_when_the_runbook_ends(
        wf_env: WorkflowEnvironment, tmp_path: Path, ticket_server: TicketServer,
        task_queue: str) -> None:
    """The worker's pages go through the notifier (``NotifierTicketing``), tickets to the
    webhook: a runbook whose isolation the controller refuses needs a human, which is one
    alert keyed by its workflow id; the runbook's end resolves it."""
    from workflows.adapters.k8s import NoFencer
    from workflows.adapters.sim import SimChecker, SimControllerAdapter, SimEvidence
    from workflows.adapters.ticket import NotifierTicketing, WebhookTicketing
    from workflows.remediation.activities import FabricActivities

    client = wf_env.client
    fabric = FileFabric(tmp_path)
    fabric.fail(isolate="reject")
    alerts = tmp_path / "alerts.jsonl"
    adapter = SimControllerAdapter(fabric, fabric.dir)
    acts = FabricActivities(records=MemorySink(), controller=adapter,
                            evidence=SimEvidence(adapter), checker=SimChecker(adapter),
                            fencer=NoFencer(), ticketing=NotifierTicketing(
                                FileNotifier(alerts), WebhookTicketing(ticket_server.url)))
    worker = build_worker(client, task_queue, activity_functions(
        acts, BudgetActivities(client, task_queue)))
    inp = make_input("leaf-su05-r1", 9, su="su05")
    try:
        async with worker:
            h = await start(client, inp, task_queue)
            await until(h, lambda s: s.state == "needs_human")
            await h.signal(PortRemediation.abort, AbortRequest(actor="lead"))
            result = await asyncio.wait_for(h.result(), 60)
    finally:
        await acts.aclose()
    assert result.outcome == "aborted"
    sent = alerts_of(alerts, wid(inp))
    assert [a["action"] for a in sent] == ["trigger", "resolve"]
    assert sent[0]["kind"] == "runbook" and sent[0]["labels"]["port"] == "leaf-su05-r1:9"
    assert "could not complete" in sent[0]["summary"]
    assert ticket_server.ops(wid(inp), "page") == []  # pages are alerts, not ticket ops
