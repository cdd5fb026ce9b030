"""Record sinks: where ActionRecords, EvidenceRecords, breaker detections and the runbooks'
breaker incidents go.

``LedgerSink`` writes through the ledger API (``Ledger.write``, idempotent on replay by event
id, so an activity retried after a crash adds no duplicate row), and publishes the
ActionRecords to ``fabric.actions`` as well when given a publisher: the stream-side breaker
and the incident correlator learn of isolations and returns from that topic only, whatever
the runbooks' record sink (the ledger's ingest stores the topic's copy again under the same
id, which it absorbs). ``KafkaSink`` publishes to
the contract topics (``fabric.actions``, ``fabric.detections``) for the ledger's own sink to
store, for when another process owns the embedded ledger. ``MemorySink`` keeps them in a list.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol

from schemas.events import ActionRecord, Detection, Event, EvidenceRecord, Incident

Record = ActionRecord | EvidenceRecord | Detection | Incident


class LedgerLike(Protocol):
    def write(self, events: Sequence[Any]) -> int: ...


class PublisherLike(Protocol):
    async def send_many(self, events: Any) -> Any: ...

    async def flush(self) -> Any: ...


class LedgerSink:
    """Writes through ``ledger.Ledger`` (synchronous; run in a thread, one batch at a time),
    then publishes the batch's ActionRecords through ``actions`` if given."""

    def __init__(self, ledger: LedgerLike, actions: PublisherLike | None = None) -> None:
        self._ledger = ledger
        self._actions = actions
        self._lock = asyncio.Lock()

    async def write(self, events: Sequence[Record]) -> int:
        batch: list[Event] = list(events)
        async with self._lock:
            written = await asyncio.to_thread(self._ledger.write, batch)
        actions = [e for e in batch if isinstance(e, ActionRecord)]
        if actions and self._actions is not None:
            # Not sent: the activity fails and is retried (the ledger write is idempotent),
            # so the breaker is never left not knowing of an isolation that happened.
            await self._actions.send_many(actions)
            await self._actions.flush()
        return written


class KafkaSink:
    """Publishes through ``collectors.publish.Publisher`` and waits for the acknowledgement."""

    def __init__(self, publisher: PublisherLike) -> None:
        self._publisher = publisher

    async def write(self, events: Sequence[Record]) -> int:
        await self._publisher.send_many(list(events))
        await self._publisher.flush()
        return len(events)


class MemorySink:
    """Keeps records in memory, deduplicated by id as the ledger does."""

    def __init__(self) -> None:
        self.records: dict[str, Record] = {}

    async def write(self, events: Sequence[Record]) -> int:
        for event in events:
            self.records[event.id] = event
        return len(events)

    def actions(self) -> list[ActionRecord]:
        return sorted((r for r in self.records.values() if isinstance(r, ActionRecord)),
                      key=lambda r: (r.ts, r.id))
