"""Subnet-manager health from ``fabric.sm``: pure logic, one state per fabric.

Fed in order with a fabric's ``SmEvent``s (the opensm log follower, the ``sminfo`` /
``saquery -s`` poller, the simulator), it judges (``schemas.policy.SmHealth``):

* ``sm_failover``: a ``state`` event says SM B is master while A was (or A left MASTER
  and B took over). The first master seen is no change; the same SM coming back to MASTER
  is a restart, no failover. Device: the new master, port 0.
* ``sm_standby_lost``: a ``standby`` list (``saquery -s``) without an SM the previous list
  had (unless it is the master now: that is the failover), one detection per lost SM
  (device: that SM); and, once when the count falls below ``min_standbys`` without a
  named loss (the first list already short), one on the master.
* ``sweep_storm``: more than ``max_heavy_sweeps`` heavy sweeps ending within
  ``sweep_window``. One detection per storm (device: the SM, port 0) naming the ports and
  devices whose traps forced the sweeps and their triggers; the storm lasts while sweeps
  keep exceeding the limit and ends a ``sweep_window`` after the last one that did.
* ``trap_storm``: opensm's own report of one trap repeating (``count`` at least
  ``trap_storm_count``) or a babbling port disabled. Device and port where opensm named
  them (else the SM, port 0); one detection per port and episode, a new one when opensm
  disables the port; an episode ends ``sweep_window`` x 10 after its last report.

State (JSON-ready, for the worker's changelogged table): the master, the standby list,
the recent sweeps (end, id, ports, devices, trigger, duration), the open storm and the
open trap episodes.
"""

from __future__ import annotations

from typing import Any

from schemas import Detection, DetectionKind, SmEvent
from schemas.policy import Policy
from streams.common import episode_id, make_detection

MAX_EVIDENCE_PORTS = 64  # a storm's evidence names at most this many ports
TRAP_QUIET_WINDOWS = 10  # a trap episode ends this many sweep windows after its last report


def new_state() -> dict[str, Any]:
    return {"master": None, "left": None, "standbys": None, "short": False, "sweeps": [],
            "storm": None, "traps": {}, "now": 0}


def step(state: dict[str, Any] | None, ev: SmEvent, policy: Policy
         ) -> tuple[dict[str, Any], list[Detection]]:
    """Apply one SM event of one fabric; returns the (mutated) state and its detections."""
    st = state if state is not None else new_state()
    st["now"] = max(st["now"], ev.ts)
    if ev.event == "state":
        return st, _state(st, ev, policy)
    if ev.event == "standby":
        return st, _standby(st, ev, policy)
    if ev.event == "sweep":
        return st, _sweep(st, ev, policy)
    return st, _trap_storm(st, ev, policy)


def _state(st: dict[str, Any], ev: SmEvent, policy: Policy) -> list[Detection]:
    cfg = policy.fabric_health.sm_health
    master = st["master"]
    if ev.state != "master":
        if master is not None and master["sm"] == ev.sm and ev.ts >= master["ts"]:
            st["left"], st["master"] = master, None  # the master left MASTER: who is next?
        return []
    previous = master or st["left"]
    st["master"], st["left"] = {"sm": ev.sm, "ts": ev.ts}, None
    if st["standbys"] is not None and ev.sm in st["standbys"]:
        st["standbys"] = [s for s in st["standbys"] if s != ev.sm]  # promoted, not lost
    if previous is None or previous["sm"] == ev.sm or ev.ts < previous["ts"]:
        return []
    episode = episode_id(DetectionKind.SM_FAILOVER, ev.sm, 0, ev.ts)
    return [make_detection(
        kind=DetectionKind.SM_FAILOVER, fabric=ev.fabric, device=ev.sm, port=0, ts=ev.ts,
        action=cfg.failover_action, episode=episode,
        evidence={"from": previous["sm"], "to": ev.sm, "master_since": previous["ts"],
                  "reported_by": ev.source, "priority": ev.priority})]


def _standby(st: dict[str, Any], ev: SmEvent, policy: Policy) -> list[Detection]:
    cfg = policy.fabric_health.sm_health
    now = sorted(set(ev.sms or []))
    before = st["standbys"]
    st["standbys"] = now
    master = st["master"]["sm"] if st["master"] else None
    out: list[Detection] = []
    if before is not None:
        # the master, as the list's own source or the state events name it, is not lost
        for lost in sorted(set(before) - set(now) - {master, ev.sm}):
            out.append(_lost(ev, lost, cfg.standby_lost_action,
                             {"lost": lost, "standbys": now, "min_standbys": cfg.min_standbys,
                              "master": master}))
    short = len(now) < cfg.min_standbys
    if short and not st["short"] and not out:
        out.append(_lost(ev, master or ev.sm, cfg.standby_lost_action,
                         {"standbys": now, "min_standbys": cfg.min_standbys,
                          "master": master}))
    st["short"] = short
    return out


