"""The inventory decides who may act, on the real broker, Temporal, the simulator's controller
and the chdb ledger: detections for devices and ports the fabric's topology does not have
(hostile names among them) start no runbook and reach no controller; each such port is
recorded and paged as ``unknown_device`` once, however often it flaps. A detection for a
cabled port, published after them, still starts its runbook (so the dispatcher did read
them all, and a gate that refused everything would fail this test).

Twice: with flap detections published as the detector would (three episodes per port), and
with the ports really flapping (link-down port events through the stream worker's flap
detector to ``fabric.detections``)."""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment
from test_remediation import FAST, until
from wf_helpers import TicketServer

from collectors.publish import Publisher
from ledger.embedded import EmbeddedLedger
from schemas.events import (
    Action,
    Detection,
    DetectionKind,
    PortEvent,
    Severity,
    Topology,
    TopologyLink,
)
from schemas.policy import Policy
from sim.controller import SimController
from workflows.adapters.k8s import NoFencer
from workflows.adapters.records import LedgerSink
from workflows.adapters.sim import SimChecker, SimControllerAdapter, SimEvidence
from workflows.adapters.ticket import WebhookTicketing
from workflows.budget.activities import BudgetActivities
from workflows.dispatch import Dispatcher, run_dispatcher
from workflows.inventory import Inventory
from workflows.remediation.activities import FabricActivities
from workflows.remediation.models import cable_workflow_id
from workflows.remediation.workflows import PortRemediation
from workflows.worker import activity_functions, build_worker

sys.path.insert(0, str(Path(__file__).parents[1]))  # stream_helpers: the stream worker

from stream_helpers import Worker, publish  # noqa: E402

pytestmark = pytest.mark.integration
KNOWN = ("leaf-su01-r1", 3)
LINKS = [TopologyLink(a_device=f"leaf-su01-r{r}", a_port=n + 1,
                      b_device=f"node{n:04d}/mlx5_{r}", b_port=1)
         for r in range(2) for n in range(8)]

HOSTILE = [("$(touch x)", 1), ("; rm -rf /", 2), ("leaf-su01-r1\u202egnp.exe", 3),
           ("--help", 4), ("leaf-su09-r4", 5),  # a plain leaf the fabric does not have
           ("leaf-su01-r1", 40)]  # a device the fabric has, a port it has not cabled


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[EmbeddedLedger]:
    led = EmbeddedLedger(tmp_path / "ledger")
    try:
        led.migrate()
        yield led
    finally:
        led.close()


def flap(fabric: str, device: str, port: int, n: int) -> Detection:
    return Detection(id=f"{fabric}-{uuid.uuid4().hex[:8]}", ts=int(time.time() * 1000),
                     fabric=fabric, source="streams", device=device, port=port,
                     detection=DetectionKind.FLAP, severity=Severity.CRITICAL,
                     action=Action.ISOLATE_PORT, episode=f"ep{n}-{device}:{port}",
                     evidence={"downs": 3, "window_s": 1800})


Send = Callable[[str], Awaitable[None]]


async def scenario(env: WorkflowEnvironment, bootstrap: str, tmp_path: Path,
                   ticket_server: TicketServer, task_queue: str, ledger: EmbeddedLedger,
                   fabric: str, send: Send, *, within: float = 60) -> tuple[Dispatcher, SimController]:
    """The topology, then ``send(fabric)``; runs the dispatcher and a runbook worker until
    the cabled port's runbook has isolated it (its detection is sent last)."""
    client = env.client
    sim = SimController(tmp_path / "sim", fix_chance={"clean-and-reseat": 1.0})
    # what a running simulator tells the controller: its fabric's ports
    sim.record_fabric(fabric, sorted({f"{d}:{p}" for link in LINKS for d, p in (
        (link.a_device, link.a_port), (link.b_device, link.b_port))}))
    adapter = SimControllerAdapter(sim, tmp_path / "sim")
    acts = FabricActivities(records=LedgerSink(ledger), controller=adapter,
                            evidence=SimEvidence(adapter), checker=SimChecker(adapter),
                            fencer=NoFencer(), ticketing=WebhookTicketing(ticket_server.url))
    async with Publisher(bootstrap) as pub:
        await pub.send(Topology(id=f"topo-{fabric}", ts=int(time.time() * 1000), fabric=fabric,
                                source="ibnetdiscover", links=LINKS))
    await send(fabric)
    dispatcher = Dispatcher(client, Policy(), Inventory(), task_queue=task_queue, timeouts=FAST,
                            fabric=fabric, ticketing=acts.ticketing, records=acts.records)
    stop = asyncio.Event()
    worker = build_worker(client, task_queue,
                          activity_functions(acts, BudgetActivities(client, task_queue)))
    handle = client.get_workflow_handle_for(
        PortRemediation.run, cable_workflow_id(fabric, KNOWN, ("node0002/mlx5_1", 1)))
    try:
        async with worker:
            disp = asyncio.create_task(run_dispatcher(dispatcher, bootstrap,
                                                      group_id=f"g-{fabric}", stop=stop))
            for _ in range(int(within * 10)):  # the cabled port's detection comes last
                try:
                    await handle.describe()
                    break
                except RPCError:
                    await asyncio.sleep(0.1)
            await until(handle, lambda s: s.waiting_for == "clean-and-reseat", within=60)
            await asyncio.sleep(1.0)  # room for anything it would (wrongly) start
            stop.set()
            await asyncio.wait_for(disp, 30)
            await handle.terminate("test over")
    finally:
        await acts.aclose()
    return dispatcher, sim


