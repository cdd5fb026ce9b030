"""Credit-wait congestion, hot uplinks and SONiC's own pause-storm counters.

``congestion`` and ``hot_uplink`` are judged over ``congestion_window`` of event time, not
per sample: a port keeps one anchor (``"q"`` in its rarer state: ``[ts, xmit_wait,
port_xmit_data]``) and is looked at when the window has passed, so a busy port whose
PortXmitWait moves every sample still costs one comparison most samples. The ports of one
device start their windows together (one message carries them all), so the leaf's uplinks
are judged side by side in the same message: ``judge_hot`` after the port loop.

PortXmitWait ticks are ``xmit_wait_tick_bytes`` of the port's line rate each (NVIDIA's
ibdiagnet congestion assessment), so the share of the window the port had data and no
credits is ``ticks * tick_bytes * 8 / (line rate * window)``. ``port_xmit_data`` counts
4-octet words (IBA PortXmitData). Thresholds: ``schemas.policy.Congestion``.

ECN vs PFC (``judge_ecn``) is a device's: the pauses it transmits (summed over its ports;
marks happen at the congested egress queue while pauses go out of the ingress ports) against
its ECN marks, over the message's interval. Where its samples carry per-priority pauses
(``pfc<N>_tx``) and per-queue marks (``ecn_marked_q<N>``, SONiC ``show queue
wredcounters``), each priority is judged on its own (``judge_priorities``, evidence
``basis: priority``, one episode per (device, priority)); otherwise the device's sums
(``basis: device``). An episode is held by the port that sent the most pauses
(``state["ecn"]``, per priority ``state["ecnq"]``) and ends when the marks keep up again.
Pauses that one port sends at a storm's rate, nearly all of the device's, are that link's
(``tx_storm``): no ECN verdict is judged on them, and with nothing received on the port they
are its ``pause_storm`` seen from the sending end: one cause, one verdict.

SONiC's PFC watchdog (``pfcwd show stats``, parsed to ``pfcwd_q<N>_status`` and
``pfcwd_q<N>_storms_detected``): a queue it reports ``stormed``, or whose detected-storm
count rose since the port's last such sample, is a ``pause_storm`` (``judge_pfcwd``).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from schemas import Counters, Detection, DetectionKind, PortSample
from streams.counters.ber import link_gbps

if TYPE_CHECKING:
    from streams.counters.logic import CountersDetector, PortState

CONGESTION, HOT, PFCWD = "congestion", "hot_uplink", "pause_storm:pfcwd"
TX_STORM = "pause_storm:tx"
# EcnTally.receiving of a port whose port_rcv_data has no interval yet (its first reading,
# or after a gap): neither receiving nor not, so nothing is judged on it this time
UNSETTLED = "unsettled"
# The share of a device's transmitted pauses one port sends for them to be its storm, not
# the device's configuration (a misconfigured queue pauses out of every ingress port).
TX_STORM_SHARE = 0.9
# (port, wait share, utilisation or None, window s) of the ports judged in this message
Judged = tuple[int, float, float | None, float]
UplinksFn = Callable[[str], frozenset[int] | None]


def line_bps(det: CountersDetector, ps: PortState, sample: PortSample) -> float:
    """The port's line rate in bit/s from its width and speed (last known, else the policy's)."""
    return port_bps(det, ps, sample.width, sample.speed)


def port_bps(det: CountersDetector, ps: PortState, width: str | None, speed: str | None
             ) -> float:
    """``line_bps`` from the sample's width and speed as values (the columnar path's)."""
    ext = ps[2] or {}
    width = width or ext.get("w") or det.degraded.expect_width
    speed = speed or ext.get("s") or det.degraded.expect_speed
    return link_gbps(width, speed) * 1e9


def wait_share(det: CountersDetector, q: list[Any], ts: int, wait: int, data: int | None,
               bps: float) -> tuple[float, float | None, float, int]:
    """(credit-wait share, utilisation or None, window s, wait ticks) of the window from
    the anchor ``q`` (``[ts, xmit_wait, port_xmit_data]``) to these readings."""
    dt_s = (ts - q[0]) / 1000
    # a decrease is a reset: the new value counts from zero
    d_wait = wait - q[1] if wait >= q[1] else wait
    d_data = None
    if data is not None and q[2] is not None:
        d_data = data - q[2] if data >= q[2] else data
    share = min(1.0, d_wait * det.cong.xmit_wait_tick_bytes * 8 / (bps * dt_s))
    util = None if d_data is None else min(1.0, d_data * 32 / (bps * dt_s))
    return share, util, dt_s, d_wait


def judge_wait(det: CountersDetector, ps: PortState, event: Counters, sample: PortSample,
               wait: int, data: int | None, detections: list[Detection],
               judged: list[Judged]) -> None:
    """Close the port's window: its credit-wait share and utilisation, ``congestion``."""
    ext = det._ext(ps)  # noqa: SLF001 - the detector's own helpers, one home for state
    ts = event.ts
    q: list[Any] | None = ext.get("q")
    ext["q"] = [ts, wait, data]
    if q is None or ts <= q[0]:
        return
    bps = line_bps(det, ps, sample)
    share, util, dt_s, d_wait = wait_share(det, q, ts, wait, data, bps)
    c = det.cong
    judged.append((sample.port, share, util, dt_s))
    if share > c.congestion_fraction:
        det._open(ps, CONGESTION, event, sample, DetectionKind.CONGESTION, c.action, {  # noqa: SLF001
            "xmit_wait_share": round(share, 4), "threshold": c.congestion_fraction,
            "xmit_wait_ticks": d_wait, "tick_bytes": c.xmit_wait_tick_bytes,
            "line_gbps": bps / 1e9, "window_s": dt_s,
            "utilisation": None if util is None else round(util, 4)}, detections)
    else:
        det._close(ps, CONGESTION)  # noqa: SLF001


