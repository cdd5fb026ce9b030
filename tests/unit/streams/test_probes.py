"""Probes: slow-not-dead against a given or learned baseline, and the shared link named."""

from __future__ import annotations

from typing import Any

from schemas import Probe
from schemas.policy import Policy
from streams.probes.logic import endpoint, step

BASE = 1_700_002_800_000
POLICY = Policy()


def probe(t: int, bw: float, src: str = "node0001", dst: str = "node0002", rail: int = 3,
          baseline: float | None = None, size: int = 1 << 20) -> Probe:
    return Probe(id=f"p-{src}-{dst}-{t}", ts=BASE + t, fabric="lab", source="probe",
                 probe="ib_write_bw", src=src, dst=dst, rail=rail, size_bytes=size,
                 bw_gbps=bw, baseline_gbps=baseline)


def run(probes: list[Probe], **kw: Any) -> list[tuple[str, int, str, bool]]:
    state = None
    out = []
    for p in probes:
        state, dets = step(state, p, POLICY, **kw)
        out += [(d.device, d.port, d.action.value, d.evidence["localised"]) for d in dets]
    return out


def test_endpoint_naming() -> None:
    assert endpoint("leaf-su01-r3:17", 3) == ("leaf-su01-r3", 17)
    assert endpoint("node0042/mlx5_3", 3) == ("node0042/mlx5_3", 1)
    assert endpoint("node0042", 5) == ("node0042/mlx5_5", 1)


def test_given_baseline_slow_below_90_percent() -> None:
    assert run([probe(0, 361, baseline=400)]) == []  # 90.25 %
    assert run([probe(0, 359, baseline=400)]) == [("node0001/mlx5_3", 1, "ticket", False)]


def test_learned_baseline_and_once_per_episode() -> None:
    seq = [probe(i, 390 + i % 3) for i in range(5)]  # learns ~391
    seq += [probe(10, 300), probe(11, 300), probe(12, 395), probe(13, 300)]
    assert run(seq) == [("node0001/mlx5_3", 1, "ticket", False)] * 2


def test_no_verdict_before_baseline_is_learned() -> None:
    assert run([probe(0, 100), probe(1, 400), probe(2, 10)]) == []


def test_shared_endpoint_named() -> None:
    seq = [probe(0, 200, src="node0001", dst=f"node000{i}", baseline=400) for i in (2, 3)]
    out = run(seq)
    assert ("node0001/mlx5_3", 1, "ticket", True) in out  # an endpoint: a lead, not proof
    assert len([o for o in out if o[3]]) == 1


def test_shared_link_from_paths() -> None:
    def paths(p: Probe) -> list[str]:
        return [f"{p.src}/mlx5_3:1", "leaf-su01-r3:40", "spine-01:7", f"{p.dst}/mlx5_3:1"]

    seq = [probe(0, 200, src="node0001", dst="node0100", baseline=400),
           probe(1, 200, src="node0002", dst="node0101", baseline=400),
           probe(2, 200, src="node0003", dst="node0102", baseline=400)]
    named = [(o[0], o[1], o[2]) for o in run(seq, paths=paths) if o[3]]
    assert sorted(named) == [("leaf-su01-r3", 40, "isolate_port"),
                             ("spine-01", 7, "isolate_port")]
