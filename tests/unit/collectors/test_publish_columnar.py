"""A publisher set to columnar sends counters as counter_columns: the same samples."""

from __future__ import annotations

import orjson

from collectors.publish import _wire
from schemas import CounterColumns, Counters, PortEvent, decode


def test_columnar_publisher_sends_the_same_samples_as_columns() -> None:
    counters = Counters.model_validate({
        "id": "c1", "ts": 1_700_000_000_000, "fabric": "f", "source": "perfquery",
        "device": "leaf-1", "ports": [
            {"port": 1, "symbol_errors": 3, "width": "4X"},
            {"port": 2, "symbol_errors": 0, "error": "timeout", "vendor_x": 5}]})
    topic, key, value = _wire(counters, columnar=True)
    assert (topic, key) == ("fabric.counters", b"leaf-1")
    wire = orjson.loads(value)
    assert wire["kind"] == "counter_columns"
    assert wire["columns"]["symbol_errors"] == [3, 0]
    assert "speed" not in wire["columns"]  # no sample reports it: off the wire
    sent = decode(value)
    assert isinstance(sent, CounterColumns)
    assert sent.rows().model_dump(exclude_none=True) == counters.model_dump(exclude_none=True)
    assert _wire(counters)[2] != value  # rows unless asked


def test_other_events_are_not_changed() -> None:
    event = PortEvent.model_validate({"id": "e", "ts": 1_700_000_000_000, "fabric": "f",
                                      "source": "opensm", "device": "leaf-1", "port": 3,
                                      "state": "down"})
    assert _wire(event, columnar=True) == _wire(event)
