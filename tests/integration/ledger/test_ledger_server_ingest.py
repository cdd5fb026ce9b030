"""`fabricwatch ledger ingest`: the topics into a ClickHouse server, by two processes in one
group, one of them killed mid-way — nothing lost, nothing doubled, the deltas right.

The server is the embedded ledger's own ClickHouse HTTP endpoint with writes allowed (the
real engine behind the real HTTP interface clickhouse-connect speaks); the ingest processes
reach it exactly as they would reach a ClickHouse server, through FABRICWATCH_CLICKHOUSE_URL.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger.embedded import EmbeddedLedger
from ledger.http import LedgerHTTPServer
from schemas import Counters, PortEvent, PortSample
from schemas.events import Event

from ..stream_helpers import publish

pytestmark = pytest.mark.integration

DEVICES = [f"leaf-su01-r{r}" for r in range(8)]  # keyed by device: spread over partitions
POLLS = 6


@pytest.fixture
def endpoint(ledger: EmbeddedLedger, tmp_path: Path) -> Iterator[str]:
    with LedgerHTTPServer(ledger, port=0, allow_writes=True) as server:
        yield server.start()


def _ingest(endpoint: str, bootstrap: str, group: str, state: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "FABRICWATCH_CLICKHOUSE_URL": endpoint,
           "FABRICWATCH_KAFKA__BOOTSTRAP": bootstrap,
           "FABRICWATCH_STATE_DIR": str(state)}
    with (state / f"ingest-{time.monotonic_ns()}.log").open("wb") as log:
        return subprocess.Popen([sys.executable, "-m", "fabricwatch", "ledger", "ingest",
                                 "--group", group], env=env, stdout=log,
                                stderr=subprocess.STDOUT)


def _polls(fabric: str, t0: int, polls: range) -> list[Event]:
    # symbol_errors grows by (device index + 1) * poll on port 1 and by 1 per poll on port 2
    return [Counters(id=f"{fabric}-{d}-{i}", ts=t0 + i * 10_000, fabric=fabric, source="sim",
                     device=dev, ports=[PortSample(port=1, symbol_errors=(d + 1) * i * i),
                                        PortSample(port=2, symbol_errors=i)])
            for i in polls for d, dev in enumerate(DEVICES)]


def _wait(ledger: EmbeddedLedger, sql: str, params: dict[str, object], want: int,
          timeout_s: float = 120) -> int:
    deadline = time.monotonic() + timeout_s
    n = -1
    while time.monotonic() < deadline:
        n = int(ledger.query(sql, params)[0]["n"])
        if n >= want:
            return n
        time.sleep(0.5)
    return n


def test_two_ingest_processes_share_the_topics_and_survive_a_kill(
        ledger: EmbeddedLedger, endpoint: str, kafka_bootstrap: str, tmp_path: Path) -> None:
    fabric = f"ingest-srv-{uuid.uuid4().hex[:8]}"
    group = f"ledger-{fabric}"
    t0 = (int(time.time()) - 600) * 1000
    samples = "SELECT count() AS n FROM counter_samples FINAL WHERE fabric = {f:String}"
    first = [*_polls(fabric, t0, range(3)),
             PortEvent(id=f"{fabric}-down", ts=t0, fabric=fabric, source="opensm",
                       device=DEVICES[0], port=1, state="down")]
    procs = [_ingest(endpoint, kafka_bootstrap, group, tmp_path) for _ in range(2)]
    try:
        asyncio.run(publish(kafka_bootstrap, first))
        assert _wait(ledger, samples, {"f": fabric}, 3 * len(DEVICES) * 2) == 3 * 8 * 2
        # one of the two dies without committing anything more; the other takes its partitions
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(30)
        asyncio.run(publish(kafka_bootstrap, _polls(fabric, t0, range(3, POLLS))))
        assert _wait(ledger, samples, {"f": fabric}, POLLS * 8 * 2) == POLLS * 8 * 2
        # a replay of everything (a crashed writer's uncommitted batch) adds nothing
        asyncio.run(publish(kafka_bootstrap, _polls(fabric, t0, range(POLLS))))
        time.sleep(5)
        assert _wait(ledger, samples, {"f": fabric}, 0) == POLLS * 8 * 2
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)

    events = ledger.query("SELECT count() AS n FROM port_events FINAL WHERE fabric = {f:String}",
                          {"f": fabric})
    assert events[0]["n"] == 1
    deltas = ledger.query(
        "SELECT device, port, sum(d_symbol_errors) AS total, groupArray(d_symbol_errors) AS d "
        "FROM (SELECT * FROM counter_samples FINAL WHERE fabric = {f:String} ORDER BY ts) "
        "GROUP BY device, port ORDER BY device, port", {"f": fabric})
    last = POLLS - 1
    for row in deltas:
        d = DEVICES.index(row["device"])
        # the first sample of a port has no previous one (delta 0); then every step's growth
        want = (d + 1) * last * last if row["port"] == 1 else last
        assert row["total"] == want, row
        assert sorted(row["d"]) == sorted(
            [0] + [((d + 1) * (i * i - (i - 1) * (i - 1))) if row["port"] == 1 else 1
                   for i in range(1, POLLS)]), row
    assert len(deltas) == len(DEVICES) * 2


def test_ingest_refuses_to_run_without_a_server(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "FABRICWATCH_CLICKHOUSE_URL"}
    env["FABRICWATCH_STATE_DIR"] = str(tmp_path)
    done = subprocess.run([sys.executable, "-m", "fabricwatch", "ledger", "ingest"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "FABRICWATCH_CLICKHOUSE_URL" in done.stderr
