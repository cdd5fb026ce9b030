"""partitions.conf audit: opensm's grammar, each violation, malformed lines with line numbers."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabricwatch.audit import AuditInputError, audit_partitions
from fabricwatch.audit.findings import Finding
from fabricwatch.audit.partitions import parse_partitions

GOLDEN = Path(__file__).parents[2] / "golden" / "audit" / "partitions"


def _rules(findings: list[Finding]) -> list[tuple[str, int | None]]:
    return sorted((f.rule, f.line) for f in findings)


def test_clean_has_no_findings() -> None:
    assert audit_partitions((GOLDEN / "clean.conf").read_text(), "clean.conf") == []


def test_clean_parses_membership_like_opensm() -> None:
    conf = parse_partitions((GOLDEN / "clean.conf").read_text(), "clean.conf")
    parts = {(p.name, p.line): p for p in conf.partitions}
    default = parts[("Default", 3)]
    assert default.pkey == 0x7FFF
    assert [(m.name, m.membership) for m in default.members] == [
        ("ALL", "limited"), ("ALL_SWITCHES", "full"), ("SELF", "full")]
    tenant_a = parts[("TenantA", 5)]
    assert [(m.name, m.membership, m.line) for m in tenant_a.members] == [
        ("0x0002c90300a1b2c1", "full", 6), ("0x0002c90300a1b2c2", "full", 7)]
    tenant_b = parts[("TenantB", 9)]  # defmember=full applies to members without '='
    assert {m.membership for m in tenant_b.members} == {"full"}
    storage = parts[("Storage", 11)]
    # 'limi' is a prefix of limited (opensm's strncmp); members without '=' default to limited.
    assert [m.membership for m in storage.members] == ["full", "limited", "limited",
                                                       "limited", "limited"]
    assert storage.members[-1].line == 13  # the line after a comment
    assert parts[("Storage", 14)].members == []  # an mgid= group line adds no member


def test_violations_golden() -> None:
    findings = audit_partitions((GOLDEN / "violations.conf").read_text(), "violations.conf")
    assert _rules(findings) == [
        ("PART001", 2),   # Default ... ALL=full
        ("PART002", 4),   # 0x...c1 full in TenantA and TenantB
        ("PART003", 5),   # tenant partition with ALL=full
        ("PART004", 2),   # ipoib without mtu (default partition)
        ("PART004", 4),   # ipoib without mtu (TenantB)
        ("PART005", 5),   # mtu without ipoib
        ("PART006", 8),   # P_Key 0
        ("PART006", 9),   # no ':' on the statement's first line
        ("PART006", 10),  # membership 'fulll'
        ("PART006", 10),  # bad PortGUID 'nodeA': the ';' on line 10 is lost ...
        ("PART006", 11),  # ... so line 11 is read as members: '=0x8006' membership
        ("PART006", 11),  # ... and bad PortGUID 'TenantG'
        ("PART006", 11),  # TenantE is never closed
        ("PART007", 7),   # unknown flag 'fancy'
        ("PART008", 6),   # P_Key 0x8001 under a second name
        ("PART009", 7),   # mtu=7
    ]


def test_implicit_full_default_rule() -> None:
    findings = audit_partitions((GOLDEN / "default-implicit-full.conf").read_text(), "d.conf")
    assert ("PART001", 2) in _rules(findings)


def test_defmember_full_and_high_bit_pkey_are_the_default_partition() -> None:
    # 0xffff: only the low 15 bits count, so this is 0x7fff; ALL takes defmember=full.
    findings = audit_partitions((GOLDEN / "defmember-full.conf").read_text(), "d.conf")
    assert _rules(findings) == [("PART001", 2)]


def test_default_by_name_without_pkey() -> None:
    findings = audit_partitions("Default : ALL=full, SELF=full ;\n", "d.conf")
    assert [f.rule for f in findings] == ["PART001"]


def test_both_membership_counts_as_full_for_bridging() -> None:
    text = ("Default=0x7fff : ALL=limited, SELF=full ;\n"
            "A=0x10 : 0x1000=both ;\n"
            "B=0x20 : 0x1000=full ;\n")
    findings = audit_partitions(text, "p.conf")
    assert [(f.rule, f.line, f.evidence["guid"]) for f in findings] == [
        ("PART002", 3, "0x0000000000001000")]


def test_empty_membership_is_read_as_full() -> None:
    findings = audit_partitions("Default=0x7fff : ALL= ;\n", "p.conf")
    assert {f.rule for f in findings} == {"PART001", "PART006"}


def test_bad_pkey_and_empty_flag() -> None:
    text = "A=0x10 : SELF=full ;\nB=0xzz : SELF=full ;\nC=0x30,,ipoib : SELF ;\n"
    findings = audit_partitions(text, "p.conf")
    assert _rules(findings) == [("PART006", 2), ("PART006", 3)]


def test_statement_over_several_lines_and_two_on_one_line() -> None:
    text = ("A=0x10 :\n  0x1000=full,\n  0x1001=full ; B=0x20 : 0x1000=full ;\n"
            "Default=0x7fff : ALL, SELF=full ;\n")
    conf = parse_partitions(text, "p.conf")
    assert [(p.name, p.line, [m.line for m in p.members]) for p in conf.partitions] == [
        ("A", 1, [2, 3]), ("B", 3, [3]), ("Default", 4, [4, 4])]
    assert [(f.rule, f.line) for f in audit_partitions(text, "p.conf")] == [("PART002", 3)]


def test_bad_guid_swallows_the_semicolon_like_opensm() -> None:
    text = "A=0x10 : bogus, 0x1000=full ;\nB=0x20 : 0x2000=full ;\n"
    conf = parse_partitions(text, "p.conf")
    # opensm drops the rest of line 1, ';' included, so line 2 is read as A's members.
    assert [p.name for p in conf.partitions] == ["A"]
    assert [f.line for f in conf.findings] == [1, 2, 2, 2]  # membership, GUID, unclosed


def test_comment_only_file_is_valid() -> None:
    assert audit_partitions("# no rules: opensm applies ALL=limited, SELF=full\n", "p") == []


@pytest.mark.parametrize("name", ["opensm/hardened.conf", "k8s/clean/workloads.yaml",
                                  "nccl/clean.env"])
def test_other_files_are_refused(name: str) -> None:
    with pytest.raises(AuditInputError, match="partitions.conf"):
        audit_partitions((GOLDEN.parent / name).read_text(), name)


def test_tenant_without_ipoib_where_tenants_run_ipoib() -> None:
    text = ("Default=0x7fff, ipoib, mtu=5 : ALL=limited, SELF=full ;\n"
            "A=0x10 : 0x1000=full ;\n"
            "B=0x20, ipoib, mtu=5 : 0x2000=full ;\n")
    assert audit_partitions(text, "p.conf") == []
    findings = audit_partitions(text, "p.conf", tenant_ipoib=True)
    assert [(f.rule, f.line) for f in findings] == [("PART010", 2)]
    clean = (GOLDEN / "clean.conf").read_text()
    assert audit_partitions(clean, "clean.conf", tenant_ipoib=True) == []
