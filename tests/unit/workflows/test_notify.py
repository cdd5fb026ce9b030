"""The notifier: the receivers' payloads as their products document them (pure builders,
property-tested), the alerts file, and PagerDuty / Slack against loopback servers that
validate the documented schema and refuse the rest."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from fakes.alert_receivers import PagerDutyServer, SlackServer, pagerduty_errors, slack_error
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import SecretStr

from runtime.settings import Settings
from workflows.adapters.base import AdapterError, AdapterRejected
from workflows.adapters.notify import (
    Alert,
    FanoutNotifier,
    FileNotifier,
    PagerDutyNotifier,
    SlackNotifier,
    alertmanager_alerts,
    pagerduty_event,
    read_alerts_file,
    slack_message,
)
from workflows.adapters.ticket import NotifierTicketing
from workflows.wiring import WiringError, WiringOptions, build_notifier

KEY = "0123456789abcdef0123456789abcdef"  # a 32-character routing key

T0 = 1_780_000_000_000


def alert(action: str = "trigger", **kw: Any) -> Alert:
    base: dict[str, Any] = dict(
        key="incident/lab/inc-1", kind="incident", action=action, fabric="lab",
        summary="switch_reboot at spine-01: 50 port(s), one incident",
        labels={"incident": "inc-1", "cause": "switch_reboot", "root": "spine-01"},
        details={"members": [f"spine-01:{i}" for i in range(1, 51)], "member_count": 50},
        started_ms=T0, ts_ms=T0 + 1000)
    base.update(kw)
    return Alert(**base)


texts = st.text(min_size=1, max_size=3000)
actions = st.sampled_from(["trigger", "update", "acknowledge", "resolve"])


@settings(max_examples=200, deadline=None)
@given(summary=texts, action=actions,
       details=st.dictionaries(st.text(min_size=1, max_size=20),
                               st.one_of(st.text(max_size=5000), st.integers(),
                                         st.lists(st.text(max_size=50), max_size=300)),
                               max_size=8),
       key=st.text(min_size=1, max_size=255))
def test_every_alert_makes_payloads_the_products_accept(summary: str, action: str,
                                                        details: dict[str, Any],
                                                        key: str) -> None:
    a = alert(action, summary=summary, details=details, key=key)
    assert pagerduty_errors(pagerduty_event(a, KEY)) == []
    assert slack_error(slack_message(a)) is None
    (am,) = alertmanager_alerts(a)
    assert am["labels"]["alertname"] == "FabricwatchIncident"
    assert am["labels"]["fabricwatch_key"] == key
    assert all(isinstance(v, str) for v in am["annotations"].values())
    assert am["endsAt"] >= am["startsAt"]


def test_alertmanager_firing_and_resolved_times() -> None:
    (firing,) = alertmanager_alerts(alert("trigger", horizon_s=3600))
    assert firing["startsAt"] == "2026-05-28T20:26:40.000Z"
    assert firing["endsAt"] == "2026-05-28T21:26:41.000Z"  # ts + horizon: re-posted before
    (resolved,) = alertmanager_alerts(alert("resolve", ended_ms=T0 + 60_000))
    assert resolved["endsAt"] == "2026-05-28T20:27:40.000Z"
    assert firing["labels"] == resolved["labels"]  # the same alert, ended
    assert "spine-01:50" in firing["annotations"]["members"]


def test_pagerduty_event_actions_and_dedup_key() -> None:
    trig = pagerduty_event(alert("trigger"), KEY)
    assert trig["event_action"] == "trigger" and trig["dedup_key"] == "incident/lab/inc-1"
    assert trig["payload"]["severity"] == "critical"
    assert trig["payload"]["custom_details"]["member_count"] == 50
    assert pagerduty_event(alert("update"), KEY)["event_action"] == "trigger"
    ack = pagerduty_event(alert("acknowledge"), KEY)
    assert ack == {"routing_key": KEY, "event_action": "acknowledge",
                   "dedup_key": "incident/lab/inc-1"}
    assert pagerduty_event(alert("resolve"), KEY)["event_action"] == "resolve"


def test_long_keys_become_one_255_character_dedup_key() -> None:
    from workflows.adapters.notify import dedup_key

    long = "remediate/lab/" + "x" * 400
    assert dedup_key("short") == "short"
    assert len(dedup_key(long)) == 255 and dedup_key(long) == dedup_key(long)
    assert dedup_key(long) != dedup_key(long + "y")


def test_the_validating_servers_refuse_wrong_payloads() -> None:
    assert pagerduty_errors({"routing_key": KEY, "event_action": "fire"})
    assert pagerduty_errors({"routing_key": "short", "event_action": "resolve",
                             "dedup_key": "k"})
    assert pagerduty_errors({"routing_key": KEY, "event_action": "resolve"})  # no dedup_key
    assert pagerduty_errors({"routing_key": KEY, "event_action": "trigger",
                             "payload": {"summary": "x", "source": "s", "severity": "high"}})
    assert pagerduty_errors({"routing_key": KEY, "event_action": "trigger",
                             "payload": {"summary": "x" * 1025, "source": "s",
                                         "severity": "info"}})
    assert slack_error({}) == "no_text"
    assert slack_error({"text": "x", "blocks": [{"type": "section",
                                                 "text": {"type": "md", "text": "x"}}]})
    assert slack_error({"text": 3}) == "invalid_payload"


async def test_file_notifier_appends_every_alert(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "alerts.jsonl"
    n = FileNotifier(path)
    await asyncio.gather(*[n.send(alert("update", ts_ms=T0 + i)) for i in range(20)])
    got = await n.send(alert("resolve"))
    rows = read_alerts_file(path)
    assert len(rows) == 21 and rows[-1]["action"] == "resolve"
    assert got[0].receiver == "file" and str(path) in got[0].ref
    assert {r["key"] for r in rows} == {"incident/lab/inc-1"}


async def test_file_notifier_fails_closed(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    with pytest.raises(AdapterError, match="cannot append"):
        await FileNotifier(blocker / "alerts.jsonl").send(alert())


async def test_pagerduty_trigger_update_ack_resolve_one_dedup_key() -> None:
    server = PagerDutyServer()
    await server.start()
    n = PagerDutyNotifier(SecretStr(KEY), url=server.url)
    try:
        for action in ("trigger", "update", "acknowledge", "update", "resolve"):
            (d,) = await n.send(alert(action))
            assert d.receiver == "pagerduty" and d.ref == "incident/lab/inc-1"
        assert [e["event_action"] for e in server.events] == [
            "trigger", "trigger", "acknowledge", "trigger", "resolve"]
        assert server.incidents == {"incident/lab/inc-1": "resolved"}
        assert server.refused == []
    finally:
        await n.aclose()
        await server.stop()


async def test_pagerduty_refusal_and_outage_fail_closed_without_the_key() -> None:
    server = PagerDutyServer()
    await server.start()
    bad = PagerDutyNotifier(SecretStr("too-short-" + KEY[:5]), url=server.url)
    good = PagerDutyNotifier(SecretStr(KEY), url=server.url)
    try:
        with pytest.raises(AdapterRejected) as refused:
            await bad.send(alert())
        assert "routing_key" in str(refused.value) and KEY[:5] not in str(refused.value)
        server.fail_next = 1
        with pytest.raises(AdapterError) as down:  # retryable: the activity tries again
            await good.send(alert())
        assert not isinstance(down.value, AdapterRejected) and KEY not in str(down.value)
        assert server.events == []  # nothing was taken as sent
        await good.send(alert())
        assert len(server.events) == 1
    finally:
        await bad.aclose()
        await good.aclose()
        await server.stop()


async def test_slack_webhook_posts_and_refusals() -> None:
    server = SlackServer()
    await server.start()
    n = SlackNotifier(SecretStr(server.url))
    wrong = SlackNotifier(SecretStr(server.base + "/services/T0/B0/wrong"))
    try:
        await n.send(alert("trigger"))
        await n.send(alert("resolve"))
        assert len(server.messages) == 2
        assert "FIRING" in server.messages[0]["text"] and "RESOLVED" in server.messages[1]["text"]
        assert "spine-01:50" in server.messages[0]["blocks"][1]["text"]["text"]
        with pytest.raises(AdapterRejected) as exc:
            await wrong.send(alert())
        assert "wrong" not in str(exc.value)  # the webhook URL is the secret
        server.fail_next = 1
        with pytest.raises(AdapterError):
            await n.send(alert())
        assert len(server.messages) == 2
    finally:
        await n.aclose()
        await wrong.aclose()
        await server.stop()


async def test_pages_go_through_the_notifier(tmp_path: Path) -> None:
    """``NotifierTicketing``: a runbook's page is an alert in the file, its resolve ends it;
    tickets without a ticket system are the runbook's own records."""
    path = tmp_path / "alerts.jsonl"
    t = NotifierTicketing(FileNotifier(path))
    wid = "remediate/lab/leaf-su01-r1:3~node0001/mlx5_0:1"
    details = {"port": {"fabric": "lab", "device": "leaf-su01-r1", "port": 3, "su": "su01"}}
    assert await t.open(wid, "opened", details) == wid
    await t.page(wid, "clean-and-reseat could not complete", {**details, "approve": "retry"})
    await t.resolve(wid, "returned to service", details)
    rows = read_alerts_file(path)
    assert [r["action"] for r in rows] == ["trigger", "resolve"]
    assert rows[0]["kind"] == "runbook" and rows[0]["labels"] == {
        "workflow_id": wid, "port": "leaf-su01-r1:3", "su": "su01"}
    assert rows[0]["fabric"] == "lab"


