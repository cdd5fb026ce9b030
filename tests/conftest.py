"""Session fixtures: the real Kafka broker and Temporal server, each started on first request.

- ``kafka_bootstrap`` -> ``"127.0.0.1:PORT"``: a Kafka 4 broker in KRaft mode with the contract
  topics created (partition counts from the registry).
- ``temporal_target`` -> ``"127.0.0.1:PORT"``: ``temporal server start-dev`` (SQLite file).
- ``stack_settings`` -> ``Settings`` pointing at both, its ``state_dir`` a temporary folder.
  A test that wants a ledger of its own: ``stack_settings.model_copy(update={"state_dir": tmp_path})``.

Each service listens on ports the kernel handed out as free and keeps its data in a temporary
folder, so repeated or parallel sessions do not collide. A service starts only when a test asks
for it, once per session, and stops at the session's end (and with pytest, should it be killed).
The broker's jars are gathered once by Maven into deploy/kafka/libs (`make setup` does it first).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fabricwatch.settings import KafkaSettings, Settings, TemporalSettings
from fabricwatch.stack import LocalStack, StackError
from fabricwatch.stack_config import free_ports

_PORT_TRIES = 3  # a port found free can be taken by another process before the service binds it
_START_TIMEOUT_S = 180.0  # generous: a cold JVM on a loaded 2-core CI machine


def _start(settings: Settings, service: str) -> LocalStack:
    stack = LocalStack(settings, services=[service], timeout=_START_TIMEOUT_S)
    stack.up()
    return stack


def _with_free_ports(state_dir: Path, service: str) -> Iterator[LocalStack]:
    last: StackError | None = None
    for _ in range(_PORT_TRIES):
        a, b = free_ports(2)
        if service == "kafka":
            settings = Settings(state_dir=state_dir, kafka=KafkaSettings(port=a, controller_port=b))
        else:
            settings = Settings(state_dir=state_dir, temporal=TemporalSettings(port=a, ui_port=b))
        try:
            stack = _start(settings, service)
        except StackError as exc:
            if "in use" not in str(exc):
                raise
            last = exc
            continue
        try:
            yield stack
        finally:
            stack.down()
        return
    raise AssertionError(f"no free ports for {service} after {_PORT_TRIES} tries: {last}")


@pytest.fixture(scope="session")
def _stack_state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("stack")


@pytest.fixture(scope="session")
def _kafka_stack(_stack_state_dir: Path) -> Iterator[LocalStack]:
    yield from _with_free_ports(_stack_state_dir, "kafka")


@pytest.fixture(scope="session")
def _temporal_stack(_stack_state_dir: Path) -> Iterator[LocalStack]:
    yield from _with_free_ports(_stack_state_dir, "temporal")


@pytest.fixture(scope="session")
def kafka_bootstrap(_kafka_stack: LocalStack) -> str:
    """The real broker's bootstrap address, ``127.0.0.1:PORT``."""
    return _kafka_stack.settings.kafka.bootstrap_servers


@pytest.fixture(scope="session")
def temporal_target(_temporal_stack: LocalStack) -> str:
    """The real Temporal dev server's frontend, ``127.0.0.1:PORT`` (namespace ``default``)."""
    return _temporal_stack.settings.temporal.target


@pytest.fixture(scope="session")
def stack_settings(_kafka_stack: LocalStack, _temporal_stack: LocalStack, _stack_state_dir: Path,
                   ) -> Settings:
    """Settings pointing at the session's broker and Temporal server; state in a temporary folder."""
    return Settings(
        state_dir=_stack_state_dir,
        clickhouse_url=None,
        kafka=_kafka_stack.settings.kafka,
        temporal=_temporal_stack.settings.temporal,
    )
