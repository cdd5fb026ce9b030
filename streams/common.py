"""What every detector shares: building a contract ``Detection`` deterministically.

Detection ids and episode ids are pure functions of the port, the detector and the event
time that opened the episode, so the worker and ``fabricwatch replay`` produce the same
ids for the same history, and a redelivered message reproduces an identical detection
that consumers drop by id (at-least-once delivery, exactly-once effect).
"""

from __future__ import annotations

from typing import Any, TypeVar

from schemas import Action, Detection, DetectionKind, Severity
from schemas.events import Envelope

E = TypeVar("E", bound=Envelope)

# The ``source`` of every detection fabricwatch produces.
SOURCE = "fabricwatch"

_ACTIONS: dict[str, Action] = {
    "isolatePort": Action.ISOLATE_PORT,
    "ticket": Action.TICKET,
    "page": Action.PAGE,
    "none": Action.NONE,
}
# What an operator sees first: isolating a port is a critical event, a ticket a warning.
_SEVERITY: dict[Action, Severity] = {
    Action.ISOLATE_PORT: Severity.CRITICAL,
    Action.PAGE: Severity.CRITICAL,
    Action.TICKET: Severity.WARNING,
    Action.NONE: Severity.INFO,
}


def at_arrival(event: E, received_ms: int | None) -> E:
    """The event as the detectors see it: its ``ts`` no later than the broker received it.

    Acceptance lets an event be stamped up to ``maxClockSkew`` (5 min) ahead of its receive
    time, and each detector's notion of "newest" (the flap watermark, the counters' last
    sample per port, the stale clock) only moves forward: one message stamped ahead would
    make every real event after it look late or stale until real time caught up. Capped at
    its arrival, a message stamped ahead weighs no more than one stamped when it arrived,
    so it cannot move "newest" past the broker's clock. The broker's time is
    ``LogAppendTime``, the same on every re-read, so a re-read decides the same.
    ``fabricwatch replay`` reads JSON lines without a receive time (``received_ms`` None):
    there the ``ts`` is taken as written, as the worker takes every event stamped at or
    before its arrival, so a replay of what the worker accepted decides the same unless a
    line was stamped ahead of its arrival.
    """
    if received_ms is None or event.ts <= received_ms:
        return event
    return event.model_copy(update={"ts": received_ms})


def state_key(fabric: str, key: str) -> str:
    """A detector's state key: device names, rails and SU names repeat across fabrics, and
    one fabric's downs, counters or budget must never count for another's."""
    return f"{fabric}/{key}"


def policy_action(name: str) -> Action:
    """The contract action for a policy's ``action`` value (``isolatePort`` -> isolate_port)."""
    return _ACTIONS[name]


def episode_id(kind: DetectionKind | str, device: str, port: int, start_ts: int,
               detail: str = "") -> str:
    """``{kind}/{device}:{port}[/{detail}]/{start_ts}``: stable for one episode."""
    kind_s = kind.value if isinstance(kind, DetectionKind) else kind
    middle = f"/{detail}" if detail else ""
    return f"{kind_s}/{device}:{port}{middle}/{start_ts}"


def make_detection(*, kind: DetectionKind, fabric: str, device: str, port: int, ts: int,
                   action: str, episode: str, evidence: dict[str, Any],
                   severity: Severity | None = None, seen_by: str | None = None) -> Detection:
    """One detection; its ``id`` is its episode (one detection per episode), and the source
    that saw it when two sources can see the same episode (``seen_by``): both detections
    then share the episode, so consumers group them, and keep their ids, so the ledger keeps
    both sources' evidence."""
    act = policy_action(action)
    return Detection(
        id=f"det:{episode}" + (f"/{seen_by}" if seen_by else ""),
        ts=ts,
        fabric=fabric,
        source=SOURCE,
        device=device,
        port=port,
        detection=kind,
        severity=severity if severity is not None else _SEVERITY[act],
        action=act,
        evidence=evidence,
        episode=episode,
    )
