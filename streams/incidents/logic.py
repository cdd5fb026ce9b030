"""Incident correlation: downs and detections that share one cause become one incident.

One state per fabric (the worker keys it by fabric on one partition; ``replay`` keeps the
same state in memory), fed in order with the fabric's port events, detections, runbook
action records, maintenance windows and the passing of time (``Tick``). It needs the
fabric as cabled (``index_topology`` of the latest ``Topology`` snapshot): the peer of
each port, each switch's connected ports and each host's rails; a snapshot taken during an
outage lacks the links that are down, so snapshots are merged, never replaced.

Causes recognised (``schemas.policy.Incidents`` holds every threshold):

* ``switch_reboot`` (or power loss): ``switch_share`` of a switch's connected links (never
  fewer than ``switch_min_ports``) go down within ``spread``. A link counts for both its
  ends whichever end reported it, so a rebooting switch that sends nothing is found from
  what its peers say. Root: the switch.
* ``node_reboot``: ``node_share`` of a host's rails (at least ``node_min_rails``) down
  within ``spread``. Root: the host (``node0042`` of ``node0042/mlx5_3``).
* ``maintenance``: either of the above while a maintenance window covers the root (the
  incident then names the window; ``evidence.looks_like`` says what it looked like).
* ``sm_event``: what the stream carries of the subnet manager is its port events (source
  ``opensm`` or ``ufm``: the log follower, UFM's events). Downs it reported on at least
  ``sm_min_links`` links of at least ``sm_min_devices`` devices within ``spread``, with no
  one device on more than half of them, are one SM event (a heavy sweep that drops ports
  across the fabric, a failover). Root: the reporting SM (``opensm`` / ``ufm``). The SM
  detector's ``sm_failover`` and ``sweep_storm`` (``streams.sm``, from ``fabric.sm``) open
  one too, or join the SM's open one: the ports whose traps forced the sweeps are its
  members (not excused: a flapping port causes the storm), and the SM's downs that follow
  join it as above. Such an incident closes ``settle`` after its last change. Downs a switch
  or node reboot explains are not counted for it: links of an open switch or node incident,
  and links of a host with ``node_min_rails`` of its rails in the burst (several nodes
  rebooting together are their node incidents, not an SM event besides).

"Within ``spread``" is in event time, whatever order the downs arrive in: the downs counted
are those of the fullest span of ``spread`` that holds the newest arrival (``_burst``), never
a down hours ahead that is still remembered. A root's downs are remembered until none of
them can still arrive (``spread`` plus ``stream.allowedLateness`` behind the newest down
read), so another root's newer downs read in between do not wipe a partial count; and every
down of a link is remembered, not its newest only, so the link's later bounce read first (its
other end, another source) does not hide the reboot's down. A down of
a closed incident's link inside its time (read again after a restart) opens nothing. A down
read after the incident opened, from within ``spread`` before its start, moves the start
back (the id stays) and every member's excuse with it; a down read after its link's up
(kept as long as a down can still be late) joins as a link already back; a root's down from
after the span that opened its incident, read before the open, joins at the open (read in
time it would have arrived after). The clock moves to each event's own time before the
event is judged, so what had settled by then is closed first, whether or not a tick got
the clock there before the event was read.

An incident is published when it opens, when its members change and when it closes; its
members are the port keys of both ends of every link of the root that went down while it
was open. Its members' downs in ``[started, ended]`` are excused from the flap detector
(``Excuse``), and a member's detection while it is open (or with a ``ts`` inside it) carries
``incident``. A member's flap that fired before its excuse arrived, on the incident's own
downs, is dropped (``raced_its_excuse``): the worker then agrees with replay. A flap
published before the incident that takes its last downs opened (the reboot's other reports
read later) is kept for ``spread`` plus the lateness; when the incident opens or grows over
its port and, without the incident's downs, it is no flap, it is published again under the
incident (``<id>/explained``, evidence ``explains``), so its runbook stands down. It closes
once every member link is up and has stayed up for ``settle`` (or ``max_open`` after its
last change, whatever is still down; and at most ``max_open`` after it started, or a member
bouncing every minute would keep its own flapping excused for ever); from then on a link
that goes on misbehaving is judged on its own, without the incident's downs. A closed
incident covers ``settle`` past its end (the excuse it sends, a member's down or detection
read after the close): what a member did then, read before the close, would have been the
incident's, so read late (a poller's counters, a restart) it is too. The excuse it sends at
the close leaves out its causes (the ports that forced an SM's sweeps), as the open did.

Self-inflicted downs: an ``isolate`` action record (``done``) excuses both ends of the cable
from ``self_grace`` before it until ``self_grace`` after the ``unisolate``/``return`` record
(or after the link first comes up again: an isolated port cannot, so someone un-isolated it);
a ``ladder:<rung>`` record excuses the technician's work from the runbook's previous record
(when it began to wait) to ``self_grace`` after.

Maintenance windows (``schemas.Maintenance``): a detection in scope and in time carries
``maintenance: <window>``. Scope ``device`` covers the device, its ports, a host's HCAs and
the far ends of the device's links; ``su`` the devices of that SU; ``fabric`` everything.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from schemas import ActionRecord, Detection, Incident, Maintenance, PortEvent, Topology
from schemas.events import IncidentCause, port_key
from schemas.policy import Policy
from streams.common import SOURCE
from streams.flap.logic import DISABLED, Excuse

# Sources that are the subnet manager's own view of the fabric.
SM_SOURCES = frozenset({"opensm", "ufm"})
# The SM detector's detections (streams.sm) that are an SM event for the whole fabric.
SM_INCIDENT_KINDS = frozenset({"sm_failover", "sweep_storm"})
# Closed incidents kept to annotate late detections (ts inside them).
KEEP_CLOSED = 16
WINDOW_KEEP_MS = 86_400_000  # an ended window is forgotten a day after its end


@dataclass(frozen=True, slots=True)
class Tick:
    """Time passes for ``fabric``: incidents may close.

    ``replay`` ticks with each event's own time. The worker ticks every second with its
    wall clock (``wall=True``): the fabric's clock is then its newest event time plus the
    wall time since that event was applied, so a backlog of old events read in one burst
    does not look settled before it has been read.
    """

    id: str
    fabric: str
    ts: int
    wall: bool = False

    def to_wire(self) -> dict[str, Any]:
        return {"kind": "tick", "id": self.id, "fabric": self.fabric, "ts": self.ts,
                "wall": self.wall}


CorrelatorInput = PortEvent | Detection | ActionRecord | Maintenance | Tick


@dataclass(slots=True)
class Outputs:
    incidents: list[Incident]
    excuses: list[Excuse]
    detections: list[Detection]
    # detections of the correlator's own: a flap published before the incident that takes
    # its downs opened, published again under it (``_explain_raced``)
    followups: list[Detection] = field(default_factory=list)


def host_of(device: str) -> str | None:
    """The host of an HCA device (``node0042`` of ``node0042/mlx5_3``); None for a switch."""
    return device.split("/", 1)[0] if "/" in device else None


def index_topology(topology: Topology, previous: dict[str, Any] | None = None
                   ) -> dict[str, Any]:
    """What correlation needs of the cabling: peers, switch port counts, host rail counts.

    A snapshot is merged into the ``previous`` index, not put in its place: a snapshot taken
    while a switch is down lacks its links (nothing answers on them), and those are exactly
    the links correlation must know. A port seen with another peer takes the new one.
    """
    peer: dict[str, str] = dict(previous["peer"]) if previous else {}
    for link in topology.links:
        a = port_key(link.a_device, link.a_port)
        b = port_key(link.b_device, link.b_port)
        for end, other in ((a, b), (b, a)):
            old = peer.get(end)
            if old is not None and old != other and peer.get(old) == end:
                del peer[old]  # recabled: the old far end is no longer this port's
            peer[end] = other
    switch_ports: dict[str, int] = {}
    host_links: dict[str, int] = {}
    for key in peer:
        device = _device_of(key)
        host = host_of(device)
        if host is None:
            switch_ports[device] = switch_ports.get(device, 0) + 1
        else:
            host_links[host] = host_links.get(host, 0) + 1
    return {"peer": peer, "switch_ports": switch_ports, "host_links": host_links}


EMPTY_INDEX: dict[str, Any] = {"peer": {}, "switch_ports": {}, "host_links": {}}


def new_state() -> dict[str, Any]:
    return {"now": 0, "recent": {}, "sm_recent": {}, "open": {}, "closed": {},
            "windows": {}, "isolations": {}, "wf_last": {}}


def _device_of(key: str) -> str:
    return key.rsplit(":", 1)[0]


def _split(key: str) -> tuple[str, int]:
    device, port = key.rsplit(":", 1)
    return device, int(port)


def _link(key: str, index: dict[str, Any]) -> tuple[str, list[str]]:
    """(link id, its port keys) of the link a port is on; the port alone without a peer."""
    peer = index["peer"].get(key)
    ends = [key] if peer is None else sorted((key, peer))
    return "~".join(ends), ends


def _roots(ends: list[str]) -> list[tuple[str, str]]:
    """Candidate roots of a link: ("switch", device) or ("host", host) for each end."""
    out: list[tuple[str, str]] = []
    for key in ends:
        device = _device_of(key)
        host = host_of(device)
        root = ("switch", device) if host is None else ("host", host)
        if root not in out:
            out.append(root)
    return out


def step(state: dict[str, Any] | None, index: dict[str, Any] | None, event: CorrelatorInput,
         policy: Policy, *, su_of: Callable[[str], str | None], wall: int | None = None
         ) -> tuple[dict[str, Any], Outputs]:
    """Apply one event of one fabric; returns the (mutated) state and what to publish.

    ``wall``: the worker's clock when it applies the event (see ``Tick``)."""
    st = state if state is not None else new_state()
    idx = index if index is not None else EMPTY_INDEX
    out = Outputs([], [], [])
    cfg = policy.fabric_health.incidents
    if not isinstance(event, Tick):
        # what had settled by the event's own time closes before the event is judged: read
        # before any tick moved the clock there, a member's down past the settle would
        # otherwise join (and excuse) the incident it came after
        _advance(st, event.ts, event.fabric, policy, out)
    if isinstance(event, Maintenance):
        _window(st, event)
    elif isinstance(event, PortEvent):
        _port_event(st, idx, event, policy, su_of, out)
    elif isinstance(event, ActionRecord):
        _action(st, idx, event, round(cfg.self_grace * 1000), out)
    elif isinstance(event, Detection):
        if event.detection.value in SM_INCIDENT_KINDS and event.incident is None \
                and event.maintenance is None:
            event = _sm_detection(st, event, su_of, out)
        det = annotate(st, idx, event, su_of)
        if not raced_its_excuse(st, det):
            out.detections.append(det)
            _keep_if_racing(st, det, policy)
    if isinstance(event, Tick) and event.wall:
        if "wall" in st:
            now = st["clock"] + max(0, event.ts - st["wall"])
            _advance(st, now, event.fabric, policy, out)
        return st, out
    if event.ts > st.get("clock", 0):
        st["clock"] = event.ts
        if wall is not None:
            st["wall"] = wall
    _advance(st, event.ts, event.fabric, policy, out)
    return st, out


