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
from hypothesis import strategies as st

from schemas import (
    ContractError,
    CounterColumns,
    Counters,
    PortSample,
    columns_wire,
    decode_obj,
)
from schemas.events import SampleColumns

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


@given(st.lists(st.tuples(st.integers(0, 64), st.none() | st.integers(0, 9),
                          st.none() | st.floats(0, 1), st.none() | st.integers(0, 5),
                          st.none() | st.text(max_size=4)), min_size=1, max_size=8),
       st.booleans())
@settings(max_examples=200, deadline=None)
def test_samples_with_unknown_columns_are_what_model_construct_makes(
        rows: list[tuple[int, int | None, float | None, int | None, str | None]],
        named: bool) -> None:
    # the samples of a message with columns the contract does not know (a host agent's
    # vendor counters) are built without model_construct: the same values, fields set
    # and extras, an unknown column's null left out
    cols: dict[str, list[Any]] = {
        "port": [r[0] for r in rows], "symbol_errors": [r[1] for r in rows],
        "raw_ber": [r[2] for r in rows], "vendor_pause_x": [r[3] for r in rows],
        "vendor_note": [r[4] for r in rows]}
    if named:
        cols["device"] = [f"h/mlx5_{i}" for i in range(len(rows))]
    msg = CounterColumns.model_construct(
        id="m", ts=1, fabric="f", source="host-agent", device="h",
        columns=SampleColumns.model_construct(**cols))
    names = list(msg.column_map())
    want = [PortSample.model_construct(**{n: v for n, v in zip(names, values, strict=True)
                                          if v is not None or n in PortSample.model_fields})
            for values in zip(*msg.column_map().values(), strict=True)]
    got = msg.samples()
    assert [(s.__dict__, s.__pydantic_fields_set__, s.__pydantic_extra__) for s in got] == [
        (s.__dict__, s.__pydantic_fields_set__, s.__pydantic_extra__) for s in want]
    at = [0, len(rows) - 1]
    assert [s.__dict__ for s in msg.samples(at)] == [want[i].__dict__ for i in at]


_NAME = st.one_of(st.none(), st.text(max_size=70), st.sampled_from(
    ["node01/mlx5_0", "", "x" * 65, "é" * 64, "leaf\x07", "a\x85b", "b" * 300]))


@given(st.lists(_NAME, max_size=9))
@settings(max_examples=400, deadline=None)
def test_the_device_column_is_checked_as_name_by_name(names: list[str | None]) -> None:
    """The one-scan check of the device column accepts and refuses as ``check_device`` of
    each name in turn did, with that name's reason."""
    from schemas.events import check_device

    def one_by_one() -> Any:
        try:
            return [None if d is None else check_device(d) for d in names]
        except ValueError as exc:
            return str(exc)

    def now() -> Any:
        try:
            return SampleColumns._device(names)  # type: ignore[operator]
        except ValueError as exc:
            return str(exc)

    assert now() == one_by_one()


_COLUMN = st.one_of(st.lists(st.integers(0, 9), max_size=4), st.integers(), st.text(max_size=3),
                    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2))


@given(st.integers(1, 3), st.dictionaries(st.sampled_from(["vendor_a", "vendor_b", "zz"]),
                                          _COLUMN, max_size=3))
@settings(max_examples=300, deadline=None)
def test_the_first_column_of_the_wrong_shape_is_the_one_refused(
        n: int, unknown: dict[str, Any]) -> None:
    """Unknown columns of any shape: refused exactly when one is not a list of as many
    values as ports, naming the first such column in the message's order."""
    columns: dict[str, Any] = {"port": list(range(1, n + 1)), "symbol_errors": [0] * n,
                               **unknown}
    msg = {"v": 1, "id": "c1", "ts": 1_700_000_000_000, "fabric": "lab", "source": "gnmi",
           "kind": "counter_columns", "device": "leaf1", "columns": columns}
    want = None
    for name, col in columns.items():
        if not isinstance(col, list):
            want = (f"columns.{name}", f"columns.{name} must be a list, not "
                                       f"{type(col).__name__}")
            break
        if len(col) != n:
            want = (f"columns.{name}", f"columns.{name} has {len(col)} values for {n} ports")
            break
    got = _accepts(msg)
    if want is None:
        assert isinstance(got, CounterColumns)
    else:
        assert isinstance(got, ContractError) and (got.path, got.reason) == want
