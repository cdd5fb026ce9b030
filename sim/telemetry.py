"""The telemetry generator: what the simulated fabric reports, step by step.

``Simulator(fabric, faults=..., controller=...)`` advances a simulated clock one sampling
interval per ``step()`` and returns the contract messages of that interval, already encoded
(topic, key, value), so that 100,000 ports at a 10 s interval cost well under the interval:

- ``fabric.counters``: one batch per device (a switch's cabled ports, or an HCA's port 1)
  of cumulative counters that evolve as real ones do: monotonic, legacy PortCounters
  registers that stick at their maximum (16-bit symbol errors, 8-bit link_downed, ...),
  zeroed when the controller resets them, FEC-corrected blocks growing with the pre-FEC
  BER, a little background noise, width and speed as trained, module temperature and
  receive power. A switch that is rebooting answers nothing; afterwards its counters
  start again from zero.
- ``fabric.port-events``: trap 128 downs and ups from the switch end(s) of each link that
  changes state (a CA sends no traps; its link_downed counter shows the down instead).
- ``fabric.probes``: ib_write_bw between same-rail HCAs (same leaf, and across SUs through
  spines and cores on ECMP paths) and one NCCL all-reduce per rail and SU; bandwidth is the
  baseline times the worst link on the path (degraded width or speed, slow link, hot
  uplink, pause storm, errors), 0 when a host link is down.
- ``fabric.sm``: the simulated subnet manager (``sm-1`` master, ``sm-2`` standby) at the
  first step, and what the ``sm_failover`` / ``sweep_storm`` faults make it do.
- ``fabric.topology``: the discovered topology (links that are up, as they trained, with
  swapped cables swapped) at the first step and every ``topology_every`` steps.

Controller commands (``sim.controller``) take effect at the next step: an isolated port's
link goes down and stays down (no flapping, no traffic, ECMP routes around it), a reset
zeroes the port's counters, a successful repair clears the faults on that cable.
Randomness comes from one generator per step seeded from (seed, step), so a run with the
same inputs emits the same bytes. ``decode_messages`` turns the output into schema models.
"""

from __future__ import annotations

import logging
import math
import random
import time
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from schemas import (
    COUNTER_FIELDS,
    LEGACY_COUNTER_BITS,
    JobPlacement,
    SmEvent,
    columns_wire,
    decode,
    encode,
)
from schemas.events import Event
from schemas.topics import COUNTERS, JOBS, PORT_EVENTS, PROBES, SM, TOPOLOGY
from sim.controller import ControllerView, SimController
from sim.faults import SIM_SMS, SM_FAULTS, Fault, FaultError, check_all, parse_spec
from sim.topology import LANE_GBPS, WIDTH_LANES, Fabric, Hca, Link

SOURCE = "sim"
TRAP_LINK_STATE_CHANGE = 128
CAP64 = 2**64 - 1
# PortXmitWait is read from PortCountersExtended (64 bits, as ``perfquery -x`` prints it):
# at a real credit-wait share the 32-bit legacy register pegs within seconds.
CAPS = [2 ** LEGACY_COUNTER_BITS[f] - 1 if f in LEGACY_COUNTER_BITS and f != "xmit_wait"
        else CAP64 for f in COUNTER_FIELDS]
F = {name: i for i, name in enumerate(COUNTER_FIELDS)}
SYM, LER, LDN, RCV, RRP, XDS, XWT = (F[n] for n in (
    "symbol_errors", "link_error_recovery", "link_downed", "rcv_errors",
    "rcv_remote_phys_errors", "xmit_discards", "xmit_wait"))
FEC, FUN, PRX, PTX, ECN = (F[n] for n in (
    "fec_corrected", "fec_uncorrectable", "pfc_pause_rx", "pfc_pause_tx", "ecn_marked"))
CNS, CNH, OOS, LAT, RXD = (F[n] for n in (
    "cnp_sent", "cnp_handled", "out_of_sequence", "local_ack_timeout_err", "rx_discards_phy"))
IB_WRITE_BW_EFFICIENCY = 0.98  # ib_write_bw at 8 MiB reaches about 98 % of the line rate
NCCL_BUSBW_EFFICIENCY = 0.92
IB_WRITE_BW_SIZE = 8 * 1024 * 1024
NCCL_SIZE = 1024 * 1024 * 1024
PROBATION_STEPS = 60  # a link back from isolation is probed every step for this many
# xmit_wait ticks per second on a busy port, and on a polarized (hot) uplink. A tick is
# 8 bytes of the port's line rate (Quantum-2): at NDR 4X 6.25e9 ticks are one second, so a
# busy port waits ~1 % of the time and a hot uplink ~30 % (the congestion rule's 10 %).
XMIT_WAIT_BUSY = 1.0e8
XMIT_WAIT_HOT = 2.0e9
# Share of the interval a RoCE port spends paused: a healthy busy port, a stormed queue.
PAUSED_BUSY = 0.002
PAUSED_STORM = 0.998
# RoCE rides lossless priority 3; SONiC's default QoS makes 3 and 4 lossless (pfc_enable 3,4)
ROCE_PRIO = 3
LOSSLESS_PRIOS = (3, 4)
SWEEP_MS = 400  # a heavy sweep of the simulated SM, trap to SUBNET UP


log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Message:
    """One encoded contract message, ready for ``Publisher.send_raw``."""

    topic: str
    key: bytes
    value: bytes


@dataclass
class StepOutput:
    """What one step produced."""

    ts: int
    step: int
    messages: list[Message] = field(default_factory=list)
    port_samples: int = 0
    port_events: int = 0
    probes: int = 0
    topology: bool = False

    def events(self) -> list[Event]:
        return decode_messages(self.messages)


def decode_messages(messages: Iterable[Message]) -> list[Event]:
    """The schema models of encoded messages (validates every one)."""
    return [decode(m.value) for m in messages]


class _Mod:
    """What continuous faults do to one port during a step."""

    __slots__ = ("raw", "sym", "sat", "prx", "ptx", "ecn_scale", "xw", "disc", "power",
                 "temp", "util", "tx_scale", "paused", "prio", "prio_ptx")

    def __init__(self) -> None:
        self.raw: float | None = None
        self.sym = 0.0
        self.sat: list[tuple[int, float]] = []
        self.prx = 0.0
        self.ptx = 0.0
        self.ecn_scale = 1.0
        self.xw = 0.0
        self.disc = 0.0
        self.power = 0.0
        self.temp = 0.0  # degrees over the module's own
        self.util: float | None = None  # the port's transmit utilisation, where a fault sets it
        self.tx_scale = 1.0  # its transmitted data, scaled
        self.paused = 0.0  # share of the interval its queue spent paused
        self.prio: int | None = None  # ecn_misconfig on one priority: its queue marks little
        self.prio_ptx = 0.0  # pauses/s sent on that priority