async def nothing_started(env: WorkflowEnvironment, dispatcher: Dispatcher, sim: SimController,
                          ticket_server: TicketServer, ledger: EmbeddedLedger, fabric: str,
                          detections_each: int) -> None:
    # every detection of an unknown port was turned away (at least once: a rebalance before
    # the first commit reads a batch again)
    assert dispatcher.stats.unknown >= detections_each * len(HOSTILE)
    for device, port in HOSTILE:
        wf_id = cable_workflow_id(fabric, (device, port), None)
        with pytest.raises(RPCError) as err:
            await env.client.get_workflow_handle(wf_id).describe()
        assert err.value.status == RPCStatusCode.NOT_FOUND, wf_id
    # the controller saw the cabled port only (a hostile name never reached it)
    assert {c["key"] for c in sim.commands()} == {f"{KNOWN[0]}:{KNOWN[1]}"}
    assert sim.isolated_ports() == [f"{KNOWN[0]}:{KNOWN[1]}"]
    pages = [r for r in ticket_server.requests
             if r["op"] == "page" and r["key"].startswith("unknown_device/")
             and r["details"].get("fabric") == fabric]
    assert len(pages) == len(HOSTILE)  # one per port, not one per detection
    shown = {p["details"]["port"] for p in pages}
    assert "leaf-su01-r1\\u202egnp.exe:3" in shown and "$(touch x):1" in shown
    assert not any("\u202e" in p["summary"] or "\u202e" in p["key"] for p in pages)
    rows = ledger.query("SELECT device, port, action FROM detections FINAL "
                        "WHERE fabric = {f:String} AND detection = 'unknown_device'",
                        {"f": fabric})
    assert sorted((r["device"], r["port"]) for r in rows) == sorted(HOSTILE)
    assert {r["action"] for r in rows} == {"page"}


async def test_unknown_and_hostile_names_start_nothing_and_page_once(
        wf_env: WorkflowEnvironment, kafka_bootstrap: str, tmp_path: Path,
        ticket_server: TicketServer, task_queue: str, ledger: EmbeddedLedger) -> None:
    async def send(fabric: str) -> None:
        async with Publisher(kafka_bootstrap) as pub:
            for n in range(3):  # each unknown port flaps: three detections, three episodes
                for device, port in HOSTILE:
                    await pub.send(flap(fabric, device, port, n))
            await pub.send(flap(fabric, *KNOWN, 0))

    fabric = f"unk{uuid.uuid4().hex[:6]}"
    dispatcher, sim = await scenario(wf_env, kafka_bootstrap, tmp_path, ticket_server,
                                     task_queue, ledger, fabric, send)
    await nothing_started(wf_env, dispatcher, sim, ticket_server, ledger, fabric, 3)


async def test_hostile_names_flapping_through_the_worker_start_nothing(
        wf_env: WorkflowEnvironment, kafka_bootstrap: str, tmp_path: Path,
        ticket_server: TicketServer, task_queue: str, ledger: EmbeddedLedger) -> None:
    fabric = f"unw{uuid.uuid4().hex[:6]}"
    stream = Worker(kafka_bootstrap, tmp_path, f"fw-unknown-{fabric}")

    async def send(fabric: str) -> None:
        now = int(time.time() * 1000)
        events = []
        for device, port in [*HOSTILE, KNOWN]:  # four bounces each, the cabled port last
            for i in range(4):
                for state, at in (("down", i * 2_000), ("up", i * 2_000 + 500)):
                    events.append(PortEvent(id=f"{fabric}/{device}:{port}/{state}{i}",
                                            ts=now - 10_000 + at, fabric=fabric,
                                            source="opensm", device=device, port=port,
                                            state=state))
        await publish(kafka_bootstrap, list(events))

    await asyncio.to_thread(stream.start)
    try:
        dispatcher, sim = await scenario(wf_env, kafka_bootstrap, tmp_path, ticket_server,
                                         task_queue, ledger, fabric, send, within=120)
    finally:
        await asyncio.to_thread(stream.stop)
    await nothing_started(wf_env, dispatcher, sim, ticket_server, ledger, fabric, 1)
