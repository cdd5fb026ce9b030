"""Loopback PagerDuty Events API v2 and Slack incoming-webhook servers that check what their
products document, and refuse the rest (they cannot run here; the notifier must speak their
JSON).

PagerDuty ``POST /v2/enqueue``: ``routing_key`` (a 32-character integration key),
``event_action`` in trigger|acknowledge|resolve, ``dedup_key`` (<= 255 characters; required
for acknowledge and resolve), and for a trigger ``payload`` with ``summary`` (1..1024),
``source`` (non-empty), ``severity`` in critical|error|warning|info, optional ``timestamp``
(ISO 8601), ``component`` / ``group`` / ``class`` strings and ``custom_details`` object.
Accepted: 202 ``{"status": "success", "message": "Event processed", "dedup_key": ...}``;
refused: 400 ``{"status": "invalid event", "message": "Event object is invalid",
"errors": [...]}``. The server keeps the incidents it would hold (triggered, acknowledged,
resolved) by dedup key.

Slack: ``POST`` to the webhook path with a JSON object that has a non-empty ``text`` (or
``blocks``); blocks are a list of at most 50 objects with a known ``type``, section texts
``{"type": "mrkdwn"|"plain_text", "text": <= 3000}``. Accepted: 200 ``ok``; refused: 400
``invalid_payload`` (``no_text`` for no text), 404 ``no_service`` for a wrong path.
"""

from __future__ import annotations

import datetime as dt
import secrets
from typing import Any

from aiohttp import web

PD_ACTIONS = {"trigger", "acknowledge", "resolve"}
PD_SEVERITIES = {"critical", "error", "warning", "info"}
SLACK_BLOCKS = {"section", "context", "divider", "header", "actions", "image", "rich_text"}


def pagerduty_errors(event: Any) -> list[str]:
    """The reasons PagerDuty's Events API v2 refuses ``event`` (empty: valid)."""
    if not isinstance(event, dict):
        return ["Event object must be a JSON object"]
    errs: list[str] = []
    key = event.get("routing_key")
    if not isinstance(key, str) or len(key) != 32:
        errs.append("'routing_key' is invalid: must be a 32 character integration key")
    action = event.get("event_action")
    if action not in PD_ACTIONS:
        errs.append("'event_action' is invalid (must be one of trigger, acknowledge, resolve)")
    dedup = event.get("dedup_key")
    if dedup is not None and (not isinstance(dedup, str) or not 0 < len(dedup) <= 255):
        errs.append("'dedup_key' must be a string of at most 255 characters")
    if action in ("acknowledge", "resolve") and dedup is None:
        errs.append(f"'dedup_key' is required for event_action {action}")
    if action == "trigger":
        payload = event.get("payload")
        if not isinstance(payload, dict):
            errs.append("'payload' is missing or not an object")
        else:
            summary = payload.get("summary")
            if not isinstance(summary, str) or not 0 < len(summary) <= 1024:
                errs.append("'payload.summary' is missing or longer than 1024 characters")
            if not isinstance(payload.get("source"), str) or not payload.get("source"):
                errs.append("'payload.source' is missing")
            if payload.get("severity") not in PD_SEVERITIES:
                errs.append("'payload.severity' is invalid (critical, error, warning, info)")
            ts = payload.get("timestamp")
            if ts is not None:
                try:
                    dt.datetime.fromisoformat(str(ts).replace("Z", "+00:00"))
                except ValueError:
                    errs.append("'payload.timestamp' is not ISO 8601")
            for name in ("component", "group", "class"):
                if name in payload and not isinstance(payload[name], str):
                    errs.append(f"'payload.{name}' must be a string")
            if "custom_details" in payload and not isinstance(payload["custom_details"], dict):
                errs.append("'payload.custom_details' must be an object")
    return errs


