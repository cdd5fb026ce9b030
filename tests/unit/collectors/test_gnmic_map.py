"""gnmic Kafka messages (event and json formats) to contract events: collectors.gnmic_map."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from collectors.gnmic_map import GNMIC_TABLE, GnmicMapError, GnmicMapper, lookup
from schemas import ContractError, decode, encode

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "gnmic"


def raw(name: str) -> bytes:
    return (FIX / name).read_bytes()


def test_real_srl_event_format_array_maps_errors_and_discards() -> None:
    result = GnmicMapper("f").map(raw("event-format-srl-interface-statistics.json"))
    assert len(result.counters) == 1
    event = result.counters[0]
    assert (event.device, event.source, event.ts) == ("clab-traps-srl1", "gnmi", 1_710_890_476_202)
    (sample,) = event.ports
    assert sample.port == 0 and sample.model_extra["interface"] == "mgmt0"  # type: ignore[index]
    doc = orjson.loads(raw("event-format-srl-interface-statistics.json"))
    value = {k.rsplit("/", 1)[1]: v for e in doc for k, v in e["values"].items()}
    assert sample.rcv_errors == value["in-error-packets"]
    assert sample.xmit_discards == value["out-discarded-packets"]
    assert sample.model_extra["in_octets"] == value["in-octets"]  # type: ignore[index]
    assert sample.counter_bits == {"rcv_errors": 64, "xmit_discards": 64}
    assert result.ignored == 0
    assert decode(encode(event)) == event


def test_sonic_counters_db_pfc_per_priority_and_ecn_per_queue() -> None:
    result = GnmicMapper("f").map(raw("event-format-sonic-counters-db.json"))
    assert [c.device for c in result.counters] == ["leaf-su01-r3"]  # ":8080" dropped
    (sample,) = result.counters[0].ports  # the backplane port is left out
    extra: dict[str, Any] = sample.model_extra or {}
    assert (sample.port, sample.rcv_errors, sample.xmit_discards) == (8, 3, 7)
    assert (extra["pfc3_rx"], extra["pfc4_rx"], sample.pfc_pause_rx, sample.pfc_pause_tx) == (
        1500, 10, 1510, 25)
    assert (extra["ecn_marked_q3"], extra["ecn_marked_q4"], sample.ecn_marked) == (420, 5, 425)
    assert extra["in_discards"] == 1 and extra["in_octets"] == 123456789


def test_totals_are_over_the_latest_value_of_each_priority_across_messages() -> None:
    mapper = GnmicMapper("f")

    def one(prio: int, value: int, ts: int) -> Any:
        msg = {"name": "s", "timestamp": ts, "tags": {"source": "sw1"},
               "values": {f"/COUNTERS/Ethernet4/SAI_PORT_STAT_PFC_{prio}_RX_PKTS": str(value)}}
        return mapper.map(orjson.dumps(msg)).counters[0].ports[0]

    assert one(3, 100, 10**18).pfc_pause_rx == 100
    assert one(4, 7, 10**18 + 1).pfc_pause_rx == 107
    assert one(3, 150, 10**18 + 2).pfc_pause_rx == 157


def test_json_format_and_oper_status_changes() -> None:
    mapper = GnmicMapper("f")
    first = mapper.map(raw("json-format-openconfig-counters.json"))
    (sample,) = first.counters[0].ports
    assert (first.counters[0].device, sample.port, sample.rcv_errors, sample.xmit_discards) == (
        "spine-02", 16, 12, 0)
    assert [(e.device, e.port, e.state) for e in first.port_events] == [("spine-02", 16, "down")]
    up = mapper.map(raw("event-format-openconfig-oper-status.json"))
    assert [(e.port, e.state, e.reason) for e in up.port_events] == [(16, "up", "oper-status UP")]
    again = mapper.map(raw("event-format-openconfig-oper-status.json"))
    assert again.port_events == [] and again.counters == []  # no change, no event
    fresh = GnmicMapper("f").map(raw("event-format-openconfig-oper-status.json"))
    assert fresh.port_events == []  # first seen up: no news


@pytest.mark.parametrize("message, why", [
    (b"not json", "not JSON"),
    (b"[]", "empty array"),
    (b'{"foo": 1}', "not a gnmic message"),
    (b'[{"timestamp": 1, "tags": {"interface_name": "e1"}, "values": {"/a/in-errors": 1}}]',
     "no device"),
    (b'[{"tags": {"source": "s", "interface_name": "e1"}, "values": {"/state/counters/in-errors": 1}}]',
     "no timestamp"),
    (b'[{"timestamp": 5, "tags": {"source": "s"}, "values": {"/interface/statistics/in-octets": 1}}]',
     "no interface"),
    (b'[{"timestamp": 5, "tags": {"source": "s", "interface_name": "e1"},'
     b' "values": {"/system/cpu/load": 1}}]', "is in the mapping table"),
    (b'[{"timestamp": 5, "tags": {"source": "s", "interface_name": "e1"},'
     b' "values": {"/state/counters/in-errors": "lots"}}]', "not a number"),
    (b'[{"timestamp": 5, "tags": {"source": "s", "interface_name": "mgmt"},'
     b' "values": {"/state/counters/in-errors": 1}}]', "no number"),
    (b'[{"timestamp": 5, "tags": {"source": "s", "interface_name": "e1"},'
     b' "values": {"/interfaces/interface/state/oper-status": "TESTING"}}]', "neither up nor down"),
    (b'[{"timestamp": 5, "tags": {"source": "s", "interface_name": "e9999"},'
     b' "values": {"/state/counters/in-errors": 1}}]', "invalid event"),
    (b'[{"timestamp": 5, "tags": {"source": "s"}, "deletes": ["/interfaces/interface"]}]',
     "deletes"),
])
def test_unmappable_messages_have_a_reason(message: bytes, why: str) -> None:
    with pytest.raises(GnmicMapError, match=why):
        GnmicMapper("f").map(message)


def test_a_sync_response_is_nothing_to_map_and_no_error() -> None:
    result = GnmicMapper("f").map(b'{"source": "leaf1:57400", "sync-response": true}')
    assert (result.counters, result.port_events) == ([], [])


def test_two_interfaces_on_one_port_number_are_refused() -> None:
    mapper = GnmicMapper("f")
    msg = {"timestamp": 5, "tags": {"source": "s", "interface_name": "Ethernet8"},
           "values": {"/state/counters/in-errors": 1}}
    mapper.map(orjson.dumps(msg))
    msg["tags"]["interface_name"] = "ethernet-1/8"  # type: ignore[index]
    with pytest.raises(GnmicMapError, match="both map to port 8"):
        mapper.map(orjson.dumps(msg))


def test_the_table_maps_every_contract_field_it_names_and_lookup_uses_only_it() -> None:
    contract = {r.field for r in GNMIC_TABLE if r.kind == "counter"}
    assert contract == {"rcv_errors", "xmit_discards"}
    assert lookup("/openconfig-interfaces:interfaces/interface[name=x]/state/counters/in-errors")[1] \
        == "rcv_errors"  # type: ignore[index]
    assert lookup("COUNTERS/Ethernet0:3/SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS")[1] \
        == "ecn_marked_q{queue}"  # type: ignore[index]
    assert lookup("/interfaces/interface/subinterfaces/subinterface/state/counters/in-errors") is None
    assert lookup("/system/memory/used") is None


_LEAVES = st.sampled_from([
    "/interface/statistics/in-error-packets", "/interfaces/interface/state/counters/out-discards",
    "/COUNTERS/Ethernet4/SAI_PORT_STAT_PFC_2_TX_PKTS", "/interfaces/interface/state/oper-status",
    "/COUNTERS/Ethernet4:1/SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS", "/system/cpu", "/x"])
_VALUES = st.one_of(st.integers(-3, 2**64), st.text(max_size=8), st.booleans(), st.none(),
                    st.floats(allow_nan=True), st.sampled_from(["UP", "DOWN", "12"]))
_EVENTS = st.fixed_dictionaries(
    {"timestamp": st.one_of(st.integers(0, 2 * 10**18), st.text(max_size=4)),
     "tags": st.dictionaries(st.sampled_from(["source", "interface_name", "target"]),
                             st.text(max_size=12), max_size=3),
     "values": st.dictionaries(_LEAVES, _VALUES, max_size=4)})


@settings(max_examples=300, deadline=None)
@given(st.lists(_EVENTS, max_size=4))
# a non-ASCII digit: str.isdigit() took it and int() raised ValueError, not a contract error
@example([{"timestamp": "²", "tags": {"source": "0"}, "values": {}}])
@example([{"timestamp": "1", "tags": {"source": "sw1:²"}, "values": {}}])
def test_arbitrary_event_messages_map_or_raise_a_contract_error(events: list[dict[str, Any]]) -> None:
    try:
        # stdlib json: it writes what orjson refuses to (integers past 64 bits, NaN), as a
        # producer other than ours may
        result = GnmicMapper("f").map(json.dumps(events).encode())
    except GnmicMapError as exc:
        assert isinstance(exc, ContractError) and exc.reason
        return
    for event in [*result.counters, *result.port_events]:
        assert decode(encode(event)) == event


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_mutated_real_messages_never_raise_anything_else(data: st.DataObject) -> None:
    text = raw(data.draw(st.sampled_from(["event-format-srl-interface-statistics.json",
                                          "event-format-sonic-counters-db.json",
                                          "json-format-openconfig-counters.json"])))
    cut = data.draw(st.integers(0, len(text)))
    junk = data.draw(st.binary(max_size=12))
    mutated = text[:cut] + junk + text[cut + data.draw(st.integers(0, 20)):]
    try:
        result = GnmicMapper("f").map(mutated)
    except GnmicMapError:
        return
    for event in [*result.counters, *result.port_events]:
        assert decode(encode(event)) == event


def test_the_readme_prints_the_table_as_it_is() -> None:
    readme = (Path(__file__).resolve().parents[3] / "collectors" / "README.md").read_text()
    for rule in GNMIC_TABLE:
        row = f"| `{rule.pattern.replace('|', chr(92) + '|')}` | `{rule.field}` | {rule.kind} |"
        assert row in readme, row
