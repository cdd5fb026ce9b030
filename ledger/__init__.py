"""The ClickHouse ledger: one interface, an embedded (chdb) and a server backend.

``open_ledger(settings)`` returns the embedded ledger in ``settings.ledger_path`` unless
``settings.clickhouse_url`` names a server, or another live process owns the embedded
ledger and advertises its HTTP endpoint in the state folder (chdb lets one process open a
data folder): then a ``ServerLedger`` over that endpoint (read-only unless the owner allows
writes). All implement ``Ledger``: ``write(events)``, ``query(sql, params)``,
``migrate()``, ``close()``. The owning process (``fabricwatch ledger serve``) serves the
endpoint through ``ledger.http.server_for(ledger, settings)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ledger.base import Ledger, LedgerBase, LedgerError
from ledger.rows import to_rows

if TYPE_CHECKING:  # the ledger imports only schemas at run time (ARCHITECTURE.md layout)
    from runtime.settings import Settings


def open_ledger(settings: Settings, *, migrate: bool = True) -> LedgerBase:
    """The ledger the settings select, migrated to the latest schema unless told not to
    (through another process's endpoint the owner has migrated it already)."""
    cfg = settings.ledger
    ledger: LedgerBase
    if not settings.clickhouse_url:
        from ledger.http import advertised_endpoint

        url = advertised_endpoint(settings.state_dir, other_process=True)
        if url is not None:
            from ledger.http import endpoint_client

            return endpoint_client(url, settings, retention_days=cfg.retention_days,
                                   raw_counter_retention_days=cfg.raw_counter_retention_days)
    if settings.clickhouse_url:
        from ledger.server import ServerLedger

        ledger = ServerLedger(settings.clickhouse_url, password=settings.clickhouse_password(),
                              retention_days=cfg.retention_days,
                              raw_counter_retention_days=cfg.raw_counter_retention_days,
                              create_database=True)
    else:
        from ledger.embedded import EmbeddedLedger

        ledger = EmbeddedLedger(settings.ledger_path, retention_days=cfg.retention_days,
                                raw_counter_retention_days=cfg.raw_counter_retention_days)
    if migrate:
        try:
            ledger.migrate()
        except BaseException:
            ledger.close()
            raise
    return ledger


__all__ = ["Ledger", "LedgerBase", "LedgerError", "open_ledger", "to_rows"]
