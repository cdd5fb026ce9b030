"""A slow cable localised end to end: the simulator's probes through the real stream worker.

The simulator's ``lab`` fabric runs with ``slow_link`` on one host cable; its topology
snapshot and probe results (renamed to the test's own fabric: the session broker is shared)
go to the real broker before the worker starts, so the worker learns the probe routes from
the newest snapshot before its first probe (``StreamsApp.seed_routes``) whichever agent
runs first. The
worker must name the cable the slow pairs share, on its leaf end with the policy's action,
exactly as ``streams.replay`` does over the same messages.
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from schemas.policy import Policy
from sim.faults import parse_spec
from sim.telemetry import Simulator
from sim.topology import generate
from streams.replay import replay

pytestmark = pytest.mark.integration

sys.path.insert(0, str(Path(__file__).parent))  # stream_helpers, shared with other tests

from stream_helpers import Worker, collect, publish  # noqa: E402


@pytest.fixture
def worker(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Worker]:
    w = Worker(kafka_bootstrap, tmp_path, f"fw-test-{uuid.uuid4().hex[:8]}")
    yield w
    w.stop()


def retag(raw: bytes, fabric: str) -> bytes:
    obj: dict[str, Any] = orjson.loads(raw)
    obj["fabric"] = fabric
    obj["id"] = f"{fabric}/{obj['id']}"
    return orjson.dumps(obj)


async def test_slow_link_is_named_on_its_leaf_port_by_the_worker(worker: Worker) -> None:
    tag = f"t{worker.app_id.rsplit('-', 1)[1]}"
    lab = generate("lab")
    sim = Simulator(lab, faults=[parse_spec("slow_link:node0004/mlx5_2:1,factor=0.6")],
                    seed=3, start_ms=int(time.time() * 1000) - 3600_000, probe_every=1,
                    topology_every=100)
    steps = sim.run_steps(14)  # the cable is acted on after localiseConfirm (60 s)
    (topology,) = [m for s in steps for m in s.messages if m.topic == "fabric.topology"]
    probes = [m for s in steps for m in s.messages if m.topic == "fabric.probes"]
    messages = [(topology.topic, retag(topology.value, tag))]
    messages += [(m.topic, retag(m.value, tag)) for m in probes]
    want = {d.id: d for d in replay([v for _, v in messages], Policy(), on_error=None)}
    leaf = next(f"{x.b_device}:{x.b_port}" for x in lab.links
                if (x.a_device, x.a_port) == ("node0004/mlx5_2", 1))
    named = [d for d in want.values() if d.evidence.get("localised")
             and d.evidence.get("by") == "paths"]
    assert [(d.key, d.action.value) for d in named] == [(leaf, "isolate_port")]
    await publish(worker.bootstrap, messages)
    await asyncio.to_thread(worker.start)
    got = await collect(worker.bootstrap, "fabric.detections", len(want),
                        f'"fabric":"{tag}"'.encode(), wait_s=150, settle=5.0)
    seeded = re.findall(r"probe routes seeded from (\d+) topology", worker.log.read_text())
    assert seeded and int(seeded[-1]) >= 1, worker.tail()  # this test's snapshot among them
    ids = sorted(orjson.loads(v)["id"] for v in got)
    assert ids == sorted(want), worker.tail()
    localised = [orjson.loads(v) for v in got if b'"by":"paths"' in v]
    assert [(d["device"], d["port"], d["action"], d["evidence"]["link"]) for d in localised] == [
        (*leaf.rsplit(":", 1)[:1], int(leaf.rsplit(":", 1)[1]), "isolate_port",
         f"{leaf}<->node0004/mlx5_2:1")]


async def test_a_pinned_baseline_judges_the_first_result(worker: Worker) -> None:
    """A pin in the worker's ledger is the yardstick from the first probe on; without one the
    first results only teach (no verdict)."""
    from ledger import open_ledger
    from ledger.baselines import PinnedBaseline, pin
    from runtime.settings import Settings
    from schemas import Probe

    tag = worker.app_id
    ts = int(time.time() * 1000) - 600_000
    ledger = open_ledger(Settings(state_dir=worker.state_dir))
    try:  # the worker's fabric is the settings' ("lab"); a rail and size of this test's own
        pin(ledger, PinnedBaseline(fabric="lab", rail=77, probe="ib_write_bw", size_bytes=4097,
                                   scale=2, gbps=400.0, pinned_by="test", pinned_ts=ts))
    finally:
        ledger.close()

    def result(size: int, n: int) -> Probe:
        return Probe(id=f"{tag}-{size}-{n}", ts=ts + n * 1000, fabric="lab", source="probe",
                     probe="ib_write_bw", src=f"a-{tag}/mlx5_0", dst=f"b-{tag}/mlx5_0",
                     rail=77, size_bytes=size, bw_gbps=300.0)

    await asyncio.to_thread(worker.start, True)
    await publish(worker.bootstrap, [result(4097, 0), result(4098, 0)])
    got = await collect(worker.bootstrap, "fabric.detections", 1, tag.encode(), settle=5.0)
    dets = [orjson.loads(v) for v in got]
    assert [(d["detection"], d["evidence"]["size_bytes"], d["evidence"]["baseline_from"],
             d["evidence"]["baseline_gbps"]) for d in dets] == [
        ("slow_probe", 4097, "pinned", 400.0)], worker.tail()
