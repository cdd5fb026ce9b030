"""opensm.conf audit: the real default file, a hardened file, and each violation."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabricwatch.audit import AuditInputError, audit_opensm, render
from fabricwatch.audit.findings import Finding
from fabricwatch.audit.opensm import KNOWN_KEYS, parse_opensm
from schemas import Severity

GOLDEN = Path(__file__).parents[2] / "golden" / "audit" / "opensm"
DEFAULT_CONF = (Path(__file__).resolve().parents[2] / "fixtures" / "opensm"
                / "opensm-3.3.23-default.conf")
HARDENED_SECRETS = ("9a3f5c7e2b1d4e6f", "5ec2e7a1b4c93d08", "7d41c0ffee9b2a63")


def _default_text() -> str:
    return DEFAULT_CONF.read_text()


def _rules(findings: list[Finding]) -> list[tuple[str, int | None]]:
    return sorted((f.rule, f.line) for f in findings)


def test_default_conf_has_each_expected_finding() -> None:
    findings = audit_opensm(_default_text(), str(DEFAULT_CONF), fat_tree=True,
                            plan_expects_qos=True)
    # The line numbers are those of the real opensm 3.3.23 default file.
    assert _rules(findings) == [
        ("OSM001", 8),    # m_key 0x0000000000000000
        ("OSM002", 14),   # m_key_protection_level 0
        ("OSM003", 11),   # m_key_lease_period 0
        ("OSM004", 22),   # sm_key 0x0000000000000001
        ("OSM005", 25),   # sa_key 0x0000000000000001
        ("OSM006", 228),  # routing_engine (null) on a fat tree
        ("OSM007", 321),  # sm_priority 0
        ("OSM008", 514),  # qos FALSE where the plan expects QoS
    ]
    by_rule = {f.rule: f for f in findings}
    assert by_rule["OSM002"].severity == "critical"  # level 0: the key itself is readable
    assert by_rule["OSM001"].evidence["value"] == "0x****0000"


def test_default_conf_without_plan_facts_reports_routing_and_qos_as_unknown() -> None:
    findings = audit_opensm(_default_text(), "opensm.conf")
    assert {f.rule for f in findings} == {"OSM001", "OSM002", "OSM003", "OSM004", "OSM005",
                                          "OSM006", "OSM007", "OSM008"}
    unknown = {f.rule: f for f in findings if f.rule in ("OSM006", "OSM008")}
    assert all("unknown" in f.reason for f in unknown.values())
    assert unknown["OSM006"].severity == Severity.WARNING
    assert unknown["OSM008"].severity == Severity.INFO


def test_default_conf_on_a_known_non_fat_tree_without_qos_leaves_out_routing_and_qos() -> None:
    rules = {f.rule for f in audit_opensm(_default_text(), "opensm.conf", fat_tree=False,
                                          plan_expects_qos=False)}
    assert rules == {"OSM001", "OSM002", "OSM003", "OSM004", "OSM005", "OSM007"}


def test_a_pinned_routing_engine_on_an_unknown_topology_is_not_reported() -> None:
    text = _default_text().replace("routing_engine (null)", "routing_engine updn")
    assert "OSM006" not in {f.rule for f in audit_opensm(text, "opensm.conf")}


def test_default_conf_keys_are_all_known() -> None:
    conf = parse_opensm(_default_text(), "opensm.conf")
    assert conf.findings == []
    assert set(conf.entries) <= KNOWN_KEYS
    assert len(conf.entries) > 150


def test_hardened_conf_has_no_findings() -> None:
    text = (GOLDEN / "hardened.conf").read_text()
    assert audit_opensm(text, "hardened.conf", fat_tree=True, plan_expects_qos=True) == []


def test_hardened_conf_matches_default_except_the_hardened_keys() -> None:
    default = dict(line.split(None, 1) for line in _default_text().splitlines()
                   if line.strip() and not line.startswith("#"))
    hardened = dict(line.split(None, 1) for line in (GOLDEN / "hardened.conf").read_text()
                    .splitlines() if line.strip() and not line.startswith("#"))
    changed = {k for k in default if default[k] != hardened[k]}
    assert changed == {"m_key", "m_key_lease_period", "m_key_protection_level", "sm_key",
                       "sa_key", "routing_engine", "sm_priority", "qos"}


def test_violations_golden() -> None:
    text = (GOLDEN / "violations.conf").read_text()
    findings = audit_opensm(text, "violations.conf", fat_tree=True, plan_expects_qos=True)
    assert _rules(findings) == [
        ("OSM002", 3), ("OSM006", 7), ("OSM007", 8), ("OSM008", 9), ("OSM009", 10),
        ("OSM010", 11), ("OSM011", 12), ("OSM012", 14), ("OSM013", 2), ("OSM013", 5),
        ("OSM014", 5), ("OSM015", 17), ("OSM016", 18), ("OSM017", 16),
    ]


@pytest.mark.parametrize(("line", "rule"), [
    ("part_enforce in", "OSM010"),
    ("part_enforce off", "OSM010"),
    ("console remote", "OSM011"),
    ("routing_engine minhop,ftree", "OSM006"),
])
def test_single_settings(line: str, rule: str) -> None:
    base = (GOLDEN / "hardened.conf").read_text()
    key = line.split()[0]
    text = "\n".join(ln for ln in base.splitlines() if not ln.startswith(key + " ")) + "\n" + line
    rules = {f.rule for f in audit_opensm(text, "x.conf", fat_tree=True)}
    assert rules == {rule}


def test_missing_keys_count_as_defaults() -> None:
    findings = audit_opensm("sweep_interval 10\nlmc 0\n", "min.conf", fat_tree=True)
    assert {f.rule for f in findings} >= {"OSM001", "OSM002", "OSM003", "OSM004", "OSM005",
                                          "OSM006", "OSM007", "OSM009"}
    assert all(f.line is None for f in findings)


def test_secrets_masked_in_every_format() -> None:
    secret = "0x9a3f5c7e2b1d4e6f"
    text = (GOLDEN / "hardened.conf").read_text().replace("sm_key 0x5ec2e7a1b4c93d08",
                                                          f"sm_key {secret}")
    text += f"\nm_key {secret}\n"  # a duplicate that also equals sm_key
    findings = audit_opensm(text, "leaky.conf")
    assert {"OSM014", "OSM017"} <= {f.rule for f in findings}
    for fmt in ("text", "json", "sarif"):
        out = render(findings, fmt)
        assert "9a3f5c7e2b1d4e6f" not in out.lower()
        assert "9a3f5c7e" not in out.lower()
    assert "0x****4e6f" in render(findings, "text")


@pytest.mark.parametrize("name", ["partitions/clean.conf", "nccl/clean.env",
                                  "roce/switch-qos-clean.yaml"])
def test_other_files_are_refused(name: str) -> None:
    text = (GOLDEN.parent / name).read_text()
    with pytest.raises(AuditInputError, match="opensm"):
        audit_opensm(text, name)


def test_empty_file_is_all_defaults() -> None:
    assert {f.rule for f in audit_opensm("# nothing\n", "e.conf")} >= {"OSM001", "OSM009"}


def test_a_key_value_wrapped_onto_its_own_line_is_never_echoed() -> None:
    text = "sm_priority 15\nm_key\n0x8c1f3e77a2d94b61\nm_key_protection_level 2\n"
    findings = audit_opensm(text, "wrapped.conf")
    for fmt in ("text", "json", "sarif"):
        out = render(findings, fmt)
        assert "8c1f3e77a2d94b61" not in out and "3e77" not in out
    assert ("OSM016", 3) in _rules(findings)