# -- maintenance windows ---------------------------------------------------------------


def _window(st: dict[str, Any], msg: Maintenance) -> None:
    fold_window(st["windows"], msg)


def fold_window(windows: dict[str, dict[str, Any]], msg: Maintenance) -> None:
    """Fold one message of ``fabric.maintenance`` into ``windows`` (window id -> its state
    now, the latest message by ``ts``; an ended window ends when its end message says)."""
    held = windows.get(msg.window)
    if held is not None and held["ts"] > msg.ts:
        return  # an older message of the window: the latest says its state
    end = msg.end if msg.state == "active" else min(msg.end, max(msg.ts, msg.start))
    windows[msg.window] = {"scope": msg.scope, "target": msg.target, "start": msg.start,
                           "end": end, "state": msg.state, "ts": msg.ts,
                           "exclusion": msg.exclusion, "reason": msg.reason,
                           "actor": msg.actor, "fabric": msg.fabric,
                           "planned_end": msg.end}


def window_covers(w: dict[str, Any], fabric: str, device: str, port: int | None, ts: int,
                  index: dict[str, Any], su_of: Callable[[str], str | None]) -> bool:
    """Is ``device`` (``port``: one of its ports, or None: the device) in ``w`` at ``ts``?"""
    if not w["start"] <= ts < w["end"]:
        return False
    target = w["target"]
    if w["scope"] == "fabric":
        return bool(target == fabric)
    devices = [device]
    keys = [device] if port is None else [device, port_key(device, port)]
    if port is not None and (peer := index["peer"].get(port_key(device, port))) is not None:
        devices.append(_device_of(peer))  # the far end of a link of the device
        keys.append(peer)
    if w["scope"] == "su":
        return any(su_of(d) == target.lower() for d in devices)
    hosts = [h for d in devices if (h := host_of(d)) is not None]
    return target in keys or target in devices or target in hosts


