"""The demo's 10k-GPU fabric: the simulator's spine reboot, through replay, is one incident.

The real simulator on the ``10k-gpu`` preset (1,248 nodes, 59,904 ports) with the demo's
reboot of ``spine-su04-s1`` (every link down at once, reported by its peers; back after
40 s; two more bounces 15 s apart) and a flapping link elsewhere. Its topology snapshot and
port events go through replay; of the counters only one quiet device's, as the clock (all of
them take minutes to replay, and the incident is decided on the traps). The reboot must be
one incident naming the spine with every one of its cables, no flap of its ports may fire,
and the real flap must still isolate.
"""

from __future__ import annotations

import time

import pytest

from schemas import Action, Detection, Incident
from schemas.policy import Policy
from schemas.topics import COUNTERS, PORT_EVENTS, TOPOLOGY
from sim.faults import parse_spec
from sim.telemetry import Simulator
from sim.topology import generate
from streams.replay import replay_all

SPINE = "spine-su04-s1"


@pytest.mark.timeout(600)
def test_the_10k_demo_spine_reboot_is_one_incident() -> None:
    from fabricwatch.demo.scenario import build_scenario

    # the spine the demo reboots on this preset
    (reboot,) = [e for e in build_scenario("10k-gpu").expectations
                 if e.label == "spine reboot"]
    assert reboot.incident_root == SPINE
    fabric = generate("10k-gpu")
    cables = [link for link in fabric.links if SPINE in (link.a_device, link.b_device)]
    sim = Simulator(fabric, faults=[parse_spec(f"spine_reboot:{SPINE},at=20s,for=40s"),
                                    parse_spec("flap:leaf-su01-r3:5,count=4,every=20s,at=30s")],
                    seed=7, start_ms=int(time.time() * 1000) - 3600_000)
    # one quiet device's counters keep the clock moving, so the incident can close
    lines = [m.value for step in sim.run_steps(26) for m in step.messages
             if m.topic in (TOPOLOGY.name, PORT_EVENTS.name)
             or (m.topic == COUNTERS.name and m.key == b"leaf-su09-r7")]
    out = list(replay_all(lines, Policy(), on_error=None))
    incidents = [o for o in out if isinstance(o, Incident)]
    assert len({i.incident for i in incidents}) == 1
    last = incidents[-1]
    assert (last.cause.value, last.root, last.state) == ("switch_reboot", SPINE, "closed")
    ends = {f"{c.a_device}:{c.a_port}" for c in cables} | {f"{c.b_device}:{c.b_port}"
                                                           for c in cables}
    assert set(last.members) == ends and len(cables) == 64
    dets = [o for o in out if isinstance(o, Detection)]
    isolating = [d for d in dets if d.action == Action.ISOLATE_PORT and d.incident is None]
    assert [(d.detection.value, d.key) for d in isolating] == [("flap", "leaf-su01-r3:5")]
    assert not [d for d in dets if d.key in ends]
