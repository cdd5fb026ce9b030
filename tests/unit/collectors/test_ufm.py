"""UFM REST / Telemetry mapping (collectors.ufm_rest) and the poller against the loopback fake UFM."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import SecretStr

from collectors.errors import ParseError
from collectors.live.poll_ufm import UfmConfig, UfmPoller, UfmState
from collectors.ufm_rest import (
    parse_events,
    parse_inventory,
    parse_telemetry_csv,
    parse_unhealthy,
)
from schemas import PortEvent, decode, encode

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/: the fakes package
from fakes.ufm_server import (  # noqa: E402
    PASSWORD,
    TELEMETRY_PATH,
    USER,
    FakeUfmServer,
    fixture,
    self_signed,
)

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "ufm"
TS = 1_795_971_600_000


def inventory() -> Any:
    return parse_inventory(fixture("ports.json"), fixture("links.json"))


def test_inventory_names_switches_by_system_name_and_hosts_by_the_naming_rule() -> None:
    inv = inventory()
    assert inv.names == {"0x900a840300ac8c40": "sw-leaf01", "0x9c0591030085abc0": "sw-spine01",
                         "0x248a0703002e628e": "node0042/mlx5_0"}
    assert inv.peer("0x900a840300ac8c40", 12) == ("0x248a0703002e628e", 1)
    assert inv.peer("0x248a0703002e628e", 1) == ("0x900a840300ac8c40", 12)


def test_events_link_down_up_both_ends_unhealthy_and_peer_from_links() -> None:
    res = parse_events(fixture("events.json"), fabric="f", tz="UTC", after=0,
                       inventory=inventory())
    got = [(e.device, e.port, e.state, e.ufm_event_id) for e in res.events]  # type: ignore[attr-defined]
    assert got == [
        ("sw-leaf01", 5, "down", 97214), ("sw-spine01", 5, "down", 97214),
        ("sw-leaf01", 5, "up", 97215), ("sw-spine01", 5, "up", 97215),
        ("node0042/mlx5_0", 1, "down", 97216),  # 702: the port only, not its peer
        # old UFM: the code in "type"; the description names no end: object_name + links
        ("sw-leaf01", 12, "down", 97217), ("node0042/mlx5_0", 1, "down", 97217)]
    assert res.last_id == 97217
    first = res.events[0]
    assert first.ts == 1_795_971_670_250  # 2026-11-29 17:01:10.250 UTC
    assert first.reason == "link went down (UFM 329 Warning)"
    assert res.events[4].reason == "unhealthy (UFM 702 Warning)"
    for event in res.events:  # every event survives the wire
        assert decode(encode(event)) == event


def test_events_after_an_id_and_zone() -> None:
    res = parse_events(fixture("events.json"), fabric="f", tz="Europe/Oslo", after=97215,
                       inventory=inventory())
    assert {e.ufm_event_id for e in res.events} == {97216, 97217}  # type: ignore[attr-defined]
    assert res.events[0].ts == 1_795_971_900_000 - 3600_000  # Oslo is UTC+1 in November
    again = parse_events(fixture("events.json"), fabric="f", tz="UTC", after=0)
    assert [e.id for e in again.events] == [e.id for e in parse_events(
        fixture("events.json"), fabric="f", tz="UTC", after=0).events]  # ids are stable


def test_a_bad_port_event_is_named_and_does_not_hold_back_the_next() -> None:
    answer = [{"id": 1, "event_type": "329", "timestamp": "yesterday", "description": "x"},
              {"id": 2, "event_type": "702", "timestamp": "2026-11-29 17:00:00",
               "object_name": "nothing-here"},
              {"id": 3, "event_type": "702", "timestamp": "2026-11-29 17:00:00",
               "object_name": "248a0703002e628e_1"}]
    res = parse_events(answer, fabric="f", tz="UTC", after=0)
    assert [(e.ufm_event_id, e.port) for e in res.events] == [(3, 1)]  # type: ignore[attr-defined]
    assert res.last_id == 3
    assert res.skipped[0].startswith("event 1 (329): event timestamp 'yesterday'")
    assert "names no port" in res.skipped[1]


@pytest.mark.parametrize("answer, why", [
    ({"events": []}, "JSON list"),
    ([{"name": "x"}], "integer id"),
])
def test_events_refuse_undocumented_shapes(answer: Any, why: str) -> None:
    with pytest.raises(ParseError, match=why):
        parse_events(answer, fabric="f", tz="UTC", after=0)


def test_unhealthy_marks_added_then_removed() -> None:
    marks = fixture("unhealthy_ports.json")
    events, now = parse_unhealthy(marks, fabric="f", ts=TS, previous=(), inventory=inventory())
    assert [(e.device, e.port, e.state) for e in events] == [("node0042/mlx5_0", 1, "down")]
    assert events[0].reason == "unhealthy (UFM mark: MANUAL)"
    assert now == {"0x248a0703002e628e_1"}
    same, _ = parse_unhealthy(marks, fabric="f", ts=TS + 1, previous=now)
    assert same == []
    healed, after = parse_unhealthy([], fabric="f", ts=TS + 2, previous=now, inventory=inventory())
    assert [(e.device, e.port, e.state) for e in healed] == [("node0042/mlx5_0", 1, "up")]
    assert after == set()
    reported, _ = parse_unhealthy(marks, fabric="f", ts=TS, previous=(),
                                  reported={"0x248a0703002e628e_1"})
    assert reported == []  # a 702 event already said so


def test_702_events_name_the_ports_they_report() -> None:
    res = parse_events(fixture("events.json"), fabric="f", tz="UTC", after=0)
    assert res.unhealthy == {"0x248a0703002e628e_1"}


def test_telemetry_csv_rows_become_counters_per_device() -> None:
    text = (FIX / "telemetry-xcset.csv").read_text()
    events = parse_telemetry_csv(text, fabric="f", inventory=inventory())
    by = {e.device: e for e in events}
    assert set(by) == {"sw-leaf01", "sw-spine01", "node0042/mlx5_0"}
    leaf = by["sw-leaf01"]
    assert leaf.ts == 1_795_971_600_123
    p5 = leaf.ports[0]
    assert (p5.port, p5.rcv_errors, p5.link_downed, p5.symbol_errors, p5.xmit_wait) == (5, 3, 1, 12, 1234)
    assert p5.module_temp_c == 45.0
    assert p5.counter_bits == {"xmit_discards": 64, "xmit_wait": 64}
    assert p5.model_extra["ufm_PortRcvPktsExtended"] == 1_000_000  # type: ignore[index]
    assert by["sw-spine01"].ports[0].module_temp_c is None  # N/A
    assert parse_telemetry_csv(text, fabric="f")[0].device.startswith("0x")  # no inventory: GUID
    lower = text.replace("Node_GUID", "node_guid").replace("Port_Number", "port_num")
    assert parse_telemetry_csv(lower, fabric="f", inventory=inventory()) == events


@pytest.mark.parametrize("text, why", [
    ("", "empty"),
    ("a,b,c\n1,2,3\n", "not UFM telemetry CSV"),
    ("timestamp,Node_GUID,Port_Number,PortRcvErrors\n1,0x1,1\n", "cut off"),
    ("timestamp,Node_GUID,Port_Number,PortRcvErrors\n1,zz,1,0\n", "not a GUID"),
    ("timestamp,Node_GUID,Port_Number,PortRcvErrors\n1,0x1,1,-4\n", "negative"),
    ("timestamp,Node_GUID,Port_Number,PortRcvErrors\n1,0x1,1,lots\n", "not a number"),
    ("timestamp,Node_GUID,Port_Number,PortRcvErrors\n1,0x1,999,0\n", "outside"),
])
def test_telemetry_csv_refuses_bad_input(text: str, why: str) -> None:
    with pytest.raises(ParseError, match=why):
        parse_telemetry_csv(text, fabric="f")


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_telemetry_csv_mutations_raise_only_parse_error(data: st.DataObject) -> None:
    text = (FIX / "telemetry-xcset.csv").read_text()
    cut = data.draw(st.integers(0, len(text)))
    junk = data.draw(st.text(max_size=20))
    mutated = text[:cut] + junk + text[cut + data.draw(st.integers(0, 10)):]
    try:
        events = parse_telemetry_csv(mutated, fabric="f")
    except ParseError:
        return
    for event in events:
        assert decode(encode(event)) == event


@settings(max_examples=200, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["id", "event_type", "type", "timestamp",
                                                 "description", "object_name", "severity"]),
                                st.one_of(st.integers(-5, 10**6), st.text(max_size=30),
                                          st.none(), st.booleans())), max_size=5))
def test_events_arbitrary_entries_raise_only_parse_error(answer: list[dict[str, Any]]) -> None:
    try:
        res = parse_events(answer, fabric="f", tz="UTC", after=0)
    except ParseError:
        return
    for event in res.events:
        assert decode(encode(event)) == event


# ---------------------------------------------------------------- the poller, fake UFM


class Recorder:
    def __init__(self) -> None:
        self.sent: list[Any] = []
        self.flushes = 0

    async def send_many(self, events: Any) -> int:
        self.sent.extend(events)
        return len(events)

    async def flush(self) -> int:
        self.flushes += 1
        return 0


def config(url: str, state: Path, **kw: Any) -> UfmConfig:
    opts: dict[str, Any] = {"fabric": "f", "base_url": url, "username": USER,
                            "password": SecretStr(PASSWORD), "state_file": state,
                            "telemetry_url": url + TELEMETRY_PATH, "timeout_s": 5.0,
                            "backfill": True}
    opts.update(kw)
    return UfmConfig(**opts)


async def test_poller_round_publishes_everything_and_resumes_after_restart(tmp_path: Path) -> None:
    ufm = FakeUfmServer()
    url = await ufm.start()
    try:
        pub = Recorder()
        poller = UfmPoller(config(url, tmp_path / "state.json"), pub)
        rep = await poller.round()
        await poller.close()
        assert rep.failed == {}
        # the mark's port was reported by the 702 event of the same round: one down, not two
        assert rep.published == {"events": 7, "unhealthy_ports": 0, "telemetry": 3}
        kinds = [type(e).__name__ for e in pub.sent]
        assert kinds.count("PortEvent") == 7 and kinds.count("Counters") == 3
        assert json.loads((tmp_path / "state.json").read_text()) == {
            "last_event_id": 97217, "unhealthy": ["0x248a0703002e628e_1"]}
        assert all(authorised for path, authorised in ufm.requests if path != TELEMETRY_PATH)

        # a new poller (a restart) publishes only what is new
        ufm.add_link_events(97218, 2)
        pub2 = Recorder()
        poller2 = UfmPoller(config(url, tmp_path / "state.json"), pub2)
        rep2 = await poller2.round()
        await poller2.close()
        events = [e for e in pub2.sent if isinstance(e, PortEvent)]
        assert [(e.ufm_event_id, e.state) for e in events] == [  # type: ignore[attr-defined]
            (97218, "down"), (97218, "down"), (97219, "up"), (97219, "up")]
        assert rep2.published["unhealthy_ports"] == 0
    finally:
        await ufm.stop()


async def test_first_start_without_backfill_skips_history(tmp_path: Path) -> None:
    ufm = FakeUfmServer()
    url = await ufm.start()
    try:
        pub = Recorder()
        poller = UfmPoller(config(url, tmp_path / "s.json", backfill=False), pub)
        rep = await poller.round()
        assert rep.published["events"] == 0
        assert rep.published["unhealthy_ports"] == 1  # the 702 was history: the mark is news
        ufm.add_link_events(97300, 1)
        rep = await poller.round()
        await poller.close()
        assert rep.published["events"] == 2
    finally:
        await ufm.stop()


async def test_a_failing_resource_is_named_and_the_rest_published(tmp_path: Path) -> None:
    ufm = FakeUfmServer()
    ufm.hang.add("/ufmRest/resources/links")
    url = await ufm.start()
    try:
        pub = Recorder()
        poller = UfmPoller(config(url, tmp_path / "s.json", timeout_s=1.0,
                                  inventory_every_s=0.001), pub)
        rep = await poller.round()  # no names yet: nothing is read, nothing advances
        assert "within 1 s" in rep.failed["ports/links"]
        assert {k: v.startswith("not read") for k, v in rep.failed.items() if k != "ports/links"} \
            == {"events": True, "unhealthy_ports": True, "telemetry": True}
        assert pub.sent == [] and poller.state.last_event_id is None
        ufm.hang.clear()
        rep = await poller.round()
        assert rep.failed == {} and rep.published["events"] == 7
        # later a refresh and the events fail: the names it had stay, the rest is published
        ufm.hang.add("/ufmRest/resources/links")
        ufm.fail["/ufmRest/app/events"] = 500
        ufm.unhealthy = []
        pub.sent.clear()
        rep = await poller.round()
        await poller.close()
        assert set(rep.failed) == {"events", "ports/links"} and "HTTP 500" in rep.failed["events"]
        assert rep.published == {"unhealthy_ports": 1, "telemetry": 3}  # the mark's removal: up
        assert {e.device for e in pub.sent} == {"sw-leaf01", "sw-spine01", "node0042/mlx5_0"}
        assert poller.state.last_event_id == 97217  # not advanced past what it did not read
    finally:
        await ufm.stop()


async def test_wrong_password_is_a_named_failure_without_the_password(tmp_path: Path) -> None:
    ufm = FakeUfmServer()
    url = await ufm.start()
    try:
        poller = UfmPoller(config(url, tmp_path / "s.json", password=SecretStr("wrong"),
                                  telemetry_url=None), Recorder())
        rep = await poller.round()
        await poller.close()
        assert "HTTP 401" in rep.failed["ports/links"]
        assert all("wrong" not in why and PASSWORD not in why for why in rep.failed.values())
    finally:
        await ufm.stop()


async def test_tls_is_verified_by_default(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    ufm = FakeUfmServer()
    url = await ufm.start(tls=(cert, key))
    try:
        strict = UfmPoller(config(url, tmp_path / "a.json", telemetry_url=None), Recorder())
        rep = await strict.round()
        await strict.close()
        assert "certificate" in rep.failed["ports/links"].lower()
        assert rep.failed["events"].startswith("not read")
        trusted = UfmPoller(config(url, tmp_path / "b.json", telemetry_url=None, ca_file=cert),
                            Recorder())
        assert (await trusted.round()).failed == {}
        await trusted.close()
        insecure = UfmPoller(config(url, tmp_path / "c.json", telemetry_url=None,
                                    verify_tls=False), Recorder())
        assert (await insecure.round()).failed == {}
        await insecure.close()
    finally:
        await ufm.stop()


def test_state_file_that_is_not_ours_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text('{"last_event_id": "seven"}')
    with pytest.raises(ValueError, match="not what this poller writes"):
        UfmState.load(path)


async def test_a_bad_event_is_named_in_the_round_and_the_poller_moves_on(tmp_path: Path) -> None:
    ufm = FakeUfmServer()
    ufm.events.append({"id": 97218, "event_type": "329", "timestamp": "not a time",
                       "description": "Link went down", "object_name": "900a840300ac8c40_5"})
    ufm.add_link_events(97219, 1)
    url = await ufm.start()
    try:
        poller = UfmPoller(config(url, tmp_path / "s.json", telemetry_url=None), Recorder())
        rep = await poller.round()
        assert "1 port event(s) not mapped, first: event 97218 (329)" in rep.failed["events"]
        assert rep.published["events"] == 9 and poller.state.last_event_id == 97219
        rep = await poller.round()
        await poller.close()
        assert rep.failed == {}  # named once, not forever
    finally:
        await ufm.stop()