def window_of(st: dict[str, Any], index: dict[str, Any], fabric: str, device: str,
              port: int | None, ts: int, su_of: Callable[[str], str | None]) -> str | None:
    for wid in sorted(st["windows"]):
        if window_covers(st["windows"][wid], fabric, device, port, ts, index, su_of):
            return str(wid)
    return None


# -- incidents ---------------------------------------------------------------------------


def _port_event(st: dict[str, Any], idx: dict[str, Any], ev: PortEvent, policy: Policy,
                su_of: Callable[[str], str | None], out: Outputs) -> None:
    cfg = policy.fabric_health.incidents
    link, ends = _link(ev.key, idx)
    for inc in st["open"].values():
        if link in inc["links"]:
            state = inc["links"][link]
            if ev.ts >= state[1]:
                inc["links"][link] = [ev.state == "down", ev.ts]
            inc["last_change"] = max(inc["last_change"], ev.ts)
    spread = round(cfg.spread * 1000)
    # A burst's downs are kept until no down of it can still arrive (the lateness), not
    # only for the spread: another root's newer down, read in between, must not wipe the
    # partial count of one still arriving (a reboot missed, its downs judged as flaps).
    horizon = ev.ts - spread - round(policy.fabric_health.stream.allowed_lateness * 1000)
    if ev.state == "up":
        _back_up(st, ev, round(cfg.self_grace * 1000), out)
        _note_up(st, link, ev.ts, horizon)
    if ev.state != "down" or (ev.phys_state or "").lower() == DISABLED:
        return  # an up only ends a down; a port disabled on purpose is no reboot
    # a down a closed incident holds (read again after a restart, or read late) is that
    # incident's: it counts for no burst of its root, but for another root's, as a down of
    # an open incident's link does (a node rebooting just after its leaf did)
    covered = _closed_roots(st, ends, ev.ts)
    for kind, root in _roots(ends):
        if root in covered:
            continue
        held = next((inc for inc in st["open"].values() if inc["root"] == root), None)
        if held is not None:
            member = link not in held["links"]  # one more link of the root: a new member
            if member:
                held["links"][link] = _link_state(st, link, ev.ts)
                held["last_change"] = max(held["last_change"], held["links"][link][1])
            if held["started"] - spread <= ev.ts < held["started"]:
                _started_earlier(st, held, ev, out)
            if member:
                _grow(st, held, ends, ev, out)
            continue
        burst = _burst(st["recent"].setdefault(f"{kind}:{root}", {}), link, ends, ev.ts,
                       spread, horizon)
        if _enough(kind, root, len(burst), idx, policy):
            recent = st["recent"].pop(f"{kind}:{root}")
            inc = _open(st, idx, kind, root, burst, ev, su_of, out, _newest(recent))
            _join_read_earlier(st, inc, recent, burst, ev, out)
    if ev.source in SM_SOURCES and not covered:
        _sm_down(st, idx, link, ends, ev, policy, su_of, out, horizon)
    # what can no longer join anything, even arriving late
    for rkey in [k for k, v in st["recent"].items()
                 if all(max(_down_times(e)) < horizon for e in v.values())]:
        del st["recent"][rkey]


