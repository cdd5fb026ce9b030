"""LocalCluster without services: refusals before anything starts, the CLI's codes, records."""

from __future__ import annotations

import os
import signal
import socket
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from fabricwatch.cli import main
from fabricwatch.cluster import ClusterOptions, LocalCluster
from fabricwatch.stack import StackError
from fabricwatch.stack_config import free_ports
from runtime.procgroups import group_members
from runtime.settings import KafkaSettings, LedgerSettings, Settings, TemporalSettings


def _settings(tmp_path: Path) -> tuple[Settings, list[tuple[int, int]]]:
    ports = free_ports(9)
    pairs = list(zip(ports[0:6:2], ports[1:6:2], strict=True))
    return Settings(state_dir=tmp_path, kafka=KafkaSettings(port=pairs[0][0]),
                    temporal=TemporalSettings(port=ports[6], ui_port=ports[7]),
                    ledger=LedgerSettings(http_port=ports[8])), pairs


def test_a_taken_broker_port_is_refused_before_anything_starts(tmp_path: Path) -> None:
    settings, pairs = _settings(tmp_path)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", pairs[1][0]))
        holder.listen(1)
        cluster = LocalCluster(settings, ClusterOptions(kafka_ports=pairs))
        with pytest.raises(StackError, match=rf"kafka-2 127.0.0.1:{pairs[1][0]} is in use"):
            cluster.up()
    assert not cluster.has_records()
    assert cluster.components() == ["kafka-1", "kafka-2", "kafka-3", "ledger", "ingest",
                                    "worker-0", "worker-1", "runbooks-0", "runbooks-1", "sim"]


def test_children_get_the_cluster_settings_and_the_ingest_the_server_backend(
        tmp_path: Path) -> None:
    settings, pairs = _settings(tmp_path)
    cluster = LocalCluster(settings, ClusterOptions(kafka_ports=pairs, faults=("flap:x:1",)))
    env = cluster.env()
    assert env["FABRICWATCH_KAFKA__BOOTSTRAP"] == ",".join(f"127.0.0.1:{p}" for p, _ in pairs)
    assert env["FABRICWATCH_STREAMS__TOPIC_REPLICATION_FACTOR"] == "3"
    assert env["FABRICWATCH_STREAMS__STANDBY_REPLICAS"] == "1"
    assert "FABRICWATCH_CLICKHOUSE_URL" not in env  # only the ingest writes through the server
    argv, ingest_env = cluster._argv("ingest")
    assert argv[-2:] == ["ledger", "ingest"]
    url = ingest_env["FABRICWATCH_CLICKHOUSE_URL"]
    assert url == f"http://fabricwatch@127.0.0.1:{settings.ledger.http_port}"
    # the password is in a file the child reads, never on a command line or in the URL
    assert ingest_env["FABRICWATCH_SECRETS__CLICKHOUSE_PASSWORD_FILE"] == str(
        cluster.password_file)
    sim_argv, _ = cluster._argv("sim")
    assert sim_argv[-2:] == ["--fault", "flap:x:1"] and "10k-port" in sim_argv


def test_kill_and_stop_reach_the_process_group_and_leave_no_record(tmp_path: Path) -> None:
    settings, pairs = _settings(tmp_path)
    cluster = LocalCluster(settings, ClusterOptions(kafka_ports=pairs))
    cluster.run_dir.mkdir(parents=True)
    cluster.logs_dir.mkdir(parents=True)
    sleeper = [sys.executable, "-c", "import subprocess, sys, time; "
               "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
               "time.sleep(60)"]
    cluster._spawn("worker-0", sleeper, dict(os.environ), tmp_path)
    cluster._spawn("ingest", sleeper, dict(os.environ), tmp_path)
    assert cluster.has_records() and cluster.running()["worker-0"]
    pgid = cluster.spawned[0]
    assert cluster.kill("worker-0", signal.SIGKILL)
    assert not group_members(pgid) and not cluster.running()["worker-0"]
    assert not cluster.kill("worker-0")  # nothing left to kill
    # another process (`stack down`) finds the rest through the pid records
    assert "ingest" in LocalCluster(settings, ClusterOptions(kafka_ports=pairs)).down()
    for proc in cluster._procs.values():  # reap it here: it was another object's to stop
        proc.wait(timeout=10)
    assert not any(group_members(p) for p in cluster.spawned)
    assert not cluster.has_records()


def test_cli_cluster_options_are_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in [k for k in os.environ if k.startswith("FABRICWATCH_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("FABRICWATCH_STATE_DIR", str(tmp_path))
    runner = CliRunner()
    result = runner.invoke(main, ["stack", "up", "--preset", "10k-port"])
    assert result.exit_code == 2 and "need --cluster" in result.output
    result = runner.invoke(main, ["stack", "up", "--cluster", "--fault", "flap:no-such-device:1"])
    assert result.exit_code == 2, result.output
    result = runner.invoke(main, ["stack", "up", "--cluster", "--only", "kafka"])
    assert result.exit_code == 2 and "--only and --cluster" in result.output
    assert not (tmp_path / "run" / "cluster").exists()
