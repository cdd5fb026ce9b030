"""The worker's Kafka transport: Faust's aiokafka transport, with its start-up topic
declarations retried while a broker of the cluster is down.

At start Faust declares the topics it owns (the leader assignor's, changelogs, agent
topics) by sending CreateTopics to the node the cluster names as its controller. For some
seconds after a broker dies (until the cluster fences it) that node may be the dead broker:
the request fails with ``NodeNotReadyError`` and the worker exits at start, again at every
restart inside that window (seen in the cluster soak: a stream worker restarted while a
broker was down exited at start three times in a row). ``retry_kafka`` serves this and
``StreamsApp.ensure_topics``: here a retriable Kafka error is tried again after fresh
metadata, until ``ENSURE_TOPICS_S``.

Offsets are committed only past state that is on its way (``CommitGate``). Faust flushes
its producer before an offset commit, but the flush of its buffer
(``ProducerBuffer.flush``) returns once 0.1 s passes without a send, with table changelog
records possibly still queued; a commit could then pass state still in memory, and a kill -9
restart from a state lacking messages it never reads again. Here the buffer counts the
records queued and handed on to the Kafka client, and each commit passes only the offsets
acked before the records handed on so far (whose delivery the client's flush then waits
for). Nothing waits for the queue to drain: waiting for it was tried, and under the demo's
load every commit took 1-3.4 s and Faust's inline commit stalled delivery that long
(BENCHMARKS.md, "The flush before a commit"); what is not ready goes with a later commit.
At stop (and in a rebalance, for the partitions kept) the commit does wait, up to
``SETTLE_WAIT_S``, so a restart starts from everything this worker did. The batched counters consumer
(``streams.counters.batched``) keeps its own rule: it commits after its states are delivered.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import faust
from aiokafka.errors import KafkaError  # type: ignore[import-untyped]
from faust.exceptions import ProducerSendError
from faust.transport.drivers.aiokafka import Consumer as FaustAIOKafkaConsumer
from faust.transport.drivers.aiokafka import Producer as FaustAIOKafkaProducer
from faust.transport.drivers.aiokafka import Transport as FaustAIOKafkaTransport
from faust.transport.producer import ProducerBuffer
from faust.types import TP

from streams.commit_gate import CommitGate

log = logging.getLogger(__name__)

ENSURE_TOPICS_S = 120.0  # how long a starting worker retries creating a topic
RETRY_PAUSE_S = 2.0
SETTLE_WAIT_S = 10.0  # a rebalance's or a stop's commit waits this long for queued records


async def retry_kafka(what: str, attempt: Callable[[], Awaitable[None]], *,
                      retriable: Callable[[KafkaError], bool] = lambda exc: True,
                      stopping: Callable[[], bool] = lambda: False,
                      refresh: Callable[[], Awaitable[Any]] | None = None) -> None:
    """Run ``attempt`` until it succeeds; a Kafka error ``retriable`` accepts is logged and
    tried again every ``RETRY_PAUSE_S`` (after ``refresh``, fresh metadata) until
    ``ENSURE_TOPICS_S`` has passed or the caller is ``stopping``, then raised."""
    deadline = time.monotonic() + ENSURE_TOPICS_S
    while True:
        try:
            await attempt()
            return
        except KafkaError as exc:
            if not retriable(exc) or stopping() or time.monotonic() > deadline:
                raise
            log.warning("%s failed (%r); trying again", what, exc)
        await asyncio.sleep(RETRY_PAUSE_S)
        if refresh is not None:
            await refresh()


class CountingBuffer(ProducerBuffer):
    """Faust's producer buffer, counting the records queued and those handed on to the
    Kafka client (in queue order: one task hands them on, one at a time)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.queued = 0
        self.handed = 0
        self._handed_one = asyncio.Event()

    def put(self, fut: Any) -> None:
        self.queued += 1
        super().put(fut)

    async def _send_pending(self, fut: Any) -> None:
        await super()._send_pending(fut)
        self.handed += 1  # only once the client has it: a failed send is never passed
        self._handed_one.set()

    async def handed_through(self, mark: int) -> None:
        """Return once ``mark`` records have been handed on."""
        while self.handed < mark:
            self._handed_one.clear()
            await self._handed_one.wait()


class CountingProducer(FaustAIOKafkaProducer):
    def __init__(self, transport: Any, loop: Any = None, **kwargs: Any) -> None:
        super().__init__(transport, loop=loop, **kwargs)
        if self.app.conf.producer_threaded:  # its queue lives in the producer's thread
            log.warning("producer_threaded: the commit gate is off, offsets are committed "
                        "as Faust commits them (past changelog records still queued)")
            return
        buffer = CountingBuffer(loop=self.loop, beacon=self.beacon)
        buffer.app = self.app
        self.buffer = buffer


class GatedConsumer(FaustAIOKafkaConsumer):
    """Faust's consumer, committing an offset only once the changelog records queued before
    it was acked have been handed on (``CommitGate``)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.gate: CommitGate[TP] = CommitGate()

    async def _commit_tps(self, tps: Any, start_new_transaction: bool) -> bool:
        buffer = self.app.producer.buffer
        if not isinstance(buffer, CountingBuffer) or self.in_transaction:
            return bool(await super()._commit_tps(tps, start_new_transaction))
        fresh = self._filter_committable_offsets(tps)
        if fresh:
            try:  # messages attached to these offsets go first, as in Faust's own commit
                await self._handle_attached(fresh)
            except ProducerSendError as exc:
                await self.crash(exc)
                return False
            self.gate.offer(fresh, buffer.queued)
        if not self.gate:
            return False
        if self.app.rebalancing or self.should_stop or self.app.should_stop:
            try:
                async with asyncio.timeout(SETTLE_WAIT_S):
                    await buffer.handed_through(self.gate.last_mark)
            except TimeoutError:
                log.warning("commit: %d changelog records still queued after %.0f s; "
                            "committing only the offsets before them",
                            buffer.queued - buffer.handed, SETTLE_WAIT_S)
        else:
            await buffer.flush()  # hands on what it can now (until 0.1 s without a send)
        ready = self.gate.ready(buffer.handed)
        if not ready:
            return False
        return bool(await self._commit_offsets(ready, start_new_transaction=start_new_transaction))

    async def on_partitions_revoked(self, revoked: set[TP]) -> None:
        # Faust forgets the revoked partitions' acks before its revocation commit; what
        # waits for them goes the same way (their next owner reads them again)
        self.gate.forget(revoked)
        await super().on_partitions_revoked(revoked)


class WorkerTransport(FaustAIOKafkaTransport):
    Consumer = GatedConsumer
    Producer = CountingProducer

    async def _really_create_topic(self, owner: Any, client: Any, topic: str,
                                   partitions: int, replication: int, **kwargs: Any) -> None:
        create = super()._really_create_topic
        # a refusal (not retriable: a bad config, no authorisation) is raised at once
        await retry_kafka(f"declaring topic {topic}",
                          lambda: create(owner, client, topic, partitions, replication,
                                         **kwargs),
                          retriable=lambda exc: bool(exc.retriable),
                          stopping=lambda: bool(owner.should_stop),
                          # the controller and the live brokers as the cluster sees them now
                          refresh=client.force_metadata_update)


def install_worker_transport(app: faust.App) -> None:
    """Make ``app`` use ``WorkerTransport`` (before its producer or consumer exist)."""
    app.transport = WorkerTransport(app.conf.broker_consumer, app)
