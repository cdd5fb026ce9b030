"""A demo-like ledger for the client tests: the simulator's telemetry of the lab fabric with
faults (flaps, a BER ramp, a swapped cable), plus the detections and runbook steps the demo's
stream and runbook workers record for them, shaped as those workers write them."""

from __future__ import annotations

import time

from schemas import ActionRecord, Detection
from schemas.events import Action, DetectionKind, Event, Severity
from sim.faults import parse_spec
from sim.telemetry import Simulator, decode_messages
from sim.topology import generate

HOUR_MS = 3_600_000
FABRIC = "lab"


def demo_start_ms() -> int:
    """Four whole hours ago: the dashboards' and cookbook's "last 24 h" hold all of it."""
    return (int(time.time()) // 3600 - 4) * HOUR_MS


def demo_events(start_ms: int, steps: int = 120) -> list[Event]:
    """``steps`` minutes of the simulated lab fabric and what the workers made of them."""
    fabric = generate("lab")
    leaf = next(s.name for s in fabric.switches if s.name.startswith("leaf-su01-r1"))
    flap_port, iso_port, swap_a, swap_b = fabric.device_ports(leaf)[:4]
    sim = Simulator(fabric, seed=3, start_ms=start_ms, interval_s=60, probe_every=5,
                    topology_every=30, faults=[
                        parse_spec(f"flap:{leaf}:{flap_port},count=6,every=5m,at=10m"),
                        parse_spec(f"ber:{leaf}:{iso_port},raw=5e-5,ramp=20m,at=5m"),
                        parse_spec(f"swap:{leaf}:{swap_a},with={leaf}:{swap_b}"),
                    ])
    events: list[Event] = []
    for _ in range(steps):
        events.extend(decode_messages(sim.step().messages))
    events.extend(_worker_records(start_ms, leaf, flap_port, iso_port, swap_a))
    return events


def _worker_records(t0: int, leaf: str, flap_port: int, iso_port: int,
                    swap_port: int) -> list[Event]:
    out: list[Event] = []

    def detection(port: int, kind: DetectionKind, at: int, episode: str,
                  action: Action) -> Detection:
        return Detection(id=f"det-{kind}-{port}-{at}", ts=t0 + at, fabric=FABRIC,
                         source="streams", device=leaf, port=port, detection=kind,
                         severity=Severity.CRITICAL, action=action, episode=episode,
                         evidence={"rule": str(kind), "window_s": 600})

    def step(wf: str, port: int, name: str, at: int, actor: str = "fabricwatch") -> ActionRecord:
        return ActionRecord(id=f"act-{wf}-{name}", ts=t0 + at, fabric=FABRIC,
                            source="fabricwatch", device=leaf, port=port, workflow_id=wf,
                            step=name, actor=actor, outcome="done",
                            before={"isolated": name != "isolate"},
                            after={"isolated": name not in ("return",)})

    for i in range(3):  # the flapping port: detected, isolated, reseated, returned
        out.append(detection(flap_port, DetectionKind.FLAP, 25 * 60_000 + i * 300_000,
                             f"flap-{leaf}:{flap_port}", Action.ISOLATE_PORT))
    wf = f"remediate/{FABRIC}/{leaf}:{flap_port}"
    out += [step(wf, flap_port, "isolate", 26 * 60_000),
            step(wf, flap_port, "ladder:reseat", 50 * 60_000, actor="oncall@example"),
            step(wf, flap_port, "return", 80 * 60_000)]
    # The BER port: isolated and still out.
    out.append(detection(iso_port, DetectionKind.BER, 30 * 60_000, f"ber-{leaf}:{iso_port}",
                         Action.ISOLATE_PORT))
    wf2 = f"remediate/{FABRIC}/{leaf}:{iso_port}"
    out.append(step(wf2, iso_port, "isolate", 31 * 60_000))
    # The swapped cable: a miswire the topology diff reports, open.
    for at in (35 * 60_000, 65 * 60_000):
        out.append(detection(swap_port, DetectionKind.MISWIRE, at, f"miswire-{leaf}:{swap_port}",
                             Action.TICKET))
    return out
