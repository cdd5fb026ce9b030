"""The policy model: the operators' YAML shape, documented defaults, errors with paths."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from fabricwatch.cli import main
from schemas import ContractError
from schemas.policy import Policy, parse_duration_s, parse_fraction

ARCHITECTURE_EXAMPLE = """
fabricHealth:
  flapDampening:
    window: 30m
    maxLinkDowns: 2               # the 3rd down within 30 min isolates the port
    action: isolatePort
  degradedLink:
    expectWidth: 4X
    expectSpeed: NDR
    action: isolatePort
  breaker:
    maxIsolatedPortsPerSU: 1%
  repairLadder: [clean-and-reseat, swap-optic, swap-cable, swap-switch-port]
  returnToService: [ib_write_bw-per-rail, nccl-allreduce-baseline, counters-clean-24h]
"""


def test_architecture_example_loads_with_defaults_filled() -> None:
    policy = Policy.from_yaml(ARCHITECTURE_EXAMPLE)
    health = policy.fabric_health
    assert health.flap_dampening.window == 1800.0
    assert health.flap_dampening.max_link_downs == 2
    assert health.breaker.max_isolated_ports_per_su == pytest.approx(0.01)
    assert health.repair_ladder[-1] == "swap-switch-port"
    # sections the file does not give come from the documented defaults
    assert health.ber.fec == "PLR" and health.ber.media == "optic"
    assert health.drop_rate.max_drop_rate == 1e-12
    assert health.stream.allowed_lateness == 60.0
    assert health.runbook.clean_counters_wait == 86400.0
    assert Policy.from_yaml(policy.to_yaml()) == policy


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("fabricHealth: {flapDampening: {window: soon}}", "fabricHealth.flapDampening.window"),
        ("fabricHealth: {flapDampening: {maxLinkDowns: -1}}",
         "fabricHealth.flapDampening.maxLinkDowns"),
        ("fabricHealth: {breaker: {maxIsolatedPortsPerSU: 150%}}",
         "fabricHealth.breaker.maxIsolatedPortsPerSU"),
        ("fabricHealth: {degradedLink: {expectWidth: 3X}}", "fabricHealth.degradedLink.expectWidth"),
        ("fabricHealth: {flapDampening: {windw: 30m}}", "fabricHealth.flapDampening.windw"),
        ("fabricHealth: {repairLadder: []}", "fabricHealth.repairLadder"),
    ],
)
def test_bad_policy_names_the_offending_path(text: str, path: str) -> None:
    with pytest.raises(ContractError) as info:
        Policy.from_yaml(text)
    assert info.value.path == path


def test_not_a_mapping_or_not_yaml() -> None:
    with pytest.raises(ContractError, match="mapping"):
        Policy.from_yaml("- a\n- b\n")
    with pytest.raises(ContractError, match="YAML"):
        Policy.from_yaml("fabricHealth: [unclosed")


@pytest.mark.parametrize(("text", "seconds"), [("500ms", 0.5), ("60s", 60), ("30m", 1800),
                                               ("24h", 86400), ("7d", 604800), (90, 90)])
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration_s(text) == seconds


@pytest.mark.parametrize(("text", "fraction"), [("1%", 0.01), ("0.5%", 0.005), (0.25, 0.25)])
def test_fractions(text: object, fraction: float) -> None:
    assert parse_fraction(text) == pytest.approx(fraction)


def test_policy_check_cli(tmp_path: Path) -> None:
    good = tmp_path / "policy.yaml"
    good.write_text(ARCHITECTURE_EXAMPLE)
    result = CliRunner().invoke(main, ["policy", "check", str(good)])
    assert result.exit_code == 0, result.output
    assert "maxLinkDowns: 2" in result.output and "symbolWindowFactors" in result.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("fabricHealth: {flapDampening: {window: soon}}")
    result = CliRunner().invoke(main, ["policy", "check", str(bad)])
    assert result.exit_code == 2
    assert "fabricHealth.flapDampening.window" in result.output


def test_policy_check_prints_a_link_types_thresholds(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["policy", "check", "--speed", "NDR", "--fec", "PLR",
                                       "--media", "active"])
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "7nm NDR, FEC PLR" in out and "V05" in out
    assert "pre-FEC BER 1e-05 5e-06 1e-06" in out
    assert "post-FEC BER 1e-11 5e-12 1e-12" in out
    assert "symbol errors over 12 min: error above 1e-14" in out
    assert "symbol errors over 125 min: error above 1e-15" in out
    assert "drop_rate" in out
    own = tmp_path / "policy.yaml"
    own.write_text("fabricHealth: {ber: {media: copper, warningAction: page}}")
    result = CliRunner().invoke(main, ["policy", "check", "--policy", str(own), "--speed", "HDR"])
    assert result.exit_code == 0, result.output
    assert "7nm HDR, FEC PLR" in result.output and "ber_warning (page)" in result.output
    assert "pre-FEC BER 1e-07 5e-08 1e-08" in " ".join(result.output.split())


def test_policy_check_unknown_link_type_exits_2() -> None:
    for args, says in ((["--speed", "QDR"], "no 7nm row for speed 'QDR'"),
                       (["--fec", "turbo"], "unknown FEC mode 'turbo'"),
                       (["--media", "wet-string"], "unknown media 'wet-string'"),
                       (["--asic", "3nm"], "unknown ASIC '3nm'")):
        result = CliRunner().invoke(main, ["policy", "check", *args])
        assert result.exit_code == 2, args
        assert says in result.output, result.output


def test_ber_policy_names_a_link_type_the_table_has() -> None:
    with pytest.raises(ContractError, match="unknown FEC mode") as info:
        Policy.from_yaml("fabricHealth: {ber: {fec: turbo}}")
    assert info.value.path == "fabricHealth.ber"
    # a speed the table has no row for (a QDR or SDR lab, XDR) loads: such links are judged
    # by the table's strictest row (tests/unit/streams/test_ber.py)
    assert Policy.from_yaml("fabricHealth: {degradedLink: {expectSpeed: QDR}}")
    with pytest.raises(ContractError, match="one factor per"):
        Policy.from_yaml("fabricHealth: {ber: {symbolWindowFactors: [1]}}")


def test_probation_defaults_and_the_waiver_needs_an_owner() -> None:
    prob = Policy().fabric_health.probation
    assert prob.slo_fraction == 0.9 and prob.probe_interval == 3600 and not prob.checks
    assert prob.waived() == {}
    with pytest.raises(ContractError, match="waivedBy") as info:
        Policy.from_yaml("fabricHealth: {probation: {waive: [nccl-allreduce-baseline]}}")
    assert info.value.path == "fabricHealth.probation"
    waived = Policy.from_yaml(
        "fabricHealth: {probation: {waive: [nccl-allreduce-baseline], waivedBy: ops-lead, "
        "waiveReason: no GPUs yet, sloFraction: 85%}}").fabric_health.probation
    assert waived.waived() == {"nccl-allreduce-baseline": "ops-lead (no GPUs yet)"}
    assert waived.slo_fraction == pytest.approx(0.85)
    with pytest.raises(ContractError, match="at least 1"):
        Policy.from_yaml("fabricHealth: {probation: {checks: {x: {argv: []}}}}")


def test_the_documented_check_templates_validate() -> None:
    from schemas.policy import DEFAULT_CHECK_TEMPLATES, CheckCommand

    for name, template in DEFAULT_CHECK_TEMPLATES.items():
        cmd = CheckCommand.model_validate(template)
        assert cmd.argv[0] in ("ib_write_bw", "all_reduce_perf"), name
    deployed = Path(__file__).resolve().parents[3] / "deploy/k8s/components/config/policy.yaml"
    checks = Policy.load(deployed).fabric_health.probation.checks
    assert checks["ib_write_bw-per-rail"].both_directions
    assert checks["nccl-allreduce-baseline"].argv[:3] == ["all_reduce_perf", "-b", "8"]
