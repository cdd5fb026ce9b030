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

Known gap, left as Faust has it: the flush before an offset commit (Faust's
``ProducerBuffer.flush``) returns once 0.1 s passes without a send, with table changelog
records possibly still queued, so a commit can pass state still in memory and a kill -9
then would restart from a state lacking messages it never sees again. Waiting for the
whole queue instead was tried and taken out: under the demo's load every commit then took
1-3.4 s, and Faust's inline commit every ``broker_commit_every`` messages stalled delivery
that long (BENCHMARKS.md, "The flush before a commit"). The batched counters consumer
(``streams.counters.batched``) commits only after its states are delivered; the other
agents' tables keep the gap.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import faust
from aiokafka.errors import KafkaError  # type: ignore[import-untyped]
from faust.transport.drivers.aiokafka import Transport as FaustAIOKafkaTransport

log = logging.getLogger(__name__)

ENSURE_TOPICS_S = 120.0  # how long a starting worker retries creating a topic
RETRY_PAUSE_S = 2.0


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


class WorkerTransport(FaustAIOKafkaTransport):
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
