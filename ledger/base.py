"""The ``Ledger`` interface and the write path both backends share.

A backend supplies three primitives: run a statement, run a query into dicts, and insert
pre-encoded JSONEachRow bytes into a table. Everything else (mapping events to rows,
counter deltas, batching per table, migrations) lives here once.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import orjson

from ledger.migrations import Migration, migration_variables, run_migrations
from ledger.rows import CounterDeltas, Row, to_rows
from schemas import COUNTER_FIELDS, DeadLetter
from schemas.events import Event

# Tables in the order a batch is written: counter samples last, so that a failure on the
# small tables leaves the delta cache untouched.
TABLE_ORDER = ("port_events", "probes", "topology_snapshots", "topology_links",
               "device_location", "detections", "actions", "evidence", "dead_letters",
               "counter_samples")


# Column names come from the contract's constant tuple; the fabric is a bound parameter.
_LAST_SAMPLES_SQL = " ".join([
    "SELECT fabric, device, port, toFloat64(toUnixTimestamp64Milli(ts)) / 1000 AS ts,",
    ", ".join(COUNTER_FIELDS),
    "FROM counter_last FINAL WHERE fabric = {fabric:String}",
])


class LedgerError(RuntimeError):
    """A ledger operation failed (the engine's message is kept)."""


@runtime_checkable
class Ledger(Protocol):
    """What other areas use. Backends: EmbeddedLedger (chdb), ServerLedger (HTTP)."""

    def write(self, events: Sequence[Event | DeadLetter]) -> int: ...

    def query(self, sql: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]: ...

    def migrate(self) -> list[int]: ...

    def close(self) -> None: ...


def encode_rows(rows: Sequence[Row]) -> bytes:
    """JSONEachRow bytes: one orjson object per line."""
    dumps = orjson.dumps
    return b"\n".join([dumps(r) for r in rows]) + b"\n"


class LedgerBase(ABC):
    """Shared write path and migrations over a backend's primitives."""

    def __init__(self, retention_days: int = 400, raw_counter_retention_days: int = 35) -> None:
        self.retention_days = retention_days
        self.raw_counter_retention_days = raw_counter_retention_days
        self.deltas = CounterDeltas()
        # One writer at a time: the delta cache must see batches in order.
        self._write_lock = threading.Lock()

    # -- backend primitives -------------------------------------------------------------
    @abstractmethod
    def execute(self, sql: str) -> None:
        """Run one statement that returns nothing."""

    @abstractmethod
    def query(self, sql: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Rows of a query as dicts; ``params`` fill ClickHouse ``{name:Type}`` slots."""

    @abstractmethod
    def insert_encoded(self, table: str, payload: bytes) -> None:
        """Insert JSONEachRow bytes into ``table``."""

    @abstractmethod
    def close(self) -> None:
        """Release the engine or connection."""

    # -- migrations ---------------------------------------------------------------------
    def migrate(self, upto: int | None = None) -> list[int]:
        """Apply pending migrations; returns the versions applied by this call."""
        def applied() -> set[int]:
            rows = self.query("SELECT DISTINCT version FROM schema_migrations")
            return {int(r["version"]) for r in rows}

        def record(m: Migration) -> None:
            self.insert_encoded("schema_migrations", encode_rows(
                [{"version": m.version, "name": m.name, "checksum": m.checksum}]))

        variables = migration_variables(self.retention_days, self.raw_counter_retention_days)
        return run_migrations(self.execute, applied, record, variables, upto=upto)

    # -- writes -------------------------------------------------------------------------
    def write(self, events: Sequence[Event | DeadLetter]) -> int:
        """Map events to rows, add counter deltas, insert one batch per table.

        Idempotent on replay: event tables are ReplacingMergeTree keyed on the event id and
        read with FINAL; counter samples at or before a port's last written sample are
        dropped before they reach the rollups. Returns the number of rows inserted.
        """
        by_table: dict[str, list[Row]] = defaultdict(list)
        for event in events:
            for table, row in to_rows(event):
                by_table[table].append(row)
        with self._write_lock:
            written = 0
            counter_rows = by_table.pop("counter_samples", [])
            for table in TABLE_ORDER:
                rows = by_table.get(table)
                if rows:
                    self.insert_encoded(table, encode_rows(rows))
                    written += len(rows)
            if counter_rows:
                written += self._write_counters(counter_rows)
            return written

    def _write_counters(self, rows: list[Row]) -> int:
        fabrics = {r["fabric"] for r in rows}
        for fabric in fabrics - self.deltas.seeded:
            self.deltas.seed(fabric, self._last_samples(fabric))
        fresh = list(self.deltas.apply(rows))
        if not fresh:
            return 0
        try:
            self.insert_encoded("counter_samples", encode_rows(fresh))
        except BaseException:
            # The cache already moved past rows that may not be stored: reseed next time.
            for fabric in fabrics:
                self.deltas.forget(fabric)
            raise
        return len(fresh)

    def _last_samples(self, fabric: str) -> list[dict[str, Any]]:
        return self.query(_LAST_SAMPLES_SQL, {"fabric": fabric})
