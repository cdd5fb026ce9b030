"""The ledger keeps the optic series the optic rules judge: the cookbook's ``optic_trend``
gives a port's hottest reading and weakest Rx power per hour and their change."""

from __future__ import annotations

import datetime as dt

import pytest

from ledger.embedded import EmbeddedLedger
from ledger.queries import cookbook, params_for
from schemas import Counters, PortSample

pytestmark = pytest.mark.integration
H = 3_600_000


def test_optic_trend(ledger: EmbeddedLedger) -> None:
    start = (int(dt.datetime.now(dt.UTC).timestamp() * 1000) // H - 5) * H
    events = []
    # four hours of 10 min samples, heating 1 °C and losing 0.5 dB an hour
    for i in range(4 * 6):
        hour = i // 6
        events.append(Counters(id=f"o-{i}", ts=start + i * 600_000, fabric="lab",
                               source="mlxlink", device="node0001/mlx5_0",
                               ports=[PortSample(port=1, module_temp_c=50.0 + hour + (i % 6) / 10,
                                                 rx_power_dbm=1.0 - 0.5 * hour)]))
    ledger.write(events)
    query = cookbook()["optic_trend"]
    rows = ledger.query(query.sql, params_for(query, {
        "device": "node0001/mlx5_0", "port": 1,
        "since": dt.datetime.fromtimestamp(start / 1000, dt.UTC)}, "lab"))
    assert [r["samples"] for r in rows] == [6, 6, 6, 6]
    assert [round(float(r["max_temp_c"]), 1) for r in rows] == [50.5, 51.5, 52.5, 53.5]
    assert [round(float(r["temp_rise_c"]), 1) for r in rows] == [0.0, 1.0, 2.0, 3.0]
    assert [round(float(r["rx_power_drop_db"]), 1) for r in rows] == [0.0, 0.5, 1.0, 1.5]
