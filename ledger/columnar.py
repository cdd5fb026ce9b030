"""Counter samples as columns and Arrow tables: the counters insert path of both backends.

``counter_columns(events)`` is the one place counters messages become ledger columns (one
list per ``counter_ingest`` column, ``RAW_COUNTER_COLUMNS`` order): the same samples, values
and skips as the row mapping (``ledger.rows.counter_samples``), without a tuple or dict per
sample. ``counter_table`` turns them into a pyarrow Table of ``counter_ingest``'s types, and
``generations`` splits it as ``ledger.base.sample_generations`` splits rows (one sample per
port per insert, oldest first). The engine parses Arrow about eight times faster than the
JSONCompactEachRow the row path sends (a column is a buffer, not text per value); the
embedded ledger streams it as ArrowStream bytes, the server ledger through
clickhouse-connect's ``insert_arrow``.

Float32 gauges (``module_temp_c``, ``rx_power_dbm``) go as Float64 and the engine narrows
them, as it narrows the decimal text of the row path.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]

from ledger.rows import _SERIAL_KEYS, LEDGER_COUNTER_FIELDS, RAW_COUNTER_COLUMNS
from schemas import CounterColumns, CountersMessage

Columns = dict[str, list[Any]]
# what counter_columns took of each message: (its columns or None for rows, the ports kept
# or None for all, its sample count)
Taken = tuple[Columns | None, list[int] | None, int]

# The columns read from each PortSample as they are.
_SAMPLE_FIELDS: tuple[str, ...] = (
    "port", *LEDGER_COUNTER_FIELDS, "raw_ber", "effective_ber", "module_temp_c",
    "rx_power_dbm", "width", "speed")

_TS = pa.timestamp("ms", tz="UTC")
# counter_ingest's columns (sql/migrations 005, 012) as Arrow types.
COUNTER_SCHEMA = pa.schema([
    ("id", pa.string()), ("ts", _TS), ("fabric", pa.string()), ("source", pa.string()),
    ("device", pa.string()), ("port", pa.uint16()),
    *((name, pa.uint64()) for name in LEDGER_COUNTER_FIELDS),
    ("raw_ber", pa.float64()), ("effective_ber", pa.float64()),
    ("module_temp_c", pa.float64()), ("rx_power_dbm", pa.float64()),
    ("width", pa.string()), ("speed", pa.string()), ("optic_serial", pa.string()),
])
if tuple(COUNTER_SCHEMA.names) != RAW_COUNTER_COLUMNS:  # one column list, two spellings
    raise RuntimeError("COUNTER_SCHEMA is out of step with RAW_COUNTER_COLUMNS")


def _serial(extra: dict[str, Any] | None) -> str | None:
    if extra:
        for key in _SERIAL_KEYS:
            value = extra.get(key)
            if isinstance(value, str) and value:
                return value
    return None


def counter_columns(events: Iterable[CountersMessage]) -> Columns:
    """The port samples of ``events`` as ``counter_ingest`` columns; ``ts`` in epoch ms.

    The same samples as ``counter_samples`` (a port with ``error`` is skipped: its nulls
    would store as the port's last values and zero the next real delta; a host agent's
    sample names its own HCA in ``device``), in message order. A ``counter_columns``
    message's lists extend these as they are, with the same skips, and no object per
    sample is built. A row message's values are read from each
    sample's ``__dict__`` one column at a time: no tuple per sample, so nothing for the
    garbage collector to walk at 100k samples a batch."""
    ids: list[str] = []
    ts: list[int] = []
    fabrics: list[str] = []
    sources: list[str] = []
    devices: list[str] = []
    serials: list[str | None] = []
    fields: list[dict[str, Any]] = []
    # per message, in order: (None, None, its sample count) for rows; (its columns, the
    # ports kept or None for all, its port count) for columns
    taken: list[Taken] = []
    for event in events:
        if isinstance(event, CounterColumns):
            _columnar(event, ids, ts, fabrics, sources, devices, serials, taken)
            continue
        ports = event.ports
        if any(s.error is not None for s in ports):
            ports = [s for s in ports if s.error is None]
        n = len(ports)
        if not n:
            continue
        ids += [event.id] * n
        ts += [event.ts] * n
        fabrics += [event.fabric] * n
        sources += [event.source] * n
        sample_fields = [s.__dict__ for s in ports]
        own = [f["device"] for f in sample_fields]
        if any(own):
            devices += [d or event.device for d in own]
        else:
            devices += [event.device] * n
        extras = [s.__pydantic_extra__ for s in ports]
        if any(extras):
            serials += map(_serial, extras)
        else:
            serials += [None] * n
        fields += sample_fields
        taken.append((None, None, n))
    columns: Columns = {"id": ids, "ts": ts, "fabric": fabrics, "source": sources,
                        "device": devices}
    if not any(cols is not None for cols, _, _ in taken):  # rows only: one read per column
        for name in _SAMPLE_FIELDS:
            columns[name] = [f[name] for f in fields]
        columns["optic_serial"] = serials
        return columns
    for name in _SAMPLE_FIELDS:
        col: list[Any] = []
        at = 0
        for cols, keep, size in taken:
            if cols is None:  # a row message's ``size`` samples, in ``fields`` order
                col += [f[name] for f in fields[at:at + size]]
                at += size
                continue
            values = cols.get(name)
            if values is None:
                col += [None] * (size if keep is None else len(keep))
            elif keep is None:
                col += values
            else:
                col += [values[i] for i in keep]
        columns[name] = col
    columns["optic_serial"] = serials
    return columns


def _columnar(event: CounterColumns, ids: list[str], ts: list[int], fabrics: list[str],
              sources: list[str], devices: list[str], serials: list[str | None],
              taken: list[Taken]) -> None:
    """A ``counter_columns`` message's envelope columns, with ``counter_samples``' skips
    (a port with ``error``); its sample columns are read in ``counter_columns``."""
    cols = event.column_map()
    errors = cols.get("error")
    keep: list[int] | None = None
    n = event.port_count
    if errors is not None and errors.count(None) != n:
        keep = [i for i, e in enumerate(errors) if e is None]
        n = len(keep)
    if not n:
        return

    def pick(values: list[Any]) -> list[Any]:
        return values if keep is None else [values[i] for i in keep]

    ids += [event.id] * n
    ts += [event.ts] * n
    fabrics += [event.fabric] * n
    sources += [event.source] * n
    own = cols.get("device")
    if own is not None and own.count(None) != len(own):
        devices += [d or event.device for d in pick(own)]
    else:
        devices += [event.device] * n
    found = [pick(cols[k]) for k in _SERIAL_KEYS if k in cols]
    if found:
        serials += [next((v for v in vs if isinstance(v, str) and v), None)
                    for vs in zip(*found, strict=True)]
    else:
        serials += [None] * n
    taken.append((cols, keep, event.port_count))


def counter_table(columns: Columns) -> pa.Table:
    """``columns`` as a pyarrow Table in ``COUNTER_SCHEMA``."""
    return pa.Table.from_arrays(
        [pa.array(columns[field.name], field.type) for field in COUNTER_SCHEMA],
        schema=COUNTER_SCHEMA)


def generations(columns: Columns) -> list[list[int]] | None:
    """Row indices per insert, each with at most one sample per port, oldest first.

    ``ledger.base.sample_generations`` on columns: the same sample twice (same port and
    ts) is kept once. None when the batch already holds one sample per port (the usual
    case: one poll of each port), so it goes in whole."""
    keys = list(zip(columns["fabric"], columns["device"], columns["port"], strict=True))
    if len(set(keys)) == len(keys):
        return None
    ts = columns["ts"]
    out: list[list[int]] = []
    seen: dict[tuple[Any, Any, Any], tuple[int, int]] = {}
    for i in sorted(range(len(ts)), key=ts.__getitem__):
        key = keys[i]
        count, last_ts = seen.get(key, (0, -1))
        if last_ts == ts[i]:
            continue
        seen[key] = (count + 1, ts[i])
        if count == len(out):
            out.append([])
        out[count].append(i)
    return out


def message_generations(events: Sequence[CountersMessage]) -> list[list[int]] | None:
    """Message indices per insert, each insert with at most one sample per port, oldest first.

    ``generations`` decided from the messages instead of a key per sample: a batch of the
    ingest holds a few polls of each device (5,000 messages: three 64-port polls of 100k
    ports), and the per-sample split (keys, a sort of every sample, a ``take`` per insert)
    was 0.4-0.6 of the ingest's Python time (py-spy). A device's messages go in ts order,
    its n-th distinct ts in insert n; a message at a ts its device already has is the same
    poll again and goes nowhere (as ``generations`` keeps a port's first sample at a ts).
    None, for the per-sample split, when a sample names its own device (a host agent's HCA),
    a message names a port twice, or a device's messages do not store the same ports (a
    sample with ``error`` is not stored)."""
    by_device: dict[tuple[str, str], list[int]] = {}
    # the ports a device's messages store: a sample with ``error`` is not stored, so two
    # messages at one ts are the same poll only if the same ports survive in both
    ports_of: dict[tuple[str, str], list[int]] = {}
    for i, event in enumerate(events):
        if isinstance(event, CounterColumns):
            cols = event.column_map()
            own = cols.get("device")
            if own is not None and own.count(None) != len(own):
                return None
            ports: list[int] = cols["port"]
            errors = cols.get("error")
            if errors is not None and errors.count(None) != len(errors):
                ports = [p for p, e in zip(ports, errors, strict=True) if e is None]
        else:
            if any(s.device for s in event.ports):
                return None
            ports = [s.port for s in event.ports if s.error is None]
        key = (event.fabric, event.device)
        known = ports_of.get(key)
        if known is None:
            if len(set(ports)) != len(ports):
                return None
            ports_of[key] = ports
            by_device[key] = [i]
        elif known != ports:
            return None
        else:
            by_device[key].append(i)
    out: list[list[int]] = []
    for indices in by_device.values():
        if len(indices) > 1:
            indices.sort(key=lambda i: events[i].ts)  # stable: one ts keeps message order
        last: int | None = None
        n = 0
        for i in indices:
            if events[i].ts == last:
                continue
            last = events[i].ts
            if n == len(out):
                out.append([])
            out[n].append(i)
            n += 1
    return out


def counter_tables(events: Iterable[CountersMessage]) -> list[pa.Table]:
    """The Arrow tables to insert into ``counter_ingest`` for ``events``, in order."""
    events = list(events)
    split = message_generations(events)
    if split is not None:
        tables = []
        for indices in split:
            columns = counter_columns([events[i] for i in indices])
            if columns["id"]:
                tables.append(counter_table(columns))
        return tables
    columns = counter_columns(events)
    if not columns["id"]:
        return []
    table = counter_table(columns)
    rows = generations(columns)
    if rows is None:
        return [table]
    return [table.take(pa.array(r, pa.int64())) for r in rows]


def arrow_stream(table: pa.Table) -> bytes:
    """``table`` in Arrow's IPC stream format (ClickHouse input format ``ArrowStream``)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue())
