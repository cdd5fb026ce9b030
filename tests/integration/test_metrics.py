"""The Prometheus endpoint serves the documented series from running workers.

* ``fabricwatch worker`` as a real process with ``FABRICWATCH_METRICS_PORT`` against the
  session's Kafka broker: three downs of one port (a flap) and one undecodable message are
  published; ``/metrics`` scraped over HTTP on 127.0.0.1 must show them as events per topic,
  a dead letter, a flap detection with its latency, and the consumer lag.
* The runbook side against the session's Temporal server: an ``IsolationBudget`` workflow of
  one SU holds its whole budget; ``RunbookMetrics`` must report that SU's breaker open and the
  runbooks by status.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from prometheus_client.parser import text_string_to_metric_families

from runtime import metrics
from schemas import PortEvent, encode, message_key
from schemas.topics import PORT_EVENTS

pytestmark = pytest.mark.integration

FABRICWATCH = str(Path(sys.executable).parent / "fabricwatch")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Sample name -> [(labels, value)] from ``/metrics`` over HTTP."""
    url = f"http://127.0.0.1:{port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - loopback http only
        assert resp.status == 200
        text = resp.read().decode()
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    out["__families__"] = [({"name": n}, 0.0) for n in metrics.series_in(text)]
    return out


def value(samples: dict[str, list[tuple[dict[str, str], float]]], name: str,
          **labels: str) -> float:
    return sum(v for lab, v in samples.get(name, [])
               if all(lab.get(k) == want for k, want in labels.items()))


