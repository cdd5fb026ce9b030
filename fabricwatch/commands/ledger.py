"""``fabricwatch ledger``: migrate, query (cookbook or SQL), list tables, serve the endpoint,
ingest the topics into a server.

Which ledger: ``clickhouse_url`` when set; else, when a worker owns the embedded ledger and
advertises its HTTP endpoint in the state folder, that endpoint (chdb lets one process
open the data folder); else the embedded engine directly.
"""

from __future__ import annotations

import asyncio
import csv
import datetime as dt
import io
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click
import orjson

from ledger.base import LedgerBase, LedgerError
from ledger.queries import cookbook, params_for
from runtime.settings import Settings, load_settings
from schemas import ContractError


def _connect(settings: Settings, *, for_write: bool = False) -> tuple[LedgerBase, str]:
    from ledger.http import advertised_endpoint, endpoint_client
    from ledger.server import ServerLedger

    cfg = settings.ledger
    if settings.clickhouse_url:
        return ServerLedger(settings.clickhouse_url, password=settings.clickhouse_password(),
                              retention_days=cfg.retention_days,
                            raw_counter_retention_days=cfg.raw_counter_retention_days,
                            create_database=for_write), "server"
    url = advertised_endpoint(settings.state_dir)
    if url is not None:
        return endpoint_client(url, settings, retention_days=cfg.retention_days,
                               raw_counter_retention_days=cfg.raw_counter_retention_days
                               ), f"endpoint {url}"
    from ledger.embedded import EmbeddedLedger

    fresh = not settings.ledger_path.exists()
    ledger = EmbeddedLedger(settings.ledger_path, retention_days=cfg.retention_days,
                            raw_counter_retention_days=cfg.raw_counter_retention_days)
    if fresh and not for_write:
        # The embedded default behaves like a server that has just been installed: a new
        # state folder gets an empty, migrated ledger, so a report or query says "nothing yet"
        # instead of failing. (A server that cannot be reached stays an error, above.)
        try:
            ledger.migrate()
        except BaseException:
            ledger.close()
            raise
        click.echo(f"note: no ledger at {settings.ledger_path} yet; created an empty one", err=True)
    return ledger, "embedded"


@contextmanager
def _opened(settings: Settings, *, for_write: bool = False) -> Iterator[tuple[LedgerBase, str]]:
    try:
        ledger, where = _connect(settings, for_write=for_write)
    except LedgerError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        yield ledger, where
    finally:
        ledger.close()


def _parse_params(pairs: tuple[str, ...]) -> dict[str, object]:
    out: dict[str, object] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.isidentifier():
            raise click.BadParameter(f"{pair!r} is not NAME=VALUE", param_hint="--param")
        out[name] = value
    return out


def _coerce(values: dict[str, object], types: dict[str, str]) -> dict[str, object]:
    """--param text for DateTime parameters as RFC 3339 / ISO 8601 (naive = UTC) or epoch
    milliseconds; the engine's own parser takes neither a 'T' with 'Z' nor epoch ms."""
    out = dict(values)
    for name, value in values.items():
        if not isinstance(value, str) or not types.get(name, "").startswith("DateTime"):
            continue
        try:
            if value.isdigit():
                out[name] = dt.datetime.fromtimestamp(int(value) / 1000, dt.UTC)
            else:
                parsed = dt.datetime.fromisoformat(value)
                out[name] = parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
        except ValueError:
            raise click.BadParameter(f"{name}={value!r} is not a time (ISO 8601 or epoch ms)",
                                     param_hint="--param") from None
    return out


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dt.datetime):
        return value.isoformat(timespec="milliseconds")
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def render(rows: list[dict[str, Any]], fmt: str) -> str:
    """Rows as a table, JSON (array of objects) or CSV with a header."""
    if fmt == "json":
        return orjson.dumps(rows, default=str, option=orjson.OPT_INDENT_2).decode()
    columns = list(rows[0]) if rows else []
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf)
        writer.writerow(columns)
        for row in rows:
            writer.writerow([_cell(row[c]) for c in columns])
        return buf.getvalue().rstrip("\n")
    if not rows:
        return "(no rows)"
    from rich.console import Console
    from rich.table import Table

    table = Table(show_lines=False)
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*[_cell(row[c]) for c in columns])
    console = Console(file=io.StringIO(), width=200, no_color=True)
    console.print(table)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    return str(out).rstrip("\n")


