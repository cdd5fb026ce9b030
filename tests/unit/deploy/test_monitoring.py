"""Alert rules and the Grafana dashboard read series that exist.

Every metric an alert or a Prometheus panel reads is either one of fabricwatch's documented
series (runtime.metrics.SERIES) or one an engine exports as configured in deploy/; every
documented series is on the dashboard. The dashboard JSON is what dashboard.py builds.
(The ledger panels' SQL runs on the embedded engine in tests/integration/test_metrics.py.)
"""

from __future__ import annotations

import importlib.util
import json
import re
from typing import Any

import pytest
import yaml

from runtime import metrics

from .manifests import DEPLOY

MONITORING = DEPLOY / "monitoring"
# Series from the engines, with where deploy/ turns them on.
EXTERNAL = {
    "kafka_consumergroup_lag": "deploy/strimzi/base/kafka.yaml kafkaExporter",
    "kafka_server_replicamanager_underreplicatedpartitions":
        "deploy/strimzi/base/kafka-metrics.yaml (UnderReplicatedPartitions, lowercased)",
    "ClickHouseMetrics_ReadonlyReplica": "deploy/clickhouse/installation.yaml prometheus/metrics",
    "ClickHouseAsyncMetrics_ReplicasMaxAbsoluteDelay":
        "deploy/clickhouse/installation.yaml prometheus/asynchronous_metrics",
}
KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}
SUFFIXES = ("_bucket", "_count", "_sum")


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression (label matchers, groupings and ranges removed)."""
    expr = re.sub(r'"[^"]*"', "", expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    names = re.findall(r"(?<![\w$])([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()", expr)
    return {n for n in names if n.lower() not in KEYWORDS}


def known(name: str) -> bool:
    base = next((name[: -len(s)] for s in SUFFIXES if name.endswith(s)), name)
    return name in metrics.SERIES or base in metrics.SERIES or name in EXTERNAL


def alert_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load((MONITORING / "alerts.yaml").read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((MONITORING / "fabricwatch-dashboard.json").read_text())
    return data


def prom_exprs() -> list[str]:
    return [t["expr"] for p in dashboard()["panels"] for t in p.get("targets", []) if "expr" in t]


def test_metric_name_extraction() -> None:
    assert metric_names('histogram_quantile(0.99, sum by (le) (rate(x_bucket{a="b"}[5m]))) > 2') \
        == {"x_bucket"}
    assert metric_names("sum(a) > 2 * sum(b_total)") == {"a", "b_total"}


@pytest.mark.parametrize("rule", alert_rules(), ids=lambda r: r["alert"])
def test_alert_rules_are_complete_and_read_known_series(rule: dict[str, Any]) -> None:
    assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}
    assert rule["labels"]["severity"] in {"page", "critical", "warning"}
    assert rule["annotations"]["summary"] and rule["annotations"]["description"]
    names = metric_names(rule["expr"])
    assert names and all(known(n) for n in names), names
    if "for" in rule:
        assert re.fullmatch(r"\d+[smh]", rule["for"])


def test_alert_names_are_unique() -> None:
    names = [r["alert"] for r in alert_rules()]
    assert len(names) == len(set(names))


def test_engine_series_are_turned_on_where_the_rules_say() -> None:
    kafka = (DEPLOY / "strimzi" / "base" / "kafka.yaml").read_text()
    jmx = (DEPLOY / "strimzi" / "base" / "kafka-metrics.yaml").read_text()
    chi = (DEPLOY / "clickhouse" / "installation.yaml").read_text()
    assert "kafkaExporter:" in kafka and "lowercaseOutputName: true" in jmx
    assert "UnderReplicatedPartitions" in jmx and "kafka_server_replicamanager_$1" in jmx
    assert 'prometheus/metrics: "true"' in chi and 'prometheus/asynchronous_metrics: "true"' in chi


def test_dashboard_is_current() -> None:
    spec = importlib.util.spec_from_file_location("dashboard", MONITORING / "dashboard.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (MONITORING / "fabricwatch-dashboard.json").read_text() == module.render(), \
        "run `python deploy/monitoring/dashboard.py`"


def test_dashboard_reads_known_series_and_shows_every_documented_one() -> None:
    used: set[str] = set()
    for expr in prom_exprs():
        names = metric_names(expr)
        assert names and all(known(n) for n in names), (expr, names)
        used |= names
    bases = {next((n[: -len(s)] for s in SUFFIXES if n.endswith(s)), n) for n in used}
    assert set(metrics.SERIES) <= bases, set(metrics.SERIES) - bases


def test_dashboard_panels_are_well_formed() -> None:
    board = dashboard()
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in board["templating"]["list"]}
    assert {"DS_PROMETHEUS", "DS_CLICKHOUSE", "fabric"} <= variables
    ledger = [p for p in board["panels"] if p.get("datasource", {}).get("type")
              == "grafana-clickhouse-datasource"]
    assert len(ledger) >= 5
    for panel in ledger:
        [target] = panel["targets"]
        assert "{fabric:String}" not in target["rawSql"] and "'${fabric}'" in target["rawSql"]


def test_cluster_wide_runbook_gauges_are_never_summed_across_pods() -> None:
    # every runbook pod reports the same values; a sum would multiply them by the pod count
    direct_sum = re.compile(r"\bsum\b(\s+by\s*\([^)]*\))?\s*\(\s*fabricwatch_(runbooks|breaker_"
                            r"(isolated_ports|limit|open|refused_total))\b")
    exprs = prom_exprs() + [r["expr"] for r in alert_rules()]
    assert not [e for e in exprs if direct_sum.search(e)]
    assert direct_sum.search("sum by (status) (fabricwatch_runbooks)")


def test_grafana_datasources_match_the_dashboard_and_the_ledger_user() -> None:
    doc = yaml.safe_load((MONITORING / "grafana-datasources.yaml").read_text())
    types = {d["type"]: d for d in doc["datasources"]}
    board_types = {v["query"] for v in dashboard()["templating"]["list"]
                   if v["type"] == "datasource"}
    assert board_types <= set(types)
    ledger = types["grafana-clickhouse-datasource"]
    assert ledger["jsonData"]["username"] == "grafana"
    assert ledger["secureJsonData"]["password"].startswith("$")  # never a literal password
    chi = (DEPLOY / "clickhouse" / "installation.yaml").read_text()
    assert "grafana/profile: readonly" in chi
