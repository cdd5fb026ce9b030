"""Ticketing through a webhook (one JSON POST per ticket operation); pages through the
notifier (``NotifierTicketing``, below).

Body: ``{"op": "open"|"update"|"close"|"page", "key": <workflow id>, "summary": str,
"details": {...}}``; the answer may carry ``{"ticket_id": "..."}``. Each request carries an
``Idempotency-Key`` header (``<key>:<op>[:<n>]``, the IETF httpapi draft's header) so a
receiver that deduplicates turns a retried activity's second POST into a no-op; ``open`` is
keyed by the workflow id alone, so however often it is retried there is one ticket. A bearer
token, if configured, is sent but never logged.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import orjson
from pydantic import SecretStr

from workflows.adapters.base import AdapterError, Ticketing
from workflows.adapters.http import RestClient
from workflows.adapters.notify import Alert, AlertAction, Notifier, dedup_key


class WebhookTicketing:
    def __init__(self, url: str, token: SecretStr | None = None, *,
                 timeout_s: float = 30.0) -> None:
        headers = {"Content-Type": "application/json"}
        if token is not None:
            headers["Authorization"] = f"Bearer {token.get_secret_value()}"
        self._rest = RestClient(url, headers=headers, timeout_s=timeout_s)

    async def aclose(self) -> None:
        await self._rest.close()

    async def _post(self, op: str, key: str, summary: str, details: dict[str, Any]) -> str:
        body = {"op": op, "key": key, "summary": summary, "details": details}
        if op == "open":
            idem = f"{key}:open"
        else:
            # same content, same key: a retry deduplicates, a new reminder does not
            digest = hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()
            idem = f"{key}:{op}:{digest[:16]}"
        data = await self._rest.request("POST", "", json_body=body,
                                        headers={"Idempotency-Key": idem})
        if isinstance(data, dict) and data.get("ticket_id"):
            return str(data["ticket_id"])
        if op == "open":
            raise AdapterError("ticket webhook answered without a ticket_id")
        return key

    async def open(self, key: str, summary: str, details: dict[str, Any]) -> str:
        return await self._post("open", key, summary, details)

    async def update(self, key: str, summary: str, details: dict[str, Any]) -> str:
        return await self._post("update", key, summary, details)

    async def close(self, key: str, summary: str, details: dict[str, Any]) -> str:
        return await self._post("close", key, summary, details)

    async def page(self, key: str, summary: str, details: dict[str, Any]) -> str:
        return await self._post("page", key, summary, details)


class NotifierTicketing:
    """Tickets and pages: a page is an alert through the notifier (Alertmanager, PagerDuty,
    Slack or the alerts file), keyed by the runbook's workflow id, so a reminder updates the
    one alert; a ticket goes to the ticket webhook when one is configured, else the ticket
    is the runbook's own records in the ledger (id = workflow id).

    ``resolve`` (a runbook that paged has ended) resolves the alert. A notifier that cannot
    deliver raises: the activity retries, the page is never taken as sent.
    """

    def __init__(self, notifier: Notifier, tickets: Ticketing | None = None) -> None:
        self.notifier = notifier
        self.tickets = tickets

    async def aclose(self) -> None:
        for part in (self.notifier, self.tickets):
            close = getattr(part, "aclose", None)
            if close is not None:
                await close()

    async def open(self, key: str, summary: str, details: dict[str, Any]) -> str:
        return await self.tickets.open(key, summary, details) if self.tickets else key

    async def update(self, key: str, summary: str, details: dict[str, Any]) -> str:
        return await self.tickets.update(key, summary, details) if self.tickets else key

    async def close(self, key: str, summary: str, details: dict[str, Any]) -> str:
        return await self.tickets.close(key, summary, details) if self.tickets else key

    async def resolve(self, key: str, summary: str, details: dict[str, Any]) -> str:
        """The runbook that paged has ended: its alert is resolved."""
        await self.notifier.send(runbook_alert(key, summary, details, "resolve"))
        return key

    async def page(self, key: str, summary: str, details: dict[str, Any]) -> str:
        await self.notifier.send(runbook_alert(key, summary, details, "trigger"))
        return key


def runbook_alert(key: str, summary: str, details: dict[str, Any],
                  action: AlertAction) -> Alert:
    """The alert of a runbook that needs a human (labels: the workflow id and the port)."""
    given = details.get("port")
    port: dict[str, Any] = given if isinstance(given, dict) else {}
    now = int(time.time() * 1000)
    parts = key.split("/")
    # a page of no runbook (the dispatcher's unknown_device: key by digest, the port as its
    # shown "device:port") says its fabric in the details
    fabric = str(port.get("fabric") or details.get("fabric")
                 or (parts[1] if len(parts) > 2 else "unknown"))
    labels = {"workflow_id": key}
    if port.get("device") is not None:
        labels["port"] = f"{port['device']}:{port.get('port')}"
    elif isinstance(given, str) and given:
        labels["port"] = given
    if port.get("su"):
        labels["su"] = str(port["su"])
    shown = {k: v for k, v in details.items() if k != "port"}
    return Alert(key=dedup_key(key), kind="runbook", action=action, fabric=fabric, summary=summary,
                 labels=labels, details=shown, started_ms=now, ts_ms=now,
                 ended_ms=now if action == "resolve" else None)
