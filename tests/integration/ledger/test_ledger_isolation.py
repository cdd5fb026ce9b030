"""Isolation state in the ledger: a rolled-back isolation (an aborted runbook's done
`unisolate`) ends it, as a return to service does; shadow-mode actions change nothing."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ledger.embedded import EmbeddedLedger
from ledger.queries import cookbook, params_for
from schemas import ActionRecord

pytestmark = pytest.mark.integration


def action(port: int, step: str, t: int, *, dry_run: bool = False) -> ActionRecord:
    return ActionRecord(id=f"a-{port}-{step}-{t}", ts=int(time.time() * 1000) - 60_000 + t,
                        fabric="lab", source="fabricwatch", device="leaf-su01-r4", port=port,
                        workflow_id=f"remediate/lab/leaf-su01-r4:{port}", step=step,
                        actor="carol", outcome="done", dry_run=dry_run)


def test_abort_rollback_and_return_end_the_isolation(tmp_path: Path) -> None:
    ledger = EmbeddedLedger(tmp_path / "ledger")
    try:
        ledger.migrate()
        ledger.write([action(7, "isolate", 0), action(7, "ticket", 1),
                      action(7, "unisolate", 2), action(7, "close_ticket", 3),   # aborted
                      action(8, "isolate", 0), action(8, "return", 5),           # returned
                      action(9, "isolate", 0), action(9, "ticket", 1),           # still out
                      action(10, "isolate", 0, dry_run=True)])                   # shadow
        query = cookbook()["isolated_ports"]
        rows = ledger.query(query.sql, params_for(query, {}, "lab"))
        assert [(r["device"], r["port"]) for r in rows] == [("leaf-su01-r4", 9)]
    finally:
        ledger.close()
