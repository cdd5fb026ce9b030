"""Findings across topology snapshots become detections once per finding, not once per snapshot."""

from __future__ import annotations

import dataclasses

from schemas import Action, DetectionKind, Severity, Topology, TopologyLink, decode, encode
from schemas.policy import Policy
from streams.topology.logic import TrackerState, episode_id, step
from streams.topology.plan import Plan, PlanLink

POLICY = Policy()
T0 = 1_700_000_000_000
PLAN = Plan((
    PlanLink("node0001/mlx5_0", 1, "leaf-su01-r0", 1, "C1", "4X", "NDR"),
    PlanLink("node0001/mlx5_1", 1, "leaf-su01-r1", 1, "C2", "4X", "NDR"),
    PlanLink("node0002/mlx5_0", 1, "leaf-su01-r0", 2, "C3", "4X", "NDR"),
    PlanLink("leaf-su01-r0", 33, "spine-su01-s1", 1, "C4"),
))


def snap(ts: int, *, swap: bool = False, drop_c3: bool = False, c4_width: str = "4X") -> Topology:
    links = [
        ("leaf-su01-r1" if swap else "leaf-su01-r0", 1, "node0001/mlx5_0", 1, "4X"),
        ("leaf-su01-r0" if swap else "leaf-su01-r1", 1, "node0001/mlx5_1", 1, "4X"),
        ("leaf-su01-r0", 2, "node0002/mlx5_0", 1, "4X"),
        ("leaf-su01-r0", 33, "spine-su01-s1", 1, c4_width),
    ]
    if drop_c3:
        del links[2]
    return Topology(id=f"snap-{ts}", ts=ts, fabric="lab", source="ibnetdiscover", links=[
        TopologyLink(a_device=a, a_port=ap, b_device=b, b_port=bp, width=w, speed="NDR")
        for a, ap, b, bp, w in links])


def test_once_per_finding_then_close_then_reopen_as_a_new_episode() -> None:
    state = TrackerState()
    first = step(state, snap(T0, swap=True), PLAN, POLICY)
    assert sorted(d.detection.value for d in first.detections) == ["miswire", "miswire"]
    assert first.closed == ()
    # The same swap in the next two snapshots: nothing new.
    second = step(first.state, snap(T0 + 60_000, swap=True), PLAN, POLICY)
    third = step(second.state, snap(T0 + 120_000, swap=True), PLAN, POLICY)
    assert second.detections == () and third.detections == ()
    assert dict(third.state.open) == dict(first.state.open)
    # A missing link joins: one detection for it alone.
    fourth = step(third.state, snap(T0 + 180_000, swap=True, drop_c3=True), PLAN, POLICY)
    assert [d.detection for d in fourth.detections] == [DetectionKind.MISSING_LINK]
    # The swap is fixed: its two findings close; the missing link stays open.
    fifth = step(fourth.state, snap(T0 + 240_000, drop_c3=True), PLAN, POLICY)
    assert fifth.detections == ()
    assert len(fifth.closed) == 2 and all(k.startswith("miswire|") for k in fifth.closed)
    assert list(fifth.state.open) == [k for k in fourth.state.open if k.startswith("missing")]
    # Swapped again later: new episodes, not the old ones.
    sixth = step(fifth.state, snap(T0 + 300_000, swap=True, drop_c3=True), PLAN, POLICY)
    assert len(sixth.detections) == 2
    assert {d.episode for d in sixth.detections}.isdisjoint(
        {d.episode for d in first.detections})


def test_detection_fields_and_determinism() -> None:
    result = step(TrackerState(), snap(T0, c4_width="2X"), PLAN, POLICY)
    (det,) = result.detections
    assert det.detection == DetectionKind.DEGRADED_LINK
    assert (det.device, det.port) == ("leaf-su01-r0", 33)
    assert det.severity == Severity.WARNING and det.action == Action.ISOLATE_PORT
    assert det.episode == episode_id("lab", "degraded_link|leaf-su01-r0:33<->spine-su01-s1:1", T0)
    assert det.id == det.episode and det.ts == T0 and det.fabric == "lab"
    assert det.evidence["found"] == "leaf-su01-r0:33<->spine-su01-s1:1 2X NDR"
    assert det.evidence["snapshot"] == f"snap-{T0}"
    assert decode(encode(det)) == det
    # The same snapshot replayed from an empty state gives the very same detection.
    assert step(TrackerState(), snap(T0, c4_width="2X"), PLAN, POLICY).detections == (det,)
    # A host link's detection is keyed on its switch port; the policy picks the action.
    ticket = Policy.from_yaml("fabricHealth: {degradedLink: {action: ticket}}")
    swapped = step(TrackerState(), snap(T0, swap=True), PLAN, ticket).detections
    assert {(d.device, d.port, d.action) for d in swapped} == {
        ("leaf-su01-r0", 1, Action.TICKET), ("leaf-su01-r1", 1, Action.TICKET)}


def test_late_older_snapshot_changes_nothing() -> None:
    newer = step(TrackerState(), snap(T0 + 60_000), PLAN, POLICY)
    late = step(newer.state, snap(T0, swap=True), PLAN, POLICY)
    assert late.detections == () and late.report is None and late.state == newer.state


def test_state_round_trips_as_json_and_ignores_junk() -> None:
    state = step(TrackerState(), snap(T0, swap=True), PLAN, POLICY).state
    assert TrackerState.from_json(state.to_json()) == dataclasses.replace(state)
    assert TrackerState.from_json(None) == TrackerState()
    assert TrackerState.from_json({"open": {"k": "x", 3: 4, "ok": 5}, "last_ts": "no"}) == \
        TrackerState({"ok": 5}, None)
