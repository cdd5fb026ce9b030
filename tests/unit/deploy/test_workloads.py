"""What the workloads promise: umad only in the fabric agent on fabric-management hosts,
probes, sized resources, metrics scraping, secrets as files, default-deny networking, and
configuration that the settings and the policy accept.

The ledger's cluster DDL applied to the embedded engine with the cluster macros stubbed is
tested by the ledger's own tests/integration/ledger/test_ledger_cluster.py (and
tests/unit/ledger/test_cluster.py keeps deploy/clickhouse/cluster-ddl.sql current); here we
check that the DDL Job ships exactly that file and the migration records that go with it.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import click
import pytest
import yaml

from fabricwatch.audit.k8s import K8sOptions, audit_manifest_text
from ledger.cluster import generate
from ledger.migrations import load_migrations
from runtime.settings import Settings
from schemas.policy import Policy

from .manifests import DEPLOY, build, env_configmap, find, one, pod_specs

OVERLAYS = ("k8s/overlays/10k", "k8s/overlays/100k", "k8s/overlays/1m")
FABRIC_AGENT = "fabricwatch-fabric-agent"
HTTP_WORKLOADS = ("fabricwatch-streams", "fabricwatch-streams-traps", "fabricwatch-runbook-worker",
                  "fabricwatch-dispatcher")


def _module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_umad_only_in_the_fabric_agent_on_fabric_management_hosts(overlay: str) -> None:
    for workload, spec in pod_specs(build(overlay)):
        host_paths = {v["hostPath"]["path"] for v in spec.get("volumes", []) if "hostPath" in v}
        assert not spec.get("hostNetwork") and not spec.get("hostPID")
        for c in spec["containers"] + spec.get("initContainers", []):
            sc = c.get("securityContext", {})
            assert not sc.get("privileged") and sc.get("allowPrivilegeEscalation") is False
            assert sc.get("capabilities", {}).get("drop") == ["ALL"]
            assert not sc.get("capabilities", {}).get("add")
        if workload["metadata"]["name"] != FABRIC_AGENT:
            assert not host_paths, workload["metadata"]["name"]
            continue
        assert workload["metadata"]["namespace"] == "fabricwatch-fabric"
        assert {p for p in host_paths if p.startswith("/dev/")} == {"/dev/infiniband/umad0"}
        assert host_paths == {"/dev/infiniband/umad0", "/var/log/opensm"}
        assert spec["nodeSelector"] == {"fabricwatch.io/fabric-management": "true"}
        assert {"key": "fabricwatch.io/fabric-management", "operator": "Equal", "value": "true",
                "effect": "NoSchedule"} in spec["tolerations"]
        assert workload["kind"] == "StatefulSet" and workload["spec"]["replicas"] == 1
        poller, follower, evidence = spec["containers"]
        assert poller["args"][:2] == ["poll", "ibdiags"]
        assert follower["args"][:2] == ["tail", "opensm"]
        # the runbooks' evidence runs here, with the tools, and nowhere else
        assert evidence["args"][0] == "evidence-worker"
        # all three run infiniband-diags / MFT (the follower resolves traps with
        # iblinkinfo); the log is read-only, and the keys go only where the poller runs
        for c in (poller, follower, evidence):
            assert "umad" in {m["name"] for m in c["volumeMounts"]}
        assert "fabric-keys" not in {m["name"] for m in evidence["volumeMounts"]}
        assert all(m.get("readOnly") for m in follower["volumeMounts"]
                   if m["name"] == "opensm-log")
        assert "fabric-keys" not in {m["name"] for m in follower["volumeMounts"]}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_audit_finds_only_the_expected_umad_mount(overlay: str, tmp_path: Path) -> None:
    text = "---\n".join(yaml.safe_dump(d) for d in build(overlay))
    findings = audit_manifest_text(text, overlay, K8sOptions(
        gpu_namespaces=frozenset({"fabricwatch", "fabricwatch-fabric"})))
    assert [(f.rule, FABRIC_AGENT in f.reason) for f in findings] == [("K8S005", True)]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_probes_resources_and_metrics(overlay: str) -> None:
    docs = build(overlay)
    port = int(env_configmap(docs)["FABRICWATCH_METRICS_PORT"])
    for workload, spec in pod_specs(docs):
        name = workload["metadata"]["name"]
        for c in spec["containers"] + spec.get("initContainers", []):
            res = c["resources"]
            assert res["requests"]["cpu"] and res["requests"]["memory"], (name, c["name"])
            assert res["limits"]["memory"], (name, c["name"])
        if name in HTTP_WORKLOADS:
            ann = spec and workload["spec"]["template"]["metadata"]["annotations"]
            assert ann["prometheus.io/scrape"] == "true" and int(ann["prometheus.io/port"]) == port
            [c] = spec["containers"]
            assert {p["containerPort"] for p in c["ports"]} == {port}
            assert c["livenessProbe"]["httpGet"]["path"] == "/metrics"
            assert c["startupProbe"]["httpGet"]["port"] == "metrics"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_streams_keep_rocksdb_state_on_a_volume_with_standbys(overlay: str) -> None:
    docs = build(overlay)
    env = env_configmap(docs)
    assert env["FABRICWATCH_STREAMS__STANDBY_REPLICAS"] == "1"
    groups = {}
    for name in ("fabricwatch-streams", "fabricwatch-streams-traps"):
        sts = one(docs, "StatefulSet", name)
        [claim] = sts["spec"]["volumeClaimTemplates"]
        [c] = sts["spec"]["template"]["spec"]["containers"]
        mount = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}[claim["metadata"]["name"]]
        assert env["FABRICWATCH_STATE_DIR"] == mount  # streams/app.py: state_dir/streams/...
        assert c["args"][0] == "worker"
        groups[name] = c["args"][c["args"].index("--agents") + 1]
        # a standby copy needs a second worker of the same set
        assert sts["spec"]["replicas"] >= 2, name
    # the trap path apart from the rest, both run: every agent, once
    assert groups == {"fabricwatch-streams": "rest", "fabricwatch-streams-traps": "traps"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_secrets_are_files_and_the_settings_point_at_them(overlay: str) -> None:
    for workload, spec in pod_specs(build(overlay)):
        for c in spec["containers"]:
            mounts = {m["name"]: m["mountPath"] for m in c.get("volumeMounts", [])}
            secret_volumes = {v["name"] for v in spec.get("volumes", []) if "secret" in v}
            for e in c.get("env", []):
                if e["name"].endswith("_FILE"):
                    dirs = [mounts[v] for v in secret_volumes if v in mounts]
                    assert any(e["value"].startswith(d + "/") for d in dirs), \
                        (workload["metadata"]["name"], e)
                # no secret value passed inline
                assert not any(word in e["name"] for word in ("PASSWORD", "M_KEY", "SM_KEY")) \
                    or e["name"].endswith("_FILE") or "valueFrom" in e, e["name"]
            for v in spec.get("volumes", []):
                if "secret" in v and v["name"] in mounts:
                    assert v["secret"]["defaultMode"] == 0o440


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_namespace_denies_by_default(overlay: str) -> None:
    docs = build(overlay)
    namespaces = {d["metadata"]["name"] for d in find(docs, "Namespace")}
    assert namespaces == {"fabricwatch", "fabricwatch-fabric"}
    for ns in namespaces:
        deny = [d for d in find(docs, "NetworkPolicy") if d["metadata"]["namespace"] == ns
                and d["spec"]["podSelector"] == {} and "ingress" not in d["spec"]
                and "egress" not in d["spec"]]
        assert deny and set(deny[0]["spec"]["policyTypes"]) == {"Ingress", "Egress"}, ns


def test_the_environment_and_the_policy_are_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    docs = build("k8s/overlays/100k")
    for key, value in env_configmap(docs).items():
        if key.startswith("FABRICWATCH_"):
            monkeypatch.setenv(key, value)
    settings = Settings()
    assert settings.metrics_port == 9464 and settings.temporal.namespace == "fabricwatch"
    assert settings.kafka.bootstrap_servers.endswith(":9092")
    policies = [d for d in find(docs, "ConfigMap")
                if d["metadata"]["name"].startswith("fabricwatch-policy-")]
    policy = Policy.from_yaml(policies[0]["data"]["policy.yaml"])
    assert policy.fabric_health.shadow.all is True  # a new deployment starts in shadow mode


def test_the_ddl_job_ships_the_ledgers_cluster_ddl_and_its_migration_records() -> None:
    docs = build("clickhouse")
    [ddl] = [d for d in find(docs, "ConfigMap")
             if d["metadata"]["name"].startswith("fabricwatch-ledger-ddl-")]
    assert ddl["data"]["cluster-ddl.sql"] == generate()
    record = _module(DEPLOY / "clickhouse" / "record_migrations.py")
    assert ddl["data"]["schema-migrations.sql"] == record.generate(), \
        "run `python deploy/clickhouse/record_migrations.py`"
    job = one(docs, "Job", "fabricwatch-ledger-ddl")
    [volume] = [v for v in job["spec"]["template"]["spec"]["volumes"] if "configMap" in v]
    assert volume["configMap"]["name"] == ddl["metadata"]["name"]
    script = job["spec"]["template"]["spec"]["containers"][0]["command"][-1]
    assert script.index("cluster-ddl.sql") < script.index("schema-migrations.sql")
    # the workers wait for the version the Job records
    wait = [d for d in find(build("k8s/overlays/100k"), "ConfigMap")
            if d["metadata"]["name"].startswith("fabricwatch-ledger-wait-")]
    assert int(wait[0]["data"]["LEDGER_SCHEMA_VERSION"]) == load_migrations()[-1].version


def test_the_clickhouse_cluster_is_what_the_ddl_expects() -> None:
    docs = build("clickhouse")
    chi = one(docs, "ClickHouseInstallation", "fabricwatch")
    [cluster] = chi["spec"]["configuration"]["clusters"]
    assert cluster["layout"]["shardsCount"] >= 1 and cluster["layout"]["replicasCount"] >= 2
    keeper = one(docs, "ClickHouseKeeperInstallation", "fabricwatch-keeper")
    assert keeper["spec"]["configuration"]["clusters"][0]["layout"]["replicasCount"] % 2 == 1
    [node] = chi["spec"]["configuration"]["zookeeper"]["nodes"]
    assert node["host"] == f"keeper-{keeper['metadata']['name']}"


def test_topic_bytes_measurement_is_recorded() -> None:
    import json

    figures = json.loads((DEPLOY / "strimzi" / "topic-bytes.json").read_text())
    counters = figures["per_step"]["fabric.counters"]
    assert figures["ports"] > 100_000 and counters["zstd_bytes"] < counters["bytes"]
    assert "machine" in figures and figures["command"].startswith("python deploy/strimzi/")


def _resolve(group: click.Group, args: list[str]) -> click.Context:
    """Parse ``args`` down the command tree as click would, without running anything
    (the groups on the way take no options, so the first token names the sub-command)."""
    ctx = click.Context(group, info_name="fabricwatch")
    command: click.Command = group
    rest = list(args)
    while isinstance(command, click.Group):
        name, rest = rest[0], rest[1:]
        sub = command.get_command(ctx, name)
        assert sub is not None, (name, args)
        ctx, command = click.Context(sub, info_name=name, parent=ctx), sub
    return command.make_context(ctx.info_name, rest, parent=ctx.parent)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_fabricwatch_command_line_parses(overlay: str) -> None:
    from fabricwatch.cli import main

    docs = build(overlay)
    env = env_configmap(docs)
    seen = set()
    for _workload, spec in pod_specs(docs):
        for c in spec["containers"]:
            if c.get("command") != ["fabricwatch"]:
                continue
            args = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in c["args"]]
            ctx = _resolve(main, args)
            seen.add(ctx.command.name)
    assert seen == {"worker", "runbook-worker", "ibdiags", "opensm", "ingest", "evidence-worker"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_runbook_controller_reads_a_valid_inventory_with_no_secrets(overlay: str) -> None:
    from workflows.adapters.device_inventory import DeviceInventory

    docs = build(overlay)
    [inv_map] = [d for d in find(docs, "ConfigMap")
                 if d["metadata"]["name"].startswith("fabricwatch-inventory-")]
    text = inv_map["data"]["inventory.yaml"]
    inventory = DeviceInventory.model_validate(yaml.safe_load(text))  # the loader's model
    assert any(e.ufm is not None for e in inventory.devices.values())
    assert not re.search(r"^\s*(password|token)\s*:", text, re.MULTILINE)
    workers = 0
    for workload, spec in pod_specs(docs):
        for c in spec["containers"]:
            if c.get("args", [None])[0] != "runbook-worker":
                continue
            workers += 1
            path = c["args"][c["args"].index("--inventory") + 1]
            mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
            volumes = {v["name"]: v for v in spec["volumes"]}
            [name] = [n for n, v in volumes.items()
                      if v.get("configMap", {}).get("name") == inv_map["metadata"]["name"]]
            assert path == f"{mounts[name]}/inventory.yaml", workload["metadata"]["name"]
    assert workers == 2


def test_the_runbook_role_can_replace_nodes_and_nothing_more() -> None:
    docs = build("k8s/overlays/100k")
    role = one(docs, "ClusterRole", "fabricwatch-runbooks-nodes")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"],
                              "verbs": ["get", "list", "update"]}]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_stream_worker_reads_the_plan_of_the_configuration(overlay: str) -> None:
    """The cable plan is part of the deployment's configuration: the stream worker has
    FABRICWATCH_PLAN_PATH pointing into the config component's plan ConfigMap, mounted."""

    docs = build(overlay)
    for name in ("fabricwatch-streams", "fabricwatch-streams-traps"):  # the breaker's SU sizes
        _reads_the_plan(docs, one(docs, "StatefulSet", name))


