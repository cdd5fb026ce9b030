"""What the SM itself did, from opensm's log and sminfo: heavy sweeps, state, trap storms."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.errors import ParseError
from collectors.ibdiags import parse_saquery_sms, parse_sminfo
from collectors.ibnetdiscover import parse_nodes
from collectors.lidmap import LidMap
from collectors.smlog import OpensmState, parse_opensm_log
from schemas import SmEvent, decode, encode

FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "fixtures"
LIDS = LidMap.from_nodes(parse_nodes(
    (FIXTURES / "ibnetdiscover" / "topograph-ndr-fattree.txt").read_text()))
SM_GUID = "0x2c5eab0300b87b40"


def _ms(text: str) -> int:
    return int(datetime.strptime(f"2026 {text}", "%Y %b %d %H:%M:%S.%f").replace(
        tzinfo=UTC).timestamp() * 1000)


def _read(name: str) -> str:
    return (FIXTURES / "opensm" / name).read_text()


def test_default_level_log_gives_each_heavy_sweep_its_trigger_and_the_masters_state() -> None:
    result = parse_opensm_log(_read("ibsim-default-level-traps-128.log"), fabric="lab",
                              tz="UTC", year=2026, lids=LIDS)
    states = [e for e in result.sm_events if e.event == "state"]
    # DISCOVERING comes before opensm binds (and logs its port GUID): named by the source
    assert [(e.sm, e.state) for e in states] == [("opensm", "discovering"), (SM_GUID, "master")]
    sweeps = [e for e in result.sm_events if e.event == "sweep"]
    assert len(sweeps) == 5  # one per SUBNET UP
    first = sweeps[0]
    assert first.trigger == "start-up"
    assert first.start == _ms("Nov 29 17:25:44.143")  # Entering DISCOVERING state
    assert first.end == _ms("Nov 29 17:25:44.945")  # SUBNET UP
    second = sweeps[1]
    assert second.trigger == "trap 128"
    assert second.start == _ms("Nov 29 17:33:08.940")  # the first trap 128
    assert second.end == _ms("Nov 29 17:33:09.274")
    assert second.duration_ms == second.end - second.start
    assert len(second.devices) == 2  # LIDs 73 and 236 sent the traps
    # the sweep that took a CA port out names it
    removed = [e.key for e in result.events if e.state == "down"]
    assert removed and any(set(removed) & set(s.ports) for s in sweeps)
    for event in result.sm_events:
        assert decode(encode(event)) == event  # on the wire as parsed


def test_verbose_excerpts_in_two_chunks_are_one_sweep_from_first_trap_to_subnet_up() -> None:
    state = OpensmState(year=2026)
    start = parse_opensm_log(_read("ibsim-verbose-trap128-heavy-sweep-start-excerpt.log"),
                             fabric="lab", tz="UTC", year=2026, lids=LIDS, state=state)
    assert [e for e in start.sm_events if e.event == "sweep"] == []  # not over yet
    assert state.sweep_pending and state.sweep_trigger == "trap 128"
    end = parse_opensm_log(_read("ibsim-verbose-sweep-end-subnet-up-excerpt.log"),
                           fabric="lab", tz="UTC", year=2026, lids=LIDS, state=state)
    [sweep] = [e for e in end.sm_events if e.event == "sweep"]
    assert sweep.start == _ms("Nov 29 17:35:20.095")
    assert sweep.end == _ms("Nov 29 17:35:20.437")
    assert sweep.trigger == "trap 128"
    assert not state.sweep_pending


# Lines in opensm's own formats (osm_sm_state_mgr.c "Entering %s state", osm_trap_rcv.c
# "Received trap %u times consecutively", "Disabling noisy physical port 0x%016" PRIx64
# ": lid %u, num %u"), on a standby that takes over and a port that babbles.
_TRAP_129 = ("log_trap_info: Received Generic Notice type:1 num:129 (Local Link Integrity "
             "Threshold exceeded) Producer:2 (Switch) from LID:73 TID:0x0000000000000000")
STANDBY_TAKES_OVER = "".join(f"Nov 29 {stamp} [{thread}] 0x{level} -> {text}\n" for stamp, thread,
                             level, text in [
    ("18:00:00 000001", "6D27F740", "02",
     "osm_opensm_bind: Setting IS_SM on port 0x0002c90300000002"),
    ("18:00:00 000002", "6D27F740", "80", "Entering DISCOVERING state"),
    ("18:00:01 000003", "6A2786C0", "80", "Entering STANDBY state"),
    ("18:05:00 000004", "6A2786C0", "80", "Entering MASTER state"),
    ("18:05:01 000005", "6A2786C0", "02", "SUBNET UP"),
    ("18:06:00 000006", "55AEA6C0", "01", _TRAP_129),
    ("18:06:00 000007", "55AEA6C0", "04",
     "trap_rcv_process_request: Received trap 10 times consecutively"),
    ("18:06:09 000008", "55AEA6C0", "01", _TRAP_129),
    ("18:06:09 000009", "55AEA6C0", "04",
     "shutup_noisy_port: Disabling noisy physical port 0x2c5eab0300b87b40: lid 73, num 5"),
])


def test_standby_taking_over_and_a_babbling_port() -> None:
    result = parse_opensm_log(STANDBY_TAKES_OVER, fabric="lab", tz="UTC", year=2026,
                              lids=LIDS)
    states = [(e.sm, e.state) for e in result.sm_events if e.event == "state"]
    guid = "0x0002c90300000002"
    assert states == [(guid, "discovering"), (guid, "standby"), (guid, "master")]
    [sweep] = [e for e in result.sm_events if e.event == "sweep"]
    assert sweep.trigger == "start-up"  # discovering began it; standby/master joined it
    storms = [e for e in result.sm_events if e.event == "trap_storm"]
    assert [(e.trap, e.count, e.disabled) for e in storms] == [(129, 10, False),
                                                               (129, None, True)]
    lid73 = LIDS.by_lid(73)
    assert lid73 is not None
    assert storms[0].device == lid73.device
    assert (storms[1].device, storms[1].port) == (lid73.device, 5)


_LINES = {
    "trap": "log_trap_info: Received Generic Notice type:1 num:128 (Link state change) "
            "Producer:2 (Switch) from LID:73 TID:0x0000000000000000",
    "forcing": "trap_rcv_process_request: Forcing heavy sweep. Received trap:128",
    "up": "SUBNET UP",
    "master": "Entering MASTER state",
    "standby": "Entering STANDBY state",
    "noise": "osm_ucast_mgr_process: minhop tables configured on all switches",
}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(sorted(_LINES)), min_size=1, max_size=40),
       st.integers(min_value=1, max_value=39))
def test_any_sequence_gives_one_sweep_per_subnet_up_in_order_and_chunks_agree(
        kinds: list[str], cut: int) -> None:
    text = "".join(f"Nov 29 18:{i // 60:02d}:{i % 60:02d} {i:06d} [AB] 0x02 -> {_LINES[k]}\n"
                   for i, k in enumerate(kinds))
    whole = parse_opensm_log(text, fabric="f", tz="UTC", year=2026, lids=LIDS)
    sweeps = [e for e in whole.sm_events if e.event == "sweep"]
    assert len(sweeps) == kinds.count("up")
    for s in sweeps:
        assert s.end is not None and (s.start is None or s.start <= s.end)
    assert [e.ts for e in whole.sm_events] == sorted(e.ts for e in whole.sm_events)
    lines = text.splitlines(keepends=True)
    state = OpensmState(year=2026)
    parts = [parse_opensm_log("".join(chunk), fabric="f", tz="UTC", year=2026, lids=LIDS,
                              state=state)
             for chunk in (lines[:cut], lines[cut:])]
    assert [e for p in parts for e in p.sm_events] == whole.sm_events


def test_sminfo_line_is_the_masters_state() -> None:
    # infiniband-diags sminfo.c's printf format
    text = ("sminfo: sm lid 1 sm guid 0x2c5eab0300b87b40, activity count 4242 priority 14 "
            "state 3 SMINFO_MASTER\n")
    event = parse_sminfo(text, fabric="lab", ts=1_700_000_000_000)
    assert isinstance(event, SmEvent)
    assert (event.event, event.sm, event.state, event.priority) == ("state", SM_GUID, "master",
                                                                   14)
    assert parse_sminfo(text, fabric="lab", ts=1_700_000_001_000).id == event.id


@pytest.mark.parametrize("text", ["", "sminfo: sm lid 1 sm guid 0x1, activity count 1\n",
                                  "ibwarn: query failed\n",
                                  "sminfo: sm lid 1 sm guid 0x1, activity count 1 priority 99 "
                                  "state 3 SMINFO_MASTER\n"])
def test_sminfo_refuses_what_is_not_its_line(text: str) -> None:
    with pytest.raises(ParseError):
        parse_sminfo(text, fabric="lab", ts=1)


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 0xBFFF), st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1),
       st.integers(0, 15), st.integers(0, 3))
def test_sminfo_round_trips_every_value(lid: int, guid: int, act: int, prio: int,
                                        state: int) -> None:
    names = ["SMINFO_NOTACT", "SMINFO_DISCOVER", "SMINFO_STANDBY", "SMINFO_MASTER"]
    text = (f"sminfo: sm lid {lid} sm guid 0x{guid:x}, activity count {act} priority {prio} "
            f"state {state} {names[state]}\n")
    event = parse_sminfo(text, fabric="f", ts=5)
    assert int(event.sm, 16) == guid
    assert event.priority == prio
    assert event.state == ["not_active", "discovering", "standby", "master"][state]


def test_real_sminfo_and_saquery_of_the_lab() -> None:
    sminfo = (FIXTURES / "sminfo" / "ibsim-master.txt").read_text()
    master = parse_sminfo(sminfo, fabric="lab", ts=1_700_000_000_000)
    assert (master.sm, master.state, master.priority) == (SM_GUID, "master", 14)
    saq = (FIXTURES / "saquery" / "ibsim-issm-ports.txt").read_text()
    standby = parse_saquery_sms(saq, fabric="lab", ts=1_700_000_000_000)
    # the lab runs one SM: it is the master (LID 73, as sminfo says), and no standby
    assert (standby.event, standby.sm, standby.sms) == ("standby", "lid:73", [])


def test_saquery_lists_every_sm_port_but_the_master_as_standby() -> None:
    record = ("PortInfoRecord dump:\n\t\tEndPortLid..............{0}\n\t\tPortNum.................0\n"
              "\t\tbase_lid................{0}\n\t\tmaster_sm_base_lid......7\n"
              "\t\tcapability_mask.........0xC04A\n")
    text = "IsSM ports\n" + "".join(record.format(n) for n in (7, 12, 3)) + \
        "\nIsSMdisabled ports\n" + record.format(99)
    event = parse_saquery_sms(text, fabric="f", ts=1)
    assert event.sm == "lid:7" and event.sms == ["lid:12", "lid:3"]
    with pytest.raises(ParseError):
        parse_saquery_sms("sminfo: sm lid 1\n", fabric="f", ts=1)
