"""What a contract topic accepts: one decision, used by every consumer of the topics.

The stream worker, the ledger's ingest and the runbook dispatcher all take a message through
``accept``, so a message one of them refuses is refused by all, and reaches the ledger only as
the dead letter the worker writes for it. Two rules on top of the contract's own validation:

- **kind**: a message whose kind does not belong on the topic it arrived on (a detection or an
  action record published to ``fabric.port-events``) is refused;
- **time**: its ``ts`` must lie within ``[received - max_event_age, received +
  max_clock_skew]``, where ``received`` is the record's broker timestamp. The contract topics
  are created with ``message.timestamp.type=LogAppendTime``, so that timestamp is the
  broker's clock, the same for every consumer and every replay of the topic, and a producer
  cannot forge it. Without a receive time (a JSON-lines backtest) only the kind is checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from schemas.codec import decode, loads
from schemas.errors import ContractError
from schemas.events import DeadLetter, Envelope, Event
from schemas.policy import Policy
from schemas.topics import DLQ, Topic

E = TypeVar("E", bound=Envelope)

# The topic config that makes a record's timestamp the broker's receive time.
TIMESTAMP_CONFIG = {"message.timestamp.type": "LogAppendTime"}


@dataclass(frozen=True, slots=True)
class TimeBounds:
    max_ahead_ms: int
    max_age_ms: int
    arrival_slack_ms: int = 10_000  # at_arrival: how far ahead a ts is taken as written

    @classmethod
    def from_policy(cls, policy: Policy) -> TimeBounds:
        stream = policy.fabric_health.stream
        return cls(round(stream.max_clock_skew * 1000), round(stream.max_event_age * 1000),
                   round(stream.arrival_slack * 1000))


DEFAULT_BOUNDS = TimeBounds.from_policy(Policy())


def check_time(ts: int, received_ms: int | None, bounds: TimeBounds) -> None:
    """Raise ``ContractError`` (path ``ts``) when ``ts`` is out of bounds for its arrival."""
    if received_ms is None or received_ms <= 0:
        return
    if ts > received_ms + bounds.max_ahead_ms:
        raise ContractError(f"ts {ts} is {(ts - received_ms) / 1000:.0f} s ahead of the time the "
                            f"broker received it (more than {bounds.max_ahead_ms / 1000:.0f} s "
                            "of clock skew)", "ts")
    if ts < received_ms - bounds.max_age_ms:
        raise ContractError(f"ts {ts} is {(received_ms - ts) / 86_400_000:.1f} days before the "
                            f"time the broker received it (older than "
                            f"{bounds.max_age_ms / 86_400_000:.0f} days)", "ts")


def accept(topic: Topic, raw: bytes, *, received_ms: int | None,
           bounds: TimeBounds = DEFAULT_BOUNDS) -> Event:
    """The contract event in ``raw`` as it arrived on ``topic``; ``ContractError`` otherwise."""
    event = decode(raw)
    if event.kind not in topic.kinds:
        raise ContractError(f"kind {event.kind!r} does not belong on topic {topic.name}", "kind")
    check_time(event.ts, received_ms, bounds)
    return event


def accept_dead_letter(raw: bytes) -> DeadLetter:
    """A record of ``fabric.dlq`` (written by the worker, so only its shape is checked)."""
    try:
        return DeadLetter.model_validate(loads(raw))
    except ContractError:
        raise
    except ValueError as exc:
        raise ContractError(f"not a dead-letter record: {str(exc)[:200]}", DLQ.name) from None


def at_arrival(event: E, received_ms: int | None, bounds: TimeBounds = DEFAULT_BOUNDS) -> E:
    """The event as its consumers take it: its ``ts`` no later than ``arrival_slack`` after
    the broker received it.

    Acceptance lets an event be stamped up to ``maxClockSkew`` (5 min) ahead of its receive
    time, and each detector's notion of "newest" (the flap watermark, the counters' last
    sample per port, the stale clock) only moves forward: one message stamped ahead would
    make every real event after it look late or stale until real time caught up. Capped at
    its arrival plus ``arrivalSlack`` (10 s, at most the lateness), a message stamped ahead
    moves "newest" no further than that: a real event stamped after the message arrived is
    never late, and a port's counters skip at most the samples of the slack (cumulative:
    the next one carries their deltas). Within the slack a ``ts`` is taken as written, so a
    clock a few seconds ahead, or the simulator publishing a step's messages up to one
    interval early, keeps its order between topics (a trap stays inside the counter
    interval that saw it). The stream worker hands detectors, and the ledger's ingest
    stores, what this returns (the ledger's counter deltas and port state have a "newest"
    of their own). The broker's time is ``LogAppendTime``, the same on every re-read, so a
    re-read decides the same. ``fabricwatch replay`` reads JSON lines without a receive
    time (``received_ms`` None): there the ``ts`` is taken as written, as the worker takes
    every event stamped no more than the slack ahead of its arrival, so a replay of what
    the worker accepted decides the same unless a line was stamped further ahead.
    """
    if received_ms is None:
        return event
    latest = received_ms + bounds.arrival_slack_ms
    if event.ts <= latest:
        return event
    return event.model_copy(update={"ts": latest})
