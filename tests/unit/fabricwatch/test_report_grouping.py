"""The report's pure steps: who waits on a human, runbook ids to cables, latency matching."""

from __future__ import annotations

from fabricwatch.report.build import (
    cable_key,
    cable_of,
    isolation_latencies,
    waiting_state,
)


def test_what_waits_on_a_human() -> None:
    assert waiting_state("isolate", "failed", "needs a human: isolate: refused") == "needs a human"
    assert waiting_state("breaker", "done", "breaker_open published, paged: x") == (
        "breaker: awaiting approval")
    assert waiting_state("escalate", "done", "ladder exhausted; paged").startswith("escalated")
    assert waiting_state("ladder:reseat", "skipped", "reminder after 3600 s") == (
        "awaiting a technician (reseat)")
    # not waiting: finished, running, or a failure the runbook handles itself
    assert waiting_state("outcome", "done", "expired") is None
    assert waiting_state("isolate", "done", "isolated") is None
    assert waiting_state("evidence", "failed", "mlxlink timed out") is None
    assert waiting_state("breaker", "failed", "no approval within 3600 s") is None


def test_runbook_ids_and_cables() -> None:
    assert cable_of("remediate/f/leaf-su01-r1:7~node0007/mlx5_1:1") == (
        "leaf-su01-r1:7 ~ node0007/mlx5_1:1")
    assert cable_of("remediate/f/node0005/mlx5_3:1") == "node0005/mlx5_3:1"
    # either end gives the one id, as the dispatcher names it
    assert cable_key("f", "node0007/mlx5_1:1", "leaf-su01-r1:7") == cable_key(
        "f", "leaf-su01-r1:7", "node0007/mlx5_1:1") == "remediate/f/leaf-su01-r1:7~node0007/mlx5_1:1"


def test_latency_is_from_the_detection_the_run_names() -> None:
    asks = [{"id": "det:flap/l:1/1000", "fabric": "f", "device": "l", "port": 1,
             "detection": "flap", "ts_ms": 1000},
            {"id": "det:flap/l:1/5000", "fabric": "f", "device": "l", "port": 1,
             "detection": "flap", "ts_ms": 5000}]
    runs = [{"workflow_id": "remediate/f/l:1", "start_note":
             "flap (critical) det:flap/l:1/5000; runbook started", "isolated_ms": 6200,
             "device": "l", "port": 1, "dry_run": 0},
            {"workflow_id": "remediate/f/l:2", "start_note": "flap (critical) det:gone; x",
             "isolated_ms": 9000, "device": "l", "port": 2, "dry_run": 0}]
    rows, unmatched = isolation_latencies(runs, asks)
    assert [(r.cable, r.detected_ms, r.latency_s) for r in rows] == [("l:1", 5000, 1.2)]
    assert unmatched == 1  # counted, not matched to some other detection of the port
