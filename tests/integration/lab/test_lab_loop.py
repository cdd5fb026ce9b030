"""The real InfiniBand management stack in the loop (issue 12).

ibsim simulates the fabric, the real opensm manages it and infiniband-diags query it:

* a flapping link injected on ibsim's console -> opensm logs trap 128 -> the log follower
  (``OpensmTail``, resolving the trap with an iblinkinfo scan) -> ``fabric.port-events`` on the
  real broker -> the flap detector in the real ``fabricwatch worker`` (Faust) ->
  ``fabric.detections`` -> the dispatcher starts ``PortRemediation`` on the real Temporal
  server with the opensm adapter -> the port is disabled with ``ibportstate`` (``iblinkinfo``
  says ``Disabled``) -> after the technician's step and the return-to-service checks it is
  enabled again;
* a swap injected on the console is found by the topology diff on ibnetdiscover's output;
* counters set with ``PerformanceSet`` (saturated legacy registers too) arrive through the
  poller as the right ``counters`` events.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer  # type: ignore[import-untyped]
from lab_helpers import LAB_POLICY, StreamsWorker
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from collectors.ibdiags import parse_iblinkinfo
from collectors.ibnetdiscover import parse_ibnetdiscover
from collectors.live.poll_ibdiags import IbdiagsPoller, PollConfig
from collectors.live.tail_opensm import (
    LatestLids,
    LogFollower,
    OpensmTail,
    PortScan,
    follow_topology,
)
from collectors.live.tools import ToolRunner
from collectors.publish import Publisher
from fabricwatch.lab import LabStack
from schemas import Counters, Detection, PortEvent, decode
from schemas.policy import Policy
from schemas.topics import COUNTERS, DETECTIONS, PORT_EVENTS
from sim.topology import generate
from streams.engine import Engine
from streams.topology.logic import diff
from streams.topology.plan import load_plan
from workflows.adapters.k8s import NoFencer
from workflows.adapters.notify import FileNotifier
from workflows.adapters.opensm import OpensmChecker, OpensmController, OpensmEvidence
from workflows.adapters.records import MemorySink
from workflows.adapters.ticket import NotifierTicketing
from workflows.adapters.tools import CommandChecker
from workflows.budget.activities import BudgetActivities
from workflows.dispatch import Dispatcher, runbook_id
from workflows.inventory import Inventory
from workflows.remediation.activities import FabricActivities
from workflows.remediation.models import ActivityTimeouts, StepDone
from workflows.remediation.workflows import PortRemediation
from workflows.worker import activity_functions, build_worker

pytestmark = [pytest.mark.lab, pytest.mark.integration]

FAST = ActivityTimeouts(record=10, controller=20, evidence=20, evidence_heartbeat=10, ticket=10,
                        check=20, check_heartbeat=10, budget=10)


async def phys_state(runner: ToolRunner, device: str, port: int) -> str:
    text = await runner.check(["iblinkinfo", "--switches-only", "-l"], 30)
    for ev in parse_iblinkinfo(text, fabric="lab", ts=0):
        if ev.device == device:
            for sample in ev.ports:
                if sample.port == port:
                    return str((sample.model_extra or {}).get("phys_state"))
    raise AssertionError(f"{device}:{port} not in iblinkinfo")


async def consume(bootstrap: str, topic: str, keep: Callable[[Any], bool],
                  done: Callable[[list[Any]], bool], within: float) -> list[Any]:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=None,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    got: list[Any] = []
    deadline = time.monotonic() + within
    try:
        while not done(got):
            assert time.monotonic() < deadline, f"timed out; got {got}"
            batch = await consumer.getmany(timeout_ms=200)
            for records in batch.values():
                for rec in records:
                    ev = decode(rec.value)
                    if keep(ev):
                        got.append(ev)
    finally:
        await consumer.stop()
    return got


async def test_flap_in_ibsim_is_isolated_by_the_runbook_and_returned(
        lab: LabStack, kafka_bootstrap: str, temporal_target: str, tmp_path: Path,
        streams_worker: StreamsWorker) -> None:
    fabric = f"lab{uuid.uuid4().hex[:8]}"
    device, port = "leaf-su01-r0", 2  # cabled to node0002/mlx5_0
    runner = lab.tool_runner()
    policy = Policy.from_yaml(LAB_POLICY)
    worker_ready = asyncio.create_task(asyncio.to_thread(streams_worker.start))
    stop = asyncio.Event()
    async with Publisher(kafka_bootstrap) as pub:
        # The poller's discovery publishes the topology the follower resolves LIDs with.
        poller = IbdiagsPoller(PollConfig(fabric=fabric), pub, runner)
        topo = await poller.discover()
        lids = LatestLids()
        ready = asyncio.Event()
        topo_task = asyncio.create_task(follow_topology(kafka_bootstrap, fabric, lids.update,
                                                        stop, ready=ready))
        await asyncio.wait_for(ready.wait(), 30)
        assert lids() is not None and len(lids()) > 0  # type: ignore[arg-type]
        follower = LogFollower(lab.opensm_log, tmp_path / "tail.json")
        follower.read()  # start at the end: the start-up sweep is not this test's business
        follower.commit()
        tail = OpensmTail(follower, pub, fabric=fabric, lids=lids, peers=lids.peers,
                          scan=PortScan(runner, fabric))
        await tail.baseline()
        tail_task = asyncio.create_task(tail.run(stop, poll_s=0.1))
        try:
            await asyncio.to_thread(lab.flap, device, port, count=3, every_s=2.0)
            events = await consume(
                kafka_bootstrap, PORT_EVENTS.name,
                lambda e: isinstance(e, PortEvent) and e.fabric == fabric,
                lambda got: sum(1 for e in got if e.device == device and e.state == "down") >= 3,
                within=30)
        finally:
            stop.set()
            await asyncio.gather(tail_task, topo_task)
            follower.close()
    # each trap was resolved by reading only the trapping switch (its directed route)
    assert tail.stats.targeted_scans >= 3, tail.stats
    downs = [e for e in events if e.device == device and e.port == port and e.state == "down"]
    assert len(downs) == 3 and all(e.trap == 128 and e.source == "opensm" for e in downs)
    # the host end left and joined the subnet as opensm logged it (drop_mgr / new port)
    assert any(e.device == "node0002/mlx5_0" and e.state == "down" for e in events)

    # what the real stream worker made of them (it reads fabric.port-events from Kafka)
    await worker_ready
    detections = await consume(
        kafka_bootstrap, DETECTIONS.name,
        lambda e: isinstance(e, Detection) and e.fabric == fabric,
        lambda got: any(d.device == device and d.port == port for d in got), within=60)
    flaps = [d for d in detections if d.device == device and d.port == port]
    assert len(flaps) == 1 and flaps[0].detection == "flap", detections
    assert not [d for d in detections if d.detection == "degraded_link"], detections
    assert flaps[0].action == "isolate_port"
    # the in-process engine (what ``replay`` runs) agrees with the worker on this port
    engine = Engine(policy)
    replayed = [d for ev in sorted(events, key=lambda e: (e.ts, e.id)) for d in engine.feed(ev)
                if d.device == device and d.port == port]
    assert [d.episode for d in replayed] == [flaps[0].episode]

    client = await Client.connect(temporal_target, data_converter=pydantic_data_converter)
    task_queue = f"lab-{uuid.uuid4().hex[:8]}"
    records = MemorySink()
    controller = OpensmController(runner, records=records)
    acts = FabricActivities(records=records, controller=controller,
                            evidence=OpensmEvidence(runner),
                            checker=OpensmChecker(controller, CommandChecker({})),
                            fencer=NoFencer(),
                            ticketing=NotifierTicketing(FileNotifier(tmp_path / "alerts.jsonl")))
    inventory = Inventory()
    inventory.load(topo)
    dispatcher = Dispatcher(client, policy, inventory, task_queue=task_queue, timeouts=FAST)
    worker = build_worker(client, task_queue,
                          activity_functions(acts, BudgetActivities(client, task_queue)))
    async with worker:
        # The dispatcher's own handling of one detection (run_dispatcher does this per
        # message). Only the switch end's runbook is started here: the host end
        # (node0002/mlx5_0:1) flapped too and has its own detection, but its LID is reached
        # through this very port, so once this port is disabled its runbook can only wait.
        assert await dispatcher.handle(flaps[0])
        # one runbook per cable: the id names both ends (the switch end is isolated)
        handle = client.get_workflow_handle_for(
            PortRemediation.run, runbook_id(dispatcher.runbook_input(flaps[0])))
        first_rung = policy.fabric_health.repair_ladder[0]
        deadline = time.monotonic() + 60
        while True:
            st = await handle.query(PortRemediation.status)
            if st.waiting_for == first_rung:
                break
            assert time.monotonic() < deadline, st
            await asyncio.sleep(0.2)
        assert st.port.lid == 1
        assert await phys_state(runner, device, port) == "Disabled"
        await handle.execute_update(PortRemediation.complete_step,
                                    StepDone(step=first_rung, actor="tech-lab", note="reseated"))
        result = await asyncio.wait_for(handle.result(), 60)
    assert result.outcome == "returned_to_service", result
    state = await phys_state(runner, device, port)
    assert state != "Disabled", state  # enabled; ibsim does not retrain the link by itself
    await asyncio.to_thread(lab.reseat, device, port)  # the cable reseated for real
    await asyncio.sleep(0.5)
    assert await phys_state(runner, device, port) == "LinkUp"
    tools = {r.tool for r in records.records.values() if hasattr(r, "tool")}
    assert {"perfquery", "perfquery_x", "iblinkinfo", "perfquery_before_reset"} <= tools
    steps = [a.step for a in records.actions()]
    assert steps.index("isolate") < steps.index("unisolate"), steps


async def test_swap_in_ibsim_is_found_by_the_topology_diff(lab: LabStack) -> None:
    runner = lab.tool_runner()
    fab = generate("lab")
    plan = load_plan(fab.to_plan_csv())
    # ibsim reports every link as SDR (issue 12): the lab expects what ibsim can give.
    policy = Policy.from_yaml("fabricHealth: {degradedLink: {expectWidth: 4X, expectSpeed: SDR}}")
    before = parse_ibnetdiscover(await runner.check(["ibnetdiscover"], 30), fabric="lab",
                                 ts=int(time.time() * 1000))
    assert diff(plan, before, policy).ok
    a, b = ("leaf-su01-r0", 1), ("leaf-su01-r1", 1)
    assert lab.peer(*a) == ("node0001/mlx5_0", 1) and lab.peer(*b) == ("node0001/mlx5_1", 1)
    await asyncio.to_thread(lab.swap, *a, *b)
    await asyncio.sleep(1.0)
    after = parse_ibnetdiscover(await runner.check(["ibnetdiscover"], 30), fabric="lab",
                                ts=int(time.time() * 1000))
    report = diff(plan, after, policy)
    found = {(f.kind, f.a_device, f.a_port, f.b_device, f.b_port) for f in report.findings}
    # plan rows are host -> leaf; each planned cable is now found on the other leaf
    assert {f[0] for f in found} == {"miswire"}, report.to_dict()
    assert {(f[1], f[3], f[4]) for f in found} == {
        ("node0001/mlx5_0", "leaf-su01-r0", 1), ("node0001/mlx5_1", "leaf-su01-r1", 1)}, \
        report.to_dict()


async def test_performanceset_counters_arrive_through_the_poller(
        lab: LabStack, kafka_bootstrap: str) -> None:
    fabric = f"lab{uuid.uuid4().hex[:8]}"
    runner = lab.tool_runner()
    lab.set_counters("leaf-su01-r2", 3, {"SymbolErrorCounter": 65535,  # 16-bit, saturated
                                         "LinkDownedCounter": 255,  # 8-bit, saturated
                                         "PortRcvErrors": 17,
                                         "PortCountersExtended.PortXmitData": 1 << 40})
    lab.set_counters("node0003/mlx5_2", 1, {"SymbolErrorCounter": 9})  # a host port
    await asyncio.sleep(0.3)
    async with Publisher(kafka_bootstrap) as pub:
        poller = IbdiagsPoller(PollConfig(fabric=fabric, concurrency=2), pub, runner)
        await poller.discover()
        report = await poller.sample()
    # six switches by perfquery, and the one host port with errors by ibqueryerrors
    assert not report.failed
    assert len(report.published) == 7 and "node0003/mlx5_2" in report.published
    got = await consume(kafka_bootstrap, COUNTERS.name,
                        lambda e: isinstance(e, Counters) and e.fabric == fabric,
                        lambda got: len(got) >= 7, within=30)
    host = next(e for e in got if e.device == "node0003/mlx5_2")
    assert host.source == "ibqueryerrors" and host.ports[0].symbol_errors == 9
    assert host.ports[0].rcv_errors is None  # not printed by ibqueryerrors: not reported
    leaf = next(e for e in got if e.device == "leaf-su01-r2")
    sample = next(s for s in leaf.ports if s.port == 3)
    assert (sample.symbol_errors, sample.link_downed, sample.rcv_errors) == (65535, 255, 17)
    bits = sample.counter_bits or {}
    assert (bits["symbol_errors"], bits["link_downed"], bits["xmit_data"]) == (16, 8, 64)
    assert (sample.model_extra or {})["xmit_data"] >= 1 << 40
    quiet = next(s for s in leaf.ports if s.port == 4)
    assert quiet.symbol_errors == 0
    engine = Engine(Policy())
    dets = [d for e in sorted(got, key=lambda e: e.ts) for d in engine.feed(e)]
    saturated = {(d.device, d.port) for d in dets if d.detection == "counter_saturated"}
    assert ("leaf-su01-r2", 3) in saturated, dets


async def test_a_switch_that_does_not_answer_delays_nobody(lab: LabStack,
                                                          kafka_bootstrap: str) -> None:
    runner = lab.tool_runner()
    async with Publisher(kafka_bootstrap) as pub:
        poller = IbdiagsPoller(PollConfig(fabric="lab", timeout_s=2.0, concurrency=2), pub,
                               runner)
        await poller.discover()
        # a LID nobody answers (the SM gave out 1..22): its perfquery times out
        from collectors.live.poll_ibdiags import SwitchTarget

        targets = [*poller.targets, SwitchTarget("ghost-switch", 999, (1, 2))]
        started = time.monotonic()
        report = await poller.sample(targets)
    assert set(report.failed) == {"ghost-switch"}
    assert {"leaf-su01-r0", "spine-su01-s2"} <= set(report.published)
    assert len([d for d in report.published if "/" not in d]) == 6
    assert time.monotonic() - started < 10
