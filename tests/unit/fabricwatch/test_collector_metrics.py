"""The fabric agent's collector metrics: what a poller round and a follower read add."""

from __future__ import annotations

import time

from prometheus_client import REGISTRY

from collectors.live.poll_ibdiags import PollReport
from fabricwatch.commands.poll import _report


def value(name: str, collector: str) -> float:
    return REGISTRY.get_sample_value(name, {"collector": collector}) or 0.0


def test_a_poller_round_counts_devices_failures_and_its_duration() -> None:
    before = [value(f"fabricwatch_collector_{n}_total", "ibdiags")
              for n in ("rounds", "published", "failures")]
    _report(PollReport(ts=1, published=["sw1", "sw2", "sw3"], failed={"sw4": "timeout"},
                       elapsed_s=4.5))
    after = [value(f"fabricwatch_collector_{n}_total", "ibdiags")
             for n in ("rounds", "published", "failures")]
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 3, 1]
    assert value("fabricwatch_collector_round_seconds", "ibdiags") == 4.5
    assert abs(value("fabricwatch_collector_last_round_timestamp_seconds", "ibdiags")
               - time.time()) < 60
