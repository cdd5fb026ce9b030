"""benchmarks/scrape_vs_stream.py's short real-time run (4 minutes: slow): the simulator's
flap episodes reach fabricwatch's detections through a real broker and worker, and the
alert of a real Prometheus (scraping the simulator's exporter) at a real Alertmanager; every
figure the full 30-minute run reports is there and plausible."""

from __future__ import annotations

import argparse
import asyncio
import os

import pytest

from benchmarks import scrape_vs_stream as svs
from fabricwatch.alertmanager import AlertmanagerUnavailable
from fabricwatch.alertmanager import build as build_alertmanager
from fabricwatch.prometheus import PrometheusUnavailable
from fabricwatch.prometheus import build as build_prometheus

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]


def test_episodes_fit_the_run_and_are_seeded() -> None:
    eps = svs.plan(40, 3, 1800.0, 2.0, 120.0)
    assert eps == svs.plan(40, 3, 1800.0, 2.0, 120.0)
    assert eps != svs.plan(40, 4, 1800.0, 2.0, 120.0)
    for ep in eps:
        assert 3 <= len(ep.downs_s) <= 5
        assert svs.LEAD_S <= ep.downs_s[0] and ep.downs_s[-1] <= 1800.0 - svs.TAIL_S
        gaps = [b - a for a, b in zip(ep.downs_s, ep.downs_s[1:], strict=False)]
        assert all(2.0 - 0.01 <= g <= 120.0 + 0.01 for g in gaps), gaps
    with pytest.raises(ValueError, match="does not fit"):
        svs.plan(5, 3, 240.0, 30.0, 120.0)


def test_a_short_real_time_run_measures_both_pipelines() -> None:
    try:
        build_prometheus()
        build_alertmanager()
    except (PrometheusUnavailable, AlertmanagerUnavailable) as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"{exc} (CI=true: this check must run)")
        pytest.skip(str(exc))
    args = argparse.Namespace(minutes=4.0, episodes=8, seed=5, min_gap=2.0, max_gap=120.0,
                              raw="")
    out = asyncio.run(svs.realtime(args))
    fw = out["fabricwatch"]
    assert out["episodes"] == 8 and out["exporter_scrapes"] >= 10
    assert fw["missed"] == 0, out
    assert 0 <= fw["p50_s"] <= fw["p99_s"] < 10, fw
    inc = out["prometheus_increase"]
    assert inc["detected"] >= 6, inc  # the increase rule catches a flap a scrape can see
    # a 15 s scrape and a 15 s evaluation: the alert comes after fabricwatch's detection
    assert inc["p50_s"] > fw["p50_s"], out
    assert out["ratio_increase_p50"] is not None and out["ratio_increase_p50"] > 1
    assert out["prometheus_changes"]["episodes"] == 8
