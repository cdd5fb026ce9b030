"""ledger.columnar: the counters messages as columns hold exactly the row mapping's samples,
split into the same inserts, and the Arrow table carries them value for value."""

from __future__ import annotations

from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.base import sample_generations
from ledger.columnar import (
    COUNTER_SCHEMA,
    counter_columns,
    counter_table,
    counter_tables,
    generations,
    message_generations,
)
from ledger.rows import LEDGER_COUNTER_FIELDS, RAW_COUNTER_COLUMNS, counter_samples
from schemas import CounterColumns, Counters, PortSample

counts = st.one_of(st.none(), st.integers(0, (1 << 64) - 1))
gauges = st.one_of(st.none(), st.floats(0, 1e6, allow_nan=False))
texts = st.one_of(st.none(), st.sampled_from(["4X", "1X", "NDR", "HDR"]))


@st.composite
def samples(draw: st.DrawFn, own: bool = True) -> PortSample:
    data: dict[str, Any] = {"port": draw(st.integers(0, 4))}
    for name in LEDGER_COUNTER_FIELDS:
        data[name] = draw(counts)
    data["raw_ber"], data["effective_ber"] = draw(gauges), draw(gauges)
    data["module_temp_c"] = draw(st.one_of(st.none(), st.floats(-40, 120)))
    data["width"], data["speed"] = draw(texts), draw(texts)
    if own and draw(st.booleans()):
        data["device"] = draw(st.sampled_from(["node1/mlx5_0", "node1/mlx5_1"]))
    if draw(st.integers(0, 5)) == 0:
        data["error"] = "unreadable"
    extra = draw(st.sampled_from([None, "optic_serial", "cable_serial", "serial"]))
    if extra:
        data[extra] = draw(st.sampled_from(["", "MT123", 7]))
    return PortSample.model_validate(data)


@st.composite
def messages(draw: st.DrawFn, unique: bool = True, own: bool = True,
             devices: tuple[str, ...] = ("leaf1", "leaf2")) -> list[Counters]:
    out = []
    for i in range(draw(st.integers(0, 5))):
        # the contract refuses a port twice only among samples that name their own device
        ports = draw(st.lists(samples(own), max_size=5, unique_by=(
            (lambda s: (s.device, s.port)) if unique
            else (lambda s: (s.device, s.port) if s.device else id(s)))))
        out.append(Counters(id=f"m{i}", ts=1_700_000_000_000 + draw(st.integers(0, 3)) * 1000,
                            fabric=draw(st.sampled_from(["a", "b"])), source="sim",
                            device=draw(st.sampled_from(devices)), ports=ports))
    return out


def _rows(events: list[Counters]) -> list[tuple[Any, ...]]:
    return [(*head, port, *values, *rest)
            for event in events for head, port, values, rest in counter_samples(event)]


def _columns_as_rows(columns: dict[str, list[Any]], order: list[int] | None = None
                     ) -> list[tuple[Any, ...]]:
    n = len(columns["id"])
    rows = [tuple(columns[c][i] for c in RAW_COUNTER_COLUMNS) for i in range(n)]
    # the row path sends ts as epoch seconds, the columns as epoch ms
    rows = [(r[0], r[1] / 1000, *r[2:]) for r in rows]
    return rows if order is None else [rows[i] for i in order]


@settings(max_examples=200, deadline=None)
@given(messages())
def test_columns_hold_the_row_mappings_samples(events: list[Counters]) -> None:
    columns = counter_columns(events)
    assert list(columns) == list(RAW_COUNTER_COLUMNS)
    assert _columns_as_rows(columns) == _rows(events)


@settings(max_examples=200, deadline=None)
@given(messages(), st.lists(st.booleans(), min_size=5, max_size=5))
def test_counter_columns_messages_give_the_same_columns(events: list[Counters],
                                                        columnar: list[bool]) -> None:
    """Any mix of row and columnar messages: the columns of their rows."""
    mixed = [CounterColumns.of(e) if c else e for e, c in zip(events, columnar, strict=False)]
    assert counter_columns(mixed) == counter_columns(events)


@settings(max_examples=200, deadline=None)
@given(messages())
def test_generations_split_as_the_row_path_does(events: list[Counters]) -> None:
    columns = counter_columns(events)
    want = sample_generations(_rows(events))
    split = generations(columns)
    if split is None:  # one sample per port already: one insert of everything
        assert len(want) <= 1
        assert sorted(_columns_as_rows(columns), key=repr) == sorted(
            want[0] if want else [], key=repr)
    else:
        assert [sorted(_columns_as_rows(columns, g), key=repr) for g in split] == [
            sorted(g, key=repr) for g in want]


def _table_rows(table: pa.Table) -> list[tuple[Any, ...]]:
    columns = {name: (table.column(name).cast(pa.int64()) if name == "ts"
                      else table.column(name)).to_pylist() for name in RAW_COUNTER_COLUMNS}
    return _columns_as_rows(columns)


