"""The clean-counter check against the real chdb ledger: counter deltas since the wait
began decide; a port with no samples is not clean."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ledger.embedded import EmbeddedLedger
from schemas.events import Counters, PortSample
from schemas.policy import Policy
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


NORMAL = Policy().fabric_health.probation.normal.model_dump()


def soak(ledger: EmbeddedLedger, port: int, start: int, per_hour: float, *, downs_at: int = -1
         ) -> None:
    """Two hours of one-minute samples, symbol errors rising at ``per_hour``."""
    ledger.write([Counters(id=f"s{port}-{m}", ts=start + m * 60_000, fabric="lab",
                           source="ufm", device="leaf-su01-r1",
                           ports=[PortSample(port=port, symbol_errors=int(per_hour * m / 60),
                                             link_downed=int(0 <= downs_at <= m), rcv_errors=0,
                                             link_error_recovery=0, xmit_discards=0)])
                  for m in range(121)])


async def test_the_soak_is_judged_by_the_stream_detector_at_the_normal_thresholds(
        tmp_path: Path) -> None:
    ledger = EmbeddedLedger(tmp_path / "ledger")
    start = T0 - 3_600_000
    try:
        ledger.migrate()
        checker = LedgerCountersChecker(ledger, Passes())
        # clean: at 4X NDR the field BER table's normal symbol level (1e-15, 1e-16 over the
        # 125-min window) leaves no room for a symbol error in two hours
        soak(ledger, 1, start, per_hour=0)
        soak(ledger, 2, start, per_hour=60)  # far below the error threshold (200/h) ...
        soak(ledger, 3, start, per_hour=0, downs_at=90)  # one link-down an hour and a half in
        end = start + 120 * 60_000

        async def judge(port: int) -> CheckOutcome:
            ref = PortRef(fabric="lab", device="leaf-su01-r1", port=port)
            return await checker.run_soak("counters-clean-24h", ref, start, end, NORMAL)

        quiet = await judge(1)
        assert quiet.passed, quiet.detail
        assert quiet.measured["samples"] == 121 and "below the normal" in quiet.detail
        # ... but above the normal one: the stream would not fire, probation does not pass
        noisy = await judge(2)
        assert not noisy.passed and "error_rate" in noisy.measured["episodes"], noisy.detail
        assert "ber" in noisy.measured["episodes"]  # and its symbol BER is above normal
        downed = await judge(3)
        assert not downed.passed and downed.measured["link_downs"] == 1
        # nobody measured port 4 during the soak: not clean
        assert not (await judge(4)).passed
        # the stream's own thresholds would have passed port 2: hysteresis is the difference
        stream = Policy().fabric_health.error_rates
        assert stream.symbol_errors_per_hour > 60 > NORMAL["symbol_errors_per_hour"]
    finally:
        ledger.close()