class _Server:
    def __init__(self) -> None:
        self._runner: web.AppRunner | None = None
        self.base = ""
        self.refused: list[tuple[Any, list[str]]] = []
        self.fail_next = 0  # answer this many requests with 503 (a receiver that is down)

    def _app(self) -> web.Application:
        raise NotImplementedError

    async def start(self) -> str:
        self._runner = web.AppRunner(self._app())
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base = f"http://127.0.0.1:{port}"
        return self.base

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


class PagerDutyServer(_Server):
    """``POST /v2/enqueue`` as PagerDuty documents it; incidents by dedup key."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[dict[str, Any]] = []
        self.incidents: dict[str, str] = {}  # dedup_key -> triggered|acknowledged|resolved

    @property
    def url(self) -> str:
        return f"{self.base}/v2/enqueue"

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v2/enqueue", self._enqueue)
        return app

    async def _enqueue(self, request: web.Request) -> web.Response:
        if self.fail_next > 0:
            self.fail_next -= 1
            return web.json_response({"status": "unavailable"}, status=503)
        if request.content_type != "application/json":
            return web.json_response({"status": "invalid event", "message":
                                      "Content-Type must be application/json"}, status=400)
        try:
            event = await request.json()
        except ValueError:
            return web.json_response({"status": "invalid event", "message": "Malformed JSON"},
                                     status=400)
        errs = pagerduty_errors(event)
        if errs:
            self.refused.append((event, errs))
            return web.json_response({"status": "invalid event",
                                      "message": "Event object is invalid", "errors": errs},
                                     status=400)
        self.events.append(event)
        dedup = event.get("dedup_key") or secrets.token_hex(16)
        action = event["event_action"]
        state = {"trigger": "triggered", "acknowledge": "acknowledged",
                 "resolve": "resolved"}[action]
        current = self.incidents.get(dedup)
        if action == "trigger" and current == "acknowledged":
            state = "acknowledged"  # a repeated trigger updates, does not re-page
        if action != "trigger" and current is None:
            state = "ignored"  # no open alert with that key: PagerDuty drops it
        else:
            self.incidents[dedup] = state
        return web.json_response({"status": "success", "message": "Event processed",
                                  "dedup_key": dedup}, status=202)


class SlackServer(_Server):
    """An incoming webhook at ``/services/T.../B.../secret``."""

    def __init__(self) -> None:
        super().__init__()
        self.path = f"/services/T{secrets.token_hex(4).upper()}/B{secrets.token_hex(4).upper()}/" \
                    f"{secrets.token_hex(12)}"
        self.messages: list[dict[str, Any]] = []

    @property
    def url(self) -> str:
        return f"{self.base}{self.path}"

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/services/{t}/{b}/{secret}", self._post)
        return app

    async def _post(self, request: web.Request) -> web.Response:
        if request.path != self.path:
            return web.Response(text="no_service", status=404)
        if self.fail_next > 0:
            self.fail_next -= 1
            return web.Response(text="service_unavailable", status=503)
        try:
            msg = await request.json()
        except ValueError:
            return web.Response(text="invalid_payload", status=400)
        reason = slack_error(msg)
        if reason:
            self.refused.append((msg, [reason]))
            return web.Response(text=reason, status=400)
        self.messages.append(msg)
        return web.Response(text="ok")


def slack_error(msg: Any) -> str | None:
    if not isinstance(msg, dict):
        return "invalid_payload"
    text = msg.get("text")
    blocks = msg.get("blocks")
    if text is not None and not isinstance(text, str):
        return "invalid_payload"
    if not text and not blocks:
        return "no_text"
    if blocks is not None:
        if not isinstance(blocks, list) or len(blocks) > 50:
            return "invalid_blocks"
        for block in blocks:
            if not isinstance(block, dict) or block.get("type") not in SLACK_BLOCKS:
                return "invalid_blocks"
            if block["type"] == "section":
                t = block.get("text")
                if (not isinstance(t, dict) or t.get("type") not in ("mrkdwn", "plain_text")
                        or not isinstance(t.get("text"), str) or not t["text"]
                        or len(t["text"]) > 3000):
                    return "invalid_blocks"
    return None
