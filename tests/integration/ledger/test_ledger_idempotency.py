"""Replays: a batch written again (whole, split differently, or reordered) changes nothing
that queries return. Counter semantics: deltas, resets, late samples."""

from __future__ import annotations

import random
from typing import Any

import pytest

from ledger.embedded import EmbeddedLedger
from schemas import Counters, PortSample

from .conftest import history_start
from .synth import history

pytestmark = pytest.mark.integration

SNAPSHOT_QUERIES = {
    "port_events": "SELECT count() AS n, sum(cityHash64(id)) AS h FROM port_events FINAL",
    "counter_samples": "SELECT count() AS n, sum(d_errors) AS e, sum(d_fec_corrected) AS f "
                       "FROM counter_samples FINAL",
    "counter_samples_raw": "SELECT count() AS n FROM counter_samples",
    "counter_hourly": "SELECT sum(samples) AS n, sum(d_errors) AS e, sum(covered_ms) AS c "
                      "FROM counter_hourly",
    "probes": "SELECT count() AS n FROM probes FINAL",
    "topology_links": "SELECT count() AS n FROM topology_links FINAL",
    "detections": "SELECT count() AS n FROM detections FINAL",
    "detections_hourly": "SELECT uniqExactMerge(detections) AS n FROM detections_hourly",
    "actions": "SELECT count() AS n FROM actions FINAL",
    "evidence": "SELECT count() AS n FROM evidence FINAL",
    "port_events_hourly": "SELECT uniqExactMerge(downs) AS d FROM port_events_hourly",
    "port_ledger": "SELECT * FROM port_ledger ORDER BY fabric, device, port",
}


def snapshot(ledger: EmbeddedLedger) -> dict[str, Any]:
    return {name: ledger.query(sql) for name, sql in SNAPSHOT_QUERIES.items()}


def test_replayed_batches_leave_no_duplicates(ledger: EmbeddedLedger) -> None:
    events, _ = history(history_start(), hours=2)
    ledger.write(events)
    before = snapshot(ledger)
    assert before["counter_samples"][0]["n"] == before["counter_samples_raw"][0]["n"] > 0
    # The same batch again, as after a crash before the offset commit.
    ledger.write(events)
    # And again split into different batches in a different order (a rebalance replay).
    shuffled = list(events)
    random.Random(3).shuffle(shuffled)
    for i in range(0, len(shuffled), 997):
        ledger.write(shuffled[i:i + 997])
    assert snapshot(ledger) == before


def _counters(ts: int, **values: int | None) -> Counters:
    return Counters(id=f"c-{ts}", ts=ts, fabric="f", source="perfquery", device="leaf-su01-r1",
                    ports=[PortSample(port=1, **values)])  # type: ignore[arg-type]


def test_deltas_resets_and_late_samples(ledger: EmbeddedLedger) -> None:
    t = history_start()  # recent: raw counters older than the retention are dropped
    ledger.write([_counters(t, symbol_errors=10, link_downed=250, xmit_wait=5)])
    ledger.write([_counters(t + 60_000, symbol_errors=15, link_downed=2, xmit_wait=None),
                  _counters(t + 120_000, symbol_errors=18, link_downed=3, xmit_wait=9)])
    # A sample older than the last stored one arrives late: no delta from it.
    ledger.write([_counters(t + 30_000, symbol_errors=11, link_downed=250, xmit_wait=5)])
    rows = ledger.query("SELECT interval_ms, reset_mask, d_symbol_errors, d_link_downed, "
                        "d_xmit_wait, symbol_errors, xmit_wait FROM counter_samples FINAL "
                        "ORDER BY ts")
    assert [r["d_symbol_errors"] for r in rows] == [0, 5, 3]
    # link_downed 250 -> 2 is a reset: the 2 downs since count; its bit (index 2) is set.
    assert [r["d_link_downed"] for r in rows] == [0, 2, 1]
    assert [r["reset_mask"] for r in rows] == [0, 1 << 2, 0]
    assert [r["interval_ms"] for r in rows] == [0, 60_000, 60_000]
    # xmit_wait not reported in the middle sample: raw NULL, delta 0 (no previous value
    # to take the next delta against either).
    assert [r["xmit_wait"] for r in rows] == [5, None, 9]
    assert [r["d_xmit_wait"] for r in rows] == [0, 0, 0]
    hourly = ledger.query("SELECT sum(d_symbol_errors) AS s, sum(resets) AS r, "
                          "sum(covered_ms) AS c FROM counter_hourly")
    assert hourly == [{"s": 8, "r": 1, "c": 120_000}]
