"""Numbered SQL migrations from ``sql/migrations``: loading, templating, splitting, running.

A migration is ``NNN_name.sql``: ClickHouse statements separated by ``;`` at the end of a
line, every one idempotent (``IF NOT EXISTS``), so re-running a file is harmless. Settings
reach the DDL as ``${name}`` placeholders (``string.Template``; ``{...}`` is left alone for
ClickHouse's own ``{param:Type}`` and ``{cluster}`` macros). ``schema_migrations`` records
what ran, with each file's checksum.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from string import Template

SQL_DIR = Path(__file__).resolve().parent.parent / "sql"
MIGRATIONS_DIR = SQL_DIR / "migrations"
QUERIES_DIR = SQL_DIR / "queries"
_NAME = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    text: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()[:16]

    def statements(self, variables: Mapping[str, object]) -> list[str]:
        return split_statements(render(self.text, variables))


def load_migrations(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    """Every migration file in version order; a malformed name or a gap is an error."""
    found: list[Migration] = []
    for path in sorted(directory.glob("*.sql")):
        match = _NAME.match(path.name)
        if match is None:
            raise ValueError(f"{path}: migration files are named NNN_name.sql")
        found.append(Migration(int(match.group(1)), match.group(2), path.read_text()))
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise ValueError(f"migration versions must run 1..N without gaps, got {versions}")
    return found


def render(text: str, variables: Mapping[str, object]) -> str:
    """Substitute ``${name}``; a missing variable is an error, not an empty string."""
    return Template(text).substitute({k: str(v) for k, v in variables.items()})


def strip_comments(sql: str) -> str:
    """Remove ``--`` line comments (outside string literals)."""
    out: list[str] = []
    for line in sql.splitlines():
        in_str = False
        cut = len(line)
        i = 0
        while i < len(line):
            ch = line[i]
            if ch == "\\" and in_str:
                i += 2
                continue
            if ch == "'":
                in_str = not in_str
            elif not in_str and line.startswith("--", i):
                cut = i
                break
            i += 1
        out.append(line[:cut].rstrip())
    return "\n".join(out)


def split_statements(sql: str) -> list[str]:
    """Statements of a migration file: split where a line ends in ``;``, comments dropped."""
    statements: list[str] = []
    current: list[str] = []
    for line in strip_comments(sql).splitlines():
        if not line.strip():
            continue
        if line.endswith(";"):
            current.append(line[:-1])
            statements.append("\n".join(current).strip())
            current = []
        else:
            current.append(line)
    tail = "\n".join(current).strip()
    if tail:
        statements.append(tail)
    return [s for s in statements if s]


def migration_variables(retention_days: int, raw_counter_retention_days: int) -> dict[str, int]:
    return {"retention_days": retention_days,
            "raw_counter_retention_days": raw_counter_retention_days}


def run_migrations(execute: Callable[[str], object],
                   applied: Callable[[], set[int]],
                   record: Callable[[Migration], object],
                   variables: Mapping[str, object],
                   migrations: list[Migration] | None = None,
                   upto: int | None = None) -> list[int]:
    """Apply migrations not yet recorded (all statements are idempotent, so a migration
    interrupted half-way is simply run again). Returns the versions applied now."""
    todo = migrations if migrations is not None else load_migrations()
    done_now: list[int] = []
    # 001 creates schema_migrations itself: run it first, always (it is IF NOT EXISTS).
    for statement in todo[0].statements(variables):
        execute(statement)
    already = applied()
    for migration in todo:
        if upto is not None and migration.version > upto:
            break
        if migration.version in already:
            continue
        for statement in migration.statements(variables):
            execute(statement)
        record(migration)
        done_now.append(migration.version)
    return done_now
