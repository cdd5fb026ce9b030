"""Active probes: bandwidth below ``slowFraction`` of baseline is slow-not-dead.

* Baseline: the probe's own ``baseline_gbps`` when given, else learned per (probe, rail,
  size): the median of the last ``baselineSamples`` results that were not slow; no verdict
  until ``minBaselineSamples`` exist (a fabric's first results teach, they are not judged).
* Each slow probe opens a ``slow_probe`` episode for its (probe, src, dst, size), attributed
  to its source port, with action ``ticket``; it ends when that probe is fast again.
* Localisation: slow probes within ``localiseWindow`` of event time whose paths share a
  link, ``minFailingProbesToLocalise`` or more of them, name that link: one ``slow_probe``
  with the policy's action on that port (evidence ``localised: true`` and the probes).
  Paths come from an optional ``paths(probe) -> [port keys]`` (a topology's routes); without
  it a probe's path is its two endpoints, so probes sharing an endpoint name it, with action
  ``ticket`` (an endpoint is a lead, not proof: only a path earns the policy's action).
* Endpoints: ``device:port`` as given; a ``device/hca`` name is port 1; a bare host name is
  its HCA on the probe's rail, ``{host}/mlx5_{rail}`` port 1 (the simulator's and the usual
  rail-optimised naming).

State (per rail, the topic's key) is plain JSON: baselines, recent slow probes, open
episodes.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from schemas import Detection, DetectionKind, Probe
from schemas.policy import Policy
from streams.common import episode_id, make_detection

PathFn = Callable[[Probe], list[str]]


def endpoint(name: str, rail: int) -> tuple[str, int]:
    """The port a probe endpoint names (see the module docstring)."""
    device, sep, port = name.rpartition(":")
    if sep and port.isdigit():
        return device, int(port)
    if "/" in name:
        return name, 1
    return f"{name}/mlx5_{rail}", 1


def new_state() -> dict[str, Any]:
    return {"baselines": {}, "slow": [], "open": {}, "named": {}}


def step(state: dict[str, Any] | None, probe: Probe, policy: Policy,
         paths: PathFn | None = None) -> tuple[dict[str, Any], list[Detection]]:
    """Apply one probe result of this rail."""
    st = state if state is not None else new_state()
    section = policy.fabric_health.probes
    detections: list[Detection] = []
    bkey = f"{probe.probe}|{probe.rail}|{probe.size_bytes}"
    history: list[float] = st["baselines"].setdefault(bkey, [])
    if probe.baseline_gbps is not None and probe.baseline_gbps > 0:
        baseline: float | None = probe.baseline_gbps
        learned = False
    elif len(history) >= section.min_baseline_samples:
        baseline = statistics.median(history)
        learned = True
    else:
        baseline = None
        learned = True
    slow = baseline is not None and probe.bw_gbps < section.slow_fraction * baseline
    if not slow:
        history.append(probe.bw_gbps)
        del history[:-section.baseline_samples]
    src_dev, src_port = endpoint(probe.src, probe.rail)
    okey = f"{probe.probe}|{probe.src}|{probe.dst}|{probe.size_bytes}"
    if not slow:
        st["open"].pop(okey, None)
        return st, detections
    assert baseline is not None  # noqa: S101 - slow implies a baseline
    evidence = {"probe": probe.probe, "src": probe.src, "dst": probe.dst, "rail": probe.rail,
                "size_bytes": probe.size_bytes, "bw_gbps": probe.bw_gbps,
                "baseline_gbps": round(baseline, 3), "baseline_learned": learned,
                "slow_fraction": section.slow_fraction, "probe_id": probe.id}
    if okey not in st["open"]:
        eid = episode_id(DetectionKind.SLOW_PROBE, src_dev, src_port, probe.ts,
                         f"{probe.probe}/{probe.dst}/{probe.size_bytes}")
        st["open"][okey] = eid
        detections.append(make_detection(
            kind=DetectionKind.SLOW_PROBE, fabric=probe.fabric, device=src_dev, port=src_port,
            ts=probe.ts, action="ticket", episode=eid, evidence={**evidence,
                                                                 "localised": False}))
    # Localise: which link do the recent slow probes share?
    if paths is not None:
        links = paths(probe)
    else:
        dst_dev, dst_port = endpoint(probe.dst, probe.rail)
        links = [f"{src_dev}:{src_port}", f"{dst_dev}:{dst_port}"]
    horizon = probe.ts - round(section.localise_window * 1000)
    recent = [s for s in st["slow"] if s[0] > horizon and s[1] != probe.id]
    recent.append([probe.ts, probe.id, okey, links])
    st["slow"] = recent
    st["named"] = {k: v for k, v in st["named"].items() if v[1] > horizon}
    for link in links:
        sharing = [s for s in recent if link in s[3]]
        distinct = {s[2] for s in sharing}
        if len(distinct) < section.min_failing_probes_to_localise:
            continue
        if link in st["named"]:
            st["named"][link][1] = probe.ts  # still implicated: the same episode goes on
            continue
        device, _, port_s = link.rpartition(":")
        eid = episode_id(DetectionKind.SLOW_PROBE, device, int(port_s), probe.ts, "localised")
        st["named"][link] = [eid, probe.ts]
        detections.append(make_detection(
            kind=DetectionKind.SLOW_PROBE, fabric=probe.fabric, device=device,
            port=int(port_s), ts=probe.ts,
            # Only a real path (the topology's routes) is evidence enough to isolate; a
            # shared endpoint is a lead for a technician.
            action=section.action if paths is not None else "ticket", episode=eid,
            evidence={"localised": True, "link": link, "probes": sorted(s[1] for s in sharing),
                      "by": "paths" if paths is not None else "endpoints",
                      "slow_fraction": section.slow_fraction}))
    return st, detections
