"""The clean-counter check from the ledger: no link errors and no link-down since a time.

After the durable wait, the runbook asks whether the port's counters stayed clean since the
wait began. The ledger has every sample with its per-interval deltas (``counter_samples``,
computed in the engine, resets handled), so the answer is one query:
``sum(d_errors)`` (the physical-layer error counters) and ``sum(d_link_downed)`` over the
samples after ``since``. No sample at all is not "clean": the check fails and says so, since
a port nobody measured cannot be returned to service on faith. Other checks go to ``inner``.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from workflows.adapters.base import Checker, CheckOutcome
from workflows.remediation.models import PortRef

CLEAN_SQL = """
SELECT count() AS samples, sum(d_errors) AS errors, sum(d_link_downed) AS downs,
       max(ts) AS last_ts
FROM counter_samples FINAL
WHERE fabric = {fabric:String} AND device = {device:String} AND port = {port:UInt16}
  AND ts > fromUnixTimestamp64Milli({since:Int64}) AND interval_ms > 0
"""


class LedgerQuery(Protocol):
    def query(self, sql: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]: ...


class LedgerCountersChecker:
    def __init__(self, ledger: LedgerQuery, inner: Checker, *, min_samples: int = 1) -> None:
        self._ledger = ledger
        self._inner = inner
        self._min_samples = min_samples

    async def run(self, check: str, port: PortRef, since_ms: int) -> CheckOutcome:
        if not check.startswith("counters-clean"):
            return await self._inner.run(check, port, since_ms)
        rows = await asyncio.to_thread(self._ledger.query, CLEAN_SQL, {
            "fabric": port.fabric, "device": port.device, "port": port.port, "since": since_ms})
        row = rows[0] if rows else {}
        samples = int(row.get("samples") or 0)
        errors = int(row.get("errors") or 0)
        downs = int(row.get("downs") or 0)
        measured = {"samples": samples, "errors": errors, "link_downed": downs,
                    "since_ms": since_ms}
        if samples < self._min_samples:
            return CheckOutcome(False, f"{check}: only {samples} counter sample(s) of "
                                       f"{port.key} since the wait began", measured)
        clean = errors == 0 and downs == 0
        return CheckOutcome(clean, f"{check}: {errors} link error(s), {downs} link-down(s) in "
                                   f"{samples} sample(s)", measured)