def _lost(ev: SmEvent, device: str, action: str, evidence: dict[str, Any]) -> Detection:
    episode = episode_id(DetectionKind.SM_STANDBY_LOST, device, 0, ev.ts)
    return make_detection(kind=DetectionKind.SM_STANDBY_LOST, fabric=ev.fabric,
                          device=device, port=0, ts=ev.ts, action=action, episode=episode,
                          evidence={**evidence, "reported_by": ev.source})


def _sweep(st: dict[str, Any], ev: SmEvent, policy: Policy) -> list[Detection]:
    cfg = policy.fabric_health.sm_health
    window = round(cfg.sweep_window * 1000)
    end = int(ev.end if ev.end is not None else ev.ts)
    if any(s[1] == ev.id for s in st["sweeps"]):
        return []  # the same sweep again (a re-read log)
    st["sweeps"].append([end, ev.id, list(ev.ports), list(ev.devices), ev.trigger,
                         ev.duration_ms])
    st["sweeps"].sort(key=lambda s: (s[0], s[1]))
    latest = st["sweeps"][-1][0]
    st["sweeps"] = [s for s in st["sweeps"] if s[0] > latest - window]
    storm = st["storm"]
    if storm is not None and end > storm["last"] + window:
        st["storm"] = storm = None  # quiet for a whole window: that storm is over
    if len(st["sweeps"]) <= cfg.max_heavy_sweeps:
        return []
    if storm is not None:
        storm["last"] = max(storm["last"], end)
        storm["sweeps"] += 1
        return []
    first = st["sweeps"][0][0]
    st["storm"] = {"start": first, "last": end, "sweeps": len(st["sweeps"])}
    ports = sorted({p for s in st["sweeps"] for p in s[2]})
    devices = sorted({d for s in st["sweeps"] for d in s[3]})
    triggers = sorted({s[4] for s in st["sweeps"] if s[4]})
    durations = [s[5] for s in st["sweeps"] if s[5] is not None]
    episode = episode_id(DetectionKind.SWEEP_STORM, ev.sm, 0, first)
    return [make_detection(
        kind=DetectionKind.SWEEP_STORM, fabric=ev.fabric, device=ev.sm, port=0, ts=ev.ts,
        action=cfg.sweep_storm_action, episode=episode,
        evidence={"sweeps": len(st["sweeps"]), "window_s": cfg.sweep_window,
                  "max_heavy_sweeps": cfg.max_heavy_sweeps, "first_end": first,
                  "ports": ports[:MAX_EVIDENCE_PORTS], "ports_total": len(ports),
                  "devices": devices[:MAX_EVIDENCE_PORTS], "triggers": triggers,
                  "max_duration_ms": max(durations) if durations else None,
                  "reported_by": ev.source})]


def _trap_storm(st: dict[str, Any], ev: SmEvent, policy: Policy) -> list[Detection]:
    cfg = policy.fabric_health.sm_health
    if not ev.disabled and (ev.count or 0) < cfg.trap_storm_count:
        return []
    device, port = (ev.device, ev.port) if ev.device is not None and ev.port is not None \
        else (ev.sm if ev.device is None else ev.device, 0)
    key = f"{device}:{port}"
    quiet = round(cfg.sweep_window * 1000) * TRAP_QUIET_WINDOWS
    for k in [k for k, ep in st["traps"].items() if ev.ts > ep["last"] + quiet]:
        del st["traps"][k]
    held = st["traps"].get(key)
    if held is not None:
        held["last"] = max(held["last"], ev.ts)
        if not ev.disabled or held["disabled"]:
            return []
        held["disabled"] = True  # the storm went on until opensm disabled the port
        start = held["start"]
    else:
        start = ev.ts
        st["traps"][key] = {"start": start, "last": ev.ts, "disabled": ev.disabled}
    episode = episode_id(DetectionKind.TRAP_STORM, device, port, start,
                         "disabled" if ev.disabled else "")
    return [make_detection(
        kind=DetectionKind.TRAP_STORM, fabric=ev.fabric, device=device, port=port, ts=ev.ts,
        action=cfg.trap_storm_action, episode=episode,
        evidence={"trap": ev.trap, "count": ev.count, "disabled": ev.disabled,
                  "trap_storm_count": cfg.trap_storm_count, "sm": ev.sm,
                  "resolved": ev.device is not None, "reported_by": ev.source})]
