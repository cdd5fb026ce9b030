"""Degraded links from topology snapshots: judged in the device's counters state (one episode
whichever source saw it), and a fabric mostly "below expectation" is a wrong expectation:
tickets, not isolations."""

from __future__ import annotations

from schemas import Counters, PortSample, Topology, TopologyLink
from schemas.policy import Policy
from streams.degraded_link.logic import MISMATCH_MIN_ENDS
from streams.engine import Engine

TS = 1_795_000_000_000


def _topology(n: int, hdr: int, ts: int = TS, tid: str = "t") -> Topology:
    links = [TopologyLink(a_device=f"leaf{i // 32}", a_port=i % 32 + 1, b_device=f"node{i}/mlx5_0",
                          b_port=1, width="4X", speed="HDR" if i < hdr else "NDR")
             for i in range(n)]
    return Topology(id=tid, ts=ts, fabric="f", source="sim", links=links)


def test_a_few_degraded_links_are_isolated() -> None:
    dets = Engine(Policy()).feed(_topology(1000, 3))
    assert len(dets) == 6 and {d.action.value for d in dets} == {"isolate_port"}


def test_a_fabric_wide_mismatch_is_ticketed_not_isolated() -> None:
    dets = Engine(Policy()).feed(_topology(1000, 1000))
    assert len(dets) == 2000 > MISMATCH_MIN_ENDS
    assert {d.action.value for d in dets} == {"ticket"}
    assert "check the policy or plan" in dets[0].evidence["fabric_wide"]


def counters(ts: int, width: str, n: int) -> Counters:
    return Counters(id=f"c{ts}", ts=ts, fabric="f", source="perfquery", device="leaf0",
                    ports=[PortSample(port=5, width=width, speed="NDR", symbol_errors=n)])


def test_counters_and_a_snapshot_showing_one_degraded_link_fire_once() -> None:
    engine = Engine(Policy())
    fired = engine.feed(counters(TS, "2X", 0)) + engine.feed(counters(TS + 60_000, "2X", 0))
    snap = Topology(id="s1", ts=TS + 120_000, fabric="f", source="ibnetdiscover", links=[
        TopologyLink(a_device="leaf0", a_port=5, b_device="node5/mlx5_0", b_port=1,
                     width="2X", speed="NDR")])
    fired += engine.feed(snap)
    redelivered = engine.feed(snap)  # at-least-once: the identical detections again
    assert redelivered == [d for d in fired if d.device != "leaf0"]
    leaf = [d for d in fired if d.device == "leaf0"]
    assert len(leaf) == 1 and leaf[0].evidence["source"] == "counters"
    # the HCA end is judged from the snapshot alone: its own one episode
    assert [(d.device, d.evidence["source"]) for d in fired if d.device != "leaf0"] == [
        ("node5/mlx5_0", "topology")]
    # trained back (seen by the snapshot), then down again (seen by counters): a new episode
    fixed = snap.model_copy(update={"id": "s2", "ts": TS + 180_000, "links": [
        snap.links[0].model_copy(update={"width": "4X"})]})
    assert engine.feed(fixed) == []
    again = engine.feed(counters(TS + 240_000, "2X", 1))
    assert len(again) == 1 and again[0].episode != leaf[0].episode
    # a port a snapshot saw first: its first counters sample (older than the snapshot,
    # and with counts already high) is a first reading, not stale and not an error burst
    late = Topology(id="s3", ts=TS + 600_000, fabric="f", source="ibnetdiscover", links=[
        TopologyLink(a_device="leaf9", a_port=1, b_device="node9/mlx5_0", b_port=1,
                     width="1X", speed="NDR")])
    assert len(engine.feed(late)) == 2
    first = Counters(id="c9", ts=TS + 300_000, fabric="f", source="perfquery", device="leaf9",
                     ports=[PortSample(port=1, width="1X", speed="NDR", symbol_errors=90_000)])
    assert engine.feed(first) == []
    state = engine.devices["f/leaf9"]["s"]
    assert state["stale"] == 0 and state["ports"]["1"][0] == TS + 300_000
