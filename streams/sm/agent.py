"""SM agent: ``fabric.sm`` keyed by fabric through ``streams.sm.logic`` (table ``sm``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from schemas import SmEvent
from schemas import topics as registry

if TYPE_CHECKING:
    from streams.app import StreamsApp


def register(sa: StreamsApp) -> None:
    table = sa.sm_table

    @sa.app.agent(sa.sm, name="sm")
    async def sm(stream: Any) -> None:
        async for event in stream.events():
            raw = event.value if isinstance(event.value, bytes) else b""
            try:
                msg = await sa.decode(event, registry.SM)
                if not isinstance(msg, SmEvent):
                    continue
                key = msg.fabric.encode()
                stored = table.get(key)
                value, detections, _, _ = sa.engine.apply_sm(
                    orjson.loads(stored) if stored else None, msg)
                table[key] = orjson.dumps(value)
                sa.stats["events"] += 1
                sa.fabrics_seen.add(msg.fabric)
                await sa.publish(detections)  # through the correlator: sm_event incidents
            except Exception as exc:  # never die on a message
                await sa.failed(raw, exc, event.message)
