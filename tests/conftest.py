"""Session fixtures: the real Kafka broker and Temporal server, each started on first request.

- ``kafka_bootstrap`` -> ``"127.0.0.1:PORT"``: a Kafka 4 broker in KRaft mode with the contract
  topics created (partition counts from the registry).
- ``temporal_target`` -> ``"127.0.0.1:PORT"``: ``temporal server start-dev`` (SQLite file).
  Both are checked for life each time a test asks; one that ended is reported in the
  session's summary (exit status, log tail) and started again once (tests/session_services.py).
- ``stack_settings`` -> ``Settings`` pointing at both, its ``state_dir`` a temporary folder.
  A test that wants a ledger of its own: ``stack_settings.model_copy(update={"state_dir": tmp_path})``.

Each service listens on ports the kernel handed out as free and keeps its data in a temporary
folder, so repeated or parallel sessions do not collide. A service starts only when a test asks
for it, once per session, and stops at the session's end (and with pytest, should it be killed).
The broker's jars are gathered once by Maven into deploy/kafka/libs (`make setup` does it first).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# The repository's packages come first on the path: tests put their helper folders on it
# (tests/integration, for stream_helpers), and a folder there named like a package
# (tests/integration/ledger) would otherwise be imported as a namespace package in its place
# (the editable install's finder comes after the path's).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fabricwatch.stack import LocalStack, StackError  # noqa: E402
from fabricwatch.stack_config import free_ports  # noqa: E402
from runtime.settings import KafkaSettings, Settings, TemporalSettings  # noqa: E402
from tests.session_services import SessionService  # noqa: E402

_REPO = Path(__file__).resolve().parents[1]
_BESIDE = str(_REPO.parent / "shared")  # repo-guard: the path this hook refuses


def _refuse_paths_beside_the_repository(event: str, args: tuple[Any, ...]) -> None:
    """A fresh clone has no ../shared: the suite must not read it (see
    tests/unit/test_repository_stands_alone.py for the static half of this check)."""
    if event not in ("open", "os.listdir", "os.scandir") or not args:
        return
    target = args[0]
    if isinstance(target, int) or target is None:
        return
    path = os.path.abspath(os.fsdecode(target))
    if path == _BESIDE or path.startswith(_BESIDE + os.sep):
        raise PermissionError(f"{path} is outside the repository: a fresh clone has no such folder")


sys.addaudithook(_refuse_paths_beside_the_repository)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """In CI (``CI=true``, as ``.ci/run`` runs) a lab test skipped because ibsim, opensm or
    infiniband-diags could not be installed, or a browser test without chromium, is a
    failure: coverage must not vanish quietly. On a developer's machine without root it
    stays a skip, with the warning from ``make lab-deps`` / ``make browser-deps``."""
    report = yield
    marker = next((m for m in ("lab", "browser") if item.get_closest_marker(m) is not None),
                  None)
    if report.skipped and os.environ.get("CI", "").lower() == "true" and marker is not None:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = (f"{marker} test skipped in CI, where its tools must be installed: "
                           f"{reason}")
    return report

_PORT_TRIES = 3  # a port found free can be taken by another process before the service binds it
_START_TIMEOUT_S = 180.0  # generous: a cold JVM on a loaded 2-core CI machine


def _start(settings: Settings, service: str) -> LocalStack:
    stack = LocalStack(settings, services=[service], timeout=_START_TIMEOUT_S)
    stack.up()
    return stack


def _with_free_ports(state_dir: Path, service: str) -> Iterator[SessionService]:
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
            yield SessionService(stack, service, _ENDINGS)
        finally:
            stack.down()
        return
    raise AssertionError(f"no free ports for {service} after {_PORT_TRIES} tries: {last}")


_ENDINGS: list[str] = []  # each session service that ended under the session


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for report in _ENDINGS:
        terminalreporter.section("a session service ended and was started again", sep="!")
        terminalreporter.write_line(report)


@pytest.fixture(scope="session")
def _stack_state_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("stack")


@pytest.fixture(scope="session")
def _kafka_stack(_stack_state_dir: Path) -> Iterator[SessionService]:
    yield from _with_free_ports(_stack_state_dir, "kafka")


@pytest.fixture(scope="session")
def _temporal_stack(_stack_state_dir: Path) -> Iterator[SessionService]:
    yield from _with_free_ports(_stack_state_dir, "temporal")


@pytest.fixture
def kafka_bootstrap(_kafka_stack: SessionService) -> str:
    """The real broker's bootstrap address, ``127.0.0.1:PORT``."""
    return _kafka_stack.alive().settings.kafka.bootstrap_servers


@pytest.fixture
def temporal_target(_temporal_stack: SessionService) -> str:
    """The real Temporal dev server's frontend, ``127.0.0.1:PORT`` (namespace ``default``)."""
    return _temporal_stack.alive().settings.temporal.target


@pytest.fixture
def stack_settings(_kafka_stack: SessionService, _temporal_stack: SessionService,
                   _stack_state_dir: Path) -> Settings:
    """Settings pointing at the session's broker and Temporal server; state in a temporary folder."""
    return Settings(
        state_dir=_stack_state_dir,
        clickhouse_url=None,
        kafka=_kafka_stack.alive().settings.kafka,
        temporal=_temporal_stack.alive().settings.temporal,
    )
