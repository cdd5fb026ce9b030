"""A ticket system that only remembers what it was asked: the unit tests' view of the pages
and tickets a component sends (the real paths are the webhook and the notifiers)."""

from __future__ import annotations

from typing import Any


class RecordingTicketing:
    """Every call as ``(op, key, summary)``; tickets and pages succeed with the key as id."""

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

    async def resolve(self, key: str, summary: str, details: dict[str, Any]) -> str:
        return await self._op("resolve", key, summary)
