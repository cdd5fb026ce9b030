"""counter_hourly: every port-hour's sums, worst values and counts are those of the samples
stored in counter_samples, whatever the inserts (013: one row per sample, merged later)."""

from __future__ import annotations

import random

import pytest

from ledger.embedded import EmbeddedLedger
from ledger.rows import LEDGER_COUNTER_FIELDS
from schemas import CounterColumns, Counters, PortSample

from .conftest import HOUR_MS, history_start

pytestmark = pytest.mark.integration

DEVICES = ("leaf-su01-r0", "leaf-su01-r1")
PORTS = range(1, 7)


def _polls(seed: int) -> list[list[Counters]]:
    """Batches of polls 7.5 min apart over three hours: counters that grow, reset to a
    smaller value, or go unread (null), gauges that move; some batches hold a device
    twice (two polls), so a batch is split into inserts."""
    rng = random.Random(seed)
    values = {(d, p): dict.fromkeys(LEDGER_COUNTER_FIELDS, 0) for d in DEVICES for p in PORTS}
    t0 = history_start() - 3 * HOUR_MS
    batches: list[list[Counters]] = []
    batch: list[Counters] = []
    for i in range(24):
        ts = t0 + i * 450_000 + rng.randrange(1000)
        for device in DEVICES:
            ports = []
            for port in PORTS:
                sample: dict[str, object] = {"port": port}
                for name in LEDGER_COUNTER_FIELDS:
                    roll = rng.random()
                    if roll < 0.05:
                        values[(device, port)][name] = rng.randrange(5)  # a reset
                    else:
                        values[(device, port)][name] += rng.choice((0, 0, 1, 7, 1000))
                    sample[name] = None if roll > 0.97 else values[(device, port)][name]
                sample["raw_ber"] = rng.choice((None, 1e-12, 3e-9))
                sample["module_temp_c"] = rng.choice((None, 41.5, 66.0))
                sample["rx_power_dbm"] = rng.choice((None, -2.5, -9.0))
                ports.append(PortSample.model_validate(sample))
            batch.append(Counters(id=f"h-{device}-{i}", ts=ts, fabric="hourly",
                                  source="sim", device=device, ports=ports))
        if rng.random() < 0.6:
            batches.append(batch)
            batch = []
    if batch:
        batches.append(batch)
    return batches


PER_HOUR = """
SELECT device, port, hour, sum(samples) AS samples, sum(covered_ms) AS covered_ms,
       sum(resets) AS resets, sum(d_errors) AS d_errors, {sums},
       max(max_raw_ber) AS max_raw_ber, max(max_module_temp_c) AS max_module_temp_c,
       min(min_rx_power_dbm) AS min_rx_power_dbm
FROM counter_hourly WHERE fabric = 'hourly'
GROUP BY device, port, hour ORDER BY device, port, hour
"""

FROM_SAMPLES = """
SELECT device, port, toStartOfHour(toDateTime(ts, 'UTC')) AS hour, count() AS samples,
       sum(interval_ms) AS covered_ms, countIf(reset_mask != 0) AS resets,
       sum(d_errors) AS d_errors, {sums},
       max(raw_ber) AS max_raw_ber, max(module_temp_c) AS max_module_temp_c,
       min(rx_power_dbm) AS min_rx_power_dbm
FROM counter_samples FINAL WHERE fabric = 'hourly'
GROUP BY device, port, hour ORDER BY device, port, hour
"""


@pytest.mark.parametrize(("seed", "columnar"), [(1, False), (2, True), (3, True)])
def test_each_port_hour_holds_the_stored_samples_sums(ledger: EmbeddedLedger, seed: int,
                                                      columnar: bool) -> None:
    for batch in _polls(seed):
        ledger.write([CounterColumns.of(m) for m in batch] if columnar else batch)
    sums = ", ".join(f"sum(d_{name}) AS d_{name}" for name in LEDGER_COUNTER_FIELDS)
    rollup = ledger.query(PER_HOUR.format(sums=sums))
    stored = ledger.query(FROM_SAMPLES.format(sums=sums))
    assert len(stored) == len(DEVICES) * len(PORTS) * 3  # three whole hours
    assert sum(r["resets"] for r in stored) > 0
    assert sum(r["d_errors"] for r in stored) > 0
    assert rollup == stored
    # merged into one row per port-hour, the same
    ledger.execute("OPTIMIZE TABLE counter_hourly FINAL")
    assert ledger.query(PER_HOUR.format(sums=sums)) == stored
    assert ledger.query("SELECT count() AS n FROM counter_hourly "
                        "WHERE fabric = 'hourly'") == [{"n": len(stored)}]
