"""The ``Ledger`` interface and the write path both backends share.

A backend supplies four primitives: run a statement, run a query into dicts, insert
pre-encoded bytes (JSONEachRow, ...) into a table, and insert a pyarrow Table (the counter
samples, ``ledger.columnar``). Everything else (mapping events to rows and columns,
counter deltas, batching per table, migrations) lives here once.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections import defaultdict
from collections.abc import Sequence
from operator import itemgetter
from typing import Any, Protocol, runtime_checkable

import orjson

from ledger.columnar import counter_tables
from ledger.migrations import Migration, migration_variables, run_migrations
from ledger.rows import RAW_COUNTER_COLUMNS, Row, counter_samples, to_rows
from schemas import CounterColumns, Counters, CountersMessage, DeadLetter
from schemas.events import Event

# Tables in the order a batch is written.
# How far back a re-run runbook record is looked for (``_new_records``): two days.
RECORD_RERUN_WINDOW_S = 2 * 86_400

TABLE_ORDER = ("port_events", "probes", "topology_snapshots", "topology_links",
               "device_location", "detections", "actions", "evidence", "job_placements",
               "incidents", "maintenance_windows", "sm_events", "sm_sweeps", "dead_letters")


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
    # One orjson call for the whole list (JSONEachRow accepts a JSON array of objects): a
    # call per row costs several times more.
    return orjson.dumps(rows)


# A block holds one sample per port, so there is nothing for the insert to collapse:
# skipping the ReplacingMergeTree pass at insert time (optimize_on_insert) took about a
# third off the engine's CPU per counter batch. Merges and FINAL still deduplicate.
COUNTER_INSERT_SETTINGS = {"optimize_on_insert": 0}


def sample_generations(samples: list[tuple[Any, ...]]) -> list[list[tuple[Any, ...]]]:
    """Split flat counter rows so that each insert holds at most one sample per port.

    The delta view takes each sample's delta against the port's last *stored* sample, so a
    batch with several polls of a port goes in as several inserts, oldest first. The same
    sample twice in a batch (same port and time) is kept once. Row layout:
    RAW_COUNTER_COLUMNS (ts at 1, fabric 2, device 4, port 5).
    """
    generations: list[list[tuple[Any, ...]]] = []
    seen: dict[tuple[Any, Any, Any], tuple[int, Any]] = {}
    for row in sorted(samples, key=itemgetter(1)):
        key = (row[2], row[4], row[5])
        count, last_ts = seen.get(key, (0, None))
        if last_ts == row[1]:
            continue
        seen[key] = (count + 1, row[1])
        if count == len(generations):
            generations.append([])
        generations[count].append(row)
    return generations


class LedgerBase(ABC):
    """Shared write path and migrations over a backend's primitives."""

    def __init__(self, retention_days: int = 400, raw_counter_retention_days: int = 35) -> None:
        self.retention_days = retention_days
        self.raw_counter_retention_days = raw_counter_retention_days
        # One write at a time in this process: counter deltas are computed against the last
        # stored sample. Across processes, each device has one writer: its counters are
        # keyed by device, so one partition and one ingest consumer (ledger.ingest).
        self._write_lock = threading.Lock()
        # How counter samples go in: "arrow" (columns, ledger.columnar) or "rows" (the
        # JSONCompactEachRow path it replaced, kept to check the two write the same rows).
        self.counter_insert = "arrow"

    # -- backend primitives -------------------------------------------------------------
    @abstractmethod
    def execute(self, sql: str) -> None:
        """Run one statement that returns nothing."""

    @abstractmethod
    def query(self, sql: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Rows of a query as dicts; ``params`` fill ClickHouse ``{name:Type}`` slots."""

    @abstractmethod
    def insert_encoded(self, table: str, payload: bytes, fmt: str = "JSONEachRow",
                       columns: Sequence[str] | None = None,
                       settings: dict[str, int] | None = None) -> None:
        """Insert bytes in ClickHouse input format ``fmt`` into ``table`` (``columns``)."""

    @abstractmethod
    def insert_arrow(self, table: str, data: Any, settings: dict[str, int] | None = None
                     ) -> None:
        """Insert the pyarrow Table ``data`` (its columns by name) into ``table``."""

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
    def _new_records(self, rows: list[Row]) -> list[Row]:
        """The runbook records of a batch that are not stored yet, one per id, first kept.

        ``actions`` is a ReplacingMergeTree ordered by (fabric, device, port, ts, id): a
        record re-run with the same id but another ``ts`` would be a second row under FINAL.
        A runbook's record is a local activity, re-run when the workflow task that ran it is
        lost with its worker, and its retried task has a later ``workflow.now()``; so the
        id alone names the row. Looked up within ``RECORD_RERUN_WINDOW_S`` of the batch's
        oldest record (a re-run comes seconds to hours after the first; a bounded scan of
        a small table).
        """
        fresh: dict[str, Row] = {}
        for row in rows:
            fresh.setdefault(str(row["id"]), row)
        since = min(float(r["ts"]) for r in fresh.values()) - RECORD_RERUN_WINDOW_S
        stored = self.query(
            "SELECT DISTINCT id FROM actions WHERE id IN {ids:Array(String)} "
            "AND ts >= toDateTime64({since:Float64}, 3, 'UTC')",
            {"ids": list(fresh), "since": max(since, 0.0)})
        for row in stored:
            fresh.pop(str(row["id"]), None)
        return list(fresh.values())

    def write(self, events: Sequence[Event | DeadLetter]) -> int:
        """Map events to rows, add counter deltas, insert one batch per table.

        Idempotent on replay: event tables are ReplacingMergeTree keyed on the event id and
        read with FINAL (a runbook record whose id is stored already is not inserted again,
        whatever its ``ts``: ``_new_records``); a counter sample at or before a port's last
        stored sample never reaches the rollups, and one older than it is kept in
        ``counter_late`` (012). Returns the number of rows handed to the engine.
        """
        by_table: dict[str, list[Row]] = defaultdict(list)
        counters: list[CountersMessage] = []
        for event in events:
            if isinstance(event, Counters | CounterColumns):
                counters.append(event)
                continue
            for table, row in to_rows(event):
                by_table[table].append(row)
        with self._write_lock:
            written = 0
            if by_table.get("actions"):
                by_table["actions"] = self._new_records(by_table["actions"])
            for table in TABLE_ORDER:
                rows = by_table.get(table)
                if rows:
                    self.insert_encoded(table, encode_rows(rows))
                    written += len(rows)
            if counters:
                written += self._write_counters(counters)
            return written

    def _write_counters(self, counters: list[CountersMessage]) -> int:
        if self.counter_insert == "rows":
            return self._write_counter_rows(counters)
        written = 0
        for table in counter_tables(counters):
            self.insert_arrow("counter_ingest", table, COUNTER_INSERT_SETTINGS)
            written += table.num_rows
        return written

    def _write_counter_rows(self, counters: list[CountersMessage]) -> int:
        """The row path: flat tuples, one JSONCompactEachRow insert per generation."""
        samples: list[tuple[Any, ...]] = []
        for message in counters:
            event = message.rows() if isinstance(message, CounterColumns) else message
            samples.extend((*head, port, *values, *rest)
                           for head, port, values, rest in counter_samples(event))
        written = 0
        for generation in sample_generations(samples):
            # One orjson call for the batch; JSONCompactEachRow takes comma-separated
            # rows, so the array's outer brackets are dropped.
            self.insert_encoded("counter_ingest", orjson.dumps(generation)[1:-1],
                                "JSONCompactEachRow", RAW_COUNTER_COLUMNS,
                                COUNTER_INSERT_SETTINGS)
            written += len(generation)
        return written
