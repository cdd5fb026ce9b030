"""The generated {cluster} DDL applied to the real engine with the cluster stubbed.

chdb has no Keeper and no remote_servers, so the stub keeps everything else: the
Replicated engines lose only their Keeper path and replica arguments, each Distributed
table becomes a Merge table over its one local table (a one-shard cluster), and
ON CLUSTER is dropped. Rows go into the ``_local`` tables as a Distributed insert would
deliver them; every materialized view and cookbook query must then give the same answers
as the single-node schema.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

import orjson
import pytest

from ledger.base import encode_rows, sample_generations
from ledger.cluster import generate
from ledger.embedded import EmbeddedLedger
from ledger.migrations import split_statements, strip_comments
from ledger.queries import cookbook, params_for
from ledger.rows import RAW_COUNTER_COLUMNS, Row, to_rows

from .conftest import history_start
from .synth import history

pytestmark = pytest.mark.integration


def stub(ddl: str) -> list[str]:
    ddl = strip_comments(ddl).replace(" ON CLUSTER '{cluster}'", "")
    ddl = re.sub(r"Replicated(\w*)MergeTree\('/clickhouse/tables/\{shard\}/\{database\}/\w+', "
                 r"'\{replica\}'(?:, )?", r"\1MergeTree(", ddl)
    ddl = re.sub(r"Distributed\('\{cluster\}', currentDatabase\(\), (\w+), [^\n]*\);$",
                 r"Merge(currentDatabase(), '^\1$');", ddl, flags=re.MULTILINE)
    assert "{cluster}" not in ddl and "{replica}" not in ddl and "Distributed" not in ddl
    return split_statements(ddl)


def answers(ledger: EmbeddedLedger) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for name, query in cookbook().items():
        given = {"device": "leaf-su01-r0", "port": 6, "job": "train-1"}
        rows = ledger.query(query.sql, params_for(query, given, "lab"))
        # Hours "so far" move with the clock between the two runs.
        out[name] = [{k: v for k, v in r.items() if k not in ("hours_isolated", "hours_open")}
                     for r in rows]
    return out


def test_cluster_ddl_gives_the_same_answers(fresh_ledger: EmbeddedLedger) -> None:
    events, _ = history(history_start(), hours=2)
    for statement in stub(generate()):
        fresh_ledger.execute(statement)
    by_table: dict[str, list[Row]] = defaultdict(list)
    for event in events:
        for table, row in to_rows(event):
            by_table[table].append(row)
    counter_rows = by_table.pop("counter_ingest")
    for table, rows in by_table.items():
        fresh_ledger.insert_encoded(f"{table}_local", encode_rows(rows))
    flat = [tuple(r[c] for c in RAW_COUNTER_COLUMNS) for r in counter_rows]
    for generation in sample_generations(flat):  # one sample per port per insert
        fresh_ledger.insert_encoded("counter_ingest_local", orjson.dumps(generation)[1:-1],
                                    "JSONCompactEachRow", RAW_COUNTER_COLUMNS)
    clustered = answers(fresh_ledger)
    assert clustered["top_flapping_ports"] and clustered["open_miswires"]
    fresh_ledger.execute("DROP DATABASE IF EXISTS single")
    fresh_ledger.execute("CREATE DATABASE single")
    fresh_ledger.execute("USE single")
    fresh_ledger.migrate()
    fresh_ledger.write(events)
    assert answers(fresh_ledger) == clustered
