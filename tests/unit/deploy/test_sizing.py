"""The manifests carry the load the benchmark figures say each scale brings.

deploy/k8s/sizing.py derives sizes from benchmarks/results/*.json (target: half load with
one worker lost). These checks fail only when a manifest could not carry its scale's load
at the measured rates at all, or when the sizes and the manifests disagree on partitions,
so a re-run benchmark that moves the figures a little does not break them.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from .manifests import DEPLOY, OVERLAY_KAFKA, build, find, one


def sizing() -> ModuleType:
    path = DEPLOY / "k8s" / "sizing.py"
    spec = importlib.util.spec_from_file_location("sizing", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while defining
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("overlay", sorted(OVERLAY_KAFKA))
def test_stream_workers_carry_the_load(overlay: str) -> None:
    mod = sizing()
    figures = mod.Figures.read()
    want = mod.size(mod.SCALES[overlay], figures)
    sts = one(build(f"k8s/overlays/{overlay}"), "StatefulSet", "fabricwatch-streams")
    replicas = sts["spec"]["replicas"]
    assert replicas * figures.worker_samples_per_s >= want.samples_per_s
    assert replicas >= 2  # a hot standby for every table partition
    topics = {d["spec"]["topicName"]: d["spec"]["partitions"]
              for d in find(build(OVERLAY_KAFKA[overlay]), "KafkaTopic")}
    # what the sizing chose when the manifests were written; a re-run benchmark may move
    # the ideal, but the workers must fit the partitions, evenly
    assert topics["fabric.counters"] >= max(replicas, math.ceil(want.samples_per_s
                                                                / figures.worker_samples_per_s))
    assert topics["fabric.counters"] % replicas == 0


def test_the_ledger_and_temporal_carry_100k_ports() -> None:
    mod = sizing()
    figures = mod.Figures.read()
    want = mod.size(100_000, figures)
    chi = one(build("clickhouse"), "ClickHouseInstallation", "fabricwatch")
    shards = chi["spec"]["configuration"]["clusters"][0]["layout"]["shardsCount"]
    assert shards * figures.ledger_samples_per_s >= want.samples_per_s
    values = yaml.safe_load((DEPLOY / "temporal" / "values.yaml").read_text())
    assert values["server"]["config"]["numHistoryShards"] >= want.history_shards


def test_the_sizing_table_names_its_sources(tmp_path: Path) -> None:
    mod = sizing()
    table = mod.table()
    assert "| stream workers (StatefulSet replicas) |" in table
    doc = (DEPLOY.parent / "docs" / "deployment.md").read_text()
    assert "python deploy/k8s/sizing.py" in doc
    for source in ("streams.json", "ledger.json", "sim.json", "collectors_parse.json",
                   "runbooks.json", "topic-bytes.json"):
        assert source in doc, source


def test_the_deployment_doc_carries_both_tables_as_the_script_prints_them() -> None:
    mod = sizing()
    doc = (DEPLOY.parent / "docs" / "deployment.md").read_text()
    assert mod.table() in doc
    assert mod.host_table() in doc
    assert "host_load_5k_after.json" in doc


@pytest.mark.parametrize("load", [1, 999, 1_250, 3_584, 3_585, 12_500, 125_000, 1_000_000])
@pytest.mark.parametrize("per_worker", [7_168.5, 19_181.0, 500.0])
def test_workers_carry_the_load_at_half_with_one_lost_and_divide_the_partitions(
        load: int, per_worker: float) -> None:
    mod = sizing()
    workers, partitions = mod.workers_for(load, per_worker)
    assert workers >= 2
    assert (workers - 1) * per_worker * mod.TARGET_UTILISATION >= load
    assert partitions % workers == 0
    needed = math.ceil(load / (per_worker * mod.TARGET_UTILISATION))
    assert partitions >= 3 * needed  # room to add workers


def test_host_agents_at_1s_need_more_workers_than_polling_at_10s() -> None:
    mod = sizing()
    figures = mod.Figures.read()
    host = mod.host_size(12_500, figures)  # 100k GPUs
    assert host.port_samples_per_s == 100_000
    per_worker = 1e6 / figures.host_cpu_us_per_message
    assert host.workers * per_worker >= host.messages_per_s
    assert host.workers > mod.size(100_000, figures).workers
