"""Counters agent: one device's batch per message, one state per (device, source).

The per-message work is one decode, one table read and write of the device's compact state,
and the detector's few comparisons per healthy sample. ``link_downed`` increases go on, keyed
by port, to the internal counter-downs topic for the flap agent. A host agent's message (one
per host, its samples naming their HCAs) is split into one part per HCA first
(``Counters.split``), each with its own state. Two sources of one device (perfquery and
mlxlink, say) keep apart states (``counters_key``): each source's deltas are its own.

``CountersPath`` is that work over any table-like store; this module's agent feeds it from
Faust's stream, ``streams.counters.batched`` from its own batched consumer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

import orjson

from schemas import CounterColumns, Counters, CountersMessage
from schemas import topics as registry
from streams.counters.columns import View
from streams.counters.logic import counters_key

if TYPE_CHECKING:
    from streams.app import StreamsApp

log = logging.getLogger(__name__)


# A device's state is written to its table when anything but sample times changed, and
# otherwise at least every PERSIST_EVERY_MS of event time. Counters are cumulative: a state
# restored with older times only makes the next delta span a longer interval, nothing is
# lost; and any change of a counter value, episode or output is written at once. Two
# minutes: a state written every third 10 s sample was a third of the worker's changelog
# traffic, all of it only newer times.
PERSIST_EVERY_MS = 120_000
# The longest the agent works through buffered counters before it lets other agents run.
YIELD_EVERY_S = 0.002


class CountersPath:
    """The counters detector over one worker's states in ``table`` (get / set by key)."""

    def __init__(self, sa: StreamsApp, table: Any) -> None:
        self.sa = sa
        self.table = table
        # This worker's current states, ahead of the table by at most PERSIST_EVERY_MS of
        # sample times. Cleared on every rebalance: the table (changelog) is the truth then.
        self.cache: dict[bytes, dict[str, Any]] = {}
        # The column views of those states (streams.counters.columns), for columnar messages.
        self.views: dict[bytes, View | None] = {}

    def reset(self) -> None:
        self.cache.clear()
        self.views.clear()

    async def process(self, msg: CountersMessage, partition: int,
                      pending: list[Awaitable[Any]] | None = None) -> None:
        """One decoded counters message of ``partition``: each part's state and outputs,
        then the observers (the stale detector). ``pending`` collects the sends' delivery
        futures when the caller commits only after them."""
        sa = self.sa
        parts: list[Counters] | list[CounterColumns]
        if isinstance(msg, CounterColumns) and msg.names_devices():
            # a host agent's message, one part per HCA: each a device of a port or two,
            # where the column checks cost more than they save (and a columnar split is
            # 25x a row split); its row parts are the ones replay applies
            parts = msg.rows().split()
        else:
            parts = msg.split()  # a host agent's message: one part per HCA
        for part in parts:
            await self._part(part, pending)
        for observe in sa.counters_observers:  # the stale detector (the parts split once)
            try:
                await observe(msg, partition, pending, parts)
            except Exception:  # its failure is not this message's
                log.exception("counters observer %s failed on %s", observe, msg.id)

    async def _part(self, msg: CountersMessage, pending: list[Awaitable[Any]] | None) -> None:
        sa = self.sa
        key = counters_key(msg.fabric, msg.device, msg.source).encode()
        value = self.cache.get(key)
        if value is None:
            stored = self.table.get(key)
            value = orjson.loads(stored) if stored else None
        if isinstance(msg, CounterColumns):
            value, detections, downs, redelivered, self.views[key] = (
                sa.engine.apply_counter_columns(value, msg, self.views.get(key)))
            samples = msg.port_count
        else:
            value, detections, downs, redelivered = sa.engine.apply_counters(value, msg)
            self.views.pop(key, None)  # the rows moved the state past any column view
            samples = len(msg.ports)
        self.cache[key] = value
        state = value["s"]
        if not redelivered and (state.pop("dirty", True) or detections or downs
                                or msg.ts - value.get("p", 0) >= PERSIST_EVERY_MS):
            value["p"] = msg.ts
            t0 = time.perf_counter()
            self.table[key] = orjson.dumps(value)
            sa.stats["persist_ms"] += (time.perf_counter() - t0) * 1000
            sa.stats["persisted"] += 1
        sa.stats["events"] += 1
        sa.stats["samples"] += samples
        for d in downs:
            fut = await sa.counter_downs.send(key=f"{d.device}:{d.port}".encode(),
                                              value=orjson.dumps(d.to_wire()))
            if pending is not None:
                pending.append(fut)
        await sa.publish(detections, pending)


def register(sa: StreamsApp) -> None:
    path = CountersPath(sa, sa.counters_table)

    def on_revoked(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        path.reset()

    sa.app.on_partitions_revoked.connect(on_revoked)

    @sa.app.agent(sa.counters, name="counters")
    async def counters(stream: Any) -> None:
        yielded = time.perf_counter()
        async for event in stream.events():
            raw = event.value if isinstance(event.value, bytes) else b""
            t_start = time.perf_counter()
            try:
                msg = await sa.decode(event, registry.COUNTERS)
                if not isinstance(msg, Counters | CounterColumns):
                    continue
                await path.process(msg, int(event.message.partition))
                sa.stats["counters_ms"] += (time.perf_counter() - t_start) * 1000
            except Exception as exc:  # never die on a message
                await sa.failed(raw, exc, event.message)
            # A fetched batch of counters is already buffered, so iterating it never
            # suspends: yield at least every YIELD_EVERY_S so a trap waiting in the flap
            # agent is not stuck behind a whole batch (trap-to-detection latency), but not
            # after every message (a loop turn costs as much as a quiet message's work).
            if time.perf_counter() - yielded >= YIELD_EVERY_S:
                await asyncio.sleep(0)
                yielded = time.perf_counter()
