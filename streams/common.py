"""What every detector shares: building a contract ``Detection`` deterministically, and
writing a keyed state to its table.

Detection ids and episode ids are pure functions of the port, the detector and the event
time that opened the episode, so the worker and ``fabricwatch replay`` produce the same
ids for the same history, and a redelivered message reproduces an identical detection
that consumers drop by id (at-least-once delivery, exactly-once effect).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from schemas import Action, Detection, DetectionKind, Severity

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


def state_key(fabric: str, key: str) -> str:
    """A detector's state key: device names, rails and SU names repeat across fabrics, and
    one fabric's downs, counters or budget must never count for another's."""
    return f"{fabric}/{key}"


def write_state(table: Any, key: bytes, encode: Callable[[], bytes]) -> None:
    """A keyed state to its table. A Faust table takes the bytes now (each write goes to
    its changelog); the batched counters consumer's store (``ChangelogStore.keep``) takes
    the encoder and calls it when its flush sends the state, as of then."""
    keep = getattr(table, "keep", None)
    if keep is not None:
        keep(key, encode)
    else:
        table[key] = encode()


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
