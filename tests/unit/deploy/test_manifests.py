"""Every manifest under deploy/ parses and validates offline, built and as written.

The kustomizations are built with ``kubectl kustomize`` (no cluster); every resulting
object is validated against the Kubernetes 1.37 schemas (kubernetes-validate, strict) or the
reduced operator CRD schemas in crds/. A check on a deliberately broken copy shows that the
validation can fail.
"""

from __future__ import annotations

import copy
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from .manifests import DEPLOY, KUSTOMIZATIONS, build, crd_schemas, find, load_all, one, validate

YAML_FILES = sorted(
    p for sub in ("k8s", "strimzi", "clickhouse", "temporal", "monitoring")
    for p in (DEPLOY / sub).rglob("*.yaml"))


def test_kubernetes_validate_works_offline_with_its_own_schemas() -> None:
    # The package ships the schemas it validates against: no download happens here.
    assert "1.37" in {v.rsplit(".", 1)[0] for v in kubernetes_validate.utils.all_versions()}


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_yaml_file_parses(path: Path) -> None:
    docs = load_all(path)
    assert docs, f"{path} holds no document"


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
def test_every_built_object_validates(name: str) -> None:
    docs = build(name)
    assert docs
    for doc in docs:
        validate(doc)


def test_example_secrets_validate() -> None:
    docs = load_all(DEPLOY / "k8s" / "secrets.example.yaml")
    assert {d["metadata"]["name"] for d in docs} == {
        "fabricwatch-clickhouse", "fabricwatch-ufm", "fabricwatch-fabric-keys"}
    for doc in docs:
        validate(doc)


def test_the_secrets_the_workloads_reference_are_the_example_ones() -> None:
    example = {(d["metadata"]["namespace"], d["metadata"]["name"]): set(d["stringData"])
               for d in load_all(DEPLOY / "k8s" / "secrets.example.yaml")}
    referenced: set[tuple[str, str, str]] = set()
    for name in ("k8s/overlays/100k", "clickhouse"):
        for doc in build(name):
            ns = doc["metadata"].get("namespace", "")
            for ref in _secret_refs(doc):
                referenced.add((ns, *ref))
    for ns, secret, key in referenced:
        assert key in example.get((ns, secret), set()), (ns, secret, key)


def _secret_refs(node: object) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if isinstance(node, dict):
        ref = node.get("secretKeyRef")
        if isinstance(ref, dict):
            out.append((ref["name"], ref["key"]))
        secret = node.get("secret")
        if isinstance(secret, dict) and "secretName" in secret:
            out += [(secret["secretName"], item["key"]) for item in secret.get("items", [])]
        k8s_secret = [v for k, v in node.items() if k.endswith("/k8s_secret_password")]
        out += [tuple(v.split("/", 1)) for v in k8s_secret]  # type: ignore[misc]
        for value in node.values():
            out += _secret_refs(value)
    elif isinstance(node, list):
        for value in node:
            out += _secret_refs(value)
    return out


# -- the validation itself can fail -----------------------------------------------------------

def test_a_misspelt_field_in_a_workload_fails() -> None:
    sts = copy.deepcopy(one(build("k8s/overlays/100k"), "StatefulSet", "fabricwatch-streams"))
    sts["spec"]["template"]["spec"]["containers"][0]["resource"] = {}  # not "resources"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(sts)


@pytest.mark.parametrize(("kind", "name", "path", "bad"), [
    ("KafkaTopic", "fabric.counters", ("spec", "partitions"), 0),
    ("KafkaTopic", "fabric.counters", ("spec", "partition"), 12),
    ("KafkaNodePool", "brokers", ("spec", "roles"), ["broker", "zookeeper"]),
    ("Kafka", "fabricwatch", ("spec", "kafka", "listeners"), [{"name": "Plain!", "port": 9092,
                                                              "type": "internal", "tls": False}]),
])
def test_a_bad_operator_resource_fails(kind: str, name: str, path: tuple[str, ...],
                                       bad: object) -> None:
    doc = copy.deepcopy(one(build("strimzi/base"), kind, name))
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = bad
    with pytest.raises(jsonschema.ValidationError):
        validate(doc)


def test_a_bad_clickhouse_pod_template_fails() -> None:
    chi = copy.deepcopy(one(build("clickhouse"), "ClickHouseInstallation", "fabricwatch"))
    chi["spec"]["templates"]["podTemplates"][0]["spec"]["containers"][0]["imagePullPolicy"] = 3
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(chi)


def test_every_operator_kind_used_has_a_schema() -> None:
    kinds = {(d["apiVersion"], d["kind"]) for name in KUSTOMIZATIONS for d in build(name)
             if "." in d["apiVersion"].split("/")[0]
             and not d["apiVersion"].endswith("k8s.io/v1")}
    assert kinds <= set(crd_schemas()), kinds - set(crd_schemas())
    assert ("kafka.strimzi.io/v1beta2", "KafkaNodePool") in kinds
    assert ("clickhouse-keeper.altinity.com/v1", "ClickHouseKeeperInstallation") in kinds


def test_temporal_values_parse_and_pin_persistence_and_history_shards() -> None:
    values = yaml.safe_load((DEPLOY / "temporal" / "values.yaml").read_text())
    config = values["server"]["config"]
    shards = config["numHistoryShards"]
    assert shards >= 512 and shards & (shards - 1) == 0  # a power of two, set once for good
    for store in ("default", "visibility"):
        sql = config["persistence"][store]["sql"]
        assert config["persistence"][store]["driver"] == "sql"
        assert sql["existingSecret"] and "password" not in sql  # no password in the values
    for bundled in ("cassandra", "mysql", "postgresql", "elasticsearch", "prometheus", "grafana"):
        assert values[bundled]["enabled"] is False
    env = find(build("k8s/overlays/100k"), "ConfigMap")
    namespaces = {n["name"] for n in config["namespaces"]["namespace"]}
    assert any(d["data"].get("FABRICWATCH_TEMPORAL__NAMESPACE") in namespaces for d in env)
