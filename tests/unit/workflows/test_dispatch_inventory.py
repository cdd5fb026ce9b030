"""The dispatcher's inventory gate: a detection for a port no topology snapshot of its fabric
has cabled (or any port, before a snapshot of the fabric was seen) reaches no runbook; it is
recorded as ``unknown_device`` once per port and paged once per cause (the fabric without
topology, the device not cabled). ``NoTemporal`` fails the test on any
call to Temporal, so "starts nothing" is checked, not assumed."""

from __future__ import annotations

import sys
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas import Detection
from schemas.events import Topology, TopologyLink
from schemas.policy import Policy
from workflows.adapters.records import MemorySink
from workflows.dispatch import NO_TOPOLOGY, NOT_CABLED, Dispatcher, shown
from workflows.inventory import Inventory

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: the fakes package
from fakes.ticketing import RecordingTicketing  # noqa: E402

NOW = 1_795_971_600_000


class NoTemporal:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the dispatcher called Temporal ({name}) for an unknown port")


def topology(ts: int, ports: range) -> Topology:
    return Topology(id=f"t{ts}", ts=ts, fabric="f", source="ibnetdiscover", links=[
        TopologyLink(a_device="leaf-su01-r1", a_port=p, b_device=f"node{p:04d}/mlx5_1",
                     b_port=1) for p in ports])


def detection(device: str, port: int, n: int = 0) -> Detection:
    return Detection(id=f"d{n}-{port}", ts=NOW + n, fabric="f", source="streams",
                     device=device, port=port, detection="flap", severity="critical",
                     action="isolate_port", episode=f"e{n}")


def dispatcher(inv: Inventory) -> tuple[Dispatcher, RecordingTicketing, MemorySink]:
    pages, sink = RecordingTicketing(), MemorySink()
    disp = Dispatcher(NoTemporal(), Policy(), inv, task_queue="q",  # type: ignore[arg-type]
                      ticketing=pages, records=sink)
    return disp, pages, sink


async def test_before_any_topology_nothing_starts_and_the_fabric_is_paged_once() -> None:
    """No topology of the fabric is one cause: one page, whatever number of ports is
    detected meanwhile; each port is in the ledger once."""
    disp, pages, sink = dispatcher(Inventory())
    ports = [("leaf-su01-r1", 3), ("leaf-su01-r1", 4), ("spine-02", 7)]
    for n in range(3):
        for device, port in ports:
            assert not await disp.handle(detection(device, port, n))
    assert disp.stats.unknown == 9 and disp.stats.dispatched == 0
    assert [op for op, _key, _summary in pages.calls] == ["page"]
    assert NO_TOPOLOGY in pages.calls[0][2] and "first port leaf-su01-r1:3" in pages.calls[0][2]
    assert len(sink.records) == len(ports)
    recs = [r for r in sink.records.values() if isinstance(r, Detection)]
    assert {(r.device, r.port) for r in recs} == set(ports)
    assert all(r.detection == "unknown_device" and r.action == "page"
               and r.evidence["reason"] == NO_TOPOLOGY for r in recs)
    # the ports of the cause share its page's key as their episode
    assert {r.episode for r in recs} == {pages.calls[0][1]}


async def test_a_port_the_topology_does_not_have_is_paged_once_per_device() -> None:
    inv = Inventory()
    inv.load(topology(NOW, range(1, 5)))
    disp, pages, sink = dispatcher(inv)
    names = [("$(touch x)", 1), ("; rm -rf /", 2), ("leaf-su01-r1\u202egnp.exe", 3),
             ("--help", 4), ("leaf-su01-r1", 40)]
    for n in range(2):
        for device, port in [*names, ("leaf-su01-r1", 41), ("--help", 5)]:
            assert not await disp.handle(detection(device, port, n))
    # two more ports of devices already paged: recorded, not paged again
    assert len(pages.calls) == len(names) and len(sink.records) == len(names) + 2
    assert all(NOT_CABLED in summary and "\u202e" not in summary + key
               for _op, key, summary in pages.calls)
    assert any("leaf-su01-r1\\u202egnp.exe:3" in summary for _o, _k, summary in pages.calls)
    # cabled ports pass the gate (the episode rule and Temporal come after it)
    assert await disp.may_act(detection("leaf-su01-r1", 3))


async def test_a_shadow_fabric_records_unknown_ports_and_pages_nothing() -> None:
    """A fabric in shadow mode: its runbooks would page nobody, nor does its gate."""
    pages, sink = RecordingTicketing(), MemorySink()
    policy = Policy.model_validate({"fabricHealth": {"shadow": {"fabrics": ["f"]}}})
    disp = Dispatcher(NoTemporal(), policy, Inventory(), task_queue="q",  # type: ignore[arg-type]
                      ticketing=pages, records=sink)
    assert not await disp.handle(detection("leaf-su01-r1", 3))
    assert pages.calls == []
    (rec,) = sink.records.values()
    assert isinstance(rec, Detection) and rec.evidence["shadow"] is True
    assert rec.evidence["paged"] is False