def _note_up(st: dict[str, Any], link: str, ts: int, horizon: int) -> None:
    """A link's newest up, kept while a down from before it can still arrive: a reboot's
    down reported after the link's up (another partition, a late trap) must join its
    incident as a link already back, not one down until ``max_open``."""
    ups = st.setdefault("ups", {})
    ups[link] = max(ts, ups.get(link, ts))
    for lid in [lid for lid, t in ups.items() if t < horizon]:
        del ups[lid]


def _link_state(st: dict[str, Any], link: str, down_ts: int) -> list[Any]:
    """[down?, ts] of a link joining an incident with its down at ``down_ts``."""
    up = st.get("ups", {}).get(link)
    return [False, up] if up is not None and up > down_ts else [True, down_ts]


def _started_earlier(st: dict[str, Any], inc: dict[str, Any], ev: PortEvent,
                     out: Outputs) -> None:
    """A down of the reboot from before the incident opened arrived late: the incident (the
    same id, named when it opened) starts then, and every member's excuse starts there too,
    or that down would count toward a flap of its link."""
    inc["started"] = ev.ts
    inc["rev"] += 1
    out.incidents.append(_message(inc, "update", ev.ts))
    out.excuses += _excuses(inc, inc["members"], ev.ts)
    _explain_raced(st, inc, inc["members"], out)


def _covers(closed: dict[str, Any]) -> int:
    """The last time a closed incident covers (its end plus ``settle``; a closed entry of
    a state written before that was kept: its end)."""
    return int(closed.get("covers", closed["ended"]))


def _closed_roots(st: dict[str, Any], ends: list[str], ts: int) -> set[str]:
    """The roots of the closed incidents that hold a down of this link at ``ts`` (inside
    what they cover): that incident's own down, read again after a restart or after the
    close. It opens nothing for that root."""
    return {c["root"] for c in st["closed"].values()
            if c["started"] <= ts <= _covers(c) and all(k in c["members"] for k in ends)}


def _sm_down(st: dict[str, Any], idx: dict[str, Any], link: str, ends: list[str],
             ev: PortEvent, policy: Policy, su_of: Callable[[str], str | None],
             out: Outputs, horizon: int) -> None:
    """A down the SM reported: one more link of an open SM event, or maybe the start of one."""
    cfg = policy.fabric_health.incidents
    held = next((inc for inc in st["open"].values()
                 if inc["cause"] == IncidentCause.SM_EVENT.value and inc["root"] == ev.source),
                None)
    if any(link in inc["links"] for inc in st["open"].values() if inc is not held):
        return  # explained by a switch or node incident already
    if held is not None:
        if link not in held["links"]:
            held["links"][link] = [True, ev.ts]
            _grow(st, held, ends, ev, out)
        return
    burst = _unexplained(st, _burst(st.setdefault("sm_recent", {}), link, ends, ev.ts,
                                    round(cfg.spread * 1000), horizon), policy)
    if len(burst) < cfg.sm_min_links:
        return
    devices: dict[str, int] = {}
    for _, keys in burst.values():
        for device in {_device_of(k) for k in keys}:
            devices[device] = devices.get(device, 0) + 1
    if len(devices) < cfg.sm_min_devices or max(devices.values()) * 2 > len(burst):
        return  # few devices, or one device holds most of it: a switch's own incident
    inc = _open(st, idx, "sm", ev.source, burst, ev, su_of, out, _newest(st["sm_recent"]))
    # (a down another incident explains stays its: in time it would not have joined)
    _join_read_earlier(st, inc, _unexplained(st, st["sm_recent"], policy), burst, ev, out)
    st["sm_recent"] = {}


def _sm_detection(st: dict[str, Any], det: Detection, su_of: Callable[[str], str | None],
                  out: Outputs) -> Detection:
    """An SM failover or sweep storm (streams.sm) opens an ``sm_event`` incident, or joins
    the one open for that SM: the ports whose traps forced the sweeps become members (named
    in the page). They are the storm's cause: not excused (their flaps still count) and not
    filed under the incident (``_causes``), so their runbooks isolate them."""
    root = str(det.evidence.get("reported_by") or det.source)
    ports = [p for p in det.evidence.get("ports") or [] if isinstance(p, str) and ":" in p]
    held = next((inc for inc in st["open"].values()
                 if inc["cause"] == IncidentCause.SM_EVENT.value and inc["root"] == root
                 and inc["fabric"] == det.fabric), None)
    if held is not None:
        held["last_change"] = max(held["last_change"], det.ts)
        kinds = list(held["evidence"].get("detections", []))
        new = sorted(set(ports) - set(held["members"]))
        causes = sorted({*_causes(held), *ports})
        if det.id in kinds and not new and causes == _causes(held):
            # the same detection again (a redelivery): nothing changed, nothing to publish
            return det.model_copy(update={"incident": held["incident"]})
        if det.id not in kinds:
            # a new list: the one an earlier message was published with stays as it was
            held["evidence"] = {**held["evidence"], "detections": [*kinds, det.id]}
        if new:
            held["members"] = sorted({*held["members"], *new})
        # the trigger ports are causes whichever opened the incident (the SM's downs
        # first, as is common, or this detection)
        held["causes"] = causes
        held["rev"] += 1
        out.incidents.append(_message(held, "update", det.ts))
        return det.model_copy(update={"incident": held["incident"]})
    started = det.ts
    evidence: dict[str, Any] = {"detection": det.detection.value, "sm": det.device,
                                "detections": [det.id], "links_down": 0, "devices": 0,
                                "spread_ms": 0}
    for name in ("from", "to", "sweeps", "window_s", "triggers", "max_duration_ms"):
        if name in det.evidence:
            evidence[name] = det.evidence[name]
    iid = f"inc/{IncidentCause.SM_EVENT.value}/{root}/{started}"
    inc = {"incident": iid, "cause": IncidentCause.SM_EVENT.value, "root": root,
           "fabric": det.fabric, "su": None, "started": started, "last_change": det.ts,
           "links": {}, "members": sorted(set(ports)), "causes": sorted(set(ports)),
           "rev": 0, "evidence": evidence}
    st["open"][iid] = inc
    out.incidents.append(_message(inc, "open", det.ts))
    return det.model_copy(update={"incident": iid})


