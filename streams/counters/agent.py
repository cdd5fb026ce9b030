"""Counters agent: one device's batch per message, one state per device, deltas and detections.

The per-message work is one decode, one table read and write of the device's compact state,
and the detector's few comparisons per healthy sample. ``link_downed`` increases go on, keyed
by port, to the internal counter-downs topic for the flap agent. A host agent's message (one
per host, its samples naming their HCAs) is split into one part per HCA first
(``Counters.split``), each with its own state.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

import orjson

from schemas import Counters
from schemas import topics as registry
from streams.common import state_key

if TYPE_CHECKING:
    from streams.app import StreamsApp

log = logging.getLogger(__name__)


# A device's state is written to its table when anything but sample times changed, and
# otherwise at least every PERSIST_EVERY_MS of event time. Counters are cumulative: a state
# restored with older times only makes the next delta span a longer interval, nothing is
# lost. A message with outputs (detections, counter downs) has its state written at once,
# so that a redelivery repeats exactly those outputs; any other change waits, per
# partition, and the newest state of each waiting device goes to the table (its changelog)
# at most once per FLUSH_EVERY_S of wall time: a device with several messages in that time
# (a worker catching up, a host agent at 1 s) is written once. What waits is lost with the
# worker only as older states are: the next sample's deltas cover it.
PERSIST_EVERY_MS = 30_000
FLUSH_EVERY_S = 1.0  # the worker's offset commit interval (broker_commit_interval)


def register(sa: StreamsApp) -> None:
    table = sa.counters_table
    # This worker's current states, ahead of the table by at most PERSIST_EVERY_MS of
    # sample times. Cleared on every rebalance: the table (changelog) is the truth then.
    cache: dict[bytes, dict[str, Any]] = {}
    # States changed without outputs, by partition, not yet in the table; when each
    # partition's were last written (monotonic seconds).
    waiting: dict[int, dict[bytes, dict[str, Any]]] = {}
    flushed: dict[int, float] = {}

    def on_revoked(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        cache.clear()
        waiting.clear()  # a table write needs the partition's own event: older states win
        flushed.clear()

    sa.app.on_partitions_revoked.connect(on_revoked)

    def write(key: bytes, value: dict[str, Any]) -> None:
        t0 = time.perf_counter()
        table[key] = orjson.dumps(value)
        sa.stats["persist_ms"] += (time.perf_counter() - t0) * 1000
        sa.stats["persisted"] += 1

    def flush(partition: int) -> None:
        """Write a partition's waiting states (from one of its own events: Faust takes the
        changelog partition from the event being processed)."""
        flushed[partition] = time.monotonic()
        for key, value in waiting.pop(partition, {}).items():
            write(key, value)

    async def process(msg: Counters, partition: int) -> None:
        key = state_key(msg.fabric, msg.device).encode()
        value = cache.get(key)
        if value is None:
            stored = table.get(key)
            value = orjson.loads(stored) if stored else None
        value, detections, downs, redelivered = sa.engine.apply_counters(value, msg)
        cache[key] = value
        state = value["s"]
        changed = state.pop("dirty", True)
        if not redelivered:
            if detections or downs:
                value["p"] = msg.ts
                waiting.get(partition, {}).pop(key, None)
                write(key, value)
            elif changed or msg.ts - value.get("p", 0) >= PERSIST_EVERY_MS:
                value["p"] = msg.ts
                waiting.setdefault(partition, {})[key] = value
        sa.stats["events"] += 1
        sa.stats["samples"] += len(msg.ports)
        for d in downs:
            await sa.counter_downs.send(key=f"{d.device}:{d.port}".encode(),
                                        value=orjson.dumps(d.to_wire()))
        await sa.publish(detections)

    @sa.app.agent(sa.counters, name="counters")
    async def counters(stream: Any) -> None:
        async for event in stream.events():
            raw = event.value if isinstance(event.value, bytes) else b""
            t_start = time.perf_counter()
            try:
                msg = await sa.decode(event, registry.COUNTERS)
                if not isinstance(msg, Counters):
                    continue
                partition = int(event.message.partition)
                for part in msg.split():  # a host agent's message: one part per HCA
                    await process(part, partition)
                if (waiting.get(partition)
                        and time.monotonic() - flushed.get(partition, 0.0) >= FLUSH_EVERY_S):
                    flush(partition)
                for observe in sa.counters_observers:  # the stale detector
                    try:
                        await observe(msg, partition)
                    except Exception:  # its failure is not this message's
                        log.exception("counters observer %s failed on %s", observe, msg.id)
                sa.stats["counters_ms"] += (time.perf_counter() - t_start) * 1000
            except Exception as exc:  # never die on a message
                await sa.failed(raw, exc, event.message)
            # A fetched batch of counters is already buffered, so iterating it never
            # suspends: yield once per message so a trap waiting in the flap agent is not
            # stuck behind a whole batch (trap-to-detection latency).
            await asyncio.sleep(0)