def judge_hot(det: CountersDetector, ports: dict[str, PortState], event: Counters,
              samples: dict[int, PortSample], judged: list[Judged],
              detections: list[Detection]) -> None:
    """Each uplink of the leaf judged in this message against its ECMP peers' median."""
    if det.uplinks is None:
        return
    ups = det.uplinks(event.device)
    if not ups:
        return
    rows = [r for r in judged if r[0] in ups]
    c = det.cong
    if len(rows) < c.hot_uplink_min_peers + 1:
        return  # too few peers judged together to call one of them the odd one
    for i, (port, share, util, dt_s) in enumerate(rows):
        peers = rows[:i] + rows[i + 1:]
        peer_wait = statistics.median(r[1] for r in peers)
        utils = [r[2] for r in peers if r[2] is not None]
        peer_util = statistics.median(utils) if utils else None
        by_load = (util is not None and peer_util is not None
                   and util >= c.hot_uplink_min_utilisation
                   and util > c.hot_uplink_factor * peer_util)
        by_wait = share > c.congestion_fraction and share > c.hot_uplink_factor * peer_wait
        ps = ports[str(port)]
        if by_load or by_wait:
            det._open(ps, HOT, event, samples[port], DetectionKind.HOT_UPLINK, c.action, {  # noqa: SLF001
                "utilisation": None if util is None else round(util, 4),
                "peers_median_utilisation": (None if peer_util is None
                                             else round(peer_util, 4)),
                "xmit_wait_share": round(share, 4),
                "peers_median_xmit_wait_share": round(peer_wait, 4),
                "factor": c.hot_uplink_factor, "peers": sorted(r[0] for r in peers),
                "by": "load" if by_load else "wait", "window_s": dt_s}, detections)
        else:
            det._close(ps, HOT)  # noqa: SLF001


_PFC_TX = tuple(f"pfc{p}_tx" for p in range(8))
_ECN_Q = tuple(f"ecn_marked_q{p}" for p in range(8))


def priority_readings(extra: dict[str, Any] | None) -> dict[str, list[int]] | None:
    """``{priority: [pfc<N>_tx, ecn_marked_q<N>]}`` of the priorities a sample has both of."""
    if not extra:
        return None
    now = {}
    for p in range(8):
        tx, marks = extra.get(_PFC_TX[p]), extra.get(_ECN_Q[p])
        if isinstance(tx, int) and isinstance(marks, int):
            now[str(p)] = [tx, marks]
    return now or None


def tally_priorities(det: CountersDetector, ps: PortState, port: int,
                     extra: dict[str, Any] | None, tally: EcnTally) -> None:
    """The port's per-priority pauses and queue marks since its last reading (``"pq"``)."""
    now = priority_readings(extra)
    if now is None:
        return
    ext = det._ext(ps)  # noqa: SLF001
    last: dict[str, list[int]] = ext.get("pq") or {}
    ext["pq"] = now
    tally.by_prio = True
    tally.prio_ports.add(port)
    for p, (tx, marks) in now.items():
        before = last.get(p)
        if before is None:
            continue  # the priority's first reading: no interval yet
        # a decrease is a reset: the new value counts from zero
        d_tx = tx - before[0] if tx >= before[0] else tx
        d_marks = marks - before[1] if marks >= before[1] else marks
        row = tally.prio.get(int(p))
        if row is None:
            tally.prio[int(p)] = [d_tx, d_marks, port, d_tx, 1]
        else:
            row[0] += d_tx
            row[1] += d_marks
            row[4] += 1
            if d_tx > row[3]:
                row[2], row[3] = port, d_tx


