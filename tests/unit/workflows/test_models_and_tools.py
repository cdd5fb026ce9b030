"""Pure parts of the runbooks: policy -> runbook config (the 24 h default), inventory from a
topology, evidence tool argument lists (validated, never a shell)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas.events import Topology, TopologyLink
from schemas.policy import Policy
from workflows.adapters.base import AdapterRejected
from workflows.adapters.tools import CommandChecker, FabricToolsEvidence, check_name
from workflows.inventory import Inventory, rail_from_name, su_from_name
from workflows.remediation.models import PortRef, RunbookConfig, remediation_workflow_id


def test_default_clean_counter_wait_is_24h() -> None:
    cfg = RunbookConfig.from_policy(Policy(), fabric="lab", detection="flap", su_ports=2048,
                                    fabric_ports=100_000)
    assert cfg.clean_counters_wait_s == 24 * 3600
    assert cfg.ladder == ["clean-and-reseat", "swap-optic", "swap-cable", "swap-switch-port"]
    assert cfg.checks == ["ib_write_bw-per-rail", "nccl-allreduce-baseline",
                          "counters-clean-24h"]
    assert cfg.su_limit == 20 and cfg.fabric_limit == 500 and not cfg.shadow


def test_policy_drives_waits_and_shadow() -> None:
    policy = Policy.from_yaml("""
fabricHealth:
  runbook: {cleanCountersWait: 2h, stepReminder: 30m}
  shadow: {detections: [ber]}
  breaker: {maxIsolatedPortsPerSU: 5%}
""")
    ber = RunbookConfig.from_policy(policy, fabric="lab", detection="ber", su_ports=100,
                                    fabric_ports=1000)
    flap = RunbookConfig.from_policy(policy, fabric="lab", detection="flap", su_ports=100,
                                     fabric_ports=1000)
    assert ber.clean_counters_wait_s == 7200 and ber.step_reminder_s == 1800
    assert ber.shadow and not flap.shadow
    assert ber.su_limit == 5


def test_workflow_id() -> None:
    assert remediation_workflow_id("lab", "node0042/mlx5_3", 1) == "remediate/lab/node0042/mlx5_3:1"


def topo() -> Topology:
    links = [TopologyLink(a_device=f"leaf-su01-r{r}", a_port=n + 1, b_device=f"node{n:04d}/mlx5_{r}",
                          b_port=1) for r in range(2) for n in range(4)]
    links += [TopologyLink(a_device=f"leaf-su01-r{r}", a_port=40, b_device="spine-01",
                           b_port=r + 1) for r in range(2)]
    links += [TopologyLink(a_device="leaf-su02-r0", a_port=1, b_device="node0100/mlx5_0",
                           b_port=1)]
    return Topology(id="t", ts=1_700_000_000_000, fabric="lab", source="ibnetdiscover",
                    links=links, nodes=[{"name": "leaf-su01-r1", "guid": "0x248a0703002e628e",
                                         "lids": {"0": 12}}])


def test_inventory_places_ports() -> None:
    inv = Inventory()
    inv.load(topo())
    leaf = inv.port_ref("lab", "leaf-su01-r1", 3)
    assert (leaf.su, leaf.rail, leaf.node, leaf.peer_device, leaf.peer_port) == (
        "su01", 1, "node0002", "node0002/mlx5_1", 1)
    assert leaf.guid == "0x248a0703002e628e" and leaf.lid == 12
    hca = inv.port_ref("lab", "node0003/mlx5_0", 1)
    assert (hca.su, hca.rail, hca.node) == ("su01", 0, "node0003")
    spine = inv.port_ref("lab", "spine-01", 2)
    assert spine.su == "su01" and spine.node is None  # counts towards its leaf's SU
    assert inv.su_ports("su01") == 20 and inv.su_ports("su02") == 2
    assert inv.fabric_ports() == 22
    unknown = inv.port_ref("lab", "leaf-su07-r5", 9)  # not in the snapshot: the naming rule
    assert unknown.su == "su07" and unknown.rail == 5 and inv.su_ports("su07") == 100


def test_names() -> None:
    assert su_from_name("leaf-su12-r3") == "su12" and rail_from_name("leaf-su12-r3") == 3
    assert rail_from_name("node0042/mlx5_7") == 7 and su_from_name("spine-1") is None


def test_evidence_commands_are_argument_lists() -> None:
    ev = FabricToolsEvidence(ca="mlx5_0")
    port = PortRef(fabric="lab", device="leaf-su01-r1", port=17, lid=12)
    cmds = dict(ev.commands(port))
    assert cmds["perfquery"] == ["perfquery", "-C", "mlx5_0", "-x", "12", "17"]
    assert cmds["mlxlink"] == ["mlxlink", "-d", "lid-12", "-p", "17", "-m", "-e", "-c"]
    assert cmds["cable_info"] == ["mlxlink", "-d", "lid-12", "-p", "17", "--cable", "--ddm"]


@pytest.mark.parametrize("bad", [
    {"lid": None}, {"lid": 0}, {"lid": 0xC000}, {"port": 0}, {"port": 256},
    {"device": "leaf; rm -rf /"}, {"device": "-x"}, {"device": "a$(id)"},
])
def test_evidence_refuses_bad_arguments(bad: dict[str, object]) -> None:
    port = PortRef(fabric="lab", device="leaf-su01-r1", port=17, lid=12).model_copy(update=bad)
    with pytest.raises(AdapterRejected):
        FabricToolsEvidence().commands(port)


@given(st.text(min_size=1, max_size=40))
def test_check_name_never_passes_shell_or_option_text(text: str) -> None:
    try:
        value = check_name(text)
    except AdapterRejected:
        return
    assert not value.startswith("-")
    assert not set(value) & set(" ;|&$`'\"<>(){}[]*?!\\\n\t")


async def test_command_checker_runs_templates() -> None:
    checker = CommandChecker({"ib_write_bw-per-rail": ["true"], "nccl": ["false"],
                              "echo": ["echo", "{device}", "{rail}"]})
    port = PortRef(fabric="lab", device="leaf-su01-r1", port=3, rail=1)
    assert (await checker.run("ib_write_bw-per-rail", port, 0)).passed
    assert not (await checker.run("nccl", port, 0)).passed
    echoed = await checker.run("echo", port, 0)
    assert echoed.measured["output"].strip() == "leaf-su01-r1 1"
    assert (await checker.run("unconfigured", port, 0)).passed
    with pytest.raises(AdapterRejected):
        await checker.run("echo", port.model_copy(update={"device": "x;y"}), 0)
