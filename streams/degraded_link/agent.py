"""Topology agent for degraded links: a snapshot's link ends, per device, to the counters agent.

The verdicts are the counters detector's (``CountersDetector.observe_links``), in the
device's own state, so a link that counters and a snapshot both show degraded fires once
per episode. This agent only splits the snapshot by device and re-keys it (the internal
``link-states`` topic has the partitions of ``fabric.counters``). (The plan-versus-discovered
diff of ``streams.topology`` is its own area.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from schemas import Topology
from schemas import topics as registry

if TYPE_CHECKING:
    from streams.app import StreamsApp


def register(sa: StreamsApp) -> None:
    @sa.app.agent(sa.topology, name="degraded-topology")
    async def degraded_topology(stream: Any) -> None:
        async for event in stream.events():
            raw = event.value if isinstance(event.value, bytes) else b""
            try:
                msg = await sa.decode(event, registry.TOPOLOGY)
                if not isinstance(msg, Topology):
                    continue
                for links in sa.engine.topology_links(msg):
                    await sa.link_states.send(key=links.device.encode(),
                                              value=orjson.dumps(links.to_wire()))
                sa.stats["events"] += 1
            except Exception as exc:  # never die on a message
                await sa.failed(raw, exc, event.message)
