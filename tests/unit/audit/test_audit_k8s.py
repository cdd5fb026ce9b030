"""Kubernetes manifest audit: RDMA workload privileges, device exposure, image pinning."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabricwatch.audit import AuditInputError, K8sOptions, audit_k8s
from fabricwatch.audit.findings import Finding
from fabricwatch.audit.k8s import audit_manifest_text

GOLDEN = Path(__file__).parents[2] / "golden" / "audit" / "k8s"
OPTIONS = K8sOptions(approved_rdma_namespaces=frozenset({"train"}))


def _rules(findings: list[Finding]) -> list[tuple[str, str, int | None]]:
    return sorted((Path(f.file).name, f.rule, f.line) for f in findings)


def test_clean_folder_has_no_findings() -> None:
    assert audit_k8s([GOLDEN / "clean"], OPTIONS) == []


def test_violations_folder() -> None:
    assert _rules(audit_k8s([GOLDEN / "violations"], OPTIONS)) == [
        ("operator.yaml", "K8S005", 46),    # ConfigMap hands out /dev/infiniband/issm0
        ("operator.yaml", "K8S007", 13),    # doca-driver image by tag (DaemonSet)
        ("operator.yaml", "K8S007", 29),    # NicClusterPolicy ofedDriver version tag
        ("operator.yaml", "K8S007", 33),    # NicClusterPolicy device plugin version tag
        ("values.yaml", "K8S008", 2),       # a Helm values file: not a Kubernetes object
        ("workloads.yaml", "K8S001", 13),   # privileged
        ("workloads.yaml", "K8S002", 8),    # hostNetwork
        ("workloads.yaml", "K8S003", 15),   # NET_ADMIN
        ("workloads.yaml", "K8S003", 15),   # SYS_ADMIN
        ("workloads.yaml", "K8S004", 26),   # hostPath /dev/infiniband
        ("workloads.yaml", "K8S005", 45),   # hostPath /dev/infiniband/umad0
        ("workloads.yaml", "K8S006", 41),   # RDMA resource in namespace research
    ]


def test_infra_namespace_is_exempt_from_workload_rules_but_not_pinning() -> None:
    findings = audit_k8s([GOLDEN / "violations" / "operator.yaml"], OPTIONS)
    # The driver DaemonSet is privileged, hostNetwork and mounts /dev/infiniband: allowed.
    assert {f.rule for f in findings} == {"K8S005", "K8S007"}


def test_sys_admin_is_critical_net_admin_warning() -> None:
    findings = audit_k8s([GOLDEN / "violations" / "workloads.yaml"], OPTIONS)
    caps = {f.evidence["capability"]: f.severity for f in findings if f.rule == "K8S003"}
    assert caps == {"NET_ADMIN": "warning", "SYS_ADMIN": "critical"}


def test_gpu_namespace_makes_plain_pods_workloads() -> None:
    text = """
apiVersion: v1
kind: Pod
metadata: {name: debug, namespace: gpu-jobs}
spec:
  containers:
    - name: shell
      image: busybox
      securityContext: {privileged: true}
"""
    assert audit_manifest_text(text, "p.yaml", K8sOptions()) == []
    findings = audit_manifest_text(text, "p.yaml",
                                   K8sOptions(gpu_namespaces=frozenset({"gpu-jobs"})))
    assert [(f.rule, f.line) for f in findings] == [("K8S001", 9)]


def test_without_approved_list_rdma_namespace_rule_is_off() -> None:
    findings = audit_k8s([GOLDEN / "violations" / "workloads.yaml"], K8sOptions())
    assert "K8S006" not in {f.rule for f in findings}


def test_statefulset_and_init_containers() -> None:
    text = """
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: train}
spec:
  template:
    spec:
      initContainers:
        - name: init
          image: busybox
          securityContext:
            capabilities: {add: [CAP_SYS_ADMIN]}
          resources: {limits: {rdma/hca_shared_devices_a: 1}}
"""
    findings = audit_manifest_text(text, "s.yaml", OPTIONS)
    assert [(f.rule, f.line, f.severity) for f in findings] == [("K8S003", 12, "critical")]


@pytest.mark.parametrize("name", ["../opensm/hardened.conf", "../nccl/clean.env"])
def test_not_a_manifest_is_refused(name: str) -> None:
    with pytest.raises(AuditInputError):
        audit_k8s([GOLDEN / name], OPTIONS)


def test_bad_yaml_reports_its_line() -> None:
    with pytest.raises(AuditInputError) as info:
        audit_manifest_text("apiVersion: v1\nkind: Pod\nmetadata: [unclosed\n", "b.yaml",
                            OPTIONS)
    assert info.value.line is not None and "not valid YAML" in str(info.value)


def test_values_file_alone_is_refused() -> None:
    with pytest.raises(AuditInputError, match="no Kubernetes object"):
        audit_k8s([GOLDEN / "violations" / "values.yaml"], OPTIONS)


def test_deep_nesting_and_alias_bombs_do_not_crash() -> None:
    with pytest.raises(AuditInputError):
        audit_manifest_text("[" * 5000 + "]" * 5000, "deep.yaml", OPTIONS)
    bomb = "a: &a [x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(20))
    bomb += "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {k: *u}\n"
    assert audit_manifest_text(bomb, "bomb.yaml", OPTIONS) == []


@pytest.mark.parametrize("host", ["/dev", "/dev/", "/", "/dev/infiniband"])
def test_a_host_path_holding_dev_infiniband_is_flagged(host: str) -> None:
    text = f"""apiVersion: v1
kind: Pod
metadata: {{name: train-0, namespace: train}}
spec:
  containers:
  - name: main
    image: nccl:1
    resources:
      limits: {{nvidia.com/gpu: 8}}
  volumes:
  - name: devs
    hostPath: {{path: "{host}"}}
"""
    findings = audit_manifest_text(text, "p.yaml", OPTIONS)
    assert ("K8S004", 12) in [(f.rule, f.line) for f in findings]
    shm = audit_manifest_text(text.replace(f'"{host}"', '"/dev/shm"'), "p.yaml", OPTIONS)
    assert "K8S004" not in [f.rule for f in shm]