class MetricsWorker:
    def __init__(self, bootstrap: str, state_dir: Path) -> None:
        self.port = free_port()
        self.log = state_dir / "worker.log"
        self.app_id = f"fw-metrics-{uuid.uuid4().hex[:8]}"
        env = {**os.environ, "FABRICWATCH_STATE_DIR": str(state_dir),
               "FABRICWATCH_KAFKA__BOOTSTRAP": bootstrap,
               "FABRICWATCH_METRICS_PORT": str(self.port)}
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [FABRICWATCH, "worker", "--no-ledger", "--app-id", self.app_id],
                stdout=out, stderr=subprocess.STDOUT, env=env)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if b"Worker ready" in self.log.read_bytes():
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited: {self.tail()}")
            time.sleep(0.2)
        raise AssertionError(f"worker not ready in 120 s: {self.tail()}")

    def tail(self) -> str:
        return self.log.read_bytes()[-3000:].decode(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def metrics_worker(kafka_bootstrap: str, tmp_path: Path) -> Iterator[MetricsWorker]:
    w = MetricsWorker(kafka_bootstrap, tmp_path)
    yield w
    w.stop()


async def test_worker_serves_the_documented_series(metrics_worker: MetricsWorker,
                                                   kafka_bootstrap: str) -> None:
    await asyncio.to_thread(metrics_worker.wait_ready)
    before = await asyncio.to_thread(scrape, metrics_worker.port)
    families = {lab["name"] for lab, _ in before["__families__"]}
    # every series of the stream processors is declared from the start, values or not
    assert set(metrics.STREAMS_SERIES) <= families, families
    assert value(before, "fabricwatch_stream_agents", agents="all") == 1
    device = f"leaf-su01-r{uuid.uuid4().int % 1000}"
    now = int(time.time() * 1000)
    downs = [PortEvent(id=f"{metrics_worker.app_id}/{i}", ts=now - (2 - i) * 1000, fabric="lab",
                       source="opensm", device=device, port=5, state="down") for i in range(3)]
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        for ev in downs:
            await producer.send(PORT_EVENTS.name, encode(ev), key=message_key(ev).encode())
        await producer.send(PORT_EVENTS.name, b"{not json", key=b"bad")
        await producer.flush()
    finally:
        await producer.stop()
    base_events = value(before, "fabricwatch_events_total", topic=PORT_EVENTS.name)
    bounds = [0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0]

    def ours_published(got: dict[str, Any]) -> bool:
        # the flap fired at the third down; its latency is measured from that down's event
        # time, so it is no more than the time since then (a new worker first reads the whole
        # session's backlog from the start of the topics, so the figure itself depends on
        # what ran before; and a detection is published after the correlator has seen it, so
        # the flap agent's count can be ahead of it)
        elapsed_s = time.time() - downs[-1].ts / 1000
        le = next((b for b in bounds if b >= elapsed_s), None)
        return value(got, "fabricwatch_detection_latency_seconds_bucket", detection="flap",
                     le=f"{le}" if le is not None else "+Inf") >= 1

    deadline = time.monotonic() + 90
    while True:
        got = await asyncio.to_thread(scrape, metrics_worker.port)
        if (value(got, "fabricwatch_events_total", topic=PORT_EVENTS.name) >= base_events + 4
                and value(got, "fabricwatch_detection_latency_seconds_count", detection="flap") >= 1
                and value(got, "fabricwatch_dead_letters_total", topic=PORT_EVENTS.name) >= 1
                and ours_published(got)):
            break
        assert time.monotonic() < deadline, metrics_worker.tail()
        await asyncio.sleep(0.5)
    assert value(got, "fabricwatch_detections_total", detection="flap", severity="critical") + \
        value(got, "fabricwatch_detections_total", detection="flap", severity="warning") >= 1
    lags = got.get("fabricwatch_consumer_lag", [])
    assert any(lab["topic"] == PORT_EVENTS.name for lab, _ in lags), lags
    assert all(v >= 0 for _, v in lags)


async def test_runbook_metrics_report_breaker_and_runbooks(temporal_target: str) -> None:
    from temporalio.worker import Worker

    from runtime.settings import Settings
    from workflows.budget.models import BudgetInput, GrantRequest, su_budget_id
    from workflows.budget.workflows import IsolationBudget
    from workflows.worker import connect

    client = await connect(Settings(), target=temporal_target)
    queue = f"metrics-{uuid.uuid4().hex[:8]}"
    fabric, su = f"fab{uuid.uuid4().hex[:6]}", "su07"
    port = metrics.start_metrics_server(0, host="127.0.0.1")
    # A budget whose worker is away (its queue has no poller): its query cannot be answered,
    # and the other SUs' series must not wait for it.
    orphan = await client.start_workflow(
        IsolationBudget.run, BudgetInput(fabric=fabric, scope="su", su="su99", limit=1),
        id=su_budget_id(fabric, "su99"), task_queue=f"{queue}-nobody")
    async with Worker(client, task_queue=queue, workflows=[IsolationBudget]):
        handle = await client.start_workflow(
            IsolationBudget.run, BudgetInput(fabric=fabric, scope="su", su=su, limit=1),
            id=su_budget_id(fabric, su), task_queue=queue)
        granted = await handle.execute_update(
            IsolationBudget.grant, GrantRequest(holder="remediate/x", port_key="leaf:1", limit=1))
        assert granted.granted
        refused = await handle.execute_update(
            IsolationBudget.grant, GrantRequest(holder="remediate/y", port_key="leaf:2", limit=1))
        assert not refused.granted
        rm = metrics.RunbookMetrics(client, interval=0.2)
        deadline = time.monotonic() + 30
        while True:  # visibility lists a new workflow a moment after its start
            await rm.update()
            got = await asyncio.to_thread(scrape, port)
            if value(got, "fabricwatch_breaker_open", fabric=fabric, su=su) == 1:
                break
            assert time.monotonic() < deadline, got.get("fabricwatch_breaker_open")
            await asyncio.sleep(0.3)
        assert value(got, "fabricwatch_breaker_isolated_ports", fabric=fabric, su=su) == 1
        assert value(got, "fabricwatch_breaker_limit", fabric=fabric, su=su) == 1
        assert value(got, "fabricwatch_breaker_refused_total", fabric=fabric, su=su) == 1
        statuses = {lab["status"] for lab, _ in got.get("fabricwatch_runbooks", [])}
        assert statuses == set(metrics.RUNBOOK_STATUSES)
        families = {lab["name"] for lab, _ in got["__families__"]}
        assert set(metrics.RUNBOOK_SERIES) <= families
        t0 = time.monotonic()
        await rm.update()
        assert time.monotonic() - t0 < 4 * metrics.QUERY_TIMEOUT.total_seconds()
        assert not [lab for lab, _ in got.get("fabricwatch_breaker_open", [])
                    if lab.get("su") == "su99"]  # unknown, not a made-up zero
        await handle.terminate("test over")
        await orphan.terminate("test over")
        await rm.update()  # a finished budget's SU series disappear
        got = await asyncio.to_thread(scrape, port)
        assert not [lab for lab, _ in got.get("fabricwatch_breaker_open", [])
                    if lab.get("fabric") == fabric]


def grafana_sql(sql: str, fabric: str, now_s: int) -> str:
    """A ledger panel's SQL as Grafana's ClickHouse plugin expands it (macros, variable)."""
    since = now_s - 86400
    sql = re.sub(r"\$__timeFilter\((\w+)\)",
                 rf"\1 >= toDateTime({since}) AND \1 <= toDateTime({now_s})", sql)
    sql = re.sub(r"\$__timeInterval\((\w+)\)", r"toStartOfInterval(\1, INTERVAL 60 second)", sql)
    sql = sql.replace("$__fromTime", f"toDateTime({since})")
    sql = sql.replace("$__toTime", f"toDateTime({now_s})")
    sql = sql.replace("${fabric}", fabric)
    assert "$__" not in sql and "${" not in sql, sql
    return sql


def test_dashboard_ledger_panels_run_on_the_ledger(tmp_path: Path) -> None:
    from ledger.embedded import EmbeddedLedger

    from .ledger.synth import history

    board = json.loads((Path(__file__).resolve().parents[2] / "deploy" / "monitoring"
                        / "fabricwatch-dashboard.json").read_text())
    panels = [p for p in board["panels"]
              if p.get("datasource", {}).get("type") == "grafana-clickhouse-datasource"]
    assert len(panels) >= 5
    now_s = int(time.time())
    events, _ = history((now_s // 3600 - 4) * 3_600_000, hours=2)
    fabric = events[0].fabric
    ledger = EmbeddedLedger(tmp_path / "ledger")
    try:
        ledger.migrate()
        ledger.write(events)
        rows = {p["title"]: ledger.query(grafana_sql(p["targets"][0]["rawSql"], fabric, now_s))
                for p in panels}
    finally:
        ledger.close()
    # the synthetic history has flaps, detections and miswires in the last day
    assert rows["Top flapping ports in the time range"]
    assert rows["Detections per interval, by kind"]
    assert rows["Open miswires"]
