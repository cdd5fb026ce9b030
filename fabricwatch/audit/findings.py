"""The audit's finding model, its rule catalogue, and the text / JSON / SARIF 2.1.0 renderers.

A finding names one rule, the file and line it was found at, a one-sentence reason an operator
understands, and the fix. Secrets read from the audited files never reach a finding: every
evidence value that came from a key field goes through :func:`mask_secret` first.

Findings also become contract ``detection`` events (:func:`findings_to_detections`) so that the
ledger shows posture drift over time: the episode is stable across runs while a finding stays.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, Literal
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field

from schemas import Action, Detection, DetectionKind, Severity

InputKind = Literal["opensm", "partitions", "k8s", "nccl", "roce"]

SEVERITY_RANK: dict[Severity, int] = {Severity.INFO: 0, Severity.WARNING: 1, Severity.CRITICAL: 2}
SARIF_LEVEL: dict[Severity, str] = {
    Severity.INFO: "note",
    Severity.WARNING: "warning",
    Severity.CRITICAL: "error",
}
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
TOOL_NAME = "fabricwatch-audit"
TOOL_URI = "https://fabricwatch.dev/audit"
TOOL_VERSION = "0.1.0"


@dataclass(frozen=True)
class Rule:
    """One check: its id, short name, default severity and what it is about."""

    id: str
    name: str
    kind: InputKind
    severity: Severity
    summary: str


def _r(rule_id: str, name: str, kind: InputKind, severity: Severity, summary: str) -> Rule:
    return Rule(rule_id, name, kind, severity, summary)


_C, _W, _I = Severity.CRITICAL, Severity.WARNING, Severity.INFO

RULES: dict[str, Rule] = {r.id: r for r in (
    # opensm.conf
    _r("OSM001", "m-key-unset", "opensm", _C, "M_Key is zero, so any host may Set(PortInfo)."),
    _r("OSM002", "m-key-protection-low", "opensm", _W, "m_key_protection_level is below 2."),
    _r("OSM003", "m-key-lease-infinite", "opensm", _W, "m_key_lease_period 0 never expires."),
    _r("OSM004", "sm-key-default", "opensm", _C, "sm_key is the well-known default 0x1."),
    _r("OSM005", "sa-key-default", "opensm", _W, "sa_key is the well-known default 0x1."),
    _r("OSM006", "routing-engine-not-fat-tree", "opensm", _W,
       "routing_engine is minhop (unset) on a fat tree."),
    _r("OSM007", "sm-priority-no-plan", "opensm", _W, "sm_priority is 0: no standby plan."),
    _r("OSM008", "qos-off", "opensm", _W, "qos is off where the plan expects QoS."),
    _r("OSM009", "partition-file-missing", "opensm", _W, "No partition_config_file."),
    _r("OSM010", "partition-enforcement-off", "opensm", _C, "P_Key enforcement is disabled."),
    _r("OSM011", "console-over-network", "opensm", _W, "The opensm console listens on TCP."),
    _r("OSM012", "ignore-other-sm", "opensm", _W, "ignore_other_sm is TRUE."),
    _r("OSM013", "weak-key", "opensm", _W, "A management key has fewer than 32 significant bits."),
    _r("OSM014", "key-reuse", "opensm", _W, "The same value is used for two management keys."),
    _r("OSM015", "unknown-key", "opensm", _I, "A key opensm 3.3 does not know."),
    _r("OSM016", "malformed-line", "opensm", _W, "A line that is not `key value`."),
    _r("OSM017", "duplicate-key", "opensm", _I, "A key set twice; the last line wins."),
    # partitions.conf
    _r("PART001", "default-partition-all-full", "partitions", _C,
       "The default partition 0x7fff makes every port a full member."),
    _r("PART002", "guid-full-in-two-tenants", "partitions", _C,
       "A port GUID is a full member of two tenants' partitions."),
    _r("PART003", "tenant-partition-all-full", "partitions", _C,
       "A tenant partition makes every port a full member."),
    _r("PART004", "ipoib-without-mtu", "partitions", _W,
       "An IPoIB partition without mtu= falls back to 2048 bytes."),
    _r("PART005", "ipoib-flags-without-ipoib", "partitions", _I,
       "mtu/rate/sl/scope given on a partition without ipoib."),
    _r("PART006", "malformed-line", "partitions", _W, "A line opensm rejects or misreads."),
    _r("PART007", "unknown-flag", "partitions", _I, "A partition flag opensm ignores."),
    _r("PART008", "duplicate-pkey", "partitions", _I, "One P_Key defined under two names."),
    _r("PART009", "bad-flag-value", "partitions", _W, "A partition flag value opensm skips."),
    _r("PART010", "tenant-partition-without-ipoib", "partitions", _W,
       "A tenant partition without ipoib where tenants run IPoIB."),
    # Kubernetes manifests
    _r("K8S001", "privileged-rdma-pod", "k8s", _C, "A GPU/RDMA workload runs privileged."),
    _r("K8S002", "host-network-rdma-pod", "k8s", _W, "A GPU/RDMA workload uses hostNetwork."),
    _r("K8S003", "excess-capabilities", "k8s", _W,
       "A GPU/RDMA workload adds NET_ADMIN or SYS_ADMIN (only IPC_LOCK is needed)."),
    _r("K8S004", "hostpath-dev-infiniband", "k8s", _C,
       "A GPU/RDMA workload mounts /dev/infiniband by hostPath."),
    _r("K8S005", "umad-issm-exposed", "k8s", _C, "umad or issm devices are exposed to pods."),
    _r("K8S006", "rdma-outside-approved-namespace", "k8s", _W,
       "RDMA resources requested outside the approved namespaces."),
    _r("K8S007", "image-not-pinned", "k8s", _W,
       "A network operator, device plugin or OFED driver image is not pinned by digest."),
    _r("K8S008", "not-a-k8s-object", "k8s", _I, "A YAML document that is no Kubernetes object."),
    # NCCL environment
    _r("NCCL001", "socket-ifname-backend", "nccl", _W,
       "NCCL_SOCKET_IFNAME points at a backend interface."),
    _r("NCCL002", "ib-hca-not-backend", "nccl", _W, "NCCL_IB_HCA names a non-backend device."),
    _r("NCCL003", "ib-hca-prefix-match", "nccl", _I,
       "An NCCL_IB_HCA entry without '=' matches more devices than it names."),
    _r("NCCL004", "roce-gid-index-unset", "nccl", _W, "RoCE without NCCL_IB_GID_INDEX."),
    _r("NCCL005", "roce-tc-unset", "nccl", _W, "RoCE without NCCL_IB_TC."),
    _r("NCCL006", "roce-tc-not-lossless", "nccl", _W,
       "NCCL_IB_TC does not map to the fabric's lossless priority."),
    _r("NCCL007", "ib-timeout-below-resweep", "nccl", _W,
       "NCCL_IB_TIMEOUT x NCCL_IB_RETRY_CNT is shorter than a fabric re-sweep."),
    _r("NCCL008", "bad-value", "nccl", _W, "An NCCL variable with a value NCCL rejects."),
    _r("NCCL009", "unknown-variable", "nccl", _I, "An NCCL_ variable NCCL does not know."),
    _r("NCCL010", "resweep-unknown", "nccl", _I,
       "The re-sweep time is unknown, so the timeout budget was not checked."),
    _r("NCCL011", "malformed-line", "nccl", _W, "A line that is not KEY=VALUE."),
    # RoCE QoS
    _r("ROCE001", "pfc-not-one-priority", "roce", _C,
       "PFC is enabled on more or fewer than one priority."),
    _r("ROCE002", "trust-not-dscp", "roce", _W, "The port trusts PCP (or nothing), not DSCP."),
    _r("ROCE003", "ecn-not-below-xoff", "roce", _W,
       "ECN marking does not start well below the PFC xoff threshold."),
    _r("ROCE004", "mtu-below-4200", "roce", _W, "MTU below 4200 bytes cannot carry 4096-byte RoCE."),
    _r("ROCE005", "pfc-watchdog-off", "roce", _W, "No PFC watchdog."),
    _r("ROCE006", "unknown-key", "roce", _I, "A QoS key fabricwatch does not know."),
    _r("ROCE007", "bad-value", "roce", _W, "A QoS value that is not what the key needs."),
    _r("ROCE008", "ecn-off", "roce", _W, "ECN marking is not configured on the lossless priority."),
)}


class Finding(BaseModel):
    """One thing wrong with one file, at one line, with the reason and the fix."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rule: str
    severity: Severity
    kind: InputKind
    file: str
    line: int | None = Field(default=None, ge=1)
    reason: str
    fix: str
    # Small, already-masked facts (key names, counts, masked values); never raw secrets.
    evidence: dict[str, str | int | float | bool | None] = Field(default_factory=dict)

    @property
    def name(self) -> str:
        return RULES[self.rule].name

    def sort_key(self) -> tuple[str, int, str]:
        return (self.file, self.line or 0, self.rule)


