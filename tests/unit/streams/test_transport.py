"""Faust's start-up topic declarations are retried on a retriable Kafka error.

The failure is injected at Faust's own ``_really_create_topic`` (the CreateTopics request
to the node the cluster names as controller): a real dead-broker window is a few seconds
wide and is what the cluster soak (``tests/integration/test_cluster.py``) runs into."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka.errors import (  # type: ignore[import-untyped]
    NodeNotReadyError,
    TopicAuthorizationFailedError,
)
from faust.transport.drivers.aiokafka import Transport as FaustAIOKafkaTransport

from runtime.settings import Settings
from schemas.policy import Policy
from streams import transport
from streams.app import StreamsApp


class Client:
    def __init__(self) -> None:
        self.refreshed = 0

    async def force_metadata_update(self) -> bool:
        self.refreshed += 1
        return True


class Owner:
    should_stop = False


def failing(errors: list[Exception], calls: list[str]) -> Any:
    async def create(self: Any, owner: Any, client: Any, topic: str, partitions: int,
                     replication: int, **kwargs: Any) -> None:
        calls.append(topic)
        if errors:
            raise errors.pop(0)
    return create


def declare(monkeypatch: pytest.MonkeyPatch, errors: list[Exception], owner: Any = None
            ) -> tuple[list[str], Client]:
    calls: list[str] = []
    monkeypatch.setattr(FaustAIOKafkaTransport, "_really_create_topic", failing(errors, calls))
    monkeypatch.setattr(transport, "RETRY_PAUSE_S", 0.0)
    tr = transport.WorkerTransport.__new__(transport.WorkerTransport)
    client = Client()
    asyncio.run(tr._really_create_topic(owner or Owner(), client, "t", 1, 1))
    return calls, client


def test_a_dead_controller_is_tried_again_with_fresh_metadata(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    calls, client = declare(monkeypatch, [NodeNotReadyError("node 1"),
                                          NodeNotReadyError("node 1")])
    assert calls == ["t", "t", "t"]
    assert client.refreshed == 2
    assert "declaring topic t failed" in caplog.text


def test_a_refusal_is_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(TopicAuthorizationFailedError):
        declare(monkeypatch, [TopicAuthorizationFailedError("no")])


def test_a_stopping_worker_does_not_retry(monkeypatch: pytest.MonkeyPatch) -> None:
    owner = Owner()
    owner.should_stop = True
    with pytest.raises(NodeNotReadyError):
        declare(monkeypatch, [NodeNotReadyError("node 1")], owner)


def test_the_retry_gives_up_after_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transport, "ENSURE_TOPICS_S", -1.0)
    with pytest.raises(NodeNotReadyError):
        declare(monkeypatch, [NodeNotReadyError("node 1")])


def test_the_worker_app_declares_through_it() -> None:
    sa = StreamsApp(Settings(), Policy())
    assert isinstance(sa.app.transport, transport.WorkerTransport)


def test_the_worker_s_own_topic_creation_tries_any_kafka_error_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # StreamsApp.ensure_topics: a new admin client per try, whatever the error was
    monkeypatch.setattr(transport, "RETRY_PAUSE_S", 0.0)
    errors: list[Exception] = [TopicAuthorizationFailedError("t"), NodeNotReadyError("n")]
    tries: list[int] = []

    async def attempt() -> None:
        tries.append(1)
        if errors:
            raise errors.pop(0)

    asyncio.run(transport.retry_kafka("creating the topics", attempt))
    assert len(tries) == 3
    errors[:] = [TopicAuthorizationFailedError("t")]
    with pytest.raises(TopicAuthorizationFailedError):
        asyncio.run(transport.retry_kafka("declaring", attempt,
                                          retriable=lambda exc: bool(exc.retriable)))
