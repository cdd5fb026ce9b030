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


def test_the_latest_run_of_a_cable_decides() -> None:
    """A cable's runbook id runs again: the earlier run's return does not speak for the
    later one, in probation or still in its ladder."""
    first = [("isolate", "done"), ("return", "done"), ("outcome", "done")]
    assert row(*first).decision == "returned to service"
    assert row(*first, ("detection", "done"), ("isolate", "done"), ("probation", "done"),
               ("check:ib_write_bw", "done")).decision == "in probation"
    assert row(*first, ("detection", "done"), ("isolate", "done"),
               ("ladder:reseat", "skipped")).decision == "in progress"


def test_probation_outcomes_per_runbook() -> None:
    from workflows.remediation.probation import probation_outcomes

    def rec(wf: str, ts: int, outcome: str, note: str) -> dict[str, object]:
        return {"workflow_id": wf, "ts_ms": ts, "outcome": outcome, "note": note}

    rows = [
        rec("a", 1, "done", "probation: the link carries probe traffic"),
        rec("a", 2, "failed", "failed in probation: ib_write_bw 55%; link isolated again"),
        rec("a", 3, "done", "probation: the link carries probe traffic"),
        rec("a", 4, "done", "passed: 2 probe check(s)"),
        rec("b", 1, "done", "probation: the link carries probe traffic"),
        rec("b", 2, "failed", "ib_write_bw-per-rail could not be judged: no command"),
        rec("c", 2, "failed", "failed in probation: error_rate during soak"),
        rec("c", 1, "done", "probation: the link carries probe traffic"),
    ]
    assert probation_outcomes(rows) == {"passed": 1, "failed": 2, "failures": 2,
                                        "waiting_on_human": 1}
    assert probation_outcomes([]) == {"passed": 0, "failed": 0, "failures": 0,
                                      "waiting_on_human": 0}
