"""Breaker accounting: isolated ports per SU and breaker_open past the budget."""

from __future__ import annotations

from schemas import ActionRecord, DetectionKind
from schemas.policy import Policy
from streams.breaker.logic import step, su_from_name
from streams.common import make_detection

BASE = 1_700_002_800_000


def det(port: int, t: int = 0) -> object:
    return make_detection(kind=DetectionKind.FLAP, fabric="lab", device="leaf-su01-r1",
                          port=port, ts=BASE + t, action="isolatePort",
                          episode=f"flap/leaf-su01-r1:{port}/{t}", evidence={})


def act(port: int, step_name: str, t: int = 0) -> ActionRecord:
    return ActionRecord(id=f"a-{port}-{step_name}-{t}", ts=BASE + t, fabric="lab",
                        source="fabricwatch", device="leaf-su01-r1", port=port,
                        workflow_id="wf", step=step_name, actor="fabricwatch", outcome="done")


def test_su_from_name() -> None:
    assert su_from_name("leaf-su01-r3") == "su01"
    assert su_from_name("spine-07") is None


def test_breaker_opens_past_budget_and_closes() -> None:
    policy = Policy.from_yaml("fabricHealth: {breaker: {maxIsolatedPortsPerSU: 1%}}")
    state = None
    fired = []
    # 200 ports in the SU: a budget of 2
    for ev in [det(1), act(1, "isolate"), det(2), det(3), det(3), det(4)]:
        state, out = step(state, ev, policy, su="su01", ports_in_su=200)  # type: ignore[arg-type]
        fired += out
    assert [(d.detection.value, d.port) for d in fired] == [("breaker_open", 3),
                                                           ("breaker_open", 4)]
    assert fired[0].evidence["budget"] == 2
    assert fired[0].action.value == "page"
    # port 1 returns to service: under budget again, a new request is a pending grant
    state, out = step(state, act(1, "return", 10), policy, su="su01", ports_in_su=200)
    state, out = step(state, det(5, 20), policy, su="su01", ports_in_su=200)  # type: ignore[arg-type]
    assert out == []


def test_same_su_name_in_two_fabrics_has_two_budgets() -> None:
    from streams.engine import Engine
    engine = Engine(Policy())  # default 1% of 256 ports: a budget of 2 per SU
    fired = []
    for fabric in ("east", "west"):
        for port in (1, 2, 3):
            fired += engine.feed(make_detection(
                kind=DetectionKind.FLAP, fabric=fabric, device=f"{fabric}-leaf-su01-r1",
                port=port, ts=BASE + port, action="isolatePort",
                episode=f"flap/{fabric}:{port}", evidence={}))
    # each fabric's third request, and only that, finds its own su01 full
    assert sorted((d.fabric, d.port) for d in fired) == [("east", 3), ("west", 3)]


def test_same_port_name_in_two_fabrics_keeps_two_flap_and_counter_states() -> None:
    from schemas import Counters, PortEvent, PortSample
    from streams.engine import Engine

    engine = Engine(Policy())  # a flap is the third down within 30 minutes
    fired = []
    for i, fabric in enumerate(["east", "east", "west"]):
        fired += engine.feed(PortEvent(id=f"{fabric}-{i}", ts=BASE + i * 1000, fabric=fabric,
                                       source="opensm", device="leaf-su01-r1", port=7,
                                       state="down"))
    # link_downed 5 in east, then 8 in west: west's counter is its own first sample
    for fabric, downed in (("east", 0), ("west", 0), ("east", 5), ("west", 8)):
        fired += engine.feed(Counters(id=f"{fabric}-c{downed}", ts=BASE + 60_000 + downed,
                                      fabric=fabric, source="perfquery", device="leaf-su01-r2",
                                      ports=[PortSample(port=1, link_downed=downed)]))
    flaps = sorted((d.fabric, d.device, d.port) for d in fired if d.detection.value == "flap")
    # east: 5 counter-revealed downs on r2:1; west: 8 on r2:1; r1:7 never reaches three
    # downs in one fabric
    assert flaps == [("east", "leaf-su01-r2", 1), ("west", "leaf-su01-r2", 1)]


def _topology(fabric: str, leaves: int, ports: int) -> object:
    from schemas import Topology, TopologyLink

    # leaves of su01 with `ports` host ports each (hosts carry no SU) and one uplink each
    links = [TopologyLink(a_device=f"leaf-su01-r{leaf}", a_port=p,
                          b_device=f"node{leaf:02d}{p:02d}/mlx5_0", b_port=1)
             for leaf in range(leaves) for p in range(1, ports + 1)]
    links += [TopologyLink(a_device=f"leaf-su01-r{leaf}", a_port=ports + 1,
                           b_device="spine-01", b_port=leaf + 1) for leaf in range(leaves)]
    return Topology(id=f"topo-{fabric}-{leaves}x{ports}", ts=BASE - 1000, fabric=fabric,
                    source="ibnetdiscover", links=links)


