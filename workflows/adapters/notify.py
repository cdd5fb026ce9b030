"""Alerts that reach people: one ``Notifier`` interface, one adapter per receiver.

An ``Alert`` is one thing a human must look at: an incident (one per incident id, however
many ports it took) or a runbook that needs a human (one per runbook workflow id). Its
``key`` is the receiver's deduplication key, so an update (a new member list, a reminder)
changes the one alert instead of paging again, and ``resolve`` ends it.

Receivers, each with the JSON its product documents (the builders below are pure; only
``send`` does I/O):

- Prometheus Alertmanager, ``POST /api/v2/alerts``: a list of postable alerts (``labels``
  with ``alertname``, ``annotations``, ``startsAt``, ``endsAt``, ``generatorURL``). Labels
  identify the alert (``alertname``, ``fabric``, ``incident`` or ``workflow_id``); a firing
  alert carries an ``endsAt`` ``horizon_s`` ahead (the sender re-posts before it runs out),
  a resolved one ``endsAt`` = when it cleared.
- PagerDuty Events API v2, ``POST /v2/enqueue``: ``routing_key``, ``event_action``
  (``trigger`` | ``acknowledge`` | ``resolve``), ``dedup_key`` (the alert's key, at most 255
  characters), and for a trigger a ``payload`` (``summary`` <= 1024 characters, ``source``,
  ``severity`` in critical|error|warning|info, ``timestamp``, ``custom_details``). The
  routing key comes from the settings' secrets (env or file) and is never logged.
- Slack incoming webhook: ``POST`` of ``{"text": ..., "blocks": [...]}`` to the webhook URL,
  which is itself the secret (env or file) and is never logged; Slack answers ``ok``.
- A file: every alert appended as one JSON line (the default when no receiver is
  configured: alerts always land somewhere a person and the report can read).

Fail closed: a receiver that cannot take the alert raises ``AdapterError`` (retry) or
``AdapterRejected`` (a payload it refuses for good); a ``Delivery`` exists only for an alert
the receiver accepted.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import orjson
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from workflows.adapters.base import AdapterError, AdapterRejected, Ticketing

AlertAction = Literal["trigger", "update", "acknowledge", "resolve"]
AlertKind = Literal["incident", "runbook"]
Severity = Literal["critical", "error", "warning", "info"]

ALERTNAMES: dict[str, str] = {"incident": "FabricwatchIncident",
                              "runbook": "FabricwatchRunbookNeedsHuman"}
PAGERDUTY_URL = "https://events.pagerduty.com/v2/enqueue"
PD_SUMMARY_MAX = 1024
PD_DEDUP_MAX = 255
ANNOTATION_MAX = 4000  # keeps a member list from making one annotation unreadable


def dedup_key(key: str) -> str:
    """``key`` as a receiver's deduplication key: at most 255 characters (PagerDuty's limit),
    a longer one replaced by its prefix and a hash, so it stays one key per alert."""
    if len(key) <= PD_DEDUP_MAX:
        return key
    import hashlib

    digest = hashlib.sha256(key.encode()).hexdigest()
    return f"{key[:PD_DEDUP_MAX - 74]}...sha256:{digest}"  # 3 + 7 + 64 characters


class Alert(BaseModel):
    """One alert: who it is (``key``, ``kind``, ``fabric``, ``labels``) and what it says."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str = Field(min_length=1, max_length=PD_DEDUP_MAX)
    kind: AlertKind
    action: AlertAction
    fabric: str = Field(min_length=1)
    summary: str = Field(min_length=1)
    severity: Severity = "critical"
    labels: dict[str, str] = Field(default_factory=dict)  # identifying, beside key/kind/fabric
    details: dict[str, Any] = Field(default_factory=dict)
    started_ms: int = Field(ge=0)
    ts_ms: int = Field(ge=0)  # when this message was made (the workflow's time)
    ended_ms: int | None = None
    horizon_s: float = Field(default=24 * 3600.0, gt=0)  # Alertmanager endsAt of a firing alert
    source: str = "fabricwatch"


class Delivery(BaseModel):
    """An alert a receiver accepted: which receiver, and its reference (dedup key, file line)."""

    model_config = ConfigDict(frozen=True)

    receiver: str
    ref: str


class Notifier(Protocol):
    """Delivers an alert or raises; never reports an alert it could not deliver as sent."""

    name: str

    async def send(self, alert: Alert) -> list[Delivery]: ...


# --- pure payload builders -------------------------------------------------------------------

def _rfc3339(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds"
                                                                   ).replace("+00:00", "Z")


def _label_value(value: str) -> str:
    return value[:1024]


def alert_labels(alert: Alert) -> dict[str, str]:
    """The labels that identify the alert in Alertmanager (what dedups it)."""
    labels = {"alertname": ALERTNAMES[alert.kind], "fabric": alert.fabric,
              "severity": alert.severity, "source": alert.source}
    labels.update({k: _label_value(v) for k, v in alert.labels.items()})
    labels["fabricwatch_key"] = alert.key
    return labels


