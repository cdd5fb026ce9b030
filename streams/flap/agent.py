"""Flap agent: port events, counter-revealed downs and the correlator's excuses, keyed by
port, through the flap detector; each port event is forwarded to the correlator."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from schemas import ContractError, PortEvent
from schemas import topics as registry
from streams.common import state_key
from streams.flap.logic import CounterDowns, Excuse, FlapState, from_wire

if TYPE_CHECKING:
    from streams.app import StreamsApp


def register(sa: StreamsApp) -> None:
    table = sa.flap_table
    channel = sa.app.topic(registry.PORT_EVENTS.name, sa.counter_downs.get_topic_name(),
                           key_type=bytes, value_type=bytes, key_serializer="raw",
                           value_serializer="raw")

    @sa.app.agent(channel, name="flap")
    async def flap(stream: Any) -> None:
        async for event in stream.events():
            raw = event.value if isinstance(event.value, bytes) else b""
            try:
                item: PortEvent | CounterDowns | Excuse
                if event.message.topic == registry.PORT_EVENTS.name:
                    decoded = await sa.decode(event, registry.PORT_EVENTS)
                    if not isinstance(decoded, PortEvent):
                        continue
                    item = decoded
                    await sa.forward(item.fabric, raw)  # the correlator sees every change
                else:
                    try:
                        item = from_wire(orjson.loads(raw))
                    except (ValueError, KeyError, TypeError) as exc:
                        await sa.dead_letter(raw, ContractError(f"bad counter_downs: {exc}"),
                                             event.message)
                        continue
                key = state_key(item.fabric, f"{item.device}:{item.port}").encode()
                stored = table.get(key)
                state = FlapState.from_json(orjson.loads(stored)) if stored else None
                new, detections = sa.engine.apply_flap(state, item)
                table[key] = orjson.dumps(new.to_json())
                sa.stats["events"] += 1
                await sa.publish(detections)
            except Exception as exc:  # never die on a message
                await sa.failed(raw, exc, event.message)