async def test_a_port_a_later_snapshot_misses_is_still_known() -> None:
    """A flapping or isolated port drops out of discovery; its runbook must still act."""
    inv = Inventory()
    inv.load(topology(NOW, range(1, 5)))
    inv.load(topology(NOW + 60_000, range(1, 3)))
    assert inv.knows("f", "leaf-su01-r1", 4) and inv.has_port("leaf-su01-r1", 4)
    assert inv.knows("f", "leaf-su01-r1", 9) is False
    assert inv.knows("other", "leaf-su01-r1", 4) is None


async def test_a_failed_page_is_tried_again_at_the_next_detection() -> None:
    class Down(RecordingTicketing):
        fail = True

        async def page(self, key: str, summary: str, details: dict[str, Any]) -> str:
            if self.fail:
                raise RuntimeError("ticket system down")
            return await super().page(key, summary, details)

    pages = Down()
    disp = Dispatcher(NoTemporal(), Policy(), Inventory(), task_queue="q",  # type: ignore[arg-type]
                      ticketing=pages)
    assert not await disp.handle(detection("x", 1))
    pages.fail = False
    assert not await disp.handle(detection("x", 1, 1))
    assert not await disp.handle(detection("x", 1, 2))
    assert len(pages.calls) == 1


def test_shown_escapes_what_would_disguise_a_name() -> None:
    assert shown("leaf\u202eexe") == "leaf\\u202eexe"
    assert shown("a b") == "a b" and shown("$(touch x)") == "$(touch x)"


@given(st.text(max_size=64))
def test_shown_leaves_no_invisible_or_control_character(name: str) -> None:
    out = shown(name)
    assert all(unicodedata.category(c)[0] not in "CZ" or c == " " for c in out)
    assert out == name or "\\u" in out


@pytest.mark.parametrize("device", ["leaf-su01-r1", "\u202e"])
def test_unknown_device_is_a_contract_kind(device: str) -> None:
    wire = {**detection(device, 1).model_dump(mode="json"), "detection": "unknown_device"}
    assert Detection.model_validate(wire).detection == "unknown_device"


async def test_the_longest_names_are_still_recorded() -> None:
    disp, pages, sink = dispatcher(Inventory())
    det = detection("d" * 256, 1).model_copy(update={"fabric": "f" * 256})
    assert not await disp.handle(det)
    (rec,) = sink.records.values()
    assert len(pages.calls) == 1 and isinstance(rec, Detection) and rec.device == "d" * 256


async def test_a_flood_of_invented_names_is_one_page_past_the_limit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import workflows.dispatch as dispatch

    monkeypatch.setattr(dispatch, "MAX_REPORTED", 3)
    inv = Inventory()
    inv.load(topology(NOW, range(1, 5)))  # each invented device its own cause
    disp, pages, sink = dispatcher(inv)
    for n in range(10):
        assert not await disp.handle(detection(f"ghost{n}", 1, n))
    assert "more than 3 unknown ports in fabric f" in pages.calls[-1][2]
    assert len(pages.calls) == 4 and len(sink.records) == 3 and disp.stats.unknown == 10


