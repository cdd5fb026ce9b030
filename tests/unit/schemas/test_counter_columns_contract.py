"""``counter_columns`` accepts exactly what ``counters`` accepts, and means the same.

Random counters messages, valid or with a few values broken (the fast-path tests'
generator), are turned into their columnar form (``columns_wire``): the columnar message
must be accepted exactly when the row message is, and then its rows must be the row
message's samples (up to unknown fields sent as null, which a column cannot tell from not
sent). A refused one names the column and the port's index.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from schemas import ContractError, CounterColumns, Counters, columns_wire, decode_obj

from .test_fast_counters import messages


def _accepts(obj: dict[str, Any]) -> Any:
    try:
        return decode_obj(copy.deepcopy(obj))
    except ContractError as exc:
        return exc


def _comparable(msg: Counters) -> dict[str, Any]:
    return msg.model_dump(mode="json", exclude_none=True)


@given(messages())
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_columns_accept_what_rows_accept(obj: dict[str, Any]) -> None:
    ports = obj.get("ports")
    if (obj.get("kind") != "counters" or not isinstance(ports, list)
            or not all(isinstance(p, dict) for p in ports)):
        return
    rows = _accepts(obj)
    columns = _accepts(columns_wire(obj))
    if isinstance(rows, ContractError):
        assert isinstance(columns, ContractError), f"columns accepted what rows refuse: {rows}"
        return
    assert not isinstance(columns, ContractError), f"columns refused: {columns}"
    assert isinstance(columns, CounterColumns)
    assert _comparable(columns.rows()) == _comparable(rows)
    assert [_comparable(p.rows()) for p in columns.split()] == [
        _comparable(p) for p in rows.split()]


@pytest.mark.parametrize(("change", "path"), [
    (lambda c: c["symbol_errors"].__setitem__(1, -1), "columns.symbol_errors.1"),
    (lambda c: c["width"].__setitem__(0, 4), "columns.width.0"),
    (lambda c: c["symbol_errors"].pop(), "columns.symbol_errors"),
    (lambda c: c.__setitem__("vendor", 7), "columns.vendor"),
    (lambda c: c["port"].__setitem__(1, 300), "columns.port.1"),
    (lambda c: c.pop("port"), "columns.port"),
])
def test_a_bad_column_is_named(change: Any, path: str) -> None:
    obj = {"v": 1, "id": "m", "ts": 1_700_000_000_000, "fabric": "f", "source": "perfquery",
           "kind": "counter_columns", "device": "leaf-1",
           "columns": {"port": [1, 2], "symbol_errors": [0, 5], "width": ["4X", None]}}
    change(obj["columns"])
    with pytest.raises(ContractError) as err:
        decode_obj(obj)
    assert err.value.path == path
