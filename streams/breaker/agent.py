"""Breaker agents: runbook action records re-keyed by SU, and the SU's isolation accounting."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from schemas import ActionRecord, ContractError, Detection, decode, encode
from schemas import topics as registry
from streams.common import state_key

if TYPE_CHECKING:
    from streams.app import StreamsApp


def register(sa: StreamsApp) -> None:
    table = sa.breaker_table
    su_of = sa.engine.context.su_of

    @sa.app.agent(sa.actions, name="breaker-actions")
    async def actions(stream: Any) -> None:
        async for event in stream.events():
            raw = event.value if isinstance(event.value, bytes) else b""
            try:
                msg = await sa.decode(event, registry.ACTIONS)
                if isinstance(msg, ActionRecord):
                    await sa.forward(msg.fabric, raw)  # the correlator: self-inflicted downs
                if isinstance(msg, ActionRecord) and (su := su_of(msg.device)) is not None:
                    await sa.breaker.send(key=su.encode(), value=encode(msg))
            except Exception as exc:  # never die on a message
                await sa.failed(raw, exc, event.message)

    @sa.app.agent(sa.breaker, name="breaker")
    async def breaker(stream: Any) -> None:
        async for event in stream.events():
            raw = event.value if isinstance(event.value, bytes) else b""
            try:
                try:
                    msg = decode(raw)
                except ContractError as exc:
                    await sa.dead_letter(raw, exc, event.message)
                    continue
                if not isinstance(msg, Detection | ActionRecord):
                    continue
                su = (event.key or b"").decode() or su_of(msg.device)
                if not su:
                    continue
                key = state_key(msg.fabric, su).encode()
                stored = table.get(key)
                value, detections, _, _ = sa.engine.apply_breaker(
                    orjson.loads(stored) if stored else None, su, msg)
                table[key] = orjson.dumps(value)
                await sa.publish(detections)
            except Exception as exc:  # never die on a message
                await sa.failed(raw, exc, event.message)