class EcnTally:
    """A message's transmitted pauses and ECN marks over the ports that report both.

    ``prio``: per priority N, ``[pauses tx on N, marks on queue N, top port, its pauses,
    ports]`` over the ports that report both per priority; ``by_prio`` once any does.
    """

    __slots__ = ("pauses", "marks", "dt_s", "top_port", "top_pauses", "ports", "prio",
                 "by_prio", "prio_ports", "receiving")

    def __init__(self) -> None:
        self.pauses = self.marks = 0
        self.dt_s = 0.0
        self.top_port: int | None = None
        self.top_pauses = -1
        self.ports = 0
        self.prio: dict[int, list[int]] = {}
        self.by_prio = False
        self.prio_ports: set[int] = set()  # the ports that reported per priority
        # per port: whether data came in over the interval (None: no port_rcv_data;
        # UNSETTLED: the counter has no interval yet)
        self.receiving: dict[int, bool | str | None] = {}

    def add(self, port: int, pauses: int, marks: int, dt_s: float,
            receiving: bool | str | None = None) -> None:
        self.receiving[port] = receiving
        self.pauses += pauses
        self.marks += marks
        self.dt_s = max(self.dt_s, dt_s)
        self.ports += 1
        if pauses > self.top_pauses:
            self.top_port, self.top_pauses = port, pauses


def judge_ecn(det: CountersDetector, state: dict[str, Any], event: Counters,
              samples: dict[int, PortSample], tally: EcnTally,
              detections: list[Detection]) -> None:
    c = det.cong
    if tally.dt_s <= 0 or tally.top_port is None:
        return
    if tally.by_prio:
        judge_priorities(det, state, event, samples, tally, detections)
        return
    pause_rate = tally.pauses / tally.dt_s
    ecn_rate = tally.marks / tally.dt_s
    ports: dict[str, PortState] = state["ports"]
    # a per-priority episode whose port now reports sums only ends (one whose port this
    # message lacks goes on: a poll that missed it is no change of basis)
    end_moved_on(det, state, "ecnq", ports, event, tally, device=False,
                 cond=lambda prio: f"ecn_pfc:q{prio}")
    end_moved_on(det, state, "txs", ports, event, tally, device=False,
                 cond=lambda prio: f"{TX_STORM}:q{prio}")
    end_moved_on(det, state, "txw", ports, event, tally, device=False)
    if tx_storm(det, state, event, samples, tally, tally.top_port, tally.top_pauses,
                tally.pauses, tally.marks, tally.dt_s, None, detections):
        return  # the device's pauses are one port's storm: no verdict on its configuration
    holder = state.get("ecn")
    if (pause_rate >= c.min_pause_frames_per_s
            and ecn_rate < c.min_ecn_to_pause_ratio * pause_rate):
        if holder is not None and holder in ports:
            return  # the device's episode is open
        state["ecn"] = str(tally.top_port)
        det._open(ports[str(tally.top_port)], "ecn_pfc", event, samples[tally.top_port],  # noqa: SLF001
                  DetectionKind.ECN_PFC_MISCONFIG, c.action, {
                      "scope": "device", "basis": "device", "pause_tx_per_s": round(pause_rate, 1),
                      "ecn_marked_per_s": round(ecn_rate, 1), "ports": tally.ports,
                      "top_port_pause_tx_per_s": round(tally.top_pauses / tally.dt_s, 1),
                      "min_ecn_to_pause_ratio": c.min_ecn_to_pause_ratio,
                      "interval_s": tally.dt_s}, detections)
    elif holder is not None and _moved_on(holder, ports, event, tally):
        # (a message without the holding port is no word on its episode)
        release(det, ports, state.pop("ecn"), "ecn_pfc")