def _reads_the_plan(docs: list[dict[str, Any]], streams: dict[str, Any]) -> None:
    from streams.topology.plan import load_plan

    spec = streams["spec"]["template"]["spec"]
    [worker] = [c for c in spec["containers"] if c["name"] == "worker"]
    [path] = [e["value"] for e in worker["env"] if e["name"] == "FABRICWATCH_PLAN_PATH"]
    folder, name = path.rsplit("/", 1)
    [mount] = [m for m in worker["volumeMounts"] if m["mountPath"] == folder]
    assert mount.get("readOnly") is True
    [volume] = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    [plan_map] = [d for d in find(docs, "ConfigMap")
                  if d["metadata"]["name"] == volume["configMap"]["name"]
                  and d["metadata"].get("namespace") == streams["metadata"].get("namespace")]
    assert plan_map["metadata"]["name"].startswith("fabricwatch-plan-")
    assert load_plan(plan_map["data"][name]).columns[:4] == (
        "a_device", "a_port", "b_device", "b_port")
    # the settings take the path the manifest gives
    assert str(Settings(plan_path=path).plan_path) == path


def test_a_plan_that_lists_no_cable_stops_the_stream_worker(tmp_path: Path) -> None:
    # the shipped placeholder: checks against it would pass with nothing checked
    from streams.app import StreamsApp
    from streams.topology.plan import PlanError

    plan = tmp_path / "plan.csv"
    plan.write_text((DEPLOY / "k8s" / "components" / "config" / "plan.csv").read_text())
    settings = Settings(plan_path=plan, fabric="prod", state_dir=tmp_path / "state")
    with pytest.raises(PlanError, match="lists no cable"):
        StreamsApp(settings, Policy())


