"""The counters topic in batches, off Faust's one-event-at-a-time stream.

Faust's event machinery costs ~150 us a message by itself (``benchmarks/faust_floor.py``):
more than the counters detector's own work on a healthy message, and a ceiling of ~6,600
host messages per CPU-second with an agent that does nothing. With
``FABRICWATCH_STREAMS__COUNTERS_BATCHED=true`` the worker takes ``fabric.counters`` with
its own aiokafka consumer instead, and runs the same ``CountersPath`` and stale observer
over each fetched batch:

* **Group.** ``{faust id}-counters``, static membership like the worker's (instance id +
  ``-counters``), the worker's session timeout. Offsets are committed by hand.
* **States.** The counters states and the stale detector's partition slices live in memory
  in a ``ChangelogStore`` each, keyed as the Faust tables were, and go to compacted
  changelog topics (``{faust id}-counters-batched-changelog``,
  ``{faust id}-stale-batched-changelog``), each record on the partition of the counters
  partition it belongs to. A state written several times in a batch is sent once, and
  encoded once, when it is sent.
* **Order of a batch.** The messages of a fetch are applied one partition after another in
  turns of one message (as Faust hands them out); their counter downs, detections and dead
  letters are sent as they come. Every ``batched_commit_interval_s`` (5 s; and before a
  rebalance gives partitions away, and at stop) the outputs sent since are awaited, then
  the states changed since the last time sent and awaited, and only then the offsets
  applied so far committed (no state in the changelog ahead of its outputs): a
  host's state goes to the changelog once an interval, not once a message (Kafka Streams'
  record cache, flushed on commit). A crash therefore never leaves committed offsets ahead
  of the states; messages after the last commit are applied again, and each state's recent
  ids make a redelivered message repeat exactly its first outputs (``streams.engine.once``).
* **Idle partitions.** The stale detector's clock is the slowest partition still
  delivering; a fetch can bring one partition's whole backlog before another's, so a
  partition with records not yet read (its high watermark past the offset after its last
  delivered record, or not known yet) is held (never idle) while a batch is applied, and
  its stale slices are loaded before its first message. Wall time plays no part: one whose
  fetch came back empty is up to date and may be idle.
* **Rebalance.** Partitions taken away: the batch in hand finishes and is committed first
  (the listener waits for it), then their states are dropped. Partitions given: their
  changelog partitions are read from the start before the first batch, in the run task
  (the rebalance callback only notes them: no heartbeat goes out while it runs); one given
  back keeps its states only if its committed offset is the one after this worker's last
  record of it. A refused commit (the membership lost) drops the partitions it named. A
  failed restore stops the worker.

The Faust app still runs every other agent (flap, probes, the correlator, ...); the counters
and stale agents and their tables are not declared.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from aiokafka import (  # type: ignore[import-untyped]  # no py.typed there
    AIOKafkaConsumer,
    AIOKafkaProducer,
    ConsumerRebalanceListener,
    TopicPartition,
)
from aiokafka.errors import (  # type: ignore[import-untyped]
    CommitFailedError,
    IllegalStateError,
    KafkaError,
)

from runtime import metrics
from schemas import CounterColumns, Counters
from schemas import topics as registry
from streams.counters.agent import YIELD_EVERY_S, CountersPath
from streams.stale.agent import StaleObserver

if TYPE_CHECKING:
    from streams.app import StreamsApp

log = logging.getLogger(__name__)

FETCH_TIMEOUT_MS = 200
# Per partition and fetch, as Faust's consumer has it. A fetch takes every partition's
# buffered records (no cap on the count): a cap would take them from the first partitions
# only, a whole partition's backlog before the others', and the stale detector's clock
# (the slowest lane) would see the lanes not yet read as silent.
MAX_PARTITION_FETCH_BYTES = 1 << 20
RESTORE_TIMEOUT_S = 300.0


class ChangelogStore:
    """States by key in memory, each key on one partition; what changed since the last
    ``take_changed`` goes to the changelog topic ``topic`` (compacted).

    A writer hands over the state's encoder (``keep``), not its bytes: only the last write
    of a key before a flush reaches the changelog, so the state is encoded then, as of that
    flush (whose commit covers every message applied to it), once. Encoded at each write, a
    device's state was serialised for every message of it in a batch while catching up
    (a 64-port device's dozens a flush), and a stale slice for every 5 s of event time.
    """

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.values: dict[bytes, bytes | Callable[[], bytes]] = {}
        self.partition_of: dict[bytes, int] = {}
        self.changed: set[bytes] = set()
        self.current = 0  # the partition of the message being applied

    def get(self, key: bytes, default: bytes | None = None) -> bytes | None:
        value = self.values.get(key, default)
        return value() if callable(value) else value

    def __setitem__(self, key: bytes, value: bytes) -> None:
        self.keep(key, value)

    def keep(self, key: bytes, value: bytes | Callable[[], bytes]) -> None:
        """The key's state: its bytes, or what encodes them when the next flush takes it."""
        self.values[key] = value
        self.partition_of[key] = self.current
        self.changed.add(key)

    def take_changed(self) -> list[tuple[bytes, bytes, int]]:
        out = []
        for key in self.changed:
            value = self.values[key]
            if callable(value):  # encoded now, and kept as sent: equal to its changelog
                value = self.values[key] = value()
            out.append((key, value, self.partition_of[key]))
        self.changed.clear()
        return out

    def restored(self, key: bytes, value: bytes | None, partition: int) -> None:
        """One changelog record read back (None: a tombstone)."""
        if value is None:
            self.values.pop(key, None)
            self.partition_of.pop(key, None)
        else:
            self.values[key] = value
            self.partition_of[key] = partition

    def drop(self, partitions: set[int]) -> None:
        for key in [k for k, p in self.partition_of.items() if p in partitions]:
            del self.values[key]
            del self.partition_of[key]
            self.changed.discard(key)


def in_turns(batch: dict[Any, list[Any]]) -> list[Any]:
    """A fetch's records one partition after another in turns of one (Faust's order)."""
    queues = [records for _, records in sorted(batch.items(), key=lambda kv: kv[0].partition)]
    out = []
    for turn in range(max(map(len, queues), default=0)):
        out += [q[turn] for q in queues if turn < len(q)]
    return out


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]  # untyped base
    def __init__(self, owner: BatchedCounters) -> None:
        self.owner = owner

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        await self.owner.revoked({tp.partition for tp in revoked})

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        await self.owner.assigned({tp.partition for tp in assigned})