def _text(value: Any) -> str:
    if isinstance(value, str):
        text = value
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        text = ", ".join(value)
    else:
        try:
            text = orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
        except TypeError:  # beyond JSON's (an integer past 64 bits, a foreign object)
            text = str(value)
    return text if len(text) <= ANNOTATION_MAX else text[:ANNOTATION_MAX - 14] + " ... (cut)"


def alertmanager_alerts(alert: Alert, *, generator_url: str = "") -> list[dict[str, Any]]:
    """Alertmanager v2 postable alerts (``POST /api/v2/alerts`` takes a list)."""
    if alert.action == "resolve":
        ends = alert.ended_ms if alert.ended_ms is not None else alert.ts_ms
    else:
        ends = alert.ts_ms + int(alert.horizon_s * 1000)
    annotations = {"summary": alert.summary}
    if alert.action == "acknowledge":
        annotations["acknowledged"] = "true"
    for name, value in alert.details.items():
        annotations[name] = _text(value)
    body: dict[str, Any] = {"labels": alert_labels(alert), "annotations": annotations,
                            "startsAt": _rfc3339(alert.started_ms),
                            "endsAt": _rfc3339(max(ends, alert.started_ms))}
    if generator_url:
        body["generatorURL"] = generator_url
    return [body]


def pagerduty_event(alert: Alert, routing_key: str) -> dict[str, Any]:
    """A PagerDuty Events API v2 event; an update is a trigger with the same ``dedup_key``."""
    action = "trigger" if alert.action in ("trigger", "update") else alert.action
    event: dict[str, Any] = {"routing_key": routing_key, "event_action": action,
                             "dedup_key": alert.key}
    if action == "trigger":
        event["payload"] = {
            "summary": alert.summary[:PD_SUMMARY_MAX], "source": alert.source,
            "severity": alert.severity, "timestamp": _rfc3339(alert.ts_ms),
            "component": alert.labels.get("root", alert.fabric), "group": alert.fabric,
            "class": ALERTNAMES[alert.kind],
            "custom_details": {**alert.details, "labels": alert_labels(alert)}}
        event["client"] = "fabricwatch"
    return event


_SLACK_VERB = {"trigger": ":rotating_light: *FIRING*", "update": ":arrows_counterclockwise: "
               "*UPDATE*", "acknowledge": ":eyes: *ACKNOWLEDGED*",
               "resolve": ":white_check_mark: *RESOLVED*"}
SLACK_TEXT_MAX = 3000  # a section block's text limit


def slack_message(alert: Alert) -> dict[str, Any]:
    """A Slack incoming-webhook message: ``text`` (the notification's fallback) and blocks."""
    head = f"{_SLACK_VERB[alert.action]} [{alert.fabric}] {alert.summary}"
    lines = [f"*{name}*: {_text(value)}" for name, value in alert.details.items()]
    body = "\n".join(lines)[:SLACK_TEXT_MAX] or "(no details)"
    return {"text": head[:SLACK_TEXT_MAX],
            "blocks": [{"type": "section", "text": {"type": "mrkdwn",
                                                    "text": head[:SLACK_TEXT_MAX]}},
                       {"type": "section", "text": {"type": "mrkdwn", "text": body}},
                       {"type": "context", "elements": [{"type": "mrkdwn", "text":
                                                          f"key `{alert.key}`"}]}]}


def file_line(alert: Alert) -> bytes:
    """One JSON line of the alerts file."""
    return orjson.dumps({"receiver": "file", **alert.model_dump(mode="json")},
                        option=orjson.OPT_SORT_KEYS) + b"\n"


# --- receivers -------------------------------------------------------------------------------

class FileNotifier:
    """Appends every alert to a JSON-lines file (created with its folder)."""

    name = "file"

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = asyncio.Lock()

    def _append(self, line: bytes) -> int:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # O_APPEND: concurrent writers (worker, demo) each add whole lines
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
        try:
            os.write(fd, line)
            os.fsync(fd)
            return os.fstat(fd).st_size
        finally:
            os.close(fd)

    async def send(self, alert: Alert) -> list[Delivery]:
        async with self._lock:
            try:
                size = await asyncio.to_thread(self._append, file_line(alert))
            except OSError as exc:
                raise AdapterError(f"cannot append to the alerts file {self.path}: "
                                   f"{exc.strerror}") from None
        return [Delivery(receiver=self.name, ref=f"{self.path}@{size}")]


def read_alerts_file(path: Path) -> list[dict[str, Any]]:
    """Every alert the file notifier wrote (for the report, the demo and the tests)."""
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


