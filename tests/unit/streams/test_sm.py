"""The SM detector (streams.sm) and its incidents, through the same Engine replay runs."""

from __future__ import annotations

from typing import Any

from schemas import (
    Detection,
    DetectionKind,
    Incident,
    PortEvent,
    SmEvent,
    Topology,
    TopologyLink,
)
from schemas.events import IncidentCause
from schemas.policy import Policy
from streams.engine import Engine
from streams.sm import logic

T0 = 1_780_000_000_000


def sm(event: str, ts: int, **fields: Any) -> SmEvent:
    return SmEvent.model_validate({"id": f"{event}/{ts}/{fields.get('sm', 'sm-1')}", "ts": ts,
                                   "fabric": "f", "source": "opensm", "event": event,
                                   "sm": "sm-1", **fields})


def sweep(ts: int, *ports: str) -> SmEvent:
    return sm("sweep", ts, start=ts - 300, end=ts, trigger="trap 128", ports=list(ports),
              devices=sorted({p.rsplit(":", 1)[0] for p in ports}))


def run(events: list[SmEvent], policy: Policy | None = None) -> list[Detection]:
    state, out = None, []
    for ev in events:
        state, dets = logic.step(state, ev, policy or Policy())
        out += dets
    return out


def test_a_master_change_is_sm_failover_and_the_first_master_or_a_restart_is_not() -> None:
    dets = run([sm("state", T0, state="master"),
                sm("state", T0 + 1000, state="master"),  # sminfo asking again
                sm("state", T0 + 2000, state="not_active"),  # sm-1 restarts ...
                sm("state", T0 + 3000, state="master"),  # ... and is master again
                sm("state", T0 + 9000, sm="sm-2", state="master", priority=14)])
    [det] = dets
    assert det.detection == DetectionKind.SM_FAILOVER
    assert (det.device, det.port) == ("sm-2", 0)
    assert det.evidence["from"] == "sm-1" and det.evidence["to"] == "sm-2"
    assert det.action.value == "page"


def test_master_leaving_then_another_taking_over_is_one_failover() -> None:
    dets = run([sm("state", T0, state="master"), sm("state", T0 + 10, state="standby"),
                sm("state", T0 + 5000, sm="sm-2", state="master")])
    assert [(d.detection, d.evidence["from"]) for d in dets] == [
        (DetectionKind.SM_FAILOVER, "sm-1")]


def test_a_standby_gone_is_sm_standby_lost_and_a_promoted_one_is_not() -> None:
    dets = run([sm("state", T0, state="master"),
                sm("standby", T0 + 1, sms=["sm-2", "sm-3"]),
                sm("standby", T0 + 60_000, sms=["sm-2"])])
    [lost] = dets
    assert lost.detection == DetectionKind.SM_STANDBY_LOST
    assert lost.device == "sm-3" and lost.evidence["standbys"] == ["sm-2"]
    # sm-2 becomes master: a failover; the standby list without it then loses nobody, but
    # no standby is left: one detection on the master for that
    more = run([sm("state", T0, state="master"), sm("standby", T0 + 1, sms=["sm-2"]),
                sm("state", T0 + 5000, sm="sm-2", state="master"),
                sm("standby", T0 + 6000, sm="sm-2", sms=[]),
                sm("standby", T0 + 7000, sm="sm-2", sms=[])])
    assert [(d.detection, d.device) for d in more] == [
        (DetectionKind.SM_FAILOVER, "sm-2"), (DetectionKind.SM_STANDBY_LOST, "sm-2")]


def test_n_heavy_sweeps_in_a_minute_is_one_sweep_storm_naming_the_ports() -> None:
    policy = Policy()  # more than 3 heavy sweeps within 60 s
    ports = ["leaf-su01-r0:3", "leaf-su01-r0:3", "spine-1:7", "leaf-su01-r0:3",
             "leaf-su01-r0:3", "leaf-su01-r0:3"]
    events = [sweep(T0 + i * 10_000, p) for i, p in enumerate(ports)]
    dets = run(events, policy)
    [storm] = dets
    assert storm.detection == DetectionKind.SWEEP_STORM
    assert storm.ts == T0 + 30_000  # the fourth sweep within the minute
    assert storm.evidence["sweeps"] == 4
    assert storm.evidence["ports"] == ["leaf-su01-r0:3", "spine-1:7"]
    assert storm.evidence["triggers"] == ["trap 128"]
    assert storm.evidence["max_duration_ms"] == 300
    # three in a minute, then quiet: none
    assert run([sweep(T0 + i * 15_000, "a:1") for i in range(3)]
               + [sweep(T0 + 200_000, "a:1")], policy) == []


