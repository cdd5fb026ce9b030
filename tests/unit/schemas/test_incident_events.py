"""The incident and maintenance contract events: round trip, topic, key, and what they refuse."""

from __future__ import annotations

import time

import orjson
import pytest

from schemas import ContractError, decode, encode, message_key
from schemas.events import Incident, IncidentCause, Maintenance
from schemas.topics import topic_for_kind

NOW_MS = int(time.time() * 1000)


def incident(**over: object) -> dict[str, object]:
    base: dict[str, object] = {
        "v": 1, "kind": "incident", "id": "i1", "ts": NOW_MS, "fabric": "f1",
        "source": "fabricwatch", "incident": "inc/f1/spine-01/1", "cause": "switch_reboot",
        "root": "spine-01", "state": "open", "started": NOW_MS - 2000,
        "members": ["spine-01:1", "spine-01:2"], "su": None,
    }
    return {**base, **over}


def window(**over: object) -> dict[str, object]:
    base: dict[str, object] = {
        "v": 1, "kind": "maintenance", "id": "m1", "ts": NOW_MS, "fabric": "f1",
        "source": "fabricwatch", "window": "mw/1", "scope": "device", "target": "leaf-su01-r3",
        "start": NOW_MS, "end": NOW_MS + 7_200_000, "reason": "firmware upgrade",
        "actor": "alice",
    }
    return {**base, **over}


def test_incident_round_trips_on_its_topic_keyed_by_fabric() -> None:
    event = decode(orjson.dumps(incident()))
    assert isinstance(event, Incident)
    assert event.cause is IncidentCause.SWITCH_REBOOT
    assert decode(encode(event)) == event
    assert topic_for_kind("incident").name == "fabric.incidents"
    assert message_key(event) == "f1"


def test_maintenance_round_trips_on_its_topic_keyed_by_fabric() -> None:
    event = decode(orjson.dumps(window()))
    assert isinstance(event, Maintenance)
    assert decode(encode(event)) == event
    assert topic_for_kind("maintenance").name == "fabric.maintenance"
    assert message_key(event) == "f1"


@pytest.mark.parametrize(("message", "path"), [
    (incident(cause="cosmic_ray"), "cause"),
    (incident(state="closed"), "ended"),  # closed without saying when
    (incident(state="closed", ended=NOW_MS - 5000), "ended"),  # ended before it started
    (incident(root="spine\x00"), "root"),
    (window(end=NOW_MS), "end"),  # empty window
    (window(scope="rack"), "scope"),
    (window(reason="x" * 2000), "reason"),
])
def test_bad_incident_and_maintenance_messages_name_the_field(message: dict[str, object],
                                                              path: str) -> None:
    with pytest.raises(ContractError) as err:
        decode(orjson.dumps(message))
    assert err.value.path == path
