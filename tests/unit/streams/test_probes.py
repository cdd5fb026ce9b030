"""Probes: slow-not-dead against a given or learned baseline, and the shared link named."""

from __future__ import annotations

from pathlib import Path
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
    def paths(p: Probe) -> list[str] | None:
        if p.src == "tick":
            return None  # a probe no route knows: it clears nothing
        return [f"{p.src}/mlx5_3:1", "leaf-su01-r3:40", "spine-01:7", f"{p.dst}/mlx5_3:1"]

    confirm = round(POLICY.fabric_health.probes.localise_confirm * 1000)
    seq = [probe(0, 200, src="node0001", dst="node0100", baseline=400),
           probe(1, 200, src="node0002", dst="node0101", baseline=400),
           probe(2, 200, src="node0003", dst="node0102", baseline=400),
           # the next probe of the rail past the confirmation decides
           probe(2 + confirm, 400, src="tick", dst="tock", baseline=400)]
    named = [(o[0], o[1], o[2]) for o in run(seq, paths=paths) if o[3]]
    assert sorted(named) == [("leaf-su01-r3", 40, "isolate_port"),
                             ("spine-01", 7, "isolate_port")]


def nccl(t: int, bw: float, ranks: int | None = None, **extra: Any) -> Probe:
    more = {**extra, **({"ranks": ranks} if ranks is not None else {})}
    return Probe(id=f"n-{t}-{ranks}", ts=BASE + t, fabric="lab", source="probe",
                 probe="nccl_allreduce", src="gpu-1-43", dst="gpu-1-43,gpu-1-44", rail=0,
                 size_bytes=1 << 30, bw_gbps=bw, **more)


def learned(state: dict[str, Any], key_part: str) -> list[float]:
    (hist,) = [v for k, v in state["baselines"].items() if key_part in k]
    return list(hist)


def test_slightly_slow_results_do_not_ratchet_the_baseline_down() -> None:
    state = None
    for i in range(5):
        state, _ = step(state, probe(i, 400), POLICY)
    # a long run at 92 % (not slow at 90 %, not healthy at 97 %): the baseline stays
    fired = []
    for i in range(5, 105):
        state, dets = step(state, probe(i, 368), POLICY)
        fired += dets
    assert fired == []
    assert state is not None and set(learned(state, "ib_write_bw")) == {400.0}
    # so that a link a little slower again is judged against the healthy 400, and fires
    state, dets = step(state, probe(200, 355), POLICY)
    assert [d.evidence["baseline_gbps"] for d in dets] == [400.0]


def test_slow_results_never_teach_and_a_quantile_holds_the_baseline() -> None:
    state = None
    for i, bw in enumerate([400, 401, 399, 400, 402, 398, 400]):
        state, _ = step(state, probe(i, bw), POLICY)
    for i in range(10, 30):
        state, _ = step(state, probe(i, 120), POLICY)  # slow: never learned
    assert state is not None and min(learned(state, "ib_write_bw")) >= 398


def test_scale_is_in_the_baseline_key() -> None:
    state = None
    for i in range(5):
        state, _ = step(state, nccl(i, 380.0, ranks=8), POLICY)
    # a 16-rank run at a lower bus bandwidth is learned on its own, not judged by 8 ranks
    fired = []
    for i in range(5, 10):
        state, dets = step(state, nccl(i, 300.0, ranks=16), POLICY)
        fired += dets
    assert fired == []
    assert state is not None
    assert sorted(k.rsplit("|", 1)[1] for k in state["baselines"]) == ["16", "8"]
    state, dets = step(state, nccl(20, 300.0, ranks=8), POLICY)  # 8 ranks at 300: slow
    assert [(d.detection.value, d.evidence["scale"]) for d in dets] == [("slow_probe", 8)]


def test_pinned_baseline_wins_over_the_learned_one() -> None:
    def pinned(p: Probe, scale: int) -> float | None:
        return 800.0 if (p.probe, scale) == ("ib_write_bw", 2) else None

    state, dets = step(None, probe(0, 700), POLICY, pinned=pinned)  # no history needed
    assert [(d.evidence["baseline_from"], d.evidence["baseline_gbps"]) for d in dets] == [
        ("pinned", 800.0)]


def test_nccl_wrong_from_the_real_output_is_its_own_detection() -> None:
    from collectors.probes import parse_nccl_tests

    path = (Path(__file__).resolve().parents[2] / "fixtures" / "nccl-tests"
            / "nris-olivia-gh200-16rank-wrong-nonzero.txt")
    results = parse_nccl_tests(path.read_text(), fabric="lab", ts=BASE, rail=0)
    bad = [p for p in results if (p.model_extra or {}).get("wrong")]
    assert bad and all((p.model_extra or {})["ranks"] == 16 for p in results)
    state = None
    fired = []
    for p in results:
        state, dets = step(state, p, POLICY)
        fired += [d for d in dets if d.detection.value == "probe_wrong"]
    assert sorted(d.evidence["size_bytes"] for d in fired) == sorted(
        p.size_bytes for p in bad)
    assert {d.action.value for d in fired} == {"page"}
    assert all(d.evidence["wrong"] > 0 for d in fired)
    # the next clean run of the same size ends the episode; a later wrong one is a new one
    again = bad[0].model_copy(update={"id": "again", "ts": BASE + 60_000})
    clean = again.model_copy(update={"id": "clean", "ts": BASE + 30_000, "wrong": 0,
                                     "in_place_wrong": 0})
    state, dets = step(state, again, POLICY)
    assert [d.detection.value for d in dets if d.detection.value == "probe_wrong"] == []
    state, _ = step(state, clean, POLICY)
    state, dets = step(state, again.model_copy(update={"id": "again2", "ts": BASE + 90_000}),
                       POLICY)
    assert [d.detection.value for d in dets] == ["probe_wrong"]


def test_pins_look_up_by_fabric_rail_probe_size_and_scale() -> None:
    from ledger.baselines import PinnedBaseline
    from streams.probes.pins import Pins

    pins = Pins([PinnedBaseline(fabric="lab", rail=3, probe="ib_write_bw", size_bytes=1 << 20,
                                scale=2, gbps=800.0, pinned_by="op", pinned_ts=BASE)])
    assert pins(probe(0, 700), 2) == 800.0
    assert pins(probe(0, 700), 4) is None  # another scale
    assert pins(probe(0, 700, rail=4), 2) is None
    state, dets = step(None, probe(0, 700), POLICY, pinned=pins)
    assert [d.evidence["baseline_from"] for d in dets] == ["pinned"]
