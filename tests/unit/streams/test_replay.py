"""Replay: file order through the same detector code; bad lines reported, never fatal."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from schemas import ContractError, Counters, PortEvent, PortSample, Topology, TopologyLink, decode, encode
from schemas.policy import Policy
from streams.replay import replay

BASE = 1_700_002_800_000
M = 60_000


def lines() -> list[bytes]:
    out: list[bytes] = []
    for i, t in enumerate([0, 10 * M, 29 * M]):
        out.append(encode(PortEvent(id=f"t{i}", ts=BASE + t, fabric="lab", source="opensm",
                                    device="leaf-su01-r1", port=3, state="down")))
    out.append(out[-1])  # a duplicated line
    out.append(b"{not json")
    out.append(b'{"kind": "counters", "id": "x"}')
    for i in range(3):  # a counter-revealed down on another port plus two traps
        out.append(encode(Counters(id=f"c{i}", ts=BASE + i * 10_000, fabric="lab",
                                   source="gnmi", device="leaf-su01-r2",
                                   ports=[PortSample(port=9, link_downed=min(i, 1))])))
    for i, t in enumerate([11_000, 12_000]):
        out.append(encode(PortEvent(id=f"u{i}", ts=BASE + t, fabric="lab", source="opensm",
                                    device="leaf-su01-r2", port=9, state="down")))
    out.append(encode(Topology(id="topo", ts=BASE, fabric="lab", source="ibnetdiscover",
                               links=[TopologyLink(a_device="a", a_port=1, b_device="b",
                                                   b_port=2, width="1X", speed="NDR")])))
    return out


def test_replay_detections_and_errors() -> None:
    errors: list[tuple[int, ContractError]] = []
    dets = list(replay(lines(), Policy(), on_error=lambda n, e: errors.append((n, e))))
    assert [(d.detection.value, d.device, d.port) for d in dets] == [
        ("flap", "leaf-su01-r1", 3), ("flap", "leaf-su01-r2", 9),
        ("degraded_link", "a", 1), ("degraded_link", "b", 2)]
    assert [n for n, _ in errors] == [5, 6]
    assert errors[1][1].path == "ts" or errors[1][1].path


def test_replay_is_deterministic() -> None:
    a = [encode(d) for d in replay(lines(), Policy(), on_error=None)]
    b = [encode(d) for d in replay(lines(), Policy(), on_error=None)]
    assert a == b and a


def test_cli_replay(tmp_path: Path) -> None:
    src = tmp_path / "history.jsonl"
    src.write_bytes(b"\n".join(lines()) + b"\n")
    policy = tmp_path / "policy.yaml"
    policy.write_text("fabricHealth: {flapDampening: {maxLinkDowns: 3}}\n")
    cli = [str(Path(sys.executable).parent / "fabricwatch")]
    proc = subprocess.run([*cli, "replay", "--policy", str(policy), str(src)],
                          capture_output=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = [decode(x) for x in proc.stdout.splitlines()]
    assert [o.detection.value for o in out] == ["degraded_link", "degraded_link"]  # type: ignore[union-attr]
    assert b"line 5:" in proc.stderr and b"line 6:" in proc.stderr
    proc = subprocess.run([*cli, "replay", "-"], input=src.read_bytes(), capture_output=True,
                          check=False, timeout=60)
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 4
    bad = tmp_path / "bad.yaml"
    bad.write_text("fabricHealth: {flapDampening: {window: soon}}\n")
    proc = subprocess.run([*cli, "replay", "--policy", str(bad), str(src)],
                          capture_output=True, check=False, timeout=60)
    assert proc.returncode == 2 and b"flapDampening.window" in proc.stderr
