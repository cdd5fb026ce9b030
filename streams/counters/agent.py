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
from collections.abc import Awaitable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import orjson

from schemas import CounterColumns, Counters, CountersMessage
from schemas import topics as registry
from streams.common import write_state
from streams.counters import columns, hosts
from streams.counters.columns import View
from streams.counters.logic import LEGACY_SOURCES, counters_key
from streams.stale.logic import Report, StreamReport

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
        # A host's HCAs' column view (streams.counters.hosts) by the host's key, and the
        # host key of each device state one is laid over (a row part drops the view).
        self.hosts: dict[bytes, hosts.HostView] = {}
        self.host_of: dict[bytes, bytes] = {}
        self.layouts: dict[bytes, hosts.HostLayout] = {}  # derived from columns alone

    def reset(self) -> None:
        self.cache.clear()
        self.views.clear()
        self.hosts.clear()
        self.host_of.clear()
        self.layouts.clear()

    async def process(self, msg: CountersMessage, partition: int,
                      pending: list[Awaitable[Any]] | None = None) -> None:
        """One decoded counters message of ``partition``: each part's state and outputs,
        then the observers (the stale detector). ``pending`` collects the sends' delivery
        futures when the caller commits only after them."""
        sa = self.sa
        reports: Sequence[StreamReport]
        if isinstance(msg, CounterColumns) and msg.names_devices():
            # a host agent's message: its HCAs' rows judged together, each HCA that is not
            # quiet applied as its row part (streams.counters.hosts)
            reports = await self._host(msg, pending)
        else:
            parts = msg.split()  # a host agent's message: one part per HCA
            for part in parts:
                await self._part(part, pending)
            reports = parts
        for observe in sa.counters_observers:  # the stale detector (the parts split once)
            try:
                await observe(msg, partition, pending, reports)
            except Exception:  # its failure is not this message's
                log.exception("counters observer %s failed on %s", observe, msg.id)

    def _value(self, key: bytes) -> dict[str, Any] | None:
        value = self.cache.get(key)
        if value is None:
            stored = self.table.get(key)
            value = orjson.loads(stored) if stored else None
        return value

    async def _host(self, msg: CounterColumns, pending: list[Awaitable[Any]] | None
                    ) -> list[Report]:
        """A host agent's columnar message: the HCAs the column checks find quiet are
        stamped, the others applied as their row parts. Its stale reports, one per HCA."""
        sa = self.sa
        cols = msg.column_map()
        ts = msg.ts
        host_key = counters_key(msg.fabric, msg.device, msg.source).encode()
        layout = self.layouts.get(host_key)
        if layout is None or not layout.fits(cols["device"], cols["port"]):
            layout = self.layouts[host_key] = hosts.HostLayout(
                msg.fabric, msg.source, msg.device, cols["device"], cols["port"])
        names, rows, keys = layout.names, layout.rows, layout.keys
        boxes = [self._value(key) for key in keys]
        slow: list[bool] | None = None
        view = self.hosts.pop(host_key, None)
        if all(box is not None and box["s"] is not None for box in boxes):
            states = [box["s"] for box in boxes]  # type: ignore[index]
            if view is None or not view.covers(sa.engine.counters, cols["device"],
                                               cols["port"], states):
                view = hosts.lay(sa.engine.counters, states, rows, cols["port"],
                                 cols["device"])
            if view is not None:
                slow = hosts.judge(sa.engine.counters, view, cols, ts,
                                   msg.source in LEGACY_SOURCES, list(msg.unknown_columns()),
                                   rows)
        if slow is None:
            slow = [True] * len(names)
        else:
            for box, key, name, at, go in zip(boxes, keys, names, rows, slow, strict=True):
                if go:
                    continue
                assert box is not None and view is not None  # noqa: S101 - judged above
                hosts.stamp(box, f"{msg.id}/{name}", view, at, ts)
                self._stamped(key, box, ts, len(at))
        if any(slow):
            # the row parts of the others, in the message's order (their rows may change:
            # the view goes with them)
            going = {name for name, go in zip(names, slow, strict=True) if go}
            for part in msg.rows().split():
                if part.device in going:
                    await self._part(part, pending)
        elif view is not None:
            columns.refresh(view.view, ts, [])
            self.hosts[host_key] = view
            for key in keys:
                self.host_of[key] = host_key
        return layout.reports(msg.source, ts, cols.get("error"))

    def _stamped(self, key: bytes, value: dict[str, Any], ts: int, samples: int) -> None:
        """A quiet device's value after its stamp: kept, and written when it is due."""
        sa = self.sa
        self.cache[key] = value
        self.views.pop(key, None)  # a device's own column view: its times moved
        if ts - value.get("p", 0) >= PERSIST_EVERY_MS:
            self._write(key, value, ts)
        sa.stats["events"] += 1
        sa.stats["samples"] += samples

    def _write(self, key: bytes, value: dict[str, Any], ts: int) -> None:
        """The device's value to its table, as of the message at ``ts``."""
        stats = self.sa.stats
        value["p"] = ts
        t0 = time.perf_counter()
        write_state(self.table, key, partial(orjson.dumps, value))
        stats["persist_ms"] += (time.perf_counter() - t0) * 1000
        stats["persisted"] += 1

    async def _part(self, msg: CountersMessage, pending: list[Awaitable[Any]] | None) -> None:
        sa = self.sa
        key = counters_key(msg.fabric, msg.device, msg.source).encode()
        host = self.host_of.pop(key, None)
        if host is not None:  # a host view laid over this state no longer reflects it
            self.hosts.pop(host, None)
        value = self._value(key)
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
            self._write(key, value, msg.ts)
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
