"""`fabricwatch sim` commands through click's runner: files written, bad input refused with
exit code 2, controller commands, faults queued for a running simulator."""

from __future__ import annotations

from pathlib import Path

import orjson
from click.testing import CliRunner

from collectors.ibnetdiscover import parse_ibnetdiscover
from fabricwatch.cli import main
from schemas import Counters, PortEvent, decode
from sim.controller import SimController
from sim.faults import parse_spec
from sim.telemetry import Simulator
from sim.topology import generate


def test_topology_command_writes_files(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["sim", "topology", "--preset", "lab", "--out",
                                       str(tmp_path), "--fault", "missing_link:leaf-su01-r0:2"])
    assert result.exit_code == 0, result.output
    fab = generate("lab")
    assert (tmp_path / "ibnetdiscover.txt").read_text() == fab.to_ibnetdiscover()
    assert (tmp_path / "plan.csv").read_text() == fab.to_plan_csv()
    seen = parse_ibnetdiscover((tmp_path / "discovered.txt").read_text(), fabric="lab", ts=0)
    assert len(seen.links) == len(fab.links) - 1
    assert (tmp_path / "faults.txt").read_text() == "missing_link:leaf-su01-r0:2\n"


def test_bad_input_exits_2(tmp_path: Path) -> None:
    runner = CliRunner()
    for args in (["sim", "topology", "--preset", "nope", "--out", str(tmp_path)],
                 ["sim", "topology", "--out", str(tmp_path), "--fault", "flap:x"],
                 ["sim", "run", "--print", "--interval", "0s"],
                 ["sim", "run", "--print", "--speedup", "-1"],
                 ["sim", "inject", "bogus:spec:1", "--state-dir", str(tmp_path)],
                 ["sim", "isolate", "leaf", "99999", "--state-dir", str(tmp_path)]):
        result = runner.invoke(main, args)
        assert result.exit_code == 2, (args, result.output)


def test_run_print_emits_contract_lines(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["sim", "run", "--preset", "lab", "--print",
                                       "--duration", "30s", "--speedup", "0", "--fault",
                                       "flap:leaf-su01-r1:1,at=12s", "--state-dir",
                                       str(tmp_path)])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    events = [decode(line.encode()) for line in lines]
    assert sum(isinstance(e, Counters) for e in events) == 3 * 22
    assert [(e.device, e.state) for e in events if isinstance(e, PortEvent)] == [
        ("leaf-su01-r1", "down"), ("leaf-su01-r1", "up")]


def test_controller_commands(tmp_path: Path) -> None:
    runner = CliRunner()
    state = ["--state-dir", str(tmp_path)]
    out = runner.invoke(main, ["sim", "isolate", "leaf-su01-r0", "3", *state])
    assert orjson.loads(out.stdout)["result"] is True
    out = runner.invoke(main, ["sim", "status", *state])
    assert orjson.loads(out.stdout)["isolated"] == ["leaf-su01-r0:3"]
    out = runner.invoke(main, ["sim", "repair", "leaf-su01-r0", "3", "swap-switch-port", *state])
    assert isinstance(orjson.loads(out.stdout)["fixed"], bool)
    out = runner.invoke(main, ["sim", "reset-counters", "leaf-su01-r0", "3", *state])
    assert orjson.loads(out.stdout)["result"] == 1
    assert SimController(tmp_path).is_isolated("leaf-su01-r0", 3)


