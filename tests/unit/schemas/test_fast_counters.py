"""The counters fast path accepts exactly what the models accept, and builds the same objects.

``decode_counters`` may only say yes to a message ``Counters.model_validate`` accepts, and
must then return an object equal to the model's in every respect (values and their types,
extras, fields-set); anything else goes to the model, so ``decode`` keeps pydantic's errors.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from schemas import ContractError, Counters, PortSample, decode, decode_obj, fast_counters
from schemas.codec import contract_error
from schemas.fast_counters import FAST_FIELDS, SUPPORTED, decode_counters

NOW_MS = int(time.time() * 1000)


def test_every_sample_field_is_on_the_fast_path() -> None:
    # A field added to PortSample (or a new validator) that the fast path does not know
    # makes every message carrying it slow: teach schemas/fast_counters.py its rule.
    assert SUPPORTED
    assert set(FAST_FIELDS) == set(PortSample.model_fields)


@pytest.fixture(autouse=True)
def _fast_path_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fast_counters, "ENABLED", True)  # whatever the environment says


def _model(obj: dict[str, Any]) -> tuple[Counters | None, ContractError | None]:
    try:
        return Counters.model_validate(copy.deepcopy(obj)), None
    except ValidationError as exc:
        return None, contract_error(exc)


def _typed(model: Any) -> Any:
    """Every value with its type, extras and fields-set: == alone takes 1 for 1.0."""
    if isinstance(model, PortSample | Counters):
        return (type(model).__name__, sorted(model.__pydantic_fields_set__),
                {k: _typed(v) for k, v in model.__dict__.items()},
                {k: _typed(v) for k, v in (model.__pydantic_extra__ or {}).items()})
    if isinstance(model, list):
        return [_typed(v) for v in model]
    if isinstance(model, dict):
        return {k: _typed(v) for k, v in model.items()}
    return (type(model).__name__, repr(model))


def _same(obj: dict[str, Any]) -> Counters | None:
    """Assert the fast path agrees with the model on ``obj``; the fast result."""
    original = copy.deepcopy(obj)
    fast = decode_counters(obj)
    assert obj == original  # the parsed message is not changed in place
    slow, error = _model(obj)
    if fast is not None:
        assert error is None, f"fast path accepted what the model refuses: {error}"
        assert fast == slow
        assert _typed(fast) == _typed(slow)
        assert fast.model_dump(mode="json") == slow.model_dump(mode="json")
        assert fast.model_dump(exclude_unset=True) == slow.model_dump(exclude_unset=True)
    # and the codec, whichever path it took, says what the model says
    try:
        decoded = decode_obj(copy.deepcopy(obj))
    except ContractError as exc:
        assert error is not None
        assert (exc.reason, exc.path) == (error.reason, error.path)
    else:
        assert error is None
        assert _typed(decoded) == _typed(slow)
    return fast


# Values a counter (or any sample field) might carry, valid or not.
any_value = (st.none() | st.booleans() | st.integers(-5, 300) | st.integers(-(2**65), 2**65)
             | st.floats(allow_nan=False) | st.floats(-10.0, 1e-3) | st.text(max_size=70)
             | st.just("") | st.just("4X") | st.just("NDR") | st.just(1e400)
             | st.lists(st.integers(), max_size=2)
             | st.dictionaries(st.sampled_from(["symbol_errors", "link_downed", 3]),
                               st.integers(-2, 2**33) | st.booleans() | st.just(1.5),
                               max_size=2))
devices = (st.text(st.characters(min_codepoint=0x20, max_codepoint=0x2FF), min_size=0,
                   max_size=12)
           | st.just("node0042/mlx5_3") | st.just("a\x7f") | st.just("x" * 257)
           | st.just("é" * 129) | st.just("ok"))
field_names = st.sampled_from(sorted(PortSample.model_fields)
                              + ["pfc_pause_duration_us", "media", "_private", "split",
                                 "model_fields", "key", "vendor_counter"])


counts = st.none() | st.integers(0, 2**64 - 1)


@st.composite
def valid_messages(draw: st.DrawFn) -> dict[str, Any]:
    ports = []
    used = set()
    host = draw(st.booleans())
    for _ in range(draw(st.integers(0, 8))):
        port = draw(st.integers(0, 255))
        hca = draw(st.sampled_from(["node1/mlx5_0", "node1/mlx5_1"])) if host else None
        if (hca, port) in used:
            continue
        used.add((hca, port))
        sample: dict[str, Any] = {"port": port}
        for name in draw(st.lists(st.sampled_from(
                ["symbol_errors", "link_downed", "xmit_wait", "port_xmit_data", "phy_link_down",
                 "fec_corrected", "rcv_errors"]), max_size=7, unique=True)):
            sample[name] = draw(counts)
        if draw(st.booleans()):
            sample["raw_ber"] = draw(st.floats(0, 1) | st.integers(0, 5))
            sample["module_temp_c"] = draw(st.floats(-40, 120) | st.integers(-40, 120))
            sample["width"], sample["speed"] = "4X", "NDR"
        if draw(st.booleans()):
            sample["counter_bits"] = {"symbol_errors": 16}
            sample["pfc_pause_duration_us"] = draw(st.integers(0, 10**9))
        if hca is not None:
            sample["device"] = hca
        if draw(st.integers(0, 9)) == 0:
            sample["error"] = "unreadable"
        ports.append(sample)
    return {"v": 1, "id": "m1", "ts": draw(st.integers(0, NOW_MS)), "fabric": "f",
            "source": draw(st.sampled_from(["perfquery", "sim", "host-agent"])),
            "kind": "counters", "device": "node1" if host else "leaf-01", "ports": ports}


@st.composite
def messages(draw: st.DrawFn) -> dict[str, Any]:
    """A valid message with a few things changed: each change may or may not break it."""
    obj = draw(valid_messages())
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(["envelope", "sample", "extra", "drop"]))
        if where == "envelope":
            name = draw(st.sampled_from(["v", "id", "ts", "fabric", "source", "device", "ports"]))
            obj[name] = draw(
                st.sampled_from([1, 2, True, 1.0, "1", "", "m" * 513, "x" * 257, "s" * 65,
                                 -1, NOW_MS + 10 * 86_400_000, 1.5e12, {}, [1], [{}],
                                 "2026-01-01T00:00:00Z", "perfquery", "sim"])
                | devices | any_value)
        elif where == "extra":
            obj[draw(st.sampled_from(["collector", "split", "_x", "seq", "model_fields"]))] = \
                draw(any_value)
        elif where == "drop":
            obj.pop(draw(st.sampled_from(["v", "id", "ts", "device", "ports", "source"])), None)
        elif isinstance(obj.get("ports"), list) and obj["ports"] \
                and isinstance(obj["ports"][0], dict):
            sample = obj["ports"][draw(st.integers(0, len(obj["ports"]) - 1))]
            if not isinstance(sample, dict):
                continue
            name = draw(field_names)
            if draw(st.integers(0, 9)) == 0:
                sample.pop(name, None)
            elif name == "device":
                sample[name] = draw(devices | st.none() | st.integers())
            elif name == "port":
                sample[name] = draw(st.integers(-3, 1100) | st.sampled_from([True, 3.0, "3"]))
            else:
                sample[name] = draw(any_value)
            if draw(st.integers(0, 5)) == 0:  # a repeated port (and maybe device)
                obj["ports"].append(dict(sample))
    return obj


@given(messages())
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_fast_path_and_model_agree(obj: dict[str, Any]) -> None:
    _same(obj)


@given(valid_messages())
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_valid_messages_take_the_fast_path(obj: dict[str, Any]) -> None:
    assert _same(obj) is not None  # and equal to the model's, checked in _same


@pytest.mark.parametrize("change, path", [
    ({"ports": [{"port": 1, "symbol_errors": -1}]}, "ports.0.symbol_errors"),
    ({"ports": [{"port": 1, "link_downed": True}]}, "ports.0.link_downed"),
    ({"ports": [{"port": 300}]}, "ports.0.port"),
    ({"ports": [{"port": 1, "device": "a"}, {"port": 1, "device": "a"}]}, "ports.1"),
    ({"ports": [{"port": 1, "width": "w" * 65}]}, "ports.0.width"),
    ({"ports": [{"port": 1, "raw_ber": -1e-9}]}, "ports.0.raw_ber"),
    ({"device": "bad\ndevice"}, "device"),
    ({"ts": NOW_MS + 2 * 86_400_000}, "ts"),
])
def test_invalid_messages_get_the_models_reason(change: dict[str, Any], path: str) -> None:
    obj = {"v": 1, "id": "m", "ts": NOW_MS, "fabric": "f", "source": "perfquery",
           "kind": "counters", "device": "leaf", "ports": [{"port": 1}], **change}
    assert decode_counters(copy.deepcopy(obj)) is None
    with pytest.raises(ContractError) as caught:
        decode(orjson.dumps(obj))
    _, error = _model(obj)
    assert error is not None
    assert (caught.value.path, caught.value.reason) == (path, error.reason)
