"""Configuration posture audit: opensm.conf, partitions.conf, Kubernetes manifests, NCCL
environment and RoCE QoS, each checked against the fabric's security and lossless floor.

``run_audit(request)`` reads the files a request names and returns every finding; the parsers
raise only :class:`AuditInputError` for input that is not what its flag says.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from fabricwatch.audit.findings import (
    RULES,
    Finding,
    Rule,
    at_or_above,
    findings_to_detections,
    mask_secret,
    render,
    render_json,
    render_sarif,
    render_text,
)
from fabricwatch.audit.inputs import AuditInputError, read_text
from fabricwatch.audit.k8s import K8sOptions, audit_k8s
from fabricwatch.audit.nccl import NcclOptions, audit_nccl
from fabricwatch.audit.opensm import audit_opensm
from fabricwatch.audit.partitions import audit_partitions
from fabricwatch.audit.roce import RoceContext, audit_roce

__all__ = [
    "RULES", "AuditInputError", "AuditRequest", "Finding", "K8sOptions", "NcclOptions",
    "RoceContext", "Rule", "at_or_above", "audit_k8s", "audit_nccl", "audit_opensm",
    "audit_partitions", "audit_roce", "findings_to_detections", "mask_secret", "render",
    "render_json", "render_sarif", "render_text", "run_audit",
]


@dataclass(frozen=True)
class AuditRequest:
    """What to audit and the facts about the fabric the rules compare against."""

    opensm: Path | None = None
    partitions: Path | None = None
    k8s: tuple[Path, ...] = ()
    nccl_env: Path | None = None
    roce: Path | None = None
    fat_tree: bool | None = None  # None: the topology is unknown
    plan_expects_qos: bool | None = None  # None: the plan is unknown
    tenant_ipoib: bool = False
    k8s_options: K8sOptions = field(default_factory=K8sOptions)
    nccl_options: NcclOptions = field(default_factory=NcclOptions)

    @property
    def empty(self) -> bool:
        return not (self.opensm or self.partitions or self.k8s or self.nccl_env or self.roce)


def run_audit(request: AuditRequest) -> list[Finding]:
    """Every finding for the files of ``request``; RoCE QoS is read first so the NCCL audit
    compares ``NCCL_IB_TC`` against the lossless class that QoS defines."""
    findings: list[Finding] = []
    if request.opensm:
        findings += audit_opensm(read_text(request.opensm), str(request.opensm),
                                 fat_tree=request.fat_tree,
                                 plan_expects_qos=request.plan_expects_qos)
    if request.partitions:
        findings += audit_partitions(read_text(request.partitions), str(request.partitions),
                                     tenant_ipoib=request.tenant_ipoib)
    if request.k8s:
        findings += audit_k8s(request.k8s, request.k8s_options)
    nccl_options = request.nccl_options
    if request.roce:
        roce_findings, ctx = audit_roce(read_text(request.roce), str(request.roce))
        findings += roce_findings
        if nccl_options.lossless_dscps is None and ctx.lossless_dscps is not None:
            nccl_options = replace(nccl_options, lossless_dscps=ctx.lossless_dscps)
        if nccl_options.transport is None:
            nccl_options = replace(nccl_options, transport="roce")
    if request.nccl_env:
        findings += audit_nccl(read_text(request.nccl_env), str(request.nccl_env), nccl_options)
    return findings
