"""Round trips and rejections of the wire contract's models and codec."""

from __future__ import annotations

import base64
import time
import unicodedata

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import (
    ContractError,
    Counters,
    Detection,
    PortEvent,
    Probe,
    Topology,
    dead_letter,
    decode,
    encode,
    message_key,
)
from schemas.topics import ALL_TOPICS, BY_NAME, topic_for_kind

NOW_MS = int(time.time() * 1000)


def port_event(**over: object) -> dict[str, object]:
    base: dict[str, object] = {"v": 1, "id": "e1", "ts": NOW_MS, "fabric": "f1", "source": "opensm",
                               "kind": "port_event", "device": "leaf-su01-r3", "port": 17,
                               "state": "down", "trap": 128}
    base.update(over)
    return base


def counters(**over: object) -> dict[str, object]:
    base: dict[str, object] = {"v": 1, "id": "c1", "ts": NOW_MS, "fabric": "f1", "source": "sim",
                               "kind": "counters", "device": "leaf-su01-r3",
                               "ports": [{"port": 1, "symbol_errors": 3, "width": "4X",
                                          "speed": "NDR", "raw_ber": 1e-9}]}
    base.update(over)
    return base


def test_port_event_round_trip_keeps_unknown_fields() -> None:
    raw = orjson.dumps(port_event(vendor_extra={"a": 1}))
    event = decode(raw)
    assert isinstance(event, PortEvent)
    assert event.key == "leaf-su01-r3:17"
    assert message_key(event) == "leaf-su01-r3:17"
    again = decode(encode(event))
    assert again == event
    assert orjson.loads(encode(event))["vendor_extra"] == {"a": 1}


def test_rfc3339_ts_is_emitted_as_epoch_ms() -> None:
    event = decode(orjson.dumps(port_event(ts="2026-11-29T18:00:00.250Z")))
    assert event.ts == 1795975200250
    assert orjson.loads(encode(event))["ts"] == 1795975200250
    offset = decode(orjson.dumps(port_event(ts="2026-11-29T19:00:00.250+01:00")))
    assert offset.ts == event.ts


def test_every_kind_round_trips_and_has_a_topic() -> None:
    samples = [
        decode(orjson.dumps(port_event())),
        decode(orjson.dumps(counters())),
        Probe(id="p1", ts=NOW_MS, fabric="f1", source="probe", probe="ib_write_bw",
              src="node0001/mlx5_0", dst="node0002/mlx5_0", rail=0, size_bytes=1 << 20,
              bw_gbps=390.5, baseline_gbps=392.0),
        Topology(id="t1", ts=NOW_MS, fabric="f1", source="ibnetdiscover",
                 links=[{"a_device": "leaf-su01-r0", "a_port": 1,  # type: ignore[list-item]
                         "b_device": "node0001/mlx5_0", "b_port": 1, "width": "4X",
                         "speed": "NDR"}]),
        Detection(id="d1", ts=NOW_MS, fabric="f1", source="fabricwatch", device="leaf-su01-r3",
                  port=17, detection="flap", severity="critical",  # type: ignore[arg-type]
                  action="isolate_port", evidence={"downs": [1, 2, 3]},  # type: ignore[arg-type]
                  episode="flap/leaf-su01-r3:17/1"),
    ]
    for event in samples:
        assert decode(encode(event)) == event
        topic = topic_for_kind(event.kind)
        assert BY_NAME[topic.name] is topic
        assert isinstance(message_key(event), str)
    assert {t.name for t in ALL_TOPICS} >= {"fabric.port-events", "fabric.counters",
                                            "fabric.probes", "fabric.topology",
                                            "fabric.detections", "fabric.dlq"}


def test_counters_key_is_device_and_probe_key_is_rail() -> None:
    assert message_key(decode(orjson.dumps(counters()))) == "leaf-su01-r3"