def _unexplained(st: dict[str, Any], burst: dict[str, Any], policy: Policy
                 ) -> dict[str, Any]:
    """The SM's downs that no switch or node reboot explains: not links of an open switch or
    node incident, and not links of a host with ``node_min_rails`` or more of its rails in
    the burst (its reboot, being counted or opened by another down). Several nodes rebooting
    together are their node incidents, not an SM event besides (a real SM storm touches one
    link of a host, so it keeps all of its downs)."""
    cfg = policy.fabric_health.incidents
    taken = {lid for inc in st["open"].values() if inc["cause"] != IncidentCause.SM_EVENT.value
             for lid in inc["links"]}
    rails: dict[str, int] = {}
    for _, keys in burst.values():
        for host in {host_of(_device_of(k)) for k in keys} - {None}:
            rails[str(host)] = rails.get(str(host), 0) + 1
    rebooting = {h for h, n in rails.items() if n >= cfg.node_min_rails}
    return {lid: v for lid, v in burst.items() if lid not in taken
            and not any(host_of(_device_of(k)) in rebooting for k in v[1])}


_DOWNS_KEPT = 32  # of one link's downs in the horizon (a link bouncing faster is a flap anyway)


def _down_times(entry: list[Any]) -> list[int]:
    """A link's remembered down times, oldest first (a state written before several were
    kept holds one)."""
    return list(entry[0]) if isinstance(entry[0], list) else [int(entry[0])]


def _newest(recent: dict[str, Any]) -> dict[str, int]:
    """Each link's newest remembered down."""
    return {lid: max(_down_times(entry)) for lid, entry in recent.items()}


def _burst(recent: dict[str, Any], link: str, ends: list[str], ts: int, spread: int,
           horizon: int) -> dict[str, Any]:
    """Note ``link``'s down at ``ts`` in ``recent`` (link -> [its down times, ends]), forget
    the downs before ``horizon`` (no down that far back can still arrive), and return the
    links in the fullest span of ``spread`` that holds ``ts``: the downs that happened
    together with this one, as link -> [its down in the span, ends].

    The correlator's input interleaves partitions and sources, so a down can arrive after
    later ones: another root's, a down far ahead in event time (a replayed backlog, another
    tool's clock) that counted with this one would make a storm of downs hours apart, or
    the same link's own later bounce (its other end, read first from another source), which
    must not hide the down that was the reboot's. Arriving in order, every down of
    ``recent`` is within ``spread`` before ``ts`` (older ones are pruned): the span is all
    of them."""
    times = _down_times(recent[link]) if link in recent else []
    if ts not in times:
        bisect.insort(times, ts)
    recent[link] = [times[-_DOWNS_KEPT:], ends]
    for lid in list(recent):
        kept = [t for t in _down_times(recent[lid]) if t >= horizon]
        if kept:
            recent[lid] = [kept, recent[lid][1]]
        else:
            del recent[lid]
    near = sorted((t, lid) for lid, entry in recent.items() for t in _down_times(entry)
                  if ts - spread <= t <= ts + spread)
    if not near:
        return {}
    # a window sliding over the downs near ts: at each start at or before ts, the distinct
    # links with a down in [start, start + spread] (a span that, so placed, holds ts)
    best, best_n = 0, 0
    inside: dict[str, int] = {}
    j = 0
    for i, (start, _) in enumerate(near):
        if start > ts:
            break
        while j < len(near) and near[j][0] <= start + spread:
            inside[near[j][1]] = inside.get(near[j][1], 0) + 1
            j += 1
        if len(inside) > best_n:
            best, best_n = i, len(inside)
        lid = near[i][1]
        inside[lid] -= 1
        if not inside[lid]:
            del inside[lid]
    span: dict[str, Any] = {}
    for t, lid in near[best:]:
        if t > near[best][0] + spread:
            break
        span.setdefault(lid, [t, recent[lid][1]])  # its earliest down in the span
    return span


def _enough(kind: str, root: str, downs: int, idx: dict[str, Any], policy: Policy) -> bool:
    cfg = policy.fabric_health.incidents
    if kind == "switch":
        total = int(idx["switch_ports"].get(root, 0))
        need = max(cfg.switch_min_ports, math.ceil(cfg.switch_share * total))
        return total > 0 and downs >= need
    total = int(idx["host_links"].get(root, 0))
    return total >= cfg.node_min_rails and downs >= max(1, math.ceil(cfg.node_share * total))


