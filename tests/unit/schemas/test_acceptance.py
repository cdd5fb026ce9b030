"""What a topic accepts (schemas.acceptance): the kind rule and the time bounds."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas import ActionRecord, ContractError, Detection, PortEvent, encode
from schemas.acceptance import DEFAULT_BOUNDS, TimeBounds, accept
from schemas.policy import Policy
from schemas.topics import ACTIONS, ALL_TOPICS, DETECTIONS, PORT_EVENTS, topic_for_kind

NOW = 1_795_971_600_000
DAY = 86_400_000


def _up(ts: int) -> PortEvent:
    return PortEvent(id=f"e{ts}", ts=ts, fabric="f", source="opensm", device="leaf-su01-r1",
                     port=3, state="up")


def _forged() -> list[bytes]:
    det = Detection(id="d1", ts=NOW, fabric="f", source="x", device="leaf-su01-r1", port=3,
                    detection="flap", severity="critical", action="isolate_port",
                    episode="e1")
    act = ActionRecord(id="a1", ts=NOW, fabric="f", source="x", device="leaf-su01-r1", port=3,
                       workflow_id="w", step="isolate", actor="attacker", outcome="done")
    return [encode(det), encode(act)]


def test_a_kind_on_the_wrong_topic_is_refused_with_its_reason() -> None:
    for raw in _forged():
        with pytest.raises(ContractError, match="does not belong on topic fabric.port-events") as e:
            accept(PORT_EVENTS, raw, received_ms=NOW)
        assert e.value.path == "kind"
    assert accept(DETECTIONS, _forged()[0], received_ms=NOW).kind == "detection"
    assert accept(ACTIONS, _forged()[1], received_ms=NOW).kind == "action"


def test_every_kind_is_accepted_on_its_own_topic_only() -> None:
    raw = encode(_up(NOW))
    for topic in ALL_TOPICS:
        if topic is topic_for_kind("port_event"):
            assert accept(topic, raw, received_ms=NOW).ts == NOW
        else:
            with pytest.raises(ContractError):
                accept(topic, raw, received_ms=NOW)


@pytest.mark.parametrize(("offset", "ok"), [
    (0, True), (300_000, True), (300_001, False), (23 * 3600_000, False),
    (-30 * DAY, True), (-30 * DAY - 1, False), (-NOW, False),  # ts=0
])
def test_event_time_is_bounded_by_the_broker_receive_time(offset: int, ok: bool) -> None:
    raw = encode(_up(NOW + offset))
    if ok:
        assert accept(PORT_EVENTS, raw, received_ms=NOW).ts == NOW + offset
    else:
        with pytest.raises(ContractError) as e:
            accept(PORT_EVENTS, raw, received_ms=NOW)
        assert e.value.path == "ts"
        assert ("ahead" if offset > 0 else "before") in e.value.reason


def test_without_a_receive_time_only_the_kind_is_checked() -> None:
    assert accept(PORT_EVENTS, encode(_up(1)), received_ms=None).ts == 1


def test_the_bounds_come_from_the_policy() -> None:
    policy = Policy.from_yaml("fabricHealth: {stream: {maxClockSkew: 10s, maxEventAge: 1h}}")
    bounds = TimeBounds.from_policy(policy)
    assert bounds == TimeBounds(10_000, 3_600_000)
    with pytest.raises(ContractError, match="ahead"):
        accept(PORT_EVENTS, encode(_up(NOW + 10_001)), received_ms=NOW, bounds=bounds)
    assert DEFAULT_BOUNDS == TimeBounds(300_000, 30 * DAY)


@given(ts=st.integers(min_value=0, max_value=NOW + DAY), received=st.integers(1, NOW + DAY))
def test_accepted_means_within_the_window(ts: int, received: int) -> None:
    raw = encode(_up(ts))
    inside = received - DEFAULT_BOUNDS.max_age_ms <= ts <= received + DEFAULT_BOUNDS.max_ahead_ms
    try:
        accept(PORT_EVENTS, raw, received_ms=received)
    except ContractError as exc:
        assert not inside and exc.path == "ts"
    else:
        assert inside


@pytest.mark.parametrize(("field", "limit"), [("reason", 1024), ("phys_state", 64)])
def test_free_text_is_bounded(field: str, limit: int) -> None:
    ok = _up(NOW).model_copy(update={field: "x" * limit})
    assert accept(PORT_EVENTS, encode(ok), received_ms=NOW)
    wire = orjson.loads(encode(_up(NOW)))
    wire[field] = "x" * (8 * 1024 * 1024 if field == "reason" else limit + 1)
    with pytest.raises(ContractError) as e:
        accept(PORT_EVENTS, orjson.dumps(wire), received_ms=NOW)
    assert e.value.path == field
