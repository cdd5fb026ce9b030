"""Incident correlation through replay: one cause, one incident, and no port runbook for it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import (
    Action,
    ActionRecord,
    Counters,
    Detection,
    Incident,
    Maintenance,
    PortEvent,
    PortSample,
    Topology,
    TopologyLink,
    decode,
    encode,
)
from schemas.policy import Policy
from streams.engine import Engine
from streams.flap.logic import Excuse, FlapState
from streams.flap.logic import step as flap_step
from streams.replay import replay_all

BASE = 1_700_002_800_000
S = 1000
M = 60_000
FABRIC = "lab"


def topology() -> Topology:
    """Two spines on eight leaves (spine port i <-> leaf-su01-r{i} port 33), and four hosts
    with four rails each on leaves r1..r4 (node0N/mlx5_r <-> leaf-su01-r{r+1} port N)."""
    links = []
    for spine in ("spine-1", "spine-2"):
        up = 33 if spine == "spine-1" else 34
        for i in range(1, 9):
            links.append(TopologyLink(a_device=f"leaf-su01-r{i}", a_port=up, b_device=spine,
                                      b_port=i, width="4X", speed="NDR"))
    for n in range(1, 5):
        for r in range(4):
            links.append(TopologyLink(a_device=f"node0{n}/mlx5_{r}", a_port=1,
                                      b_device=f"leaf-su01-r{r + 1}", b_port=n,
                                      width="4X", speed="NDR"))
    links.append(TopologyLink(a_device="leaf-su02-r1", a_port=7, b_device="node09/mlx5_0",
                              b_port=1, width="4X", speed="NDR"))
    return Topology(id="topo", ts=BASE, fabric=FABRIC, source="ibnetdiscover", links=links)


def down(device: str, port: int, t: int, state: str = "down", phys: str | None = None
         ) -> PortEvent:
    return PortEvent(id=f"pe/{device}:{port}/{t}/{state}", ts=BASE + t, fabric=FABRIC,
                     source="opensm", device=device, port=port, state=state, phys_state=phys)


def spine_reboot(t0: int) -> list[PortEvent]:
    """Every link of spine-1 down within 2 s (its peers report), back within 2 min; three
    of them bounce twice while the switch settles."""
    out = []
    for i in range(1, 9):
        out.append(down(f"leaf-su01-r{i}", 33, t0 + i * 200))
    for i in range(1, 9):
        out.append(down(f"leaf-su01-r{i}", 33, t0 + 100 * S + i * 100, "up"))
    for k in (1, 2):
        for i in (2, 5, 7):
            out.append(down(f"leaf-su01-r{i}", 33, t0 + (100 + 15 * k) * S))
            out.append(down(f"leaf-su01-r{i}", 33, t0 + (105 + 15 * k) * S, "up"))
    return out


def flap(device: str, port: int, t0: int, n: int = 3, gap: int = 20 * S) -> list[PortEvent]:
    out = []
    for k in range(n):
        out.append(down(device, port, t0 + k * gap))
        out.append(down(device, port, t0 + k * gap + 2 * S, "up"))
    return out


def ticks(t0: int, t1: int, step: int = 10 * S) -> list[Counters]:
    """Counters from a quiet device: the passing of time."""
    return [Counters(id=f"tick/{t}", ts=BASE + t, fabric=FABRIC, source="perfquery",
                     device="leaf-su01-r8", ports=[PortSample(port=1, symbol_errors=0)])
            for t in range(t0, t1, step)]


def run(events: list[object], policy: Policy | None = None
        ) -> tuple[list[Detection], list[Incident], Engine]:
    engine = Engine(policy or Policy())
    dets: list[Detection] = []
    incs: list[Incident] = []
    for ev in sorted(events, key=lambda e: (0 if isinstance(e, Topology | Maintenance)
                                            else 1, e.ts)):  # type: ignore[attr-defined]
        for item in engine.feed_all(ev):  # type: ignore[arg-type]
            (dets if isinstance(item, Detection) else incs).append(item)  # type: ignore[arg-type]
    return dets, incs, engine


def test_switch_reboot_is_one_incident_and_isolates_nothing() -> None:
    retrained = Counters(  # a member that came back at 2X: a detection during the incident
        id="c-2x", ts=BASE + 101 * S, fabric=FABRIC, source="perfquery",
        device="leaf-su01-r3", ports=[PortSample(port=33, width="2X", speed="NDR")])
    real = flap("leaf-su01-r2", 3, 30 * S)  # another switch's real flap, the same minutes
    dets, incs, engine = run([topology(), *spine_reboot(0), retrained, *real,
                              *ticks(0, 400 * S)])
    assert len({i.incident for i in incs}) == 1
    assert [i.state for i in incs] == ["open"] + ["update"] * 4 + ["closed"]
    inc = incs[-1]  # the latest message says it all: every member
    assert (inc.cause.value, inc.root) == ("switch_reboot", "spine-1")
    assert len(incs[0].members) == 8  # opened at half of its links: four cables, both ends
    assert set(inc.members) == ({f"leaf-su01-r{i}:33" for i in range(1, 9)}
                                | {f"spine-1:{i}" for i in range(1, 9)})
    assert inc.started == BASE + 200
    closed = [i for i in incs if i.state == "closed"]
    # closed once every link was up for the settle time after the last bounce's up
    assert closed[0].ended == BASE + 135 * S
    assert closed[0].ts >= closed[0].ended + 120 * S
    # nothing of the spine's links isolates; its member's detection carries the incident
    member = [d for d in dets if d.key in inc.members]
    assert member and all(d.incident == inc.incident for d in member)
    assert [d.detection.value for d in member] == ["degraded_link"]
    isolating = [d for d in dets if d.action == Action.ISOLATE_PORT and d.incident is None]
    assert [(d.detection.value, d.key) for d in isolating] == [("flap", "leaf-su01-r2:3")]
    # the breaker counted the real flap only
    (su,) = engine.sus.values()
    assert sorted(su["s"]["pending"]) == ["leaf-su01-r2:3"]


def test_a_detection_from_a_closed_incidents_time_reaching_the_correlator_late_is_filed() -> None:
    # a worker restarted mid-stream hands the correlator a member's detection after the
    # incident closed: it is filed under it (a closed incident once lacked the cause it is
    # judged by, and such a detection went to the dead letters)
    _, incs, engine = run([topology(), *spine_reboot(0), *ticks(0, 400 * S)])
    closed = [i for i in incs if i.state == "closed"]
    assert closed
    inc = closed[-1]
    late = Detection.model_validate({
        "id": "det:degraded_link/leaf-su01-r4:33/late", "ts": BASE + 100 * S,
        "fabric": FABRIC, "source": "fabricwatch", "detection": "degraded_link",
        "device": "leaf-su01-r4", "port": 33, "severity": "warning",
        "action": "isolate_port", "episode": "degraded_link/leaf-su01-r4:33/late",
        "evidence": {}})
    (out,) = [o for o in engine.correlate(late) if isinstance(o, Detection)]
    assert out.incident == inc.incident
    # one within settle (120 s) of its end is filed too: before the close it would have
    # been a member's detection while open; one after that is its own
    settled = late.model_copy(update={"id": "det:x/settle", "ts": inc.ended + 60 * S})
    (out,) = [o for o in engine.correlate(settled) if isinstance(o, Detection)]
    assert out.incident == inc.incident
    after = late.model_copy(update={"id": "det:x/after", "ts": inc.ended + 121 * S})
    (out,) = [o for o in engine.correlate(after) if isinstance(o, Detection)]
    assert out.incident is None


def test_a_members_bounce_read_after_the_close_is_the_incidents_as_if_read_in_time() -> None:
    """A member bounces three more times within settle of the reboot's last up, and those
    downs reach the correlator late (a poller's counters), after the incident closed. Read
    in time they extend the incident, which excuses them; read late they are excused all
    the same: no flap, no runbook for a cable of the rebooted switch."""
    bounces = flap("leaf-su01-r4", 33, 140 * S, n=3, gap=10 * S)  # 140-162 s; ended 135 s
    # in time: the incident takes them (its members' downs while open)
    dets, incs, _ = run([topology(), *spine_reboot(0), *bounces, *ticks(0, 600 * S)])
    assert not [d for d in dets if d.detection.value == "flap"]
    assert len({i.incident for i in incs}) == 1
    # late: the incident closed at 255 s on the clock; the bounces' downs arrive at 300 s
    engine = Engine(Policy())
    engine.feed_all(topology())
    for ev in sorted([*spine_reboot(0), *ticks(0, 300 * S)], key=lambda e: e.ts):
        engine.feed_all(ev)
    late: list[object] = []
    for ev in bounces:
        late += engine.feed_all(ev)
    flaps = [d for d in late if isinstance(d, Detection) and d.detection.value == "flap"]
    assert all(d.incident is not None for d in flaps), flaps
    assert not [d for d in late if isinstance(d, Incident) and d.state == "open"]


def test_after_the_incident_a_link_is_judged_on_its_own() -> None:
    after = flap("leaf-su01-r5", 33, 300 * S, n=2)  # two downs after: not a flap alone
    dets, incs, _ = run([topology(), *spine_reboot(0), *after, *ticks(0, 400 * S)])
    assert [i.state for i in incs][-1] == "closed" and len({i.incident for i in incs}) == 1
    assert not [d for d in dets if d.detection.value == "flap"]
    # a third down after the close is a flap of its own, counting only the downs after it
    dets, _, _ = run([topology(), *spine_reboot(0), *flap("leaf-su01-r5", 33, 300 * S),
                      *ticks(0, 400 * S)])
    (f,) = [d for d in dets if d.detection.value == "flap"]
    assert f.incident is None and f.key == "leaf-su01-r5:33"
    assert f.evidence["downs_in_window"] == 3
    assert all(t >= BASE + 300 * S for t in f.evidence["down_ts"])


def test_without_correlation_the_same_reboot_would_isolate() -> None:
    # the control: the same downs with no topology have no switch to correlate to
    dets, incs, _ = run([*spine_reboot(0), *ticks(0, 400 * S)])
    assert not incs
    assert {d.key for d in dets if d.detection.value == "flap"} == {
        "leaf-su01-r2:33", "leaf-su01-r5:33", "leaf-su01-r7:33"}


def test_node_reboot_is_one_incident_naming_the_node() -> None:
    events: list[object] = [topology()]
    for r in range(4):  # every rail of node02 down together (the leaves report)
        events.append(down(f"leaf-su01-r{r + 1}", 2, 10 * S + r * 50))
        events.append(down(f"leaf-su01-r{r + 1}", 2, 70 * S + r * 50, "up"))
        events.append(down(f"leaf-su01-r{r + 1}", 2, 80 * S + r * 50))
        events.append(down(f"leaf-su01-r{r + 1}", 2, 85 * S + r * 50, "up"))
        events.append(down(f"leaf-su01-r{r + 1}", 2, 90 * S + r * 50))
        events.append(down(f"leaf-su01-r{r + 1}", 2, 95 * S + r * 50, "up"))
    stale = Detection(id="det:stale/node02/mlx5_1:0/1", ts=BASE + 20 * S, fabric=FABRIC,
                      source="fabricwatch", device="node02/mlx5_1", port=0,
                      detection="stale", severity="warning", action="ticket",
                      episode="stale/node02/mlx5_1:0/1")
    dets, incs, _ = run([*events, *ticks(0, 300 * S)])
    assert len({i.incident for i in incs}) == 1
    inc = incs[-1]
    assert (inc.cause.value, inc.root) == ("node_reboot", "node02")
    assert len(inc.members) == 8
    assert not [d for d in dets if d.detection.value == "flap"]
    # a detection of one of its HCAs while it is open carries it
    engine = Engine(Policy())
    for ev in sorted(events, key=lambda e: (0 if isinstance(e, Topology) else 1,
                                            e.ts)):  # type: ignore[attr-defined]
        engine.feed_all(ev)  # type: ignore[arg-type]
    (annotated,) = engine.correlate(stale)  # what the worker does with a new detection
    assert isinstance(annotated, Detection) and annotated.incident == inc.incident
    # one rail of four down is not a node reboot
    _, incs, _ = run([topology(), down("leaf-su01-r1", 3, 0)])
    assert not incs


def test_flap_in_a_maintenance_window_is_recorded_and_starts_nothing() -> None:
    window = Maintenance(id="mw-1", ts=BASE, fabric=FABRIC, source="fabricwatch",
                         window="mw-1", scope="device", target="leaf-su02-r1", start=BASE,
                         end=BASE + 2 * 3600 * S, reason="optics swap", actor="alice")
    inside = flap("leaf-su02-r1", 7, 60 * S)
    outside = flap("leaf-su01-r2", 3, 60 * S)
    dets, incs, engine = run([topology(), window, *inside, *outside])
    assert not incs
    by_key = {d.key: d for d in dets}
    assert by_key["leaf-su02-r1:7"].maintenance == "mw-1"
    assert by_key["leaf-su02-r1:7"].action == Action.ISOLATE_PORT  # recorded as it was
    assert by_key["leaf-su01-r2:3"].maintenance is None
    (su,) = [v["s"] for k, v in engine.sus.items()]
    assert "leaf-su02-r1:7" not in su["pending"]  # the breaker never saw it as a request
    # the far end of a link of the device is in scope too; after the end nothing is
    far = flap("node09/mlx5_0", 1, 60 * S)
    late = flap("leaf-su02-r1", 7, 3 * 3600 * S)
    dets, _, _ = run([topology(), window, *far])
    assert [d.maintenance for d in dets] == ["mw-1"]
    dets, _, _ = run([topology(), window, *late])
    assert [d.maintenance for d in dets] == [None]
    # ended early: the window no longer covers what comes after its end message
    ended = window.model_copy(update={"id": "mw-1/end", "ts": BASE + 30 * S,
                                      "state": "ended"})
    dets, _, _ = run([topology(), window, ended, *inside])
    assert [d.maintenance for d in dets] == [None]


def test_a_reboot_in_a_maintenance_window_is_the_maintenance() -> None:
    window = Maintenance(id="mw-2", ts=BASE, fabric=FABRIC, source="fabricwatch",
                         window="mw-2", scope="device", target="spine-1", start=BASE,
                         end=BASE + 3600 * S, reason="firmware upgrade", actor="bob")
    _, incs, _ = run([topology(), window, *spine_reboot(10 * S)])
    inc = incs[0]
    assert inc.cause.value == "maintenance" and inc.root == "spine-1"
    assert inc.evidence["looks_like"] == "switch_reboot" and inc.evidence["window"] == "mw-2"


def isolate_record(step: str, t: int, outcome: str = "done") -> ActionRecord:
    return ActionRecord(id=f"act/{step}/{t}", ts=BASE + t, fabric=FABRIC, source="fabricwatch",
                        device="leaf-su01-r1", port=1, workflow_id="remediate/lab/x",
                        step=step, actor="fabricwatch", outcome=outcome)


def test_self_inflicted_downs_are_not_flaps() -> None:
    # isolated (the port reports Disabled, its peer just down), the technician reseats twice
    events: list[object] = [topology(), isolate_record("isolate", 0),
                            down("leaf-su01-r1", 1, 500, phys="Disabled"),
                            down("node01/mlx5_0", 1, 600), isolate_record("ticket", 5 * S),
                            down("node01/mlx5_0", 1, 60 * S, "up"),
                            down("node01/mlx5_0", 1, 61 * S),
                            down("node01/mlx5_0", 1, 90 * S, "up"),
                            down("node01/mlx5_0", 1, 91 * S),
                            isolate_record("ladder:clean-and-reseat", 95 * S),
                            isolate_record("unisolate", 100 * S),
                            down("leaf-su01-r1", 1, 101 * S, "up")]
    dets, incs, _ = run(events)
    assert not dets and not incs
    # the same downs with no runbook records are a flap
    plain = [e for e in events if not isinstance(e, ActionRecord)]
    dets, _, _ = run(plain)
    assert [d.key for d in dets] == ["node01/mlx5_0:1"]
    # a down after the un-isolation's grace counts again
    more = [*events, *flap("node01/mlx5_0", 1, 200 * S)]
    dets, _, _ = run(more)
    assert [(d.key, d.evidence["downs_in_window"]) for d in dets] == [("node01/mlx5_0:1", 3)]


def test_replay_cli_prints_incidents(tmp_path: Path) -> None:
    src = tmp_path / "history.jsonl"
    events = [topology(), *spine_reboot(0), *ticks(0, 400 * S)]
    src.write_bytes(b"".join(encode(e) + b"\n" for e in events))  # type: ignore[arg-type]
    cli = [str(Path(sys.executable).parent / "fabricwatch")]
    proc = subprocess.run([*cli, "replay", str(src)], capture_output=True, check=False,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = [decode(x) for x in proc.stdout.splitlines()]
    incs = [o for o in out if isinstance(o, Incident)]
    assert [i.state for i in incs] == ["open"] + ["update"] * 4 + ["closed"]
    raw = proc.stdout.splitlines()[0]
    for field in (b'"kind":"incident"', b'"incident":', b'"cause":"switch_reboot"',
                  b'"root":"spine-1"', b'"members":'):
        assert field in raw
    assert b"6 incident message(s)" in proc.stderr


def test_replay_all_is_deterministic() -> None:
    events = [topology(), *spine_reboot(0), *flap("leaf-su01-r2", 3, 0), *ticks(0, 400 * S)]
    lines = [encode(e) for e in events]  # type: ignore[arg-type]
    a = [encode(x) for x in replay_all(lines, Policy(), on_error=None)]
    b = [encode(x) for x in replay_all(lines, Policy(), on_error=None)]
    assert a == b and any(b'"kind":"incident"' in x for x in a)


@settings(max_examples=60, deadline=None)
@given(downs=st.lists(st.integers(min_value=0, max_value=600_000), min_size=1, max_size=12),
       start=st.integers(min_value=0, max_value=600_000),
       length=st.integers(min_value=0, max_value=600_000))
def test_excused_downs_never_count(downs: list[int], start: int, length: int) -> None:
    """Whatever the order of downs and excuse, a flap counts only downs outside it."""
    policy = Policy()
    ex = Excuse(id="inc/x", fabric=FABRIC, device="d", port=1, start=BASE + start,
                end=BASE + start + length, ts=BASE)
    outside = sorted(t for t in downs if not start <= t <= start + length)
    state = FlapState()
    fired = []
    _, _ = flap_step(state, ex, policy)
    for i, t in enumerate(sorted(downs)):
        _, dets = flap_step(state, PortEvent(id=f"e{i}", ts=BASE + t, fabric=FABRIC,
                                             source="opensm", device="d", port=1,
                                             state="down"), policy)
        fired += dets
    # 30 min window, more than 2 downs: with at most 10 min of downs, the third outside fires
    assert bool(fired) == (len(outside) > 2)
    assert FlapState.from_json(state.to_json()) == state


def test_the_worker_clock_is_event_time_plus_the_wall_time_since() -> None:
    """A backlog read in one burst is not settled until settle has passed on the wall."""
    from streams.incidents import logic

    policy = Policy()
    index = logic.index_topology(topology())
    state = None
    wall = 5_000_000_000_000  # the worker's clock: far ahead of these old events
    for ev in spine_reboot(0):
        state, _ = logic.step(state, index, ev, policy, su_of=lambda d: None, wall=wall)
    assert state is not None and len(state["open"]) == 1
    _, out = logic.step(state, index, logic.Tick("t1", FABRIC, wall + 60 * S, wall=True),
                        policy, su_of=lambda d: None)
    assert not out.incidents  # 60 s on the wall after the last up: not settled yet
    _, out = logic.step(state, index, logic.Tick("t2", FABRIC, wall + 121 * S, wall=True),
                        policy, su_of=lambda d: None)
    assert [i.state for i in out.incidents] == ["closed"]
    assert out.incidents[0].ended == BASE + 135 * S


def test_an_sm_storm_across_the_fabric_is_one_sm_event() -> None:
    # twenty leaves with eight hosts each; one cable of each drops in the same sweep
    links = [TopologyLink(a_device=f"leaf-su02-r{leaf}", a_port=h + 1,
                          b_device=f"n{leaf:02d}{h}/mlx5_{r}", b_port=1)
             for leaf in range(20) for h in range(8) for r in range(2)
             if r == 0 or h == 0]
    topo = Topology(id="sm-topo", ts=BASE, fabric=FABRIC, source="ibnetdiscover", links=links)

    def sweep(source: str) -> list[PortEvent]:
        return [PortEvent(id=f"sm/{source}/{leaf}", ts=BASE + 10 * S + leaf * 50,
                          fabric=FABRIC, source=source, device=f"leaf-su02-r{leaf}",
                          port=3, state="down", reason="ACTIVE -> DOWN")
                for leaf in range(20)]

    _, incs, _ = run([topo, *sweep("opensm")])
    assert len({i.incident for i in incs}) == 1
    inc = incs[-1]
    assert (inc.cause.value, inc.root) == ("sm_event", "opensm")
    assert len(inc.members) == 40  # opened at the 16th link (its reason says so), then grew
    assert "16 links of 32 devices" in (incs[0].reason or "")
    # the same downs from the hosts' own agents are not the SM's word: no SM event
    _, incs, _ = run([topo, *sweep("sysfs")])
    assert not incs
    # and a switch's own downs reported by the SM are that switch's reboot, not an SM event
    _, incs, _ = run([topology(), *spine_reboot(0)])
    assert {i.cause.value for i in incs} == {"switch_reboot"}


def test_an_sm_storm_in_a_fabric_wide_maintenance_window_is_the_maintenance() -> None:
    # its reason is told as the SM event it looks like (it once read the switch's
    # "connected" links, which an SM event has not: KeyError, every down dead-lettered)
    links = [TopologyLink(a_device=f"leaf-su02-r{leaf}", a_port=h + 1,
                          b_device=f"n{leaf:02d}{h}/mlx5_0", b_port=1)
             for leaf in range(20) for h in range(2)]
    topo = Topology(id="sm-topo", ts=BASE, fabric=FABRIC, source="ibnetdiscover", links=links)
    window = Maintenance(id="mw-f", ts=BASE, fabric=FABRIC, source="fabricwatch",
                         window="mw-f", scope="fabric", target=FABRIC, start=BASE,
                         end=BASE + 3600 * S, reason="SM upgrade", actor="carol")
    sweep = [PortEvent(id=f"sm/{leaf}", ts=BASE + 10 * S + leaf * 50, fabric=FABRIC,
                       source="opensm", device=f"leaf-su02-r{leaf}", port=1, state="down",
                       reason="ACTIVE -> DOWN") for leaf in range(20)]
    back = [e.model_copy(update={"id": f"{e.id}/up", "ts": e.ts + 60 * S, "state": "up",
                                 "reason": None}) for e in sweep]
    _, incs, _ = run([topo, window, *sweep, *back, *ticks(20 * S, 900 * S)])
    assert incs and len({i.incident for i in incs}) == 1
    first, last = incs[0], incs[-1]
    assert (first.cause.value, first.root) == ("maintenance", "opensm")
    assert first.evidence["looks_like"] == "sm_event" and first.evidence["window"] == "mw-f"
    assert (first.reason or "").startswith("SM event: opensm reported")
    assert "in maintenance window mw-f" in (first.reason or "")
    assert last.state == "closed"


def test_an_isolation_undone_by_hand_stops_excusing_at_the_link_up() -> None:
    # isolated by fabricwatch, un-isolated by a human (no record of ours): its link comes up,
    # and from then on its downs count again
    events: list[object] = [topology(), isolate_record("isolate", 0),
                            down("leaf-su01-r1", 1, 500, phys="Disabled"),
                            down("leaf-su01-r1", 1, 60 * S, "up"),
                            *flap("node01/mlx5_0", 1, 120 * S)]
    dets, _, _ = run(events)
    assert [(d.key, d.evidence["downs_in_window"]) for d in dets] == [("node01/mlx5_0:1", 3)]


def test_a_snapshot_taken_during_the_reboot_does_not_forget_its_links() -> None:
    # the discovery during the outage finds none of spine-1's links; the reboot's downs that
    # come after it must still be the spine's, and its ups must still close the incident
    during = Topology(id="topo-during", ts=BASE + 1000, fabric=FABRIC, source="ibnetdiscover",
                      links=[link for link in topology().links
                             if "spine-1" not in (link.a_device, link.b_device)])
    events = spine_reboot(0)
    stream = [topology(), *events[:4], during, *events[4:], *ticks(0, 400 * S)]
    engine = Engine(Policy())
    incs = [o for ev in stream for o in engine.feed_all(ev)  # type: ignore[arg-type]
            if isinstance(o, Incident)]
    assert len({i.incident for i in incs}) == 1
    assert incs[-1].state == "closed" and len(incs[-1].members) == 16
    # a port seen with another peer takes the new one, and the old far end forgets it
    from streams.incidents.logic import index_topology

    moved = Topology(id="topo-moved", ts=BASE, fabric=FABRIC, source="ibnetdiscover",
                     links=[TopologyLink(a_device="leaf-su01-r1", a_port=33,
                                         b_device="spine-2", b_port=9)])
    index = index_topology(moved, index_topology(topology()))
    assert index["peer"]["leaf-su01-r1:33"] == "spine-2:9"
    assert "spine-1:1" not in index["peer"]
    assert index["switch_ports"]["spine-1"] == 7 and index["switch_ports"]["spine-2"] == 9


def test_a_member_flap_that_raced_its_excuse_is_not_published() -> None:
    # a worker reading a backlog: the flap detector judged the reboot's downs before the
    # correlator's excuse reached it; the correlator does not publish that flap
    engine = Engine(Policy())
    for ev in [topology(), *spine_reboot(0)[:8]]:
        engine.feed_all(ev)

    def flap_of(downs: list[int]) -> Detection:
        return Detection(id=f"det:flap/leaf-su01-r2:33/{downs[-1]}", ts=BASE + downs[-1],
                         fabric=FABRIC, source="fabricwatch", device="leaf-su01-r2", port=33,
                         detection="flap", severity="critical", action="isolate_port",
                         episode=f"flap/leaf-su01-r2:33/{downs[-1]}",
                         evidence={"down_ts": [BASE + t for t in downs],
                                   "max_link_downs": 2, "downs_in_window": len(downs)})

    assert engine.correlate(flap_of([400, 115 * S, 130 * S])) == []
    # one that also counts three downs of its own before the reboot is a flap all the same
    (kept,) = engine.correlate(flap_of([-90 * S, -60 * S, -30 * S, 400]))
    assert isinstance(kept, Detection) and kept.incident is not None


def test_a_redelivery_kept_by_an_earlier_version_repeats_its_annotation() -> None:
    # states of an earlier version kept each redelivery's whole detection, not the
    # [incident, maintenance] pair: a redelivery across the upgrade gives the same answer
    from streams.incidents.logic import outputs_from_wire

    det = Detection.model_validate({
        "id": "det:flap/leaf-su01-r2:3/1", "ts": BASE, "fabric": FABRIC,
        "source": "fabricwatch", "detection": "flap", "device": "leaf-su01-r2", "port": 3,
        "severity": "critical", "action": "isolate_port", "episode": "flap/leaf-su01-r2:3/1",
        "evidence": {}})
    filed = det.model_copy(update={"incident": "inc/x"})
    for kept in ([["inc/x", None]], [filed.to_wire()]):
        out = outputs_from_wire([[], [], kept], det)
        assert [d.incident for d in out.detections] == ["inc/x"]
        assert out.detections[0].model_dump() == filed.model_dump()


def test_downs_hours_apart_are_not_one_storm_whatever_order_they_arrive_in() -> None:
    # Twelve leaves' links drop together; four other leaves' downs came in earlier but are
    # five hours later in event time (another test's backlog, a skewed clock). Together they
    # would pass 16 links of 8 devices; within the spread they are 12 links: no SM event.
    def dn(leaf: int, t: int) -> PortEvent:
        return PortEvent(id=f"sm/{leaf}/{t}", ts=BASE + t, fabric=FABRIC, source="opensm",
                         device=f"leaf-su03-r{leaf}", port=5, state="down")

    later = [dn(leaf, 5 * 3600 * S) for leaf in range(20, 24)]
    storm = [dn(leaf, 10 * S + leaf * 10) for leaf in range(12)]
    engine = Engine(Policy())
    incs = [item for ev in [*later, *storm] for item in engine.feed_all(ev)
            if isinstance(item, Incident)]
    assert incs == []
    # ...and sixteen leaves' downs within the spread are one, though the earliest arrives last
    storm = [dn(leaf, 10 * S + leaf * 10) for leaf in range(16)]
    engine = Engine(Policy())
    incs = [item for ev in [*later, *storm[1:], storm[0]] for item in engine.feed_all(ev)
            if isinstance(item, Incident)]
    assert [(i.cause.value, i.state) for i in incs][:1] == [("sm_event", "open")]
    assert incs[0].started == BASE + 10 * S  # the burst's first down, not the later ones
    assert len(incs[0].members) == 16


def _fed(engine: Engine, events: list[PortEvent]) -> tuple[list[Detection], list[Incident]]:
    """Events through the engine in the order given (arrival order, not event time)."""
    dets: list[Detection] = []
    incs: list[Incident] = []
    for ev in events:
        for item in engine.feed_all(ev):
            (dets if isinstance(item, Detection) else incs).append(item)  # type: ignore[arg-type]
    return dets, incs


def test_a_reboot_whose_downs_arrive_among_newer_ones_is_still_one_incident() -> None:
    # spine-1's eight links go down within 1.4 s; its peers' reports arrive three, then two
    # unrelated downs 7-8 s newer, then the rest (another partition, another hop). Before,
    # each newer down wiped the partial count (older than it by more than the spread): no
    # incident, and the links that bounced while the spine settled were flaps to isolate.
    reboot = spine_reboot(0)
    downs = [e for e in reboot if e.state == "down" and e.ts < BASE + 10 * S]
    rest = [e for e in reboot if e not in downs]
    other = [down("leaf-su01-r2", 3, 7 * S), down("leaf-su01-r3", 3, 8 * S)]
    engine = Engine(Policy())
    engine.feed_all(topology())
    dets, incs = _fed(engine, [*downs[:3], other[0], *downs[3:6], other[1], *downs[6:], *rest])
    assert {(i.cause.value, i.root) for i in incs} == {("switch_reboot", "spine-1")}
    assert len(incs[-1].members) == 16
    assert not [d for d in dets if d.detection.value == "flap"]


def test_nodes_rebooting_together_are_their_node_incidents_and_no_sm_event() -> None:
    # three hosts of eight rails each reboot together (their leaves report through the SM,
    # rails interleaved, 100 ms apart): three node incidents. Before, the SM's 24 downs of
    # 11 devices also opened an SM event: four pages for three reboots.
    links = [TopologyLink(a_device=f"node5{n}/mlx5_{r}", a_port=1, b_device=f"leaf-su05-r{r}",
                          b_port=n, width="4X", speed="NDR") for n in range(3) for r in range(8)]
    engine = Engine(Policy())
    engine.feed_all(Topology(id="t5", ts=BASE, fabric=FABRIC, source="ibnetdiscover",
                             links=links))
    downs = [down(f"leaf-su05-r{r}", n, (3 * r + n) * 100) for r in range(8) for n in range(3)]
    _, incs = _fed(engine, downs)
    assert sorted({(i.cause.value, i.root) for i in incs}) == [
        ("node_reboot", "node50"), ("node_reboot", "node51"), ("node_reboot", "node52")]


def test_a_closed_incidents_downs_read_again_open_nothing() -> None:
    # A worker killed after a reboot's incident closed reads the downs again from its last
    # commit, more than the 32 ids it remembers back. They are that incident's, in its
    # time: before, they opened it again (a second open of the same id, a second page).
    engine = Engine(Policy())
    engine.feed_all(topology())
    reboot = spine_reboot(0)
    _, first = _fed(engine, reboot)
    quiet = [down("leaf-su01-r8", 1, t, "up") for t in range(140 * S, 400 * S, 5 * S)]
    _, closing = _fed(engine, quiet)
    assert [i.state for i in closing] == ["closed"]
    _, again = _fed(engine, reboot)
    assert again == []
    assert len({i.incident for i in [*first, *closing]}) == 1


def test_a_reboots_first_down_arriving_after_the_open_is_excused_too() -> None:
    # The incident opens at its fourth down; the reboot's first down (leaf-su01-r1:33 at
    # 0.2 s) arrives after, 1.2 s late. The incident keeps its id and starts at that down,
    # so its excuse covers it: two bounces of that link later are two downs, not a flap.
    # (Before: the excuse began at the open's first down, and they made three.)
    reboot = spine_reboot(0)
    downs = [e for e in reboot if e.state == "down" and e.ts < BASE + 10 * S]
    rest = [e for e in reboot if e not in downs]
    quiet = [down("leaf-su01-r8", 1, t, "up") for t in range(140 * S, 400 * S, 5 * S)]
    later = [down("leaf-su01-r1", 33, 300 * S), down("leaf-su01-r1", 33, 302 * S, "up"),
             down("leaf-su01-r1", 33, 600 * S), down("leaf-su01-r1", 33, 602 * S, "up")]
    engine = Engine(Policy())
    engine.feed_all(topology())
    dets, incs = _fed(engine, [*downs[1:5], downs[0], *downs[5:], *rest, *quiet, *later])
    assert len({i.incident for i in incs}) == 1
    assert incs[0].incident.endswith(f"/{BASE + 400}") and incs[-1].started == BASE + 200
    assert not [d for d in dets if d.detection.value == "flap"]


def test_a_down_reported_after_its_links_up_does_not_hold_the_incident_open() -> None:
    # leaf-su01-r4:33 came back first, at 45 s; its down (0.8 s) is read after that up, 44 s
    # late (within the lateness). It joins as a link already back: the incident closes once
    # the rest has settled, not after max_open (an hour) with a link "still down" that has
    # been up all along.
    reboot = [e for e in spine_reboot(0) if e.ts < BASE + 110 * S]  # no bounces
    late = next(e for e in reboot if e.key == "leaf-su01-r4:33" and e.state == "down")
    early_up = down("leaf-su01-r4", 33, 45 * S, "up")
    others = [e for e in reboot if e.key != late.key]
    quiet = [down("leaf-su01-r8", 1, t, "up") for t in range(110 * S, 400 * S, 5 * S)]
    engine = Engine(Policy())
    engine.feed_all(topology())
    _, incs = _fed(engine, [*[e for e in others if e.state == "down"], early_up, late,
                            *[e for e in others if e.state == "up"], *quiet])
    closed = [i for i in incs if i.state == "closed"]
    assert len(closed) == 1 and "still_down" not in closed[0].evidence
    assert closed[0].ts < BASE + 400 * S
    assert "leaf-su01-r4:33" in closed[0].members


def test_a_node_rebooting_just_after_its_leaf_is_its_own_incident_read_late_too() -> None:
    """Leaf leaf-su01-r1 reboots (down at 0 s, back at 60 s); node01 reboots at 150 s, one
    of its rails on that leaf, a member of the leaf's closed incident, inside what it covers.
    Read late (after the leaf's incident closed) the node's downs still make its node
    incident, as read in time: the closed incident holds the down for its own root only."""
    ports = (1, 2, 3, 4, 33, 34)
    leaf = [down("leaf-su01-r1", p, 200 * i) for i, p in enumerate(ports)]
    leaf += [down("leaf-su01-r1", p, 60 * S + 100 * i, "up") for i, p in enumerate(ports)]
    node = []
    for k in range(3):
        for r in range(4):
            node.append(down(f"node01/mlx5_{r}", 1, 150 * S + k * 10 * S + r * 100))
            node.append(down(f"node01/mlx5_{r}", 1, 150 * S + k * 10 * S + 5 * S + r * 100,
                             "up"))

    def outcome(out: list[object]) -> tuple[set[tuple[str, str]], list[str]]:
        incs = {(i.cause.value, i.root) for i in out if isinstance(i, Incident)}
        acting = [d.key for d in out if isinstance(d, Detection) and d.incident is None
                  and d.action == Action.ISOLATE_PORT]
        return incs, acting

    in_time = Engine(Policy())
    in_time.feed_all(topology())
    out: list[object] = []
    for ev in sorted([*leaf, *node, *ticks(0, 600 * S)], key=lambda e: e.ts):
        out += in_time.feed_all(ev)
    want = ({("switch_reboot", "leaf-su01-r1"), ("node_reboot", "node01")}, [])
    assert outcome(out) == want
    late = Engine(Policy())
    late.feed_all(topology())
    out = []
    for ev in sorted([*leaf, *ticks(0, 300 * S)], key=lambda e: e.ts):
        out += late.feed_all(ev)
    for ev in [*node, *ticks(300 * S, 600 * S)]:
        out += late.feed_all(ev)
    assert outcome(out) == want


def test_a_reboots_down_read_after_the_same_links_later_bounce_still_counts() -> None:
    """node01 reboots: its four rails go down within 0.3 s (the leaf ends report), come back
    at 30 s, and rail 1 bounces at 40 s. The host end's report of that bounce is read before
    the leaf's report of the reboot's down on the same link (two sources, two partitions).
    Before, a link kept only its newest down: the reboot's was lost, three rails of four
    were no node reboot, and read that way the node's downs were judged one by one."""
    reboot = [down(f"leaf-su01-r{r + 1}", 1, r * 100) for r in range(4)]
    back = [down(f"leaf-su01-r{r + 1}", 1, 30 * S + r * 100, "up") for r in range(4)]
    bounce = [down("node01/mlx5_1", 1, 40 * S), down("node01/mlx5_1", 1, 42 * S, "up")]

    def incidents(order: list[PortEvent]) -> set[tuple[str, str, int]]:
        engine = Engine(Policy())
        engine.feed_all(topology())
        out: list[object] = []
        for ev in [*order, *ticks(60 * S, 400 * S)]:
            out += engine.feed_all(ev)
        return {(i.cause.value, i.root, i.started) for i in out if isinstance(i, Incident)}

    in_time = incidents(sorted([*reboot, *back, *bounce], key=lambda e: e.ts))
    assert in_time == {("node_reboot", "node01", BASE)}
    assert incidents([*bounce, *reboot, *back]) == in_time


@st.composite
def _reboots_read_late(draw: st.DrawFn) -> tuple[list[PortEvent], dict[str, int]]:
    """Node reboots, each rail reported by either end, some rails bouncing after they came
    back (reported by the other end), and a delay per reporting device (a poller, a source
    read late), within the allowed lateness."""
    events: list[PortEvent] = []
    for n in range(1, 5):
        if not draw(st.booleans()):
            continue
        t0 = draw(st.integers(0, 200)) * S
        for r in range(4):
            leaf, host = (f"leaf-su01-r{r + 1}", n), (f"node0{n}/mlx5_{r}", 1)
            first, other = (leaf, host) if draw(st.booleans()) else (host, leaf)
            events.append(down(*first, t0 + draw(st.integers(0, 3000))))
            back = t0 + draw(st.integers(10, 40)) * S
            events.append(down(*first, back, "up"))
            if draw(st.booleans()):
                bounce = back + draw(st.integers(2, 20)) * S
                events += [down(*other, bounce), down(*other, bounce + 2 * S, "up")]
    delays = {e.device: draw(st.integers(0, 30)) * S for e in events}
    return events, delays


@settings(max_examples=80, deadline=None)
@given(case=_reboots_read_late())
def test_reboots_read_late_are_the_incidents_read_in_time(
        case: tuple[list[PortEvent], dict[str, int]]) -> None:
    events, delays = case

    def outcome(order: list[PortEvent]) -> tuple[set[tuple[str, str]], list[str]]:
        engine = Engine(Policy())
        engine.feed_all(topology())
        out: list[object] = []
        for ev in [*order, *ticks(400 * S, 900 * S)]:
            out += engine.feed_all(ev)
        return ({(i.cause.value, i.root) for i in out if isinstance(i, Incident)},
                sorted(d.key for d in out if isinstance(d, Detection) and d.incident is None
                       and d.action == Action.ISOLATE_PORT))

    in_time = outcome(sorted(events, key=lambda e: e.ts))
    read_late = outcome(sorted(events, key=lambda e: (e.ts + delays[e.device], e.ts)))
    assert read_late == in_time


def test_a_members_down_past_the_settle_is_its_own_whenever_the_clock_got_there() -> None:
    """node01 reboots (back at 30 s, settled by 150 s); its rail 1 then flaps at 157, 267
    and 377 s. Read with the clock's ticks on time, the incident closed at 150 s and the
    flap is the link's own. Read with the ticks 30 s late, no tick had moved the clock past
    the settle when the 157 s down came: it joined the incident, which excused the flap."""
    reboot = [down(f"leaf-su01-r{r + 1}", 1, r * 100) for r in range(4)]
    reboot += [down(f"leaf-su01-r{r + 1}", 1, 30 * S + r * 100, "up") for r in range(4)]
    bounces = [e for t in (157, 267, 377) for e in (down("node01/mlx5_1", 1, t * S),
                                                    down("node01/mlx5_1", 1, (t + 2) * S, "up"))]
    clock = ticks(0, 600 * S)

    def outcome(order: list[object]) -> tuple[set[tuple[str, str]], list[str]]:
        engine = Engine(Policy())
        engine.feed_all(topology())
        out: list[object] = []
        for ev in order:
            out += engine.feed_all(ev)
        return ({(i.cause.value, i.root) for i in out if isinstance(i, Incident)},
                sorted(d.key for d in out if isinstance(d, Detection) and d.incident is None
                       and d.action == Action.ISOLATE_PORT))

    events = [*reboot, *bounces]
    in_time = outcome(sorted([*events, *clock], key=lambda e: e.ts))
    assert in_time == ({("node_reboot", "node01")}, ["node01/mlx5_1:1"])
    late_ticks = sorted([(e.ts, 0, e) for e in events] + [(t.ts + 30 * S, 1, t) for t in clock],
                        key=lambda x: (x[0], x[1]))
    assert outcome([e for _, _, e in late_ticks]) == in_time


def test_a_roots_down_read_before_its_incident_opened_joins_it() -> None:
    """spine-1 reboots: four of its links down within 0.6 s (their leaves report 10 s late),
    a fifth at 8 s, back at 10 s; that fifth link goes down again at 400 and 500 s. In time
    the 8 s down arrives after the open and joins; read before the open it was outside the
    span that opened it and was dropped, so the link's later downs made a flap with the
    reboot's down among them."""
    reboot = [down(f"leaf-su01-r{i}", 33, (i - 1) * 200) for i in range(1, 5)]
    fifth = [down("leaf-su01-r5", 33, 8 * S), down("leaf-su01-r5", 33, 10 * S, "up")]
    back = [down(f"leaf-su01-r{i}", 33, 10 * S + i * 100, "up") for i in range(1, 5)]
    later = [down("leaf-su01-r5", 33, 400 * S), down("leaf-su01-r5", 33, 402 * S, "up"),
             down("leaf-su01-r5", 33, 500 * S), down("leaf-su01-r5", 33, 502 * S, "up")]

    def outcome(order: list[PortEvent]) -> tuple[set[tuple[str, str, int]], list[str]]:
        engine = Engine(Policy())
        engine.feed_all(topology())
        out: list[object] = []
        for ev in [*order, *ticks(600 * S, 900 * S)]:
            out += engine.feed_all(ev)
        incs = [i for i in out if isinstance(i, Incident)]
        return ({(i.cause.value, i.root, len(i.members)) for i in incs if i.state == "closed"},
                sorted(d.key for d in out if isinstance(d, Detection) and d.incident is None
                       and d.action == Action.ISOLATE_PORT))

    in_time = outcome(sorted([*reboot, *fifth, *back, *later], key=lambda e: e.ts))
    assert in_time == ({("switch_reboot", "spine-1", 10)}, [])
    assert outcome([*fifth, *reboot, *back, *later]) == in_time


def test_a_flap_published_before_its_incident_opened_is_published_again_under_it() -> None:
    """node01/mlx5_0 went down at -100 and -50 s; node01 reboots at 0 s and that rail's
    down (0.2 s) is read before the last leaf's report (0.3 s): the flap (three downs) is
    published, and the node's incident opens next, with the flap's last down its own.
    Without it the flap is none: the correlator publishes it again under the incident, and
    only that flap. A flap whose downs all came before the incident is the link's own."""
    raced = [down("node01/mlx5_0", 1, -100 * S), down("node01/mlx5_0", 1, -98 * S, "up"),
             down("node01/mlx5_0", 1, -50 * S), down("node01/mlx5_0", 1, -48 * S, "up"),
             down("leaf-su01-r2", 1, 0), down("leaf-su01-r3", 1, 100),
             down("node01/mlx5_0", 1, 200), down("leaf-su01-r4", 1, 300)]
    own = flap("node02/mlx5_0", 1, -200 * S)  # three downs of its own, then node02 reboots
    own += [down(f"leaf-su01-r{r + 1}", 2, 10 * S + r * 100) for r in range(4)]
    engine = Engine(Policy())
    engine.feed_all(topology())
    out: list[object] = []
    for ev in sorted([*raced, *own], key=lambda e: e.ts):
        out += engine.feed_all(ev)
    flaps = [d for d in out if isinstance(d, Detection) and d.detection.value == "flap"]
    first = next(d for d in flaps if d.device == "node01/mlx5_0")
    again = [d for d in flaps if d.id.endswith("/explained")]
    assert [(d.id, d.incident, d.episode, d.evidence["explains"]) for d in again] == [
        (f"{first.id}/explained", "inc/node_reboot/node01/1700002800000", first.episode,
         first.id)]
    assert first.incident is None
    node02 = [d for d in flaps if d.device == "node02/mlx5_0"]
    assert [d.incident for d in node02] == [None]  # the link's own flap stands


def test_a_redelivered_down_repeats_the_flap_it_explained() -> None:
    from streams.incidents.logic import index_topology

    raced = [down("node01/mlx5_0", 1, -100 * S), down("node01/mlx5_0", 1, -50 * S),
             down("leaf-su01-r2", 1, 0), down("leaf-su01-r3", 1, 100),
             down("node01/mlx5_0", 1, 200), down("leaf-su01-r4", 1, 300)]
    engine = Engine(Policy())
    engine.feed_all(topology())
    for ev in raced[:-1]:
        engine.feed_all(ev)
    box = engine.correlation.get(FABRIC)
    assert box is not None
    idx = index_topology(topology(), None)
    box = {"s": box, "r": []}
    box, first, again = engine.apply_correlate(box, idx, raced[-1])
    assert not again and [d.id for d in first.followups] == [
        "det:flap/node01/mlx5_0:1/1700002800200/explained"]
    box = orjson.loads(orjson.dumps(box))  # as the changelog keeps it
    box, repeated, again = engine.apply_correlate(box, idx, raced[-1])
    assert again and repeated.followups == first.followups


def test_a_link_down_again_after_its_up_is_down_when_the_incident_opens_read_late() -> None:
    """spine-1 reboots (four links down within 0.6 s); link 1 comes up at 1 s and goes down
    again at 2 s, where it stays until 1000 s, then bounces while it settles. Read with the
    other three reports late (after link 1's second down), the link was taken as back (its
    first down's state), the incident closed at 100 s, and its settling bounces flapped."""
    reboot = [down(f"leaf-su01-r{i}", 33, (i - 1) * 200) for i in range(1, 5)]
    bounce = [down("leaf-su01-r1", 33, 1000, "up"), down("leaf-su01-r1", 33, 2000)]
    back = [down(f"leaf-su01-r{i}", 33, 100 * S + i * 100, "up") for i in range(2, 5)]
    settle = [down("leaf-su01-r1", 33, 1000 * S, "up")] + [
        e for t in (1010, 1020, 1030)
        for e in (down("leaf-su01-r1", 33, t * S), down("leaf-su01-r1", 33, (t + 2) * S, "up"))]

    def outcome(order: list[PortEvent]) -> tuple[list[tuple[str, int | None]], list[str]]:
        engine = Engine(Policy())
        engine.feed_all(topology())
        out: list[object] = []
        for ev in [*order, *ticks(1100 * S, 1400 * S)]:
            out += engine.feed_all(ev)
        return ([(i.state, i.ended) for i in out if isinstance(i, Incident)
                 and i.state == "closed"],
                sorted(d.key for d in out if isinstance(d, Detection) and d.incident is None
                       and d.action == Action.ISOLATE_PORT))

    in_time = outcome(sorted([*reboot, *bounce, *back, *settle], key=lambda e: e.ts))
    assert in_time == ([("closed", BASE + 1032 * S)], [])
    assert outcome([reboot[0], *bounce, *reboot[1:], *back, *settle]) == in_time


def test_an_explained_flap_withdraws_its_request_from_the_breaker_and_is_explained_once() -> None:
    """The raced flap of a node's rail, explained by the node's reboot, no longer holds its
    SU's budget (a real flap ten minutes on gets no breaker_open); its redelivery keeps it
    once, so the explanation is published once."""
    raced = [down("leaf-su01-r1", 1, -100 * S), down("leaf-su01-r1", 1, -98 * S, "up"),
             down("leaf-su01-r1", 1, -50 * S), down("leaf-su01-r1", 1, -48 * S, "up"),
             down("leaf-su01-r1", 1, 0), down("leaf-su01-r2", 1, 100),
             down("leaf-su01-r3", 1, 200), down("leaf-su01-r4", 1, 300)]
    back = [down(f"leaf-su01-r{r + 1}", 1, 30 * S + r * 100, "up") for r in range(4)]
    real = flap("leaf-su01-r5", 33, 600 * S)  # another port of su01, its own flap
    engine = Engine(Policy())
    engine.feed_all(topology())
    out: list[object] = []
    for ev in [*raced[:5]]:
        out += engine.feed_all(ev)
    (first,) = [d for d in out if isinstance(d, Detection)]
    engine.correlate(first)  # redelivered: kept once
    for ev in [*raced[5:], *back, *real, *ticks(700 * S, 800 * S)]:
        out += engine.feed_all(ev)
    dets = [d for d in out if isinstance(d, Detection)]
    assert [d.id for d in dets if d.id.endswith("/explained")] == [f"{first.id}/explained"]
    assert [d.detection.value for d in dets if d.incident is None] == ["flap", "flap"]


def test_a_member_that_keeps_bouncing_is_not_excused_for_ever() -> None:
    """spine-1 reboots, and one of its links then bounces every minute for two hours. Each
    bounce is a change, so the incident never settled, and its excuse kept the link's own
    flapping from ever counting. It is open at most ``maxOpen`` (1 h) after it started;
    after that the link is judged on its own, and it flaps."""
    bouncing = [e for k in range(120) for e in (
        down("leaf-su01-r3", 33, (200 + 60 * k) * S),
        down("leaf-su01-r3", 33, (202 + 60 * k) * S, "up"))]
    dets, incs, _ = run([topology(), *spine_reboot(0), *bouncing])
    closed = [i for i in incs if i.state == "closed"]
    assert [(i.root, i.ts - BASE <= 3600 * S + 60 * S) for i in closed] == [("spine-1", True)]
    flaps = [d for d in dets if d.detection.value == "flap" and d.incident is None]
    assert {d.key for d in flaps} == {"leaf-su01-r3:33"}
    assert all(d.ts > closed[0].ts for d in flaps)