def test_inject_reaches_a_running_simulator(tmp_path: Path) -> None:
    ctl = SimController(tmp_path)
    ctl.inject("degraded_width:leaf-su01-r0:4")  # queued before the simulator: not replayed
    s = Simulator(generate("lab"), controller=SimController(tmp_path),
                  start_ms=1_790_000_000_000, probe_every=0, topology_every=0)
    s.run_steps(2)
    result = CliRunner().invoke(main, ["sim", "inject", "flap:leaf-su01-r2:1,at=5s",
                                       "--state-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    events = [e for out in s.run_steps(2) for e in out.events() if isinstance(e, PortEvent)]
    assert [(e.device, e.port, e.state, e.ts - s.start_ms) for e in events] == [
        ("leaf-su01-r2", 1, "down", 20_001 + 5_000), ("leaf-su01-r2", 1, "up", 27_001)]
    assert not any(f.kind == "degraded_width" for f in s.faults)
    ctl.inject("flap:no-such-switch:1")  # parses, but this fabric has no such switch
    s.run_steps(1)
    assert s.rejected and "no-such-switch" in s.rejected[0][0]
    assert parse_spec(s.faults[-1].spec()).kind == "flap"


def test_commands_are_checked_against_the_fabric_a_run_recorded(tmp_path: Path) -> None:
    runner = CliRunner()
    state = ["--state-dir", str(tmp_path)]
    ran = runner.invoke(main, ["sim", "run", "--preset", "lab", "--print", "--duration", "10s",
                               "--speedup", "0", "--fix-chance", "clean-and-reseat=1",
                               *state])
    assert ran.exit_code == 0, ran.output
    for args in (["sim", "isolate", "nosuch", "3"], ["sim", "isolate", "leaf-su01-r1", "999"],
                 ["sim", "reset-counters", "nosuch", "2"],
                 ["sim", "repair", "leaf-su01-r1", "2", "bogus-rung"],
                 ["sim", "inject", "flap:leaf-su09-r0:1"]):
        result = runner.invoke(main, [*args, *state])
        assert result.exit_code == 2, (args, result.output)
    assert runner.invoke(main, ["sim", "isolate", "leaf-su01-r1", "2", *state]).exit_code == 0
    fixed = runner.invoke(main, ["sim", "repair", "leaf-su01-r1", "2", "clean-and-reseat",
                                 *state])
    assert fixed.exit_code == 0 and orjson.loads(fixed.stdout)["fixed"] is True  # chance 1
    assert runner.invoke(main, ["sim", "run", "--print", "--fix-chance", "swap-optic=2",
                                *state]).exit_code == 2


def test_faults_that_would_not_show_are_refused(tmp_path: Path) -> None:
    fabric = generate("lab")
    for spec in ("degraded_width:leaf-su01-r1:3,width=8X",
                 "degraded_width:leaf-su01-r1:3,width=4X",
                 "degraded_speed:leaf-su01-r1:3,speed=ndr",
                 "ber:node0002/mlx5_1:1,raw=-1",
                 "spine_reboot:spine-su01-s1,bounces=-1",
                 "flap:leaf-su01-r1:1,count=0,every=60s"):
        try:
            parse_spec(spec).check(fabric)
        except ValueError as exc:
            assert str(exc) and "at not negative" not in str(exc)
        else:
            raise AssertionError(f"{spec} was accepted")
    parse_spec("degraded_width:leaf-su01-r1:3,width=2X").check(fabric)


def test_run_places_jobs_and_refuses_bad_ones(tmp_path: Path) -> None:
    runner = CliRunner()
    state = ["--state-dir", str(tmp_path)]
    result = runner.invoke(main, ["sim", "run", "--preset", "lab", "--duration", "10s",
                                  "--speedup", "0", "--print", "--jobs", "1",
                                  "--job", "train=node[0003-0004]", *state])
    assert result.exit_code == 0, result.output
    jobs = [m for m in map(orjson.loads, result.stdout.splitlines()) if m.get("kind") == "job"]
    assert {(j["job"], tuple(j["nodes"])) for j in jobs} == {
        ("sim-job-1", ("node0001",)), ("train", ("node0003", "node0004"))}
    for bad, fragment in (("train=node[0003-", "never closed"), ("train", "NAME=HOSTLIST"),
                          ("x=node9999", "no node"), ("x=node0001", "already runs")):
        result = runner.invoke(main, ["sim", "run", "--preset", "lab", "--duration", "10s",
                                      "--speedup", "0", "--print", "--jobs", "1", "--job", bad,
                                      *state])
        assert result.exit_code == 2 and fragment in result.output, (bad, result.output)
