"""The analyst's cookbook: ``sql/queries/*.sql``, each answering one question.

A query's leading ``--`` comment says what it answers; ``{name:Type}`` placeholders are
ClickHouse query parameters. ``default_params`` fills the common ones (``fabric``, a 24 h
``since``/``until`` window, ``limit``, ``threshold``) so that ``fabricwatch ledger query
NAME`` runs without arguments; ``--param`` overrides them.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path

from ledger.migrations import QUERIES_DIR

_PARAM = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*):([^{}]+)\}")


@dataclass(frozen=True)
class CookbookQuery:
    name: str
    path: Path
    sql: str

    @property
    def description(self) -> str:
        lines: list[str] = []
        for line in self.sql.splitlines():
            if not line.startswith("--"):
                break
            text = line[2:].strip()
            if text.startswith("Params:"):
                continue
            lines.append(text)
        return " ".join(lines)

    @property
    def params(self) -> dict[str, str]:
        """Parameter name -> ClickHouse type, in order of first use."""
        found: dict[str, str] = {}
        for name, typ in _PARAM.findall(self.sql):
            found.setdefault(name, typ.strip())
        return found


def cookbook(directory: Path = QUERIES_DIR) -> dict[str, CookbookQuery]:
    return {p.stem: CookbookQuery(p.stem, p, p.read_text())
            for p in sorted(directory.glob("*.sql"))}


def default_params(fabric: str, now: dt.datetime | None = None) -> dict[str, object]:
    """Values for the parameters most queries share."""
    at = now or dt.datetime.now(dt.UTC)
    return {"fabric": fabric, "since": at - dt.timedelta(days=1), "until": at,
            "limit": 20, "threshold": 0.9}


def params_for(query: CookbookQuery, given: dict[str, object], fabric: str,
               now: dt.datetime | None = None) -> dict[str, object]:
    """The query's parameters: the given ones, else the defaults; missing ones are an error."""
    defaults = default_params(fabric, now)
    out: dict[str, object] = {}
    missing: list[str] = []
    for name in query.params:
        if name in given:
            out[name] = given[name]
        elif name in defaults:
            out[name] = defaults[name]
        else:
            missing.append(name)
    if missing:
        raise KeyError(", ".join(missing))
    return out
