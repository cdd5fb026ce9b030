"""The topology agent: its per-message decision (``handle``), its wiring, its state writes (no broker)."""

from __future__ import annotations

import base64
import dataclasses
from pathlib import Path

import pytest

from schemas import DetectionKind, encode
from schemas.policy import Policy
from sim.topology import Fabric, generate
from streams.topology.agent import handle
from streams.topology.plan import load_plan

T0 = 1_700_000_000_000
POLICY = Policy()


def fabric_and_plan() -> tuple[Fabric, bytes, bytes]:
    fab = generate("lab")
    links = list(fab.links)
    x, y = links[0], links[1]
    links[0] = dataclasses.replace(x, b_device=y.b_device, b_port=y.b_port)
    links[1] = dataclasses.replace(y, b_device=x.b_device, b_port=x.b_port)
    links[5] = dataclasses.replace(links[5], width="2X")
    first = encode(fab.to_topology(T0, links))
    again = encode(fab.to_topology(T0 + 60_000, links))
    return fab, first, again


def test_snapshots_fire_once_and_state_is_json() -> None:
    fab, first, again = fabric_and_plan()
    plan = load_plan(fab.to_plan_csv())
    one = handle(first, None, plan, POLICY, fabric="lab")
    assert sorted(d.detection for d in one.detections) == [
        DetectionKind.DEGRADED_LINK, DetectionKind.MISWIRE, DetectionKind.MISWIRE]
    assert one.skipped is None and one.dead_letter is None
    assert one.state["last_ts"] == T0 and len(one.state["open"]) == 3
    two = handle(again, one.state, plan, POLICY, fabric="lab")
    assert two.detections == () and two.state["open"] == one.state["open"]
    clean = encode(fab.to_topology(T0 + 120_000))
    three = handle(clean, two.state, plan, POLICY, fabric="lab")
    assert three.detections == () and len(three.closed) == 3 and three.state["open"] == {}


def test_degraded_can_be_left_to_the_degraded_link_detector() -> None:
    fab, first, _ = fabric_and_plan()
    out = handle(first, None, load_plan(fab.to_plan_csv()), POLICY, fabric="lab",
                 emit_degraded=False)
    assert [d.detection for d in out.detections] == [DetectionKind.MISWIRE] * 2
    assert len(out.state["open"]) == 3  # still tracked, so it does not fire later either


def test_other_fabric_stale_and_invalid_messages() -> None:
    fab, first, again = fabric_and_plan()
    plan = load_plan(fab.to_plan_csv())
    state = handle(again, None, plan, POLICY, fabric="lab").state
    stale = handle(first, state, plan, POLICY, fabric="lab")
    assert stale.detections == () and stale.state == state and stale.skipped
    other = handle(first, state, plan, POLICY, fabric="other")
    assert other.detections == () and other.state == state and "not this worker" in \
        str(other.skipped)
    for raw, path in ((b"\xff garbage", ""), (b'{"kind": "port_event", "id": "x", "ts": 1, '
                      b'"fabric": "lab", "source": "sim", "device": "d", "port": 1, '
                      b'"state": "up"}', "kind")):
        bad = handle(raw, state, plan, POLICY, fabric="lab", partition=0, offset=7, now_ms=5)
        assert bad.state == state and bad.detections == () and bad.skipped == "invalid"
        assert bad.dead_letter is not None and bad.dead_letter.path == path
        assert bad.dead_letter.source_topic == "fabric.topology"
        assert (bad.dead_letter.offset, bad.dead_letter.ts) == (7, 5)
        assert base64.b64decode(bad.dead_letter.raw_b64) == raw


def test_register_streams_adds_an_agent_and_table_to_the_worker_app(tmp_path: Path) -> None:
    from runtime.settings import Settings
    from streams.app import StreamsApp
    from streams.topology.agent import DIFF_TABLE, register_streams

    sa = StreamsApp(Settings(state_dir=tmp_path), POLICY, ledger=False, app_id="t-topology")
    fab = generate("lab")
    agent = register_streams(sa, load_plan(fab.to_plan_csv()))
    assert DIFF_TABLE in sa.app.tables
    assert "topology-diff" in agent.name
    assert [t for t in agent.channel.topics] == ["fabric.topology"]


class _LateChangelog(dict[str, object]):
    """A table whose changelog topic shows up in the metadata only after some writes."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def __setitem__(self, key: str, value: object) -> None:
        from faust.exceptions import PartitionsMismatch

        if self.failures:
            self.failures -= 1
            raise PartitionsMismatch("changelog has 0 partitions")
        super().__setitem__(key, value)


async def test_state_write_waits_out_a_changelog_not_yet_in_the_metadata() -> None:
    from faust.exceptions import PartitionsMismatch

    from streams.topology import agent

    table = _LateChangelog(failures=2)
    await agent._store(table, "lab", {"open": {}}, tries=3)
    assert table == {"lab": {"open": {}}}
    never = _LateChangelog(failures=5)
    with pytest.raises(PartitionsMismatch):
        await agent._store(never, "lab", {}, tries=2)