def test_a_storm_that_ends_and_starts_again_is_a_second_episode() -> None:
    first = [sweep(T0 + i * 5000, "a:1") for i in range(5)]
    second = [sweep(T0 + 300_000 + i * 5000, "a:1") for i in range(5)]
    dets = run(first + second)
    assert [d.detection for d in dets] == [DetectionKind.SWEEP_STORM] * 2
    assert dets[0].episode != dets[1].episode


def test_trap_storm_fires_once_per_port_and_again_when_the_port_is_disabled() -> None:
    dets = run([sm("trap_storm", T0, trap=129, count=5, device="leaf-1", port=5),
                sm("trap_storm", T0 + 1, trap=129, count=10, device="leaf-1", port=5),
                sm("trap_storm", T0 + 2, trap=129, count=20, device="leaf-1", port=5),
                sm("trap_storm", T0 + 3, trap=129, disabled=True, device="leaf-1", port=5)])
    assert [(d.detection, d.key, d.evidence["disabled"]) for d in dets] == [
        (DetectionKind.TRAP_STORM, "leaf-1:5", False),
        (DetectionKind.TRAP_STORM, "leaf-1:5", True)]
    # an unresolved port's storm lands on the SM itself
    [det] = run([sm("trap_storm", T0, trap=128, count=50)])
    assert det.key == "sm-1:0" and det.evidence["resolved"] is False


def test_sweep_storm_opens_one_sm_incident_that_its_ports_flaps_join() -> None:
    engine = Engine(Policy())
    out: list[Detection | Incident] = []
    for i in range(4):
        out += engine.feed_all(sweep(T0 + i * 5000, "leaf-su01-r0:3"))
    incidents = [o for o in out if isinstance(o, Incident)]
    [storm] = [o for o in out if isinstance(o, Detection)]
    [opened] = incidents
    assert opened.cause == IncidentCause.SM_EVENT and opened.state == "open"
    assert opened.root == "opensm" and opened.members == ["leaf-su01-r0:3"]
    assert storm.incident == opened.incident
    assert "4 heavy sweeps" in (opened.reason or "")
    # a later detection of a member is the storm's cause: not filed under the incident,
    # so its own runbook isolates the port (holding it would keep the storm going)
    member = Detection(id="det:x", ts=T0 + 21_000, fabric="f", source="fabricwatch",
                       device="leaf-su01-r0", port=3, detection=DetectionKind.FLAP,
                       severity="critical", action="isolate_port", episode="flap/x")
    [annotated] = [o for o in engine.correlate(member) if isinstance(o, Detection)]
    assert annotated.incident is None
    # the failover that follows joins the same incident rather than opening another
    engine.feed_all(sm("state", T0 + 22_000, state="master"))
    joined = engine.feed_all(sm("state", T0 + 23_000, sm="sm-2", state="master"))
    update = [o for o in joined if isinstance(o, Incident)]
    assert [u.state for u in update] == ["update"] and update[0].incident == opened.incident
    # quiet for the settle time: it closes
    later = engine.feed_all(sm("standby", T0 + 23_000 + 121_000, sm="sm-2", sms=["sm-3"]))
    assert [o.state for o in later if isinstance(o, Incident)] == ["closed"]


