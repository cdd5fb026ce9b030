"""Property tests: arbitrary bytes raise only ContractError; valid events round-trip."""

from __future__ import annotations

import time

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas import ContractError, PortEvent, PortSample, decode, encode
from schemas.events import COUNTER_FIELDS, Counters

NOW_MS = int(time.time() * 1000)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8),
                                                                     children, max_size=4),
    max_leaves=12,
)


@given(st.binary(max_size=512))
@settings(max_examples=300)
def test_arbitrary_bytes_raise_only_contract_error(raw: bytes) -> None:
    try:
        decode(raw)
    except ContractError:
        pass


@given(st.dictionaries(st.sampled_from(["v", "id", "ts", "fabric", "source", "kind", "device",
                                        "port", "state", "ports", "links", "probe", "rail"]),
                       json_values, max_size=10),
       st.sampled_from(["port_event", "counters", "probe", "topology", "detection", "x"]))
# Generation of nested JSON is slow on a loaded 2-core machine; the test itself is fast.
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
def test_arbitrary_objects_raise_only_contract_error(obj: dict[str, object], kind: str) -> None:
    obj.setdefault("kind", kind)
    try:
        decode(orjson.dumps(obj))
    except ContractError as exc:
        assert exc.reason


devices = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x2FFF,
                                exclude_categories=["Cc", "Cs"]), min_size=1,
                  max_size=40)


@given(device=devices, port=st.integers(0, 255), state=st.sampled_from(["up", "down"]),
       ts=st.integers(0, NOW_MS), trap=st.none() | st.integers(0, 2**16))
def test_port_events_round_trip(device: str, port: int, state: str, ts: int,
                                trap: int | None) -> None:
    event = PortEvent(id=f"{device}-{ts}", ts=ts, fabric="f", source="opensm", device=device,
                      port=port, state=state, trap=trap)  # type: ignore[arg-type]
    assert decode(encode(event)) == event


counter_values = st.none() | st.integers(0, 2**64 - 1)


@given(st.lists(st.fixed_dictionaries({name: counter_values for name in COUNTER_FIELDS[:8]}),
                min_size=1, max_size=8),
       st.none() | st.floats(0, 1, allow_nan=False))
def test_counters_round_trip(samples: list[dict[str, int | None]], ber: float | None) -> None:
    ports = [PortSample(port=i + 1, raw_ber=ber, **s) for i, s in enumerate(samples)]  # type: ignore[arg-type]
    event = Counters(id="c", ts=NOW_MS, fabric="f", source="sim", device="leaf", ports=ports)
    assert decode(encode(event)) == event
