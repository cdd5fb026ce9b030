"""Finding renderers (text, JSON, SARIF 2.1.0), masking, and conversion to detections."""

from __future__ import annotations

import json
import time
from pathlib import Path

import jsonschema  # type: ignore[import-untyped]  # via kubernetes-validate (dev)
import pytest

from fabricwatch.audit import (
    RULES,
    AuditRequest,
    K8sOptions,
    NcclOptions,
    findings_to_detections,
    mask_secret,
    render_json,
    render_sarif,
    render_text,
    run_audit,
)
from fabricwatch.audit.findings import Finding, fingerprint
from schemas import Detection, decode, encode

GOLDEN = Path(__file__).parents[2] / "golden" / "audit"

# The parts of the SARIF 2.1.0 schema (sarif-schema-2.1.0.json) a consumer such as GitHub code
# scanning requires: the required properties and the enums of what we emit.
SARIF_SUBSET = {
    "type": "object",
    "required": ["version", "runs"],
    "properties": {
        "version": {"const": "2.1.0"},
        "$schema": {"type": "string", "format": "uri"},
        "runs": {"type": "array", "minItems": 1, "items": {
            "type": "object",
            "required": ["tool"],
            "properties": {
                "tool": {"type": "object", "required": ["driver"], "properties": {
                    "driver": {"type": "object", "required": ["name"], "properties": {
                        "name": {"type": "string"},
                        "rules": {"type": "array", "items": {
                            "type": "object", "required": ["id"],
                            "properties": {
                                "id": {"type": "string"},
                                "shortDescription": {"type": "object", "required": ["text"]},
                                "defaultConfiguration": {"type": "object", "properties": {
                                    "level": {"enum": ["none", "note", "warning", "error"]}}},
                            }}},
                    }}}},
                "results": {"type": "array", "items": {
                    "type": "object",
                    "required": ["message"],
                    "properties": {
                        "ruleId": {"type": "string"},
                        "ruleIndex": {"type": "integer", "minimum": 0},
                        "level": {"enum": ["none", "note", "warning", "error"]},
                        "message": {"type": "object", "required": ["text"]},
                        "locations": {"type": "array", "items": {"type": "object", "properties": {
                            "physicalLocation": {"type": "object", "properties": {
                                "artifactLocation": {"type": "object", "required": ["uri"]},
                                "region": {"type": "object", "properties": {
                                    "startLine": {"type": "integer", "minimum": 1}}},
                            }}}}},
                        "partialFingerprints": {"type": "object",
                                                "additionalProperties": {"type": "string"}},
                    }}},
            }}},
    },
}


def _all_findings() -> list[Finding]:
    return run_audit(AuditRequest(
        opensm=GOLDEN / "opensm/violations.conf",
        partitions=GOLDEN / "partitions/violations.conf",
        k8s=(GOLDEN / "k8s/violations",),
        nccl_env=GOLDEN / "nccl/violations.env",
        roce=GOLDEN / "roce/switch-qos-violations.yaml",
        fat_tree=True, plan_expects_qos=True,
        k8s_options=K8sOptions(approved_rdma_namespaces=frozenset({"train"})),
        nccl_options=NcclOptions(backend_hcas=("mlx5_0", "mlx5_1"), resweep_s=12.0)))


def test_every_rule_has_a_kind_and_summary() -> None:
    for rule_id, rule in RULES.items():
        assert rule.id == rule_id and rule.summary and rule.name


def test_sarif_structure() -> None:
    findings = _all_findings()
    log = json.loads(render_sarif(findings))
    jsonschema.validate(log, SARIF_SUBSET)
    run = log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert len(run["results"]) == len(findings)
    for result in run["results"]:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
        assert result["message"]["text"].strip()
    levels = {r["level"] for r in run["results"]}
    assert levels == {"error", "warning", "note"}


def test_sarif_of_no_findings_is_valid() -> None:
    log = json.loads(render_sarif([]))
    jsonschema.validate(log, SARIF_SUBSET)
    assert log["runs"][0]["results"] == []


def test_json_report() -> None:
    findings = _all_findings()
    doc = json.loads(render_json(findings))
    assert doc["summary"]["total"] == len(findings)
    assert doc["summary"]["critical"] + doc["summary"]["warning"] + doc["summary"]["info"] \
        == len(findings)
    first = doc["findings"][0]
    assert set(first) >= {"rule", "name", "severity", "file", "line", "reason", "fix"}


def test_every_finding_is_operator_readable() -> None:
    for f in _all_findings():
        assert f.reason.endswith(".") and f.fix.endswith((".", ")", "`")), f
        assert len(f.reason) < 400


def test_text_report() -> None:
    text = render_text(_all_findings())
    assert "violations.conf:11: critical OSM010 partition-enforcement-off" in text
    assert text.rstrip().splitlines()[-1].endswith("info")
    assert render_text([]) == "no findings\n"


@pytest.mark.parametrize(("value", "masked"), [
    ("0x9a3f5c7e2b1d4e6f", "0x****4e6f"), ("0x0", "0x****0000"), ("12345", "0x****3039"),
    ("hunter2", "***"), ("-1", "***"),
])
def test_mask_secret(value: str, masked: str) -> None:
    assert mask_secret(value) == masked


def test_findings_to_detections_round_trip() -> None:
    findings = _all_findings()
    ts = int(time.time() * 1000)
    detections = findings_to_detections(findings, fabric="lab", ts=ts)
    assert len(detections) == len(findings)
    for d in detections:
        assert isinstance(d, Detection)
        assert decode(encode(d)) == d
        assert d.device.startswith("audit/") and d.port == 0
    kinds = {d.detection.value for d in detections}
    assert kinds == {"config_posture", "ecn_pfc_misconfig"}
    # The same findings on a later run keep their episodes but get new ids.
    later = findings_to_detections(findings, fabric="lab", ts=ts + 1000)
    assert [d.episode for d in later] == [d.episode for d in detections]
    assert not {d.id for d in later} & {d.id for d in detections}
    # Findings that look alike (same rule, file and evidence) still get their own ids.
    assert len({d.id for d in detections}) == len(detections)
    assert len({d.episode for d in detections}) == len(detections)


def test_fingerprint_ignores_line_moves() -> None:
    f = _all_findings()[0]
    moved = f.model_copy(update={"line": (f.line or 0) + 10})
    assert fingerprint(moved) == fingerprint(f)
