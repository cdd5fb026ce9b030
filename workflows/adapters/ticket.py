"""Ticketing through a webhook: one JSON POST per ticket operation.

Body: ``{"op": "open"|"update"|"close"|"page", "key": <workflow id>, "summary": str,
"details": {...}}``; the answer may carry ``{"ticket_id": "..."}``. Each request carries an
``Idempotency-Key`` header (``<key>:<op>[:<n>]``, the IETF httpapi draft's header) so a
receiver that deduplicates turns a retried activity's second POST into a no-op; ``open`` is
keyed by the workflow id alone, so however often it is retried there is one ticket. A bearer
token, if configured, is sent but never logged.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson
from pydantic import SecretStr

from workflows.adapters.base import AdapterError
from workflows.adapters.http import RestClient


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


class LogTicketing:
    """No ticket system configured: tickets are the runbook's own records (id = workflow id)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []

    async def _op(self, op: str, key: str, summary: str) -> str:
        self.calls.append((op, key, summary))
        return key

    async def open(self, key: str, summary: str, details: dict[str, Any]) -> str:
        return await self._op("open", key, summary)

    async def update(self, key: str, summary: str, details: dict[str, Any]) -> str:
        return await self._op("update", key, summary)

    async def close(self, key: str, summary: str, details: dict[str, Any]) -> str:
        return await self._op("close", key, summary)

    async def page(self, key: str, summary: str, details: dict[str, Any]) -> str:
        return await self._op("page", key, summary)