def _open(st: dict[str, Any], idx: dict[str, Any], kind: str, root: str,
          recent: dict[str, Any], ev: PortEvent, su_of: Callable[[str], str | None],
          out: Outputs, newest: dict[str, int]) -> dict[str, Any] | None:
    """Open the incident of ``recent`` (the burst's links: their downs in its span); each
    link's state is from its ``newest`` down (one that went down again after an up is
    down); None when it was closed before."""
    started = min(ts for ts, _ in recent.values())
    cause = {"switch": IncidentCause.SWITCH_REBOOT, "host": IncidentCause.NODE_REBOOT,
             "sm": IncidentCause.SM_EVENT}[kind]
    evidence: dict[str, Any] = {"links_down": len(recent), "spread_ms": ev.ts - started}
    if kind == "sm":
        evidence["devices"] = len({_device_of(k) for _, keys in recent.values() for k in keys})
    else:
        evidence["connected"] = (idx["switch_ports"] if kind == "switch"
                                 else idx["host_links"]).get(root, 0)
    window = window_of(st, idx, ev.fabric, root, None, started, su_of)
    if window is not None:
        evidence.update(looks_like=cause.value, window=window)
        cause = IncidentCause.MAINTENANCE
    members = sorted({key for _, ends in recent.values() for key in ends})
    links = {lid: _link_state(st, lid, newest.get(lid, ts)) for lid, (ts, _) in recent.items()}
    inc = {"incident": f"inc/{cause.value}/{root}/{started}", "cause": cause.value,
           "root": root, "fabric": ev.fabric, "su": su_of(root), "started": started,
           "last_change": max([ev.ts, *(t for _, t in links.values())]), "links": links,
           "members": members, "rev": 0, "evidence": evidence}
    if inc["incident"] in st["closed"]:
        return None  # opened and closed already: its downs read again never open it twice
    st["open"][inc["incident"]] = inc
    out.incidents.append(_message(inc, "open", ev.ts))
    out.excuses += _excuses(inc, members, ev.ts)
    _explain_raced(st, inc, members, out)
    return inc


def _join_read_earlier(st: dict[str, Any], inc: dict[str, Any] | None,
                       recent: dict[str, Any], burst: dict[str, Any], ev: PortEvent,
                       out: Outputs) -> None:
    """The root's downs from after the burst that were read before it (another source,
    another partition, the burst's own reports late) join the incident just opened, as
    they would have arriving after the open: the burst is only the span that opened it."""
    if inc is None:
        return
    last = max(t for t, _ in burst.values())
    for lid in sorted(recent):
        later = [t for t in _down_times(recent[lid]) if t > last]
        if lid in burst or lid in inc["links"] or not later:
            continue
        inc["links"][lid] = _link_state(st, lid, later[-1])  # its state: from its newest
        inc["last_change"] = max(inc["last_change"], inc["links"][lid][1])
        _grow(st, inc, recent[lid][1], ev, out)


def _grow(st: dict[str, Any], inc: dict[str, Any], ends: list[str], ev: PortEvent,
          out: Outputs) -> None:
    new = [k for k in ends if k not in inc["members"]]
    if not new:
        return
    inc["members"] = sorted({*inc["members"], *new})
    inc["rev"] += 1
    out.incidents.append(_message(inc, "update", ev.ts))
    out.excuses += _excuses(inc, new, ev.ts)
    _explain_raced(st, inc, new, out)


def _excuses(inc: dict[str, Any], keys: list[str], ts: int,
             end: int | None = None) -> list[Excuse]:
    out = []
    for key in keys:
        device, port = _split(key)
        out.append(Excuse(id=inc["incident"], fabric=inc["fabric"], device=device, port=port,
                          start=inc["started"], end=end, ts=ts))
    return out


def _message(inc: dict[str, Any], state: str, ts: int) -> Incident:
    return Incident(
        id=f"{inc['incident']}/{state}/{inc['rev']}", ts=ts, fabric=inc["fabric"],
        source=SOURCE, incident=inc["incident"], cause=IncidentCause(inc["cause"]),
        root=inc["root"], state=state, started=inc["started"], ended=inc.get("ended"),
        members=inc["members"], su=inc["su"], evidence=inc["evidence"],
        reason=_reason(inc))


def _reason(inc: dict[str, Any]) -> str:
    ev = inc["evidence"]
    # an incident inside a maintenance window is told as what it looks like (its evidence
    # is that kind's: an SM event's has devices, a switch's or node's connected links)
    kind = ev.get("looks_like", inc["cause"])
    if kind == IncidentCause.SM_EVENT.value and "detection" in ev:
        what = {"sm_failover": f"master SM changed from {ev.get('from')} to {ev.get('to')}",
                "sweep_storm": f"{ev.get('sweeps')} heavy sweeps within "
                               f"{ev.get('window_s')} s"}.get(ev["detection"], ev["detection"])
        extra = f", {len(inc['members'])} ports triggered them" if inc["members"] else ""
        text = f"SM event: {inc['root']}: {what}{extra}"
    elif kind == IncidentCause.SM_EVENT.value:
        text = (f"SM event: {inc['root']} reported {ev['links_down']} links of "
                f"{ev['devices']} devices down within {ev['spread_ms'] / 1000:.1f} s")
    else:
        what = {"switch_reboot": "switch reboot or power loss",
                "node_reboot": "node reboot"}.get(kind, kind)
        text = (f"{what}: {ev['links_down']} of {ev['connected']} links of {inc['root']} "
                f"down within {ev['spread_ms'] / 1000:.1f} s")
    if "window" in ev:
        text += f", in maintenance window {ev['window']}"
    return text