@click.group("ledger")
def ledger_group() -> None:
    """The ClickHouse ledger: schema, analyst queries, the HTTP endpoint."""


@ledger_group.command("migrate")
def migrate_command() -> None:
    """Apply pending schema migrations (sql/migrations)."""
    settings = load_settings()
    with _opened(settings, for_write=True) as (ledger, where):
        if where.startswith("endpoint"):
            # The owning worker migrates when it opens the ledger; report where it stands.
            from ledger.migrations import load_migrations

            latest = load_migrations()[-1].version
            rows = ledger.query("SELECT max(version) AS v FROM schema_migrations")
            current = int(rows[0]["v"]) if rows else 0
            click.echo(f"the ledger is owned by a running worker ({where}); it migrates on "
                       f"start. Schema version {current}, latest {latest}.")
            if current < latest:
                raise SystemExit(1)
            return
        try:
            applied = ledger.migrate()
        except LedgerError as exc:
            raise click.ClickException(f"migrate via {where} failed: {exc}") from None
    click.echo(f"migrated ({where}): applied {applied or 'nothing, already current'}")


@ledger_group.command("query")
@click.argument("name_or_sql")
@click.option("--param", "-p", "params", multiple=True, metavar="NAME=VALUE",
              help="A query parameter ({name:Type} in the SQL). Repeatable.")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]),
              default="table", show_default=True)
def query_command(name_or_sql: str, params: tuple[str, ...], fmt: str) -> None:
    """Run a cookbook query by name (see `ledger queries`), a .sql file, or SQL text."""
    settings = load_settings()
    given = _parse_params(params)
    book = cookbook()
    if name_or_sql in book:
        query = book[name_or_sql]
        try:
            values = params_for(query, _coerce(given, query.params), settings.fabric)
        except KeyError as exc:
            raise click.UsageError(f"{name_or_sql} needs --param for: {exc.args[0]}") from None
        unknown = set(given) - set(query.params)
        if unknown:
            raise click.UsageError(f"{name_or_sql} takes no parameter {sorted(unknown)}; "
                                   f"it takes {sorted(query.params)}")
        sql = query.sql
    else:
        path = Path(name_or_sql)
        if name_or_sql.endswith(".sql") and path.is_file():
            sql = path.read_text()
        elif " " not in name_or_sql.strip():
            raise click.UsageError(f"no cookbook query named {name_or_sql!r}; known: "
                                   f"{', '.join(book)}")
        else:
            sql = name_or_sql
        values = given
    with _opened(settings) as (ledger, _where):
        try:
            rows = ledger.query(sql, values or None)
        except LedgerError as exc:
            raise click.UsageError(f"query failed: {exc}") from None
    click.echo(render(rows, fmt))


@ledger_group.command("queries")
def queries_command() -> None:
    """List the cookbook: each query's name, parameters and what it answers."""
    for name, query in cookbook().items():
        params = ", ".join(f"{k}:{v}" for k, v in query.params.items())
        click.echo(f"{name}  ({params})\n    {query.description}\n")


@ledger_group.command("tables")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]),
              default="table", show_default=True)
def tables_command(fmt: str) -> None:
    """The ledger's tables and views with their engines, rows and size."""
    settings = load_settings()
    with _opened(settings) as (ledger, _where):
        rows = ledger.query(
            "SELECT name, engine, total_rows AS rows, "
            "formatReadableSize(total_bytes) AS size FROM system.tables "
            "WHERE database = currentDatabase() AND NOT is_temporary ORDER BY name")
    click.echo(render(rows, fmt))


