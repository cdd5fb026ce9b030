"""The host agent against fake sysfs trees built from the real sysfs and ethtool fixtures."""

from __future__ import annotations

import asyncio
import importlib.util
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors.live.host_agent import AgentConfig, AgentError, HostAgent, check_netdev
from collectors.telemetry import parse_sysfs_counters
from schemas import Counters, PortEvent, decode

_spec = importlib.util.spec_from_file_location(
    "sysfs_tree", Path(__file__).resolve().parents[2] / "sysfs_tree.py")
assert _spec is not None and _spec.loader is not None
tree = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tree)

HOST = "node0042"


def agent(sysfs: Path, **kw: Any) -> HostAgent:
    return HostAgent(AgentConfig(fabric="lab", host=HOST, sysfs_root=sysfs, **kw))


def one_round(a: HostAgent) -> tuple[Counters, list[PortEvent]]:
    events = asyncio.run(a.round())
    counters, *rest = events
    assert isinstance(counters, Counters)
    assert all(isinstance(e, PortEvent) for e in rest)
    return counters, rest  # type: ignore[return-value]


def fake_ethtool(tmp: Path, text: str | None = None) -> Path:
    """An ethtool stand-in (no NIC here) that prints the real ethtool -S capture and
    records its argv."""
    out = tmp / "ethtool-out.txt"
    out.write_text(tree.ETHTOOL_S.read_text() if text is None else text)
    script = tmp / "ethtool"
    script.write_text(f"#!/bin/sh\necho \"$@\" >> {tmp}/ethtool-argv\ncat {out}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_one_message_per_host_with_the_trees_values(tmp_path: Path) -> None:
    tree.build(tmp_path, hcas=8)
    counters, events = one_round(agent(tmp_path))
    assert events == []  # the first reading is no change
    assert counters.device == HOST and counters.source == "host_agent"
    assert [(s.device, s.port) for s in counters.ports] == [
        (f"{HOST}/mlx5_{k}", 1) for k in range(8)]
    # exactly what `fabricwatch ingest sysfs` makes of the same files
    (want,) = parse_sysfs_counters(tree.SYSFS_DUMP.read_text(), fabric="lab", ts=counters.ts,
                                   host=HOST)
    for sample in counters.ports:
        assert sample.error is None
        got = sample.model_dump(exclude={"device"})
        assert got == want.ports[0].model_dump(exclude={"device"})
    s0 = counters.ports[0]
    assert (s0.rcv_errors, s0.excessive_buffer_overrun, s0.xmit_wait) == (14, 15, 2489603687)
    assert (s0.width, s0.speed) == ("4X", "NDR")
    assert s0.model_extra is not None and s0.model_extra["state"] == "ACTIVE"
    parts = counters.split()
    assert [p.device for p in parts] == [f"{HOST}/mlx5_{k}" for k in range(8)]


def test_counters_change_between_reads_and_state_changes_are_events(tmp_path: Path) -> None:
    ib = tree.build(tmp_path, hcas=2)
    a = agent(tmp_path)
    first, _ = one_round(a)
    (ib / "mlx5_1/ports/1/counters/symbol_error").write_text("7\n")
    (ib / "mlx5_1/ports/1/counters/link_downed").write_text("1\n")
    (ib / "mlx5_1/ports/1/state").write_text("1: DOWN\n")
    (ib / "mlx5_1/ports/1/phys_state").write_text("3: Disabled\n")
    second, events = one_round(a)
    assert second.id != first.id
    assert second.ports[1].symbol_errors == 7 and second.ports[1].link_downed == 1
    assert second.ports[0].symbol_errors == 0
    assert [(e.device, e.port, e.state, e.phys_state) for e in events] == [
        (f"{HOST}/mlx5_1", 1, "down", "Disabled")]
    (ib / "mlx5_1/ports/1/state").write_text("4: ACTIVE\n")
    _, events = one_round(a)
    assert [(e.device, e.state) for e in events] == [(f"{HOST}/mlx5_1", "up")]
    _, events = one_round(a)
    assert events == []


def test_a_nic_that_disappears_is_an_error_sample_and_a_down(tmp_path: Path) -> None:
    ib = tree.build(tmp_path, hcas=3)
    a = agent(tmp_path)
    one_round(a)
    shutil.rmtree(ib / "mlx5_1")
    counters, events = one_round(a)
    assert [s.device for s in counters.ports] == [f"{HOST}/mlx5_{k}" for k in range(3)]
    gone = counters.ports[1]
    assert gone.error is not None and "mlx5_1 port 1 is no longer in" in gone.error
    assert gone.symbol_errors is None
    assert counters.ports[0].error is None and counters.ports[2].rcv_errors == 14
    assert [(e.device, e.state) for e in events] == [(f"{HOST}/mlx5_1", "down")]
    assert a.last_errors == 1


def test_unreadable_file_and_non_number(tmp_path: Path) -> None:
    ib = tree.build(tmp_path, hcas=2)
    bad = ib / "mlx5_0/ports/1/counters/port_rcv_errors"
    bad.unlink()
    bad.mkdir()  # reading a directory fails even for root
    (ib / "mlx5_1/ports/1/counters/symbol_error").write_text("12abc\n")
    counters, _ = one_round(agent(tmp_path))
    s0, s1 = counters.ports
    assert s0.error is not None and s0.error.startswith("counters/port_rcv_errors:")
    assert s0.rcv_errors is None and s0.excessive_buffer_overrun == 15  # the rest is read
    assert s1.error == "counters/symbol_error: '12abc' is not a number"
    assert s1.symbol_errors is None and s1.rcv_errors == 14


def test_roce_port_adds_ethtool_pfc_and_discards(tmp_path: Path) -> None:
    tree.build(tmp_path, hcas=2, ethernet={1})
    ethtool = fake_ethtool(tmp_path)
    counters, _ = one_round(agent(tmp_path, ethtool=str(ethtool)))
    ib_port, roce = counters.ports
    assert (tmp_path / "ethtool-argv").read_text() == "-S eth1\n"  # only the RoCE port
    assert roce.error is None
    assert roce.rx_discards_phy == 58591428329
    assert roce.pfc_pause_tx == 5745055  # tx_pause_ctrl_phy: no per-priority counters
    assert roce.xmit_discards == 0 and roce.rcv_errors == 14  # sysfs keeps its own
    assert roce.model_extra is not None and roce.model_extra["netdev"] == "eth1"
    assert roce.model_extra["link_layer"] == "Ethernet"
    assert ib_port.rx_discards_phy is None


def test_bad_netdev_name_never_reaches_ethtool(tmp_path: Path) -> None:
    ib = tree.build(tmp_path, hcas=1, ethernet={0})
    (ib / "mlx5_0/ports/1/gid_attrs/ndevs/0").write_text("-rf /\n")
    ethtool = fake_ethtool(tmp_path)
    counters, _ = one_round(agent(tmp_path, ethtool=str(ethtool)))
    assert counters.ports[0].error is not None and "not an interface name" in counters.ports[0].error
    assert not (tmp_path / "ethtool-argv").exists()
    for bad in ("-S", "a b", "../x", "x" * 16, ""):
        with pytest.raises(ValueError):
            check_netdev(bad)
    assert check_netdev("enp65s0f1np1") == "enp65s0f1np1"


def test_ethtool_failure_is_that_ports_error(tmp_path: Path) -> None:
    tree.build(tmp_path, hcas=1, ethernet={0})
    ethtool = fake_ethtool(tmp_path, text="not ethtool output at all\n")
    counters, _ = one_round(agent(tmp_path, ethtool=str(ethtool)))
    assert counters.ports[0].error is not None and "ethtool -S eth0" in counters.ports[0].error
    assert counters.ports[0].rcv_errors == 14


def test_no_tree_and_bad_host(tmp_path: Path) -> None:
    with pytest.raises(AgentError):
        agent(tmp_path).check()
    with pytest.raises(AgentError):
        HostAgent(AgentConfig(fabric="lab", host="a/b", sysfs_root=tmp_path))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.binary(max_size=64))
