"""Job impact on the real engine: placements, topology and detections in, ranked links out.

The simulator's two-SU fabric with an uplink trained at 2X under SU 1 rail 0 and a swapped
pair of node0001's cables; the topology detector's own detections of both; a runbook's
isolation of a cable job A crosses. Job A spans both SUs from node0001, job B keeps to SU 2.
The CLI, the ledger readers and the cookbook queries must agree.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from fabricwatch.cli import main
from ledger import jobs as ledger_jobs
from ledger.embedded import EmbeddedLedger
from ledger.queries import cookbook, params_for
from schemas import ActionRecord, JobPlacement
from schemas.policy import Policy
from sim.faults import parse_spec
from sim.topology import Params, generate
from streams.topology.jobpaths import job_impact, job_paths
from streams.topology.logic import TrackerState, step
from streams.topology.plan import plan_from_topology

pytestmark = pytest.mark.integration

FABRIC = "two"
TWO_SU = Params(sus=2, nodes_per_su=8, rails=4, radix=16, core=True, fabric=FABRIC, name=FABRIC)
UPLINK = ("leaf-su01-r0", 9)
ISOLATED = ("leaf-su02-r2", 1)  # node0009/mlx5_2's cable: job A's
NOW_MS = (int(time.time()) // 60 - 30) * 60_000
T0 = NOW_MS - 3_600_000


def _history() -> list[Any]:
    fabric = generate(TWO_SU)
    clean = fabric.to_topology(T0)
    faults = [parse_spec(f"degraded_width:{UPLINK[0]}:{UPLINK[1]},width=2X"),
              parse_spec("swap:node0001/mlx5_0:1,with=node0001/mlx5_1:1")]
    links = [x for x in fabric.discovered_links(faults)
             if ISOLATED not in ((x.a_device, x.a_port), (x.b_device, x.b_port))]
    faulted = fabric.to_topology(T0 + 600_000, links)  # the isolated cable is not discovered
    detections = step(TrackerState(), faulted, plan_from_topology(clean), Policy()).detections
    isolate = ActionRecord(id="act-1", ts=T0 + 300_000, fabric=FABRIC, source="fabricwatch",
                           device=ISOLATED[0], port=ISOLATED[1], workflow_id="remediate/x",
                           step="isolate", actor="fabricwatch", outcome="done")
    jobs = [
        JobPlacement(id="a1", ts=T0 - 60_000, fabric=FABRIC, source="slurm", job="A",
                     nodes=fabric.nodes_of_su(1)[:4] + fabric.nodes_of_su(2)[:4],
                     start=T0 - 60_000, gpus_per_node=4, state="running"),
        JobPlacement(id="b0", ts=T0 - 120_000, fabric=FABRIC, source="slurm", job="B",
                     nodes=fabric.nodes_of_su(1)[4:], start=T0 - 120_000, state="running"),
        # requeued: B's latest placement is SU 2's second half
        JobPlacement(id="b1", ts=T0 - 60_000, fabric=FABRIC, source="slurm", job="B",
                     nodes=fabric.nodes_of_su(2)[4:], start=T0 - 60_000, gpus_per_node=4,
                     state="running"),
        JobPlacement(id="c1", ts=T0 - 60_000, fabric=FABRIC, source="slurm", job="C",
                     nodes=fabric.nodes_of_su(1)[:4], start=T0 - 600_000, end=T0 - 60_000,
                     state="completed"),
    ]
    return [clean, faulted, *detections, isolate, *jobs]


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("jobs-state")
    ledger = EmbeddedLedger(root / "ledger")
    try:
        ledger.migrate()
        ledger.write(_history())
        ledger.write(_history())  # a replay changes nothing
    finally:
        ledger.close()
    return root


def _cli(state: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str]:
    monkeypatch.setenv("FABRICWATCH_STATE_DIR", str(state))
    monkeypatch.setenv("FABRICWATCH_FABRIC", FABRIC)
    monkeypatch.delenv("FABRICWATCH_CLICKHOUSE_URL", raising=False)
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout + result.stderr


def test_readers_and_ranking(state: Path) -> None:
    ledger = EmbeddedLedger(state / "ledger")
    try:
        placement = ledger_jobs.current_placement(ledger, FABRIC, "A", until_ms=NOW_MS)
        assert placement is not None and placement.gpus_per_node == 4
        b = ledger_jobs.current_placement(ledger, FABRIC, "B", until_ms=NOW_MS)
        assert b is not None and b.nodes[0] == "node0013"  # the requeued placement
        fmap = ledger_jobs.fabric_map(ledger, FABRIC, since_ms=T0, until_ms=NOW_MS)
        assert fmap is not None
        assert fmap.cable_at(*ISOLATED) is not None  # from the snapshot before the isolation
        found = job_impact(job_paths(fmap, placement.nodes),
                           ledger_jobs.episodes(ledger, FABRIC, since_ms=T0, until_ms=NOW_MS))
        kinds = [r.episode.kind for r in found]
        # the isolated cable is not discovered: the diff says it is missing, and it is still
        # on the job's paths (the job crossed it until the isolation)
        assert sorted(kinds) == ["degraded_link", "isolated", "missing_link", "miswire",
                                 "miswire"]
        assert kinds[-1] == "degraded_link"  # one of 8 uplinks: the least of the job on it
        assert [r.link.share for r in found] == sorted((r.link.share for r in found),
                                                       reverse=True)
        assert job_impact(job_paths(fmap, b.nodes), ledger_jobs.episodes(
            ledger, FABRIC, since_ms=T0, until_ms=NOW_MS)) == []
        # the cookbook's query finds the same episodes in the same order
        query = cookbook()["job_impact"]
        rows = ledger.query(query.sql, params_for(query, {
            "job": "A", "since": dt.datetime.fromtimestamp(T0 / 1000, dt.UTC),
            "until": dt.datetime.fromtimestamp(NOW_MS / 1000, dt.UTC)}, FABRIC))
        sql_rows = [(r["device"], r["port"], r["detection"]) for r in rows]
        # the SQL reads the latest snapshot only, where the isolated cable is gone: the same
        # as the readers with the window starting at that snapshot
        latest = ledger_jobs.fabric_map(ledger, FABRIC, since_ms=T0 + 600_000, until_ms=NOW_MS)
        assert latest is not None and latest.cable_at(*ISOLATED) is None
        kept = job_impact(job_paths(latest, placement.nodes), ledger_jobs.episodes(
            ledger, FABRIC, since_ms=T0, until_ms=NOW_MS))
        py_rows = [(r.episode.device, r.episode.port, r.episode.kind) for r in kept]
        assert sql_rows == py_rows and len(kept) == 3
        for r, f in zip(rows, kept, strict=True):
            assert r["share_pct"] == pytest.approx(f.link.share * 100, abs=1e-3)
        assert ledger.query(query.sql, params_for(query, {"job": "B"}, FABRIC)) == []
        links = cookbook()["link_jobs"]
        assert [r["job"] for r in ledger.query(links.sql, params_for(
            links, {"device": UPLINK[0], "port": UPLINK[1]}, FABRIC))] == ["A"]
        assert [r["job"] for r in ledger.query(links.sql, params_for(
            links, {"device": "leaf-su02-r1", "port": 6}, FABRIC))] == ["B"]
        assert ledger.query(links.sql, params_for(
            links, {"device": "leaf-su01-r1", "port": 6}, FABRIC)) == []  # C has ended
        # what a ticket or an incident page calls
        touched = ledger_jobs.jobs_touching(ledger, FABRIC, *UPLINK, at_ms=NOW_MS)
        assert [(t.job, t.nodes, t.gpus) for t in touched] == [("A", 8, 32)]
        assert ledger_jobs.jobs_touching(ledger, "nosuch", *UPLINK, at_ms=NOW_MS) == []
    finally:
        ledger.close()


def test_job_impact_cli(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, out = _cli(state, monkeypatch, "job", "impact", "A", "--since", "2h", "--format",
                     "json")
    assert code == 0, out
    doc = json.loads(out)
    assert [r["detection"] for r in doc["impact"]][-1] == "degraded_link"
    assert {r["detection"] for r in doc["impact"]} == {"miswire", "isolated", "missing_link",
                                                       "degraded_link"}
    rails = {r["rail"]: r for r in doc["rails"]}
    assert rails[0]["off_rail"] == ["node0001/mlx5_0"] and rails[0]["hops"] == 6
    code, out = _cli(state, monkeypatch, "job", "impact", "A", "--since", "2h")
    assert code == 0 and "degraded_link" in out and "off-rail NICs node0001/mlx5_0" in out
    code, out = _cli(state, monkeypatch, "job", "impact", "B", "--since", "2h", "--format",
                     "json")
    assert code == 0 and json.loads(out)["impact"] == []
    code, out = _cli(state, monkeypatch, "job", "impact", "nosuch")
    assert code == 2 and "no placement of job 'nosuch'" in out
    code, out = _cli(state, monkeypatch, "job", "impact", "A", "--since", "forever")
    assert code == 2 and "--since" in out


def test_link_jobs_cli(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, out = _cli(state, monkeypatch, "link", "jobs", f"{UPLINK[0]}:{UPLINK[1]}",
                     "--format", "json")
    assert code == 0, out
    assert [j["job"] for j in json.loads(out)["jobs"]] == ["A"]
    code, out = _cli(state, monkeypatch, "link", "jobs", "spine-su02-s1", "--format", "json")
    assert code == 0 and [j["job"] for j in json.loads(out)["jobs"]] == ["A"]
    code, out = _cli(state, monkeypatch, "link", "jobs", "node0014/mlx5_3:1")
    assert code == 0 and "B" in out and "1 running job(s)" in out
    code, out = _cli(state, monkeypatch, "link", "jobs", "nosuch:3")
    assert code == 2 and "not cabled" in out


class _Tickets:
    """A ticket system that keeps what each call was given."""

    def __init__(self) -> None:
        self.details: dict[str, dict[str, Any]] = {}

    async def open(self, key: str, summary: str, details: dict[str, Any]) -> str:
        self.details["open"] = details
        return key

    update = close = page = open


async def test_a_runbook_ticket_names_the_jobs_its_cable_carries(state: Path) -> None:
    from workflows.adapters.jobs import LedgerJobs
    from workflows.remediation.activities import FabricActivities
    from workflows.remediation.models import PortRef, TicketInput

    ledger = EmbeddedLedger(state / "ledger")
    try:
        def activities(jobs: Any) -> tuple[FabricActivities, _Tickets]:
            tickets = _Tickets()
            acts = FabricActivities(records=None, controller=None, evidence=None,  # type: ignore[arg-type]
                                    checker=None, fencer=None, ticketing=tickets, jobs=jobs)
            return acts, tickets

        inp = TicketInput(workflow_id="remediate/two/x", op="open", summary="flap",
                          port=PortRef(fabric=FABRIC, device=UPLINK[0], port=UPLINK[1]))
        acts, tickets = activities(LedgerJobs(lambda: ledger))
        await acts.ticket(inp)
        assert [j["job"] for j in tickets.details["open"]["jobs_touched"]["jobs"]] == ["A"]
        # nothing to look jobs up in: the ticket says so, it does not claim "no jobs"
        acts, tickets = activities(LedgerJobs(lambda: None))
        await acts.ticket(inp)
        assert "no ledger reachable" in tickets.details["open"]["jobs_touched"]["not_looked_up"]
        acts, tickets = activities(None)
        await acts.ticket(inp)
        assert "not_looked_up" in tickets.details["open"]["jobs_touched"]
    finally:
        ledger.close()