async def test_a_shadow_fabrics_flood_leaves_the_real_fabric_recorded_and_paged(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The flood limit is per fabric, and a shadow fabric's sends no page: an uncabled
    device of the real fabric after a shadow fabric's thousand is still recorded and paged."""
    import workflows.dispatch as dispatch

    monkeypatch.setattr(dispatch, "MAX_REPORTED", 3)
    pages, sink = RecordingTicketing(), MemorySink()
    policy = Policy.model_validate({"fabricHealth": {"shadow": {"fabrics": ["g"]}}})
    disp = Dispatcher(NoTemporal(), policy, Inventory(), task_queue="q",  # type: ignore[arg-type]
                      ticketing=pages, records=sink)
    for n in range(10):
        shadowed = detection(f"ghost{n}", 1, n).model_copy(update={"fabric": "g"})
        assert not await disp.handle(shadowed)
    assert pages.calls == [] and len(sink.records) == 3
    assert not await disp.handle(detection("leaf-su09-r1", 1, 99))
    assert len(pages.calls) == 1 and len(sink.records) == 4


async def test_a_port_recorded_in_shadow_is_paged_by_its_first_detection_that_is_not() -> None:
    """Shadow by detection kind: a slow_probe's unknown port is recorded, not paged; the
    same port's flap then pages its cause (once)."""
    pages, sink = RecordingTicketing(), MemorySink()
    policy = Policy.model_validate({"fabricHealth": {"shadow": {"detections": ["slow_probe"]}}})
    disp = Dispatcher(NoTemporal(), policy, Inventory(), task_queue="q",  # type: ignore[arg-type]
                      ticketing=pages, records=sink)
    probe_det = detection("leaf-su01-r1", 3, 0).model_copy(update={"detection": "slow_probe"})
    assert not await disp.handle(probe_det)
    assert pages.calls == [] and len(sink.records) == 1
    for n in (1, 2):
        assert not await disp.handle(detection("leaf-su01-r1", 3, n))
    assert len(pages.calls) == 1 and len(sink.records) == 1


def test_a_link_down_during_discovery_is_still_one_cable() -> None:
    """A flapping link is often down when the fabric is discovered: its ends keep the peer
    the last snapshot with the link saw, so both ends' detections are one cable's runbook."""
    inv = Inventory()
    inv.load(topology(NOW, range(1, 5)))
    inv.load(topology(NOW + 60_000, range(1, 3)))  # ports 3 and 4 down while discovered
    target, other = inv.cable("f", "leaf-su01-r1", 3)
    assert other is not None
    assert {(target.device, target.port), (other.device, other.port)} == {
        ("leaf-su01-r1", 3), ("node0003/mlx5_1", 1)}
    from_host = inv.cable("f", "node0003/mlx5_1", 1)
    assert {(e.device, e.port) for e in from_host if e} == {
        ("leaf-su01-r1", 3), ("node0003/mlx5_1", 1)}
    # recabled: the host's port now sits on another leaf port; the old peer is not used
    moved = Topology(id="t-moved", ts=NOW + 120_000, fabric="f", source="ibnetdiscover",
                     links=[TopologyLink(a_device="leaf-su01-r1", a_port=9,
                                         b_device="node0003/mlx5_1", b_port=1)])
    inv.load(moved)
    assert inv.cable("f", "leaf-su01-r1", 3)[1] is None


def test_the_dispatcher_sends_the_evidence_to_the_evidence_queue() -> None:
    # settings.temporal.evidence_task_queue reaches every runbook it starts; unset, the
    # evidence runs on the runbook's own queue (None)
    import time as _time

    from schemas.events import Action, Detection, DetectionKind, Severity
    from schemas.policy import Policy
    from workflows.dispatch import Dispatcher
    from workflows.inventory import Inventory

    det = Detection(id="d1", ts=int(_time.time() * 1000), fabric="lab", source="streams",
                    device="leaf-su01-r1", port=3, detection=DetectionKind.FLAP,
                    severity=Severity.CRITICAL, action=Action.ISOLATE_PORT, episode="ep",
                    evidence={})
    routed = Dispatcher(None, Policy(), Inventory(), task_queue="q",  # type: ignore[arg-type]
                        evidence_task_queue="fabricwatch-evidence")
    assert routed.runbook_input(det).config.evidence_task_queue == "fabricwatch-evidence"
    local = Dispatcher(None, Policy(), Inventory(), task_queue="q")  # type: ignore[arg-type]
    assert local.runbook_input(det).config.evidence_task_queue is None


async def test_a_new_fabric_name_per_detection_is_no_page_storm(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A misconfigured agent invents a fabric per message: each is a cause of its own
    (no topology), so past MAX_PAGED causes one page says the rest are recorded only, and
    past the all-fabric limit one page says nothing more is recorded."""
    import workflows.dispatch as dispatch

    monkeypatch.setattr(dispatch, "MAX_REPORTED", 3)
    monkeypatch.setattr(dispatch, "MAX_REPORTED_ALL", 20)
    monkeypatch.setattr(dispatch, "MAX_PAGED", 5)
    disp, pages, sink = dispatcher(Inventory())
    for n in range(200):
        det = detection("leaf-x", 1, n).model_copy(update={"fabric": f"fab-{n}"})
        assert not await disp.handle(det)
    summaries = [summary for _op, _key, summary in pages.calls]
    assert len(summaries) == 5 + 2  # five causes, "recorded, not paged", "no more records"
    assert "recorded, not paged" in summaries[5] and "over all fabrics" in summaries[6]
    assert len(sink.records) == 20


async def test_a_shadow_deployment_sends_no_flood_page(monkeypatch: pytest.MonkeyPatch) -> None:
    import workflows.dispatch as dispatch

    monkeypatch.setattr(dispatch, "MAX_REPORTED", 3)
    monkeypatch.setattr(dispatch, "MAX_REPORTED_ALL", 5)
    pages, sink = RecordingTicketing(), MemorySink()
    policy = Policy.model_validate({"fabricHealth": {"shadow": {"all": True}}})
    disp = Dispatcher(NoTemporal(), policy, Inventory(), task_queue="q",  # type: ignore[arg-type]
                      ticketing=pages, records=sink)
    for n in range(10):
        det = detection(f"ghost{n}", 1, n).model_copy(update={"fabric": f"fab-{n % 4}"})
        assert not await disp.handle(det)
    assert pages.calls == [] and len(sink.records) == 5