def judge_priorities(det: CountersDetector, state: dict[str, Any], event: Counters,
                     samples: dict[int, PortSample], tally: EcnTally,
                     detections: list[Detection]) -> None:
    """Each priority on its own: pauses tx on N against the marks of egress queue N.

    ``state["ecnq"]`` maps a priority to the port holding its episode (cond ``ecn_pfc:q<N>``),
    so there is one episode per (device, priority).
    """
    c = det.cong
    ports: dict[str, PortState] = state["ports"]
    # the device is judged per queue now: its device-basis episodes end once their port
    # has reported with it (or has not for long)
    if "ecn" in state and _moved_on(state["ecn"], ports, event, tally):
        release(det, ports, state.pop("ecn"), "ecn_pfc")
    end_moved_on(det, state, "txs", ports, event, tally, device=True,  # ...and its storm's
                 cond=lambda _: TX_STORM)
    end_moved_on(det, state, "txw", ports, event, tally, device=True)  # ...and its wait
    held: dict[str, str] = state.get("ecnq") or {}
    dt_s = tally.dt_s
    for prio in sorted(tally.prio):
        pauses, marks, top_port, top_pauses, nports = tally.prio[prio]
        if tx_storm(det, state, event, samples, tally, top_port, top_pauses, pauses, marks,
                    dt_s, prio, detections):
            continue  # the priority's pauses are one port's storm
        pause_rate, ecn_rate = pauses / dt_s, marks / dt_s
        key, cond = str(prio), f"ecn_pfc:q{prio}"
        holder = held.get(key)
        if (pause_rate >= c.min_pause_frames_per_s
                and ecn_rate < c.min_ecn_to_pause_ratio * pause_rate):
            if holder is not None and holder in ports:
                continue  # the priority's episode is open
            held[key] = str(top_port)
            det._open(ports[str(top_port)], cond, event, samples[top_port],  # noqa: SLF001
                      DetectionKind.ECN_PFC_MISCONFIG, c.action, {
                          "scope": "device", "basis": "priority", "priority": prio,
                          "queue": prio, "pause_tx_per_s": round(pause_rate, 1),
                          "ecn_marked_per_s": round(ecn_rate, 1), "ports": nports,
                          "top_port_pause_tx_per_s": round(top_pauses / dt_s, 1),
                          "min_ecn_to_pause_ratio": c.min_ecn_to_pause_ratio,
                          "interval_s": dt_s}, detections)
        elif holder is not None and _moved_on(holder, ports, event, tally):
            release(det, ports, held.pop(key), cond)
    keep(state, "ecnq", held)


def tx_storm(det: CountersDetector, state: dict[str, Any], event: Counters,
             samples: dict[int, PortSample], tally: EcnTally, top_port: int, top_pauses: int,
             pauses: int, marks: int, dt_s: float, prio: int | None,
             detections: list[Detection]) -> bool:
    """Whether the device's transmitted pauses (of ``prio``; None: all) are one link's
    pause storm, seen from its sending end; then no ``ecn_pfc_misconfig`` is judged on them.

    One port sends them at the storm rate (``pause_frames_per_s_storm``, the rate that makes
    a storm of the pauses its peer receives), ``TX_STORM_SHARE`` of them, and nothing came
    in on it over the interval (``port_rcv_data`` unchanged: the peer's queue is stuck, not
    draining; without the counter, as the watchdog rule at the receiving end, unknown does
    not excuse): a ``pause_storm`` of that port (a host whose NIC reports nothing is found
    this way). With data coming in it is heavy congestion through one port, which the ECN
    rule judges, from its second such interval: a storm's first interval still has data
    from before the queue stuck, and the verdict waits to see which it is
    (``state["txw"]``: the port that was at the storm rate with data coming in, by key). In
    the counter's first interval nothing is judged either way. ``state["txs"]`` maps
    ``"d"`` or the priority to the storming port."""
    c = det.cong
    ports: dict[str, PortState] = state["ports"]
    storms: dict[str, str] = state.get("txs") or {}
    key = "d" if prio is None else str(prio)
    cond = TX_STORM if prio is None else f"{TX_STORM}:q{prio}"
    holder = storms.get(key)
    receiving = tally.receiving.get(top_port)
    at_rate = (top_pauses / dt_s >= c.pause_frames_per_s_storm
               and top_pauses >= TX_STORM_SHARE * pauses)
    waiting: dict[str, str] = state.get("txw") or {}
    was = waiting.get(key)
    waited = was == str(top_port)
    if at_rate and receiving is True:
        waiting[key] = str(top_port)  # kept while it lasts: judged from the second on
    elif was is not None and _moved_on(was, ports, event, tally):
        del waiting[key]  # (a message without the port, a missed poll, is no change)
    keep(state, "txw", waiting)
    dominant = at_rate and (receiving is not True or not waited)
    storming = at_rate and receiving is not True and receiving is not UNSETTLED
    if storming and holder != str(top_port):
        if holder is not None:
            release(det, ports, holder, cond)
        storms[key] = str(top_port)
        det._dirty = True  # noqa: SLF001
        evidence: dict[str, Any] = {
            "rule": "pause_tx", "scope": "port", "pause_tx_per_s": round(top_pauses / dt_s, 1),
            "device_pause_tx_per_s": round(pauses / dt_s, 1),
            "share_of_device_pauses": round(top_pauses / pauses, 3),
            "ecn_marked_per_s": round(marks / dt_s, 1),
            "receiving": False if receiving is False else None,
            "threshold_per_s": c.pause_frames_per_s_storm, "interval_s": dt_s}
        if prio is not None:
            evidence["priority"] = prio
        det._open(ports[str(top_port)], cond, event, samples[top_port],  # noqa: SLF001
                  DetectionKind.PAUSE_STORM, c.action, evidence, detections)
    elif not storming and receiving is not UNSETTLED and holder is not None:
        release(det, ports, storms.pop(key), cond)
    keep(state, "txs", storms)
    return dominant