def finding(rule_id: str, file: str, line: int | None, reason: str, fix: str,
            severity: Severity | None = None, **evidence: str | int | float | bool | None
            ) -> Finding:
    """A finding of ``rule_id``; the severity is the rule's unless given."""
    rule = RULES[rule_id]
    return Finding(rule=rule_id, severity=severity or rule.severity, kind=rule.kind, file=file,
                   line=line, reason=reason, fix=fix, evidence=evidence)


def mask_secret(value: str) -> str:
    """A key value shown safely: ``0x****cdef`` for a number, ``***`` for anything else.

    Only the last four hex digits are kept, enough to tell two keys apart in a report.
    """
    text = value.strip()
    try:
        number = int(text, 0)
    except ValueError:
        return "***"
    if number < 0:
        return "***"
    return f"0x****{number & 0xFFFF:04x}"


def at_or_above(findings: Iterable[Finding], threshold: Severity) -> list[Finding]:
    limit = SEVERITY_RANK[threshold]
    return [f for f in findings if SEVERITY_RANK[f.severity] >= limit]


def summary(findings: Sequence[Finding]) -> dict[str, int]:
    counts = {s.value: 0 for s in (Severity.CRITICAL, Severity.WARNING, Severity.INFO)}
    for f in findings:
        counts[f.severity.value] += 1
    counts["total"] = len(findings)
    return counts


