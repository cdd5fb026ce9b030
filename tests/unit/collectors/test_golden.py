"""Golden tests: every covered fixture file parses to exactly its reviewed expected output.

Each case names an input (a fixture under ``tests/fixtures``, or one of our own samples under
``tests/unit/collectors/samples``), the ingest format and the options the CLI would
pass; the expected output lives in ``tests/golden/collectors/<case id>.json``. Regenerate
with ``FABRICWATCH_REGEN_GOLDEN=1 pytest tests/unit/collectors/test_golden.py`` and review
the diff by eye against the input text.

Large outputs (a topology of thousands of links) are compared through a digest of the whole
output plus counts and the first records, so the expected file stays reviewable.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from collectors.errors import ParseError
from collectors.formats import IngestOptions, parse_input
from collectors.ibnetdiscover import parse_nodes
from collectors.lidmap import LidMap

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests" / "fixtures"
SAMPLES = REPO / "tests" / "unit" / "collectors" / "samples"
GOLDEN = REPO / "tests" / "golden" / "collectors"
TS = 1_795_971_600_000  # 2026-11-29T17:00:00Z, the day the ibsim fixtures were made


@cache
def fattree_lids() -> LidMap:
    """LIDs and GUIDs of the fat tree the ibsim fixtures were generated from."""
    text = (FIXTURES / "ibnetdiscover" / "topograph-ndr-fattree.txt").read_text()
    return LidMap.from_nodes(parse_nodes(text))


@dataclass(frozen=True)
class Case:
    path: str  # relative to tests/fixtures, or "samples/..." for our own
    fmt: str
    options: dict[str, Any] = field(default_factory=dict)
    fattree: bool = False  # resolve LIDs through the fat tree topology

    @property
    def id(self) -> str:
        return self.path.rsplit(".", 1)[0]

    @property
    def file(self) -> Path:
        if self.path.startswith("samples/"):
            return SAMPLES / self.path.removeprefix("samples/")
        return FIXTURES / self.path

    @property
    def golden(self) -> Path:
        return GOLDEN / f"{self.id}.json"

    def opts(self) -> IngestOptions:
        return IngestOptions(fabric="lab", ts=TS, lids=fattree_lids() if self.fattree else None,
                             **self.options)


UTC = {"tz": "UTC", "year": 2026}
CASES: tuple[Case, ...] = (
    *(Case(f"ibnetdiscover/{name}", "ibnetdiscover") for name in (
        "ibsim-ports-ndr-fattree-sdr.txt", "manpage-voltaire-sdr-lab.txt",
        "ports-edr-mixed.txt", "ports-hdr-sharp.txt", "ports-qdr-unquoted.txt",
        "superbench-hdr-director-faked-with-swve.txt", "topograph-ndr-fattree.txt",
        "topograph-single-ca-gb200.txt", "ufm-sdk-selene-compute-hdr.txt",
        "ufm-sdk-selene-storage-hdr.txt", "ufm-sdk-small-topo.txt")),
    *(Case(f"perfquery/{name}", "perfquery", {"device": device}) for name, device in (
        ("extended-hca-capmask-5a00.txt", "o0002/HCA-1"),
        ("extended-switch-2ports-edr.txt", "ib-i1l1s01"),
        ("extended-switch-port-edr.txt", "ib-i4l1s01"),
        ("rcv-error-details-switch.txt", "ib-i1l1s01"))),
    *(Case(f"perfquery/{name}", "perfquery", fattree=True) for name in (
        "ibsim-basic-hca-capmask-1200.txt", "ibsim-basic-switch-allports-255.txt",
        "ibsim-basic-switch-port-saturated.txt", "ibsim-extended-data-only-hca.txt",
        "ibsim-xmit-discard-details.txt")),
    *(Case(f"ibqueryerrors/{name}", "ibqueryerrors") for name in (
        "ibsim-injected-errors.txt", "ibsim-injected-errors-report-port.txt",
        "ibsim-injected-errors-suppress-common.txt")),
    *(Case(f"iblinkinfo/{name}", "iblinkinfo") for name in (
        "ibsim-ndr-fattree-grouped.txt", "ibsim-ndr-fattree-line-mode-first120.txt",
        "ibsim-ndr-fattree-down-ports.txt")),
    *(Case(f"opensm/{name}", "opensm", UTC, fattree=True) for name in (
        "ibsim-default-level-traps-128.log", "ibsim-verbose-trap128-heavy-sweep-start-excerpt.log",
        "ibsim-verbose-sweep-end-subnet-up-excerpt.log", "opensm-3.3.23-default.conf")),
    # Our sample crosses a new year; 2025 keeps every stamp in the past.
    Case("samples/opensm-verbose-port-changes.log", "opensm", {"tz": "UTC", "year": 2025},
         fattree=True),
    Case("samples/ufm-event-log.log", "ufm-events", {"tz": "Europe/Oslo"}),
    Case("ufm/telemetry-fluentd-small-message.json", "ufm-telemetry"),
    *(Case(f"ibstat/{name}", "ibstat", {"device": "gpu-node-1"}) for name in (
        "h100-ndr-ib-and-roce-some-down.txt", "h100-roce-all-active.txt",
        "a100-hdr-spaces-ibpanic-trailer.txt")),
    Case("ibstatus/a100-hdr-hex-lids.txt", "ibstatus", {"device": "gpu-node-2"}),
    *(Case(f"mlxlink/{name}", "mlxlink", {"device": "gpu-node-1/mlx5_0", "port": 1})
      for name in ("cx7-400g-dr4-module-counters.json", "cx7-400g-fec-histogram-serdes.json")),
    Case("gnmic/event-format-srl-interface-statistics.json", "gnmic"),
    Case("samples/gnmic-json-format.json", "gnmic"),
    Case("samples/gnmic-protojson.jsonl", "gnmic"),
    Case("ethtool/mlx5-lkml-xdp-regression-k5.15-nonzero-only.txt", "ethtool",
         {"device": "node0042/mlx5_0"}),
    Case("sysfs-infiniband/gpud-h100-mlx5_0-grep-dump.txt", "sysfs", {"device": "h100-node"}),
    Case("rdma-statistic/sonic-issue-21891-roce-sender-mlx5.txt", "rdma-statistic",
         {"device": "sender"}),
    Case("sflowtool/ovs-mininet-flow-and-counter-samples.txt", "sflowtool"),
    *(Case(f"sonic/{name}", "sonic", {"device": "sonic-leaf-1"}) for name in (
        "show-pfc-counters.txt", "show-pfc-counters-all-masic-na.txt",
        "show-queue-counters.txt", "show-queue-counters-json.json", "pfcwd-show-stats.txt",
        "pfcwd-show-stats-all-masic.txt", "show-queue-wredcounters.txt")),
    Case("samples/sonic-roce-leaf-pfc-tx-and-wredcounters.txt", "sonic",
         {"device": "leaf-su01-r1"}),
    *(Case(f"perftest/{name}", "ib_write_bw", {"rail": 0}) for name in (
        "superbench-ib_write_bw-8M-tabs.txt",
        "superbench-ib_write_bw-all-sizes-interleaved-server-client.txt")),
    *(Case(f"nccl-tests/{name}", "nccl-tests", {"rail": 0}) for name in (
        "superbench-all_reduce_perf-a100-8gpu-legacy-format.txt",
        "nris-olivia-gh200-8rank-v2.18.3.txt", "nris-olivia-gh200-16rank-wrong-nonzero.txt")),
)


FULL_LIMIT = 60_000  # bytes of canonical JSON above which only a digest and a head are kept
HEAD = 25


def _actual(case: Case) -> dict[str, Any]:
    try:
        events = parse_input(case.fmt, case.file.read_bytes(), case.opts())
    except ParseError as error:
        return {"format": case.fmt, "error": {"line": error.line, "reason": error.reason}}
    wire = [event.model_dump(mode="json") for event in events]
    canonical = json.dumps(wire, sort_keys=True, separators=(",", ":"))
    if len(canonical) <= FULL_LIMIT:
        return {"format": case.fmt, "events": wire}
    summary: dict[str, Any] = {
        "format": case.fmt,
        "sha256": hashlib.sha256(canonical.encode()).hexdigest(),
        "event_count": len(wire),
    }
    if len(wire) == 1 and wire[0].get("kind") == "topology":
        topo = wire[0]
        summary["topology"] = {
            "id": topo["id"],
            "link_count": len(topo["links"]),
            "node_count": len(topo["nodes"]),
            "first_links": topo["links"][:HEAD],
            "first_nodes": topo["nodes"][:HEAD],
        }
    else:
        summary["first_events"] = wire[:HEAD]
    return summary


def test_fixtures_are_there() -> None:
    missing = [c.path for c in CASES if not c.file.is_file()]
    assert not missing, f"fixtures named by golden cases are missing: {missing}"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_golden(case: Case) -> None:
    actual = _actual(case)
    if os.environ.get("FABRICWATCH_REGEN_GOLDEN") == "1":
        case.golden.parent.mkdir(parents=True, exist_ok=True)
        case.golden.write_text(json.dumps(actual, indent=1, sort_keys=True) + "\n")
    expected = json.loads(case.golden.read_text())
    assert actual == expected