def test_any_file_content_is_a_value_or_that_ports_error(tmp_path_factory: pytest.TempPathFactory,
                                                        content: bytes) -> None:
    root = tmp_path_factory.mktemp("prop")
    ib = tree.build(root, hcas=2)
    (ib / "mlx5_0/ports/1/counters/port_xmit_discards").write_bytes(content)
    (ib / "mlx5_0/ports/1/state").write_bytes(content)
    counters, _ = one_round(agent(root))
    s0, s1 = counters.ports
    assert s1.error is None and s1.rcv_errors == 14
    text = content.strip()
    if text.isdigit() and text.isascii():
        assert s0.xmit_discards == int(text)
    else:
        assert s0.error is not None and s0.xmit_discards is None


def test_cli_once_print(tmp_path: Path) -> None:
    tree.build(tmp_path, hcas=8)
    proc = subprocess.run([sys.executable, "-m", "fabricwatch", "agent", "--sysfs-root",
                           str(tmp_path), "--host", HOST, "--once", "--print"],
                          capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1
    msg = decode(lines[0])
    assert isinstance(msg, Counters) and msg.device == HOST and len(msg.ports) == 8
    assert {s.rcv_errors for s in msg.ports} == {14}
    bad = subprocess.run([sys.executable, "-m", "fabricwatch", "agent", "--sysfs-root",
                          str(tmp_path / "nothing"), "--host", HOST, "--once", "--print"],
                         capture_output=True, timeout=120)
    assert bad.returncode == 2 and b"is not a directory" in bad.stderr and bad.stdout == b""


def test_netdev_from_the_pci_devices_net_folder(tmp_path: Path) -> None:
    ib = tree.build(tmp_path, hcas=1, ethernet={0})
    shutil.rmtree(ib / "mlx5_0/ports/1/gid_attrs")
    (ib / "mlx5_0/device/net/ens1f0np0").mkdir(parents=True)
    ethtool = fake_ethtool(tmp_path)
    counters, _ = one_round(agent(tmp_path, ethtool=str(ethtool)))
    assert counters.ports[0].error is None
    assert (tmp_path / "ethtool-argv").read_text() == "-S ens1f0np0\n"


def test_cli_once_print_with_an_unreadable_port_prints_and_exits_1(tmp_path: Path) -> None:
    ib = tree.build(tmp_path, hcas=2)
    (ib / "mlx5_1/ports/1/counters/link_downed").write_text("N/A\n")
    proc = subprocess.run([sys.executable, "-m", "fabricwatch", "agent", "--sysfs-root",
                           str(tmp_path), "--host", HOST, "--once", "--print"],
                          capture_output=True, timeout=120)
    assert proc.returncode == 1
    (line,) = proc.stdout.splitlines()
    msg = decode(line)
    assert isinstance(msg, Counters)
    assert [s.error for s in msg.ports] == [None, "counters/link_downed: 'N/A' is not a number"]