class BatchedCounters:
    """The worker's own consumer of ``fabric.counters`` (see the module's docstring)."""

    def __init__(self, sa: StreamsApp, faust_id: str, instance: str | None) -> None:
        self.sa = sa
        self.group = f"{faust_id}-counters"
        self.instance = None if instance is None else f"{instance}-counters"[:249]
        self.counters = ChangelogStore(f"{faust_id}-counters-batched-changelog")
        self.stale = ChangelogStore(f"{faust_id}-stale-batched-changelog")
        self.path = CountersPath(sa, self.counters)
        self.observer = StaleObserver(sa, self.stale)
        sa.counters_observers.append(self.observer.observe)
        self.lock = asyncio.Lock()  # a batch in hand, or a rebalance
        self.held: set[int] = set()  # assigned, their states ready
        self.kept: set[int] = set()  # revoked, their states not yet dropped
        # the last assignment, until ``prepare`` has made its states ready (in the run task:
        # a restore inside the rebalance callback would run while no heartbeat is sent)
        self.unprepared: set[int] | None = None
        self.next_offset: dict[int, int] = {}  # partition -> the offset after its last fetch
        # applied since the last flush: the offsets to commit, the outputs to await
        self.uncommitted: dict[Any, int] = {}
        self.committed: dict[Any, int] = {}  # the last offsets this worker committed
        self.generation: int | None = None  # the group generation of the assignment held
        self.pending: list[Awaitable[Any]] = []
        self.flushed_at = time.monotonic()
        self.consumer: Any = None
        self.producer: Any = None
        self.stopping = False

    @property
    def changelogs(self) -> list[str]:
        return [self.counters.topic, self.stale.topic]

    async def run(self) -> None:
        settings = self.sa.settings
        bootstrap = settings.kafka.bootstrap_servers
        st = settings.streams
        self.producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, acks="all", linger_ms=5, compression_type="lz4",
            max_request_size=64 * 1024 * 1024)
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=self.group,
            group_instance_id=self.instance, enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=MAX_PARTITION_FETCH_BYTES,
            session_timeout_ms=round(st.session_timeout_s * 1000),
            heartbeat_interval_ms=round(st.heartbeat_interval_s * 1000))
        await self.producer.start()
        try:
            await self.consumer.start()
            self.consumer.subscribe([registry.COUNTERS.name], listener=_Listener(self))
            log.info("counters: batched consumer in group %s", self.group)
            while not self.stopping:
                if self.unprepared is not None:
                    async with self.lock:
                        await self.prepare()
                batch = await self.consumer.getmany(timeout_ms=FETCH_TIMEOUT_MS)
                due = time.monotonic() - self.flushed_at >= st.batched_commit_interval_s
                if batch or due:
                    async with self.lock:
                        if batch:
                            if self.unprepared is not None:
                                await self.prepare()
                            await self.apply(batch)
                        if due:
                            await self.flush()
            async with self.lock:  # a stop: what was applied is committed before leaving
                await self.flush()
        finally:
            await self.consumer.stop()
            await self.producer.stop()

    async def stop(self) -> None:
        self.stopping = True

    async def apply(self, batch: dict[Any, list[Any]]) -> None:
        """Apply one fetch and send what it produced; its states and offsets wait for the
        next ``flush``."""
        sa = self.sa
        pending = self.pending
        self.observer.held = frozenset(map(str, self.holding(batch)))
        t_start = yielded = time.perf_counter()
        for record in in_turns(batch):
            # a fetch is seconds of work: let the trap path in (as the Faust agent does)
            if time.perf_counter() - yielded >= YIELD_EVERY_S:
                await asyncio.sleep(0)
                yielded = time.perf_counter()
            if record.partition not in self.held:
                continue  # revoked while the fetch was under way
            self.counters.current = self.stale.current = record.partition
            raw = record.value or b""
            metrics.consumed(registry.COUNTERS.name)
            try:
                msg = await sa.accept(registry.COUNTERS, raw, record.timestamp, record, pending)
                if isinstance(msg, Counters | CounterColumns):
                    await self.path.process(msg, record.partition, pending)
            except Exception as exc:  # never die on a message
                await sa.failed(raw, exc, record, pending)
        sa.stats["counters_ms"] += (time.perf_counter() - t_start) * 1000
        for tp, records in batch.items():
            if records and tp.partition in self.held:
                self.uncommitted[tp] = records[-1].offset + 1
            if records:
                highwater = self.consumer.highwater(tp)
                if highwater is not None:
                    metrics.lag(tp.topic, tp.partition, highwater - records[-1].offset - 1)

    async def flush(self) -> None:
        """Send the states changed since the last flush, await every output sent since,
        then commit the offsets applied (under the lock)."""
        t_start = time.perf_counter()
        pending, self.pending = self.pending, []
        if self.committed and not await self.still_member():
            # woken after its membership was lost (a stopped process, a paused VM): its
            # states are older than another worker's since; written now they would follow
            # that worker's in the changelog, and a restore would take them for the newest
            self.refuse(set(self.held), "the group no longer has this worker")
            self.uncommitted = {}
            self.flushed_at = time.monotonic()
            return
        # the outputs first, then the states: a state in the changelog then says its
        # messages' outputs went out (after a kill between the two, ``once`` would repeat
        # them from the state's recent ids, but only for a device's last RECENT messages)
        if pending:
            await asyncio.gather(*pending)
        t_encode = time.perf_counter()  # the states are encoded as the stores give them up
        changed = [(store.topic, item) for store in (self.counters, self.stale)
                   for item in store.take_changed()]
        self.sa.stats["persist_ms"] += (time.perf_counter() - t_encode) * 1000
        sent = [await self.producer.send(topic, value, key=key, partition=partition)
                for topic, (key, value, partition) in changed]
        if sent:
            await asyncio.gather(*sent)
        self.sa.stats["counters_ms"] += (time.perf_counter() - t_start) * 1000
        offsets = {tp: o for tp, o in self.uncommitted.items() if tp.partition in self.held}
        self.uncommitted = {}
        self.flushed_at = time.monotonic()
        if offsets:
            try:
                await self.consumer.commit(offsets)
            except (CommitFailedError, IllegalStateError) as exc:
                self.refuse({tp.partition for tp in offsets}, f"commit refused ({exc})")
            else:
                self.committed.update(offsets)

    async def still_member(self) -> bool:
        """Whether the group still has this worker: the offsets it last committed, committed
        again (the broker refuses a member it dropped). One round trip a flush."""
        # a member whose heartbeat already failed has generation -1, and the broker takes
        # a commit of generation -1 when the group is empty (another worker came and went)
        generation = getattr(getattr(self.consumer, "_coordinator", None), "generation", None)
        if generation is not None and (generation < 0 or generation != self.generation):
            return False
        again = {tp: o for tp, o in self.committed.items() if tp.partition in self.held}
        if not again:
            return True  # nothing committed yet in this assignment: nothing to ask with
        try:
            await self.consumer.commit(again)
        except (CommitFailedError, IllegalStateError):  # dropped, or its assignment reset
            return False
        return True

    def refuse(self, partitions: set[int], why: str) -> None:
        """This worker is no longer the group's owner of ``partitions`` (its membership was
        lost): apply nothing more of them and keep none of their states, which are ahead of
        the committed offsets; the next assignment restores them."""
        self.held -= partitions
        self.committed = {tp: o for tp, o in self.committed.items()
                          if tp.partition not in partitions}
        self.counters.drop(partitions)
        self.stale.drop(partitions)
        for p in partitions:
            self.next_offset.pop(p, None)
        log.warning("counters: %s: partitions %s dropped until they are assigned again", why,
                    sorted(partitions))

    def holding(self, batch: dict[Any, list[Any]]) -> set[int]:
        """The held partitions that are not idle for the stale detector's clock while this
        batch is applied: those in it, and those with records not yet read (their high
        watermark past the offset after their last delivered record) or whose end no fetch
        has told yet. One whose fetch came back empty is up to date: it may be idle."""
        for tp, records in batch.items():
            if records and tp.partition in self.held:  # (one revoked meanwhile is skipped)
                self.next_offset[tp.partition] = records[-1].offset + 1
        out = {tp.partition for tp, records in batch.items() if records} & self.held
        for p in self.held - out:
            highwater = self.consumer.highwater(TopicPartition(registry.COUNTERS.name, p))
            after = self.next_offset.get(p)
            if highwater is None or (after is not None and highwater > after):
                out.add(p)
        return out

    async def revoked(self, partitions: set[int]) -> None:
        async with self.lock:  # the batch in hand is applied first, all of it committed
            try:
                await self.flush()
            except Exception:  # aiokafka would log it and rebalance on regardless
                # states it took off for sending may not have reached the changelog, and
                # the offsets past them are not committed: keep none, restore what comes back
                log.exception("counters: the flush before a rebalance failed")
                self.refuse(set(self.held), "the flush before a rebalance failed")
            # their states stay in memory until the assignment: equal to their changelogs
            # (all sent before the commit), so a partition given back needs no restore
            self.kept |= partitions & self.held
            self.held -= partitions
            if self.unprepared is not None:
                self.unprepared -= partitions
        if partitions:
            log.info("counters: partitions %s revoked", sorted(partitions))

    async def assigned(self, partitions: set[int]) -> None:
        """The rebalance callback: only notes the assignment (``prepare`` acts on it)."""
        async with self.lock:
            self.unprepared = set(partitions)
            self.held = set()
            # the generation this assignment belongs to (aiokafka's coordinator has no
            # public accessor): a flush under another one is not this member's
            coordinator = getattr(self.consumer, "_coordinator", None)
            self.generation = getattr(coordinator, "generation", None)

    async def prepare(self) -> None:
        """Make the last assignment's states ready (under the lock, in the run task).

        Partitions given back keep their states when their committed offset is the one
        after this worker's last record of them; otherwise (another worker owned them in
        between: this worker's membership was lost) they are read back like new ones.
        A failed restore raises: the worker stops rather than judge on empty states."""
        partitions, self.unprepared = self.unprepared or set(), None
        gone = self.kept - partitions  # another worker's now; its copy is the truth
        self.counters.drop(gone)
        self.stale.drop(gone)
        for p in gone:
            self.next_offset.pop(p, None)
        starts = await self.start_offsets(partitions)
        moved = {p for p in partitions & self.kept if starts[p] != self.next_offset.get(p)}
        if moved:
            self.counters.drop(moved)
            self.stale.drop(moved)
            log.warning("counters: partitions %s were committed by another worker since "
                        "this one had them: read back", sorted(moved))
        new = partitions - (self.kept - moved)
        self.kept = set()
        n = await self.restore(new) if new else 0
        self.next_offset.update(starts)
        # where the group stands now (another worker's commits included): the membership
        # check re-commits these, never an older offset of this worker's
        self.committed = {TopicPartition(registry.COUNTERS.name, p): o for p, o in starts.items()}
        self.uncommitted = {}
        self.held = set(partitions)
        self.path.reset()
        self.observer.reset()
        log.info("counters: partitions %s assigned (%s restored, %d state record(s))",
                 sorted(partitions), sorted(new), n)

    async def start_offsets(self, partitions: set[int]) -> dict[int, int]:
        """Where this group reads each partition from: its committed offset, or the log's
        beginning (``auto_offset_reset``) when it has none."""
        tps = {p: TopicPartition(registry.COUNTERS.name, p) for p in partitions}
        out: dict[int, int] = {}
        for p, tp in tps.items():
            committed = await self.consumer.committed(tp)
            if committed is not None:
                out[p] = committed
        missing = [tps[p] for p in partitions if p not in out]
        if missing:
            for tp, offset in (await self.consumer.beginning_offsets(missing)).items():
                out[tp.partition] = offset
        return out

    async def restore(self, partitions: set[int]) -> int:
        """Read the changelogs' partitions from the start into the stores."""
        bootstrap = self.sa.settings.kafka.bootstrap_servers
        reader = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                  enable_auto_commit=False, auto_offset_reset="earliest",
                                  max_partition_fetch_bytes=8 << 20)
        await reader.start()
        n = 0
        try:
            stores = {s.topic: s for s in (self.counters, self.stale)}
            tps = [TopicPartition(t, p) for t in stores for p in sorted(partitions)]
            reader.assign(tps)
            ends = await reader.end_offsets(tps)
            # explicit offsets: a seek_to_beginning may not have taken effect when the
            # position is read (seen: the position at the end, nothing restored)
            starts = await reader.beginning_offsets(tps)
            for tp in tps:
                reader.seek(tp, starts[tp])
            left = {tp for tp in tps if ends[tp] > starts[tp]}
            log.info("counters: restoring %d record(s) of %s",
                     sum(ends[tp] - starts[tp] for tp in tps),
                     ", ".join(f"{tp.topic}[{tp.partition}] {starts[tp]}..{ends[tp]}"
                               for tp in tps))
            deadline = time.monotonic() + RESTORE_TIMEOUT_S
            while left:
                if time.monotonic() > deadline:
                    raise KafkaError(f"restoring {sorted(map(str, left))} took over "
                                     f"{RESTORE_TIMEOUT_S:.0f} s")
                batch = await reader.getmany(*left, timeout_ms=500)
                for tp, records in batch.items():
                    for r in records:
                        if r.offset < ends[tp]:
                            stores[tp.topic].restored(r.key, r.value, tp.partition)
                            n += 1
                    if records and records[-1].offset + 1 >= ends[tp]:
                        left.discard(tp)
        finally:
            await reader.stop()
        return n
