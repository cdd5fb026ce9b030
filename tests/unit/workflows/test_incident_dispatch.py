"""The incident consumer's acceptance, without a server: what the contract refuses, another
fabric's incidents and the runbooks' own breaker records start nothing (and reach no
Temporal client)."""

from __future__ import annotations

import time
from typing import Any

import orjson

from schemas.events import Incident, IncidentCause
from workflows.incident.dispatch import RUNBOOKS_SOURCE, IncidentDispatcher
from workflows.incident.models import IncidentSnapshot, alert_key


class NoClient:
    """Any call is a test failure: these messages must not reach Temporal."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the client was used: {name}")


def event(**kw: Any) -> Incident:
    now = int(time.time() * 1000)
    base: dict[str, Any] = dict(id="i-1", ts=now, fabric="lab", source="correlator",
                                incident="reboot-1", cause=IncidentCause.SWITCH_REBOOT,
                                root="spine-01", state="open", started=now - 1000,
                                members=["spine-01:1"])
    base.update(kw)
    return Incident(**base)


async def test_refused_foreign_and_own_messages_start_nothing() -> None:
    d = IncidentDispatcher(NoClient(), task_queue="q", fabric="lab")  # type: ignore[arg-type]
    assert not await d.handle_raw(b"{not json")
    assert not await d.handle_raw(orjson.dumps({"kind": "detection", "id": "x"}))
    wire = event().to_wire()
    wire["state"] = "reopened"
    assert not await d.handle_raw(orjson.dumps(wire))
    assert d.stats.invalid == 3
    assert not await d.handle(event(fabric="other"))
    assert not await d.handle(event(incident="breaker/su01", cause=IncidentCause.BREAKER,
                                    root="su01", source=RUNBOOKS_SOURCE))
    assert d.stats.ignored == 2 and d.stats.delivered == 0


def test_snapshot_and_alert_key() -> None:
    ev = event(members=["spine-01:2", "spine-01:1"], su="su01")
    snap = IncidentSnapshot.from_event(ev)
    assert snap.cause == "switch_reboot" and snap.members == ["spine-01:2", "spine-01:1"]
    assert snap.ts == ev.ts and snap.su == "su01"
    assert alert_key("lab", "reboot-1") == "incident/lab/reboot-1"
    long = alert_key("lab", "x" * 400)
    assert len(long) <= 255 and long.startswith("incident/lab/sha256:")
