"""Pure parts of the runbooks: policy -> runbook config (the 24 h default), inventory from a
topology, evidence tool argument lists (validated, never a shell)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.baselines import PinnedBaseline
from schemas.events import Topology, TopologyLink
from schemas.policy import CheckCommand, Policy
from workflows.adapters.base import AdapterRejected, CheckOutcome
from workflows.adapters.tools import CommandChecker, FabricToolsEvidence, check_name
from workflows.inventory import Inventory, rail_from_name, su_from_name
from workflows.remediation.models import PortRef, RunbookConfig, remediation_workflow_id
from workflows.remediation.probation import judge_probes


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


FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
IB_WRITE_BW = FIXTURES / "perftest" / "superbench-ib_write_bw-8M-tabs.txt"
ALL_REDUCE = FIXTURES / "nccl-tests" / "nris-olivia-gh200-8rank-v2.18.3.txt"
HOST_LINK = PortRef(fabric="lab", device="leaf-su01-r1", port=3, rail=1,
                    peer_device="node0001/mlx5_1", peer_port=1)


async def test_command_checker_parses_the_real_tools_output_per_direction() -> None:
    checker = CommandChecker(
        {"ib_write_bw-per-rail": CheckCommand(
            prefix=["echo-then", "{node}"], argv=["cat", str(IB_WRITE_BW)],
            both_directions=True, scale=2),
         "nccl-allreduce-baseline": CheckCommand(argv=["cat", str(ALL_REDUCE)], scale=8)},
        partners={1: "node0002"})
    runs = checker.argvs("ib_write_bw-per-rail", HOST_LINK, 0)
    assert runs == [("forward", ["echo-then", "node0001", "cat", str(IB_WRITE_BW)]),
                    ("reverse", ["echo-then", "node0002", "cat", str(IB_WRITE_BW)])]
    # the prefix is the launcher; here the test runs the tool alone
    checker = CommandChecker(
        {"ib_write_bw-per-rail": CheckCommand(argv=["cat", str(IB_WRITE_BW)],
                                              both_directions=True),
         "nccl-allreduce-baseline": CheckCommand(argv=["cat", str(ALL_REDUCE)], scale=8)},
        partners={1: "node0002"})
    bw = await checker.run("ib_write_bw-per-rail", HOST_LINK, 0)
    assert bw.passed and not bw.unconfigured
    assert [(p["run"], p["size_bytes"], p["bw_gbps"]) for p in bw.measured["probes"]] == [
        ("forward", 8388608, 201.802394), ("reverse", 8388608, 201.802394)]
    nccl = await checker.run("nccl-allreduce-baseline", HOST_LINK, 0)
    assert nccl.measured["scale"] == 8
    assert nccl.measured["probes"][-1]["size_bytes"] == 134217728
    assert nccl.measured["probes"][-1]["bw_gbps"] == 813.6


async def test_command_checker_fails_closed() -> None:
    checker = CommandChecker({"ib_write_bw-per-rail": ["ib_write_bw", "-d", "{hca}", "{peer}"],
                              "nccl-allreduce-baseline": ["false"],
                              "counters-clean-24h": ["true"],
                              "garbled": ["echo", "RDMA_Write BW Test"],
                              "missing": ["no-such-tool-anywhere"]})
    # no command at all: not run, never passed
    none = await checker.run("unconfigured", HOST_LINK, 0)
    assert not none.passed and none.unconfigured and "no command configured" in none.detail
    # a placeholder without a value (no probe partner for the rail)
    partnerless = await checker.run("ib_write_bw-per-rail", HOST_LINK, 0)
    assert partnerless.unconfigured and "no probe partner for rail 1" in partnerless.detail
    failed = await checker.run("nccl-allreduce-baseline", HOST_LINK, 0)
    assert not failed.passed and not failed.unconfigured and "exit 1" in failed.detail
    assert (await checker.run("counters-clean-24h", HOST_LINK, 0)).passed  # plain: exit 0
    missing = await checker.run("missing", HOST_LINK, 0)
    assert missing.unconfigured and "not installed" in missing.detail
    # a value that may not reach an argument list: refused before anything runs
    bad = await checker.run("nccl-allreduce-baseline",
                            HOST_LINK.model_copy(update={"device": "x;y"}), 0)
    assert bad.unconfigured and "characters a fabric tool argument may not" in bad.detail


async def test_command_checker_refuses_output_the_parser_does_not_understand() -> None:
    checker = CommandChecker({"ib_write_bw-per-rail": ["echo", "{device}"]})
    out = await checker.run("ib_write_bw-per-rail", HOST_LINK, 0)
    assert not out.passed and not out.unconfigured and "not understood" in out.detail


def _base(gbps: float, **kw: object) -> PinnedBaseline:
    args: dict[str, object] = {"fabric": "f", "rail": 1, "probe": "ib_write_bw",
                               "size_bytes": 65536, "scale": 2, "gbps": gbps,
                               "pinned_by": "ana", "pinned_ts": 1, **kw}
    return PinnedBaseline(**args)  # type: ignore[arg-type]


@given(st.lists(st.floats(0, 800, allow_nan=False), min_size=1, max_size=4),
       st.floats(1, 800, allow_nan=False), st.floats(0.01, 1, allow_nan=False))
def test_probes_pass_only_when_every_run_meets_the_slo(bws: list[float], base: float,
                                                       fraction: float) -> None:
    probes = [{"run": f"r{i}", "probe": "ib_write_bw", "size_bytes": 65536, "bw_gbps": bw}
              for i, bw in enumerate(bws)]
    got = judge_probes("ib_write_bw-per-rail", probes, rail=1, fraction=fraction,
                       lookup=lambda *_: _base(base), cable=["a:1"], scale=2)
    assert got.verdict == ("passed" if all(bw / base >= fraction for bw in bws) else "failed")
    assert len(got.measured["runs"]) == len(bws)


def test_probes_without_a_usable_baseline_are_not_judged() -> None:
    probes = [{"run": "forward", "probe": "ib_write_bw", "size_bytes": 65536, "bw_gbps": 390}]
    kw = {"rail": 1, "fraction": 0.9, "cable": ["leaf:3", "node/mlx5_1:1"], "scale": 2}
    assert judge_probes("c", probes, lookup=lambda *_: None, **kw).verdict == "unconfigured"
    own = judge_probes("c", probes, lookup=lambda *_: _base(392, links=("leaf:3",)), **kw)
    assert own.verdict == "unconfigured" and "cable under repair" in own.detail
    other = judge_probes("c", probes, lookup=lambda *_: _base(392, links=("leaf:4",)), **kw)
    assert other.verdict == "passed"
    wrong_size = judge_probes("c", probes, lookup=lambda *_: _base(392), size=1024,
                              **kw)  # type: ignore[arg-type]
    assert wrong_size.verdict == "unconfigured" and "no result at 1024 B" in wrong_size.detail
    assert judge_probes("c", [], lookup=lambda *_: _base(1), **kw).verdict == "unconfigured"


# --- the cable -------------------------------------------------------------------------------

_dev = st.from_regex(r"[a-z][a-z0-9-]{0,12}(/mlx5_[0-9])?", fullmatch=True)
_end = st.tuples(_dev, st.integers(0, 1024))


@given(_end, _end, st.text(alphabet="abcdef0123456789", min_size=1, max_size=8))
def test_cable_id_is_the_same_from_either_end(a: tuple[str, int], b: tuple[str, int],
                                              fabric: str) -> None:
    from workflows.remediation.models import cable_workflow_id

    one, other = cable_workflow_id(fabric, a, b), cable_workflow_id(fabric, b, a)
    assert one == other
    ends = one.removeprefix(f"remediate/{fabric}/").split("~")
    assert ends == sorted([f"{a[0]}:{a[1]}", f"{b[0]}:{b[1]}"])


def test_cable_id_of_a_port_without_peer() -> None:
    from workflows.remediation.models import cable_workflow_id

    assert cable_workflow_id("lab", ("leaf-su01-r1", 3), None) == "remediate/lab/leaf-su01-r1:3"
    assert cable_workflow_id("lab", ("node0001/mlx5_1", 1), ("leaf-su01-r1", 3)) == (
        "remediate/lab/leaf-su01-r1:3~node0001/mlx5_1:1")


def test_inventory_cable_isolates_the_switch_end_and_the_leaf_end() -> None:
    from schemas.policy import IsolateEnd

    inv = Inventory()
    inv.load(topo())
    for seen in (("node0002/mlx5_1", 1), ("leaf-su01-r1", 3)):
        port, peer = inv.cable("lab", *seen)
        assert port.key == "leaf-su01-r1:3" and peer is not None
        assert peer.key == "node0002/mlx5_1:1"
        assert port.guid == "0x248a0703002e628e" and port.node == "node0002"
    host, _ = inv.cable("lab", "leaf-su01-r1", 3, IsolateEnd(host_link="host"))
    assert host.key == "node0002/mlx5_1:1"
    leaf, spine = inv.cable("lab", "spine-01", 2)
    assert leaf.key == "leaf-su01-r1:40" and spine is not None and spine.key == "spine-01:2"
    upper, _ = inv.cable("lab", "leaf-su01-r1", 40, IsolateEnd(switch_link="upper"))
    assert upper.key == "spine-01:2"
    alone, none = inv.cable("lab", "leaf-su09-r1", 1)
    assert alone.key == "leaf-su09-r1:1" and none is None


def test_isolate_end_from_policy() -> None:
    policy = Policy.from_yaml("fabricHealth: {isolateEnd: {hostLink: host, switchLink: upper},"
                              " runbook: {repeatWindow: 7d, repeatHumanAfter: 4}}")
    assert policy.fabric_health.isolate_end.host_link == "host"
    cfg = RunbookConfig.from_policy(policy, fabric="lab", detection="flap", su_ports=10,
                                    fabric_ports=10)
    assert cfg.repeat_window_s == 7 * 86400 and cfg.repeat_human_after == 4
    assert cfg.repeat_next_rung_after == 2


# --- reconcile -----------------------------------------------------------------------------

def test_reconcile_reports_every_difference() -> None:
    from workflows.reconcile import Budget, OpenRunbook, compare

    runs = [OpenRunbook("remediate/f/a:1~h:1", "a:1", "su01", isolated=True, budget_held=True),
            OpenRunbook("remediate/f/b:1", "b:1", "su01", isolated=True, budget_held=True)]
    budgets = [Budget("budget/f/su01", "su", "su01", {"remediate/f/a:1~h:1": "a:1",
                                                      "remediate/f/gone": "c:1",
                                                      "remediate/f/held": "d:1"}),
               Budget("budget/f", "fabric", None, {"remediate/f/a:1~h:1": "a:1",
                                                   "remediate/f/b:1": "b:1"}),
               Budget("railhold/f/n/1", "rail", "n/1", {"remediate/f/zzz": "n/1"})]
    diffs = compare(runs, budgets, {"a:1", "d:1", "e:1"})
    kinds = sorted((d.kind, d.runbook or d.port) for d in diffs)
    assert kinds == [("closed_hold", "remediate/f/held"),
                     ("missing_grant", "remediate/f/b:1"),
                     ("not_isolated", "remediate/f/b:1"),
                     ("stale_grant", "remediate/f/gone"),
                     ("untracked_isolation", "e:1")]
    # without the controller's set nothing is called stale: the check did not run
    blind = compare(runs, budgets, None)
    assert {d.kind for d in blind} == {"unverified_grant", "missing_grant"}


def test_evidence_is_done_only_when_every_tool_ran() -> None:
    from workflows.remediation.models import EvidenceItem, evidence_outcome

    ran = EvidenceItem(tool="perfquery", exit_code=0, excerpt="# Port counters")
    errored = EvidenceItem(tool="mlxlink", exit_code=1, excerpt="-E- device not found")
    missing = EvidenceItem(tool="cable_info", end="leaf-su01-r3:5", exit_code=None,
                           excerpt="mlxcables: not installed on this host")
    assert evidence_outcome([ran, errored]) == ("done", "captured perfquery=0, mlxlink=1")
    outcome, note = evidence_outcome([ran, missing])
    assert outcome == "failed"
    assert note == ("captured perfquery=0; not captured: cable_info on leaf-su01-r3:5 "
                    "(mlxcables: not installed on this host)")
    assert evidence_outcome([]) == ("failed", "not captured: no evidence tool is configured")


async def test_a_long_check_heartbeats_while_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    from temporalio.testing import ActivityEnvironment

    from workflows.remediation import activities as acts_mod
    from workflows.remediation.activities import FabricActivities
    from workflows.remediation.models import CheckInput

    class Slow:
        async def run(self, check: str, port: PortRef, since_ms: int) -> CheckOutcome:
            await asyncio.sleep(0.2)
            return CheckOutcome(True, "slow but fine")

    monkeypatch.setattr(acts_mod, "HEARTBEAT_EVERY_S", 0.02)
    acts = FabricActivities(records=None, controller=None, evidence=None,  # type: ignore[arg-type]
                            checker=Slow(), fencer=None, ticketing=None)  # type: ignore[arg-type]
    env = ActivityEnvironment()
    beats: list[object] = []
    env.on_heartbeat = lambda *details: beats.append(details)
    out = await env.run(acts.run_check, CheckInput(workflow_id="w", port=HOST_LINK,
                                                   check="counters-clean-24h", since_ms=0))
    assert out.passed and out.detail == "slow but fine"
    assert len(beats) >= 4  # the first, then one every 20 ms while the check ran