# A holding port absent this many of the device's intervals is gone, not a missed poll.
GONE_INTERVALS = 3


def _moved_on(holder: str, ports: dict[str, PortState], event: Counters, tally: EcnTally
              ) -> bool:
    """Whether an episode of the other basis held by ``holder`` ends with this message: its
    port reported in it (so the device's basis did change for it), or it has not reported
    for ``GONE_INTERVALS`` of the message's interval (a port removed; one missed poll is
    no change)."""
    if int(holder) in tally.receiving:
        return True
    ps = ports.get(holder)
    return ps is None or event.ts - ps[0] > GONE_INTERVALS * tally.dt_s * 1000


def release(det: CountersDetector, ports: dict[str, PortState], holder: str, cond: str
            ) -> None:
    """A device-wide episode ``cond`` held by port ``holder`` (taken off its holder map by
    the caller) ends."""
    det._dirty = True  # noqa: SLF001
    if holder in ports:
        det._close(ports[holder], cond)  # noqa: SLF001


def end_moved_on(det: CountersDetector, state: dict[str, Any], name: str,
                 ports: dict[str, PortState], event: Counters, tally: EcnTally, *,
                 device: bool, cond: Callable[[str], str] | None = None) -> None:
    """At a change of basis: the entries of holder map ``name`` of the other basis (the
    device's, key ``d``, or the priorities') whose port has moved on (``_moved_on``) end:
    an episode is released under ``cond(key)``, a wait (no ``cond``) is forgotten."""
    holders: dict[str, str] = state.get(name) or {}
    for key in [k for k, h in holders.items()
                if (k == "d") == device and _moved_on(h, ports, event, tally)]:
        holder = holders.pop(key)
        if cond is not None:
            release(det, ports, holder, cond(key))
    keep(state, name, holders)


def keep(state: dict[str, Any], name: str, holders: dict[str, str]) -> None:
    """A holder map (``ecnq``, ``txs``) in the state while it holds anything."""
    if holders:
        state[name] = holders
    else:
        state.pop(name, None)


_PFCWD: dict[tuple[str, ...], bool] = {}  # by a sample's extra names: a host's repeat


def has_pfcwd(extra: dict[str, Any]) -> bool:
    """Whether a sample carries SONiC watchdog verdicts (``pfcwd_q*`` extras)."""
    names = tuple(extra)
    known = _PFCWD.get(names)
    if known is None:
        known = any(k.startswith("pfcwd_q") for k in names)
        if len(_PFCWD) < 4096:  # bounded: a new shape past that is judged each time
            _PFCWD[names] = known
    return known


def judge_pfcwd(det: CountersDetector, ps: PortState, event: Counters, sample: PortSample,
                extra: dict[str, Any], detections: list[Detection]) -> None:
    """SONiC's watchdog verdicts per queue: stormed now, or a storm detected since last."""
    ext = det._ext(ps)  # noqa: SLF001
    last: dict[str, int] = ext.get("wd") or {}
    now: dict[str, int] = {}
    stormed: list[str] = []
    detected: dict[str, int] = {}
    for key, value in extra.items():
        if not key.startswith("pfcwd_q"):
            continue
        queue, _, what = key[len("pfcwd_q"):].partition("_")
        if what == "status" and value == "stormed":
            stormed.append(queue)
        elif what == "storms_detected" and isinstance(value, int):
            now[queue] = value
            before = last.get(queue)
            if before is not None and value > before:
                detected[queue] = value - before
    ext["wd"] = now
    if stormed or detected:
        det._open(ps, PFCWD, event, sample, DetectionKind.PAUSE_STORM, det.cong.action, {  # noqa: SLF001
            "rule": "pfcwd", "stormed_queues": sorted(stormed),
            "storms_detected": detected, "interface": extra.get("interface")}, detections)
    else:
        det._close(ps, PFCWD)  # noqa: SLF001
