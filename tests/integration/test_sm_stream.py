"""The SM detector through the real broker and stream worker: the simulator's subnet manager
fails over and one port's traps force a heavy-sweep storm; the worker's detections are
exactly replay's, and the storm and the failover are one ``sm_event`` incident."""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from schemas import Event, SmEvent, decode, encode
from schemas.policy import Policy
from sim.faults import parse_spec
from sim.telemetry import Simulator
from sim.topology import generate
from streams.replay import replay_all

pytestmark = pytest.mark.integration

sys.path.insert(0, str(Path(__file__).parent))  # stream_helpers, shared with other tests

from stream_helpers import Worker, collect, publish  # noqa: E402


@pytest.fixture
def worker(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Worker]:
    w = Worker(kafka_bootstrap, tmp_path, f"fw-test-{uuid.uuid4().hex[:8]}")
    yield w
    w.stop()


def sim_sm_events(fabric: str) -> list[Event]:
    """The lab simulator's fabric.sm messages over 20 steps, on the test's own fabric."""
    faults = [parse_spec("sweep_storm:leaf-su01-r2:2,count=6,every=5s,at=20s"),
              parse_spec("sm_failover:sm-2,at=120s")]
    sim = Simulator(generate("lab"), faults=faults, start_ms=int(time.time() * 1000) - 1_800_000,
                    probe_every=0, topology_every=0)
    out: list[Event] = []
    for _ in range(20):
        for m in sim.step().messages:
            if m.topic == "fabric.sm":
                ev = decode(m.value)
                assert isinstance(ev, SmEvent)
                out.append(ev.model_copy(update={"fabric": fabric, "id": f"{fabric}/{ev.id}"}))
    return out


async def test_sm_failover_and_sweep_storm_through_the_worker(worker: Worker) -> None:
    fabric = f"sm-{worker.app_id}"
    events = sim_sm_events(fabric)
    want = list(replay_all([encode(e) for e in events], Policy(), on_error=None))
    want_dets = {d.id: d for d in want if d.kind == "detection"}
    kinds = sorted(d.detection.value for d in want_dets.values())  # type: ignore[union-attr]
    assert kinds == ["sm_failover", "sm_standby_lost", "sweep_storm"]
    await asyncio.to_thread(worker.start)
    await publish(worker.bootstrap, events)
    prefix = f'"fabric":"{fabric}"'.encode()
    got = [orjson.loads(v) for v in
           await collect(worker.bootstrap, "fabric.detections", len(want_dets), prefix)]
    assert {d["id"] for d in got} == set(want_dets), worker.tail()
    by_kind = {d["detection"]: d for d in got}
    storm = by_kind["sweep_storm"]
    assert storm["evidence"]["ports"] == ["leaf-su01-r2:2"]
    failover = by_kind["sm_failover"]
    assert (failover["device"], failover["evidence"]["from"]) == ("sm-2", "sm-1")
    incidents = [orjson.loads(v) for v in
                 await collect(worker.bootstrap, "fabric.incidents", 1, prefix, settle=2)]
    opened = [i for i in incidents if i["state"] == "open"]
    assert len(opened) == 1, incidents
    assert opened[0]["cause"] == "sm_event" and opened[0]["members"] == ["leaf-su01-r2:2"]
    # both SM-wide detections carry that one incident: one page, not one per port
    assert storm["incident"] == failover["incident"] == opened[0]["incident"]
