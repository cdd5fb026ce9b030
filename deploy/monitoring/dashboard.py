"""Build ``fabricwatch-dashboard.json``: the Grafana dashboard of the workers and the ledger.

Worker panels read Prometheus (the series of runtime/metrics.py); ledger panels read
ClickHouse through Grafana's ClickHouse plugin (grafana-clickhouse-datasource, user
``grafana``, read-only) with the analysts' cookbook queries from ``sql/queries`` — the same
SQL ``fabricwatch ledger query`` runs — their ``{name:Type}`` parameters turned into the
dashboard's variable and time range. ``python deploy/monitoring/dashboard.py`` rewrites the
JSON; tests/unit/deploy checks it is current, and an integration test runs every ledger
panel's SQL on the embedded engine.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).with_name("fabricwatch-dashboard.json")
QUERIES = ROOT / "sql" / "queries"

PROM = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
CH = {"type": "grafana-clickhouse-datasource", "uid": "${DS_CLICKHOUSE}"}


def cookbook_sql(name: str) -> str:
    """A cookbook query with Grafana's variable and time range in place of its parameters."""
    text = (QUERIES / f"{name}.sql").read_text()
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("--")]
    sql = "\n".join(lines).strip().rstrip(";")
    sql = sql.replace("{fabric:String}", "'${fabric}'")
    sql = re.sub(r"\{since:DateTime64\(3, 'UTC'\)\}", "$__fromTime", sql)
    sql = re.sub(r"\{until:DateTime64\(3, 'UTC'\)\}", "$__toTime", sql)
    sql = sql.replace("{limit:UInt32}", "20")
    if "{" in re.sub(r"'\$\{fabric\}'", "", sql):
        raise ValueError(f"{name}: a parameter the dashboard cannot fill")
    return sql


def prom_panel(pid: int, title: str, exprs: list[tuple[str, str]], grid: tuple[int, int],
               *, unit: str = "short", kind: str = "timeseries",
               description: str = "") -> dict[str, Any]:
    x, y = grid
    return {
        "id": pid, "type": kind, "title": title, "description": description,
        "datasource": PROM,
        "gridPos": {"x": x, "y": y, "w": 12, "h": 8},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {},
        "targets": [{"refId": chr(65 + i), "datasource": PROM, "expr": expr,
                     "legendFormat": legend, "instant": kind == "table"}
                    for i, (expr, legend) in enumerate(exprs)],
    }


def ch_panel(pid: int, title: str, sql: str, grid: tuple[int, int], *,
             timeseries: bool = False, description: str = "") -> dict[str, Any]:
    x, y = grid
    return {
        "id": pid, "type": "timeseries" if timeseries else "table", "title": title,
        "description": description, "datasource": CH,
        "gridPos": {"x": x, "y": y, "w": 12, "h": 9},
        "fieldConfig": {"defaults": {}, "overrides": []},
        "options": {},
        "targets": [{"refId": "A", "datasource": CH, "editorType": "sql",
                     "queryType": "timeseries" if timeseries else "table",
                     "format": 0 if timeseries else 1, "rawSql": sql}],
    }