def test_a_plan_without_its_fabric_named_stops_the_stream_worker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan applies to FABRICWATCH_FABRIC's events only: on the default name a worker
    of another fabric would skip the miswire, degraded-link and hot-uplink checks unseen."""
    from streams.app import StreamsApp
    from streams.topology.plan import PlanError

    plan = tmp_path / "plan.csv"
    plan.write_text("a_device,a_port,b_device,b_port\nleaf-su01-r1,1,spine-01,1\n")
    monkeypatch.delenv("FABRICWATCH_FABRIC", raising=False)
    monkeypatch.setenv("FABRICWATCH_PLAN_PATH", str(plan))
    monkeypatch.setenv("FABRICWATCH_STATE_DIR", str(tmp_path / "state"))
    with pytest.raises(PlanError, match="set FABRICWATCH_FABRIC"):
        StreamsApp(Settings(), Policy())
    monkeypatch.setenv("FABRICWATCH_FABRIC", "lab")  # named, even as the default: its call
    sa = StreamsApp(Settings(), Policy())
    assert sa.engine.context.fabric == "lab"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_runbooks_evidence_queue_is_the_fabric_agents(overlay: str) -> None:
    """The dispatcher routes the evidence activity to the queue the fabric agent serves, and
    the agent may reach the Temporal frontend; the runbook workers mount no device."""
    docs = build(overlay)
    env = env_configmap(docs)
    queue = env["FABRICWATCH_TEMPORAL__EVIDENCE_TASK_QUEUE"]
    assert queue and queue != env["FABRICWATCH_TEMPORAL__TASK_QUEUE"]
    for name in ("fabricwatch-runbook-worker", "fabricwatch-dispatcher"):
        spec = one(docs, "Deployment", name)["spec"]["template"]["spec"]
        assert not [v for v in spec.get("volumes", []) if "hostPath" in v], name
    egress = one(docs, "NetworkPolicy", "fabric-agent-egress")
    ports = {p["port"] for rule in egress["spec"]["egress"] for p in rule.get("ports", [])}
    assert 7233 in ports
