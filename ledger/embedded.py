"""The embedded ledger: the ClickHouse engine in-process (chdb), MergeTree on local disk.

One process owns a chdb data folder (the engine locks it) and, within a process, the engine
serves one folder at a time. Everything here runs under one lock, so the writer and the
HTTP endpoint's threads (``ledger.http``) can share the engine safely.
Writes use chdb's streaming insert (``send_insert``): JSONEachRow bytes for event rows,
Arrow IPC stream bytes (``ArrowStream``) for counter samples (``ledger.columnar``).
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chdb import session as _chdb_session

from ledger.base import LedgerBase, LedgerError
from ledger.columnar import arrow_stream

# chdb's Python layer is partly annotated; treat it as untyped in one place.
chdb_session: Any = _chdb_session


def param_text(value: Any) -> str:
    """A Python value as the text ClickHouse parses for a ``{name:Type}`` parameter."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            raise ValueError("naive datetime parameter: give a timezone-aware one")
        return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    if isinstance(value, list | tuple):
        return "[" + ",".join(_literal(v) for v in value) + "]"
    return str(value)


def _literal(value: Any) -> str:
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return param_text(value)


@dataclass(frozen=True)
class RawResult:
    body: bytes
    rows_read: int
    bytes_read: int
    elapsed: float

    def summary(self) -> dict[str, str]:
        """ClickHouse's X-ClickHouse-Summary fields (strings, as the server sends them)."""
        return {"read_rows": str(self.rows_read), "read_bytes": str(self.bytes_read),
                "written_rows": "0", "written_bytes": "0", "total_rows_to_read": "0",
                "result_rows": "0", "result_bytes": str(len(self.body)),
                "elapsed_ns": str(int(self.elapsed * 1e9))}


class EmbeddedLedger(LedgerBase):
    """The ledger in a chdb data folder at ``path``."""

    def __init__(self, path: Path, *, retention_days: int = 400,
                 raw_counter_retention_days: int = 35) -> None:
        super().__init__(retention_days, raw_counter_retention_days)
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.lock = threading.RLock()
        try:
            self._session: Any = chdb_session.Session(str(self.path))
        except RuntimeError as exc:
            raise LedgerError(
                f"cannot open the embedded ledger at {self.path}: {exc}. Another process "
                "probably owns it; use its HTTP endpoint (see `fabricwatch ledger`)."
            ) from None

    @property
    def session(self) -> Any:
        if self._session is None:
            raise LedgerError("the ledger is closed")
        return self._session

    def execute(self, sql: str) -> None:
        self.raw(sql, "CSV")

    def raw(self, sql: str, fmt: str, params: dict[str, Any] | None = None) -> bytes:
        """Run ``sql`` and return the engine's output in ClickHouse format ``fmt``."""
        return self.raw_result(sql, fmt, params).body

    def raw_result(self, sql: str, fmt: str, params: dict[str, Any] | None = None) -> RawResult:
        """Run ``sql``: the output in format ``fmt`` and the engine's statistics."""
        text_params = {k: param_text(v) for k, v in (params or {}).items()}
        with self.lock:
            try:
                result = self.session.query(sql, fmt, params=text_params or None)
            except Exception as exc:  # chdb raises RuntimeError or ChdbError
                raise LedgerError(str(exc)) from None
        if result is None:
            return RawResult(b"", 0, 0, 0.0)
        return RawResult(bytes(result.bytes()), int(result.rows_read()),
                         int(result.bytes_read()), float(result.elapsed()))

    def query(self, sql: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        text_params = {k: param_text(v) for k, v in (params or {}).items()}
        with self.lock:
            try:
                table = self.session.query(sql, "ArrowTable", params=text_params or None)
            except Exception as exc:
                raise LedgerError(str(exc)) from None
        if table is None or not hasattr(table, "to_pylist"):
            return []
        rows: list[dict[str, Any]] = table.to_pylist()
        return rows

    def insert_encoded(self, table: str, payload: bytes, fmt: str = "JSONEachRow",
                       columns: Sequence[str] | None = None,
                       settings: dict[str, int] | None = None) -> None:
        cols = f" ({', '.join(columns)})" if columns else ""
        clause = (" SETTINGS " + ", ".join(f"{k} = {int(v)}" for k, v in settings.items())
                  if settings else "")
        self.insert_format(f"INSERT INTO {table}{cols}{clause}", fmt, [payload])

    def insert_arrow(self, table: str, data: Any, settings: dict[str, int] | None = None
                     ) -> None:
        # IPC stream bytes through send_insert: chdb 4.4 has no in-process Arrow insert,
        # and serialising is a copy of the buffers (~10 ms per 100k samples), the engine's
        # parse a few tens of ms more, against ~0.5 s for the same rows as JSON.
        self.insert_encoded(table, arrow_stream(data), "ArrowStream", data.schema.names,
                            settings)

    def insert_format(self, statement: str, fmt: str, chunks: list[bytes]) -> int:
        """Stream ``chunks`` (data in ``fmt``) into ``statement`` (``INSERT INTO t (cols)``)."""
        with self.lock:
            try:
                with self.session.send_insert(statement, fmt) as inserter:
                    for chunk in chunks:
                        inserter.append(chunk)
                    result = inserter.finish()
            except Exception as exc:
                raise LedgerError(str(exc)) from None
        return int(result.rows_written)

    def close(self) -> None:
        with self.lock:
            if self._session is not None:
                self._session.close()
                self._session = None
