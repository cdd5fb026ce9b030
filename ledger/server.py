"""The server ledger: any ClickHouse server (or cluster) over clickhouse-connect's HTTP client.

Selected by one URL setting, ``clickhouse_url`` (``http[s]://user@host:port/db``); the
password comes from ``FABRICWATCH_SECRETS__CLICKHOUSE_PASSWORD`` or its ``_FILE`` (one in the
URL still works, but then it sits in the environment beside everything else).
Writes send the same JSONEachRow bytes the embedded backend inserts (``raw_insert``), and
counter samples the same Arrow tables (``insert_arrow``, ``ledger.columnar``), so both
backends share one row and column mapping. The embedded ledger's own HTTP endpoint
(``ledger.http``) is a server in this sense too: the CLI reaches a running worker's ledger
through this class.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote, urlsplit

import clickhouse_connect
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import ClickHouseError
from pydantic import SecretStr

from ledger.base import LedgerBase, LedgerError


def client_args(url: str, *, database: str | None, compress: bool,
                password: SecretStr | None = None) -> dict[str, Any]:
    """clickhouse-connect's arguments for ``url``; ``password`` wins over the URL's."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise LedgerError(f"clickhouse_url must be http(s)://host:port/database, got "
                          f"scheme {parts.scheme!r}")
    if password is not None:
        secret = password.get_secret_value()
    else:
        secret = unquote(parts.password) if parts.password else ""
    return {
        "host": parts.hostname,
        "port": parts.port or (8443 if parts.scheme == "https" else 8123),
        "username": unquote(parts.username) if parts.username else "default",
        "password": secret,
        "database": database or "__default__",
        "secure": parts.scheme == "https",
        "compress": compress,
        "autogenerate_session_id": False,
    }


def _client(url: str, *, database: str | None, compress: bool,
            password: SecretStr | None) -> Client:
    return clickhouse_connect.get_client(
        **client_args(url, database=database, compress=compress, password=password))


class ServerLedger(LedgerBase):
    """The ledger in a ClickHouse server reached at ``url``."""

    def __init__(self, url: str, *, retention_days: int = 400,
                 raw_counter_retention_days: int = 35, compress: bool = True,
                 create_database: bool = False, password: SecretStr | None = None) -> None:
        super().__init__(retention_days, raw_counter_retention_days)
        database = urlsplit(url).path.strip("/") or None
        try:
            if database and create_database:
                bootstrap = _client(url, database=None, compress=compress, password=password)
                bootstrap.command(f"CREATE DATABASE IF NOT EXISTS `{database}`")
                bootstrap.close()
            self.client = _client(url, database=database, compress=compress, password=password)
        except ClickHouseError as exc:
            raise LedgerError(f"cannot reach the ClickHouse ledger: {exc}") from None

    def execute(self, sql: str) -> None:
        try:
            self.client.command(sql)
        except ClickHouseError as exc:
            raise LedgerError(str(exc)) from None

    def query(self, sql: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        try:
            # tz_mode="aware": datetimes come back timezone-aware (UTC), as from the
            # embedded backend (clickhouse-connect's default makes UTC values naive).
            result = self.client.query(sql, parameters=params or None, tz_mode="aware")
        except ClickHouseError as exc:
            raise LedgerError(str(exc)) from None
        return list(result.named_results())

    def insert_encoded(self, table: str, payload: bytes, fmt: str = "JSONEachRow",
                       columns: Sequence[str] | None = None,
                       settings: dict[str, int] | None = None) -> None:
        try:
            self.client.raw_insert(table, column_names=columns, insert_block=payload, fmt=fmt,
                                   settings=settings)
        except ClickHouseError as exc:
            raise LedgerError(str(exc)) from None

    def insert_arrow(self, table: str, data: Any, settings: dict[str, int] | None = None
                     ) -> None:
        try:
            self.client.insert_arrow(table, data, settings=settings)
        except ClickHouseError as exc:
            raise LedgerError(str(exc)) from None

    def close(self) -> None:
        self.client.close()