@pytest.mark.parametrize(
    ("message", "path", "fragment"),
    [
        (counters(ports=[{"port": 1, "symbol_errors": -1}]), "ports.0.symbol_errors",
         "greater than or equal to 0"),
        (port_event(kind="flapz"), "kind", "unknown kind"),
        (port_event(device="leaf\x07"), "device", "control character"),
        (port_event(device="leaf\x85"), "device", "control character"),
        (port_event(device="x" * 257), "device", "256 bytes"),
        (port_event(port=256), "port", "outside 0..255"),
        (port_event(port=1025, source="sonic"), "port", "outside 0..1024"),
        (counters(ports=[{"port": 1}, {"port": 2000}]), "ports.1.port", "outside 0..1024"),
        (port_event(port=True), "port", "valid integer"),
        (port_event(port="4"), "port", "valid integer"),
        (port_event(port=4.0), "port", "valid integer"),
        (port_event(trap="128"), "trap", "valid integer"),
        (counters(ports=[{"port": 1, "symbol_errors": "12"}]), "ports.0.symbol_errors",
         "valid integer"),
        (counters(ports=[{"port": 1, "link_downed": True}]), "ports.0.link_downed",
         "valid integer"),
        (counters(ports=[{"port": 1, "raw_ber": "1e-9"}]), "ports.0.raw_ber", "valid number"),
        (port_event(ts=NOW_MS + 2 * 86_400_000), "ts", "more than a day in the future"),
        (port_event(ts="yesterday"), "ts", "not RFC 3339"),
        (port_event(ts="2026-11-29T18:00:00"), "ts", "UTC offset"),
        (port_event(ts=True), "ts", "boolean"),
        (port_event(state="sideways"), "state", "'down' or 'up'"),
        (port_event(v=2), "v", "1"),
        ({k: v for k, v in port_event().items() if k != "device"}, "device", "required"),
    ],
)
def test_rejections_name_the_field_and_reason(message: dict[str, object], path: str,
                                               fragment: str) -> None:
    with pytest.raises(ContractError) as info:
        decode(orjson.dumps(message))
    assert info.value.path == path
    assert fragment in info.value.reason


def test_ethernet_port_1024_is_accepted_but_not_on_infiniband() -> None:
    assert decode(orjson.dumps(port_event(port=1024, source="sonic"))).port == 1024


def test_non_finite_floats_are_rejected() -> None:
    # JSON has no NaN or Infinity; orjson refuses them on the wire ...
    for literal in (b"NaN", b"Infinity", b"-Infinity"):
        raw = orjson.dumps(counters()).replace(b'"raw_ber":1e-9', b'"raw_ber":' + literal)
        assert literal in raw
        with pytest.raises(ContractError, match="not valid JSON"):
            decode(raw)
    # ... and the models refuse them from Python producers too.
    with pytest.raises(ValueError, match="finite"):
        Counters.model_validate(counters(ports=[{"port": 1, "raw_ber": float("inf")}]))


def test_dead_letter_keeps_the_raw_bytes_and_reason() -> None:
    raw = b"\xff\x00 not json"
    with pytest.raises(ContractError) as info:
        decode(raw)
    record = dead_letter(raw, info.value, source_topic="fabric.counters", partition=3, offset=42,
                         now_ms=NOW_MS)
    assert base64.b64decode(record.raw_b64) == raw
    assert record.source_topic == "fabric.counters" and record.offset == 42
    assert "not valid JSON" in record.reason
    assert orjson.loads(encode(record))["kind"] == "dead_letter"


@given(st.text(max_size=40))
@settings(max_examples=400, deadline=None)
def test_a_device_name_is_refused_for_exactly_the_control_characters(name: str) -> None:
    """The C-level scan refuses what the character loop it replaced refused (Unicode Cc)."""
    from schemas.events import MAX_DEVICE_BYTES, check_device

    loop_refuses = any(c < " " or "\x7f" <= c <= "\x9f" for c in name)
    if not name or len(name.encode("utf-8", "surrogatepass")) > MAX_DEVICE_BYTES:
        return
    try:
        check_device(name)
    except ValueError as exc:
        assert loop_refuses and "control character" in str(exc)
    else:
        assert not loop_refuses
    assert loop_refuses == any(unicodedata.category(c) == "Cc" for c in name)
