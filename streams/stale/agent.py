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
report), which consumers drop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from schemas import CountersMessage
from schemas import topics as registry
from streams.common import state_key
from streams.stale.logic import stream_key

if TYPE_CHECKING:
    from streams.app import StreamsApp

PERSIST_EVERY_MS = 5_000


def register(sa: StreamsApp) -> None:
    from streams.app import partitions_of

    table = sa.app.Table("stale", default=None,
                         partitions=partitions_of(sa.settings, registry.COUNTERS),
                         key_type=bytes, value_type=bytes)
    scopes: dict[str, dict[str, Any]] = {}  # fabric -> once() box of the StaleState
    partition_of: dict[str, dict[str, int]] = {}  # fabric -> stream key -> partition
    loaded: dict[tuple[str, int], int] = {}  # (fabric, partition) -> ts last persisted

    def on_revoked(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        scopes.clear()
        partition_of.clear()
        loaded.clear()

    sa.app.on_partitions_revoked.connect(on_revoked)

    def load(fabric: str, partition: int) -> None:
        stored = table.get(state_key(fabric, f"p{partition}").encode())
        loaded[(fabric, partition)] = 0
        if not stored:
            return
        piece = orjson.loads(stored)
        box = scopes.setdefault(fabric, {"s": None, "r": []})
        if box["s"] is None:
            box["s"] = {"clock": None, "checked": None, "fabric": fabric, "n": 0, "w": {},
                        "s": {}}
        state = box["s"]
        for key, rec in piece["s"].items():
            current = state["s"].get(key)
            if current is None or current[0] < rec[0]:
                state["s"][key] = rec
            partition_of.setdefault(fabric, {})[key] = partition
        if piece.get("w") is not None:  # this partition's lane, as active as of now
            state["w"][str(partition)] = [int(piece["w"]), state["n"]]

    def persist(fabric: str, partition: int, ts: int) -> None:
        state = scopes[fabric]["s"]
        mine = partition_of.get(fabric, {})
        lane = state.get("w", {}).get(str(partition))
        piece = {"w": lane[0] if lane else None,
                 "s": {k: v for k, v in state["s"].items() if mine.get(k) == partition}}
        table[state_key(fabric, f"p{partition}").encode()] = orjson.dumps(piece)
        loaded[(fabric, partition)] = ts

    async def observe(msg: CountersMessage, partition: int) -> None:
        """One decoded counters message of ``partition`` (called by the counters agent)."""
        if (msg.fabric, partition) not in loaded:
            load(msg.fabric, partition)
        parts = msg.split()  # a host agent's message: one stream per HCA
        box, detections, _, redelivered = sa.engine.apply_stale(
            scopes.get(msg.fabric), msg, partition, parts)
        scopes[msg.fabric] = box
        mine = partition_of.setdefault(msg.fabric, {})
        for part in parts:
            mine[stream_key(part.source, part.device)] = partition
        fired = bool(detections) and not redelivered
        if fired or msg.ts - loaded[(msg.fabric, partition)] >= PERSIST_EVERY_MS:
            persist(msg.fabric, partition, msg.ts)
        await sa.publish(detections)

    sa.counters_observers.append(observe)
