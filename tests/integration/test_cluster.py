"""The production-shaped run on loopback under failure (``fabricwatch.cluster``, issue 23).

A short soak (``benchmarks/soak.py``) on the real parts: three Kafka brokers (replication 3,
min ISR 2, producers acks=all), the Temporal dev server, the embedded ledger's ClickHouse
HTTP endpoint with ``ledger ingest`` writing through the server backend, two stream workers
in one group (RocksDB tables, changelogs, a standby replica), two runbook workers, and the
simulator on the 10k-port fabric. A broker and a stream worker are killed with SIGKILL under
load and stay down longer than the group's session timeout, so the other worker takes their
partitions over from the changelogs. Counted against the simulator's ground truth: every
counter sample published is in the ledger once, every injected fault is detected with one
detection per episode (an episode is per cable end), no cable has two runbooks or two
isolations, and no message was dead-lettered.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.soak import SoakOptions, soak
from runtime.procgroups import group_members

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


@pytest.mark.timeout(1800)
def test_a_broker_and_a_stream_worker_killed_under_load_lose_and_double_nothing(
        tmp_path: Path) -> None:
    figures = soak(SoakOptions(
        minutes=3.0, seed=7, fault_every_s=40.0, settle_s=75.0, chaos_start_s=40.0,
        chaos_targets=("broker", "stream-worker"),
        # longer than the 10 s session timeout: the survivor takes the partitions over
        down_s=(25.0, 30.0), drain_s=300.0, state_dir=tmp_path / "state", keep=True))
    kills = {c["target"]: c for c in figures["chaos"]}
    assert set(kills) == {"broker", "stream-worker"}
    assert all(c["was_running"] for c in kills.values()), figures["chaos"]
    worker = kills["stream-worker"]
    assert worker["takeover_logged"], f"no worker took the partitions over: {worker}"

    samples = figures["counter_samples"]
    assert samples["published"] > 100_000, samples  # 10,752 ports every 10 s for 3 minutes
    assert samples["lost"] == 0 and samples["doubled"] == 0, samples
    summary = figures["summary"]
    assert summary["faults_injected"] >= 3, summary
    assert summary["faults_missed"] == [], figures["faults"]
    assert summary["duplicate_detections"] == 0, figures["faults"]
    checks = figures["checks"]
    for name in ("at_most_one_runbook_per_cable",
                 "at_most_one_isolate_per_cable", "no_dead_letters", "no_unexpected_exits"):
        assert checks[name], (name, figures)
    # nothing left running: every component's process group is gone
    pids = figures["pids"]
    assert pids and not [p for p in pids if group_members(p)], pids
