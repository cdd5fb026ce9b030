"""The ``{cluster}`` variant of the ledger DDL, generated from the same migrations.

On a ClickHouse cluster (ClickHouse Keeper, macros ``{cluster}``, ``{shard}``, ``{replica}``
on every node) each table becomes

- ``<name>_local``: the same columns, ``Replicated<Family>MergeTree`` with the Keeper path
  ``/clickhouse/tables/{shard}/{database}/<name>_local`` and ``{replica}``, created
  ``ON CLUSTER '{cluster}'``;
- ``<name>``: ``Distributed('{cluster}', currentDatabase(), <name>_local, <key>)``, so
  writers and the cookbook keep using the plain names.

Sharding keeps a device on one shard (``cityHash64(fabric, device)``), so the per-shard
materialized views see a port's whole history: counter deltas against ``counter_last_local``,
FINAL deduplication and the port rollups stay correct shard-locally. Materialized views are
created on every node and read / write the ``_local`` tables; plain views read the
Distributed names. Null-engine ingest tables stay Null per shard behind their Distributed.

``python -m ledger.cluster [--out deploy/clickhouse/cluster-ddl.sql]`` writes the file
(retention from the defaults of ``LedgerSettings`` unless given).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from ledger.migrations import load_migrations, migration_variables

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "deploy" / "clickhouse" / "cluster-ddl.sql"
ON_CLUSTER = "ON CLUSTER '{cluster}'"

_CREATE_TABLE = re.compile(r"^CREATE TABLE IF NOT EXISTS (\w+)", re.IGNORECASE)
_CREATE_MV = re.compile(r"^CREATE MATERIALIZED VIEW IF NOT EXISTS (\w+)", re.IGNORECASE)
_CREATE_VIEW = re.compile(r"^CREATE VIEW IF NOT EXISTS (\w+)", re.IGNORECASE)
_DROP_VIEW = re.compile(r"^DROP VIEW IF EXISTS (\w+)\s*$", re.IGNORECASE)
_ADD_COLUMN = re.compile(r"^ALTER TABLE (\w+) (ADD COLUMN IF NOT EXISTS .+)$",
                         re.IGNORECASE | re.DOTALL)
_ENGINE = re.compile(r"ENGINE\s*=\s*(\w*)MergeTree(?:\(([^)]*)\))?", re.IGNORECASE)
_NULL_ENGINE = re.compile(r"ENGINE\s*=\s*Null\b", re.IGNORECASE)
_COLUMNS = re.compile(r"^\s{4}(\w+)\s", re.MULTILINE)


def sharding_key(columns: set[str]) -> str:
    """Rows of one device together; else of one rail / fabric; else spread evenly."""
    if {"fabric", "device"} <= columns:
        return "cityHash64(fabric, device)"
    if {"fabric", "rail"} <= columns:
        return "cityHash64(fabric, rail)"
    if "fabric" in columns:
        return "cityHash64(fabric)"
    return "rand()"


def _localize(sql: str, tables: set[str]) -> str:
    """Point table references (after FROM / JOIN / TO / INTO / EXISTS) at ``_local``."""
    def repl(match: re.Match[str]) -> str:
        name = match.group(2)
        return f"{match.group(1)}{name}_local" if name in tables else match.group(0)

    return re.sub(r"(\b(?:FROM|JOIN|TO|INTO|EXISTS)\s+)(\w+)\b", repl, sql,
                  flags=re.IGNORECASE)


def table_names(statements: list[str]) -> set[str]:
    return {m.group(1) for s in statements if (m := _CREATE_TABLE.match(s))}


def cluster_statements(statements: list[str], tables: set[str] | None = None) -> list[str]:
    """The cluster DDL for single-node statements (as the migrations hold them).

    ``tables``: every table of the schema (a migration's views read earlier ones' tables).
    """
    tables = table_names(statements) | (tables or set())
    out: list[str] = []
    for sql in statements:
        if m := _CREATE_TABLE.match(sql):
            name = m.group(1)
            local = _localize(sql, tables).replace(
                f"IF NOT EXISTS {name}_local", f"IF NOT EXISTS {name}_local {ON_CLUSTER}", 1)
            engine = _ENGINE.search(local)
            if engine:
                family, args = engine.group(1), (engine.group(2) or "").strip()
                zk = f"'/clickhouse/tables/{{shard}}/{{database}}/{name}_local', '{{replica}}'"
                replicated = (f"ENGINE = Replicated{family}MergeTree({zk}"
                              f"{', ' + args if args else ''})")
                local = local[:engine.start()] + replicated + local[engine.end():]
            elif not _NULL_ENGINE.search(local):
                raise ValueError(f"{name}: no MergeTree or Null engine to distribute")
            columns = set(_COLUMNS.findall(sql))
            out.append(local)
            out.append(
                f"CREATE TABLE IF NOT EXISTS {name} {ON_CLUSTER} AS {name}_local\n"
                f"ENGINE = Distributed('{{cluster}}', currentDatabase(), {name}_local, "
                f"{sharding_key(columns)})")
        elif m := _CREATE_MV.match(sql):
            name = m.group(1)
            out.append(_localize(sql, tables).replace(
                f"IF NOT EXISTS {name}", f"IF NOT EXISTS {name} {ON_CLUSTER}", 1))
        elif m := _CREATE_VIEW.match(sql):
            name = m.group(1)
            out.append(sql.replace(f"IF NOT EXISTS {name}",
                                   f"IF NOT EXISTS {name} {ON_CLUSTER}", 1))
        elif m := _ADD_COLUMN.match(sql):  # the shards' tables, then the Distributed one
            name, change = m.group(1), m.group(2)
            out.append(f"ALTER TABLE {name}_local {ON_CLUSTER} {change}")
            out.append(f"ALTER TABLE {name} {ON_CLUSTER} {change}")
        elif m := _DROP_VIEW.match(sql):  # a view a later migration recreates
            out.append(f"DROP VIEW IF EXISTS {m.group(1)} {ON_CLUSTER} SYNC")
        else:
            raise ValueError(f"no cluster form for statement: {sql[:80]}")
    return out


def generate(retention_days: int = 400, raw_counter_retention_days: int = 35) -> str:
    """The whole cluster DDL file, migration by migration."""
    variables = migration_variables(retention_days, raw_counter_retention_days)
    parts = [
        "-- fabricwatch ledger DDL for a ClickHouse cluster. GENERATED by ledger/cluster.py",
        "-- from sql/migrations: edit the migrations, then `python -m ledger.cluster`.",
        "-- Needs Keeper and the macros {cluster}, {shard}, {replica} on every node.",
        f"-- Retention: {retention_days} days, raw counters {raw_counter_retention_days} days.",
        "",
    ]
    migrations = load_migrations()
    tables = table_names([s for m in migrations for s in m.statements(variables)])
    for migration in migrations:
        parts.append(f"-- migration {migration.version:03d}_{migration.name}")
        for statement in cluster_statements(migration.statements(variables), tables):
            parts.append(statement + ";\n")
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--retention-days", type=int, default=400)
    parser.add_argument("--raw-counter-retention-days", type=int, default=35)
    args = parser.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(generate(args.retention_days, args.raw_counter_retention_days))
    print(f"wrote {args.out}")  # noqa: T201 - a command-line tool's one line of output


if __name__ == "__main__":
    main()
