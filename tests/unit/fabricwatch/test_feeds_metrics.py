"""Collector metrics of ``poll ufm`` and ``consume gnmic``, and the stalled-collector alert over them."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import yaml
from prometheus_client import REGISTRY

from collectors.live.consume_gnmic import ConsumeStats
from collectors.live.poll_ufm import UfmReport
from fabricwatch.commands.feeds import _ufm_report, export_stats

ALERTS = Path(__file__).resolve().parents[3] / "deploy" / "monitoring" / "alerts.yaml"


def value(name: str, collector: str) -> float:
    return REGISTRY.get_sample_value(name, {"collector": collector}) or 0.0


def totals(collector: str) -> list[float]:
    return [value(f"fabricwatch_collector_{n}_total", collector)
            for n in ("rounds", "published", "failures")]


def test_a_ufm_round_counts_what_it_published_and_the_resources_that_failed() -> None:
    before = totals("ufm")
    _ufm_report(UfmReport(ts=1, published={"events": 4, "telemetry": 3},
                          failed={"unhealthy_ports": "HTTP 503"}, elapsed_s=0.75))
    assert [a - b for a, b in zip(totals("ufm"), before, strict=True)] == [1, 7, 1]
    assert value("fabricwatch_collector_round_seconds", "ufm") == 0.75
    assert abs(value("fabricwatch_collector_last_round_timestamp_seconds", "ufm") - time.time()) < 60


async def test_the_gnmic_consumer_reports_rounds_only_while_it_reads() -> None:
    stats = ConsumeStats()
    stop = asyncio.Event()
    before = totals("gnmic")
    task = asyncio.create_task(export_stats(stats, stop, every_s=0.05))
    await asyncio.sleep(0.2)  # no poll of the topic yet: no round
    assert totals("gnmic") == before
    stats.polls, stats.events, stats.dead_letters = 3, 10, 2
    await asyncio.sleep(0.2)
    stop.set()
    await task
    after = totals("gnmic")
    assert after[0] - before[0] == 1 and after[1:] == [before[1] + 10, before[2] + 2]


def test_the_stalled_collector_alert_covers_every_collector_label() -> None:
    rules = [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]
    stalled = next(r for r in rules if r.get("alert") == "FabricwatchCollectorStalled")
    assert "fabricwatch_collector_last_round_timestamp_seconds" in stalled["expr"]
    assert "collector=" not in stalled["expr"]  # no label filter: ufm and gnmic included
