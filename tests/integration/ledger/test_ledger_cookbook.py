"""Every cookbook query on generated history whose answers are known (tests/integration/ledger/synth.py)."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

import pytest

from ledger.embedded import EmbeddedLedger
from ledger.queries import cookbook, params_for
from schemas.events import Event

from .synth import Expected

pytestmark = pytest.mark.integration


def run(ledger: EmbeddedLedger, name: str, **given: Any) -> list[dict[str, Any]]:
    query = cookbook()[name]
    return ledger.query(query.sql, params_for(query, given, "lab"))


def test_top_flapping_ports(loaded: EmbeddedLedger, synth: tuple[list[Event], Expected]) -> None:
    exp = synth[1]
    rows = run(loaded, "top_flapping_ports")
    assert {(r["device"], r["port"]): r["downs"] for r in rows} == exp.flapping
    assert rows[0]["downs"] == max(exp.flapping.values())
    isolated = {(r["device"], r["port"]) for r in rows if r["isolated_now"] == 1}
    assert isolated == exp.isolated & set(exp.flapping)
    assert len(run(loaded, "top_flapping_ports", limit=1)) == 1
    # A window before the history holds nothing.
    early = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
    assert run(loaded, "top_flapping_ports", since=early, until=early) == []


def test_errors_by_su_rail(loaded: EmbeddedLedger, synth: tuple[list[Event], Expected]) -> None:
    exp = synth[1]
    rows = run(loaded, "errors_by_su_rail")
    cells = {(r["su"], r["rail"]): r["errors"] for r in rows}
    assert len(cells) == 8  # 2 SUs x 4 rails, every cell present
    assert {k: v for k, v in cells.items() if v} == exp.errors_by_cell
    assert all(r["ports"] == 8 for r in rows)


def test_port_history(loaded: EmbeddedLedger, synth: tuple[list[Event], Expected]) -> None:
    exp = synth[1]
    device, port = max(exp.flapping, key=lambda k: exp.flapping[k])
    rows = run(loaded, "port_history", device=device, port=port)
    kinds = [r["kind"] for r in rows]
    assert kinds.count("event") == 2 * exp.flapping[(device, port)]
    assert kinds.count("detection") == 1 and kinds.count("evidence") == 1
    assert [r["what"] for r in rows if r["kind"] == "action"] == [
        "isolate: done", "ladder:clean-and-reseat: done", "ladder:swap-optic: done",
        "return: done"]
    assert [r["ts"] for r in rows] == sorted(r["ts"] for r in rows)
    err_dev, err_port = next(iter(exp.error_ports))
    hours = run(loaded, "port_history", device=err_dev, port=err_port)
    assert hours and all(r["kind"] == "counters" for r in hours)
    assert sum(int(r["what"].split()[0]) for r in hours) == exp.error_ports[(err_dev, err_port)]


def test_isolated_ports(loaded: EmbeddedLedger, synth: tuple[list[Event], Expected]) -> None:
    rows = run(loaded, "isolated_ports")
    assert {(r["device"], r["port"]) for r in rows} == synth[1].isolated  # not the dry run
    assert rows[0]["isolated_by"] == "oncall@example"
    assert 2.0 < rows[0]["hours_isolated"] < 6.0


def test_mttr_by_rung(loaded: EmbeddedLedger, synth: tuple[list[Event], Expected]) -> None:
    rows = run(loaded, "mttr_by_rung")
    assert {r["rung"]: r["mttr_hours"] for r in rows} == {
        k: round(v, 2) for k, v in synth[1].repaired.items()}


def test_probes_vs_baseline(loaded: EmbeddedLedger, synth: tuple[list[Event], Expected]) -> None:
    rows = run(loaded, "probes_vs_baseline")
    assert rows[0]["rail"] == synth[1].slow_rail
    assert rows[0]["below_threshold"] == rows[0]["runs"] > 0
    assert all(r["below_threshold"] == 0 for r in rows[1:])


def test_open_miswires(loaded: EmbeddedLedger, synth: tuple[list[Event], Expected]) -> None:
    rows = run(loaded, "open_miswires")
    assert [(r["device"], r["port"]) for r in rows] == [synth[1].open_miswire]
    assert rows[0]["peer_now"] == rows[0]["peer_at_detection"]


def test_port_ledger_view(loaded: EmbeddedLedger, synth: tuple[list[Event], Expected]) -> None:
    exp = synth[1]
    rows = {(r["device"], r["port"]): r for r in loaded.query("SELECT * FROM port_ledger")}
    err_dev, err_port = next(iter(exp.error_ports))
    row = rows[(err_dev, err_port)]
    assert row["width"] == "4X" and row["speed"] == "NDR" and row["raw_ber"] > 0
    assert row["errors_24h"] == exp.error_ports[(err_dev, err_port)]
    assert row["errors_per_hour"] == pytest.approx(7 * 60, rel=0.02)
    flapper = max(exp.flapping, key=lambda k: exp.flapping[k])
    assert rows[flapper]["flaps_per_day"] == exp.flapping[flapper]
    assert rows[flapper]["isolated"] == 0 and rows[flapper]["optic_serial"] == "MT2239FT0042"
    assert rows[flapper]["last_action"] == "return"
    for key in exp.isolated:
        assert rows[key]["isolated"] == 1 and rows[key]["isolated_since"] is not None


def test_job_impact(loaded: EmbeddedLedger, synth: tuple[list[Event], Expected]) -> None:
    from ledger import jobs as ledger_jobs
    from streams.topology.jobpaths import job_impact as rank
    from streams.topology.jobpaths import job_paths

    exp = synth[1]
    rows = run(loaded, "job_impact", job=exp.job)
    flapper = max(exp.flapping, key=lambda k: exp.flapping[k])
    assert flapper[0].startswith("leaf-su01-")  # on a cable of the job's nodes
    assert (*flapper, "flap") in {(r["device"], r["port"], r["detection"]) for r in rows}
    # the same episodes, in the same order, as the readers and the path model give
    now = dt.datetime.now(dt.UTC)
    until_ms = int(now.timestamp() * 1000)
    since_ms = until_ms - 86_400_000
    placement = ledger_jobs.current_placement(loaded, "lab", exp.job, until_ms=until_ms)
    assert placement is not None and placement.nodes == exp.job_nodes
    latest = ledger_jobs.fabric_map(loaded, "lab", since_ms=until_ms - 1, until_ms=until_ms)
    assert latest is not None
    found = [r for r in rank(job_paths(latest, placement.nodes),
                             ledger_jobs.episodes(loaded, "lab", since_ms=since_ms,
                                                  until_ms=until_ms))
             if r.link.cable.tier != "spine-core"]
    assert [(r["device"], r["port"], r["detection"]) for r in rows] == [
        (r.episode.device, r.episode.port, r.episode.kind) for r in found]
    assert [r["share_pct"] for r in rows] == [round(r.link.share * 100, 3) for r in found]
    assert run(loaded, "job_impact", job="no-such-job") == []


def test_link_jobs(loaded: EmbeddedLedger, synth: tuple[list[Event], Expected]) -> None:
    exp = synth[1]
    flapper = max(exp.flapping, key=lambda k: exp.flapping[k])
    rows = run(loaded, "link_jobs", device=flapper[0], port=flapper[1])
    assert [(r["job"], r["nodes"], r["gpus"]) for r in rows] == [(exp.job, 8, 32)]
    assert run(loaded, "link_jobs", device="leaf-su02-r0", port=2) == []


def test_every_cookbook_query_is_tested() -> None:
    # a query named Q is tested by a test_Q here or in a sibling ledger test module
    tested = {m.group(1) for path in Path(__file__).parent.glob("test_*.py")
              for m in re.finditer(r"^(?:async )?def test_(\w+)\(", path.read_text(), re.M)}
    assert set(cookbook()) <= tested
