"""Optics and congestion rules on replayed inputs: optic temperature and Rx power against
PDR's limits and the port's own baseline, PortXmitWait shares, hot uplinks among a leaf's
ECMP peers, pause storms by SONiC's watchdog rule and from its own storm counters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.telemetry import parse_mlxlink, parse_sonic_show
from schemas import Counters, PortSample
from schemas.policy import Policy
from streams.counters.logic import CountersDetector, DeviceState
from streams.topology.plan import Plan, PlanLink, uplinks_from_plan

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
S = 1000
M = 60 * S
BASE = 1_700_002_800_000
LEAF = "leaf-su01-r0"


def msg(t: int, *samples: PortSample, device: str = LEAF, source: str = "gnmi") -> Counters:
    return Counters(id=f"{device}-{t}", ts=BASE + t, fabric="lab", source=source,
                    device=device, ports=list(samples))


class Run:
    def __init__(self, policy: Policy | None = None, **kw: Any) -> None:
        self.det = CountersDetector(policy or Policy(), **kw)
        self.state: DeviceState | None = None
        self.fired: list[Any] = []

    def __call__(self, event: Counters) -> list[Any]:
        if self.state is not None:  # every state goes through its JSON form, as stored
            self.state = orjson.loads(orjson.dumps(self.state))
        self.state, dets, _ = self.det.step(self.state, event)
        self.fired += dets
        return dets

    def kinds(self) -> list[tuple[str, int]]:
        return [(d.detection.value, d.port) for d in self.fired]


# --- optic temperature ---------------------------------------------------------------------

def test_optic_at_71_fires_and_at_69_does_not() -> None:
    hot, warm = Run(), Run()
    for i in range(10):
        hot(msg(i * 10 * S, PortSample(port=1, module_temp_c=71.0 if i >= 5 else 65.0)))
        warm(msg(i * 10 * S, PortSample(port=1, module_temp_c=69.0 if i >= 5 else 65.0)))
    assert hot.kinds() == [("optic_temp", 1)]
    assert hot.fired[0].evidence["rule"] == "limit"
    assert hot.fired[0].action.value == "isolate_port"  # PDR isolates
    assert warm.kinds() == []


def test_a_rise_of_more_than_10_over_the_ports_own_baseline_fires() -> None:
    run = Run()
    t = 0
    for _ in range(60):  # an hour at 45 °C: the baseline
        run(msg(t, PortSample(port=1, module_temp_c=45.0)))
        t += M
    run(msg(t, PortSample(port=1, module_temp_c=54.5)))  # +9.5: within its normal
    assert run.kinds() == []
    run(msg(t + M, PortSample(port=1, module_temp_c=56.0)))  # +11, far below 70
    assert run.kinds() == [("optic_temp", 1)]
    ev = run.fired[0].evidence
    # (the +9.5 reading fell on a baseline update: healthy, it moved the baseline a little)
    assert ev["rule"] == "rise" and 45.0 <= ev["baseline_c"] < 45.2
    assert 10.8 < ev["rise_c"] <= 11.0


def test_baseline_does_not_learn_the_heat_and_the_episode_has_hysteresis() -> None:
    run = Run()
    t = 0
    for _ in range(30):
        run(msg(t, PortSample(port=1, module_temp_c=50.0)))
        t += M
    for temp in [61.0] * 120 + [59.5, 61.0, 58.5, 61.0]:  # two hours hot, then jitter
        run(msg(t, PortSample(port=1, module_temp_c=temp)))
        t += M
    # one episode: 2 h of heat did not become the baseline, 59.5 did not close it
    assert run.kinds() == [("optic_temp", 1)]
    run(msg(t, PortSample(port=1, module_temp_c=57.0)))  # 2 °C under the rise level: closed
    run(msg(t + M, PortSample(port=1, module_temp_c=61.0)))
    assert run.kinds() == [("optic_temp", 1)] * 2


def test_mlxlink_ddm_of_the_real_module_is_healthy_and_gives_its_thresholds() -> None:
    text = (FIXTURES / "mlxlink" / "cx7-400g-dr4-module-counters.json").read_text()
    [event] = parse_mlxlink(text, fabric="lab", ts=BASE, device="node0001/mlx5_0")
    sample = event.ports[0]
    assert sample.module_temp_c == 61.0 and sample.rx_power_dbm == 2.658
    extra = sample.__pydantic_extra__ or {}
    assert extra["rx_power_low_dbm"] == -9.914 and extra["module_temp_high_c"] == 80.0
    run = Run()
    run(event)
    assert run.kinds() == []
    # the same module reading 71 °C is over PDR's limit (70), below its own 80
    hot = sample.model_copy(update={"module_temp_c": 71.0})
    run(event.model_copy(update={"id": "x", "ts": BASE + M, "ports": [hot]}))
    assert run.kinds() == [("optic_temp", 1)]


# --- optic power ---------------------------------------------------------------------------

def test_rx_power_below_the_modules_low_threshold_fires() -> None:
    run = Run()
    run(msg(0, PortSample(port=1, rx_power_dbm=-8.0, rx_power_low_dbm=-7.5)))
    run(msg(0, PortSample(port=2, rx_power_dbm=-8.0)), )  # same time: a duplicate, skipped
    assert run.kinds() == [("optic_power", 1)]
    assert run.fired[0].evidence["low_from"] == "module"
    other = Run()
    other(msg(0, PortSample(port=2, rx_power_dbm=-8.0)))  # policy's -10 dBm: fine
    other(msg(M, PortSample(port=2, rx_power_dbm=-10.5)))
    assert other.kinds() == [("optic_power", 2)]
    assert other.fired[0].evidence["low_from"] == "policy"


def test_rx_power_falling_fast_fires_a_slow_drift_does_not() -> None:
    fast, slow = Run(), Run()
    t = 0
    for i in range(60):
        fast(msg(t, PortSample(port=1, rx_power_dbm=1.0 if i < 50 else -2.5)))
        t += M
    assert fast.kinds() == [("optic_power", 1)]
    assert fast.fired[0].evidence["rule"] == "drop"
    t = 0
    for i in range(24 * 30):  # 3.6 dB lost over 30 days: aging, followed by the baseline
        slow(msg(t, PortSample(port=1, rx_power_dbm=round(1.0 - 0.005 * i, 3))))
        t += 60 * M
    assert slow.kinds() == []


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(20, 90), st.floats(-20, 5)), min_size=1, max_size=30))
def test_optics_fire_only_past_a_limit(readings: list[tuple[float, float]]) -> None:
    run = Run()
    for i, (temp, power) in enumerate(readings):
        run(msg(i * M, PortSample(port=1, module_temp_c=temp, rx_power_dbm=power)))
    for d in run.fired:
        ev = d.evidence
        if d.detection.value == "optic_temp":
            assert ev["module_temp_c"] > 70.0 or ev["rise_c"] > 10.0
        else:
            assert ev["rx_power_dbm"] < -10.0 or ev["drop_db"] > 3.0
    if all(t <= 70 and p >= -10 for t, p in readings) and len(readings) == 1:
        assert run.fired == []


# --- congestion: PortXmitWait share ---------------------------------------------------------

NDR_TICKS_PER_S = 400e9 / 64  # 8-byte ticks at NDR 4X: one second of waiting


def waits(share: float, seconds: float) -> int:
    return int(share * NDR_TICKS_PER_S * seconds)


def test_congestion_on_the_xmit_wait_share() -> None:
    run = Run()
    for i in range(13):  # 2 minutes of 10 s samples: windows close at 60 s and 120 s
        t = i * 10 * S
        run(msg(t, PortSample(port=1, xmit_wait=waits(0.25, t / S), width="4X", speed="NDR"),
                PortSample(port=2, xmit_wait=waits(0.05, t / S), width="4X", speed="NDR")))
    assert run.kinds() == [("congestion", 1)]
    ev = run.fired[0].evidence
    assert abs(ev["xmit_wait_share"] - 0.25) < 0.001 and ev["window_s"] == 60.0


def test_congestion_share_is_of_the_ports_own_line_rate() -> None:
    # the same ticks on an HDR link (half NDR's rate) are twice the share
    run = Run()
    for i in range(7):
        t = i * 10 * S
        run(msg(t, PortSample(port=1, xmit_wait=waits(0.06, t / S), speed="HDR", width="4X")))
    found = [d for d in run.fired if d.detection.value == "congestion"]  # (and degraded_link)
    assert len(found) == 1 and abs(found[0].evidence["xmit_wait_share"] - 0.12) < 0.001


def test_a_healthy_busy_port_is_looked_at_once_a_window() -> None:
    run = Run()
    dirty = []
    for i in range(13):
        t = i * 10 * S
        run(msg(t, PortSample(port=1, xmit_wait=waits(0.01, t / S))))
        assert run.state is not None
        dirty.append(run.state["dirty"])
    # the first sample, and one a minute (the window's end); the others only move times
    assert dirty == [True, False, False, False, False, False, True,
                     False, False, False, False, False, True]
    assert run.fired == []


# --- hot uplink -----------------------------------------------------------------------------

PLAN = Plan(tuple(
    [PlanLink(f"node000{n}/mlx5_0", 1, LEAF, n) for n in range(1, 5)]
    + [PlanLink(LEAF, 4 + u, f"spine-su01-s{1 + u % 2}", 1 + u // 2) for u in range(1, 5)]))


def words(util: float, seconds: float) -> int:
    return int(util * 400e9 * seconds / 32)  # PortXmitData counts 4-octet words


def test_hot_uplink_fires_for_the_polarised_port_only() -> None:
    run = Run(uplinks=uplinks_from_plan(PLAN))
    load = {5: 0.95, 6: 0.2, 7: 0.25, 8: 0.3, 1: 0.05, 2: 0.9}  # 2 is a host port, busy
    for i in range(7):
        t = i * 10 * S
        run(msg(t, *[PortSample(port=p, xmit_wait=waits(0.01, t / S),
                                port_xmit_data=words(u, t / S)) for p, u in load.items()]))
    assert run.kinds() == [("hot_uplink", 5)]
    ev = run.fired[0].evidence
    assert ev["by"] == "load" and ev["peers"] == [6, 7, 8]
    assert abs(ev["peers_median_utilisation"] - 0.25) < 0.001


def test_hot_uplink_by_credit_wait() -> None:
    run = Run(uplinks=uplinks_from_plan(PLAN))
    share = {5: 0.01, 6: 0.3, 7: 0.02, 8: 0.01}
    for i in range(7):
        t = i * 10 * S
        run(msg(t, *[PortSample(port=p, xmit_wait=waits(w, t / S),
                                port_xmit_data=words(0.4, t / S)) for p, w in share.items()]))
    assert sorted(run.kinds()) == [("congestion", 6), ("hot_uplink", 6)]


def test_evenly_loaded_uplinks_and_no_plan_are_quiet() -> None:
    even = Run(uplinks=uplinks_from_plan(PLAN))
    unplanned = Run()  # no plan: nothing says which ports are ECMP peers
    for i in range(7):
        t = i * 10 * S
        even(msg(t, *[PortSample(port=p, xmit_wait=waits(0.01, t / S),
                                 port_xmit_data=words(0.6 + 0.05 * p % 3, t / S))
                      for p in (5, 6, 7, 8)]))
        unplanned(msg(t, *[PortSample(port=p, xmit_wait=waits(0.01, t / S),
                                      port_xmit_data=words(0.95 if p == 5 else 0.2, t / S))
                           for p in (5, 6, 7, 8)]))
    assert even.fired == [] and unplanned.fired == []


def test_uplinks_from_plan() -> None:
    up = uplinks_from_plan(PLAN)
    assert up(LEAF) == frozenset({5, 6, 7, 8})
    assert up("spine-su01-s1") is None  # no host behind it: not a leaf
    assert up("node0001/mlx5_0") is None


# --- pause storms ---------------------------------------------------------------------------

def test_paused_and_draining_does_not_fire_paused_and_stuck_does() -> None:
    run = Run()
    run(msg(0, PortSample(port=1, pfc_pause_rx=0, pfc_pause_duration_us=0, port_xmit_data=0),
            PortSample(port=2, pfc_pause_rx=0, pfc_pause_duration_us=0, port_xmit_data=0)))
    for i in range(1, 4):
        t = i * 10 * S
        run(msg(t, PortSample(port=1, pfc_pause_rx=800_000 * i,
                              pfc_pause_duration_us=9_950_000 * i,
                              port_xmit_data=words(0.3, t / S)),  # still drains
                PortSample(port=2, pfc_pause_rx=800_000 * i,
                           pfc_pause_duration_us=9_950_000 * i, port_xmit_data=0)))  # stuck
    assert run.kinds() == [("pause_storm", 2)]
    assert run.fired[0].evidence["draining"] is False


def test_without_a_data_counter_draining_is_unknown_and_does_not_excuse() -> None:
    run = Run()
    run(msg(0, PortSample(port=1, pfc_pause_rx=0, pfc_pause_duration_us=0)))
    run(msg(10 * S, PortSample(port=1, pfc_pause_rx=10, pfc_pause_duration_us=9_950_000)))
    assert run.kinds() == [("pause_storm", 1)]
    assert run.fired[0].evidence["draining"] is None


def test_sonic_pfcwd_storm_counters_fire_pause_storm() -> None:
    text = (FIXTURES / "sonic" / "pfcwd-show-stats.txt").read_text()
    run = Run()
    first = parse_sonic_show(text, fabric="lab", ts=BASE, device="sonic-leaf1")
    for event in first:
        run(event)
    # Ethernet0:3 and Ethernet8:4 are "stormed" now; Ethernet4:3 is operational
    assert sorted(run.kinds()) == [("pause_storm", 0), ("pause_storm", 8)]
    ev = {d.port: d.evidence for d in run.fired}
    assert ev[0]["stormed_queues"] == ["3"] and ev[8]["stormed_queues"] == ["4"]
    # Ethernet4 restored, then a new storm detected on its queue 3 since: fires
    later = text.replace("Ethernet4:3  operational                        2/2",
                         "Ethernet4:3  operational                        3/3")
    for event in parse_sonic_show(later, fabric="lab", ts=BASE + M, device="sonic-leaf1"):
        run(event.model_copy(update={"id": "later"}))
    assert ("pause_storm", 4) in run.kinds()
