"""Active probes: bandwidth below ``slowFraction`` of baseline is slow-not-dead.

* Baseline, in this order: the probe's own ``baseline_gbps``; a pinned one (``fabricwatch
  baseline pin``, handed in as ``pinned(probe)``); else learned per (probe, rail, size,
  scale): the ``baselineQuantile`` of the last ``baselineSamples`` healthy results, with no
  verdict until ``minBaselineSamples`` exist (a fabric's first results teach, they are not
  judged). A result teaches only when it is at least ``healthyFraction`` of the baseline
  it was judged against: slow results, and the slightly slow ones between ``slowFraction``
  and ``healthyFraction``, never pull the learned baseline down (no ratchet), and the high
  quantile keeps a few low ones from moving it.
* Scale is the ranks a run spanned (the probe's ``ranks``, else its distinct endpoints: 2 for
  ib_write_bw): a 16-rank all-reduce is not judged by an 8-rank one's bus bandwidth.
* Each slow probe opens a ``slow_probe`` episode for its (probe, src, dst, size), attributed
  to its source port, with action ``ticket``; it ends when that probe is fast again.
* ``#wrong`` > 0 in an NCCL result (``wrong`` / ``in_place_wrong``) opens a ``probe_wrong``
  episode of its own with the policy's ``wrongAction``, whatever the bandwidth: the
  collective returned corrupted data. It ends when that probe is clean again.
* Localisation: slow probes within ``localiseWindow`` of event time whose routes are known
  to cross one cable, ``minFailingProbesToLocalise`` or more of them, name that cable: one
  ``slow_probe`` with the policy's action on the port of the cable the runbook acts on
  (evidence ``localised: true``, the cable, the probes), once the cable has stayed named
  for ``localiseConfirm`` (the next probe of the rail after that decides). By then the
  other slow pairs of the rail have shown themselves: when ``commonModeCables`` cables of
  one switch are named within the window, the slowness is the switch's or a congestion's
  through it (an ECN misconfiguration slows every pair it carries), and it is one
  ``slow_probe`` ticket at the switch (port 0, evidence ``common_mode``), none of its
  cables acted on. Routes come from an optional
  ``paths(probe)`` (``streams.probes.paths``: from the topology, only cables every
  shortest path crosses; with ECMP the spine hop is not known and not guessed). A cable
  that a fast probe is known to have crossed since the first of those slow probes is
  cleared (the slow pairs' trouble is elsewhere, e.g. on an uplink they hashed onto).
  Without a route a probe's path is its two endpoints, so probes sharing an endpoint name
  it, with action ``ticket`` (an endpoint is a lead, not proof: only a route earns the
  policy's action).

State (per rail, the topic's key) is plain JSON: baselines, recent slow probes, cables
recent fast probes crossed, open episodes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from schemas import Detection, DetectionKind, Probe
from schemas.policy import Policy
from streams.common import episode_id, make_detection
from streams.probes.paths import Route, endpoint

# A probe's route: a Route from the topology, or plain port keys (each its own link); None
# when the route is not known (the endpoints stand in).
PathFn = Callable[[Probe], "Route | list[str] | None"]
PinnedFn = Callable[[Probe, int], "float | None"]

__all__ = ["PathFn", "PinnedFn", "endpoint", "new_state", "probe_scale", "quantile", "step"]


def new_state() -> dict[str, Any]:
    return {"baselines": {}, "slow": [], "open": {}, "named": {}, "fast": {}, "wrong": {},
            "pending": {}, "common": {}}


def probe_scale(probe: Probe) -> int:
    """The ranks the run spanned: ``ranks`` when the probe says, else its distinct ends."""
    extra = probe.__pydantic_extra__ or {}
    ranks = extra.get("ranks")
    if isinstance(ranks, int) and not isinstance(ranks, bool) and ranks >= 1:
        return ranks
    ends = {probe.src, *(d.strip() for d in probe.dst.split(",") if d.strip())}
    return max(1, len(ends))


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile by linear interpolation between order statistics."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _links(probe: Probe, paths: PathFn | None) -> tuple[list[tuple[str, str]], bool]:
    """(cable key, port to act on) the probe is known to cross; whether that is a route."""
    route = paths(probe) if paths is not None else None
    if isinstance(route, Route):
        return list(route.links), True
    if isinstance(route, list):
        return [(k, k) for k in route], True
    src_dev, src_port = endpoint(probe.src, probe.rail)
    dst_dev, dst_port = endpoint(probe.dst, probe.rail)
    ends = dict.fromkeys([f"{src_dev}:{src_port}", f"{dst_dev}:{dst_port}"])
    return [(k, k) for k in ends], False


def step(state: dict[str, Any] | None, probe: Probe, policy: Policy,
         paths: PathFn | None = None, pinned: PinnedFn | None = None
         ) -> tuple[dict[str, Any], list[Detection]]:
    """Apply one probe result of this rail."""
    st = state if state is not None else new_state()
    for k, v in new_state().items():
        st.setdefault(k, v)  # a state written before a part existed
    section = policy.fabric_health.probes
    detections: list[Detection] = []
    scale = probe_scale(probe)
    bkey = f"{probe.probe}|{probe.rail}|{probe.size_bytes}|{scale}"
    history: list[float] = st["baselines"].setdefault(bkey, [])
    pin = pinned(probe, scale) if pinned is not None else None
    if probe.baseline_gbps is not None and probe.baseline_gbps > 0:
        baseline: float | None = probe.baseline_gbps
        how = "probe"
    elif pin is not None and pin > 0:
        baseline, how = pin, "pinned"
    elif len(history) >= section.min_baseline_samples:
        baseline, how = quantile(history, section.baseline_quantile), "learned"
    else:
        baseline, how = None, "learned"
    slow = baseline is not None and probe.bw_gbps < section.slow_fraction * baseline
    if baseline is None or probe.bw_gbps >= section.healthy_fraction * baseline:
        history.append(probe.bw_gbps)
        del history[:-section.baseline_samples]
    src_dev, src_port = endpoint(probe.src, probe.rail)
    okey = f"{probe.probe}|{probe.src}|{probe.dst}|{probe.size_bytes}"
    detections += _wrong(st, probe, policy, okey, src_dev, src_port)
    links, routed = _links(probe, paths)
    horizon = probe.ts - round(section.localise_window * 1000)
    if not slow:
        st["open"].pop(okey, None)
        if routed:  # a fast probe clears the cables it is known to have crossed
            fast: dict[str, int] = st["fast"]
            for key, _port in links:
                fast[key] = max(fast.get(key, probe.ts), probe.ts)
            st["fast"] = {k: t for k, t in fast.items() if t > horizon}
        detections += _confirm(st, probe, policy, horizon)
        return st, detections
    assert baseline is not None  # noqa: S101 - slow implies a baseline
    evidence = {"probe": probe.probe, "src": probe.src, "dst": probe.dst, "rail": probe.rail,
                "size_bytes": probe.size_bytes, "scale": scale, "bw_gbps": probe.bw_gbps,
                "baseline_gbps": round(baseline, 3), "baseline_learned": how == "learned",
                "baseline_from": how, "slow_fraction": section.slow_fraction,
                "probe_id": probe.id}
    if okey not in st["open"]:
        eid = episode_id(DetectionKind.SLOW_PROBE, src_dev, src_port, probe.ts,
                         f"{probe.probe}/{probe.dst}/{probe.size_bytes}")
        st["open"][okey] = eid
        detections.append(make_detection(
            kind=DetectionKind.SLOW_PROBE, fabric=probe.fabric, device=src_dev, port=src_port,
            ts=probe.ts, action="ticket", episode=eid, evidence={**evidence,
                                                                 "localised": False}))
    # Localise: which cable are the recent slow probes known to share?
    recent = [s for s in st["slow"] if s[0] > horizon and s[1] != probe.id]
    recent.append([probe.ts, probe.id, okey, [k for k, _ in links]])
    st["slow"] = recent
    st["named"] = {k: v for k, v in st["named"].items() if v[1] > horizon}
    st["fast"] = {k: t for k, t in st["fast"].items() if t > horizon}
    for key, port_key in links:
        sharing = [s for s in recent if key in s[3]]
        distinct = {s[2] for s in sharing}
        if len(distinct) < section.min_failing_probes_to_localise:
            continue
        if st["fast"].get(key, horizon) >= min(s[0] for s in sharing):
            continue  # a fast probe crossed it meanwhile: not this cable
        named = st["named"].get(key)
        if named is not None:  # still implicated: the same episode goes on
            named[1] = probe.ts
            if named[0] == COMMON and len(named) == 7:
                named[5], named[6] = sorted(s[1] for s in sharing), sorted(distinct)
            elif named[0] != COMMON and len(named) == 4:
                named[3] = sorted(distinct)
            continue
        if routed:  # acted on once confirmed, unless its switch is the common cause
            ids, pairs = sorted(s[1] for s in sharing), sorted(distinct)
            entry = st["pending"].get(key)
            if entry is None:
                st["pending"][key] = [probe.ts, probe.ts, port_key, ids, pairs]
            else:
                entry[1], entry[3], entry[4] = probe.ts, ids, pairs
            continue
        device, _, port_s = port_key.rpartition(":")
        eid = episode_id(DetectionKind.SLOW_PROBE, device, int(port_s), probe.ts, "localised")
        st["named"][key] = [eid, probe.ts]  # (an endpoint's: no switch, no common mode)
        detections.append(make_detection(
            kind=DetectionKind.SLOW_PROBE, fabric=probe.fabric, device=device,
            port=int(port_s), ts=probe.ts,
            # a shared endpoint is a lead for a technician: only a route earns the action
            action="ticket", episode=eid,
            evidence={"localised": True, "link": key, "probes": sorted(s[1] for s in sharing),
                      "pairs": sorted(distinct), "by": "endpoints",
                      "slow_fraction": section.slow_fraction}))
    detections += _confirm(st, probe, policy, horizon)
    return st, detections


def _switch(port_key: str) -> str:
    return port_key.rpartition(":")[0]


def _confirm(st: dict[str, Any], probe: Probe, policy: Policy, horizon: int
             ) -> list[Detection]:
    """The cables routes named that have stayed named ``localiseConfirm``: each one's
    ``slow_probe`` with the policy's action, unless ``commonModeCables`` cables of its
    switch are named (pending, acted on, or already its common mode) within the window:
    then they are the switch's (or a congestion's through it), one ``common_mode`` ticket at
    the switch (port 0) and none of them acted on.

    First, what no longer counts goes, whatever order the cables sort in: a cable no slow
    probe named within the window, or one a fast probe is known to have crossed since it was
    named (pending or in a common mode). A common mode left with fewer than
    ``commonModeCables`` cables is over: its cables are pending again, from now (a bad cable
    among healthy ones that were slow beside it is then acted on, alone)."""
    section = policy.fabric_health.probes
    pending: dict[str, list[Any]] = st["pending"]
    named: dict[str, list[Any]] = st["named"]
    fast: dict[str, int] = st["fast"]  # (a cable no fast probe crossed is not in it)
    for key in [k for k, e in pending.items()
                if e[1] <= horizon or fast.get(k, -1) >= e[0]]:
        del pending[key]
    for key in [k for k, n in named.items() if n[0] == COMMON
                and (len(n) < 7 or fast.get(k, -1) >= n[3])]:
        del named[key]
    for switch in list(st["common"]):
        if len(_implicated(st, switch)) < section.common_mode_cables:
            del st["common"][switch]
            for key in sorted(k for k, n in named.items()
                              if n[0] == COMMON and n[2] == switch):
                _, last, _, _, port_key, ids, pairs = named.pop(key)
                pending[key] = [probe.ts, last, port_key, ids, pairs]
    out: list[Detection] = []
    confirm_ms = round(section.localise_confirm * 1000)
    # each switch's implicated cables as of before this call's decisions: a cable acted on
    # here does not explain away its twin (two cables crossed by the very same pairs)
    before: dict[str, set[str]] = {}
    for key in sorted(pending):
        entry = pending.get(key)
        if entry is None:
            continue  # taken with its switch's common mode below
        first, last, port_key = entry[0], entry[1], entry[2]
        if probe.ts - first < confirm_ms:
            continue
        switch = _switch(port_key)
        implicated = before.get(switch)
        if implicated is None:
            implicated = before[switch] = _implicated(st, switch)
        if key not in implicated:
            continue  # its slow pairs are a cable's with more: that one explains them
        if len(implicated) >= section.common_mode_cables:
            out += _common_mode(st, probe, switch, sorted(implicated))
            continue
        del pending[key]
        device, _, port_s = port_key.rpartition(":")
        eid = episode_id(DetectionKind.SLOW_PROBE, device, int(port_s), first, "localised")
        named[key] = [eid, last, device, entry[4]]
        out.append(make_detection(
            kind=DetectionKind.SLOW_PROBE, fabric=probe.fabric, device=device,
            port=int(port_s), ts=probe.ts, action=section.action, episode=eid,
            evidence={"localised": True, "link": key, "probes": entry[3], "pairs": entry[4],
                      "by": "paths", "slow_fraction": section.slow_fraction,
                      "named_since_ms": first, "confirm_s": section.localise_confirm}))
    return out


# A named cable held in its switch's common mode: [COMMON, last named, switch, since,
# port to act on, probes, pairs] (never acted on while it lasts). One acted on:
# [episode, last named, switch, pairs]; one named by endpoints: [episode, last named].
COMMON = "common"


def _implicated(st: dict[str, Any], switch: str) -> set[str]:
    """The switch's named cables (pending, acted on, or in its common mode) that no other
    of them explains: one whose slow pairs are all among another's, and fewer, is that
    other's shadow (a healthy cable whose every slow pair also crossed the bad one), not a
    cable of its own; so is one whose pairs are all among those of a cable already acted on
    (the known cause). Two not yet acted on, crossed by exactly the same pairs, cannot be
    told apart: both."""
    pairs: dict[str, frozenset[str]] = {
        k: frozenset(e[4]) for k, e in st["pending"].items() if _switch(e[2]) == switch}
    acted: set[str] = set()
    cleared: set[str] = set()  # acted on, a fast probe across it since: no cause of its own
    fast: dict[str, int] = st["fast"]
    for k, n in st["named"].items():
        if n[0] == COMMON and len(n) == 7 and n[2] == switch:
            pairs[k] = frozenset(n[6])
        elif n[0] != COMMON and len(n) == 4 and n[2] == switch:
            pairs[k] = frozenset(n[3])
            acted.add(k)
            if fast.get(k, -1) > n[1]:
                cleared.add(k)
    # (a cleared one still explains its shadows: their slowness was its, before it was fixed)
    return {k for k, mine in pairs.items()
            if not any(mine < other or (j in acted and k not in acted and mine <= other)
                       for j, other in pairs.items() if j != k)} - cleared


def _common_mode(st: dict[str, Any], probe: Probe, switch: str, links: list[str]
                 ) -> list[Detection]:
    """The switch's pending cables named as its common mode (never acted on), and its one
    ticket while it lasts."""
    pending: dict[str, list[Any]] = st["pending"]
    probes_seen: set[str] = set()
    pairs_seen: set[str] = set()
    for key in links:
        entry = pending.pop(key, None)
        if entry is not None:
            probes_seen.update(entry[3])
            pairs_seen.update(entry[4])
            st["named"][key] = [COMMON, entry[1], switch, probe.ts, entry[2], entry[3],
                                entry[4]]
    if switch in st["common"]:
        return []
    eid = episode_id(DetectionKind.SLOW_PROBE, switch, 0, probe.ts, "common_mode")
    st["common"][switch] = [eid, probe.ts]
    # cables of the switch confirmed alone before the others showed: already asked to be
    # isolated, so the person the ticket reaches knows which to look at first
    acted = sorted(k for k, n in st["named"].items()
                   if len(n) == 4 and n[2] == switch and n[0] != COMMON)
    return [make_detection(
        kind=DetectionKind.SLOW_PROBE, fabric=probe.fabric, device=switch, port=0,
        ts=probe.ts, action="ticket", episode=eid,
        evidence={"localised": True, "common_mode": True, "scope": "device", "links": links,
                  "acted_on": acted, "probes": sorted(probes_seen),
                  "pairs": sorted(pairs_seen), "by": "paths",
                  "why": "slow pairs name this many cables of one switch: the switch or a "
                         "congestion through it, not each cable"})]


def _wrong(st: dict[str, Any], probe: Probe, policy: Policy, okey: str, device: str,
           port: int) -> list[Detection]:
    """``probe_wrong`` when an NCCL check counted wrong elements (out of or in place)."""
    extra = probe.__pydantic_extra__ or {}
    counts = {k: extra.get(k) for k in ("wrong", "in_place_wrong")}
    wrong = sum(v for v in counts.values() if isinstance(v, int) and v > 0)
    if not wrong:
        st["wrong"].pop(okey, None)
        return []
    if okey in st["wrong"]:
        return []
    eid = episode_id(DetectionKind.PROBE_WRONG, device, port, probe.ts,
                     f"{probe.probe}/{probe.dst}/{probe.size_bytes}")
    st["wrong"][okey] = eid
    return [make_detection(
        kind=DetectionKind.PROBE_WRONG, fabric=probe.fabric, device=device, port=port,
        ts=probe.ts, action=policy.fabric_health.probes.wrong_action, episode=eid,
        evidence={"probe": probe.probe, "src": probe.src, "dst": probe.dst,
                  "rail": probe.rail, "size_bytes": probe.size_bytes, **counts,
                  "scale": probe_scale(probe), "probe_id": probe.id})]
