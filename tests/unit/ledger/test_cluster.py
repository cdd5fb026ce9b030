"""The {cluster} DDL generated from the migrations."""

from __future__ import annotations

import re

from ledger.cluster import DEFAULT_OUT, cluster_statements, generate, sharding_key


def test_every_table_is_replicated_and_distributed() -> None:
    ddl = generate()
    locals_ = set(re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)_local ON CLUSTER", ddl))
    dists = set(re.findall(r"CREATE TABLE IF NOT EXISTS (\w+) ON CLUSTER '\{cluster\}' AS "
                           r"(\w+)_local\nENGINE = Distributed", ddl))
    assert locals_ and {a for a, _ in dists} == locals_
    assert all(a == b for a, b in dists)
    assert "ENGINE = ReplacingMergeTree" not in ddl and "ENGINE = AggregatingMergeTree" not in ddl
    for name in locals_ - {"counter_ingest", "counter_delta_stage"}:  # Null: nothing to replicate
        assert f"'/clickhouse/tables/{{shard}}/{{database}}/{name}_local', '{{replica}}'" in ddl


def test_views_read_local_tables_and_plain_views_distributed() -> None:
    ddl = generate()
    for mv in re.findall(r"CREATE MATERIALIZED VIEW .*?;\n", ddl, flags=re.DOTALL):
        targets = re.findall(r"\b(?:FROM|JOIN|TO)\s+(\w+)", mv)
        assert targets and all(t.endswith("_local") for t in targets), targets
    # port_ledger is recreated by later migrations (007): every version reads Distributed
    views = re.findall(r"CREATE VIEW IF NOT EXISTS (?:port_ledger|stale_open) .*?;\n", ddl,
                       flags=re.DOTALL)
    assert len(views) >= 3 and all("_local" not in v for v in views)


def test_replacing_version_argument_kept() -> None:
    [local, dist] = cluster_statements([
        "CREATE TABLE IF NOT EXISTS t\n(\n    fabric String,\n    device String,\n"
        "    ts DateTime\n)\nENGINE = ReplacingMergeTree(ts)\nORDER BY (fabric, device)"])
    assert ("ReplicatedReplacingMergeTree('/clickhouse/tables/{shard}/{database}/t_local', "
            "'{replica}', ts)") in local
    assert dist.endswith("Distributed('{cluster}', currentDatabase(), t_local, "
                         "cityHash64(fabric, device))")
    assert sharding_key({"x"}) == "rand()"


def test_committed_file_is_current() -> None:
    assert DEFAULT_OUT.read_text() == generate(), "run `python -m ledger.cluster`"
