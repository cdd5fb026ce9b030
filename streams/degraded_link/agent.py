"""Topology agent for degraded links: every link end of a snapshot against plan and policy.

(The plan-versus-discovered diff of ``streams.topology`` is its own area; this agent only
judges how each discovered link trained.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from schemas import Topology
from schemas import topics as registry

if TYPE_CHECKING:
    from streams.app import StreamsApp


def register(sa: StreamsApp) -> None:
    table = sa.topology_table

    @sa.app.agent(sa.topology, name="degraded-topology")
    async def degraded_topology(stream: Any) -> None:
        async for event in stream.events():
            raw = event.value if isinstance(event.value, bytes) else b""
            try:
                msg = await sa.decode(event, registry.TOPOLOGY)
                if not isinstance(msg, Topology):
                    continue
                key = msg.fabric.encode()
                stored = table.get(key)
                value, detections, _, _ = sa.engine.apply_topology(
                    orjson.loads(stored) if stored else None, msg)
                table[key] = orjson.dumps(value)
                sa.stats["events"] += 1
                await sa.publish(detections)
            except Exception as exc:  # never die on a message
                await sa.failed(raw, exc, event.message)