def _advance(st: dict[str, Any], ts: int, fabric: str, policy: Policy, out: Outputs) -> None:
    """Move the fabric's clock to ``ts``; close what has settled, forget ended windows."""
    if ts <= st["now"]:
        return
    st["now"] = now = ts
    cfg = policy.fabric_health.incidents
    settle, max_open = round(cfg.settle * 1000), round(cfg.max_open * 1000)
    for iid in sorted(st["open"]):
        inc = st["open"][iid]
        if inc["fabric"] != fabric:
            continue
        all_up = not any(down for down, _ in inc["links"].values())
        quiet = now - inc["last_change"]
        # ...and at most max_open after it started: a member that keeps bouncing is a
        # change each time, and would otherwise keep its own flapping excused for ever
        if (all_up and quiet >= settle) or quiet >= max_open or now - inc["started"] >= max_open:
            inc["ended"] = max(inc["started"], inc["last_change"])
            still = sorted(lid for lid, (down, _) in inc["links"].items() if down)
            if still:
                inc["evidence"] = {**inc["evidence"], "still_down": still}
            del st["open"][iid]
            out.incidents.append(_message(inc, "closed", now))
            # What it covers runs ``settle`` past its end: a member's down or detection
            # from then, had it arrived before the close, would have been the incident's
            # (a change, or a member's detection while open); read late it is too.
            covers = inc["ended"] + settle
            causes = set(_causes(inc))
            out.excuses += _excuses(inc, [k for k in inc["members"] if k not in causes], now,
                                    end=covers)
            st["closed"][iid] = {"root": inc["root"], "started": inc["started"],
                                 "ended": inc["ended"], "covers": covers,
                                 "members": inc["members"], "causes": _causes(inc)}
            for old in sorted(st["closed"], key=lambda k: st["closed"][k]["ended"])[
                    :-KEEP_CLOSED]:
                del st["closed"][old]
    _forget_racing(st, now)
    st["windows"] = {k: w for k, w in st["windows"].items() if w["end"] + WINDOW_KEEP_MS > now}
    # a runbook that never returned: its wait start no longer matters a week on
    st["wf_last"] = {k: t for k, t in st["wf_last"].items() if t + 7 * WINDOW_KEEP_MS > now}


# -- detections --------------------------------------------------------------------------


def _belongs(det: Detection, root: str, members: list[str]) -> bool:
    return (det.key in members or det.device == root or host_of(det.device) == root)


def _causes(inc: dict[str, Any]) -> list[str]:
    """The members that caused the incident rather than suffered it: the ports whose traps
    forced an SM's sweep storm or failover (``_sm_detection`` names them). Their own
    detections are not filed under it, so a flapping port still gets its runbook and is
    isolated (holding it would keep the storm going); the incident pages once for the SM.
    A state written before causes were kept: every member of an incident a detection
    opened, none of the others (a closed entry of then: none)."""
    if "causes" in inc:
        return list(inc["causes"])
    if inc.get("cause") == IncidentCause.SM_EVENT.value and "detection" in inc.get(
            "evidence", {}):
        return list(inc["members"])
    return []


def annotate(st: dict[str, Any], idx: dict[str, Any], det: Detection,
             su_of: Callable[[str], str | None]) -> Detection:
    """The detection with ``incident`` / ``maintenance`` set where one covers it."""
    update: dict[str, Any] = {}
    if det.incident is None:
        for iid in sorted(st["open"]):
            inc = st["open"][iid]
            if (inc["fabric"] == det.fabric and det.key not in _causes(inc)
                    and _belongs(det, inc["root"], inc["members"])):
                update["incident"] = iid
                break
        else:
            for iid in sorted(st["closed"]):
                c = st["closed"][iid]
                if (c["started"] <= det.ts <= _covers(c) and det.key not in _causes(c)
                        and _belongs(det, c["root"], c["members"])):
                    update["incident"] = iid
                    break
    if det.maintenance is None:
        window = window_of(st, idx, det.fabric, det.device, det.port, det.ts, su_of)
        if window is not None:
            update["maintenance"] = window
    return det.model_copy(update=update) if update else det


def raced_its_excuse(st: dict[str, Any], det: Detection) -> bool:
    """A member's flap that counted the incident's own downs: it fired before the excuse
    reached the flap detector (a worker reading a backlog sees the reboot's downs and the
    bounces at once). Without those downs it is no flap, so it is not published: the same
    answer replay gives, where the excuse always comes first."""
    if det.detection.value != "flap" or det.incident is None:
        return False
    inc = st["open"].get(det.incident) or st["closed"].get(det.incident)
    downs, limit = det.evidence.get("down_ts"), det.evidence.get("max_link_downs")
    if inc is None or not isinstance(downs, list) or not isinstance(limit, int):
        return False
    ended = _covers(inc) if "ended" in inc else None
    outside = [t for t in downs if isinstance(t, int)
               and not (inc["started"] <= t and (ended is None or t <= ended))]
    return len(outside) <= limit


def _keep_if_racing(st: dict[str, Any], det: Detection, policy: Policy) -> None:
    """A flap published with no incident is kept while an incident that takes its downs can
    still open (``spread`` plus the lateness past its newest down): read late, a reboot's
    other reports come after the flap that counted the reboot's down."""
    if det.detection.value != "flap" or det.incident is not None \
            or det.maintenance is not None or not isinstance(det.evidence.get("down_ts"), list):
        return
    downs = [t for t in det.evidence["down_ts"] if isinstance(t, int)]
    if not downs:
        return
    cfg = policy.fabric_health
    until = max(downs) + round((cfg.incidents.spread + cfg.stream.allowed_lateness) * 1000)
    kept = st.setdefault("racing", {}).setdefault(det.key, [])
    if all(entry[1]["id"] != det.id for entry in kept):  # (a redelivery: kept already)
        kept.append([until, det.to_wire()])


