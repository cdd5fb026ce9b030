"""RoCE QoS audit: mlnx_qos output and switch QoS YAML."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabricwatch.audit import AuditInputError, audit_roce
from fabricwatch.audit.findings import Finding

GOLDEN = Path(__file__).parents[2] / "golden" / "audit" / "roce"


def _rules(findings: list[Finding]) -> list[tuple[str, int | None]]:
    return sorted(((f.rule, f.line) for f in findings), key=lambda r: (r[0], r[1] or 0))


@pytest.mark.parametrize("name", ["mlnx_qos-clean.txt", "switch-qos-clean.yaml"])
def test_clean(name: str) -> None:
    findings, ctx = audit_roce((GOLDEN / name).read_text(), name)
    assert findings == []
    assert ctx.pfc_priorities == [3]
    assert ctx.lossless_dscps is not None and 26 in ctx.lossless_dscps


def test_mlnx_qos_dscp_map_is_read() -> None:
    _, ctx = audit_roce((GOLDEN / "mlnx_qos-clean.txt").read_text(), "q.txt")
    assert ctx.lossless_dscps == frozenset(range(24, 32))
    assert ctx.dscp_to_priority[63] == 7


def test_mlnx_qos_violations() -> None:
    findings, ctx = audit_roce((GOLDEN / "mlnx_qos-violations.txt").read_text(), "q.txt")
    assert _rules(findings) == [("ROCE001", 6), ("ROCE002", 2)]
    assert ctx.pfc_priorities == [0, 2, 6, 7]
    assert ctx.lossless_dscps is None


def test_mlnx_qos_no_pfc_is_critical() -> None:
    findings, _ = audit_roce((GOLDEN / "mlnx_qos-no-pfc.txt").read_text(), "q.txt")
    assert [(f.rule, f.severity) for f in findings] == [("ROCE001", "critical")]


def test_switch_yaml_violations() -> None:
    findings, _ = audit_roce((GOLDEN / "switch-qos-violations.yaml").read_text(), "s.yaml")
    assert _rules(findings) == [
        ("ROCE001", 6),    # leaf-su01-r1: PFC on 3 and 4
        ("ROCE001", 18),   # leaf-su01-r2: PFC on nothing
        ("ROCE002", 3),    # trust pcp
        ("ROCE003", 11),   # ECN max 400000 >= xoff 262144
        ("ROCE004", 4),    # MTU 1500
        ("ROCE005", 6),    # no watchdog (r1)
        ("ROCE005", 20),   # watchdog disabled (r2)
        ("ROCE006", 12),   # unknown key buffer_profile
        ("ROCE007", 16),   # mtu: jumbo
        ("ROCE008", 22),   # ECN disabled (r2)
    ]


def test_ecn_min_above_half_xoff() -> None:
    text = ("trust: dscp\nmtu: 9216\npfc: {priorities: [3], xoff_bytes: 1000,"
            " watchdog: {enabled: true}}\necn: {min_threshold_bytes: 600, "
            "max_threshold_bytes: 900}\n")
    findings, _ = audit_roce(text, "s.yaml")
    assert [(f.rule, f.line) for f in findings] == [("ROCE003", 4)]


@pytest.mark.parametrize("text", ["", "just text\n", "- a\n- b\n", "foo: bar\n"])
def test_not_qos_is_refused(text: str) -> None:
    with pytest.raises(AuditInputError):
        audit_roce(text, "x")


def test_sonic_config_db_clean() -> None:
    findings, ctx = audit_roce((GOLDEN / "sonic-config-db-clean.json").read_text(), "c.json")
    assert findings == []
    assert ctx.pfc_priorities == [3]
    assert ctx.lossless_dscps == frozenset({26})


def test_sonic_config_db_violations_grouped_by_port() -> None:
    text = (GOLDEN / "sonic-config-db-violations.json").read_text()
    findings, _ = audit_roce(text, "v.json")
    assert _rules(findings) == [
        ("ROCE001", 12),  # pfc_enable "3,4" (Ethernet0 and Ethernet8, one finding)
        ("ROCE002", 17),  # Ethernet8 classifies by dot1p
        ("ROCE003", 31),  # AZURE_LOSSLESS green_min 1048576 >= xoff 38912 (queue 3)
        ("ROCE003", 31),  # ... and queue 4
        ("ROCE004", 7),   # Ethernet8 mtu 1500
        ("ROCE005", 10),  # no PFC_WD, no pfcwd_sw_enable
        ("ROCE008", 17),  # Ethernet8 queue 4 has no WRED profile
        ("ROCE008", 28),  # Ethernet8 queue 3: ecn_none
    ]
    by_rule = {f.rule: f for f in findings}
    assert by_rule["ROCE001"].evidence["ports"] == 2
    assert "ports Ethernet0, Ethernet8" in by_rule["ROCE001"].reason
    assert "1048576 bytes" in by_rule["ROCE003"].reason


def test_unreadable_pfc_priorities_are_not_also_called_pfc_off() -> None:
    text = ("trust: dscp\nmtu: 9216\npfc: {priorities: \"3\", xoff_bytes: 100000,"
            " watchdog: {enabled: true}}\necn: {min_threshold_bytes: 20000, "
            "max_threshold_bytes: 50000}\n")
    findings, _ = audit_roce(text, "s.yaml")
    assert [f.rule for f in findings] == ["ROCE007"]