def test_wiring_chooses_the_receivers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = Settings(state_dir=tmp_path)
    only = build_notifier(s)
    assert isinstance(only, FileNotifier) and only.path == tmp_path / "alerts.jsonl"
    key_file = tmp_path / "pd-key"
    key_file.write_text(KEY + "\n")
    s2 = Settings.model_validate({
        "state_dir": tmp_path, "notify": {"alertmanager_url": "http://127.0.0.1:9093",
                                          "pagerduty": True},
        "secrets": {"pagerduty_routing_key_file": key_file}})
    fan = build_notifier(s2)
    assert isinstance(fan, FanoutNotifier)
    assert [n.name for n in fan.notifiers] == ["alertmanager", "pagerduty"]
    with pytest.raises(WiringError, match="no routing key"):
        build_notifier(s, WiringOptions(pagerduty=True))
    with pytest.raises(WiringError, match="Slack is on"):
        build_notifier(s, WiringOptions(slack=True))
    with pytest.raises(WiringError, match="http"):
        build_notifier(s, WiringOptions(alertmanager_url="am:9093"))


async def test_an_unknown_device_page_names_its_fabric_and_port(tmp_path: Path) -> None:
    # The dispatcher's page for a port no topology has (keyed by a digest, the port as its
    # shown "device:port"): before, its alert said fabric "unknown" and named no port, so
    # routing by fabric missed it.
    path = tmp_path / "alerts.jsonl"
    t = NotifierTicketing(FileNotifier(path))
    await t.page("unknown_device/0123456789abcdef0123", "unknown device leaf-su01-r1:7", {
        "fabric": "lab-roce", "port": "leaf-su01-r1:7", "reason": "no topology",
        "detection": "unknown_device"})
    (row,) = read_alerts_file(path)
    assert row["fabric"] == "lab-roce"
    assert row["labels"]["port"] == "leaf-su01-r1:7"
