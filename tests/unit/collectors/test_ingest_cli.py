"""``fabricwatch ingest`` without a broker: --list, --print, stdin, and bad input exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from fabricwatch.commands.ingest import ingest
from schemas import decode

FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "fixtures"
SAMPLES = Path(__file__).parent / "samples"
TOPOLOGY = str(FIXTURES / "ibnetdiscover" / "topograph-ndr-fattree.txt")
TS = "2026-11-29T17:00:00Z"


def _run(args: list[str], stdin: bytes | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(ingest, args, input=stdin)
    return result.exit_code, result.stdout, result.stderr


def test_list_names_every_format() -> None:
    code, out, _ = _run(["--list"])
    assert code == 0
    names = {line.split()[0] for line in out.splitlines()}
    assert {"ibnetdiscover", "perfquery", "opensm", "gnmic", "nccl-tests"} <= names


def test_print_writes_contract_json_lines() -> None:
    code, out, err = _run(["perfquery", str(FIXTURES / "perfquery" /
                                          "ibsim-basic-switch-port-saturated.txt"),
                           "--topology", TOPOLOGY, "--ts", TS, "--fabric", "lab1", "--print"])
    assert code == 0, err
    events = [decode(line) for line in out.splitlines()]
    assert [(e.device, e.fabric, e.ts) for e in events] == [  # type: ignore[union-attr]
        ("A09-P1-IBLEAF-04-04", "lab1", 1_795_971_600_000)]
    sample = events[0].ports[0]  # type: ignore[union-attr]
    assert sample.symbol_errors == 65535 and sample.counter_bits["symbol_errors"] == 16


def test_stdin_and_several_paths() -> None:
    text = (FIXTURES / "ibnetdiscover" / "ports-edr-mixed.txt").read_bytes()
    code, out, err = _run(["ibnetdiscover", "-", str(FIXTURES / "ibnetdiscover" /
                                                     "ports-hdr-sharp.txt"), "--print"],
                          stdin=text)
    assert code == 0, err
    assert [json.loads(line)["kind"] for line in out.splitlines()] == ["topology", "topology"]


@pytest.mark.parametrize(("args", "stdin", "where", "reason"), [
    (["perfquery", "-", "--print"], b"# Port counters: Lid 73 port 35 (CapMask: 0x1300)\n",
     "<stdin>:1:", "give the device"),
    (["iblinkinfo", "-", "--print"], b"\x89PNG\r\n\x1a\n\x00\x00", "<stdin>:3:", "NUL byte"),
    (["ibnetdiscover", "-", "--print"], b"Switch 24 \"S-1\" # \"x\" \xff\xfe\n", "<stdin>:1:",
     "not UTF-8"),
    (["opensm", str(FIXTURES / "opensm" / "ibsim-default-level-traps-128.log"), "--print"],
     None, "ibsim-default-level-traps-128.log:", "give --tz"),
    (["nccl-tests", str(FIXTURES / "perfquery" / "extended-switch-port-edr.txt"), "--print"],
     None, "extended-switch-port-edr.txt:", "not nccl-tests output"),
    (["ethtool", str(FIXTURES / "ethtool" / "mlx5-lkml-xdp-regression-k5.15-nonzero-only.txt"),
      "--print"], None, "nonzero-only.txt:", "give --device"),
])
def test_bad_input_exits_2_naming_file_line_and_reason(args: list[str], stdin: bytes | None,
                                                      where: str, reason: str) -> None:
    code, out, err = _run(args, stdin)
    assert code == 2
    assert out == ""
    assert where in err and reason in err


def test_one_bad_file_prints_nothing_at_all(tmp_path: Path) -> None:
    good = FIXTURES / "perftest" / "superbench-ib_write_bw-8M-tabs.txt"
    bad = tmp_path / "a name with 'quotes'; $(touch pwned) && `id`"
    text = good.read_text()
    bad.write_text(text[:text.index(" 8388608")])  # cut before the result row
    code, out, err = _run(["ib_write_bw", str(good), str(bad), "--print", "--ts", TS])
    assert code == 2 and out == ""
    assert f"{bad}:" in err and "no result row" in err
    assert not (tmp_path / "pwned").exists()


def test_missing_file_and_unknown_format() -> None:
    code, _, err = _run(["perfquery", "/nonexistent/perfquery.txt", "--print"])
    assert code == 2 and "/nonexistent/perfquery.txt" in err and "cannot read" in err
    code, _, err = _run(["no-such-tool", "-", "--print"], b"")
    assert code == 2 and "unknown format" in err


def test_device_names_with_metacharacters_are_data() -> None:
    name = "leaf;rm -rf /|$(reboot)`id`&"
    code, out, err = _run(["sonic", str(FIXTURES / "sonic" / "show-pfc-counters.txt"),
                           "--device", name, "--print", "--ts", TS])
    assert code == 0, err
    assert {json.loads(line)["device"] for line in out.splitlines()} == {name}


OSM_CHANGES = (
    b"Nov 29 10:00:01 123456 [7F] 0x02 -> osm_pi_rcv_process: Switch 0x2c5eab0300b87b40 "
    b"port 3 changed state from ACTIVE to DOWN\n"
    b"Nov 29 10:00:02 123456 [7F] 0x02 -> osm_pi_rcv_process: Switch 0x00000000deadbeef "
    b"port 9 changed state from ACTIVE to DOWN\n")


def test_opensm_lines_that_need_a_topology_are_explained_not_dropped() -> None:
    code, out, err = _run(["opensm", "-", "--tz", "UTC", "--year", "2026", "--print"],
                          stdin=OSM_CHANGES)
    assert code == 2 and out == ""
    assert "--topology" in err and "<stdin>:1" in err
    code, out, err = _run(["opensm", "-", "--tz", "UTC", "--year", "2026", "--print",
                           "--topology", TOPOLOGY], stdin=OSM_CHANGES)
    assert code == 0, err
    events = [decode(line) for line in out.splitlines()]
    assert [(e.device, e.port, e.state) for e in events] == [  # type: ignore[union-attr]
        ("A09-P1-IBLEAF-04-04", 3, "down")]
    assert "line 2: not placed" in err and "0x00000000deadbeef" in err


def test_a_ports_format_line_cut_inside_its_peer_is_an_error() -> None:
    text = (b"SW 12 1 0xfc6a1c0300e20000 4x NDR - CA 106 1 0x0002c90300000050 "
            b"( 'leaf-a' - 'node1 HCA-1' )\n"
            b"CA 107 1 0x0002c90300000060 4x NDR - SW 12 5 0xfc6a1c0300e20000 ( 'node2 HCA-1' - 'le\n")
    code, out, err = _run(["ibnetdiscover", "-", "--print"], stdin=text)
    assert code == 2 and out == ""
    assert "<stdin>:2" in err and "cut off" in err


@pytest.mark.parametrize(("fixture", "keep"), [
    ("extended-hca-capmask-5a00.txt", 14),     # -x, cut inside the error counters
    ("ibsim-basic-hca-capmask-1200.txt", 9),   # basic, cut after 8 counters
    ("ibsim-extended-data-only-hca.txt", 8),   # -x data counters only, cut
])
def test_a_cut_perfquery_block_is_an_error(fixture: str, keep: int) -> None:
    whole = (FIXTURES / "perfquery" / fixture).read_bytes()
    code, _, err = _run(["perfquery", "-", "--device", "d1", "--ts", TS, "--print"], whole)
    assert code == 0, err
    cut = b"\n".join(whole.splitlines()[:keep]) + b"\n"
    code, out, err = _run(["perfquery", "-", "--device", "d1", "--ts", TS, "--print"], cut)
    assert code == 2 and out == ""
    assert "<stdin>:1" in err and "cut off" in err


@pytest.mark.parametrize("cut_at", ["(Switch:A09-P1-IB", "(Switch:A10-P1-IBSPINE-02:1/16/2)2c5e"])
def test_a_ufm_link_event_cut_inside_an_end_is_an_error(cut_at: str) -> None:
    line = (SAMPLES / "ufm-event-log.log").read_text().splitlines()[0]
    assert "Link went down" in line
    code, out, _ = _run(["ufm-events", "-", "--tz", "UTC", "--print"], line.encode() + b"\n")
    assert code == 0 and len(out.splitlines()) == 2
    cut = line[: line.index(cut_at) + len(cut_at)]
    code, out, err = _run(["ufm-events", "-", "--tz", "UTC", "--print"], cut.encode() + b"\n")
    assert code == 2 and out == ""
    assert "<stdin>:1" in err and "cut off" in err
