"""NCCL environment audit: interfaces, HCAs, RoCE traffic class and the timeout budget."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabricwatch.audit import AuditInputError, AuditRequest, NcclOptions, audit_nccl, run_audit
from fabricwatch.audit.findings import Finding
from fabricwatch.audit.nccl import IB_TIMEOUT_UNIT_S, parse_env_file

GOLDEN = Path(__file__).parents[2] / "golden" / "audit"
HCAS = ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")


def _rules(findings: list[Finding]) -> list[tuple[str, int | None]]:
    return sorted(((f.rule, f.line) for f in findings), key=lambda r: (r[0], r[1] or 0))


def test_clean_env_with_clean_roce_has_no_findings() -> None:
    request = AuditRequest(nccl_env=GOLDEN / "nccl/clean.env",
                           roce=GOLDEN / "roce/mlnx_qos-clean.txt",
                           nccl_options=NcclOptions(backend_hcas=HCAS, resweep_s=12.0))
    assert run_audit(request) == []


def test_env_file_syntax() -> None:
    env, bad = parse_env_file((GOLDEN / "nccl/clean.env").read_text(), "clean.env")
    assert bad == []
    assert env.values["NCCL_SOCKET_IFNAME"] == ("=eth0", 2)  # after `export`
    assert env.values["NCCL_DEBUG"] == ("WARN", 8)  # quotes removed


def test_violations_golden() -> None:
    request = AuditRequest(
        nccl_env=GOLDEN / "nccl/violations.env", roce=GOLDEN / "roce/mlnx_qos-clean.txt",
        nccl_options=NcclOptions(backend_hcas=("mlx5_0", "mlx5_1", "mlx5_10", "mlx5_11"),
                                 resweep_s=12.0))
    assert _rules(run_audit(request)) == [
        ("NCCL001", 2),     # NCCL_SOCKET_IFNAME=ib0
        ("NCCL002", 3),     # mlx5_bond_0 is not a backend HCA
        ("NCCL003", 3),     # mlx5_1 without '=' also selects mlx5_10, mlx5_11
        ("NCCL004", 1),     # RoCE without NCCL_IB_GID_INDEX: a missing variable, the top
        ("NCCL006", 4),     # NCCL_IB_TC=0 is DSCP 0, not the lossless class
        ("NCCL007", 5),     # 4.096 us * 2^14 * 7 = 0.47 s < 12 s
        ("NCCL009", 7),     # NCCL_IB_TIMOUT (typo)
        ("NCCL011", 8),     # not KEY=VALUE
    ]


def test_timeout_budget_arithmetic() -> None:
    text = "NCCL_IB_TIMEOUT=20\nNCCL_IB_RETRY_CNT=7\n"
    budget = IB_TIMEOUT_UNIT_S * 2**20 * 7
    assert 30.0 < budget < 30.1
    assert audit_nccl(text, "e.env", NcclOptions(resweep_s=30.0)) == []
    findings = audit_nccl(text, "e.env", NcclOptions(resweep_s=31.0))
    assert [f.rule for f in findings] == ["NCCL007"]
    assert "Raise NCCL_IB_TIMEOUT to 21" in findings[0].fix


def test_defaults_apply_when_unset() -> None:
    # NCCL's defaults (20, 7) tolerate ~30 s; a 40 s re-sweep is longer.
    findings = audit_nccl("NCCL_DEBUG=INFO\n", "e.env", NcclOptions(resweep_s=40.0))
    assert [(f.rule, f.line) for f in findings] == [("NCCL007", 1)]


def test_no_retries_is_fixed_by_retries_not_by_the_timeout_it_has() -> None:
    findings = audit_nccl("NCCL_IB_TIMEOUT=22\nNCCL_IB_RETRY_CNT=0\n", "e.env",
                          NcclOptions(resweep_s=10.0))
    assert [f.rule for f in findings] == ["NCCL007"]
    assert findings[0].fix.startswith("Set NCCL_IB_RETRY_CNT to 7")
    assert "NCCL_IB_TIMEOUT to" not in findings[0].fix  # 17 s x 7 already covers 10 s


def test_resweep_unknown_is_reported_not_guessed() -> None:
    findings = audit_nccl("NCCL_IB_TIMEOUT=14\n", "e.env", NcclOptions())
    assert [f.rule for f in findings] == ["NCCL010"]


def test_out_of_range_values() -> None:
    findings = audit_nccl((GOLDEN / "nccl/bad-range.env").read_text(), "b.env", NcclOptions())
    assert _rules(findings) == [("NCCL008", 1)]
    findings = audit_nccl("NCCL_IB_TC=300\n", "b.env", NcclOptions(transport="roce"))
    assert ("NCCL008", 1) in _rules(findings)


def test_pod_spec() -> None:
    findings = audit_nccl((GOLDEN / "nccl/pod.yaml").read_text(), "pod.yaml",
                          NcclOptions(transport="roce", resweep_s=5.0))
    assert _rules(findings) == [("NCCL004", 9), ("NCCL005", 9)]  # the container's line
    assert findings[0].evidence["context"] == "Pod train/trainer-0 container trainer"


def test_lossless_class_from_roce_dscp_map() -> None:
    # The switch YAML maps DSCP 48 to priority 6; PFC on 6 makes TC 194 (DSCP 48) right.
    opts = NcclOptions(lossless_dscps=frozenset({48}))
    assert audit_nccl("NCCL_IB_GID_INDEX=3\nNCCL_IB_TC=194\n", "e.env", opts) == []
    assert [f.rule for f in audit_nccl("NCCL_IB_GID_INDEX=3\nNCCL_IB_TC=106\n", "e.env",
                                       opts)] == ["NCCL006"]


def test_infiniband_needs_no_roce_settings() -> None:
    assert audit_nccl("NCCL_IB_HCA==mlx5_0\n", "e.env", NcclOptions(transport="ib")) == []


def test_exclusion_lists_are_not_judged() -> None:
    text = "NCCL_SOCKET_IFNAME=^ib,docker\nNCCL_IB_HCA=^mlx5_9\n"
    assert audit_nccl(text, "e.env", NcclOptions(backend_hcas=HCAS)) == []


@pytest.mark.parametrize("name", ["opensm/hardened.conf", "partitions/clean.conf",
                                  "roce/mlnx_qos-clean.txt"])
def test_other_files_are_refused(name: str) -> None:
    with pytest.raises(AuditInputError):
        audit_nccl((GOLDEN / name).read_text(), name, NcclOptions())


def test_yaml_without_pods_is_refused() -> None:
    with pytest.raises(AuditInputError):
        audit_nccl("just: yaml\n", "x.yaml", NcclOptions())


def test_pod_env_from_config_map_in_the_same_file() -> None:
    text = """
apiVersion: v1
kind: ConfigMap
metadata: {name: nccl, namespace: train}
data:
  NCCL_IB_GID_INDEX: "3"
  NCCL_IB_TC: "0"
---
apiVersion: batch/v1
kind: Job
metadata: {name: allreduce, namespace: train}
spec:
  template:
    spec:
      containers:
        - name: a
          image: x
          envFrom: [{configMapRef: {name: nccl}}]
          env: [{name: NCCL_IB_TC, value: "106"}]
        - name: b
          image: x
          envFrom: [{configMapRef: {name: nccl}}]
"""
    findings = audit_nccl(text, "job.yaml", NcclOptions(transport="roce", resweep_s=1.0))
    # Container a overrides the ConfigMap's TC; container b inherits TC 0 from line 7.
    assert [(f.rule, f.line, f.evidence["context"]) for f in findings] == [
        ("NCCL006", 7, "Job train/allreduce container b")]
