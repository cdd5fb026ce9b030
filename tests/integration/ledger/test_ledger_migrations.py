"""Every migration on the real engine: fresh, re-run, and upgrade with data in place."""

from __future__ import annotations

import pytest

from ledger.embedded import EmbeddedLedger
from ledger.migrations import load_migrations, migration_variables
from schemas import PortEvent

pytestmark = pytest.mark.integration

TABLES = {"schema_migrations", "port_events", "counter_samples", "counter_ingest", "probes",
          "topology_snapshots", "topology_links", "device_location", "detections", "actions",
          "evidence", "dead_letters", "counter_last", "counter_hourly", "port_events_hourly",
          "detections_hourly", "port_state", "port_ledger"}


def _tables(ledger: EmbeddedLedger) -> set[str]:
    rows = ledger.query("SELECT name FROM system.tables WHERE database = currentDatabase()")
    return {r["name"] for r in rows}


def test_fresh_then_rerun(fresh_ledger: EmbeddedLedger) -> None:
    versions = [m.version for m in load_migrations()]
    assert fresh_ledger.migrate() == versions
    assert TABLES <= _tables(fresh_ledger)
    assert fresh_ledger.migrate() == []
    rows = fresh_ledger.query("SELECT version, name, checksum FROM schema_migrations FINAL "
                              "ORDER BY version")
    assert [r["version"] for r in rows] == versions
    assert all(len(r["checksum"]) == 16 for r in rows)


def test_every_statement_runs_twice(fresh_ledger: EmbeddedLedger) -> None:
    variables = migration_variables(30, 7)
    for migration in load_migrations():
        for statement in migration.statements(variables):
            fresh_ledger.execute(statement)
            fresh_ledger.execute(statement)  # IF NOT EXISTS: a re-run is harmless
    assert TABLES <= _tables(fresh_ledger)
    ttl = fresh_ledger.query("SELECT engine_full FROM system.tables WHERE name = 'port_events'")
    assert "toIntervalDay(30)" in ttl[0]["engine_full"]


def test_upgrade_keeps_data_and_new_views_see_new_rows(fresh_ledger: EmbeddedLedger) -> None:
    assert fresh_ledger.migrate(upto=2) == [1, 2]
    assert "port_state" not in _tables(fresh_ledger)
    old = PortEvent(id="old", ts=1_790_000_000_000, fabric="f", source="sim",
                    device="leaf-su01-r1", port=1, state="down")
    fresh_ledger.write([old])
    assert fresh_ledger.migrate() == [3, 4, 5, 6, 7]
    new = old.model_copy(update={"id": "new", "ts": old.ts + 60_000, "state": "up"})
    fresh_ledger.write([new])
    assert fresh_ledger.query("SELECT count() AS n FROM port_events FINAL")[0]["n"] == 2
    # Views created by the upgrade see rows written after it.
    state = fresh_ledger.query("SELECT argMaxMerge(link_state) AS s FROM port_state")
    assert state[0]["s"] == "up"