def test_a_storm_joining_the_sm_incident_its_downs_opened_names_its_causes() -> None:
    # the common order: the SM's downs open the incident, then the sweep storm naming the
    # port whose traps forced the sweeps joins it. That port is a cause (its flap keeps its
    # runbook); the downs' ports are victims (filed under the incident)
    engine = Engine(Policy())
    links = [TopologyLink(a_device=f"leaf-su02-r{leaf}", a_port=h + 1,
                          b_device=f"n{leaf:02d}{h}/mlx5_0", b_port=1)
             for leaf in range(20) for h in range(2)]
    engine.feed_all(Topology(id="t", ts=T0, fabric="f", source="ibnetdiscover", links=links))
    out: list[Detection | Incident] = []
    for leaf in range(20):
        out += engine.feed_all(PortEvent(
            id=f"sm/{leaf}", ts=T0 + 1000 + leaf * 50, fabric="f", source="opensm",
            device=f"leaf-su02-r{leaf}", port=1, state="down", reason="ACTIVE -> DOWN"))
    opened = [o for o in out if isinstance(o, Incident)]
    assert opened and opened[0].cause == IncidentCause.SM_EVENT
    for i in range(4):
        out += engine.feed_all(sweep(T0 + 2000 + i * 5000, "leaf-su03-r0:9"))
    storm = [o for o in out if isinstance(o, Detection)
             and o.detection == DetectionKind.SWEEP_STORM]
    assert storm and storm[0].incident == opened[0].incident  # joined, not a second one

    def filed(device: str, port: int) -> str | None:
        det = Detection(id=f"det:{device}:{port}", ts=T0 + 30_000, fabric="f",
                        source="fabricwatch", device=device, port=port,
                        detection=DetectionKind.FLAP, severity="critical",
                        action="isolate_port", episode=f"flap/{device}:{port}")
        [annotated] = [o for o in engine.correlate(det) if isinstance(o, Detection)]
        return annotated.incident

    assert filed("leaf-su03-r0", 9) is None  # the cause: its own runbook isolates it
    assert filed("leaf-su02-r4", 1) == opened[0].incident  # a victim: under the incident


def test_replaying_the_same_sm_events_gives_the_same_detections() -> None:
    events = [sm("state", T0, state="master"), sm("state", T0 + 5, sm="sm-2", state="master"),
              *[sweep(T0 + 10 + i * 1000, "a:1") for i in range(5)]]
    runs = []
    for _ in range(2):
        engine = Engine(Policy())
        runs.append([o.to_wire() for ev in events for o in engine.feed_all(ev)])
    assert runs[0] == runs[1] and runs[0]


def test_a_standby_named_by_lid_that_became_master_is_not_lost() -> None:
    # saquery -s names SMs by LID and the list's master in ``sm``; sminfo names the master
    # by GUID: the promoted LID is the list's master, so it is not "lost"
    dets = run([sm("state", T0, sm="0xaa", state="master"),
                sm("standby", T0 + 1, sm="lid:1", sms=["lid:5", "lid:9"]),
                sm("state", T0 + 5000, sm="0xbb", state="master"),
                sm("standby", T0 + 6000, sm="lid:5", sms=["lid:9"])])
    assert [(d.detection, d.device) for d in dets] == [(DetectionKind.SM_FAILOVER, "0xbb")]


def test_an_sm_incidents_published_messages_stay_as_published_and_a_repeat_adds_none() -> None:
    # The failover joining the storm's incident extends its detections on a new list: the
    # open message already published keeps the one it was published with (before, the list
    # was shared and grew under it). The same failover detection again (a redelivery)
    # changes nothing and publishes nothing (before: another update, one revision more).
    engine = Engine(Policy())
    out: list[Detection | Incident] = []
    for i in range(4):
        out += engine.feed_all(sweep(T0 + i * 5000, "leaf-su01-r0:3"))
    [storm] = [o for o in out if isinstance(o, Detection)]
    [opened] = [o for o in out if isinstance(o, Incident)]
    engine.feed_all(sm("state", T0 + 22_000, state="master"))
    joined = engine.feed_all(sm("state", T0 + 23_000, sm="sm-2", state="master"))
    [failover] = [o for o in joined if isinstance(o, Detection)]
    [update] = [o for o in joined if isinstance(o, Incident)]
    assert opened.evidence["detections"] == [storm.id]
    assert update.evidence["detections"] == [storm.id, failover.id]
    again = engine.correlate(failover.model_copy(update={"incident": None}))
    assert [o for o in again if isinstance(o, Incident)] == []
    assert [o.incident for o in again if isinstance(o, Detection)] == [opened.incident]