def build() -> dict[str, Any]:
    rate = "$__rate_interval"
    latency = f"rate(fabricwatch_detection_latency_seconds_bucket[{rate}])"
    group_lag = 'kafka_consumergroup_lag{consumergroup=~"fabricwatch-.*"}'
    panels = [
        {"id": 100, "type": "row", "title": "Stream processors", "collapsed": False,
         "gridPos": {"x": 0, "y": 0, "w": 24, "h": 1}, "panels": []},
        prom_panel(1, "Events consumed per second, by topic",
                   [(f"sum by (topic) (rate(fabricwatch_events_total[{rate}]))", "{{topic}}")],
                   (0, 1), unit="ops"),
        prom_panel(2, "Consumer lag (messages)",
                   [("sum by (topic) (fabricwatch_consumer_lag)", "workers {{topic}}"),
                    (f"sum by (consumergroup, topic) ({group_lag})",
                     "{{consumergroup}} {{topic}}")],
                   (12, 1)),
        prom_panel(3, "Detection latency (event time to publication)",
                   [(f"histogram_quantile(0.5, sum by (le) ({latency}))", "p50"),
                    (f"histogram_quantile(0.99, sum by (le) ({latency}))", "p99")],
                   (0, 9), unit="s"),
        prom_panel(4, "Detections per second, by kind",
                   [(f"sum by (detection) (rate(fabricwatch_detections_total[{rate}]))", "{{detection}}")],
                   (12, 9), unit="ops"),
        prom_panel(5, "Dead letters per second, by source topic",
                   [(f"sum by (topic) (rate(fabricwatch_dead_letters_total[{rate}]))", "{{topic}}")],
                   (0, 17), unit="ops"),
        prom_panel(6, "Stream workers by agent group; breaker_open detections (1 h) by SU",
                   [("sum by (agents) (fabricwatch_stream_agents)", "workers: {{agents}}"),
                    ("sum by (su) (increase(fabricwatch_breaker_open_detections_total[1h]))",
                     "breaker_open {{su}}")],
                   (12, 17)),
        {"id": 101, "type": "row", "title": "Runbooks", "collapsed": False,
         "gridPos": {"x": 0, "y": 25, "w": 24, "h": 1}, "panels": []},
        # every runbook pod reports the same cluster-wide counts: max, not sum
        prom_panel(7, "Runbooks by status", [("max by (status) (fabricwatch_runbooks)", "{{status}}"),
                                             ("max(fabricwatch_runbooks_needs_human)",
                                              "waiting for a person"),
                                             ("max(fabricwatch_runbooks_status_unknown)",
                                              "status unknown (did not answer)")],
                   (0, 26)),
        prom_panel(8, "Dispatcher: detections per second, by outcome",
                   [(f"sum by (outcome) (rate(fabricwatch_runbook_dispatch_total[{rate}]))", "{{outcome}}")],
                   (12, 26), unit="ops"),
        prom_panel(16, "Fabric agent: devices sampled / events published per second",
                   [(f"sum by (collector) (rate(fabricwatch_collector_published_total[{rate}]))",
                     "{{collector}}"),
                    (f"sum by (collector) (rate(fabricwatch_collector_failures_total[{rate}]))",
                     "{{collector}} failures"),
                    (f"sum by (collector) (rate(fabricwatch_collector_rounds_total[{rate}]))",
                     "{{collector}} rounds")],
                   (12, 34), unit="ops"),
        prom_panel(17, "Fabric agent: last round (seconds ago) and its duration",
                   [("time() - max by (collector) "
                     "(fabricwatch_collector_last_round_timestamp_seconds)", "{{collector}} age"),
                    ("max by (collector) (fabricwatch_collector_round_seconds)",
                     "{{collector}} round")],
                   (0, 42), unit="s"),
        prom_panel(9, "Isolation budget per SU",
                   [("max by (fabric, su) (fabricwatch_breaker_isolated_ports)", "isolated"),
                    ("max by (fabric, su) (fabricwatch_breaker_limit)", "limit"),
                    ("max by (fabric, su) (fabricwatch_breaker_open)", "open"),
                    ("max by (fabric, su) (fabricwatch_breaker_refused_total)", "refused")],
                   (0, 34), kind="table",
                   description="Open = the SU's budget is used up and the next isolation waits for a human."),
        {"id": 102, "type": "row", "title": "Ledger (ClickHouse)", "collapsed": False,
         "gridPos": {"x": 0, "y": 50, "w": 24, "h": 1}, "panels": []},
        ch_panel(10, "Ports isolated now", cookbook_sql("isolated_ports"), (0, 51)),
        ch_panel(11, "Top flapping ports in the time range", cookbook_sql("top_flapping_ports"),
                 (12, 51)),
        ch_panel(12, "Detections per interval, by kind",
                 "SELECT $__timeInterval(ts) AS time, detection, count() AS detections\n"
                 "FROM detections FINAL\n"
                 "WHERE fabric = '${fabric}' AND $__timeFilter(ts)\n"
                 "GROUP BY time, detection\nORDER BY time",
                 (0, 60), timeseries=True),
        ch_panel(13, "Counter errors by SU and rail", cookbook_sql("errors_by_su_rail"), (12, 60)),
        ch_panel(14, "Open miswires", cookbook_sql("open_miswires"), (0, 69)),
        ch_panel(15, "Repair time by ladder rung", cookbook_sql("mttr_by_rung"), (12, 69)),
    ]
    return {
        "title": "fabricwatch",
        "uid": "fabricwatch",
        "tags": ["fabricwatch"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "30s",
        "time": {"from": "now-24h", "to": "now"},
        "templating": {"list": [
            {"name": "DS_PROMETHEUS", "label": "Prometheus", "type": "datasource",
             "query": "prometheus"},
            {"name": "DS_CLICKHOUSE", "label": "Ledger (ClickHouse)", "type": "datasource",
             "query": "grafana-clickhouse-datasource"},
            {"name": "fabric", "label": "Fabric", "type": "custom", "query": "prod",
             "current": {"text": "prod", "value": "prod"}},
        ]},
        "annotations": {"list": []},
        "panels": panels,
    }


def render() -> str:
    return json.dumps(build(), indent=2) + "\n"


if __name__ == "__main__":
    OUT.write_text(render())
    print(f"wrote {OUT}")  # noqa: T201 - a command-line tool's one line of output