def _location(f: Finding) -> str:
    return f"{f.file}:{f.line}" if f.line else f.file


def render_text(findings: Sequence[Finding]) -> str:
    """One block per finding, most severe first within each file, and a summary line."""
    lines: list[str] = []
    for f in sorted(findings, key=Finding.sort_key):
        lines.append(f"{_location(f)}: {f.severity.value} {f.rule} {f.name}")
        lines.append(f"    why: {f.reason}")
        lines.append(f"    fix: {f.fix}")
    counts = summary(findings)
    if counts["total"] == 0:
        lines.append("no findings")
    else:
        lines.append(f"{counts['total']} findings: {counts['critical']} critical, "
                     f"{counts['warning']} warning, {counts['info']} info")
    return "\n".join(lines) + "\n"


def render_json(findings: Sequence[Finding]) -> str:
    doc = {
        "tool": TOOL_NAME,
        "version": TOOL_VERSION,
        "summary": summary(findings),
        "findings": [
            {**f.model_dump(mode="json"), "name": f.name}
            for f in sorted(findings, key=Finding.sort_key)
        ],
    }
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def fingerprint(f: Finding) -> str:
    """Stable across runs while the same rule fires on the same file and subject.

    The line is left out on purpose: inserting a comment above a finding must not make it a
    new finding. The subject is the evidence (already masked).
    """
    subject = json.dumps(f.evidence, sort_keys=True, default=str)
    raw = f"{f.rule}\0{PurePath(f.file).name}\0{subject}".encode()
    return hashlib.sha256(raw).hexdigest()[:32]


def _artifact_uri(path: str) -> str:
    return quote(PurePath(path).as_posix(), safe="/:._-~")


