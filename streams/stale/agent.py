"""Stale agent: every counters message advances its partition's clock; silent devices are stale.

A second subscriber of ``fabric.counters`` (the counters agent dead-letters and counts bad
messages; this one skips them). The scope is the fabric's devices on one partition, keyed
``{fabric}/p{partition}`` in the ``stale`` table (co-partitioned with the topic, so the
changelog partition is the message's). The state is kept in memory and written to the table
when a detection fired or every ``PERSIST_EVERY_MS`` of event time: a restored older state
only has older last-seen times, which the next messages refresh; an episode's opening or end
is written at once.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import orjson

from schemas import ContractError, Counters, decode
from schemas import topics as registry
from streams.common import state_key

if TYPE_CHECKING:
    from streams.app import StreamsApp

PERSIST_EVERY_MS = 5_000


def register(sa: StreamsApp) -> None:
    from streams.app import partitions_of

    table = sa.app.Table("stale", default=None,
                         partitions=partitions_of(sa.settings, registry.COUNTERS),
                         key_type=bytes, value_type=bytes)
    cache: dict[bytes, dict[str, Any]] = {}

    def on_revoked(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        cache.clear()

    sa.app.on_partitions_revoked.connect(on_revoked)

    @sa.app.agent(sa.counters, name="stale")
    async def stale(stream: Any) -> None:
        async for event in stream.events():
            raw = event.value if isinstance(event.value, bytes) else b""
            try:
                try:
                    msg = decode(raw)
                except ContractError:
                    continue  # the counters agent dead-letters it
                if not isinstance(msg, Counters):
                    continue
                key = state_key(msg.fabric, f"p{event.message.partition}").encode()
                value: dict[str, Any] | None = cache.get(key)
                if value is None:
                    stored = table.get(key)
                    value = orjson.loads(stored) if stored else None
                detections = []
                changed = False
                for part in msg.split():  # a host agent's message: one stream per HCA
                    value, dets, _, redelivered = sa.engine.apply_stale(value, part)
                    detections += dets
                    changed = changed or (bool(dets) and not redelivered)
                if value is None:
                    continue  # a message with no ports and no part
                cache[key] = value
                if changed or msg.ts - value.get("p", 0) >= PERSIST_EVERY_MS:
                    value["p"] = msg.ts
                    table[key] = orjson.dumps(value)
                await sa.publish(detections)
            except Exception as exc:  # never die on a message
                await sa.failed(raw, exc, event.message)
            await asyncio.sleep(0)
