"""The demo's scripted scenario: which faults, where, when, and what fabricwatch must conclude.

Pure data and pure matching: ``Scenario.faults`` become ``sim run --fault`` specs; every
detection the demo sees is matched against ``Expectation``s to tell the user which injected
fault it explains, and the end-to-end test asserts on the same expectations.

Two fabrics run side by side, as in a real site with an InfiniBand training fabric and a
RoCE storage/inference fabric: the IB fabric (the chosen preset) carries every fault but
the RoCE pause storm, which needs RoCE counters and runs on a one-SU RoCE fabric.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from schemas import Detection, Incident


@dataclass(frozen=True)
class Expectation:
    """One injected fault and the detection (and runbook outcome) it must produce."""

    label: str
    fabric: str
    spec: str  # sim fault spec
    detection: str  # the detection kind that proves it was caught
    ports: frozenset[str]  # device:port keys that may carry the detection (either cable end)
    devices: frozenset[str] = frozenset()  # or any port of these devices (a rebooted spine's peers)
    runbook: str | None = None  # "decided" when an isolating runbook must reach a decision
    after_s: float = 0.0  # the fault starts this long after the simulators do
    # proved by an incident instead of a detection: its cause (``detection``) and root device
    incident_root: str | None = None
    # proved only by a detection that names the cable from the probes' routes (a slow link
    # localised), not by a ticket on a probe's endpoint
    localised: bool = False
    # proved only by an ECN vs PFC verdict that names this priority (judged per queue)
    priority: int | None = None
    # or by this detection kind localised to the cable from the probes' routes: a flapping
    # link slows the probes crossing it, and the runbook that isolates the cable on that
    # may do so before the fault's third down, so the flap itself never happens
    or_localised: str | None = None

    def matches_incident(self, incident: Incident, started_ms: int = 0) -> bool:
        return (self.incident_root is not None and incident.fabric == self.fabric
                and incident.cause.value == self.detection
                and incident.root == self.incident_root
                and incident.started >= started_ms + self.after_s * 1000)

    def matches(self, detection: Detection, started_ms: int = 0) -> bool:
        if self.incident_root is not None:
            return False
        if detection.fabric != self.fabric:
            return False
        kind = detection.detection.value
        localised = (detection.evidence.get("localised") is True
                     and detection.evidence.get("by") == "paths")
        if kind != self.detection and not (kind == self.or_localised and localised):
            return False
        if detection.ts < started_ms + self.after_s * 1000:
            return False  # before the fault began: something else caused it
        if self.localised and not localised:
            return False
        if self.priority is not None and detection.evidence.get("priority") != self.priority:
            return False
        if self.devices and detection.device in self.devices:
            return True
        if detection.key in self.ports:
            return True
        # probe and breaker detections name a port of the path or of the switch's peers
        evidence_ports = {str(p) for p in detection.evidence.get("ports", [])
                          if isinstance(p, str)}
        return bool(evidence_ports & self.ports)


@dataclass
class Scenario:
    ib_fabric: str
    roce_fabric: str
    ib_preset: str
    roce_preset: str
    interval: str
    expectations: list[Expectation] = field(default_factory=list)
    min_duration_s: float = 0.0  # the last fault has played out by then
    # Jobs on the IB fabric (name, nodes): placed so that the faults touch some and not others.
    jobs: list[tuple[str, list[str]]] = field(default_factory=list)

    def specs(self, fabric: str) -> list[str]:
        return [e.spec for e in self.expectations if e.fabric == fabric]


def _ends(links: dict[tuple[str, int], tuple[str, int]], device: str, port: int) -> frozenset[str]:
    peer = links.get((device, port))
    keys = {f"{device}:{port}"}
    if peer is not None:
        keys.add(f"{peer[0]}:{peer[1]}")
    return frozenset(keys)


def build_scenario(preset: str, *, short: bool = False, fabric_name: str | None = None
                   ) -> Scenario:
    """The scripted scenario on ``preset`` (``short``: the faults come sooner, for tests)."""
    from sim.topology import generate

    fabric = generate(preset)
    links: dict[tuple[str, int], tuple[str, int]] = {}
    for link in fabric.links:
        links[(link.a_device, link.a_port)] = (link.b_device, link.b_port)
        links[(link.b_device, link.b_port)] = (link.a_device, link.a_port)
    sus = sorted({s.su for s in fabric.switches if s.su is not None})

    def su(k: int) -> int:
        return sus[min(k, len(sus) - 1)]

    def leaf(k: int, rail: int) -> str:
        return f"leaf-su{su(k):02d}-r{rail}"

    nodes_per_su = fabric.params.nodes_per_su
    node_a = f"node{(su(1) - 1) * nodes_per_su + 6:04d}"
    node_b = f"node{(su(2) - 1) * nodes_per_su + 4:04d}"
    spine = f"spine-su{su(3):02d}-s1"
    spine_peers = frozenset(f"{b[0]}" for (d, _p), b in links.items() if d == spine)
    scale = 0.25 if short else 1.0

    def at(seconds: float) -> str:
        return f"{seconds * scale:.0f}s"

    hot_port = min(x.a_port for x in fabric.links
                   if x.a_device == leaf(2, 4) and x.tier != "host")
    ib = fabric_name or fabric.params.fabric
    roce = f"{ib}-roce"
    expectations = [
        Expectation("flapping link", ib, f"flap:{leaf(0, 3)}:5,count=4,every={at(20)},at={at(30)}",
                    "flap", _ends(links, leaf(0, 3), 5), runbook="decided",
                    or_localised="slow_probe"),
        Expectation("link trained at 2X", ib, f"degraded_width:{leaf(1, 1)}:7,width=2X,at={at(40)}",
                    "degraded_link", _ends(links, leaf(1, 1), 7), runbook="decided"),
        Expectation("swapped pair of cables", ib,
                    f"swap:{node_a}/mlx5_2:1,with={node_a}/mlx5_3:1,at={at(20)}", "miswire",
                    _ends(links, f"{node_a}/mlx5_2", 1) | _ends(links, f"{node_a}/mlx5_3", 1)),
        Expectation("rising BER", ib, f"ber:{node_b}/mlx5_5:1,raw=5e-5,ramp={at(60)},at={at(20)}",
                    "ber", _ends(links, f"{node_b}/mlx5_5", 1), runbook="decided"),
        Expectation("slow-not-dead link", ib,
                    f"slow_link:{node_b}/mlx5_1:1,factor=0.6,at={at(20)}", "slow_probe",
                    # the cable the slow pairs share, named from the topology's routes
                    _ends(links, f"{node_b}/mlx5_1", 1), localised=True),
        # one incident naming the spine: no port of it isolated, no technician sent
        Expectation("spine reboot", ib, f"spine_reboot:{spine},at={at(240)},for={at(40)}",
                    "switch_reboot", frozenset(), devices=spine_peers | {spine},
                    after_s=240 * scale, incident_root=spine),
        # the subnet manager: its standby takes over (and none is left), and one port's
        # traps force heavy sweep after heavy sweep; both are one SM incident, no runbook
        Expectation("SM failover", ib, f"sm_failover:sm-2,at={at(100)}", "sm_failover",
                    frozenset(), devices=frozenset({"sm-2"}), after_s=100 * scale),
        Expectation("heavy-sweep storm", ib,
                    f"sweep_storm:{leaf(2, 2)}:2,count=6,every={at(4)},at={at(60)}",
                    "sweep_storm", _ends(links, leaf(2, 2), 2), after_s=60 * scale),
        Expectation("RoCE pause storm", roce, f"pause_storm:node0003/mlx5_0:1,at={at(30)}",
                    "pause_storm", frozenset({"node0003/mlx5_0:1", "leaf-su01-r0:3"})),
        # ECN thresholds wrong on one priority's queue of a leaf: judged per priority, the
        # verdict names priority 5 (the RoCE class on 3 marks as it should)
        Expectation("ECN misconfigured on one priority", roce,
                    f"ecn_misconfig:leaf-su01-r1,prio=5,at={at(30)}", "ecn_pfc_misconfig",
                    frozenset(), devices=frozenset({"leaf-su01-r1"}), priority=5,
                    after_s=30 * scale),
        # PDR's limit: a module past 70 °C
        Expectation("overheating optic", ib,
                    f"optic_overheat:{node_b}/mlx5_6:1,temp=76,at={at(30)}", "optic_temp",
                    frozenset({f"{node_b}/mlx5_6:1"})),
        # ECMP polarisation: the plan names the leaf's uplinks, one carries its peers' load
        Expectation("hot uplink", ib, f"hot_uplink:{leaf(2, 4)}:{hot_port}", "hot_uplink",
                    frozenset({f"{leaf(2, 4)}:{hot_port}"})),
    ]
    def node(k: int, n: int) -> str:
        return f"node{(su(k) - 1) * nodes_per_su + n:04d}"

    half = max(1, nodes_per_su // 2)
    jobs = [
        # the rising BER and the slow link are on node_b
        ("train-a", list(dict.fromkeys([node(2, n) for n in range(1, 5)]))),
        # the flap, the 2X link and the swapped pair: its miswired rails cross the spines
        ("train-b", list(dict.fromkeys([node(0, 5), node(1, 6), node(1, 7), node(0, 8)]))),
        # a job elsewhere: nothing injected is on its links
        ("eval-c", [node(3, n) for n in range(half + 1, half + 1 + max(1, half // 2))]),
    ]
    # the reboot (at 240 s, 40 s long) settles with two more bounces 15 s apart
    return Scenario(ib_fabric=ib, roce_fabric=roce, ib_preset=preset, roce_preset="su",
                    interval="2s" if short else "10s", expectations=expectations,
                    min_duration_s=(240 + 40) * scale + 30 + 60, jobs=jobs)
