"""Probes agent: probe results keyed by rail through the probe detector.

Before its first probe the agent reads the newest topology snapshots back
(``StreamsApp.seed_routes``): the routes live in memory, and this worker may not hold the
topology's partition or may have committed past its last snapshot before a restart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from schemas import Probe
from schemas import topics as registry
from streams.common import state_key

if TYPE_CHECKING:
    from streams.app import StreamsApp


def register(sa: StreamsApp) -> None:
    table = sa.probes_table

    seeded = False

    @sa.app.agent(sa.probes, name="probes")
    async def probes(stream: Any) -> None:
        nonlocal seeded
        async for event in stream.events():
            raw = event.value if isinstance(event.value, bytes) else b""
            if not seeded:  # the routes of the newest topology, before the first probe
                seeded = True
                await sa.seed_routes()
            try:
                msg = await sa.decode(event, registry.PROBES)
                if not isinstance(msg, Probe):
                    continue
                key = state_key(msg.fabric, str(msg.rail)).encode()
                stored = table.get(key)
                value, detections, _, _ = sa.engine.apply_probe(
                    orjson.loads(stored) if stored else None, msg)
                table[key] = orjson.dumps(value)
                sa.stats["events"] += 1
                await sa.publish(detections)
            except Exception as exc:  # never die on a message
                await sa.failed(raw, exc, event.message)