@settings(max_examples=300, deadline=None)
@given(st.one_of(messages(unique=False),
                 messages(unique=False, own=False, devices=tuple(f"leaf{i}" for i in range(9))),
                 messages(unique=True, own=False)),
       st.lists(st.booleans(), min_size=5, max_size=5))
def test_the_inserts_hold_every_sample_once_one_per_port_oldest_first(
        events: list[Counters], columnar: list[bool]) -> None:
    """Whatever the messages repeat (a poll twice, a port twice in one, a device in several
    with other ports, own devices, errors), split by the messages or by the samples: each
    insert holds a port once, a port's samples go in ts order, and together the inserts
    hold the row path's samples, a (port, ts) once."""
    mixed = [CounterColumns.of(e) if c else e for e, c in zip(events, columnar, strict=False)]
    tables = counter_tables(mixed)
    inserts = [_table_rows(t) for t in tables]
    assert all(rows for rows in inserts)
    key = slice(2, 6)  # fabric, source, device, port
    for rows in inserts:
        assert len({r[key] for r in rows}) == len(rows)
    last: dict[tuple[Any, ...], float] = {}
    for rows in inserts:
        for r in rows:
            assert r[1] > last.get(r[key], -1.0)
            last[r[key]] = r[1]
    want = [r for g in sample_generations(_rows(events)) for r in g]
    assert sorted((r for rows in inserts for r in rows), key=repr) == sorted(want, key=repr)


def test_a_batch_of_polls_splits_by_its_messages() -> None:
    def poll(device: str, ts: int, ports: list[int], own: str | None = None) -> Counters:
        return Counters(id=f"{device}-{ts}", ts=ts, fabric="f", source="sim", device=device,
                        ports=[PortSample(port=p, device=own) for p in ports])

    batch = [poll("leaf1", 3000, [1, 2]), poll("leaf2", 1000, [1]), poll("leaf1", 1000, [1, 2]),
             poll("leaf1", 2000, [1, 2]), poll("leaf1", 1000, [1, 2]), poll("leaf2", 2000, [1])]
    # leaf1 at 1000 twice: the same poll again, once; each device oldest first
    assert message_generations(batch) == [[2, 1], [3, 5], [0]]
    assert message_generations([CounterColumns.of(m) for m in batch]) == [[2, 1], [3, 5], [0]]
    assert message_generations([poll("leaf1", 1000, [1, 2]), poll("leaf2", 1000, [1])]) == [
        [0, 1]]
    # the samples decide: other ports in a device's messages, a port twice, own devices
    assert message_generations([poll("leaf1", 1000, [1]), poll("leaf1", 2000, [2])]) is None
    assert message_generations([poll("leaf1", 1000, [1, 1])]) is None
    assert message_generations([poll("node1", 1000, [1], own="node1/mlx5_0")]) is None
    assert message_generations(
        [CounterColumns.of(poll("node1", 1000, [1], own="node1/mlx5_0"))]) is None
    # a device's messages store other ports when a sample has an error: the samples decide,
    # and the good sample of a port is kept whichever message at that ts carries it
    broken = Counters(id="a", ts=1000, fabric="f", source="s1", device="leaf1",
                      ports=[PortSample(port=1, error="unreadable"), PortSample(port=2)])
    good = Counters(id="b", ts=1000, fabric="f", source="s2", device="leaf1",
                    ports=[PortSample(port=1, symbol_errors=4), PortSample(port=2)])
    for pair in ([broken, good], [CounterColumns.of(broken), CounterColumns.of(good)]):
        assert message_generations(pair) is None
        assert sorted((r[0], r[5]) for t in counter_tables(pair) for r in _table_rows(t)) == [
            ("a", 2), ("b", 1)]
    tables = counter_tables(batch)
    assert [t.column("id").to_pylist() for t in tables] == [
        ["leaf1-1000", "leaf1-1000", "leaf2-1000"], ["leaf1-2000", "leaf1-2000", "leaf2-2000"],
        ["leaf1-3000", "leaf1-3000"]]


@settings(max_examples=100, deadline=None)
@given(messages())
def test_the_arrow_table_carries_every_value(events: list[Counters]) -> None:
    columns = counter_columns(events)
    table = counter_table(columns)
    assert table.schema == COUNTER_SCHEMA
    for name in RAW_COUNTER_COLUMNS:
        column = table.column(name)
        got = (column.cast(pa.int64()) if name == "ts" else column).to_pylist()
        assert got == columns[name], name


def test_a_port_polled_twice_goes_in_twice_oldest_first() -> None:
    def poll(i: str, ts: int, value: int) -> Counters:
        return Counters(id=i, ts=ts, fabric="f", source="sim", device="leaf1",
                        ports=[PortSample(port=1, symbol_errors=value)])

    events = [poll("new", 2000, 5), poll("old", 1000, 3), poll("old", 1000, 3)]
    tables = counter_tables(events)
    assert [t.column("id").to_pylist() for t in tables] == [["old"], ["new"]]
    assert [t.column("symbol_errors").to_pylist() for t in tables] == [[3], [5]]
    assert counter_tables([]) == []
