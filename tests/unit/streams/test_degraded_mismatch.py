"""A fabric mostly "below expectation" is a wrong expectation: tickets, not isolations."""

from __future__ import annotations

from schemas import Topology, TopologyLink
from schemas.policy import Policy
from streams.degraded_link.logic import MISMATCH_MIN_ENDS, step_topology


def _topology(n: int, hdr: int) -> Topology:
    links = [TopologyLink(a_device=f"leaf{i // 32}", a_port=i % 32 + 1, b_device=f"node{i}/mlx5_0",
                          b_port=1, width="4X", speed="HDR" if i < hdr else "NDR")
             for i in range(n)]
    return Topology(id="t", ts=1_795_000_000_000, fabric="f", source="sim", links=links)


def test_a_few_degraded_links_are_isolated() -> None:
    _, dets = step_topology(None, _topology(1000, 3), Policy())
    assert len(dets) == 6 and {d.action.value for d in dets} == {"isolate_port"}


def test_a_fabric_wide_mismatch_is_ticketed_not_isolated() -> None:
    _, dets = step_topology(None, _topology(1000, 1000), Policy())
    assert len(dets) == 2000 > MISMATCH_MIN_ENDS
    assert {d.action.value for d in dets} == {"ticket"}
    assert "check the policy or plan" in dets[0].evidence["fabric_wide"]
