"""LocalStack without services: stale pid records, refusals before anything starts, the CLI's codes.

Starts no service: the checks here fail (on purpose) before a process would be spawned.
"""

from __future__ import annotations

import os
import shutil
import socket
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from fabricwatch.cli import main
from fabricwatch.stack import (
    LocalStack,
    StackError,
    _group_members,
    _PidRecord,
    _proc_stat,
    ensure_kafka_jars,
    find_java,
)
from fabricwatch.stack_config import KAFKA_HOME, StackConfigError, free_ports
from runtime.settings import KafkaSettings, Settings, TemporalSettings


def _settings(tmp_path: Path) -> Settings:
    kp, kc, tp, tu = free_ports(4)
    return Settings(state_dir=tmp_path, kafka=KafkaSettings(port=kp, controller_port=kc),
                    temporal=TemporalSettings(port=tp, ui_port=tu))


def test_proc_stat_reads_this_process() -> None:
    stat = _proc_stat(os.getpid())
    assert stat is not None
    state, pgid, ticks = stat
    assert state in "RS" and pgid == os.getpgid(0) and ticks > 0
    assert os.getpid() in _group_members(os.getpgid(0))


def test_status_of_an_empty_state_folder_is_stopped(tmp_path: Path) -> None:
    statuses = LocalStack(_settings(tmp_path)).status()
    assert [(s.name, s.state) for s in statuses] == [("kafka", "stopped"), ("temporal", "stopped")]


def test_a_recycled_pid_is_not_ours(tmp_path: Path) -> None:
    """A pid record whose start time differs names another process: never signalled, cleaned up."""
    stack = LocalStack(_settings(tmp_path))
    stack.run_dir.mkdir(parents=True)
    me = _proc_stat(os.getpid())
    assert me is not None
    _PidRecord("temporal", os.getpid(), me[2] + 1, "x", "t", True).save(stack.run_dir / "temporal.json")
    assert [s.state for s in stack.status()] == ["stopped", "stopped"]
    assert stack.down() == []  # this test process is still alive, i.e. was not signalled
    assert not (stack.run_dir / "temporal.json").exists()


def test_a_taken_port_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        ui_port = free_ports(1)[0]
        settings = Settings(state_dir=tmp_path, temporal=TemporalSettings(port=port, ui_port=ui_port))
        with pytest.raises(StackError, match=rf"temporal.port 127.0.0.1:{port} is in use"):
            LocalStack(settings, services=["temporal"]).up()
    assert not (tmp_path / "run" / "temporal.json").exists()


def test_unknown_service_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StackConfigError, match="unknown services"):
        LocalStack(_settings(tmp_path), services=["zookeeper"])


def test_external_services_are_not_managed(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path, kafka=KafkaSettings(bootstrap="kafka.example:9092"),
                        temporal=TemporalSettings(address="temporal.example:7233"))
    stack = LocalStack(settings)
    assert stack.external("kafka") and stack.external("temporal")
    assert stack.down() == []


def test_cli_status_exit_code_and_bad_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if k.startswith("FABRICWATCH_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("FABRICWATCH_STATE_DIR", str(tmp_path))
    kp, kc, tp, tu = free_ports(4)
    monkeypatch.setenv("FABRICWATCH_KAFKA__PORT", str(kp))
    monkeypatch.setenv("FABRICWATCH_TEMPORAL__PORT", str(tp))
    runner = CliRunner()
    result = runner.invoke(main, ["stack", "status"])
    assert result.exit_code == 3 and "kafka     stopped" in result.output
    assert runner.invoke(main, ["stack", "down"]).output.strip() == "nothing was running"
    monkeypatch.setenv("FABRICWATCH_KAFKA__HEAP", "-jar evil.jar")
    result = runner.invoke(main, ["stack", "up", "--only", "kafka"])
    assert result.exit_code == 2 and "kafka.heap" in result.output


def test_missing_java_is_named_with_the_fix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty PATH: no java, no mvn
    with pytest.raises(StackError, match=r"Java 17\+ runtime and no `java` is on PATH.*apt-get install"):
        find_java()


def test_missing_maven_is_named_with_the_fix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    home = tmp_path / "kafka"
    home.mkdir()
    shutil.copy(KAFKA_HOME / "pom.xml", home / "pom.xml")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(StackError, match=r"Maven is not installed.*apt-get install -y maven"):
        ensure_kafka_jars(home, tmp_path / "maven.log")


def test_fetched_jars_are_not_fetched_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A libs folder with its stamp newer than the pom is taken as is (no mvn on PATH needed)."""
    home = tmp_path / "kafka"
    (home / "libs").mkdir(parents=True)
    shutil.copy(KAFKA_HOME / "pom.xml", home / "pom.xml")
    (home / "libs" / "kafka_2.13-4.1.1.jar").write_bytes(b"")
    (home / "libs" / ".complete").touch()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert ensure_kafka_jars(home) == home / "libs"
    os.utime(home / "pom.xml", (time.time() + 10, time.time() + 10))  # the pom changed since
    with pytest.raises(StackError, match="Maven is not installed"):
        ensure_kafka_jars(home, tmp_path / "maven.log")
