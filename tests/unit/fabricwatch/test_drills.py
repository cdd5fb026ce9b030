"""The drills' plan and their count against ground truth (fabricwatch.drills)."""

from __future__ import annotations

import random

from fabricwatch.drills import (
    CHAOS_TARGETS,
    Cable,
    PlannedFault,
    plan_chaos,
    plan_faults,
    samples_verdict,
    tally,
)

CABLES = [Cable(f"leaf-su0{su}-r0", p, f"node{su}{p:03d}/mlx5_0", 1, su)
          for su in (1, 2, 3) for p in range(1, 6)]


def _det(ident: str, kind: str, end: str, ts: int, episode: str, fabric: str = "f") -> dict:
    device, _, port = end.rpartition(":")
    return {"id": ident, "detection": kind, "device": device, "port": int(port), "ts": ts,
            "episode": episode, "fabric": fabric}


def test_faults_take_distinct_cables_round_robin_over_sus_and_leave_the_settle_time() -> None:
    faults = plan_faults(random.Random(3), CABLES, duration_s=900, every_s=60, settle_s=120)
    assert len({f.cable for f in faults}) == len(faults) >= 10
    assert [f.cable.su for f in faults[:6]] == [1, 2, 3, 1, 2, 3]
    assert all(30 <= f.at_s <= 780 for f in faults)
    assert {f.kind for f in faults} == {"flap", "degraded_width", "ber"}
    assert faults[0].spec.startswith(f"{faults[0].kind}:{faults[0].cable.a_device}:")
    # the same seed, the same plan
    assert faults == plan_faults(random.Random(3), CABLES, duration_s=900, every_s=60,
                                 settle_s=120)


def test_chaos_hits_every_target_once_a_round_apart_in_time() -> None:
    events = plan_chaos(random.Random(1), duration_s=1800, start_s=60, settle_s=120)
    assert sorted(e.target for e in events) == sorted(CHAOS_TARGETS)
    times = sorted(e.at_s for e in events)
    assert times[0] >= 60 and times[-1] <= 1680
    assert all(b - a >= 20 for a, b in zip(times, times[1:], strict=False))
    assert plan_chaos(random.Random(1), duration_s=100, start_s=60, settle_s=60) == []


def test_tally_counts_episodes_duplicates_redeliveries_runbooks_and_commands() -> None:
    flap = PlannedFault(30, "flap", CABLES[0])
    ber = PlannedFault(90, "ber", CABLES[5])
    missed = PlannedFault(150, "degraded_width", CABLES[10])
    a, b = sorted(CABLES[0].ends)
    detections = [
        _det("d1", "flap", a, 10_000, "e1"),
        _det("d1", "flap", a, 10_000, "e1"),  # a redelivered copy: same id
        _det("d2", "flap", b, 10_500, "e1"),  # the other end, same episode: a duplicate
        _det("d0", "flap", a, 1_000, "e0"),  # before the injection: not this fault's
        _det("d3", "ber", sorted(CABLES[5].ends)[0], 70_000, "e3"),
        _det("d4", "degraded_link", sorted(CABLES[10].ends)[0], 90_000, "e4", fabric="other"),
    ]
    cmds = [{"op": "isolate", "key": a, "changed": True},
            {"op": "isolate", "key": a, "changed": False},  # a retried activity: no change
            {"op": "unisolate", "key": a, "changed": True}]
    runs = {f"remediate/f/{CABLES[0].workflow_id}": 1}
    out = tally([(flap, 9_000), (ber, 60_000), (missed, 80_000)], detections, fabric="f",
                runbook_runs=runs, commands=cmds)
    by_spec = {f.kind: f for f in out.faults}
    assert by_spec["flap"].detected and by_spec["flap"].episodes == 1
    assert by_spec["flap"].detections == 2 and by_spec["flap"].extra_per_episode == 1
    assert by_spec["flap"].first_detection_s == 1.0
    assert (by_spec["flap"].runbooks, by_spec["flap"].isolates, by_spec["flap"].unisolates) == (
        1, 1, 1)
    assert by_spec["ber"].detected and by_spec["ber"].runbooks == 0
    assert not by_spec["degraded_width"].detected  # its detection is of another fabric
    summary = out.summary()
    assert summary["faults_injected"] == 3 and summary["faults_detected"] == 2
    assert summary["duplicate_detections"] == 1
    assert (out.detection_messages, out.distinct_detections, out.redelivered) == (6, 5, 1)


def test_a_detection_stamped_within_the_slack_before_the_injection_counts() -> None:
    fault = PlannedFault(30, "degraded_width", CABLES[0])
    early = [_det("d1", "degraded_link", sorted(CABLES[0].ends)[0], 20_000, "e1")]
    assert not tally([(fault, 23_100)], early, fabric="f").faults[0].detected
    assert tally([(fault, 23_100)], early, fabric="f", slack_ms=11_000).faults[0].detected


def test_one_episode_from_the_counters_path_and_the_topology_is_not_a_duplicate() -> None:
    fault = PlannedFault(30, "degraded_width", CABLES[0])
    end = sorted(CABLES[0].ends)[0]
    dets = [_det("d1", "degraded_link", end, 20_000, "e1"),
            {**_det("d1/topology", "degraded_link", end, 20_000, "e1"),
             "evidence": {"source": "topology"}}]
    out = tally([(fault, 19_000)], dets, fabric="f").faults[0]
    assert (out.episodes, out.detections, out.extra_per_episode, out.second_source) == (
        1, 2, 0, 1)
    again = tally([(fault, 19_000)], [*dets, _det("d2", "degraded_link", end, 21_000, "e1")],
                  fabric="f").faults[0]
    assert again.extra_per_episode == 1  # a second id from the same source is one


def test_samples_verdict() -> None:
    assert samples_verdict(100, 100, 100)["ok"]
    lost = samples_verdict(100, 98, 98)
    assert (lost["lost"], lost["doubled"], lost["ok"]) == (2, 0, False)
    doubled = samples_verdict(100, 103, 100)
    assert (doubled["lost"], doubled["doubled"], doubled["ok"]) == (0, 3, False)
    assert not samples_verdict(-1, 0, 0)["ok"]  # no ground truth: not a pass
