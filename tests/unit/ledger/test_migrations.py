"""Migration files: naming, templating, statement splitting."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledger.migrations import (
    load_migrations,
    migration_variables,
    render,
    split_statements,
    strip_comments,
)


def test_migrations_are_numbered_without_gaps_and_idempotent() -> None:
    migrations = load_migrations()
    assert [m.version for m in migrations] == list(range(1, len(migrations) + 1))
    variables = migration_variables(400, 35)
    for m in migrations:
        for statement in m.statements(variables):
            # idempotent: create if missing, drop if present (a view a migration recreates)
            assert ("IF NOT EXISTS" in statement or statement.startswith("DROP VIEW IF EXISTS")
                    ), f"{m.name}: {statement[:60]}"
            assert "${" not in statement


def test_retention_comes_from_settings() -> None:
    text = "\n".join(s for m in load_migrations()
                     for s in m.statements(migration_variables(123, 7)))
    assert "INTERVAL 123 DAY" in text and "INTERVAL 7 DAY" in text


def test_render_refuses_missing_variables() -> None:
    with pytest.raises(KeyError):
        render("TTL ts + INTERVAL ${retention_days} DAY", {})
    # ClickHouse's own braces are left alone.
    assert render("{x:UInt8} '{cluster}' ${a}", {"a": 1}) == "{x:UInt8} '{cluster}' 1"


def test_split_statements_and_comments() -> None:
    sql = ("-- head\nCREATE TABLE a (x String DEFAULT 'a--b;') -- tail;\nENGINE = Null;\n\n"
           "SELECT 1;\n")
    assert split_statements(sql) == [
        "CREATE TABLE a (x String DEFAULT 'a--b;')\nENGINE = Null", "SELECT 1"]
    assert strip_comments("SELECT '--' -- x") == "SELECT '--'"


def test_bad_file_names_are_refused(tmp_path: Path) -> None:
    (tmp_path / "001_ok.sql").write_text("SELECT 1;")
    (tmp_path / "003_gap.sql").write_text("SELECT 1;")
    with pytest.raises(ValueError, match="without gaps"):
        load_migrations(tmp_path)
    (tmp_path / "2_bad.sql").write_text("SELECT 1;")
    with pytest.raises(ValueError, match="NNN_name"):
        load_migrations(tmp_path)
