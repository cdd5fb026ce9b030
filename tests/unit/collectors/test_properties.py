"""Property tests: whatever text or bytes come in, a parser returns events or raises ParseError.

Besides arbitrary text, the strategies mutate real fixture text (cut it, splice lines,
insert garbage) because that is where parsers are most likely to trip over their own
assumptions; and every event that does come out must survive the wire codec.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors.errors import ParseError
from collectors.formats import FORMATS, IngestOptions, parse_input
from collectors.ibnetdiscover import parse_nodes
from collectors.lidmap import LidMap
from schemas import decode, encode

FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "fixtures"
TS = 1_795_971_600_000
# The fat tree the ibsim fixtures came from, so that LIDs in the seeds resolve.
LIDS = LidMap.from_nodes(parse_nodes(
    (FIXTURES / "ibnetdiscover" / "topograph-ndr-fattree.txt").read_text()))
OPTS = IngestOptions(fabric="lab", ts=TS, device="dev", tz="UTC", year=2026, lids=LIDS,
                     job_label="batch.kubernetes.io/job-name")
# A small real sample per format, to mutate.
SEEDS: dict[str, str] = {
    "ibnetdiscover": "ibnetdiscover/manpage-voltaire-sdr-lab.txt",
    "perfquery": "perfquery/extended-switch-2ports-edr.txt",
    "ibqueryerrors": "ibqueryerrors/ibsim-injected-errors-report-port.txt",
    "iblinkinfo": "iblinkinfo/ibsim-ndr-fattree-line-mode-first120.txt",
    "opensm": "opensm/ibsim-default-level-traps-128.log",
    "sminfo": "sminfo/ibsim-master.txt",
    "saquery-sm": "saquery/ibsim-issm-ports.txt",
    "ufm-telemetry": "ufm/telemetry-fluentd-small-message.json",
    "ibstat": "ibstat/h100-ndr-ib-and-roce-some-down.txt",
    "ibstatus": "ibstatus/a100-hdr-hex-lids.txt",
    "mlxlink": "mlxlink/cx7-400g-fec-histogram-serdes.json",
    "gnmic": "gnmic/event-format-srl-interface-statistics.json",
    "ethtool": "ethtool/mlx5-lkml-xdp-regression-k5.15-nonzero-only.txt",
    "sysfs": "sysfs-infiniband/gpud-h100-mlx5_0-grep-dump.txt",
    "rdma-statistic": "rdma-statistic/sonic-issue-21891-roce-sender-mlx5.txt",
    "sflowtool": "sflowtool/ovs-mininet-flow-and-counter-samples.txt",
    "sonic": "sonic/show-pfc-counters.txt",
    "ib_write_bw": "perftest/superbench-ib_write_bw-8M-tabs.txt",
    "nccl-tests": "nccl-tests/nris-olivia-gh200-8rank-v2.18.3.txt",
    "slurm-squeue": "slurm/squeue-21.08-openapi-v0.0.37.json",
}
SAMPLES = Path(__file__).parent / "samples"
OWN_SEEDS = {"ufm-events": "ufm-event-log.log", "k8s-pods": "k8s-pods.json"}


def _seed(fmt: str) -> str:
    if fmt in OWN_SEEDS:
        return (SAMPLES / OWN_SEEDS[fmt]).read_text()
    return (FIXTURES / SEEDS[fmt]).read_text()


def _check(fmt: str, data: bytes) -> None:
    try:
        events = parse_input(fmt, data, OPTS)
    except ParseError as error:
        assert error.reason
        return
    for event in events:
        assert decode(encode(event)) == event


@pytest.mark.parametrize("fmt", list(FORMATS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(alphabet=st.characters(codec="utf-8"), max_size=400))
def test_arbitrary_text_raises_only_parse_error(fmt: str, text: str) -> None:
    _check(fmt, text.encode("utf-8", errors="replace"))


@pytest.mark.parametrize("fmt", list(FORMATS))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=300))
def test_arbitrary_bytes_raise_only_parse_error(fmt: str, data: bytes) -> None:
    _check(fmt, data)


@st.composite
def _mutated(draw: st.DrawFn, seed: str) -> str:
    lines = seed.splitlines(keepends=True)
    kind = draw(st.sampled_from(["cut", "drop", "dup", "insert", "replace_chars"]))
    if kind == "cut":
        return seed[: draw(st.integers(0, len(seed)))]
    if not lines:
        return seed
    i = draw(st.integers(0, len(lines) - 1))
    if kind == "drop":
        del lines[i]
    elif kind == "dup":
        lines.insert(i, lines[i])
    elif kind == "insert":
        lines.insert(i, draw(st.text(max_size=80)) + "\n")
    else:
        line = lines[i]
        j = draw(st.integers(0, max(0, len(line) - 1)))
        lines[i] = line[:j] + draw(st.text(min_size=1, max_size=8)) + line[j + 1:]
    return "".join(lines)


@pytest.mark.parametrize("fmt", list(FORMATS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_real_output_raises_only_parse_error(fmt: str, data: st.DataObject) -> None:
    text = data.draw(_mutated(_seed(fmt)))
    _check(fmt, text.encode("utf-8", errors="replace"))


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_a_100_mb_line_is_refused_quickly(fmt: str) -> None:
    data = b"x" * (100 * 1024 * 1024) + b"\n"
    with pytest.raises(ParseError) as caught:
        parse_input(fmt, data, OPTS)
    assert caught.value.reason


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_every_seed_parses(fmt: str) -> None:
    assert parse_input(fmt, _seed(fmt).encode(), OPTS)
