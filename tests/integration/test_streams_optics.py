"""The simulator's optics and congestion faults through the real stream worker.

An InfiniBand ``lab`` fabric with an overheating module, a module whose Rx power falls and
a polarised (hot) leaf uplink, and a RoCE fabric with one pause storm whose queue is stuck,
one whose queue still drains and a leaf whose ECN is misconfigured on priority 5 alone, run
through ``fabricwatch worker`` (its own app id, the session's broker, the lab fabric's cable
plan so it knows a leaf's ECMP uplinks). Its
detections must be exactly ``streams.replay``'s over the same messages with the same plan,
and they must be the ones an operator expects: the optic faults, the hot uplink on the
polarised port only (and its credit-wait congestion), the stuck pause storm and not the
draining one, and ``ecn_pfc_misconfig`` on that leaf naming priority 5.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from schemas.policy import Policy
from sim.faults import parse_spec
from sim.telemetry import Simulator
from sim.topology import Params, generate
from streams.engine import Context
from streams.replay import replay
from streams.topology.plan import expectation_from_plan, load_plan, uplinks_from_plan

pytestmark = pytest.mark.integration

sys.path.insert(0, str(Path(__file__).parent))  # stream_helpers, shared with other tests

from stream_helpers import Worker, assert_copies_identical, collect  # noqa: E402


@pytest.fixture
def worker(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Worker]:
    w = Worker(kafka_bootstrap, tmp_path, f"fw-optics-{uuid.uuid4().hex[:8]}")
    yield w
    w.stop()


def renamed(raw: bytes, fabric: str, prefix: str) -> tuple[str, bytes, bytes]:
    """A counters message with this test's fabric and device names, and its contract key."""
    obj: dict[str, Any] = orjson.loads(raw)
    assert obj["kind"] == "counters"
    obj["fabric"] = fabric
    obj["id"] = f"{fabric}/{obj['id']}"
    obj["device"] = f"{prefix}-{obj['device']}"
    return "fabric.counters", obj["device"].encode(), orjson.dumps(obj)


def plan_csv(text: str, prefix: str) -> str:
    rows = text.splitlines()
    out = [rows[0]]
    for row in rows[1:]:
        a, ap, b, bp, *rest = row.split(",")
        out.append(",".join([f"{prefix}-{a}", ap, f"{prefix}-{b}", bp, *rest]))
    return "\n".join(out) + "\n"


async def test_optics_and_congestion_faults_through_the_worker(worker: Worker,
                                                               tmp_path: Path) -> None:
    tag = f"o{worker.app_id.rsplit('-', 1)[1]}"
    start = int(time.time() * 1000) - 3600_000
    lab = generate("lab")
    roce = generate(Params(sus=1, nodes_per_su=4, rails=2, spines_per_su=2, transport="roce",
                           fabric="roce-lab"))
    ib = Simulator(lab, faults=[parse_spec("optic_overheat:node0002/mlx5_1:1,at=20s"),
                                parse_spec("optic_power:leaf-su01-r2:1,at=30s"),
                                parse_spec("hot_uplink:leaf-su01-r0:6")],
                   seed=3, start_ms=start, probe_every=0, topology_every=0)
    rc = Simulator(roce, faults=[parse_spec("pause_storm:node0001/mlx5_0:1,at=20s"),
                                 parse_spec("pause_storm:node0003/mlx5_1:1,at=20s,drain=1"),
                                 parse_spec("ecn_misconfig:leaf-su01-r1,prio=5,at=20s")],
                   seed=3, start_ms=start, probe_every=0, topology_every=0)
    # two fabrics (each its own event-time clock), named and prefixed for this test
    ib_tag, rc_tag = f"{tag}i", f"{tag}r"
    # probes and topology are off in these runs; the simulated SM's events are not this
    # test's (tests/unit/sim covers them)
    messages = ([renamed(m.value, ib_tag, ib_tag) for step in ib.run_steps(14)
                 for m in step.messages if m.topic.endswith("counters")]
                + [renamed(m.value, rc_tag, rc_tag) for step in rc.run_steps(14)
                   for m in step.messages if m.topic.endswith("counters")])
    plan_text = plan_csv(lab.to_plan_csv(), ib_tag)
    plan_file = tmp_path / "plan.csv"
    plan_file.write_text(plan_text)
    plan = load_plan(plan_text)
    context = Context(expectation=expectation_from_plan(plan), uplinks=uplinks_from_plan(plan))
    want = {d.id: d for d in replay([m[2] for m in messages], Policy(), context=context,
                                    on_error=None)}
    kinds = {(d.detection.value, d.device, d.port) for d in want.values()}
    assert {("optic_temp", f"{ib_tag}-node0002/mlx5_1", 1),
            ("optic_power", f"{ib_tag}-leaf-su01-r2", 1),
            ("hot_uplink", f"{ib_tag}-leaf-su01-r0", 6),
            ("congestion", f"{ib_tag}-leaf-su01-r0", 6),
            ("pause_storm", f"{rc_tag}-node0001/mlx5_0", 1)} <= kinds
    assert {(d, p) for k, d, p in kinds if k == "hot_uplink"} == {
        (f"{ib_tag}-leaf-su01-r0", 6)}
    assert not any(k == "pause_storm" and d == f"{rc_tag}-node0003/mlx5_1"
                   for k, d, _ in kinds)  # paused and draining: congestion, not a storm
    # priority 5 on the misconfigured leaf alone (the pause storms' leaves pause priority 3,
    # the RoCE class, far beyond what its queue marks: their own episodes)
    ecn = [(d.device, d.evidence["basis"], d.evidence["priority"]) for d in want.values()
           if d.detection.value == "ecn_pfc_misconfig" and d.evidence["priority"] == 5]
    assert ecn == [(f"{rc_tag}-leaf-su01-r1", "priority", 5)]

    producer = AIOKafkaProducer(bootstrap_servers=worker.bootstrap, acks="all",
                                enable_idempotence=True, linger_ms=5)
    await producer.start()
    try:
        for topic, key, value in messages:
            await producer.send(topic, value, key=key)
        await producer.flush()
    finally:
        await producer.stop()
    worker.env["FABRICWATCH_FABRIC"] = ib_tag  # the fabric the plan describes
    await asyncio.to_thread(worker.start, plan=plan_file)
    got = await collect(worker.bootstrap, "fabric.detections", len(want),
                        f'"fabric":"{tag}'.encode(), wait_s=150, settle=15.0)
    ids = [orjson.loads(v)["id"] for v in got]
    assert sorted(set(ids)) == sorted(want), worker.tail()
    # At least once: a message redelivered after a rebalance or a producer retry repeats
    # its outputs, byte for byte (deterministic ids; consumers keep the first of an id).
    assert_copies_identical(got)