def render_sarif(findings: Sequence[Finding]) -> str:
    """A SARIF 2.1.0 log with one run: the rules that fired and one result per finding."""
    ordered = sorted(findings, key=Finding.sort_key)
    rule_ids = sorted({f.rule for f in ordered})
    index = {rule_id: i for i, rule_id in enumerate(rule_ids)}
    rules = [
        {
            "id": rule_id,
            "name": RULES[rule_id].name,
            "shortDescription": {"text": RULES[rule_id].summary},
            "defaultConfiguration": {"level": SARIF_LEVEL[RULES[rule_id].severity]},
            "properties": {"inputKind": RULES[rule_id].kind},
        }
        for rule_id in rule_ids
    ]
    results: list[dict[str, Any]] = []
    for f in ordered:
        physical: dict[str, Any] = {"artifactLocation": {"uri": _artifact_uri(f.file)}}
        if f.line:
            physical["region"] = {"startLine": f.line}
        results.append({
            "ruleId": f.rule,
            "ruleIndex": index[f.rule],
            "level": SARIF_LEVEL[f.severity],
            "message": {"text": f"{f.reason} Fix: {f.fix}"},
            "locations": [{"physicalLocation": physical}],
            "partialFingerprints": {"fabricwatchFinding/v1": fingerprint(f)},
            "properties": {"severity": f.severity.value, "fix": f.fix,
                           "evidence": dict(f.evidence)},
        })
    log = {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": TOOL_NAME, "version": TOOL_VERSION,
                                "informationUri": TOOL_URI, "rules": rules}},
            "results": results,
        }],
    }
    return json.dumps(log, indent=2, sort_keys=True) + "\n"


def render(findings: Sequence[Finding], fmt: str) -> str:
    if fmt == "json":
        return render_json(findings)
    if fmt == "sarif":
        return render_sarif(findings)
    return render_text(findings)


_DETECTION_ACTION: dict[Severity, Action] = {
    Severity.INFO: Action.NONE,
    Severity.WARNING: Action.TICKET,
    Severity.CRITICAL: Action.TICKET,
}


def findings_to_detections(findings: Iterable[Finding], *, fabric: str, ts: int,
                           source: str = "audit") -> list[Detection]:
    """Contract ``detection`` events for the ledger, one per finding.

    ``device`` is ``audit/<input kind>/<file name>`` and ``port`` 0: a posture finding belongs
    to a configuration file, not a port. RoCE QoS findings use ``ecn_pfc_misconfig``; the rest
    use ``config_posture``. The episode is the finding's fingerprint, the same on every run
    while the finding stays, so drift shows as episodes opening and closing; the id adds the
    run's ``ts`` so each run is recorded once (replays of the same run deduplicate).
    """
    out: list[Detection] = []
    seen: dict[str, int] = {}
    for f in sorted(findings, key=Finding.sort_key):
        fp = fingerprint(f)
        # Alike findings (same rule, file and evidence, e.g. two malformed lines) are told
        # apart by their order in the file.
        seen[fp] = seen.get(fp, 0) + 1
        if seen[fp] > 1:
            fp = f"{fp}.{seen[fp]}"
        kind = (DetectionKind.ECN_PFC_MISCONFIG if f.kind == "roce"
                else DetectionKind.CONFIG_POSTURE)
        name = PurePath(f.file).name or "input"
        device = f"audit/{f.kind}/{name}"[:200]
        device = "".join(c if " " <= c < "\x7f" or c > "\x9f" else "?" for c in device)
        evidence: dict[str, Any] = {
            "rule": f.rule, "name": f.name, "file": f.file, "line": f.line,
            "reason": f.reason, "fix": f.fix, **f.evidence,
        }
        out.append(Detection(
            id=f"audit:{fabric}:{fp}:{ts}", ts=ts, fabric=fabric, source=source,
            device=device, port=0, detection=kind, severity=f.severity,
            action=_DETECTION_ACTION[f.severity], evidence=evidence,
            episode=f"audit:{fabric}:{fp}",
        ))
    return out
