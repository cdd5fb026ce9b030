"""The clean-counter check against the real chdb ledger: counter deltas since the wait
began decide; a port with no samples is not clean."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ledger.embedded import EmbeddedLedger
from schemas.events import Counters, PortSample
from workflows.adapters.base import CheckOutcome
from workflows.adapters.ledger_checks import LedgerCountersChecker
from workflows.remediation.models import PortRef

pytestmark = pytest.mark.integration

T0 = (int(time.time()) - 3600) * 1000  # recent: raw counters have a TTL


class Passes:
    async def run(self, check: str, port: PortRef, since_ms: int) -> CheckOutcome:
        return CheckOutcome(True, "inner")


def sample(ts: int, symbol: int, downed: int) -> Counters:
    return Counters(id=f"c{ts}", ts=ts, fabric="lab", source="perfquery", device="leaf-su01-r1",
                    ports=[PortSample(port=3, symbol_errors=symbol, link_downed=downed,
                                      rcv_errors=0)])


async def test_clean_counter_check_reads_deltas(tmp_path: Path) -> None:
    ledger = EmbeddedLedger(tmp_path / "ledger")
    try:
        ledger.migrate()
        port = PortRef(fabric="lab", device="leaf-su01-r1", port=3)
        checker = LedgerCountersChecker(ledger, Passes())
        none = await checker.run("counters-clean-24h", port, T0)
        assert not none.passed and none.measured["samples"] == 0
        # the wait starts at T0; before it the port was erroring
        ledger.write([sample(T0 - 60_000, 500, 3), sample(T0 + 60_000, 500, 3),
                      sample(T0 + 120_000, 500, 3)])
        clean = await checker.run("counters-clean-24h", port, T0)
        assert clean.passed, clean.detail
        assert clean.measured == {"samples": 2, "errors": 0, "link_downed": 0, "since_ms": T0}
        ledger.write([sample(T0 + 180_000, 520, 4)])
        dirty = await checker.run("counters-clean-24h", port, T0)
        assert not dirty.passed and dirty.measured["errors"] == 20
        assert dirty.measured["link_downed"] == 1
        # later start: only the samples after it count
        assert (await checker.run("counters-clean-24h", port, T0 + 180_000)).passed is False
        ledger.write([sample(T0 + 240_000, 520, 4)])
        assert (await checker.run("counters-clean-24h", port, T0 + 180_000)).passed
        assert (await checker.run("ib_write_bw-per-rail", port, T0)).detail == "inner"
    finally:
        ledger.close()
