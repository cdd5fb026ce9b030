"""What the ledger knows for job questions: placements, the fabric as cabled, and episodes.

Readers over any ledger (``query`` only); the reasoning is pure and lives in
``streams.topology.jobpaths``. Times are epoch milliseconds in and out. Used by the CLI
(``fabricwatch job impact``, ``fabricwatch link jobs``), the report, and whatever names the
jobs a cable touches on a ticket or an incident page.
"""

from __future__ import annotations

from typing import Any, Protocol

from schemas import JobPlacement
from streams.topology.jobpaths import (
    Episode,
    FabricMap,
    TouchedJob,
    jobs_on_port,
    latest_placements,
    merge_links,
)


class Queryable(Protocol):
    def query(self, sql: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]: ...


_PLACEMENTS = """
SELECT id, toUnixTimestamp64Milli(ts) AS ts_ms, fabric, source, job, name, state, nodes,
       if(isNull(start), NULL, toUnixTimestamp64Milli(assumeNotNull(start))) AS start_ms,
       if(isNull(end), NULL, toUnixTimestamp64Milli(assumeNotNull(end))) AS end_ms,
       gpus_per_node
FROM job_placements FINAL
WHERE fabric = {fabric:String} AND ts < fromUnixTimestamp64Milli({until:Int64})
"""

_SNAPSHOT = """
SELECT snapshot_id FROM topology_snapshots FINAL
WHERE fabric = {fabric:String} AND ts < fromUnixTimestamp64Milli({until:Int64})
ORDER BY ts DESC, snapshot_id DESC LIMIT 1
"""

_SNAPSHOT_AT_START = """
SELECT snapshot_id FROM topology_snapshots FINAL
WHERE fabric = {fabric:String} AND ts <= fromUnixTimestamp64Milli({since:Int64})
ORDER BY ts DESC, snapshot_id DESC LIMIT 1
"""

_FIRST_SNAPSHOT_IN = """
SELECT snapshot_id FROM topology_snapshots FINAL
WHERE fabric = {fabric:String} AND ts >= fromUnixTimestamp64Milli({since:Int64})
  AND ts < fromUnixTimestamp64Milli({until:Int64})
ORDER BY ts, snapshot_id LIMIT 1
"""

_LINKS = """
SELECT device, port, peer_device, peer_port FROM topology_links FINAL
WHERE fabric = {fabric:String} AND snapshot_id = {snapshot:String} AND end = 'a'
ORDER BY device, port
"""

_EPISODES = """
SELECT device, port, detection AS kind, episode,
       toUnixTimestamp64Milli(min(ts)) AS first_ms, toUnixTimestamp64Milli(max(ts)) AS last_ms,
       count() AS n, argMax(severity, ts) AS severity
FROM detections FINAL
WHERE fabric = {fabric:String} AND ts >= fromUnixTimestamp64Milli({since:Int64})
  AND ts < fromUnixTimestamp64Milli({until:Int64})
GROUP BY device, port, detection, episode
UNION ALL
SELECT device, port, 'isolated' AS kind, workflow_id AS episode,
       toUnixTimestamp64Milli(min(ts)) AS first_ms, toUnixTimestamp64Milli(max(ts)) AS last_ms,
       count() AS n, 'info' AS severity
FROM actions FINAL
WHERE fabric = {fabric:String} AND step = 'isolate' AND outcome = 'done' AND dry_run = 0
  AND ts >= fromUnixTimestamp64Milli({since:Int64}) AND ts < fromUnixTimestamp64Milli({until:Int64})
GROUP BY device, port, workflow_id
"""


def placements(ledger: Queryable, fabric: str, *, until_ms: int) -> list[JobPlacement]:
    """Every placement message of the fabric before ``until_ms``."""
    out: list[JobPlacement] = []
    for r in ledger.query(_PLACEMENTS, {"fabric": fabric, "until": int(until_ms)}):
        out.append(JobPlacement.model_construct(
            id=str(r["id"]), ts=int(r["ts_ms"]), fabric=str(r["fabric"]),
            source=str(r["source"]), job=str(r["job"]), name=r["name"], state=str(r["state"]),
            nodes=[str(n) for n in r["nodes"]],
            start=None if r["start_ms"] is None else int(r["start_ms"]),
            end=None if r["end_ms"] is None else int(r["end_ms"]),
            gpus_per_node=None if r["gpus_per_node"] is None else int(r["gpus_per_node"]),
            v=1, kind="job"))
    return out


def current_placement(ledger: Queryable, fabric: str, job: str, *,
                      until_ms: int) -> JobPlacement | None:
    return latest_placements(p for p in placements(ledger, fabric, until_ms=until_ms)
                             if p.job == job).get(job)


def _links(ledger: Queryable, fabric: str, snapshot: str) -> list[tuple[str, int, str, int]]:
    return [(str(r["device"]), int(r["port"]), str(r["peer_device"]), int(r["peer_port"]))
            for r in ledger.query(_LINKS, {"fabric": fabric, "snapshot": snapshot})]


def fabric_map(ledger: Queryable, fabric: str, *, since_ms: int,
               until_ms: int) -> FabricMap | None:
    """The fabric as cabled over the window: the latest snapshot before ``until_ms``, plus
    cables of the snapshot in force at ``since_ms`` that have since gone (isolated, pulled).
    None when the ledger holds no topology of the fabric."""
    params = {"fabric": fabric, "since": int(since_ms), "until": int(until_ms)}
    latest = ledger.query(_SNAPSHOT, params)
    if not latest:
        return None
    links = _links(ledger, fabric, str(latest[0]["snapshot_id"]))
    earlier = ledger.query(_SNAPSHOT_AT_START, params) or ledger.query(_FIRST_SNAPSHOT_IN, params)
    if earlier and earlier[0]["snapshot_id"] != latest[0]["snapshot_id"]:
        links = merge_links(links, _links(ledger, fabric, str(earlier[0]["snapshot_id"])))
    return FabricMap.from_links(links)


def episodes(ledger: Queryable, fabric: str, *, since_ms: int, until_ms: int) -> list[Episode]:
    """Detection episodes and done isolations of the fabric in ``[since_ms, until_ms)``."""
    rows = ledger.query(_EPISODES, {"fabric": fabric, "since": int(since_ms),
                                    "until": int(until_ms)})
    return [Episode(str(r["device"]), int(r["port"]), str(r["kind"]), str(r["episode"]),
                    int(r["first_ms"]), int(r["last_ms"]), int(r["n"]),
                    None if r["severity"] is None else str(r["severity"])) for r in rows]


def jobs_touching(ledger: Queryable, fabric: str, device: str, port: int | None, *,
                  at_ms: int) -> list[TouchedJob]:
    """The running jobs a cable (or with ``port`` None, a switch) carries at ``at_ms``: what
    a runbook's ticket, an incident page or an operator about to isolate asks. Empty when
    the ledger has no topology of the fabric or the port is not cabled in it."""
    fmap = fabric_map(ledger, fabric, since_ms=at_ms - 86_400_000, until_ms=at_ms + 1)
    if fmap is None:
        return []
    return jobs_on_port(fmap, placements(ledger, fabric, until_ms=at_ms + 1), device, port,
                        at_ms)
