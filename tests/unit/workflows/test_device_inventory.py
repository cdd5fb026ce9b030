"""The controllers' device inventory: the loader, its refusals, the port-list parser."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workflows.adapters.base import AdapterRejected
from workflows.adapters.device_inventory import (
    InventoryError,
    load_device_inventory,
    parse_ports,
)

GOOD = """
version: 1
credentials:
  sonic-admin: {{username: admin, password_file: {tmp}/sonic-password}}
  ufm-api: {{username_file: {tmp}/ufm-user, password_file: {tmp}/ufm-password}}
ufm:
  default: {{url: "https://ufm.mgmt.example/", credentials: ufm-api}}
devices:
  leaf-su01-r3:
    sonic:
      url: "https://leaf-su01-r3.mgmt.example"
      credentials: sonic-admin
      interfaces: {{1: Ethernet0, 8: Ethernet32}}
  leaf-su02-r0:
    sonic: {{url: "https://10.1.2.3:8443", interface_template: "Ethernet{{port}}", ports: "1-4,9"}}
  ib-leaf-su01-r1:
    ufm: {{guid: "0x248A0703002E628E", ports: "1-40"}}
"""


def write(tmp: Path, text: str, name: str = "inventory.yaml") -> Path:
    (tmp / "sonic-password").write_text("pw1\n")
    (tmp / "ufm-user").write_text("fabricwatch\n")
    (tmp / "ufm-password").write_text("pw2\n")
    path = tmp / name
    path.write_text(text.format(tmp=tmp))
    return path


def test_a_good_inventory_answers_for_what_it_lists(tmp_path: Path) -> None:
    inv = load_device_inventory(write(tmp_path, GOOD))
    sw, name = inv.sonic("leaf-su01-r3", 8)
    assert name == "Ethernet32" and sw.url == "https://leaf-su01-r3.mgmt.example"
    assert inv.sonic("leaf-su02-r0", 9)[1] == "Ethernet9"
    instance, dev = inv.ufm_port("ib-leaf-su01-r1", 40)
    assert (instance, dev.guid) == ("default", "248a0703002e628e")
    assert inv.ufm["default"].url == "https://ufm.mgmt.example"
    user, password = inv.login("ufm-api", None, "UFM")
    assert (user, password.get_secret_value()) == ("fabricwatch", "pw2")
    with pytest.raises(AdapterRejected, match="names no interface for port 2"):
        inv.sonic("leaf-su01-r3", 2)
    with pytest.raises(AdapterRejected, match="names no interface for port 5"):
        inv.sonic("leaf-su02-r0", 5)
    with pytest.raises(AdapterRejected, match="not a SONiC device"):
        inv.sonic("ib-leaf-su01-r1", 1)
    with pytest.raises(AdapterRejected, match="not a UFM device"):
        inv.ufm_port("leaf-su01-r3", 1)
    with pytest.raises(AdapterRejected, match="not one of"):
        inv.ufm_port("ib-leaf-su01-r1", 41)


def test_json_is_read_too(tmp_path: Path) -> None:
    path = tmp_path / "inv.json"
    path.write_text('{"devices": {"sw1": {"ufm": {"guid": "248a0703002e628e", "ports": [1, 2]}}},'
                    ' "ufm": {"default": {"url": "http://u"}}}')
    assert load_device_inventory(path).ufm_port("sw1", 2)[1].ports == {1, 2}


@pytest.mark.parametrize(("text", "why"), [
    ("devices:\n  sw1:\n    sonic: {url: 'https://a', interfaces: {1: Eth0},"
     " password: hunter2}\n", "secrets are given by reference only"),
    ("credentials:\n  c: {username: a, password: hunter2}\ndevices: {}\n",
     "secrets are given by reference only"),
    ("devices:\n  sw1:\n    sonic: {url: 'https://a'}\n", "give interfaces"),
    ("devices:\n  sw1:\n    sonic: {url: 'https://a', interface_template: 'Ethernet{port}'}\n",
     "interface_template needs ports"),
    ("devices:\n  sw1:\n    sonic: {url: 'https://a', interface_template: 'Eth', ports: 1}\n",
     "must contain {port}"),
    ("devices:\n  sw1:\n    sonic: {url: 'https://a', interfaces: {1: 'Eth 0;rm'}}\n",
     "not a SONiC interface name"),
    ("devices:\n  sw1:\n    sonic: {url: 'https://u:p@a', interfaces: {1: Eth0}}\n",
     "without credentials"),
    ("devices:\n  sw1:\n    sonic: {url: 'https://a', credentials: nope, interfaces: {1: E0}}\n",
     "credentials 'nope' are not defined"),
    ("devices:\n  sw1:\n    ufm: {guid: '0x12', ports: 1}\n", "not a node GUID"),
    ("devices:\n  sw1:\n    ufm: {guid: '248a0703002e628e', ports: 1}\n",
     "UFM instance 'default' is not defined"),
    ("ufm: {default: {url: 'https://u'}}\n"
     "devices:\n  sw1:\n    ufm: {guid: '248a0703002e628e'}\n", "ports is required"),
    ("devices:\n  sw1: {}\n", "give sonic or ufm"),
    ("devices:\n  'a b': {ufm: {guid: '248a0703002e628e', ports: 1}}\n", "not a device name"),
    ("devices: [1, 2]\n", "devices"),
    ("- not a mapping\n", "is a mapping"),
    ("devices: {\n", "not valid YAML"),
])
def test_bad_inventories_are_refused_with_the_reason(tmp_path: Path, text: str,
                                                     why: str) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text(text)
    with pytest.raises(InventoryError) as info:
        load_device_inventory(path)
    assert why in str(info.value) and str(path) in str(info.value)
    assert "hunter2" not in str(info.value)


def test_an_unreadable_secret_file_fails_at_login_without_the_secret(tmp_path: Path) -> None:
    inv = load_device_inventory(write(tmp_path, GOOD))
    (tmp_path / "ufm-password").unlink()
    with pytest.raises(InventoryError, match="cannot read the UFM"):
        inv.login("ufm-api", None, "UFM")
    with pytest.raises(InventoryError, match="no credentials"):
        inv.login(None, None, "SONiC sw1")


@given(st.sets(st.integers(min_value=1, max_value=4096), min_size=1, max_size=60))
def test_parse_ports_reads_back_what_a_range_list_says(ports: set[int]) -> None:
    # write the set as runs ("1-3,7"), then in a list with single numbers mixed in
    nums = sorted(ports)
    runs: list[str] = []
    start = prev = nums[0]
    for n in [*nums[1:], -1]:
        if n == prev + 1:
            prev = n
            continue
        runs.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = n
    assert parse_ports(",".join(runs)) == ports
    assert parse_ports([int(r) if r.isdigit() else r for r in runs]) == ports


@given(st.text(max_size=12) | st.text(alphabet="0123456789-, \t\n١", max_size=12))
def test_parse_ports_accepts_only_port_syntax(text: str) -> None:
    try:
        got = parse_ports(text)
    except ValueError:
        return
    assert got and all(1 <= p <= 4096 for p in got)
    assert set(text) <= set("0123456789-, \t")


@pytest.mark.parametrize("bad", ["0", "4097", "5-3", "1-", "x", "", [], [True], "1;2"])
def test_parse_ports_refuses(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_ports(bad)  # type: ignore[arg-type]