def _explain_raced(st: dict[str, Any], inc: dict[str, Any], keys: list[str],
                   out: Outputs) -> None:
    """A kept flap of a member that is no flap without the incident's downs (the rule of
    ``raced_its_excuse``) is published again under the incident (id ``<id>/explained``,
    evidence ``explains``): its runbook, started before the incident opened, stands down
    (the dispatcher tells it), and the ledger shows why."""
    racing: dict[str, list[Any]] = st.get("racing") or {}
    for key in keys:
        kept = racing.get(key)
        if not kept:
            continue
        for entry in list(kept):
            det = Detection.model_validate(entry[1])
            under = det.model_copy(update={"incident": inc["incident"]})
            if key in _causes(inc) or not raced_its_excuse(st, under):
                continue
            kept.remove(entry)
            out.followups.append(explained(det, inc["incident"]))
        if not kept:
            racing.pop(key, None)


def explained(det: Detection, incident: str) -> Detection:
    """``det`` published again under ``incident``, which takes its downs."""
    return det.model_copy(update={"id": f"{det.id}/explained", "incident": incident,
                                  "evidence": {**det.evidence, "explains": det.id}})


def explains(det: Detection) -> str | None:
    """The id of the detection ``det`` explains, when it is such a copy (``explained``)."""
    target = det.evidence.get("explains")
    return target if det.incident is not None and isinstance(target, str) else None


def _forget_racing(st: dict[str, Any], now: int) -> None:
    racing: dict[str, list[Any]] = st.get("racing") or {}
    for key in list(racing):
        racing[key] = [e for e in racing[key] if e[0] >= now]
        if not racing[key]:
            del racing[key]
    if not racing:
        st.pop("racing", None)


# -- self-inflicted downs ----------------------------------------------------------------


def _action(st: dict[str, Any], idx: dict[str, Any], rec: ActionRecord, grace: int,
            out: Outputs) -> None:
    wf = rec.workflow_id
    began = st["wf_last"].get(wf, rec.ts - grace)
    st["wf_last"][wf] = rec.ts
    if rec.outcome != "done":
        return
    _, ends = _link(rec.key, idx)
    if rec.step == "isolate":
        eid = f"self/isolate/{wf}/{rec.key}"
        st["isolations"][rec.key] = {"id": eid, "start": rec.ts - grace, "ends": ends}
        out.excuses += _self(eid, rec, ends, rec.ts - grace, None)
    elif rec.step in ("unisolate", "return"):
        held = st["isolations"].pop(rec.key, None)
        if held is not None:
            out.excuses += _self(held["id"], rec, held["ends"], held["start"], rec.ts + grace)
        if rec.step == "return":
            st["wf_last"].pop(wf, None)
    elif rec.step.startswith("ladder:"):
        out.excuses += _self(f"self/{rec.step}/{wf}/{rec.key}", rec, ends, began,
                             rec.ts + grace)
    elif rec.step == "abort":
        st["wf_last"].pop(wf, None)


def _back_up(st: dict[str, Any], ev: PortEvent, grace: int, out: Outputs) -> None:
    """A link of an isolated port came up: it is not isolated any more (un-isolated by a
    human, say, with no record of ours), so its downs count again after the grace."""
    for key, held in list(st["isolations"].items()):
        if ev.key in held["ends"] and ev.ts > held["start"] + grace:
            del st["isolations"][key]
            out.excuses += [Excuse(id=held["id"], fabric=ev.fabric, device=d, port=p,
                                   start=held["start"], end=ev.ts + grace, ts=ev.ts)
                            for d, p in map(_split, held["ends"])]


def _self(eid: str, rec: ActionRecord, ends: list[str], start: int,
          end: int | None) -> list[Excuse]:
    return [Excuse(id=eid, fabric=rec.fabric, device=d, port=p, start=start, end=end,
                   ts=rec.ts) for d, p in map(_split, ends)]


def outputs_to_wire(out: Outputs) -> list[Any]:
    """What a redelivery needs to repeat ``out``: incidents and excuses whole, and only the
    annotation of the detection (a detection's one output is itself, annotated)."""
    return [[i.to_wire() for i in out.incidents], [e.to_wire() for e in out.excuses],
            [[d.incident, d.maintenance] for d in out.detections],
            [d.to_wire() for d in out.followups]]


def outputs_from_wire(obj: list[Any], event: CorrelatorInput) -> Outputs:
    dets: list[Detection] = []
    if isinstance(event, Detection):
        for kept in obj[2]:
            # [incident, maintenance]; a whole detection in states kept before that
            incident, maintenance = ((kept.get("incident"), kept.get("maintenance"))
                                     if isinstance(kept, dict) else kept)
            update = {k: v for k, v in (("incident", incident), ("maintenance", maintenance))
                      if v is not None}
            dets.append(event.model_copy(update=update) if update else event)
    return Outputs([Incident.model_validate(i) for i in obj[0]],
                   [Excuse.from_wire(e) for e in obj[1]], dets,
                   [Detection.model_validate(d) for d in (obj[3] if len(obj) > 3 else [])])
