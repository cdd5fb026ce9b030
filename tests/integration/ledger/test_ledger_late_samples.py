"""Two ingest processes, samples late and out of order, a replayed batch, a writer killed:
the hourly rollups equal what the raw samples give in event-time order.

Real parts: the broker, two ``fabricwatch ledger ingest`` processes in one consumer group
writing through the server backend (clickhouse-connect) to the embedded ledger's ClickHouse
HTTP endpoint, and the engine's materialized views computing the deltas and the hours.

Each device's counters are keyed by the device, so they sit on one partition and have one
writer at a time; the samples of a port are published shuffled, each within the lateness
(``ledger.counter_lateness_s``, 8 s here) of its ``ts``; one sample is published far later
than that and must be found in ``counter_late_samples``, not lost and not in the deltas.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient  # type: ignore[import-untyped]
from aiokafka.errors import KafkaError  # type: ignore[import-untyped]

from ledger.embedded import EmbeddedLedger
from ledger.http import LedgerHTTPServer
from schemas import Counters, PortSample, message_key

from ..stream_helpers import publish

pytestmark = pytest.mark.integration

LATENESS_S = 8
DEVICES = [f"leaf-su02-r{r}" for r in range(8)]
POLLS = 8  # per wave, 300 ms apart
HOUR_MS = 3_600_000
FIELDS = ("symbol_errors", "port_xmit_data", "phy_link_down")


@pytest.fixture
def endpoint(ledger: EmbeddedLedger) -> Iterator[str]:
    with LedgerHTTPServer(ledger, port=0, allow_writes=True) as server:
        yield server.start()


def _ingest(endpoint: str, bootstrap: str, group: str, state: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "FABRICWATCH_CLICKHOUSE_URL": endpoint,
           "FABRICWATCH_KAFKA__BOOTSTRAP": bootstrap, "FABRICWATCH_STATE_DIR": str(state),
           "FABRICWATCH_LEDGER__COUNTER_LATENESS_S": str(LATENESS_S)}
    with (state / f"ingest-{time.monotonic_ns()}.log").open("wb") as log:
        return subprocess.Popen([sys.executable, "-m", "fabricwatch", "ledger", "ingest",
                                 "--group", group], env=env, stdout=log,
                                stderr=subprocess.STDOUT)


def _wave(fabric: str, tag: str, t0: int, rng: random.Random,
          counters: dict[tuple[str, int], dict[str, int]]) -> list[Counters]:
    """POLLS samples of every device's ports 1 and 2 from ``t0``, 300 ms apart, going on
    from ``counters`` (cumulative, growing; port 2's symbol errors cleared once a wave)."""
    events = []
    for d, dev in enumerate(DEVICES):
        for i in range(POLLS):
            ports = []
            for p in (1, 2):
                now = counters.setdefault((dev, p), dict.fromkeys(FIELDS, 0))
                now["symbol_errors"] += rng.randint(0, 5) * (d + 1)
                now["port_xmit_data"] += rng.randint(10**6, 10**9)
                now["phy_link_down"] += rng.randint(0, 1)
                if p == 2 and i == POLLS // 2:
                    now["symbol_errors"] = 0  # the counter was cleared
                ports.append(PortSample(port=p, **now))
            events.append(Counters(id=f"{fabric}-{tag}-{d}-{i}", ts=t0 + i * 300,
                                   fabric=fabric, source="sim", device=dev, ports=ports))
    return events


def _expected(samples: list[Counters]) -> dict[tuple[str, int, int], dict[str, int]]:
    """The hourly rollup from the raw samples, each port's chain in event-time order."""
    chains: dict[tuple[str, int], list[tuple[int, PortSample]]] = {}
    for ev in samples:
        for s in ev.ports:
            chains.setdefault((ev.device, s.port), []).append((ev.ts, s))
    out: dict[tuple[str, int, int], dict[str, int]] = {}
    for (dev, port), chain in chains.items():
        chain.sort(key=lambda c: c[0])
        prev: tuple[int, PortSample] | None = None
        for ts, s in chain:
            row = out.setdefault((dev, port, ts // HOUR_MS * HOUR_MS),
                                 {"samples": 0, "covered_ms": 0, "resets": 0,
                                  **{f"d_{f}": 0 for f in FIELDS}})
            row["samples"] += 1
            if prev is not None:
                row["covered_ms"] += ts - prev[0]
                reset = False
                for f in FIELDS:
                    now, before = getattr(s, f), getattr(prev[1], f)
                    row[f"d_{f}"] += now - before if now >= before else now
                    reset |= now < before
                row["resets"] += int(reset)
            prev = (ts, s)
    return out


def _hourly(ledger: EmbeddedLedger, fabric: str) -> dict[tuple[str, int, int], dict[str, int]]:
    rows = ledger.query(
        "SELECT device, port, toUnixTimestamp(hour) * 1000 AS hour, sum(samples) AS samples, "
        "sum(covered_ms) AS covered_ms, sum(resets) AS resets, "
        "sum(d_symbol_errors) AS d_symbol_errors, sum(d_port_xmit_data) AS d_port_xmit_data, "
        "sum(d_phy_link_down) AS d_phy_link_down FROM counter_hourly "
        "WHERE fabric = {f:String} GROUP BY device, port, hour", {"f": fabric})
    return {(r.pop("device"), int(r.pop("port")), int(r.pop("hour"))):
            {k: int(v) for k, v in r.items()} for r in rows}


def _count(ledger: EmbeddedLedger, sql: str, fabric: str) -> int:
    return int(ledger.query(sql, {"f": fabric})[0]["n"])


def _wait_for(ledger: EmbeddedLedger, sql: str, fabric: str, want: int,
              timeout_s: float = 180) -> int:
    deadline = time.monotonic() + timeout_s
    n = -1
    while time.monotonic() < deadline:
        n = _count(ledger, sql, fabric)
        if n >= want:
            return n
        time.sleep(0.5)
    return n


async def _members(bootstrap: str, group: str) -> int:
    """How many members the group has once it is stable (0 while it rebalances)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        try:
            responses = await admin.describe_consumer_groups([group])
        except KafkaError:  # no coordinator yet (the offsets topic is being created)
            return 0
        for response in responses:
            for g in response.groups:
                _error, _gid, state, _ptype, _proto, members = g[:6]
                return len(members) if state == "Stable" else 0
    finally:
        await admin.close()
    return 0


def _wait_members(bootstrap: str, group: str, want: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if asyncio.run(_members(bootstrap, group)) == want:
            return
        time.sleep(1.0)
    raise AssertionError(f"consumer group {group} never had {want} stable members")


def _shuffled(events: list[Counters], rng: random.Random) -> list[Any]:
    out = list(events)
    rng.shuffle(out)
    return out


SAMPLES = "SELECT count() AS n FROM counter_samples FINAL WHERE fabric = {f:String}"
LATE = "SELECT count() AS n FROM counter_late_samples WHERE fabric = {f:String}"


def test_two_writers_late_and_reordered_samples_and_a_replay_give_the_raw_hourly_deltas(
        ledger: EmbeddedLedger, endpoint: str, kafka_bootstrap: str, tmp_path: Path) -> None:
    rng = random.Random(23)
    fabric = f"late-{uuid.uuid4().hex[:8]}"
    group = f"ledger-{fabric}"
    # one device, one key, one partition: one writer for each port's chain
    assert {message_key(Counters(id="k", ts=0, fabric=fabric, source="sim", device=d,
                                 ports=[PortSample(port=1)])) for d in DEVICES} == set(DEVICES)
    procs = [_ingest(endpoint, kafka_bootstrap, group, tmp_path) for _ in range(2)]
    try:
        _wait_members(kafka_bootstrap, group, 2)
        # wave 1: every sample up to 2.5 s old when published, in shuffled order
        counters: dict[tuple[str, int], dict[str, int]] = {}
        first = _wave(fabric, "w1", int(time.time() * 1000) - 2_500, rng, counters)
        asyncio.run(publish(kafka_bootstrap, _shuffled(first, rng)))
        want = len(first) * 2
        assert _wait_for(ledger, SAMPLES, fabric, want) == want
        # one writer dies without committing more; the other takes its partitions
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(30)
        second = _wave(fabric, "w2", int(time.time() * 1000) - 2_500, rng, counters)
        asyncio.run(publish(kafka_bootstrap, _shuffled(second, rng)))
        want += len(second) * 2
        assert _wait_for(ledger, SAMPLES, fabric, want) == want
        # a replayed batch (the killed writer's, say) and one sample a minute late
        straggler = Counters(id=f"{fabric}-straggler", ts=first[0].ts - 60_000, fabric=fabric,
                             source="sim", device=DEVICES[0],
                             ports=[PortSample(port=1, symbol_errors=0, port_xmit_data=1,
                                               phy_link_down=0)])
        asyncio.run(publish(kafka_bootstrap, [*_shuffled(first, rng), straggler]))
        assert _wait_for(ledger, LATE, fabric, 1) == 1
        time.sleep(3)  # room for anything the replay would wrongly add
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(60)

    assert _count(ledger, SAMPLES, fabric) == want
    late = ledger.query("SELECT id, device, port, toUnixTimestamp64Milli(ts) AS ms, "
                        "last_ts > ts AS behind "
                        "FROM counter_late_samples WHERE fabric = {f:String}", {"f": fabric})
    assert late == [{"id": straggler.id, "device": DEVICES[0], "port": 1,
                     "ms": straggler.ts, "behind": 1}]
    expected = _expected(first + second)
    got = _hourly(ledger, fabric)
    assert got == expected
    # the data are what the test means: every port's chain has deltas, port 2 a reset
    assert all(v["d_port_xmit_data"] > 0 for v in got.values())
    assert sum(v["resets"] for k, v in got.items() if k[1] == 2) >= len(DEVICES)
    assert sum(v["resets"] for k, v in got.items() if k[1] == 1) == 0
