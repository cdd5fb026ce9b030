"""``runbook-worker --check / --probe-partner``: the policy's commands, then the options."""

from __future__ import annotations

import pytest

from fabricwatch.commands.runbook import check_options
from schemas.policy import CheckCommand, Policy


def test_options_override_the_policy_and_default_takes_the_documented_template() -> None:
    policy = Policy.from_mapping({"fabricHealth": {"probation": {
        "checks": {"nccl-allreduce-baseline": {"argv": ["old"], "scale": 16, "size": 8}},
        "partners": {1: "node0009"}}}})
    commands, partners = check_options(policy, (
        "ib_write_bw-per-rail=default",
        "nccl-allreduce-baseline=/opt/site/nccl-canary --rail {rail} 'two words'"),
        ("2=node0010",))
    bw = commands["ib_write_bw-per-rail"]
    assert isinstance(bw, CheckCommand) and bw.both_directions
    assert bw.argv[:4] == ["ib_write_bw", "-d", "{hca}", "-i"]
    nccl = commands["nccl-allreduce-baseline"]
    # split into words (never given to a shell), the policy's size and scale kept
    assert nccl.argv == ["/opt/site/nccl-canary", "--rail", "{rail}", "two words"]
    assert (nccl.scale, nccl.size) == (16, 8)
    assert partners == {1: "node0009", 2: "node0010"}


@pytest.mark.parametrize("checks,partners", [
    (("no-equals",), ()),
    (("x=",), ()),
    (("counters-clean-24h=default",), ()),  # no documented default for it
    (("x=unclosed 'quote",), ()),
    ((), ("two=node1",)),
    ((), ("1=node;rm",)),
])
def test_bad_options_exit_2(checks: tuple[str, ...], partners: tuple[str, ...]) -> None:
    with pytest.raises(SystemExit) as info:
        check_options(Policy(), checks, partners)
    assert info.value.code == 2
