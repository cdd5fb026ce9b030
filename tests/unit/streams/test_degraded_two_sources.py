"""Counters and a topology snapshot that see one degraded link at the same ``ts``: one episode,
two detections with their own ids, so the ledger keeps both sources' evidence."""

from __future__ import annotations

from schemas import Counters, PortSample, Topology, TopologyLink
from schemas.policy import Policy
from streams.replay import replay

TS = 1_795_000_000_000


def test_both_sources_keep_their_evidence() -> None:
    counters = Counters(id="c1", ts=TS, fabric="f", source="perfquery", device="leaf-su01-r1",
                        ports=[PortSample(port=7, width="2X", speed="NDR")])
    topology = Topology(id="t1", ts=TS, fabric="f", source="ibnetdiscover", links=[
        TopologyLink(a_device="leaf-su01-r1", a_port=7, b_device="spine-01", b_port=3,
                     width="2X", speed="NDR")])
    dets = [d for d in replay([counters.model_dump_json().encode(),
                               topology.model_dump_json().encode()], Policy(), on_error=None)
            if d.device == "leaf-su01-r1"]
    assert len(dets) == 2
    assert len({d.id for d in dets}) == 2, "each source's detection has its own id"
    assert len({d.episode for d in dets}) == 1, "one episode: consumers group them"
    assert {d.evidence.get("source", "counters") for d in dets} == {"counters", "topology"}
