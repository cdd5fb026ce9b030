"""The incident consumer pages for a cause, not for planned work."""

from __future__ import annotations

import time
from typing import Any

import pytest

from schemas.events import Incident
from workflows.incident.dispatch import IncidentDispatcher


class NoTemporal:
    def __getattr__(self, name: str) -> Any:
        pytest.fail(f"Temporal was called ({name}) for an incident that pages nobody")


async def test_an_incident_inside_maintenance_starts_no_incident_runbook() -> None:
    now = int(time.time() * 1000)
    planned = Incident(id="m1", ts=now, fabric="f", source="fabricwatch",
                       incident="inc/maintenance/spine-01/1", cause="maintenance",  # type: ignore[arg-type]
                       root="spine-01", state="open", started=now,
                       members=["spine-01:1", "spine-01:2"])
    dispatcher = IncidentDispatcher(NoTemporal(), task_queue="q")  # type: ignore[arg-type]
    assert not await dispatcher.handle(planned)
    assert dispatcher.stats.planned == 1 and dispatcher.stats.delivered == 0
