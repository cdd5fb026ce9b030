"""Pinned probe baselines in the ledger (``probe_baselines``, migration 010).

A baseline is what a healthy link of a rail carries for one probe at one message size and
scale (ranks spanned), pinned by a person from healthy runs: ``fabricwatch baseline pin``.
Probation judges a repaired link against it at the policy's SLO fraction. The learned,
moving baselines of the stream's probe detector are not used there: a link under repair
must not be measured against numbers it produced itself. The stream's probe detector
prefers a pin to what it learned, too (``streams.probes.pins``). Times are epoch milliseconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

from ledger.base import encode_rows


@dataclass(frozen=True, slots=True)
class PinnedBaseline:
    """A bandwidth a healthy run showed for (fabric, rail, probe, size, scale)."""

    fabric: str
    rail: int
    probe: str
    size_bytes: int
    scale: int
    gbps: float
    pinned_by: str
    pinned_ts: int
    links: tuple[str, ...] = ()  # the device:port ends the pinned runs crossed
    note: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"fabric": self.fabric, "rail": self.rail, "probe": self.probe,
                "size_bytes": self.size_bytes, "scale": self.scale, "gbps": self.gbps,
                "pinned_by": self.pinned_by, "pinned_ts": self.pinned_ts,
                "links": list(self.links), "note": self.note}


PROBES = ("ib_write_bw", "nccl_allreduce")


class BaselineError(ValueError):
    """A pin that cannot be right (unknown probe, bandwidth not positive, no owner)."""


class _Store(Protocol):
    def query(self, sql: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]: ...

    def insert_encoded(self, table: str, payload: bytes, fmt: str = "JSONEachRow",
                       columns: Any = None, settings: Any = None) -> None: ...


_CURRENT = """
SELECT fabric, rail, probe, size_bytes, scale,
       argMax(gbps, ts) AS gbps, argMax(active, ts) AS active,
       argMax(pinned_by, ts) AS pinned_by, toUnixTimestamp64Milli(max(ts)) AS ts_ms,
       argMax(links, ts) AS links, argMax(note, ts) AS note
FROM probe_baselines
WHERE fabric = {fabric:String} AND ({rail:Int32} < 0 OR rail = {rail:Int32})
GROUP BY fabric, rail, probe, size_bytes, scale
ORDER BY rail, probe, size_bytes, scale
"""


def validate(b: PinnedBaseline) -> PinnedBaseline:
    if b.probe not in PROBES:
        raise BaselineError(f"probe {b.probe!r} is not one of {', '.join(PROBES)}")
    if not (math.isfinite(b.gbps) and b.gbps > 0):
        raise BaselineError(f"bandwidth {b.gbps!r} Gb/s must be a positive number")
    if not 0 <= b.rail <= 65535 or b.size_bytes < 0 or b.scale < 1:
        raise BaselineError("rail 0..65535, size >= 0 and scale >= 1")
    if not b.pinned_by.strip():
        raise BaselineError("a baseline needs who pinned it")
    return b


def pin(ledger: _Store, baseline: PinnedBaseline) -> PinnedBaseline:
    validate(baseline)
    ledger.insert_encoded("probe_baselines", encode_rows([_row(baseline, active=True)]))
    return baseline


def unpin(ledger: _Store, baseline: PinnedBaseline) -> None:
    """Mark the key's baseline withdrawn (by ``pinned_by``, at ``pinned_ts``)."""
    ledger.insert_encoded("probe_baselines", encode_rows([_row(baseline, active=False)]))


def _row(b: PinnedBaseline, *, active: bool) -> dict[str, Any]:
    return {"fabric": b.fabric, "rail": b.rail, "probe": b.probe, "size_bytes": b.size_bytes,
            "scale": b.scale, "gbps": b.gbps, "active": int(active),
            "pinned_by": b.pinned_by, "ts": b.pinned_ts / 1000, "links": list(b.links),
            "note": b.note}


def current(ledger: _Store, fabric: str, rail: int | None = None, *,
            include_unpinned: bool = False) -> list[PinnedBaseline]:
    """The pinned baselines of a fabric (one rail, or all), newest pin per key."""
    rows = ledger.query(_CURRENT, {"fabric": fabric, "rail": -1 if rail is None else rail})
    out = []
    for r in rows:
        if not int(r["active"]) and not include_unpinned:
            continue
        out.append(PinnedBaseline(
            fabric=r["fabric"], rail=int(r["rail"]), probe=r["probe"],
            size_bytes=int(r["size_bytes"]), scale=int(r["scale"]), gbps=float(r["gbps"]),
            pinned_by=r["pinned_by"] if int(r["active"]) else f"unpinned by {r['pinned_by']}",
            pinned_ts=int(r["ts_ms"]), links=tuple(r["links"] or ()), note=r["note"]))
    return out


_HEALTHY = """
SELECT count() AS runs, quantileExact(0.5)(bw_gbps) AS median_gbps,
       groupUniqArray(src) AS srcs, groupUniqArray(dst) AS dsts
FROM probes FINAL
WHERE fabric = {fabric:String} AND rail = {rail:UInt16} AND probe = {probe:String}
  AND size_bytes = {size:UInt64}
  AND ts >= fromUnixTimestamp64Milli({since:Int64}) AND ts < fromUnixTimestamp64Milli({until:Int64})
  AND src NOT IN (SELECT device FROM detections FINAL WHERE fabric = {fabric:String}
                  AND ts >= fromUnixTimestamp64Milli({since:Int64}))
  AND dst NOT IN (SELECT device FROM detections FINAL WHERE fabric = {fabric:String}
                  AND ts >= fromUnixTimestamp64Milli({since:Int64}))
"""


def healthy_median(ledger: _Store, fabric: str, rail: int, probe: str, size_bytes: int,
                   since_ms: int, until_ms: int) -> tuple[int, float | None, tuple[str, ...]]:
    """The median of the probe runs in the window whose ends had no detection since the
    window began (a link with trouble does not teach the yardstick): (runs, median, ends)."""
    rows = ledger.query(_HEALTHY, {"fabric": fabric, "rail": rail, "probe": probe,
                                   "size": size_bytes, "since": since_ms, "until": until_ms})
    row = rows[0] if rows else {}
    runs = int(row.get("runs") or 0)
    if runs == 0:
        return 0, None, ()
    ends = tuple(sorted({*row.get("srcs", []), *row.get("dsts", [])}))
    return runs, float(row["median_gbps"]), ends