class AlertmanagerNotifier:
    """Posts to a Prometheus Alertmanager's v2 API (``url``: its base, e.g. http://am:9093)."""

    name = "alertmanager"

    def __init__(self, url: str, *, generator_url: str = "", timeout_s: float = 15.0) -> None:
        from workflows.adapters.http import RestClient

        self.url = url.rstrip("/")
        self.generator_url = generator_url
        self._rest = RestClient(self.url, headers={"Content-Type": "application/json"},
                                timeout_s=timeout_s)

    async def aclose(self) -> None:
        await self._rest.close()

    async def send(self, alert: Alert) -> list[Delivery]:
        await self._rest.request("POST", "/api/v2/alerts", json_body=alertmanager_alerts(
            alert, generator_url=self.generator_url))
        return [Delivery(receiver=self.name, ref=alert.key)]

    async def alerts(self, **filters: str) -> Any:
        """``GET /api/v2/alerts`` (the alerts Alertmanager holds now)."""
        query = "&".join(f"{k}={v}" for k, v in filters.items())
        return await self._rest.request("GET", "/api/v2/alerts" + (f"?{query}" if query else ""))


class PagerDutyNotifier:
    """PagerDuty Events API v2; the routing key is a secret and appears in no message."""

    name = "pagerduty"

    def __init__(self, routing_key: SecretStr, *, url: str = PAGERDUTY_URL,
                 timeout_s: float = 15.0) -> None:
        from workflows.adapters.http import RestClient

        self._key = routing_key
        self._rest = RestClient(url, headers={"Content-Type": "application/json"},
                                timeout_s=timeout_s)

    async def aclose(self) -> None:
        await self._rest.close()

    async def send(self, alert: Alert) -> list[Delivery]:
        event = pagerduty_event(alert, self._key.get_secret_value())
        try:
            answer = await self._rest.request("POST", "", json_body=event)
        except AdapterError as exc:
            # the product's error text may echo the event: never the routing key
            raise type(exc)(str(exc).replace(self._key.get_secret_value(), "****")) from None
        if not isinstance(answer, dict) or answer.get("status") != "success":
            raise AdapterError(f"PagerDuty did not accept the event: {str(answer)[:200]}"
                               .replace(self._key.get_secret_value(), "****"))
        return [Delivery(receiver=self.name, ref=str(answer.get("dedup_key") or alert.key))]


class SlackNotifier:
    """A Slack incoming webhook; the URL is the secret (it is in no message or log line)."""

    name = "slack"

    def __init__(self, webhook_url: SecretStr, *, timeout_s: float = 15.0) -> None:
        from workflows.adapters.http import RestClient

        self._rest = RestClient(webhook_url.get_secret_value(),
                                headers={"Content-Type": "application/json"},
                                timeout_s=timeout_s)

    async def aclose(self) -> None:
        await self._rest.close()

    async def send(self, alert: Alert) -> list[Delivery]:
        # RestClient's messages name the path relative to the base URL: "" here, no secret
        answer = await self._rest.request("POST", "", json_body=slack_message(alert))
        if answer != "ok":
            raise AdapterError(f"the Slack webhook answered {str(answer)[:100]!r}, not 'ok'")
        return [Delivery(receiver=self.name, ref=alert.key)]


class FanoutNotifier:
    """Every configured receiver gets the alert; any failure fails the send (fail closed:
    an activity retry re-sends, which each receiver deduplicates by the alert's key)."""

    def __init__(self, notifiers: Sequence[Notifier]) -> None:
        if not notifiers:
            raise ValueError("a fan-out needs at least one receiver")
        self.notifiers = list(notifiers)
        self.name = "+".join(n.name for n in self.notifiers)

    async def aclose(self) -> None:
        for n in self.notifiers:
            close = getattr(n, "aclose", None)
            if close is not None:
                await close()

    async def send(self, alert: Alert) -> list[Delivery]:
        out: list[Delivery] = []
        for n in self.notifiers:
            out.extend(await n.send(alert))
        return out


class TicketingNotifier:
    """A worker given only a ticket system (``Ticketing``, e.g. the webhook): an alert is a
    page of the ticket keyed by the alert's key, and a resolve closes it."""

    name = "ticketing"

    def __init__(self, ticketing: Ticketing) -> None:
        self.ticketing = ticketing

    async def send(self, alert: Alert) -> list[Delivery]:
        details = {**alert.details, "labels": alert_labels(alert), "action": alert.action}
        if alert.action == "resolve":
            ref = await self.ticketing.close(alert.key, alert.summary, details)
        else:
            ref = await self.ticketing.page(alert.key, alert.summary, details)
        return [Delivery(receiver=self.name, ref=ref)]


def describe(notifier: Notifier) -> str:
    """Where alerts go, for start-up lines and the demo summary (no secrets)."""
    if isinstance(notifier, FanoutNotifier):
        return ", ".join(describe(n) for n in notifier.notifiers)
    if isinstance(notifier, FileNotifier):
        return f"file {notifier.path}"
    if isinstance(notifier, AlertmanagerNotifier):
        return f"alertmanager {notifier.url}"
    return notifier.name


__all__ = ["AdapterError", "AdapterRejected", "Alert", "AlertmanagerNotifier", "Delivery",
           "FanoutNotifier", "FileNotifier", "Notifier", "PagerDutyNotifier", "SlackNotifier",
           "TicketingNotifier",
           "alertmanager_alerts", "describe", "file_line", "pagerduty_event",
           "read_alerts_file", "slack_message"]
