"""Stream side of the topology diff: ``fabric.topology`` snapshots in, detections out.

``handle`` is the whole decision for one message (decode, pick the fabric's state, ``step``,
dead-letter what does not validate) and has no Faust in it. Two ways to wire it:

* ``register_streams(sa, plan)`` adds it to the worker's ``streams.app.StreamsApp`` (its
  topics, ``publish`` to detections/breaker/ledger, ``failed``), in ``StreamsApp._register``:

      from streams.topology import agent as topology_diff_agent
      from streams.topology.plan import load_plan_file
      if self.settings.plan_path is not None:  # FABRICWATCH_PLAN_PATH
          topology_diff_agent.register_streams(self, load_plan_file(self.settings.plan_path))

* ``register(app, plan=..., policy=..., fabric=...)`` adds it to any Faust app with topics
  and a table of its own (what a standalone topology worker would run).

The worker diffs each snapshot of its own fabric against the plan it was given; the state
(open findings, newest snapshot time) lives in the table ``topology-diff-state`` keyed by
fabric, so a restarted worker does not fire the open findings again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from schemas import (
    ContractError,
    DeadLetter,
    Detection,
    Topology,
    dead_letter,
    decode,
    encode,
    message_key,
)
from schemas.policy import Policy
from schemas.topics import DETECTIONS, DLQ, TOPOLOGY
from streams.topology.logic import DEGRADED_LINK, TrackerState, step
from streams.topology.plan import Plan

if TYPE_CHECKING:
    from streams.app import StreamsApp

log = logging.getLogger(__name__)

TABLE_NAME = "topology-diff-state"  # in a standalone app (register)
DIFF_TABLE = "topology-diff"  # in the worker's StreamsApp (register_streams)
STORE_TRIES = 60
STORE_RETRY_S = 0.5  # aiokafka refreshes metadata for unknown topics within ~0.1-1 s
AGENT_NAME = "fabricwatch.topology-diff"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one ``fabric.topology`` message leads to."""

    state: dict[str, Any]  # the fabric's new table value (JSON)
    detections: tuple[Detection, ...]
    closed: tuple[str, ...]  # finding keys that closed with this snapshot
    dead_letter: DeadLetter | None = None
    skipped: str | None = None  # why the message changed nothing, when it did not


def handle(raw: bytes, stored: Any, plan: Plan, policy: Policy, *, fabric: str,
           emit_degraded: bool = True, guid_names: Mapping[str, str] | None = None,
           partition: int | None = None, offset: int | None = None,
           now_ms: int | None = None) -> Outcome:
    """Decide everything about one message; ``stored`` is the fabric's table value or None.

    With ``emit_degraded`` False the diff still tracks degraded links but does not publish
    them, for a deployment where ``streams.degraded_link`` already judges topology snapshots.
    """
    unchanged = stored if isinstance(stored, dict) else {}
    try:
        event = decode(raw)
        if not isinstance(event, Topology):
            raise ContractError(f"{TOPOLOGY.name} carries topology events, not {event.kind}",
                                "kind")
    except ContractError as exc:
        letter = dead_letter(raw, exc, source_topic=TOPOLOGY.name, partition=partition,
                             offset=offset, now_ms=now_ms)
        return Outcome(unchanged, (), (), letter, "invalid")
    if event.fabric != fabric:
        return Outcome(unchanged, (), (), None, f"fabric {event.fabric!r} is not this "
                                                f"worker's ({fabric!r})")
    result = step(TrackerState.from_json(stored), event, plan, policy, guid_names=guid_names)
    detections = result.detections if emit_degraded else tuple(
        d for d in result.detections if d.detection.value != DEGRADED_LINK)
    return Outcome(result.state.to_json(), detections, result.closed, None,
                   None if result.report is not None else "older than a snapshot already seen")