def test_ports_per_su_counts_each_port_with_an_su_once() -> None:
    from streams.breaker.logic import ports_per_su

    ends = [("leaf-su01-r1", 1), ("leaf-su01-r1", 1), ("leaf-su01-r1", 2),
            ("leaf-su02-r1", 1), ("spine-01", 1), ("node01/mlx5_0", 1)]
    assert ports_per_su(ends) == {"su01": 2, "su02": 1}
    assert ports_per_su(ends, su_of=lambda d: "all" if d.startswith("spine") else None) == {
        "all": 1}


def test_the_su_size_comes_from_the_topology() -> None:
    from streams.engine import Engine

    # 5% of su01: 256 ports by default would be a budget of 12; the topology shows 2 leaves
    # of 19 host ports and an uplink, 40 ports: a budget of 2, so the third request fires.
    policy = Policy.from_yaml("fabricHealth: {breaker: {maxIsolatedPortsPerSU: 5%}}")
    without, learned = Engine(policy), Engine(policy)
    learned.feed(_topology("lab", 2, 19))  # type: ignore[arg-type]
    assert learned.ports_in_su("lab", "su01") == 40
    assert without.ports_in_su("lab", "su01") == 256
    fired = {id(e): [] for e in (without, learned)}  # type: ignore[var-annotated]
    for port in (1, 2, 3):
        for engine in (without, learned):
            fired[id(engine)] += engine.feed(det(port, port))  # type: ignore[arg-type]
    assert fired[id(without)] == []
    opened = fired[id(learned)]
    assert [(d.detection.value, d.port) for d in opened] == [("breaker_open", 3)]
    assert opened[0].evidence["ports_in_su"] == 40
    assert opened[0].evidence["budget"] == 2
    # another fabric's su01 is not this one's
    assert learned.ports_in_su("other", "su01") == 256


def test_a_switch_down_at_a_snapshot_keeps_its_ports() -> None:
    from schemas import Topology
    from streams.engine import Engine

    engine = Engine(Policy())
    engine.feed(_topology("lab", 2, 19))  # type: ignore[arg-type]
    # the next snapshot lacks leaf r1 (down): the merged cabling still has its ports
    full = _topology("lab", 2, 19)
    partial = Topology(id="topo-partial", ts=BASE, fabric="lab", source="ibnetdiscover",
                       links=[lk for lk in full.links  # type: ignore[attr-defined]
                              if lk.a_device != "leaf-su01-r1"])
    engine.feed(partial)
    assert engine.ports_in_su("lab", "su01") == 40


def test_the_plan_s_su_size_comes_first() -> None:
    from streams.engine import Context, Engine

    engine = Engine(Policy(), Context(ports_per_su={"su01": 1000}))
    engine.feed(_topology("lab", 2, 19))  # type: ignore[arg-type]
    assert engine.ports_in_su("lab", "su01") == 1000
    assert engine.ports_in_su("lab", "su02") == 256


def test_a_port_found_isolated_counts_against_the_budget() -> None:
    # "isolate skipped": the runbook found the port isolated already and counts it; so does
    # the breaker, after the request's pending hour (before: 0 of 1, and no breaker_open)
    policy = Policy.from_yaml("fabricHealth: {breaker: {maxIsolatedPortsPerSU: 1%}}")
    skipped = act(1, "isolate").model_copy(update={"outcome": "skipped"})
    state = None
    for ev in [det(1), skipped]:
        state, _ = step(state, ev, policy, su="su01", ports_in_su=100)  # type: ignore[arg-type]
    state, out = step(state, det(2, 2 * 3_600_000), policy, su="su01",  # type: ignore[arg-type]
                      ports_in_su=100)
    assert [(d.detection.value, d.port) for d in out] == [("breaker_open", 2)]


def test_a_breaker_episode_ends_when_a_pending_request_expires() -> None:
    # budget 1: port 1's request is pending, port 2 is refused (episode 1); port 1 is never
    # isolated and its request expires after an hour. The SU is under its budget again, so
    # the episode ends: port 3 takes the slot, and port 2 refused again is a new episode's
    # breaker_open (before: the episode never ended, and port 2 was never paged again)
    policy = Policy.from_yaml("fabricHealth: {breaker: {maxIsolatedPortsPerSU: 1%}}")
    hour = 3_600_000
    state, fired = None, []
    for ev in [det(1), det(2, 1), det(3, hour + 10), det(2, hour + 20)]:
        state, out = step(state, ev, policy, su="su01", ports_in_su=100)  # type: ignore[arg-type]
        fired += out
    assert [d.port for d in fired] == [2, 2]
    assert fired[0].episode != fired[1].episode
