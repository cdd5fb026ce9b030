"""Breaker accounting: how many ports of each SU automation has isolated or is about to.

The runbook's ``IsolationBudget`` workflow enforces the budget; this keeps the same count
from the streams so that ``breaker_open`` is a detection operators see and the ledger keeps.

* A port counts as *isolated* from an ``ActionRecord`` with ``step == "isolate"`` and outcome
  ``done`` (or ``dry_run`` in shadow mode, or ``skipped``: found isolated already, which the
  runbook's budget counts too) until one with ``step == "return"`` (or ``unisolate``) and
  outcome ``done``/``dry_run``.
* A detection whose action is ``isolate_port`` for a port not yet counted is a *request*;
  the correlator's ``<id>/explained`` of it withdraws it (``withdraws``).
  The SU's budget is ``max(1, floor(maxIsolatedPortsPerSU * ports in the SU))``. A request
  that would take the SU past it fires ``breaker_open`` for that port, once per breaker
  episode of the port; the SU's breaker episode ends when its isolated count falls below
  the budget again (an isolation returned, or a pending request expired). Requests within
  the budget are counted as pending for ``pending_ttl_ms`` (default 1 h) so a burst of
  detections cannot slip past together.
* Order: the budget is first come, first served across the SU's ports, so which port's
  request gets ``breaker_open`` depends on the order requests arrive in. Live, that is the
  order the agents' outputs interleave; in ``replay``, file order. The number of refusals
  per SU is the same; the port named may differ.
* The SU of a device comes from ``su_of`` (the topology's map), else from an ``suNN``
  token in the device name (``leaf-su01-r3``); devices with no SU are not accounted.
* Ports in an SU (``ports_per_su``): the cable plan's, when the worker has one; else the
  cabled ports of the fabric as its topology snapshots have shown them (the correlator's
  merged index, so a switch down at a snapshot keeps its ports); else
  ``DEFAULT_PORTS_PER_SU``.
  Each fabric's SUs are accounted apart (``state_key``): ``su01`` of two fabrics are two SUs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable
from typing import Any

from schemas import Action, ActionRecord, Detection, DetectionKind
from schemas.policy import Policy
from streams.common import episode_id, make_detection
from streams.incidents.logic import explains

_SU = re.compile(r"(?:^|[-_./])(su\d+)(?:$|[-_./])", re.IGNORECASE)
DEFAULT_PORTS_PER_SU = 256
PENDING_TTL_MS = 3_600_000


def su_from_name(device: str) -> str | None:
    m = _SU.search(device)
    return m.group(1).lower() if m else None


def ports_per_su(ends: Iterable[tuple[str, int]],
                 su_of: Callable[[str], str | None] = su_from_name) -> dict[str, int]:
    """How many distinct ports (device, port) of ``ends`` each SU has; ends with no SU
    are left out (the breaker does not account them either)."""
    seen: set[tuple[str, int]] = set()
    out: dict[str, int] = {}
    for device, port in ends:
        if (device, port) in seen:
            continue
        seen.add((device, port))
        su = su_of(device)
        if su is not None:
            out[su] = out.get(su, 0) + 1
    return out


def new_state() -> dict[str, Any]:
    return {"isolated": {}, "pending": {}, "open": {}, "episode": None}


def budget(policy: Policy, ports_in_su: int) -> int:
    frac = policy.fabric_health.breaker.max_isolated_ports_per_su
    return max(1, math.floor(frac * ports_in_su))


def step(state: dict[str, Any] | None, event: Detection | ActionRecord, policy: Policy, *,
         su: str, ports_in_su: int = DEFAULT_PORTS_PER_SU,
         pending_ttl_ms: int = PENDING_TTL_MS) -> tuple[dict[str, Any], list[Detection]]:
    """Apply one detection or action record of a port in SU ``su``."""
    st = state if state is not None else new_state()
    key = f"{event.device}:{event.port}"
    limit = budget(policy, ports_in_su)
    st["pending"] = {k: t for k, t in st["pending"].items() if t > event.ts - pending_ttl_ms}
    # an expired request can bring the SU under its budget: that ends the breaker episode
    # (a port refused in it asks afresh), whatever the event
    _maybe_close(st, limit)
    if isinstance(event, ActionRecord):
        if event.outcome in ("done", "dry_run") or (event.step, event.outcome) == ("isolate",
                                                                                   "skipped"):
            # "isolate skipped": found isolated already, and the runbook counts it
            if event.step == "isolate":
                st["isolated"][key] = event.ts
                st["pending"].pop(key, None)
            elif event.step in ("return", "unisolate"):
                st["isolated"].pop(key, None)
                st["pending"].pop(key, None)
        elif event.step == "budget" and event.outcome == "refused":
            st["pending"].pop(key, None)
        _maybe_close(st, limit)
        return st, []
    if withdraws(event):
        # the request it names was an incident's: its runbook stands down (an isolation it
        # made comes back as an unisolate record)
        st["pending"].pop(key, None)
        _maybe_close(st, limit)
        return st, []
    if event.action != Action.ISOLATE_PORT or event.detection == DetectionKind.BREAKER_OPEN:
        return st, []
    if key in st["isolated"] or key in st["pending"]:
        return st, []
    used = len(st["isolated"]) + len(st["pending"])
    if used + 1 <= limit:
        st["pending"][key] = event.ts
        return st, []
    if st["episode"] is None:
        st["episode"] = event.ts
    if key in st["open"]:
        return st, []
    eid = episode_id(DetectionKind.BREAKER_OPEN, event.device, event.port, st["episode"], su)
    st["open"][key] = eid
    return st, [make_detection(
        kind=DetectionKind.BREAKER_OPEN, fabric=event.fabric, device=event.device,
        port=event.port, ts=event.ts, action="page", episode=eid,
        evidence={"su": su, "isolated": sorted(st["isolated"]), "pending": sorted(st["pending"]),
                  "budget": limit, "ports_in_su": ports_in_su,
                  "requested_by": event.episode, "requested_kind": event.detection.value})]


def withdraws(det: Detection) -> bool:
    """The correlator's ``<id>/explained``: the request of the detection it names is
    withdrawn (that detection was an incident's, read before the incident opened)."""
    return explains(det) is not None


def accounted(det: Detection) -> bool:
    """What the breaker reads: an isolation request that belongs to no incident or
    maintenance window, or the withdrawal of one."""
    return (det.action == Action.ISOLATE_PORT and det.incident is None
            and det.maintenance is None) or withdraws(det)


def _maybe_close(st: dict[str, Any], limit: int) -> None:
    if st["episode"] is not None and len(st["isolated"]) + len(st["pending"]) < limit:
        st["episode"] = None
        st["open"] = {}


BreakerKey = Callable[[str], str | None]
