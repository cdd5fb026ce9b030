"""Stale agent: counters messages move the fabric's clock; devices that fell silent are stale.

It runs inside the counters agent's consumption of ``fabric.counters`` (an observer the
counters agent calls with each message it decoded, so a message is decoded once). The
scope of the detector is one fabric as this worker sees it: the devices of every counters
partition the worker holds, with one clock (``streams.stale.logic``: the slowest partition
still delivering), so a worker that holds all partitions judges as ``replay`` does; with
several workers each judges its share of the devices against its share of the fabric.

The state lives in memory and is stored per partition, in the ``stale`` table under
``{fabric}/p{partition}`` (a partition's slice: the streams of the devices whose messages it
carries), written with that partition's messages, at once after a detection and otherwise
every ``PERSIST_EVERY_MS`` of event time. After a rebalance the memory is dropped and each
partition's slice is loaded again with its first message. A slice restored older than it
was has older last-seen times that the next messages refresh; an episode opened since its
last write fires again after a crash with the same id (its episode is the device's last
report), which consumers drop. A device's episode opens with the message of whichever
partition moved the clock, not its own (it is silent): the slice written then carries the
open episodes of other partitions' streams (``"o"``), and loading it reopens them on their
streams, so a rebalance during a silence still ends it with ``stale_end``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import orjson

from schemas import CountersMessage
from schemas import topics as registry
from streams.common import state_key, write_state
from streams.stale.logic import StreamReport, report_key

if TYPE_CHECKING:
    from streams.app import StreamsApp

log = logging.getLogger(__name__)

PERSIST_EVERY_MS = 5_000


class StaleObserver:
    """The stale detector's states over ``table`` (get / set by key), fed by the counters
    path with each decoded message and its partition."""

    def __init__(self, sa: StreamsApp, table: Any,
                 wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000) -> None:
        self.sa = sa
        self.table = table
        self.wall_ms = wall_ms  # how long a quiet lane has looked idle (``IDLE_WALL_MS``)
        self.scopes: dict[str, dict[str, Any]] = {}  # fabric -> once() box of the StaleState
        self.partition_of: dict[str, dict[str, int]] = {}  # fabric -> stream key -> partition
        # fabric -> partition -> its stream keys (an ordered set: a slice's keys in the order
        # they came), so a slice is written from its own streams, not a walk of the scope
        self.members: dict[str, dict[int, dict[str, None]]] = {}
        self.loaded: dict[tuple[str, int], int] = {}  # (fabric, partition) -> ts persisted
        # lanes (partitions) the consumer knows are not idle (``StaleDetector.step``); set
        # by the batched consumer for each batch, empty under Faust's agent
        self.held: frozenset[str] = frozenset()
        # fabric -> stream key -> [episode, its last report ts, interval]: the open episodes
        # a loaded slice recorded for streams of other partitions (see ``persist``)
        self.foreign: dict[str, dict[str, list[Any]]] = {}

    def reset(self) -> None:
        self.scopes.clear()
        self.partition_of.clear()
        self.members.clear()
        self.loaded.clear()
        self.foreign.clear()

    def load(self, fabric: str, partition: int) -> None:
        stored = self.table.get(state_key(fabric, f"p{partition}").encode())
        self.loaded[(fabric, partition)] = 0
        if not stored:
            return
        piece = orjson.loads(stored)
        if not all(isinstance(rec, list) for rec in piece.get("s", {}).values()):
            # a slice of an older layout (the whole scope's state under the key): its
            # streams are known again from their next reports
            log.warning("stale: slice %s/p%s is of an older layout; not restored", fabric,
                        partition)
            return
        box = self.scopes.setdefault(fabric, {"s": None, "r": []})
        if box["s"] is None:
            box["s"] = {"clock": None, "checked": None, "fabric": fabric, "n": 0, "w": {},
                        "s": {}}
        state = box["s"]
        state.pop("due", None)  # deadlines read back: the next check walks them all
        for key, rec in piece["s"].items():
            current = state["s"].get(key)
            if current is None or current[0] < rec[0]:
                state["s"][key] = rec
                for part in ("g", "r"):  # its pending gaps and its run since a silence
                    if key in piece.get(part, {}):
                        state.setdefault(part, {})[key] = piece[part][key]
                    else:  # the newer slice's word on them, not the older one's
                        state.get(part, {}).pop(key, None)
                # (a stream in two slices: the partitions were resized; the newer is its own)
                self.assign(fabric, key, partition)
        if piece.get("w") is not None:  # this partition's lane, as active as of now
            state["w"][str(partition)] = [int(piece["w"]), state["n"]]
        known = self.foreign.setdefault(fabric, {})
        known.update(piece.get("o", {}))
        for key, (episode, last, interval) in known.items():
            rec = state["s"].get(key)
            # still open unless the stream has reported since (its own slice, written at
            # its episode's end, is newer); its slice may be older than the silence began
            if rec is not None and rec[2] is None and rec[0] <= last:
                rec[0], rec[1], rec[2] = last, interval, episode

    def assign(self, fabric: str, key: str, partition: int) -> None:
        """Stream ``key`` is carried by ``partition`` (its slice's from now on)."""
        mine = self.partition_of.setdefault(fabric, {})
        before = mine.get(key)
        if before == partition:
            return
        mine[key] = partition
        slices = self.members.setdefault(fabric, {})
        if before is not None:
            slices.get(before, {}).pop(key, None)
        slices.setdefault(partition, {})[key] = None

    def persist(self, fabric: str, partition: int, ts: int) -> None:
        # the slice is built and encoded when the table takes it (a batched store: at its
        # flush, as of then), from this fabric's objects (a reset lets go of them, so a
        # slice still pending then is encoded as it was)
        write_state(self.table, state_key(fabric, f"p{partition}").encode(),
                    partial(self._slice, self.scopes[fabric],
                            self.partition_of.setdefault(fabric, {}),
                            self.members.setdefault(fabric, {}), partition))
        self.loaded[(fabric, partition)] = ts

    @staticmethod
    def _slice(box: dict[str, Any], mine: dict[str, int],
               members: dict[int, dict[str, None]], partition: int) -> bytes:
        state = box["s"]
        lane = state.get("w", {}).get(str(partition))
        streams = state["s"]
        piece = {"w": lane[0] if lane else None,
                 "s": {k: streams[k] for k in members.get(partition, ()) if k in streams},
                 "g": {k: v for k, v in state.get("g", {}).items() if mine.get(k) == partition},
                 "r": {k: v for k, v in state.get("r", {}).items() if mine.get(k) == partition}}
        # A device's episode opens on whichever partition's message moved the clock, while
        # its own slice is written only with its own messages, which do not come while it is
        # silent: the open episodes of other partitions' streams ride along here, or a
        # rebalance would forget them (no stale_end ever) and the silence would be learned.
        foreign = {k: [rec[2], rec[0], rec[1]] for k, rec in state["s"].items()
                   if rec[2] is not None and mine.get(k) != partition}
        if foreign:
            piece["o"] = foreign
        return orjson.dumps(piece)

    async def observe(self, msg: CountersMessage, partition: int,
                      pending: list[Awaitable[Any]] | None = None,
                      parts: Sequence[StreamReport] | None = None) -> None:
        """One decoded counters message of ``partition`` (called by the counters path,
        with ``parts``: the message split, as ``msg.split()``)."""
        if (msg.fabric, partition) not in self.loaded:
            self.load(msg.fabric, partition)
            # the held partitions' slices too, before any of them delivers: a lane
            # unknown to the state could not hold its clock back
            for lane in self.held:
                if (msg.fabric, int(lane)) not in self.loaded:
                    self.load(msg.fabric, int(lane))
        if parts is None:
            parts = msg.split()  # a host agent's message: one stream per HCA
        box, detections, _, redelivered = self.sa.engine.apply_stale(
            self.scopes.get(msg.fabric), msg, partition, parts, self.held, self.wall_ms())
        self.scopes[msg.fabric] = box
        for part in parts:
            self.assign(msg.fabric, report_key(part), partition)
        fired = bool(detections) and not redelivered
        if fired or msg.ts - self.loaded[(msg.fabric, partition)] >= PERSIST_EVERY_MS:
            self.persist(msg.fabric, partition, msg.ts)
        await self.sa.publish(detections, pending)


def register(sa: StreamsApp) -> None:
    from streams.app import partitions_of

    table = sa.app.Table("stale", default=None,
                         partitions=partitions_of(sa.settings, registry.COUNTERS),
                         key_type=bytes, value_type=bytes)
    observer = StaleObserver(sa, table)

    def on_revoked(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        observer.reset()

    sa.app.on_partitions_revoked.connect(on_revoked)
    sa.counters_observers.append(observer.observe)
