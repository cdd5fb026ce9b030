"""The clean-counter check from the ledger: no link errors and no link-down since a time.

After the durable wait, the runbook asks whether the port's counters stayed clean since the
wait began. The ledger has every sample with its per-interval deltas (``counter_samples``,
computed in the engine, resets handled), so the answer is one query:
``sum(d_errors)`` (the physical-layer error counters) and ``sum(d_link_downed)`` over the
samples after ``since``. No sample at all is not "clean": the check fails and says so, since
a port nobody measured cannot be returned to service on faith. Other checks go to ``inner``.

In probation (``run_soak``) the soak's raw samples are replayed through the stream's own
counter detector with the policy's normal thresholds (hysteresis): no error-rate or BER
episode, and no more link-downs than allowed, for the whole soak.
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from schemas import Counters, PortSample
from schemas.events import COUNTER_FIELDS
from workflows.adapters.base import Checker, CheckOutcome
from workflows.remediation.models import PortRef
from workflows.remediation.probation import judge_soak

CLEAN_SQL = """
SELECT count() AS samples, sum(d_errors) AS errors, sum(d_link_downed) AS downs,
       max(ts) AS last_ts
FROM counter_samples FINAL
WHERE fabric = {fabric:String} AND device = {device:String} AND port = {port:UInt16}
  AND ts > fromUnixTimestamp64Milli({since:Int64}) AND interval_ms > 0
"""


SOAK_SQL = """
SELECT id, toUnixTimestamp64Milli(ts) AS ts_ms, source, {columns}
FROM counter_samples FINAL
WHERE fabric = {{fabric:String}} AND device = {{device:String}} AND port = {{port:UInt16}}
  AND ts >= fromUnixTimestamp64Milli({{since:Int64}})
  AND ts <= fromUnixTimestamp64Milli({{until:Int64}})
ORDER BY ts, id
"""
_SAMPLE_FIELDS = (*COUNTER_FIELDS, "raw_ber", "effective_ber", "width", "speed")


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

    async def run_soak(self, check: str, port: PortRef, since_ms: int, until_ms: int | None,
                       normal: dict[str, float]) -> CheckOutcome:
        """Probation's soak: the port's samples since the soak began, replayed through the
        stream's counter detector with the normal (hysteresis) thresholds."""
        if not check.startswith("counters-clean"):
            return await self._inner.run(check, port, since_ms)
        sql = SOAK_SQL.format(columns=", ".join(_SAMPLE_FIELDS))
        rows = await asyncio.to_thread(self._ledger.query, sql, {
            "fabric": port.fabric, "device": port.device, "port": port.port,
            "since": since_ms, "until": until_ms if until_ms is not None else 2**62})
        samples = [Counters(id=str(r["id"]), ts=int(r["ts_ms"]), fabric=port.fabric,
                            source=str(r["source"]), device=port.device,
                            ports=[PortSample(port=port.port, **{
                                k: r[k] for k in _SAMPLE_FIELDS if r.get(k) is not None})])
                   for r in rows]
        passed, detail, measured = judge_soak(samples, normal)
        if len(samples) < self._min_samples:
            passed = False
        return CheckOutcome(passed, f"{check}: {detail}", {**measured, "since_ms": since_ms,
                                                           "until_ms": until_ms})