async def _store(table: Any, key: Any, value: Any, *, tries: int = STORE_TRIES) -> None:
    """``table[key] = value``, waiting out a changelog topic not yet in the metadata.

    Right after a worker starts, Faust can see the freshly declared changelog topic with 0
    partitions and refuse the write (``PartitionsMismatch``) until the client's metadata
    catches up; losing the write would reopen every finding on the next snapshot.
    """
    from faust.exceptions import PartitionsMismatch

    for attempt in range(tries):
        try:
            table[key] = value
            return
        except PartitionsMismatch:
            if attempt == tries - 1:
                raise
            if attempt == 0:
                log.info("table %s: changelog topic not in the metadata yet; waiting",
                         getattr(table, "name", "?"))
            await asyncio.sleep(STORE_RETRY_S)


def register_streams(sa: StreamsApp, plan: Plan, *, emit_degraded: bool = False) -> Any:
    """Add the topology-diff agent to the worker's ``StreamsApp`` (its topics, DLQ, publish).

    A second agent on ``fabric.topology`` beside ``streams.degraded_link``'s, with its own
    changelogged table ``topology-diff`` keyed by fabric. ``emit_degraded`` is False by
    default because that detector already judges each link end of a snapshot (give it the
    plan's widths through ``Context(expectation=expectation_from_plan(plan))``); the diff
    then publishes ``miswire``, ``missing_link`` and ``unexpected_link``.
    """
    from streams.app import partitions_of

    fabric = sa.settings.fabric
    table = sa.app.Table(DIFF_TABLE, default=None, key_type=bytes, value_type=bytes,
                         partitions=partitions_of(sa.settings, TOPOLOGY))

    async def topology_diff(stream: Any) -> None:
        async for event in stream.events():
            raw = event.value if isinstance(event.value, bytes) else b""
            try:
                message = event.message
                key = fabric.encode("utf-8")
                stored = table.get(key)
                outcome = handle(raw, orjson.loads(stored) if stored else None, plan,
                                 sa.policy, fabric=fabric, emit_degraded=emit_degraded,
                                 partition=message.partition, offset=message.offset)
                if outcome.dead_letter is not None:
                    # The degraded-link agent dead-letters the same bytes already; one is enough.
                    continue
                await sa.publish(outcome.detections)  # before the state: at least once
                if outcome.skipped is None:
                    await _store(table, key, orjson.dumps(outcome.state))
                else:
                    log.info("topology snapshot at offset %s skipped: %s", message.offset,
                             outcome.skipped)
                if outcome.closed:
                    log.info("topology findings closed: %s", ", ".join(outcome.closed))
            except Exception as exc:  # never die on a message
                await sa.failed(raw, exc, event.message)

    return sa.app.agent(sa.topology, name="topology-diff")(topology_diff)


def register(app: Any, *, plan: Plan, policy: Policy, fabric: str,
             emit_degraded: bool = True) -> Any:
    """Add the topology-diff agent and its state table to the Faust ``app``; returns the agent."""
    source = app.topic(TOPOLOGY.name, key_serializer="raw", value_serializer="raw")
    sink = app.topic(DETECTIONS.name, key_serializer="raw", value_serializer="raw")
    dlq = app.topic(DLQ.name, key_serializer="raw", value_serializer="raw")
    # Keyed by fabric, as the topic is: one partition's state per fabric, JSON values.
    table = app.Table(TABLE_NAME, default=dict, partitions=TOPOLOGY.partitions)
    key = fabric

    async def topology_diff(stream: Any) -> Any:
        async for event in stream.events():
            message = event.message
            outcome = handle(event.value, table.get(key), plan, policy, fabric=fabric,
                             emit_degraded=emit_degraded, partition=message.partition,
                             offset=message.offset)
            if outcome.dead_letter is not None:
                await dlq.send(key=TOPOLOGY.name.encode(), value=encode(outcome.dead_letter))
            for det in outcome.detections:
                await sink.send(key=message_key(det).encode("utf-8"), value=encode(det))
            if outcome.skipped is None:
                await _store(table, key, outcome.state)
            else:
                log.info("topology snapshot at offset %s skipped: %s", message.offset,
                         outcome.skipped)
            if outcome.closed:
                log.info("topology findings closed: %s", ", ".join(outcome.closed))
            yield len(outcome.detections)

    return app.agent(source, name=AGENT_NAME)(topology_diff)
