"""The Alertmanager notifier against a real Prometheus Alertmanager v0.35.0, built from its Go
module (``fabricwatch.alertmanager``; cached in .gocache) and started on a loopback port:
alerts are posted and read back from its API (``GET /api/v2/alerts``), updated in place,
resolved, and a payload it refuses fails the send."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from fabricwatch.alertmanager import AlertmanagerUnavailable, LocalAlertmanager, build
from fabricwatch.stack_config import free_ports
from workflows.adapters.base import AdapterRejected
from workflows.adapters.notify import Alert, AlertmanagerNotifier

pytestmark = pytest.mark.integration


def unavailable(reason: str) -> None:
    """Missing Alertmanager: a failure in CI (this check must run), a skip elsewhere."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason} (CI=true: this check must run)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def alertmanager(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalAlertmanager]:
    try:
        binary = build()
    except AlertmanagerUnavailable as exc:
        unavailable(f"cannot build Alertmanager: {exc}")
        raise AssertionError("unreachable") from None
    (port,) = free_ports(1)
    am = LocalAlertmanager(binary, port, tmp_path_factory.mktemp("alertmanager"))
    try:
        am.start()
    except AlertmanagerUnavailable as exc:
        unavailable(str(exc))
    try:
        yield am
    finally:
        am.stop()


@pytest.fixture
async def notifier(alertmanager: LocalAlertmanager) -> AsyncIterator[AlertmanagerNotifier]:
    n = AlertmanagerNotifier(alertmanager.url, generator_url="http://fabricwatch.example/")
    try:
        yield n
    finally:
        await n.aclose()


def incident_alert(action: str, key: str, members: int, **kw: Any) -> Alert:
    now = int(time.time() * 1000)
    base: dict[str, Any] = dict(
        key=key, kind="incident", action=action, fabric="lab",
        summary=f"switch_reboot at spine-07: {members} port(s), one incident",
        labels={"incident": key.rsplit("/", 1)[-1], "cause": "switch_reboot",
                "root": "spine-07"},
        details={"member_count": members,
                 "members": [f"spine-07:{i}" for i in range(1, members + 1)]},
        started_ms=now - 5000, ts_ms=now, horizon_s=3600)
    base.update(kw)
    return Alert(**base)


async def held(n: AlertmanagerNotifier, key: str) -> list[dict[str, Any]]:
    alerts = await n.alerts()
    return [a for a in alerts if a["labels"].get("fabricwatch_key") == key]


async def test_alerts_reach_alertmanager_update_in_place_and_resolve(
        notifier: AlertmanagerNotifier, tmp_path: Path) -> None:
    key = f"incident/lab/inc-{time.monotonic_ns()}"
    (d,) = await notifier.send(incident_alert("trigger", key, 50))
    assert d.receiver == "alertmanager"
    (got,) = await held(notifier, key)
    assert got["labels"]["alertname"] == "FabricwatchIncident"
    assert got["labels"]["root"] == "spine-07" and got["labels"]["fabric"] == "lab"
    assert got["annotations"]["member_count"] == "50"
    assert "spine-07:50" in got["annotations"]["members"]
    assert got["status"]["state"] == "active"
    assert got["generatorURL"] == "http://fabricwatch.example/"

    # a member joins: the same alert (same labels, same fingerprint), new annotations
    await notifier.send(incident_alert("update", key, 51))
    (again,) = await held(notifier, key)
    assert again["fingerprint"] == got["fingerprint"]
    assert again["annotations"]["member_count"] == "51"
    await notifier.send(incident_alert("acknowledge", key, 51))
    (acked,) = await held(notifier, key)
    assert acked["annotations"]["acknowledged"] == "true"

    # resolved: endsAt now; Alertmanager no longer lists it as an alert
    await notifier.send(incident_alert("resolve", key, 51,
                                       ended_ms=int(time.time() * 1000)))
    deadline = time.monotonic() + 10
    while await held(notifier, key) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.2)
    assert await held(notifier, key) == []


async def test_two_incidents_are_two_alerts(notifier: AlertmanagerNotifier) -> None:
    keys = [f"incident/lab/a-{time.monotonic_ns()}", f"incident/lab/b-{time.monotonic_ns()}"]
    for k in keys:
        for _ in range(3):  # re-posts deduplicate
            await notifier.send(incident_alert("update", k, 5))
    assert [len(await held(notifier, k)) for k in keys] == [1, 1]


async def test_a_refused_payload_fails_the_send(notifier: AlertmanagerNotifier) -> None:
    bad = incident_alert("trigger", "incident/lab/bad", 1,
                         labels={"": "x"})  # an empty label name
    with pytest.raises(AdapterRejected, match="HTTP 400"):
        await notifier.send(bad)
    assert await held(notifier, "incident/lab/bad") == []
