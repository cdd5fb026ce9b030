"""Synthetic ledger history built from the contract models, with known answers.

A small rail-optimized fabric (SUs of nodes, one leaf per SU and rail, spines) and a few
hours of what it would report: counters every ``interval_s`` with background noise, a
handful of faulty ports whose errors and flaps the cookbook must find, probes per rail
with one slow rail, detections, a runbook's actions and evidence, and a miswire. Used by
the ledger's tests; ``Expected`` records what the queries should answer.
Deterministic for a seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from schemas import (
    Action,
    ActionRecord,
    Counters,
    Detection,
    DetectionKind,
    EvidenceRecord,
    JobPlacement,
    PortEvent,
    PortSample,
    Probe,
    Severity,
    Topology,
    TopologyLink,
)
from schemas.events import Event

HOUR_MS = 3_600_000


@dataclass
class Expected:
    """What the cookbook should find in the generated history."""

    flapping: dict[tuple[str, int], int] = field(default_factory=dict)  # port -> downs
    error_ports: dict[tuple[str, int], int] = field(default_factory=dict)  # port -> errors
    errors_by_cell: dict[tuple[int, int], int] = field(default_factory=dict)  # (su, rail)
    isolated: set[tuple[str, int]] = field(default_factory=set)
    repaired: dict[str, float] = field(default_factory=dict)  # rung -> hours
    slow_rail: int = -1
    open_miswire: tuple[str, int] = ("", 0)
    fixed_miswire: tuple[str, int] = ("", 0)
    job: str = ""  # a job running on SU 1's nodes for the whole history
    job_nodes: list[str] = field(default_factory=list)


@dataclass
class Fabric:
    name: str
    sus: int
    rails: int
    nodes_per_su: int
    links: list[TopologyLink]

    def leaf(self, su: int, rail: int) -> str:
        return f"leaf-su{su:02d}-r{rail}"

    def node_hca(self, su: int, n: int, rail: int) -> str:
        return f"node{su * 1000 + n:04d}/mlx5_{rail}"

    def leaf_ports(self) -> list[tuple[str, int]]:
        return [(self.leaf(su, r), n + 1) for su in range(1, self.sus + 1)
                for r in range(self.rails) for n in range(self.nodes_per_su)]


def build_fabric(name: str = "lab", sus: int = 2, rails: int = 4,
                 nodes_per_su: int = 8) -> Fabric:
    links: list[TopologyLink] = []
    for su in range(1, sus + 1):
        for rail in range(rails):
            leaf = f"leaf-su{su:02d}-r{rail}"
            for n in range(nodes_per_su):
                links.append(TopologyLink(a_device=leaf, a_port=n + 1,
                                          b_device=f"node{su * 1000 + n:04d}/mlx5_{rail}",
                                          b_port=1, width="4X", speed="NDR"))
            links.append(TopologyLink(a_device=leaf, a_port=nodes_per_su + 1,
                                      b_device=f"spine-{rail:02d}", b_port=su,
                                      width="4X", speed="NDR"))
    return Fabric(name, sus, rails, nodes_per_su, links)


def history(start_ms: int, hours: int = 3, interval_s: int = 60, seed: int = 7,
            fabric: Fabric | None = None) -> tuple[list[Event], Expected]:
    """Events of ``hours`` of fabric life from ``start_ms``, and what queries should say."""
    fab = fabric or build_fabric()
    rnd = random.Random(seed)  # noqa: S311 - reproducible test data, not secrets
    exp = Expected()
    events: list[Event] = []
    f = fab.name

    events.append(Topology(id=f"topo-{start_ms}", ts=start_ms, fabric=f, source="sim",
                           links=fab.links))
    ports = fab.leaf_ports()
    err_ports = {ports[3]: 7, ports[len(ports) // 2]: 3}  # errors per sample interval
    flappers = {ports[5]: 4, ports[-2]: 2}
    steps = hours * 3600 // interval_s
    counters: dict[tuple[str, int], list[int]] = {p: [0, 0, 0] for p in ports}
    for k in range(steps):
        ts = start_ms + k * interval_s * 1000
        by_device: dict[str, list[PortSample]] = {}
        for dev, port in ports:
            c = counters[(dev, port)]
            if k > 0:
                rate = err_ports.get((dev, port), 0)
                c[0] += rate
                c[1] += rnd.randint(0, 50)  # healthy FEC corrections
                if rate:
                    exp.error_ports[(dev, port)] = exp.error_ports.get((dev, port), 0) + rate
            if (dev, port) == ports[3] and k == steps // 2:
                c[0] = err_ports[ports[3]]  # a reset mid-history: counts from zero again
            by_device.setdefault(dev, []).append(PortSample(
                port=port, symbol_errors=c[0], rcv_errors=0, link_downed=c[2],
                fec_corrected=c[1], raw_ber=1e-12 * (1 + c[0]), width="4X", speed="NDR",
                module_temp_c=45.0, rx_power_dbm=-2.1))
        for dev, samples in by_device.items():
            events.append(Counters(id=f"ctr-{dev}-{ts}", ts=ts, fabric=f, source="sim",
                                   device=dev, ports=samples))
    for (dev, port), downs in flappers.items():
        exp.flapping[(dev, port)] = downs
        for i in range(downs):
            t = start_ms + HOUR_MS + i * 300_000
            events.append(PortEvent(id=f"pe-{dev}-{port}-{t}-d", ts=t, fabric=f, source="sim",
                                    device=dev, port=port, state="down", trap=128))
            events.append(PortEvent(id=f"pe-{dev}-{port}-{t}-u", ts=t + 20_000, fabric=f,
                                    source="sim", device=dev, port=port, state="up", trap=128))
    for (dev, _port), errors in exp.error_ports.items():
        su, rail = int(dev[7:9]), int(dev.rsplit("-r", 1)[1])
        exp.errors_by_cell[(su, rail)] = exp.errors_by_cell.get((su, rail), 0) + errors

    # Probes: every rail every 10 minutes; rail 2 runs at 70 %.
    exp.slow_rail = 2
    for k in range(hours * 6):
        t = start_ms + k * 600_000
        for rail in range(fab.rails):
            bw = 370.0 * (0.7 if rail == exp.slow_rail else rnd.uniform(0.97, 1.0))
            events.append(Probe(id=f"probe-{rail}-{t}", ts=t, fabric=f, source="probe",
                                probe="ib_write_bw", src=fab.node_hca(1, 0, rail),
                                dst=fab.node_hca(2 if fab.sus > 1 else 1, 1, rail), rail=rail,
                                size_bytes=1 << 20, bw_gbps=round(bw, 2)))

    # A flap detection and a full runbook on the worst flapper: isolate, two ladder rungs,
    # return after 2 h (rung swap-optic fixed it); the second flapper is isolated now.
    fl_dev, fl_port = ports[5]
    wf = f"remediate/{f}/{fl_dev}:{fl_port}"
    t0 = start_ms + HOUR_MS + 900_000
    events.append(Detection(id=f"det-flap-{fl_dev}-{fl_port}", ts=t0, fabric=f, source="streams",
                            device=fl_dev, port=fl_port, detection=DetectionKind.FLAP,
                            severity=Severity.CRITICAL, action=Action.ISOLATE_PORT,
                            evidence={"downs": 3, "window_s": 1800}, episode=f"ep-{t0}"))
    events.append(EvidenceRecord(id=f"ev-{wf}-perfquery", ts=t0 + 1000, fabric=f,
                                 source="fabricwatch", device=fl_dev, port=fl_port,
                                 workflow_id=wf, tool="perfquery",
                                 output="# Port counters: Lid 12 port 6\nSymbolErrorCounter:....0",
                                 exit_code=0))
    steps_done = [("isolate", 2_000), ("ladder:clean-and-reseat", 1_800_000),
                  ("ladder:swap-optic", 3_600_000), ("return", 7_200_000)]
    for step, dt in steps_done:
        after = {"optic_serial": "MT2239FT0042"} if step == "ladder:swap-optic" else None
        events.append(ActionRecord(id=f"act-{wf}-{step}", ts=t0 + dt, fabric=f,
                                   source="fabricwatch", device=fl_dev, port=fl_port,
                                   workflow_id=wf, step=step, actor="fabricwatch",
                                   outcome="done", before={"isolated": step != "isolate"},
                                   after=after))
    exp.repaired["swap-optic"] = (7_200_000 - 2_000) / HOUR_MS
    iso_dev, iso_port = ports[-2]
    wf2 = f"remediate/{f}/{iso_dev}:{iso_port}"
    events.append(ActionRecord(id=f"act-{wf2}-isolate", ts=t0 + 60_000, fabric=f,
                               source="fabricwatch", device=iso_dev, port=iso_port,
                               workflow_id=wf2, step="isolate", actor="oncall@example",
                               outcome="done"))
    exp.isolated.add((iso_dev, iso_port))
    # A shadow-mode isolate changes nothing.
    sh_dev, sh_port = ports[7]
    events.append(ActionRecord(id=f"act-shadow-{sh_dev}-{sh_port}", ts=t0, fabric=f,
                               source="fabricwatch", device=sh_dev, port=sh_port,
                               workflow_id=f"remediate/{f}/{sh_dev}:{sh_port}", step="isolate",
                               actor="fabricwatch", outcome="dry_run", dry_run=True))

    # Miswires: two node cables swapped on leaf su01-r0 (ports 1 and 2), detected; a later
    # snapshot shows ports 3 and 4 of su01-r1 fixed but su01-r0 still swapped.
    swapped = list(fab.links)
    leaf0, leaf1 = fab.leaf(1, 0), fab.leaf(1, 1)

    def swap(links: list[TopologyLink], leaf: str) -> list[TopologyLink]:
        idx = [i for i, lk in enumerate(links) if lk.a_device == leaf and lk.a_port in (1, 2)]
        a, b = links[idx[0]], links[idx[1]]
        out = list(links)
        out[idx[0]] = a.model_copy(update={"b_device": b.b_device})
        out[idx[1]] = b.model_copy(update={"b_device": a.b_device})
        return out

    t_mis = start_ms + 2 * HOUR_MS
    events.append(Topology(id=f"topo-{t_mis}", ts=t_mis, fabric=f, source="sim",
                           links=swap(swap(swapped, leaf0), leaf1)))
    for leaf in (leaf0, leaf1):
        events.append(Detection(id=f"det-mis-{leaf}", ts=t_mis + 5_000, fabric=f,
                                source="streams", device=leaf, port=1,
                                detection=DetectionKind.MISWIRE, severity=Severity.WARNING,
                                action=Action.TICKET,
                                evidence={"expected": "plan", "found": "swapped"},
                                episode=f"mis-{leaf}"))
    t_fix = t_mis + 1_800_000
    events.append(Topology(id=f"topo-{t_fix}", ts=t_fix, fabric=f, source="sim",
                           links=swap(swapped, leaf0)))
    exp.open_miswire = (leaf0, 1)
    exp.fixed_miswire = (leaf1, 1)
    exp.job = "train-1"
    exp.job_nodes = [fab.node_hca(1, n, 0).split("/")[0] for n in range(fab.nodes_per_su)]
    events.append(JobPlacement(id=f"job-{exp.job}-{start_ms}", ts=start_ms, fabric=f,
                               source="sim", job=exp.job, nodes=exp.job_nodes, start=start_ms,
                               gpus_per_node=fab.rails, state="running"))
    return events, exp