@ledger_group.command("serve")
@click.option("--port", type=int, default=None, help="Default: settings ledger.http_port.")
@click.option("--ingest/--no-ingest", default=False, show_default=True,
              help="Also consume every contract topic into the ledger (consumer group "
                   "fabricwatch-ledger): the one writer of an embedded ledger.")
def serve_command(port: int | None, ingest: bool) -> None:
    """Own the embedded ledger and serve its ClickHouse HTTP endpoint until interrupted."""
    from ledger.embedded import EmbeddedLedger
    from ledger.http import server_for

    settings = load_settings()
    cfg = settings.ledger
    try:
        ledger = EmbeddedLedger(settings.ledger_path, retention_days=cfg.retention_days,
                                raw_counter_retention_days=cfg.raw_counter_retention_days)
    except LedgerError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        ledger.migrate()
        try:
            server = server_for(ledger, settings, port=port)
        except ValueError as exc:  # a bind address other than loopback without users
            click.echo(f"error: {exc}", err=True)
            raise SystemExit(2) from None
        url = server.start(settings.state_dir)
        click.echo(f"ledger {settings.ledger_path} served on {url} "
                   f"({'read-write' if cfg.allow_writes_over_http else 'read-only'})"
                   + (f"; ingesting from {settings.kafka.bootstrap_servers}" if ingest else ""))
        try:
            if ingest:
                asyncio.run(_ingest(ledger, settings.kafka.bootstrap_servers, settings))
            else:
                stop = threading.Event()
                signal.signal(signal.SIGTERM, lambda *_: stop.set())
                while not stop.wait(1.0):
                    pass
        except KeyboardInterrupt:
            pass
        server.stop()
    finally:
        ledger.close()


@ledger_group.command("ingest")
@click.option("--group", default="fabricwatch-ledger", show_default=True,
              help="Consumer group: run several processes in it to share the partitions.")
def ingest_command(group: str) -> None:
    """Consume every contract topic into a ClickHouse server (FABRICWATCH_CLICKHOUSE_URL).

    The same consumer as the embedded owner's (`ledger serve --ingest`): batches, written
    idempotently, offsets committed after the write. Several processes in one group share the
    partitions; a device's counters stay on one partition, so one writer computes its deltas.
    """
    from ledger import open_ledger

    settings = load_settings()
    if not settings.clickhouse_url:
        click.echo("error: ledger ingest writes to a ClickHouse server: set "
                   "FABRICWATCH_CLICKHOUSE_URL (the embedded ledger's one writer is "
                   "`fabricwatch ledger serve --ingest`)", err=True)
        raise SystemExit(2)
    try:
        ledger = open_ledger(settings)
    except LedgerError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        where = urlsplit(settings.clickhouse_url)  # host and database only: no credentials
        click.echo(f"ingesting from {settings.kafka.bootstrap_servers} into "
                   f"{where.hostname}:{where.port or 8123}{where.path} (group {group})")
        asyncio.run(_ingest(ledger, settings.kafka.bootstrap_servers, settings, group=group))
    except KeyboardInterrupt:
        pass
    finally:
        ledger.close()


async def _ingest(ledger: LedgerBase, bootstrap: str, settings: Settings, *,
                  group: str = "fabricwatch-ledger") -> None:
    from ledger.ingest import LedgerIngest
    from schemas.acceptance import TimeBounds
    from schemas.policy import Policy

    # the worker's policy decides what a topic accepts, so the ledger takes exactly that
    try:
        bounds = TimeBounds.from_policy(Policy.load(settings.policy_path))
    except ContractError as exc:
        raise click.ClickException(f"policy {settings.policy_path}: {exc}") from None
    from runtime import collector

    collector.tune(settings.gc_young_threshold)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    stats = await LedgerIngest(ledger, bootstrap, group_id=group, bounds=bounds,
                               lateness_s=settings.ledger.counter_lateness_s).run(stop)
    click.echo(f"ingested {stats.messages:,} messages ({stats.rows:,} rows, "
               f"{stats.skipped:,} skipped)")


COMMANDS: list[click.Command] = [ledger_group]
