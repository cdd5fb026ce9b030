"""Helpers of the deploy tests: build the kustomizations, load manifests, validate them offline.

Kubernetes kinds are validated with kubernetes-validate (the OpenAPI schemas of Kubernetes
1.37 it ships, strict: unknown fields fail); the operators' kinds with the reduced CRD
schemas in ``crds/`` (see crds/README.md), closed the way the API server closes structural
schemas.
"""

from __future__ import annotations

import copy
import functools
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
CRDS = Path(__file__).resolve().parent / "crds"
K8S_VERSION = "1.37"

# kustomization directories -> what they build
KUSTOMIZATIONS = {
    "k8s/base": DEPLOY / "k8s" / "base",
    "k8s/fabric-agent": DEPLOY / "k8s" / "fabric-agent",
    "k8s/overlays/10k": DEPLOY / "k8s" / "overlays" / "10k",
    "k8s/overlays/100k": DEPLOY / "k8s" / "overlays" / "100k",
    "k8s/overlays/1m": DEPLOY / "k8s" / "overlays" / "1m",
    "strimzi/base": DEPLOY / "strimzi" / "base",
    "strimzi/1m": DEPLOY / "strimzi" / "1m",
    "clickhouse": DEPLOY / "clickhouse",
}
# which Kafka topics each worker overlay runs against
OVERLAY_KAFKA = {"10k": "strimzi/base", "100k": "strimzi/base", "1m": "strimzi/1m"}

Doc = dict[str, Any]


def kubectl() -> str:
    path = shutil.which("kubectl")
    if path is None:
        raise RuntimeError("kubectl (with its built-in kustomize) is needed to build the overlays")
    return path


@functools.cache
def build(name: str) -> tuple[Doc, ...]:
    """``kubectl kustomize`` of one kustomization, as parsed documents (offline, no cluster)."""
    directory = KUSTOMIZATIONS[name]
    out = subprocess.run([kubectl(), "kustomize", str(directory)], check=True,
                         capture_output=True, timeout=120)
    return tuple(d for d in yaml.safe_load_all(out.stdout) if d)


def load_all(path: Path) -> list[Doc]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def find(docs: tuple[Doc, ...] | list[Doc], kind: str, name: str | None = None) -> list[Doc]:
    return [d for d in docs if d["kind"] == kind
            and (name is None or d["metadata"]["name"] == name)]


def one(docs: tuple[Doc, ...] | list[Doc], kind: str, name: str) -> Doc:
    [doc] = find(docs, kind, name)
    return doc


def env_configmap(docs: tuple[Doc, ...]) -> dict[str, str]:
    """The generated fabricwatch-env ConfigMap's data (names carry kustomize's hash)."""
    maps = [d for d in docs if d["kind"] == "ConfigMap"
            and d["metadata"]["name"].startswith("fabricwatch-env-")]
    data: dict[str, str] = maps[0]["data"]
    return data


def container_env(container: Doc) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


# -- validation ------------------------------------------------------------------------------

@functools.cache
def crd_schemas() -> dict[tuple[str, str], Doc]:
    """(apiVersion, kind) -> the closed openAPIV3Schema of that CRD version."""
    out: dict[tuple[str, str], Doc] = {}
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schema = close(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
            out[(f"{group}/{version['name']}", kind)] = schema
    return out


def close(schema: Doc) -> Doc:
    """Reject unknown fields like the API server does for a structural schema."""
    if schema.get("type") == "object" and "properties" in schema \
            and not schema.get("x-kubernetes-preserve-unknown-fields") \
            and "additionalProperties" not in schema:
        schema["additionalProperties"] = False
    for value in schema.get("properties", {}).values():
        close(value)
    if isinstance(schema.get("items"), dict):
        close(schema["items"])
    return schema


def validate(doc: Doc) -> None:
    """Raise on a document that the API server (with its CRDs installed) would refuse."""
    key = (doc.get("apiVersion", ""), doc.get("kind", ""))
    schema = crd_schemas().get(key)
    if schema is not None:
        jsonschema.validate(doc, schema)
        for pod_spec in embedded_pod_specs(doc):
            kubernetes_validate.validate(
                {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "template"},
                 "spec": pod_spec}, K8S_VERSION, strict=True)
        for claim in embedded_claim_specs(doc):
            kubernetes_validate.validate(
                {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                 "metadata": {"name": "template"}, "spec": claim}, K8S_VERSION, strict=True)
        return
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def embedded_pod_specs(doc: Doc) -> list[Doc]:
    templates = doc.get("spec", {}).get("templates", {})
    return [t["spec"] for t in templates.get("podTemplates", []) if "spec" in t]


def embedded_claim_specs(doc: Doc) -> list[Doc]:
    templates = doc.get("spec", {}).get("templates", {})
    return [t["spec"] for t in templates.get("volumeClaimTemplates", [])]


def pod_specs(docs: tuple[Doc, ...] | list[Doc]) -> list[tuple[Doc, Doc]]:
    """(workload, pod spec) of every Deployment, StatefulSet, DaemonSet and Job."""
    out = []
    for d in docs:
        if d["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
            out.append((d, d["spec"]["template"]["spec"]))
    return out
