"""Where each runbook stands in the report."""

from __future__ import annotations

from fabricwatch.report.build import RunbookRow, runbooks_by_decision


def row(*steps: tuple[str, str]) -> RunbookRow:
    return RunbookRow(workflow_id="remediate/f/leaf:1",
                      steps=[(i, step, outcome) for i, (step, outcome) in enumerate(steps)])


def test_decisions() -> None:
    rows = [row(("budget", "granted"), ("isolate", "done"), ("return", "done")),
            row(("budget", "refused")),
            row(("budget", "granted"), ("isolate", "done"), ("abort", "done")),
            # shadow mode: the budget said no, the isolate was a dry run: nothing changed
            row(("evidence", "done"), ("budget", "refused"), ("isolate", "dry_run")),
            row(("budget", "granted"), ("isolate", "done"))]
    assert [r.decision for r in rows] == [
        "returned to service", "held by the breaker", "aborted",
        "shadow mode (changed nothing)", "in progress"]
    assert runbooks_by_decision(rows)["held by the breaker"] == 1