class Simulator:
    """The fabric's telemetry over a simulated clock (see the module docstring)."""

    def __init__(self, fabric: Fabric, *, faults: Iterable[Fault] = (),
                 controller: SimController | None = None, seed: int = 0,
                 start_ms: int | None = None, interval_s: float = 10.0,
                 probe_every: int = 6, topology_every: int = 30,
                 probe_pairs_per_rail: int = 32,
                 jobs: Sequence[JobPlacement] = (), columnar: bool = False) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        self.fabric = fabric
        self.name = fabric.fabric
        self.faults: list[Fault] = check_all(faults, fabric)
        self.controller = controller
        self.seed = seed
        self.start_ms = int(time.time() * 1000) if start_ms is None else int(start_ms)
        self.interval_ms = int(round(interval_s * 1000))
        self.probe_every = probe_every
        self.topology_every = topology_every
        self.probe_pairs_per_rail = probe_pairs_per_rail
        self.columnar = columnar  # counters as counter_columns messages
        # Placements go out with every topology snapshot (same ids: the ledger keeps one).
        self.jobs: list[JobPlacement] = list(jobs)
        self.now_ms = self.start_ms
        self.step_no = 0
        self.roce = fabric.params.transport == "roce"

        links = fabric.links
        self.links: list[Link] = links
        self.link_index: dict[tuple[str, int], int] = {}
        for li, link in enumerate(links):
            self.link_index[(link.a_device, link.a_port)] = li
            self.link_index[(link.b_device, link.b_port)] = li
        self.is_switch = {s.name for s in fabric.switches}
        nominal_bps = fabric.params.line_gbps * 1e9
        self.nominal_gbps = fabric.params.line_gbps
        self.l_causes: list[set[str]] = [set() for _ in links]
        self.l_width: list[str] = [x.width for x in links]
        self.l_speed: list[str] = [x.speed for x in links]
        self.l_bps: list[float] = [nominal_bps] * len(links)
        self.l_factor: list[float] = [1.0] * len(links)
        self.l_disabled: list[set[tuple[str, int]]] = [set() for _ in links]

        # Ports, device by device, in the fabric's order.
        self.p_dev: list[str] = []
        self.p_port: list[int] = []
        self.p_link: list[int] = []
        self.p_hca: list[bool] = []
        self.dev_ports: list[tuple[str, list[int]]] = []
        self.port_index: dict[tuple[str, int], int] = {}
        for device in fabric.devices():
            idx = []
            for port in fabric.device_ports(device):
                pi = len(self.p_dev)
                self.p_dev.append(device)
                self.p_port.append(port)
                self.p_link.append(self.link_index[(device, port)])
                self.p_hca.append(device not in self.is_switch)
                self.port_index[(device, port)] = pi
                idx.append(pi)
            self.dev_ports.append((device, idx))
        n = len(self.p_dev)
        # the far end of each port's cable: what a port receives is what its peer sends
        self.p_peer: list[int | None] = [
            self.port_index.get(self.links[li].other_end(d, p))
            for d, p, li in zip(self.p_dev, self.p_port, self.p_link, strict=True)]
        self.cnt: list[list[int]] = [[0] * len(COUNTER_FIELDS) for _ in range(n)]
        # PortXmitData (4-octet words) and, with RoCE, microseconds paused (mlx5's
        # rx_prio*_pause_duration): beside cnt, which follows the ledger's counter columns
        self.xdata = [0] * n
        self.pdur = [0] * n
        # RoCE switch ports: pauses sent per priority and ECN marks per egress queue
        # (SONiC show pfc counters / show queue wredcounters), [tx p0-7, marks q0-7]
        self.pq: dict[int, list[int]] = {}
        # Per-port character: pre-FEC BER, post-FEC BER, temperature, optical power, load.
        rng = random.Random(f"{seed}:ports")  # noqa: S311 - simulation noise, not secrets
        self.base_raw = [10 ** rng.uniform(-10.0, -8.0) for _ in range(n)]
        # Healthy post-FEC BER well below the field table's symbol-BER levels (at NDR 1e-14
        # over 12 min, 1e-15 over 125 min: about 3 errors; warning from 2): at 1e-18 an NDR
        # port sees a symbol error every ~7 h, so two within 125 min is a fault, not noise.
        self.base_eff = [10 ** rng.uniform(-20.0, -18.0) for _ in range(n)]
        self.temp = [rng.uniform(42.0, 58.0) for _ in range(n)]
        self.power = [rng.uniform(-1.5, 1.5) for _ in range(n)]
        self.util = [rng.uniform(0.2, 0.7) for _ in range(n)]
        # Fault bookkeeping.
        self.fixed: set[int] = set()
        self.rebooting: set[str] = set()
        self._fault_links: list[list[int]] = [self._links_of(f) for f in self.faults]
        self._seen_isolated: frozenset[str] = frozenset()
        # links back from isolation (a runbook's probation): probed every step until this
        # step, in both directions, so they carry traffic and a fault that is still there
        # shows (slow probes, and the errors the traffic meets)
        self._probation: dict[int, int] = {}
        self._node_pos: dict[str, int] = {}
        self._seen_resets: dict[str, int] = {}
        self._seen_repaired: dict[str, int] = {}
        self._serial = -1
        self._seen_fault_seq = 0
        self.rejected: list[tuple[str, str]] = []  # (spec, reason) of injections refused
        self._sat_prev: dict[int, dict[str, int]] = {}  # port -> legacy counters at max
        self._sat_ports: set[int] = set()  # ports a counter_saturation fault targets
        for fault in self.faults:
            self._note_saturation(fault)
        self._build_routes()
        self._initial_state()

    # -- set-up ----------------------------------------------------------------------------

    def _links_of(self, fault: Fault) -> list[int]:
        if fault.kind == "sm_failover":
            return []  # an SM, not a cable
        if fault.port is not None:
            out = [self.link_index[(fault.device, fault.port)]]
            if fault.kind == "swap" and fault.with_device is not None:
                out.append(self.link_index[(fault.with_device, fault.with_port or 0)])
            return out
        return [self.link_index[(fault.device, p)]
                for p in self.fabric.device_ports(fault.device)]

    def _initial_state(self) -> None:
        """Faults in force from the start and a persisted controller state, without events."""
        for fi, fault in enumerate(self.faults):
            if fault.at_ms != 0:
                continue
            if fault.kind == "missing_link":
                self.l_causes[self._fault_links[fi][0]].add(f"f{fi}")
            elif fault.kind in ("degraded_width", "degraded_speed"):
                self._retrain(fi, degrade=True)
        if self.controller is not None:
            view = self.controller.view()
            for key in view.isolated:
                self._isolate(key, add=True)
            self._seen_isolated = view.isolated
            self._seen_resets = dict(view.resets)
            self._seen_repaired = dict(view.repaired)
            self._serial = view.serial
            # Faults queued before this simulator started belong to an earlier run.
            self._seen_fault_seq = max((seq for seq, _ in view.faults), default=0)
        for li in range(len(self.links)):
            self._update_bps(li)

    def _build_routes(self) -> None:
        """ECMP adjacency: leaf and spine uplinks, core downlinks per SU, spine downlinks."""
        self.up: dict[str, list[int]] = {}
        self.down_to: dict[tuple[str, str], list[int]] = {}
        self.core_down: dict[tuple[str, int], list[int]] = {}
        for li, link in enumerate(self.links):
            if link.tier == "host":
                continue
            self.up.setdefault(link.a_device, []).append(li)
            self.down_to.setdefault((link.b_device, link.a_device), []).append(li)
            if link.tier == "spine-core":
                su = self.fabric.su_of(link.a_device)
                if su is not None:
                    self.core_down.setdefault((link.b_device, su), []).append(li)

    # -- the step --------------------------------------------------------------------------

    def step(self) -> StepOutput:
        """Advance one interval; returns the messages of ``(now, now + interval]``."""
        t0 = self.now_ms
        t1 = t0 + self.interval_ms
        lo = t0 - self.start_ms if self.step_no else -1
        hi = t1 - self.start_ms
        self.step_no += 1
        out = StepOutput(ts=t1, step=self.step_no)
        rng = random.Random(f"{self.seed}:step:{self.step_no}")  # noqa: S311 - noise
        events: list[tuple[int, int, dict[str, Any]]] = []
        self._apply_controller(t0 + 1, events)
        self._apply_fault_edges(lo, hi, events)
        events.sort(key=lambda e: (e[0], e[1]))
        for _t, _seq, event in events:
            key = f"{event['device']}:{event['port']}".encode()
            out.messages.append(Message(PORT_EVENTS.name, key, orjson.dumps(event)))
        out.port_events = len(events)
        out.messages.extend(self._sm_messages(lo, hi))
        mods = self._mods(hi)
        out.port_samples = self._counters(t1, rng, mods, out.messages)
        if self.probe_every and self.step_no % self.probe_every == 1 % self.probe_every:
            probes = self.probe_round(t1, rng)
            out.probes = len(probes)
            out.messages.extend(probes)
        if self._probation:
            probes = self.probation_probes(t1, rng)
            out.probes += len(probes)
            out.messages.extend(probes)
        if self.topology_every and self.step_no % self.topology_every == 1 % self.topology_every:
            out.messages.append(self.topology_message(t1))
            out.topology = True
            out.messages.extend(Message(JOBS.name, job.job.encode(), encode(job))
                                for job in self.jobs)
        self.now_ms = t1
        if self.controller is not None:
            self.controller.write_health(self.name, t1, sorted(self.faulty_ports()),
                                         self._seen_repaired)
        return out

    def faulty_ports(self) -> set[str]:
        """Port keys (both cable ends) with a fault present now: started, not repaired, and
        not over (a finite outage that ended, a reboot that finished). What a return-to-
        service check would find wrong; isolation does not make a bad cable good."""
        rel = self.now_ms - self.start_ms
        out: set[str] = set()
        for fi, fault in enumerate(self.faults):
            if fi in self.fixed or not fault.started(rel):
                continue
            occ = fault.occurrences()
            over = all(end is not None and max([end, *(up for _, up in fault.bounce_times(end))])
                       <= rel for _, end in occ)
            if over and fault.kind != "flap":
                continue  # a flapping cable stays suspect after its last bounce
            for li in self._fault_links[fi]:
                for device, port in self.links[li].ends():
                    out.add(f"{device}:{port}")
        return out

    def run_steps(self, n: int) -> list[StepOutput]:
        return [self.step() for _ in range(n)]

    # -- controller ------------------------------------------------------------------------

    def _apply_controller(self, t: int, events: list[tuple[int, int, dict[str, Any]]]) -> None:
        if self.controller is None:
            return
        view: ControllerView = self.controller.view()
        if view.serial == self._serial:
            return
        self._serial = view.serial
        for key in sorted(view.isolated - self._seen_isolated):
            self._isolate(key, add=True, t=t, events=events)
        for key in sorted(self._seen_isolated - view.isolated):
            self._isolate(key, add=False, t=t, events=events)
            pi = self._port_of_key(key)
            if pi is not None:
                self._probation[self.p_link[pi]] = self.step_no + PROBATION_STEPS
        self._seen_isolated = view.isolated
        for key, seq in view.resets.items():
            if seq != self._seen_resets.get(key):
                pi = self._port_of_key(key)
                if pi is not None:
                    self.cnt[pi] = [0] * len(COUNTER_FIELDS)
                    self.xdata[pi] = self.pdur[pi] = 0
                    self.pq.pop(pi, None)
        self._seen_resets = dict(view.resets)
        for key, when in view.repaired.items():
            if when != self._seen_repaired.get(key):
                self._repair(key, t, events)
        self._seen_repaired = dict(view.repaired)
        for seq, spec in view.faults:
            if seq <= self._seen_fault_seq:
                continue
            self._seen_fault_seq = seq
            try:
                self.inject(parse_spec(spec))
            except FaultError as exc:
                self.rejected.append((spec, str(exc)))
                log.warning("injected fault %s refused: %s", spec, exc)

    def inject(self, fault: Fault) -> Fault:
        """Add a fault while running; its ``at`` counts from now (the next step)."""
        fault.check(self.fabric)
        rel = self.now_ms - self.start_ms
        shifted = replace(fault, at_ms=fault.at_ms + rel + 1, label=fault.label)
        self.faults.append(shifted)
        self._fault_links.append(self._links_of(shifted))
        self._note_saturation(shifted)
        return shifted

    def _note_saturation(self, fault: Fault) -> None:
        if fault.kind == "counter_saturation" and fault.port is not None:
            self._sat_ports.add(self.port_index[(fault.device, fault.port)])

    def _port_of_key(self, key: str) -> int | None:
        device, _, port = key.rpartition(":")
        if not port.isdigit():
            return None
        return self.port_index.get((device, int(port)))

    def _isolate(self, key: str, *, add: bool, t: int | None = None,
                 events: list[tuple[int, int, dict[str, Any]]] | None = None) -> None:
        pi = self._port_of_key(key)
        if pi is None:
            return  # a port this fabric does not have: nothing to take down
        li = self.p_link[pi]
        end = (self.p_dev[pi], self.p_port[pi])
        if add:
            self.l_disabled[li].add(end)
            self._cause(li, "isolated:" + key, True, t, events)
        else:
            self.l_disabled[li].discard(end)
            self._cause(li, "isolated:" + key, False, t, events)

    def _repair(self, key: str, t: int, events: list[tuple[int, int, dict[str, Any]]]) -> None:
        pi = self._port_of_key(key)
        if pi is None:
            return
        li = self.p_link[pi]
        for fi, fault in enumerate(self.faults):
            if fi in self.fixed or li not in self._fault_links[fi]:
                continue
            if fault.kind == "spine_reboot" or (fault.kind == "ecn_misconfig"
                                                 and fault.port is None):
                continue  # a device fault is not fixed by work on one cable
            self.fixed.add(fi)
            for fl in self._fault_links[fi]:
                self._cause(fl, f"f{fi}", False, t, events)
                self._cause(fl, f"r{fi}", False, t, events)
            if fault.kind in ("degraded_width", "degraded_speed"):
                self._retrain(fi, degrade=False)

    # -- link state ------------------------------------------------------------------------

    def _cause(self, li: int, cause: str, add: bool, t: int | None,
               events: list[tuple[int, int, dict[str, Any]]] | None) -> None:
        causes = self.l_causes[li]
        was_up = not causes
        if add:
            causes.add(cause)
        else:
            causes.discard(cause)
        now_up = not causes
        if was_up == now_up or t is None or events is None:
            return
        link = self.links[li]
        for device, port in link.ends():
            if device in self.rebooting:
                continue  # a switch that is rebooting neither traps nor counts
            pi = self.port_index[(device, port)]
            c = self.cnt[pi]
            if not now_up:
                c[LDN] = min(c[LDN] + 1, CAPS[LDN])
                c[LER] = min(c[LER] + 1, CAPS[LER])
            if device not in self.is_switch:
                continue
            if now_up:
                phys = "LinkUp"
            elif (device, port) in self.l_disabled[li]:
                phys = "Disabled"
            else:
                phys = "Polling"
            state = "up" if now_up else "down"
            events.append((t, len(events), {
                "v": 1, "id": f"sim:{self.name}:pe:{device}:{port}:{t}:{state}",
                "ts": t, "fabric": self.name, "source": SOURCE, "kind": "port_event",
                "device": device, "port": port, "state": state,
                "trap": TRAP_LINK_STATE_CHANGE, "phys_state": phys, "reason": None}))

    def _retrain(self, fi: int, *, degrade: bool) -> None:
        fault = self.faults[fi]
        li = self._fault_links[fi][0]
        link = self.links[li]
        if fault.kind == "degraded_width":
            self.l_width[li] = (fault.width or "2X") if degrade else link.width
        else:
            self.l_speed[li] = (fault.speed or "HDR") if degrade else link.speed
        self._update_bps(li)

    def _update_bps(self, li: int) -> None:
        lanes = WIDTH_LANES.get(self.l_width[li], 4)
        self.l_bps[li] = lanes * LANE_GBPS.get(self.l_speed[li], 100.0) * 1e9

    def link_up(self, li: int) -> bool:
        return not self.l_causes[li]

    # -- the subnet manager ------------------------------------------------------------------

    def _sm_messages(self, lo: int, hi: int) -> list[Message]:
        """fabric.sm in ``(lo, hi]``: the SMs at the first step, then the SM faults' events.

        ``sm-1`` is master and ``sm-2`` its standby. ``sm_failover`` makes the standby
        master (no standby is left) and sweeps; each ``sweep_storm`` occurrence is one heavy
        sweep of ``SWEEP_MS`` forced by trap 128 from the port's switch, naming the port."""
        out: list[Message] = []

        def send(rel: int, event: str, **fields: Any) -> None:
            t = self.start_ms + rel
            msg = SmEvent.model_validate({
                "id": f"sim:{self.name}:sm:{event}:{fields.get('sm', SIM_SMS[0])}:{t}",
                "ts": t, "fabric": self.name, "source": SOURCE, "event": event,
                "sm": SIM_SMS[0], **fields})
            out.append(Message(SM.name, self.name.encode(), encode(msg)))

        if lo < 0:
            send(0, "state", state="master", priority=14)
            send(0, "standby", sms=list(SIM_SMS[1:]))
        for fi, fault in enumerate(self.faults):
            if fault.kind not in SM_FAULTS or fi in self.fixed:
                continue
            for start, _end in fault.occurrences():
                if not lo < start <= hi:
                    continue
                if fault.kind == "sm_failover":
                    send(start, "state", sm=fault.device, state="master", priority=14)
                    send(start + 1, "standby", sm=fault.device, sms=[])
                    send(start + 2, "sweep", sm=fault.device,
                         start=self.start_ms + start + 2 - SWEEP_MS,
                         end=self.start_ms + start + 2, trigger="became master")
                else:  # the occurrence is the sweep's SUBNET UP
                    port = f"{fault.device}:{fault.port}"
                    send(start, "sweep", start=self.start_ms + start - SWEEP_MS,
                         end=self.start_ms + start, trigger="trap 128",
                         ports=[port], devices=[fault.device])
        return out

    # -- faults ----------------------------------------------------------------------------

    def _apply_fault_edges(self, lo: int, hi: int,
                           events: list[tuple[int, int, dict[str, Any]]]) -> None:
        edges: list[tuple[int, int, int, str]] = []  # (t rel, fault, order, what)
        for fi, fault in enumerate(self.faults):
            if fi in self.fixed:
                continue
            for start, end in fault.occurrences():
                if lo < start <= hi and not (start == 0 and fault.kind in (
                        "missing_link", "degraded_width", "degraded_speed")):
                    edges.append((start, fi, 0, "start"))
                if end is not None and lo < end <= hi:
                    edges.append((end, fi, 1, "end"))
                if end is not None and fault.kind == "spine_reboot":
                    for down, up in fault.bounce_times(end):
                        if lo < down <= hi:
                            edges.append((down, fi, 2, "bounce-down"))
                        if lo < up <= hi:
                            edges.append((up, fi, 3, "bounce-up"))
        edges.sort()
        for rel, fi, _order, what in edges:
            t = self.start_ms + rel
            fault = self.faults[fi]
            links = self._fault_links[fi]
            kind = fault.kind
            starting = what == "start"
            if what.startswith("bounce"):
                for li in links:
                    self._cause(li, f"b{fi}", what == "bounce-down", t, events)
                continue
            if kind in ("flap", "link_down", "missing_link"):
                if starting and any(k.startswith("isolated:") for k in self.l_causes[links[0]]):
                    continue  # an isolated port is disabled: it cannot flap
                self._cause(links[0], f"f{fi}", starting, t, events)
            elif kind in ("degraded_width", "degraded_speed"):
                # Retraining is a bounce: down now, up after down_ms at the new rate.
                self._cause(links[0], f"r{fi}", True, t, events)
                self._retrain(fi, degrade=starting)
                self._cause(links[0], f"r{fi}", False, t + fault.down_ms, events)
            elif kind == "spine_reboot":
                if starting:
                    self.rebooting.add(fault.device)  # first: a rebooting switch sends no trap
                    for li in links:
                        self._cause(li, f"f{fi}", True, t, events)
                else:
                    self.rebooting.discard(fault.device)
                    for p in self.fabric.device_ports(fault.device):
                        pi = self.port_index[(fault.device, p)]
                        self.cnt[pi] = [0] * len(COUNTER_FIELDS)
                        self.xdata[pi] = self.pdur[pi] = 0
                        self.pq.pop(pi, None)
                    for li in links:
                        self._cause(li, f"f{fi}", False, t, events)
            elif kind == "counter_saturation" and starting and fault.port is not None:
                pi = self.port_index[(fault.device, fault.port)]
                field_i = F[fault.counter or "symbol_errors"]
                self.cnt[pi][field_i] = CAPS[field_i]

    def _mods(self, rel: int) -> dict[int, _Mod]:
        """Per-port effects of the continuous faults in force at ``rel``; link probe factors."""
        mods: dict[int, _Mod] = {}
        self.l_factor = [1.0] * len(self.links)
        for li in range(len(self.links)):
            if self.l_bps[li] < self.nominal_gbps * 1e9:
                self.l_factor[li] = self.l_bps[li] / (self.nominal_gbps * 1e9)

        def mod(device: str, port: int) -> _Mod:
            pi = self.port_index[(device, port)]
            m = mods.get(pi)
            if m is None:
                m = mods[pi] = _Mod()
            return m

        for fi, fault in enumerate(self.faults):
            if fi in self.fixed or fault.kind in SM_FAULTS:
                continue  # the SM's faults show on fabric.sm alone
            occ = fault.active(rel)
            if occ is None:
                continue
            frac = 1.0 if not fault.ramp_ms else min(1.0, (rel - occ[0]) / fault.ramp_ms)
            kind = fault.kind
            li = self._fault_links[fi][0]
            port = fault.port
            if kind == "ber" and port is not None:
                m = mod(fault.device, port)
                base = self.base_raw[self.port_index[(fault.device, port)]]
                target = max(fault.raw or 5e-5, base)
                m.raw = base * (target / base) ** frac
                m.power = -3.5 * frac  # a dirty or failing optic: receive power sags
                eff = _effective_ber(m.raw)
                self.l_factor[li] = min(self.l_factor[li], max(0.5, 1.0 - eff * 1e8))
            elif kind == "symbol_errors" and port is not None:
                m = mod(fault.device, port)
                m.sym += (fault.per_hour or 2000.0) / 3600.0 * frac
                self.l_factor[li] = min(self.l_factor[li], 0.97)
            elif kind == "counter_saturation" and port is not None:
                m = mod(fault.device, port)
                m.sat.append((F[fault.counter or "symbol_errors"],
                              (fault.per_hour or 0.0) / 3600.0))
            elif kind == "slow_link":
                self.l_factor[li] = min(self.l_factor[li], fault.factor or 0.6)
            elif kind == "hot_uplink" and port is not None:
                m = mod(fault.device, port)
                m.xw += XMIT_WAIT_HOT
                m.disc += 5.0
                m.ecn_scale *= 20.0
                m.util = 0.97  # the polarised hash puts the leaf's flows on this one
                for pli in self.up.get(fault.device, ()):
                    if pli != li and self.links[pli].a_device == fault.device:
                        mod(fault.device, self.links[pli].a_port).tx_scale *= (
                            1.0 - (fault.share or 0.9))
                self.l_factor[li] = min(self.l_factor[li], fault.factor or 0.7)
            elif kind == "pause_storm" and port is not None:
                rate = fault.rate or 80_000.0
                m = mod(fault.device, port)
                m.prx += rate
                m.paused = max(m.paused, PAUSED_STORM)
                if not fault.drain:
                    m.tx_scale = 0.0  # stuck: nothing leaves the paused queue
                peer = self.links[li].other_end(fault.device, port)
                mod(*peer).ptx += rate
                self.l_factor[li] = min(self.l_factor[li], 0.05 if not fault.drain else 0.5)
            elif kind == "optic_overheat" and port is not None:
                pi = self.port_index[(fault.device, port)]
                mod(fault.device, port).temp += max(0.0, (fault.temp or 75.0) - self.temp[pi]) * frac
            elif kind == "optic_power" and port is not None:
                mod(fault.device, port).power -= (fault.db or 6.0) * frac
            elif kind == "ecn_misconfig":
                rate = fault.rate or 3_000.0
                ports = [port] if port is not None else self.fabric.device_ports(fault.device)
                for p in ports:
                    m = mod(fault.device, p)
                    m.ptx += rate
                    if fault.prio is None:
                        m.ecn_scale *= 0.01
                    else:  # only that priority's queue has the wrong thresholds
                        m.prio, m.prio_ptx = fault.prio, m.prio_ptx + rate
                    pli = self.link_index[(fault.device, p)]
                    peer = self.links[pli].other_end(fault.device, p)
                    pm = mod(*peer)
                    pm.prx += rate
                    pm.ecn_scale *= 0.01
                    self.l_factor[pli] = min(self.l_factor[pli], 0.85)
        for li in range(len(self.links)):
            if self.l_causes[li]:
                self.l_factor[li] = 0.0
        return mods

    # -- counters --------------------------------------------------------------------------

    def _counters(self, ts: int, rng: random.Random, mods: dict[int, _Mod],
                  out: list[Message]) -> int:
        dt = self.interval_ms / 1000.0
        r = rng.random
        causes = self.l_causes
        l_bps = self.l_bps
        l_width = self.l_width
        l_speed = self.l_speed
        p_link = self.p_link
        p_port = self.p_port
        p_hca = self.p_hca
        cnt = self.cnt
        base_raw = self.base_raw
        base_eff = self.base_eff
        temp = self.temp
        power = self.power
        util = self.util
        xdata = self.xdata
        roce = self.roce
        cap16 = CAPS[SYM]
        cap8 = CAPS[LER]
        cap32 = CAPS[XWT]
        sqrt = math.sqrt
        samples_total = 0
        sat_prev = self._sat_prev
        sat_ports = self._sat_ports
        prefix = f"sim:{self.name}:c:"
        dumps = orjson.dumps
        topic = COUNTERS.name
        for device, idx in self.dev_ports:
            if device in self.rebooting:
                continue
            samples = []
            for pi in idx:
                li = p_link[pi]
                c = cnt[pi]
                u1 = r()
                u2 = r()
                u3 = r()
                if causes[li]:
                    down = _down_sample(p_port[pi], c, p_hca[pi], roce)
                    down["port_xmit_data"] = xdata[pi]
                    if roce:
                        down["pfc_pause_duration_us"] = self.pdur[pi]
                    if pi in sat_prev or _any_at_max(c):
                        self._mark_bits(pi, c, down)
                    samples.append(down)
                    continue
                m = mods.get(pi)
                raw = base_raw[pi]
                eff = base_eff[pi]
                pw = power[pi]
                tc = temp[pi]
                sym_extra = 0.0
                tx_util = util[pi]
                if m is not None:
                    if m.raw is not None:
                        raw = m.raw
                        eff = max(eff, _effective_ber(raw))
                    pw += m.power
                    tc += m.temp
                    sym_extra = m.sym
                    if m.util is not None:
                        tx_util = m.util
                    tx_util *= m.tx_scale
                xdata[pi] += int(tx_util * l_bps[li] * dt * (0.95 + 0.1 * u2) / 32)
                bits = l_bps[li] * dt
                lam = bits * raw
                fec = int(lam + (u1 - 0.5) * 2.0 * sqrt(lam))
                c[FEC] += fec if fec > 0 else 0
                lam_sym = bits * eff + sym_extra * dt
                if lam_sym < 1.0:
                    new_sym = 1 if u2 < lam_sym else 0
                else:
                    new_sym = int(lam_sym + (u2 - 0.5) * 2.0 * sqrt(lam_sym))
                if new_sym > 0:
                    v = c[SYM] + new_sym
                    c[SYM] = v if v < cap16 else cap16
                    v = c[RCV] + (new_sym + 9) // 10
                    c[RCV] = v if v < cap16 else cap16
                    c[FUN] += new_sym // 4
                    if new_sym > 100:
                        v = c[LER] + 1
                        c[LER] = v if v < cap8 else cap8
                ut = util[pi]
                xw = XMIT_WAIT_BUSY * ut * ut * dt * (0.5 + u3)
                if m is not None:
                    if m.xw:
                        xw += m.xw * dt * (0.9 + 0.2 * u3)
                    if m.disc:
                        v = c[XDS] + int(m.disc * dt * (0.5 + u1))
                        c[XDS] = v if v < cap16 else cap16
                    for fi_, per_s in m.sat:
                        v = c[fi_] + int(per_s * dt + u2)
                        c[fi_] = v if v < CAPS[fi_] else CAPS[fi_]
                v = c[XWT] + int(xw)
                c[XWT] = v if v < cap32 else cap32
                s: dict[str, Any] = {
                    "port": p_port[pi], "symbol_errors": c[SYM], "link_error_recovery": c[LER],
                    "link_downed": c[LDN], "rcv_errors": c[RCV],
                    "rcv_remote_phys_errors": c[RRP], "xmit_discards": c[XDS],
                    "xmit_wait": c[XWT], "local_link_integrity_errors": c[F[
                        "local_link_integrity_errors"]],
                    "excessive_buffer_overrun": c[F["excessive_buffer_overrun"]],
                    "fec_corrected": c[FEC], "fec_uncorrectable": c[FUN],
                    "raw_ber": float(f"{raw:.3g}"), "effective_ber": float(f"{eff:.3g}"),
                    "width": l_width[li], "speed": l_speed[li],
                    "module_temp_c": round(tc + (u3 - 0.5), 1),
                    "rx_power_dbm": round(pw + (u1 - 0.5) * 0.1, 2),
                    "port_xmit_data": xdata[pi],
                }
                if roce or p_hca[pi]:
                    self._transport_counters(pi, c, s, m, dt, u1, u2, roce)
                # Only these legacy registers move on their own; the others reach their
                # maximum only through a counter_saturation fault (sat_ports).
                if (c[SYM] == cap16 or c[XWT] == cap32 or c[LDN] == cap8 or c[LER] == cap8
                        or c[RCV] == cap16 or c[XDS] == cap16 or pi in sat_prev
                        or pi in sat_ports):
                    self._mark_bits(pi, c, s)
                samples.append(s)
            if not samples:
                continue
            samples_total += len(samples)
            msg = {"v": 1, "id": f"{prefix}{device}:{ts}", "ts": ts, "fabric": self.name,
                   "source": SOURCE, "kind": "counters", "device": device, "ports": samples}
            if self.columnar:
                msg = columns_wire(msg)
            out.append(Message(topic, device.encode(), dumps(msg)))
        return samples_total

    def _mark_bits(self, pi: int, c: list[int], sample: dict[str, Any]) -> None:
        """Say how wide the legacy registers at their maximum are (``counter_bits``), and
        keep saying it for one more sample after they leave it, so that a consumer can tell a
        saturated register from a count and see the saturation end. Only where it matters:
        on every sample it would add about 200 bytes a port."""
        at_max = {name: LEGACY_COUNTER_BITS[name] for name in LEGACY_COUNTER_BITS
                  if c[F[name]] == CAPS[F[name]]}
        bits = dict(self._sat_prev.get(pi, {}))
        bits.update(at_max)
        if bits:
            sample["counter_bits"] = bits
        if at_max:
            self._sat_prev[pi] = at_max
        else:
            self._sat_prev.pop(pi, None)

    def _transport_counters(self, pi: int, c: list[int], s: dict[str, Any], m: _Mod | None,
                            dt: float, u1: float, u2: float, roce: bool) -> None:
        """HCA hw_counters; with RoCE also PFC pauses, ECN marks and CNPs."""
        ut = self.util[pi]
        hca = self.p_hca[pi]
        if hca:
            c[OOS] += 1 if u1 < 0.02 * dt else 0
            c[LAT] += 1 if u2 < 0.001 * dt else 0
            s["out_of_sequence"] = c[OOS]
            s["local_ack_timeout_err"] = c[LAT]
        if not roce:
            return
        ecn_scale = m.ecn_scale if m is not None else 1.0
        pause_rx = 5.0 * ut + (m.prx if m is not None else 0.0)
        pause_tx = 5.0 * ut + (m.ptx if m is not None else 0.0)
        ecn = 800.0 * ut * ecn_scale
        c[PRX] += int(pause_rx * dt * (0.8 + 0.4 * u1))
        d_ptx = int(pause_tx * dt * (0.8 + 0.4 * u2))
        d_ecn = int(ecn * dt * (0.8 + 0.4 * u2))
        if not hca:
            d_ecn = self._priority_counters(pi, s, m, pause_tx, d_ptx, d_ecn)
        c[PTX] += d_ptx
        c[ECN] += d_ecn
        s["pfc_pause_rx"] = c[PRX]
        s["pfc_pause_tx"] = c[PTX]
        s["ecn_marked"] = c[ECN]
        peer = self.p_peer[pi]
        if peer is not None:  # PortRcvData: its peer's PortXmitData (as of the peer's last)
            s["port_rcv_data"] = self.xdata[peer]
        paused = PAUSED_BUSY * ut * (0.5 + u1)
        if m is not None and m.paused:
            paused = m.paused
        self.pdur[pi] += int(paused * dt * 1e6)
        s["pfc_pause_duration_us"] = self.pdur[pi]
        if hca:
            c[CNS] += int(ecn * 0.5 * dt * (0.8 + 0.4 * u1))
            c[CNH] += int(ecn * 0.5 * dt * (0.8 + 0.4 * u2))
            if m is not None and m.prx > 10_000:
                c[RXD] += int(m.prx * 0.01 * dt)
            s["cnp_sent"] = c[CNS]
            s["cnp_handled"] = c[CNH]
            s["rx_discards_phy"] = c[RXD]

    def _priority_counters(self, pi: int, s: dict[str, Any], m: _Mod | None, pause_tx: float,
                           d_ptx: int, d_ecn: int) -> int:
        """A switch port's pauses per priority and marks per queue; returns the marks added.

        RoCE traffic rides lossless priority 3 (SONiC's default lossless classes are 3 and
        4), so its pauses and its queue's marks are there; an ``ecn_misconfig`` on priority
        N adds pauses on N while queue N marks a hundredth of what it should."""
        pq = self.pq.get(pi)
        if pq is None:
            pq = self.pq[pi] = [0] * 16
        prio = m.prio if m is not None else None
        on_prio = int(d_ptx * m.prio_ptx / pause_tx) if m is not None and prio is not None \
            and pause_tx > 0 else 0
        pq[ROCE_PRIO] += d_ptx - on_prio
        marks = int(d_ecn * 0.01) if prio == ROCE_PRIO else d_ecn
        pq[8 + ROCE_PRIO] += marks
        if prio is not None:
            pq[prio] += on_prio
        for p in range(8):
            if p in LOSSLESS_PRIOS or pq[p] or pq[8 + p]:
                s[f"pfc{p}_tx"] = pq[p]
                s[f"ecn_marked_q{p}"] = pq[8 + p]
        return marks

    # -- probes ----------------------------------------------------------------------------

    def probe_round(self, ts: int, rng: random.Random) -> list[Message]:
        """ib_write_bw pairs per rail (a rotating window) and NCCL per rail and SU."""
        params = self.fabric.params
        nodes = self.fabric.nodes
        n = len(nodes)
        if n < 2:
            return []
        round_no = self.step_no // max(1, self.probe_every)
        width = min(n, self.probe_pairs_per_rail)
        first = (round_no * width) % n
        cross = params.sus > 1 and round_no % 2 == 1
        out: list[Message] = []
        for rail in range(params.rails):
            for k in range(width):
                i = (first + k) % n
                su_i, pos = divmod(i, params.nodes_per_su)
                if cross:
                    j = ((su_i + 1) % params.sus) * params.nodes_per_su + pos
                else:
                    j = su_i * params.nodes_per_su + (pos + 1) % params.nodes_per_su
                if i == j:
                    continue
                out.append(self.probe_message("ib_write_bw", nodes[i], nodes[j], rail, ts, rng))
            for su in range(1, params.sus + 1):
                group = self.fabric.nodes_of_su(su)
                if len(group) > 1:
                    out.append(self.probe_message("nccl_allreduce", group[0], group[-1], rail,
                                                  ts, rng, group=group))
        return out

    def probation_probes(self, ts: int, rng: random.Random) -> list[Message]:
        """ib_write_bw across each link in probation, both ways, between the host behind it
        and the next host of its SU on the rail (a link with no host end is not probed)."""
        out: list[Message] = []
        nodes = self.fabric.nodes
        per_su = self.fabric.params.nodes_per_su
        for li, until in sorted(self._probation.items()):
            link = self.links[li]
            hosts = [d for d, _ in link.ends() if "/mlx5_" in d]
            if self.step_no > until or self.l_disabled[li] or not hosts:
                del self._probation[li]  # over, isolated again, or not a host link
                continue
            node, _, rail_text = hosts[0].partition("/mlx5_")
            if node not in self._node_pos:
                self._node_pos.update({n: i for i, n in enumerate(nodes)})
            i = self._node_pos.get(node)
            if i is None or not rail_text.isdigit():
                del self._probation[li]
                continue
            su, pos = divmod(i, per_su)
            j = su * per_su + (pos + 1) % per_su
            if j == i or j >= len(nodes):
                continue
            rail = int(rail_text)
            out.append(self.probe_message("ib_write_bw", node, nodes[j], rail, ts, rng))
            out.append(self.probe_message("ib_write_bw", nodes[j], node, rail, ts, rng))
        return out

    def probe_message(self, probe: str, src: str, dst: str, rail: int, ts: int,
                      rng: random.Random | None = None, *,
                      group: Sequence[str] | None = None) -> Message:
        """One probe result as an encoded message (``probe`` ib_write_bw or nccl_allreduce)."""
        if probe == "nccl_allreduce":
            members = list(group) if group is not None else [src, dst]
            factor = min((self._host_factor(node, rail) for node in members), default=0.0)
            baseline = self.nominal_gbps * NCCL_BUSBW_EFFICIENCY
            size = NCCL_SIZE
        else:
            factor = self.path_factor(src, dst, rail)
            baseline = self.nominal_gbps * IB_WRITE_BW_EFFICIENCY
            size = IB_WRITE_BW_SIZE
        jitter = 1.0 + ((rng.random() if rng else 0.5) - 0.5) * 0.01
        bw = round(max(0.0, baseline * factor * jitter), 2)
        src_dev = f"{src}/mlx5_{rail}"
        dst_dev = f"{dst}/mlx5_{rail}"
        msg = {"v": 1, "id": f"sim:{self.name}:p:{probe}:{rail}:{src_dev}:{dst_dev}:{ts}",
               "ts": ts, "fabric": self.name, "source": SOURCE, "kind": "probe",
               "probe": probe, "src": src_dev if probe == "ib_write_bw" else src,
               "dst": dst_dev if probe == "ib_write_bw" else dst, "rail": rail,
               "size_bytes": size, "bw_gbps": bw, "baseline_gbps": round(baseline, 2)}
        if probe == "nccl_allreduce":
            msg["ranks"] = len(members)  # one rank per node and rail: the run's scale
        return Message(PROBES.name, str(rail).encode(), orjson.dumps(msg))

    def probe(self, probe: str, src: str, dst: str, rail: int) -> Event:
        """Run one probe now (the runbook's return-to-service check); returns the model."""
        if probe not in ("ib_write_bw", "nccl_allreduce"):
            raise ValueError(f"unknown probe {probe!r}")
        self._mods(self.now_ms - self.start_ms)
        rng = random.Random(  # noqa: S311 - probe jitter, not secrets
            f"{self.seed}:probe:{probe}:{src}:{dst}:{rail}:{self.now_ms}")
        return decode(self.probe_message(probe, src, dst, rail, self.now_ms, rng).value)

    def _host_factor(self, node: str, rail: int) -> float:
        li = self.link_index.get((f"{node}/mlx5_{rail}", 1))
        return 0.0 if li is None else self.l_factor[li]

    def path_factor(self, src: str, dst: str, rail: int) -> float:
        """The worst link factor on the ECMP path between two nodes' HCAs of ``rail``."""
        path = self.path(src, dst, rail)
        if path is None:
            return 0.0
        return min(self.l_factor[li] for li in path)

    def path(self, src: str, dst: str, rail: int) -> list[int] | None:
        """Link indexes of the ECMP path (None when no path is up)."""
        a = self.fabric.device(f"{src}/mlx5_{rail}")
        b = self.fabric.device(f"{dst}/mlx5_{rail}")
        if not isinstance(a, Hca) or not isinstance(b, Hca):
            return None
        la = self.link_index[(a.device, 1)]
        lb = self.link_index[(b.device, 1)]
        if self.l_causes[la] or self.l_causes[lb]:
            return None
        leaf_a = self.links[la].b_device
        leaf_b = self.links[lb].b_device
        if leaf_a == leaf_b:
            return [la, lb]
        h = zlib.crc32(f"{a.device}>{b.device}".encode())
        mid = self._route(leaf_a, leaf_b, a.su, b.su, h)
        return None if mid is None else [la, *mid, lb]

    def path_ports(self, src: str, dst: str, rail: int) -> list[str]:
        """Port keys along the ECMP path of a probe (both ends of every link), for
        localising slow probes to the link they share; [] when no path is up."""
        path = self.path(src, dst, rail)
        if path is None:
            return []
        return [f"{d}:{p}" for li in path for d, p in self.links[li].ends()]

    def _route(self, leaf_a: str, leaf_b: str, su_a: int, su_b: int,
               h: int) -> list[int] | None:
        def usable(ids: Sequence[int]) -> list[int]:
            return [x for x in ids if not self.l_causes[x]]

        ups = usable(self.up.get(leaf_a, []))
        for k in range(len(ups)):
            l1 = ups[(h + k) % len(ups)]
            spine_a = self.links[l1].b_device
            if su_a == su_b:
                downs = usable(self.down_to.get((spine_a, leaf_b), []))
                if downs:
                    return [l1, downs[h % len(downs)]]
                continue
            cores = usable(self.up.get(spine_a, []))
            for c in range(len(cores)):
                l2 = cores[(h // 7 + c) % len(cores)]
                core = self.links[l2].b_device
                for l3 in usable(self.core_down.get((core, su_b), [])):
                    spine_b = self.links[l3].a_device
                    downs = usable(self.down_to.get((spine_b, leaf_b), []))
                    if downs:
                        return [l1, l2, l3, downs[h % len(downs)]]
        return None

    # -- topology --------------------------------------------------------------------------

    def discovered_links(self) -> list[Link]:
        """Links as discovery sees them now: up ones, as trained, swapped where swapped."""
        links = []
        for li, link in enumerate(self.links):
            if self.l_causes[li]:
                continue
            if self.l_width[li] != link.width or self.l_speed[li] != link.speed:
                link = _retrained(link, self.l_width[li], self.l_speed[li])
            links.append(link)
        rel = self.now_ms - self.start_ms
        for fi, fault in enumerate(self.faults):
            if fault.kind == "swap" and fi not in self.fixed and fault.started(rel):
                links = fault.apply_to_links(links, self.fabric)
        return links

    def topology_message(self, ts: int) -> Message:
        saved = self.now_ms
        self.now_ms = ts
        try:
            rows = self.fabric.topology_links(self.discovered_links())
        finally:
            self.now_ms = saved
        msg = {"v": 1, "id": f"sim:{self.name}:topology:{ts}", "ts": ts, "fabric": self.name,
               "source": SOURCE, "kind": "topology", "links": rows}
        return Message(TOPOLOGY.name, self.name.encode(), orjson.dumps(msg))


def _retrained(link: Link, width: str, speed: str) -> Link:
    return replace(link, width=width, speed=speed)


def _effective_ber(raw: float) -> float:
    # RS-FEC hides pre-FEC errors until the raw BER nears its limit, then lets them through
    # steeply: about 1e-14 at raw 1e-6, 1e-11 at raw 1e-5, 1e-9 at 5e-5.
    return 1e-11 * (raw / 1e-5) ** 3


_LEGACY_RARE = [(F[name], CAPS[F[name]]) for name in LEGACY_COUNTER_BITS
                if name not in ("symbol_errors", "link_error_recovery", "link_downed",
                                "xmit_wait")]


def _any_at_max(c: list[int]) -> bool:
    return (c[SYM] == CAPS[SYM] or c[LER] == CAPS[LER] or c[LDN] == CAPS[LDN]
            or c[XWT] == CAPS[XWT] or any(c[i] == top for i, top in _LEGACY_RARE))


def _down_sample(port: int, c: list[int], hca: bool, roce: bool) -> dict[str, Any]:
    """A port whose link is down: counters readable and frozen, no width, speed or BER."""
    s: dict[str, Any] = {"port": port}
    for name in ("symbol_errors", "link_error_recovery", "link_downed", "rcv_errors",
                 "rcv_remote_phys_errors", "xmit_discards", "xmit_wait",
                 "local_link_integrity_errors", "excessive_buffer_overrun", "fec_corrected",
                 "fec_uncorrectable"):
        s[name] = c[F[name]]
    if hca:
        s["out_of_sequence"] = c[OOS]
        s["local_ack_timeout_err"] = c[LAT]
    if roce:
        for name in ("pfc_pause_rx", "pfc_pause_tx", "ecn_marked"):
            s[name] = c[F[name]]
        if hca:
            for name in ("cnp_sent", "cnp_handled", "rx_discards_phy"):
                s[name] = c[F[name]]
    return s
