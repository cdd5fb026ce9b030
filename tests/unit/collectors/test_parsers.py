"""Behaviour of the counter, log and probe parsers that the golden files alone do not state."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from collectors.errors import ParseError
from collectors.formats import IngestOptions, parse_input
from collectors.ibdiags import parse_iblinkinfo, parse_ibqueryerrors, parse_perfquery
from collectors.ibnetdiscover import parse_nodes
from collectors.lidmap import LidMap
from collectors.probes import parse_ib_write_bw, parse_nccl_tests
from collectors.publish import Publisher
from collectors.smlog import OpensmState, infer_year, parse_opensm_log, parse_ufm_events
from collectors.telemetry import parse_gnmic, parse_sflowtool, parse_sonic_show, port_number
from schemas import LEGACY_COUNTER_BITS

FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "fixtures"
SAMPLES = Path(__file__).parent / "samples"
LIDS = LidMap.from_nodes(parse_nodes(
    (FIXTURES / "ibnetdiscover" / "topograph-ndr-fattree.txt").read_text()))


def _read(rel: str) -> str:
    return (FIXTURES / rel).read_text()


def test_saturated_legacy_counters_carry_their_register_width() -> None:
    [event] = parse_perfquery(_read("perfquery/ibsim-basic-switch-port-saturated.txt"),
                              fabric="lab", ts=1, lids=LIDS)
    sample = event.ports[0]
    assert sample.counter_bits is not None
    for field in ("symbol_errors", "link_error_recovery", "xmit_wait",
                  "local_link_integrity_errors"):
        value = getattr(sample, field)
        assert value == (1 << LEGACY_COUNTER_BITS[field]) - 1  # at the register maximum
        assert sample.counter_bits[field] == LEGACY_COUNTER_BITS[field]
    assert sample.rcv_errors == 1482 and sample.counter_bits["rcv_errors"] == 16


def test_extended_counters_are_64_bit_and_a_ca_lid_gives_its_port() -> None:
    [event] = parse_perfquery(_read("perfquery/extended-switch-port-edr.txt"), fabric="lab",
                              ts=1, device="ib-i4l1s01")
    sample = event.ports[0]
    assert (sample.xmit_wait, sample.xmit_discards, sample.link_downed) == (41864608, 20046, 1)
    assert set(sample.counter_bits.values()) == {64}  # type: ignore[union-attr]
    [ca] = parse_perfquery(_read("perfquery/ibsim-basic-hca-capmask-1200.txt"), fabric="lab",
                           ts=1, lids=LIDS)
    assert (ca.device, ca.ports[0].port) == ("a08-p1-dgx-04-c01/mlx5_5", 1)


def test_perfquery_refuses_the_all_ports_sum_and_unknown_lids() -> None:
    with pytest.raises(ParseError, match="sum over all ports"):
        parse_perfquery(_read("perfquery/ibsim-basic-switch-allports-255.txt"), fabric="lab",
                        ts=1, lids=LIDS)
    with pytest.raises(ParseError, match="LID 73"):
        parse_perfquery(_read("perfquery/ibsim-basic-switch-port-saturated.txt"),
                        fabric="lab", ts=1, lids=LidMap())


def test_ibqueryerrors_reports_only_what_it_shows_and_skips_port_all() -> None:
    events = {e.device: e for e in parse_ibqueryerrors(
        _read("ibqueryerrors/ibsim-injected-errors.txt"), fabric="lab", ts=1)}
    leaf = events["A09-P1-IBLEAF-04-04"]
    assert [p.port for p in leaf.ports] == [1, 35]
    port1 = leaf.ports[0]
    assert (port1.xmit_discards, port1.xmit_wait, port1.symbol_errors) == (27, 123456, None)


def test_iblinkinfo_down_port_has_no_width() -> None:
    events = {e.device: e for e in parse_iblinkinfo(
        _read("iblinkinfo/ibsim-ndr-fattree-down-ports.txt"), fabric="lab", ts=1)}
    port35 = next(p for p in events["A09-P1-IBLEAF-04-04"].ports if p.port == 35)
    assert (port35.width, port35.speed) == (None, None)
    extra = port35.model_extra or {}
    assert (extra["state"], extra["phys_state"]) == ("Down", "Polling")


def test_opensm_trap_alone_makes_no_event_and_replays_get_the_same_ids() -> None:
    text = _read("opensm/ibsim-verbose-trap128-heavy-sweep-start-excerpt.log")
    assert parse_opensm_log(text, fabric="lab", tz="UTC", year=2026, lids=LIDS).events == []
    sample = (SAMPLES / "opensm-verbose-port-changes.log").read_text()
    first = parse_opensm_log(sample, fabric="lab", tz="UTC", year=2025, lids=LIDS)
    again = parse_opensm_log(sample, fabric="lab", tz="UTC", year=2025, lids=LIDS)
    assert [e.id for e in first.events] == [e.id for e in again.events]
    assert len({e.id for e in first.events}) == len(first.events)
    assert [u.reason for u in first.unresolved] == ["GUID 0x0000000000000bad is not in the "
                                                    "topology"]


def test_local_time_zone_is_applied() -> None:
    text = (SAMPLES / "ufm-event-log.log").read_text()
    utc = parse_ufm_events(text, fabric="lab", tz="UTC").events[0].ts
    oslo = parse_ufm_events(text, fabric="lab", tz="Europe/Oslo").events[0].ts
    assert utc - oslo == 3_600_000  # Oslo is UTC+1 in November
    with pytest.raises(ParseError, match="unknown time zone"):
        parse_ufm_events(text, fabric="lab", tz="Mars/Olympus")


@pytest.mark.parametrize(("name", "port"), [("Ethernet8", 8), ("ethernet-1/3", 3),
                                            ("swp12", 12), ("mgmt0", 0), ("s1-eth2", 2)])
def test_interface_port_numbers(name: str, port: int) -> None:
    assert port_number(name) == port


def test_two_interfaces_on_one_port_number_are_refused() -> None:
    doc = ('[{"name":"s","timestamp":1795971600000000000,"tags":{"source":"sw",'
           '"interface_name":"ethernet-1/1"},"values":{"in-errors":1}},'
           '{"name":"s","timestamp":1795971600000000000,"tags":{"source":"sw",'
           '"interface_name":"ethernet-2/1"},"values":{"in-errors":2}}]')
    with pytest.raises(ParseError, match="both map to port 1"):
        parse_gnmic(doc, fabric="lab")


def test_sflow_unknown_sentinel_is_null_and_pfc_sums() -> None:
    [event] = parse_sflowtool(_read("sflowtool/ovs-mininet-flow-and-counter-samples.txt"),
                              fabric="lab")
    extra = event.ports[0].model_extra or {}
    assert extra["if_in_broadcast_pkts"] is None and extra["if_in_octets"] == 1948
    [pfc] = parse_sonic_show(_read("sonic/show-pfc-counters.txt"), fabric="lab", ts=1,
                             device="sw")
    assert pfc.ports[0].pfc_pause_rx == 1200 + sum(range(201, 208))


def test_probe_units() -> None:
    [probe] = parse_ib_write_bw(_read("perftest/superbench-ib_write_bw-8M-tabs.txt"),
                                fabric="lab", ts=1, rail=3)
    assert probe.bw_gbps == pytest.approx(24056.72 * 2**20 * 8 / 1e9)
    assert (probe.rail, probe.size_bytes, probe.src) == (3, 8388608, "lid:3334")
    probes = parse_nccl_tests(_read("nccl-tests/nris-olivia-gh200-16rank-wrong-nonzero.txt"),
                              fabric="lab", ts=1)
    worst = next(p for p in probes if p.size_bytes == 33554432)
    assert worst.bw_gbps == pytest.approx(6.30 * 8)
    assert (worst.model_extra or {})["wrong"] == 951005


def test_publisher_refuses_settings_that_would_break_delivery_guarantees() -> None:
    with pytest.raises(ValueError, match="enable_idempotence"):
        Publisher("127.0.0.1:9092", enable_idempotence=False)
    with pytest.raises(ValueError, match="acks"):
        Publisher("127.0.0.1:9092", acks=1)
    with pytest.raises(ValueError, match="compression"):
        Publisher("127.0.0.1:9092", compression="brotli")
    with pytest.raises(ValueError, match="bootstrap"):
        Publisher("  ")
    config = Publisher("127.0.0.1:9092").config
    assert config["enable_idempotence"] is True and config["acks"] == "all"
    assert config["compression_type"] == "zstd" and 5 <= config["linger_ms"] <= 20
    assert Publisher("127.0.0.1:9092", compression="lz4").config["compression_type"] == "lz4"


def test_opensm_year_is_inferred_across_new_year() -> None:
    line = "Dec 31 23:59:59 999999 [55AEA6C0] 0x04 -> SUBNET UP\n"
    assert infer_year(line, now=datetime(2027, 1, 2, tzinfo=UTC)) == 2026
    assert infer_year(line, now=datetime(2026, 12, 31, 12, tzinfo=UTC)) == 2026
    assert infer_year("no stamp\n", now=datetime(2026, 5, 1, tzinfo=UTC)) == 2026


def test_a_byte_order_mark_is_not_part_of_the_output() -> None:
    text = (FIXTURES / "ibnetdiscover" / "ports-edr-mixed.txt").read_bytes()
    opts = IngestOptions(fabric="lab", ts=1)
    assert parse_input("ibnetdiscover", b"\xef\xbb\xbf" + text, opts) == parse_input(
        "ibnetdiscover", text, opts)


def test_opensm_state_carries_traps_year_and_line_numbers_across_chunks() -> None:
    lines = (SAMPLES / "opensm-verbose-port-changes.log").read_text().splitlines(keepends=True)
    state = OpensmState(year=2025)
    first = parse_opensm_log(lines[0], fabric="lab", tz="UTC", year=2025, lids=LIDS,
                             state=state)  # trap 128 from LID 73 only
    assert first.events == [] and state.traps == {"A09-P1-IBLEAF-04-04": 128}
    assert parse_opensm_log("", fabric="lab", tz="UTC", year=2025, state=state).events == []
    rest = parse_opensm_log("".join(lines[1:]), fabric="lab", tz="UTC", year=2025, lids=LIDS,
                            state=state)
    whole = parse_opensm_log("".join(lines), fabric="lab", tz="UTC", year=2025, lids=LIDS)
    assert rest.events == whole.events  # trap 128 attached, the year rolled over
    assert [u.line for u in rest.unresolved] == [u.line for u in whole.unresolved] == [10]
