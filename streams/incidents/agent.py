"""Correlator agent: one fabric-wide view, on one partition, through ``streams.incidents.logic``.

Its channel is the internal ``{app}.correlate`` topic (keyed by fabric: the port events the
flap agent forwards, the action records the breaker's actions agent forwards, every
detection before it is published, and a tick per fabric every second) together with
``fabric.topology`` (the cabling it correlates by) and ``fabric.maintenance``. All three
have one partition, so one worker holds the whole fabric and sees it in order.

Outputs: incidents to ``fabric.incidents`` (key fabric), excuses to the flap agent's
internal topic (key port, like the counter downs), and the detections, annotated, to
``StreamsApp.emit`` (``fabric.detections``, the breaker when they carry neither incident
nor maintenance, the ledger). The correlator state is changelogged under the fabric's key,
its cabling index under ``{fabric}#cabling`` (rewritten only when a snapshot arrives, and
kept in memory between).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import orjson

from schemas import (
    ActionRecord,
    ContractError,
    Detection,
    Maintenance,
    PortEvent,
    Topology,
    decode,
    encode,
)
from schemas import topics as registry
from streams.incidents import logic
from streams.incidents.logic import Tick

if TYPE_CHECKING:
    from streams.app import StreamsApp

log = logging.getLogger(__name__)


def register(sa: StreamsApp) -> None:
    table = sa.correlate_table
    cabling: dict[str, Any] = {}  # fabric -> index, the table's copy in memory
    boxes: dict[str, Any] = {}  # fabric -> correlator state, likewise (written at each change)

    def forget(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        # another worker may own the partition now: the table is the truth when it returns
        boxes.clear()
        cabling.clear()

    sa.app.on_partitions_revoked.connect(forget)
    channel = sa.app.topic(sa.correlate.get_topic_name(), registry.TOPOLOGY.name,
                           registry.MAINTENANCE.name, key_type=bytes, value_type=bytes,
                           key_serializer="raw", value_serializer="raw")

    def index_of(fabric: str) -> dict[str, Any] | None:
        if fabric not in cabling:
            stored = table.get(f"{fabric}#cabling".encode())
            cabling[fabric] = orjson.loads(stored) if stored else None
            sa.engine.learn_cabling(fabric, cabling[fabric])  # the breaker's SU sizes
        index: dict[str, Any] | None = cabling[fabric]
        return index

    async def item_of(event: Any, raw: bytes) -> logic.CorrelatorInput | None:
        topic = event.message.topic
        if topic == registry.TOPOLOGY.name:
            topo = await sa.decode(event, registry.TOPOLOGY)
            if isinstance(topo, Topology):
                before = index_of(topo.fabric)
                index = logic.index_topology(topo, before)
                if index != before:  # most snapshots change nothing: no rewrite then
                    cabling[topo.fabric] = index
                    sa.engine.learn_cabling(topo.fabric, index)
                    table[f"{topo.fabric}#cabling".encode()] = orjson.dumps(index)
                    log.info("cabling of %s: %d ports", topo.fabric, len(index["peer"]))
            return None
        if topic == registry.MAINTENANCE.name:
            msg = await sa.decode(event, registry.MAINTENANCE)
            if not isinstance(msg, Maintenance):
                return None
            log.info("maintenance window %s of %s: %s %s %s", msg.window, msg.fabric,
                     msg.state, msg.scope, msg.target)
            return msg
        obj = orjson.loads(raw)
        if isinstance(obj, dict) and obj.get("kind") == "tick":
            return Tick(id=str(obj["id"]), fabric=str(obj["fabric"]), ts=int(obj["ts"]),
                        wall=bool(obj.get("wall", True)))
        try:
            msg = decode(raw)  # our own forwarding of what was accepted already
        except ContractError as exc:
            await sa.dead_letter(raw, exc, event.message)
            return None
        return msg if isinstance(msg, PortEvent | Detection | ActionRecord) else None

    @sa.app.agent(channel, name="correlate")
    async def correlate(stream: Any) -> None:
        async for event in stream.events():
            raw = event.value if isinstance(event.value, bytes) else b""
            try:
                item = await item_of(event, raw)
                if item is None:
                    continue
                key = item.fabric.encode()
                sa.fabrics_seen.add(item.fabric)  # ticked, also when another process forwards
                if item.fabric not in boxes:
                    stored = table.get(key)
                    boxes[item.fabric] = orjson.loads(stored) if stored else None
                box, outs, again = sa.engine.apply_correlate(
                    boxes[item.fabric], index_of(item.fabric), item,
                    wall=int(time.time() * 1000))
                boxes[item.fabric] = box
                if not again:
                    table[key] = orjson.dumps(box)
                for inc in outs.incidents:
                    log.info("incident %s %s: %s (%d members)", inc.incident, inc.state,
                             inc.reason, len(inc.members))
                    await sa.incidents.send(key=inc.fabric.encode(), value=encode(inc))
                for ex in outs.excuses:
                    await sa.counter_downs.send(key=f"{ex.device}:{ex.port}".encode(),
                                                value=orjson.dumps(ex.to_wire()))
                await sa.emit([*outs.detections, *outs.followups])
                sa.stats["incidents"] += len(outs.incidents)
            except Exception as exc:  # never die on a message
                await sa.failed(raw, exc, event.message)

    @sa.app.timer(interval=1.0)  # type: ignore[untyped-decorator]
    async def tick() -> None:
        # Time passes even when no port changes: an incident closes once it has settled.
        now = int(time.time() * 1000)
        for fabric in sorted(sa.fabrics_seen):
            await sa.correlate.send(key=fabric.encode(), value=orjson.dumps(
                Tick(id=f"tick/{sa.worker_index}/{now}", fabric=fabric, ts=now,
                     wall=True).to_wire()))
