"""Counters agent: one device's batch per message, one state per device, deltas and detections.

The per-message work is one decode, one table read and write of the device's compact state,
and the detector's few comparisons per healthy sample. ``link_downed`` increases go on, keyed
by port, to the internal counter-downs topic for the flap agent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from schemas import Counters
from schemas import topics as registry

if TYPE_CHECKING:
    from streams.app import StreamsApp


def register(sa: StreamsApp) -> None:
    table = sa.counters_table

    @sa.app.agent(sa.counters, name="counters")
    async def counters(stream: Any) -> None:
        async for event in stream.events():
            raw = event.value if isinstance(event.value, bytes) else b""
            try:
                msg = await sa.decode(event, registry.COUNTERS)
                if not isinstance(msg, Counters):
                    continue
                key = msg.device.encode()
                stored = table.get(key)
                value, detections, downs, _ = sa.engine.apply_counters(
                    orjson.loads(stored) if stored else None, msg)
                table[key] = orjson.dumps(value)
                sa.stats["events"] += 1
                sa.stats["samples"] += len(msg.ports)
                for d in downs:
                    await sa.counter_downs.send(key=f"{d.device}:{d.port}".encode(),
                                                value=orjson.dumps(d.to_wire()))
                await sa.publish(detections)
            except Exception as exc:  # never die on a message
                await sa.failed(raw, exc, event.message)
