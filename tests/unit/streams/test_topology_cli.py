"""``fabricwatch topology diff`` and ``topology plan``: formats, exit codes, bad input."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from fabricwatch.cli import main
from sim.topology import generate

FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "ibnetdiscover"
GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "topology"
SMALL = FIXTURES / "ufm-sdk-small-topo.txt"
PORTS = FIXTURES / "ports-edr-mixed.txt"


def run(*args: str | Path) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["topology", *map(str, args)])
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(autouse=True)
def _no_policy_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FABRICWATCH_POLICY_PATH", raising=False)
    monkeypatch.delenv("FABRICWATCH_PLAN_PATH", raising=False)


def test_plan_from_itself_matches_in_both_ibnetdiscover_formats(tmp_path: Path) -> None:
    for source in (SMALL, PORTS):
        code, plan_csv, _ = run("plan", "--discovered", source, "--cable-prefix", "C")
        assert code == 0 and plan_csv.startswith("a_device,a_port,b_device,b_port,cable_id")
        plan = tmp_path / f"{source.stem}.csv"
        plan.write_text(plan_csv)
        code, out, err = run("diff", "--plan", plan, "--discovered", source)
        assert (code, err) == (0, "")
        report = orjson.loads(out)
        assert report["findings"] == [] and report["summary"]["match"] is True


def test_findings_exit_1_json_and_text() -> None:
    plan = GOLDEN / "small-topo-edited-plan.csv"
    code, out, _ = run("diff", "--plan", plan, "--discovered", SMALL)
    assert code == 1
    report = orjson.loads(out)
    assert [f["kind"] for f in report["findings"]] == [
        "miswire", "miswire", "missing_link", "degraded_link", "unexpected_link"]
    assert set(report["findings"][0]) >= {"kind", "a_device", "a_port", "b_device", "b_port",
                                          "expected", "found", "swapped_with", "explanation"}
    code, out, _ = run("diff", "--plan", plan, "--discovered", SMALL, "--format", "text")
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith("miswire          r-ufm-sw95:23 <-> r-dcs96/HCA-2:1  swapped:")
    assert lines[-1].startswith("5 finding(s): 16 planned, 16 discovered, 13 as planned")


def test_json_topology_event_and_policy(tmp_path: Path) -> None:
    fabric = generate("lab")
    plan = tmp_path / "plan.csv"
    plan.write_text(fabric.to_plan_csv())
    event = fabric.to_topology(1_700_000_000_000)
    links = [x.model_copy(update={"speed": "HDR"}) if i == 0 else x
             for i, x in enumerate(event.links)]
    found = tmp_path / "topology.json"
    found.write_bytes(orjson.dumps(event.model_copy(update={"links": links}).to_wire()))
    code, out, _ = run("diff", "--plan", plan, "--discovered", found)
    assert code == 1
    (finding,) = orjson.loads(out)["findings"]
    assert finding["kind"] == "degraded_link" and "the policy expects 4X NDR" in \
        finding["explanation"]
    policy = tmp_path / "policy.yaml"
    policy.write_text("fabricHealth:\n  degradedLink: {expectWidth: 4X, expectSpeed: HDR}\n")
    code, out, _ = run("diff", "--plan", plan, "--discovered", found, "--policy", policy)
    assert code == 0 and orjson.loads(out)["summary"]["matched_links"] == len(fabric.links)


@pytest.mark.parametrize(("plan_text", "discovered", "words"), [
    ("a_device,a_port\nx,1\n", None, "plan line 1: the header lacks column(s) b_device, b_port"),
    ("a_device,a_port,b_device,b_port\nx,1,y,z\n", None, "plan line 2: b_port 'z' is not a port"),
    (None, b"\x00\x01binary", "discovered"),
    (None, b'{"kind": "port_event", "id": "x", "ts": 1, "fabric": "f", "source": "sim", '
           b'"device": "d", "port": 1, "state": "down"}', "must be a topology event, not port_event"),
    (None, b'{"kind": "topology", "id": "x", "ts": 1, "fabric": "f", "source": "sim"}',
     "links: Field required"),
    (None, b"{not json", "not valid JSON"),
    (None, b"plain words, not ibnetdiscover\n", "discovered.txt"),
])
def test_bad_input_exits_2_with_a_clear_message(tmp_path: Path, plan_text: str | None,
                                                discovered: bytes | None, words: str) -> None:
    plan = tmp_path / "plan.csv"
    plan.write_text(plan_text or "a_device,a_port,b_device,b_port\nx,1,y,1\n")
    found = tmp_path / "discovered.txt"
    if discovered is None:
        found.write_bytes(SMALL.read_bytes())
    else:
        found.write_bytes(discovered)
    code, out, err = run("diff", "--plan", plan, "--discovered", found)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and words in err, err


def test_missing_files_and_bad_policy_exit_2(tmp_path: Path) -> None:
    code, _, err = run("diff", "--plan", tmp_path / "nope.csv", "--discovered", SMALL)
    assert code == 2 and "cannot read plan" in err
    policy = tmp_path / "policy.yaml"
    policy.write_text("fabricHealth: {degradedLink: {expectWidth: 5X}}\n")
    plan = GOLDEN / "small-topo-edited-plan.csv"
    code, _, err = run("diff", "--plan", plan, "--discovered", SMALL, "--policy", policy)
    assert code == 2 and "policy" in err and "expectWidth" in err


def test_plan_from_settings_or_a_clear_error(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    code, _, err = run("diff", "--discovered", SMALL)
    assert code == 2 and "no plan: give --plan" in err
    monkeypatch.setenv("FABRICWATCH_PLAN_PATH", str(GOLDEN / "small-topo-edited-plan.csv"))
    code, out, _ = run("diff", "--discovered", SMALL)
    assert code == 1 and orjson.loads(out)["summary"]["findings"] == 5


def test_discovered_from_stdin() -> None:
    result = CliRunner().invoke(main, ["topology", "diff", "--plan",
                                       str(GOLDEN / "small-topo-edited-plan.csv"),
                                       "--discovered", "-"], input=SMALL.read_bytes())
    assert result.exit_code == 1
    assert orjson.loads(result.stdout)["summary"]["findings"] == 5
