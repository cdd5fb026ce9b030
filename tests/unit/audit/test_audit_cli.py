"""``fabricwatch audit`` end to end through click: formats, exit codes, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from fabricwatch.cli import main

GOLDEN = Path(__file__).parents[2] / "golden" / "audit"
DEFAULT_CONF = (Path(__file__).resolve().parents[2] / "fixtures" / "opensm"
                / "opensm-3.3.23-default.conf")


def _run(*args: str | Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["audit", *map(str, args)])
    return result.exit_code, result.stdout, result.stderr


def test_clean_inputs_exit_0() -> None:
    code, out, _ = _run(
        "--opensm", GOLDEN / "opensm/hardened.conf", "--fat-tree", "--plan-expects-qos",
        "--partitions", GOLDEN / "partitions/clean.conf",
        "--k8s", GOLDEN / "k8s/clean", "--approved-rdma-namespace", "train",
        "--nccl-env", GOLDEN / "nccl/clean.env", "--resweep-s", "12",
        "--backend-hca", "mlx5_0", "--backend-hca", "mlx5_1", "--backend-hca", "mlx5_2",
        "--backend-hca", "mlx5_3",
        "--roce", GOLDEN / "roce/mlnx_qos-clean.txt")
    assert (code, out) == (0, "no findings\n")


def test_a_plain_opensm_conf_alone_still_reports_the_topology_settings() -> None:
    # What a new user runs first: no plan, no topology flags.
    code, out, _ = _run("--opensm", DEFAULT_CONF, "--format", "json")
    assert code == 1
    by_rule = {f["rule"]: f for f in json.loads(out)["findings"]}
    assert {"OSM006", "OSM008"} <= set(by_rule)
    assert by_rule["OSM006"]["evidence"]["topology"] == "unknown"
    assert "unknown" in by_rule["OSM006"]["reason"] and "--fat-tree" in by_rule["OSM006"]["fix"]
    assert by_rule["OSM008"]["evidence"]["plan"] == "unknown"
    assert by_rule["OSM008"]["severity"] == "info"
    # said, either way: judged as before, and silent where the answer makes it right
    code, out, _ = _run("--opensm", DEFAULT_CONF, "--format", "json", "--not-fat-tree",
                        "--plan-without-qos")
    assert not {"OSM006", "OSM008"} & {f["rule"] for f in json.loads(out)["findings"]}


def test_default_opensm_conf_exits_1_with_sarif() -> None:
    code, out, _ = _run("--opensm", DEFAULT_CONF, "--format", "sarif", "--fat-tree",
                        "--plan-without-qos")
    assert code == 1
    log = json.loads(out)
    assert log["version"] == "2.1.0"
    assert {r["ruleId"] for r in log["runs"][0]["results"]} == {
        "OSM001", "OSM002", "OSM003", "OSM004", "OSM005", "OSM006", "OSM007"}


@pytest.mark.parametrize(("fail_on", "code"), [
    ("info", 1), ("warning", 0), ("critical", 0), ("never", 0)])
def test_fail_on_with_info_only(tmp_path: Path, fail_on: str, code: int) -> None:
    env = tmp_path / "job.env"
    env.write_text("NCCL_IB_TIMOUT=22\n")  # a typo: one info finding
    assert _run("--nccl-env", env, "--transport", "ib", "--fail-on", fail_on)[0] == code


@pytest.mark.parametrize(("fail_on", "code"), [
    ("warning", 1), ("critical", 0), ("never", 0)])
def test_fail_on_with_warnings(fail_on: str, code: int) -> None:
    args = ("--nccl-env", GOLDEN / "nccl/violations.env", "--transport", "ib")
    assert _run(*args, "--fail-on", fail_on)[0] == code


@pytest.mark.parametrize(("flag", "name"), [
    ("--opensm", "partitions/clean.conf"),
    ("--partitions", "opensm/hardened.conf"),
    ("--nccl-env", "opensm/hardened.conf"),
    ("--roce", "nccl/clean.env"),
    ("--k8s", "roce/mlnx_qos-clean.txt"),
])
def test_wrong_file_for_flag_exits_2(flag: str, name: str) -> None:
    code, out, err = _run(flag, GOLDEN / name)
    assert code == 2
    assert out == ""
    assert "fabricwatch audit:" in err and name.split("/")[-1] in err


def test_binary_file_exits_2(tmp_path: Path) -> None:
    blob = tmp_path / "opensm.conf"
    blob.write_bytes(b"\x7fELF\x00\x01\x02")
    code, _, err = _run("--opensm", blob)
    assert code == 2 and "binary" in err


def test_missing_file_and_no_input_exit_2() -> None:
    assert _run("--opensm", "/nonexistent/opensm.conf")[0] == 2
    assert _run()[0] == 2


def test_output_file(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    code, stdout, _ = _run("--partitions", GOLDEN / "partitions/violations.conf",
                           "--format", "json", "--output", out)
    assert code == 1 and stdout == ""
    assert json.loads(out.read_text())["summary"]["critical"] == 3
