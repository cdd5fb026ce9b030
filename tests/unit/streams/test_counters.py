"""Counter health: resets, saturation, per-hour rates with baselines, BER, congestion, degraded."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from schemas import CounterColumns, Counters, DetectionKind, PortSample
from schemas.policy import Policy
from streams.counters.logic import CountersDetector, DeviceState
from streams.engine import Engine

S = 1000
M = 60 * S
BASE = 1_700_002_800_000
DEV = "leaf-su02-r1"


def sample(port: int = 1, **values: Any) -> PortSample:
    return PortSample(port=port, **values)


def msg(t: int, *samples: PortSample, source: str = "gnmi", n: str | None = None) -> Counters:
    return Counters(id=n or f"c-{t}", ts=BASE + t, fabric="lab", source=source, device=DEV,
                    ports=list(samples))


class Run:
    def __init__(self, policy: Policy | None = None, roundtrip: bool = True,
                 **kw: Any) -> None:
        self.det = CountersDetector(policy or Policy(), **kw)
        self.state: DeviceState | None = None
        self.roundtrip = roundtrip
        self.fired: list[Any] = []
        self.downs: list[Any] = []

    def __call__(self, event: Counters) -> list[Any]:
        if self.roundtrip and self.state is not None:
            self.state = orjson.loads(orjson.dumps(self.state))
        self.state, dets, downs = self.det.step(self.state, event)
        self.fired += dets
        self.downs += downs
        return dets

    def kinds(self) -> list[tuple[str, int, int]]:
        return [(d.detection.value, d.port, d.ts - BASE) for d in self.fired]


def test_healthy_port_state_is_small_and_quiet() -> None:
    run = Run()
    for i in range(100):
        run(msg(i * 10 * S, sample(symbol_errors=0, rcv_errors=0, link_downed=0, width="4X",
                                   speed="NDR", raw_ber=1e-9, effective_ber=1e-15)))
    assert run.fired == [] and run.downs == []
    assert len(orjson.dumps(run.state)) < 200


def test_reset_counts_from_zero() -> None:
    run = Run()
    run(msg(0, sample(link_downed=5)))
    run(msg(10 * S, sample(link_downed=2)))  # reset, then 2 downs
    assert [(d.increase, d.start - BASE, d.ts - BASE) for d in run.downs] == [(2, 0, 10 * S)]
    assert run.state is not None and run.state["ports"]["1"][2]["r"] == 1


def test_link_downed_increase_becomes_counter_downs_once() -> None:
    run = Run()
    run(msg(0, sample(port=4, link_downed=0)))
    run(msg(10 * S, sample(port=4, link_downed=1)))
    run(msg(10 * S, sample(port=4, link_downed=1)))  # duplicate message: stale, skipped
    assert [(d.id, d.port, d.increase) for d in run.downs] == [(f"c-{10 * S}/4", 4, 1)]
    assert run.state is not None and run.state["stale"] == 1


def test_not_reported_counter_keeps_last_value() -> None:
    run = Run()
    run(msg(0, sample(link_downed=3)))
    run(msg(10 * S, sample()))
    run(msg(20 * S, sample(link_downed=4)))
    assert [d.increase for d in run.downs] == [1]


def test_legacy_saturation_once_per_episode() -> None:
    run = Run()
    for t in range(3):
        run(msg(t * 10 * S, sample(symbol_errors=65535), source="perfquery"))
    run(msg(30 * S, sample(symbol_errors=0), source="perfquery"))  # reset clears it
    run(msg(40 * S, sample(symbol_errors=65535), source="perfquery"))
    # (0 -> 65535 in 10 s is also 65535 real errors: rates and BER fire on it too)
    assert [k for k in run.kinds() if k[0] == "counter_saturated"] == [
        ("counter_saturated", 1, 0), ("counter_saturated", 1, 40 * S)]


def test_saturation_needs_a_narrow_register() -> None:
    run = Run()
    run(msg(0, sample(symbol_errors=65535)))  # gnmi: 64-bit, a real count
    assert run.fired == []
    run(msg(10 * S, sample(port=2, link_downed=255, counter_bits={"link_downed": 8})))
    assert run.kinds() == [("counter_saturated", 2, 10 * S)]


def test_error_rate_per_hour_in_event_time() -> None:
    run = Run()
    # 1 rcv error a minute = 60/h: under the 200/h threshold
    for i in range(60):
        run(msg(i * M, sample(rcv_errors=i)))
    assert run.fired == []
    # 250 in one minute: over the threshold and far over its baseline
    run(msg(61 * M, sample(rcv_errors=59 + 250)))
    assert run.kinds() == [("error_rate", 1, 61 * M)]
    assert run.fired[0].evidence["counter"] == "rcv_errors"
    # more errors in the same episode: nothing new
    run(msg(62 * M, sample(rcv_errors=59 + 500)))
    assert len(run.fired) == 1
    # an hour later the window is clean: the episode has ended; a new burst fires again
    run(msg(125 * M, sample(rcv_errors=559)))
    run(msg(126 * M, sample(rcv_errors=559 + 300)))
    assert run.kinds()[-1] == ("error_rate", 1, 126 * M)


def test_noisy_port_baseline_suppresses_paging() -> None:
    # A port with a steady 300/h noise floor (over the 200/h threshold) all day long is
    # within its own baseline: it does not page every hour. A burst 100x its floor does.
    policy = Policy.from_yaml("fabricHealth: {errorRates: {baselineWindow: 6h}}")
    run = Run(policy)
    value = 0
    for i in range(0, 24 * 60):
        value += 5  # 300/h
        run(msg(i * M, sample(port=9, rcv_errors=value)))
    # once while nothing is known of it yet (41 min: 205/h), then never again all day
    assert [k for k in run.kinds() if k[0] == "error_rate"] == [("error_rate", 9, 41 * M)]
    for i in range(24 * 60, 24 * 60 + 10):
        value += 500  # 30,000/h
        run(msg(i * M, sample(port=9, rcv_errors=value)))
    assert len([k for k in run.kinds() if k[0] == "error_rate"]) == 2


def test_quiet_port_threshold_without_baseline_fires() -> None:
    run = Run()
    value = 0
    for i in range(60):
        value += 5
        run(msg(i * M, sample(port=9, rcv_errors=value)))
    assert [k[0] for k in run.kinds()] == ["error_rate"]


def test_symbol_errors_12_minute_window_and_symbol_ber() -> None:
    run = Run()
    run(msg(0, sample(symbol_errors=0, width="4X", speed="NDR")))
    run(msg(M, sample(symbol_errors=3, width="4X", speed="NDR")))
    # 3 errors / (400 Gb/s * 720 s) = 1.04e-14 > 1e-14; 15/h is below the rate threshold
    assert [k[0] for k in run.kinds()] == ["ber"]
    assert run.fired[0].evidence["metric"] == "symbol_ber"
    run2 = Run()
    run2(msg(0, sample(symbol_errors=0)))
    run2(msg(M, sample(symbol_errors=41)))  # 41 in 12 min = 205/h > 200/h
    assert sorted(k[0] for k in run2.kinds()) == ["ber", "error_rate"]


def test_ber_gauges_with_ufm_ndr_thresholds() -> None:
    run = Run()
    run(msg(0, sample(port=1, raw_ber=5e-6), sample(port=2, raw_ber=5e-6, media="copper"),
            sample(port=3, effective_ber=1e-10), sample(port=4, effective_ber=1e-12)))
    assert sorted(run.kinds()) == [("ber", 2, 0), ("ber", 3, 0)]
    run(msg(10 * S, sample(port=2, raw_ber=5e-6, media="copper")))
    assert len(run.fired) == 2  # once per episode
    run(msg(20 * S, sample(port=2, raw_ber=1e-8, media="copper")))
    run(msg(30 * S, sample(port=2, raw_ber=2e-6, media="copper")))
    assert len(run.fired) == 3  # re-armed after it recovered


def test_pause_storm_from_duration_and_from_frame_rate() -> None:
    run = Run()
    run(msg(0, sample(port=1, pfc_pause_rx=0, pfc_pause_duration_us=0),
            sample(port=2, pfc_pause_rx=0)))
    run(msg(10 * S, sample(port=1, pfc_pause_rx=10, pfc_pause_duration_us=9_950_000),
            sample(port=2, pfc_pause_rx=600_000)))
    assert sorted(run.kinds()) == [("pause_storm", 1, 10 * S), ("pause_storm", 2, 10 * S)]


def test_paused_most_of_the_interval_is_not_yet_a_storm() -> None:
    # SONiC's watchdog (Mellanox): paused more than 99 % of the interval; 60 % is congestion
    run = Run()
    run(msg(0, sample(port=1, pfc_pause_rx=0, pfc_pause_duration_us=0)))
    run(msg(10 * S, sample(port=1, pfc_pause_rx=10, pfc_pause_duration_us=6_000_000)))
    run(msg(20 * S, sample(port=1, pfc_pause_rx=20, pfc_pause_duration_us=15_880_000)))
    assert run.kinds() == []


def test_ecn_pfc_misconfig() -> None:
    run = Run()
    run(msg(0, sample(port=1, pfc_pause_tx=0, ecn_marked=0),
            sample(port=2, pfc_pause_tx=0, ecn_marked=0)))
    # the switch pauses its upstream out of port 1 while its egress queues mark little
    run(msg(10 * S, sample(port=1, pfc_pause_tx=20_000, ecn_marked=100),
            sample(port=2, pfc_pause_tx=5_000, ecn_marked=200)))
    assert run.kinds() == [("ecn_pfc_misconfig", 1, 10 * S)]
    ev = run.fired[0].evidence
    assert ev["scope"] == "device" and ev["pause_tx_per_s"] == 2500.0 and ev["ports"] == 2
    # still so: one episode; then the marks keep up (at port 2's egress): it ends
    run(msg(20 * S, sample(port=1, pfc_pause_tx=40_000, ecn_marked=200),
            sample(port=2, pfc_pause_tx=10_000, ecn_marked=300)))
    run(msg(30 * S, sample(port=1, pfc_pause_tx=60_000, ecn_marked=300),
            sample(port=2, pfc_pause_tx=15_000, ecn_marked=60_000)))
    assert len(run.fired) == 1
    run(msg(40 * S, sample(port=1, pfc_pause_tx=80_000, ecn_marked=400),
            sample(port=2, pfc_pause_tx=20_000, ecn_marked=60_100)))
    assert run.kinds() == [("ecn_pfc_misconfig", 1, 10 * S), ("ecn_pfc_misconfig", 1, 40 * S)]


def test_one_port_sending_a_storm_of_pauses_is_its_storm_not_the_devices_ecn() -> None:
    """A stuck queue across one link: its sending end pauses at the storm rate, sends nearly
    all of the device's pauses and receives nothing. That is the link's pause storm (from
    this end), not the device's ECN configuration; once it stops, the configuration is
    judged again."""
    run = Run()
    run(msg(0, sample(port=1, pfc_pause_tx=0, ecn_marked=0, port_rcv_data=7),
            sample(port=2, pfc_pause_tx=0, ecn_marked=0)))
    # port 1: 80,000 pauses/s, 99.4 % of the device's; no marks anywhere, nothing received
    run(msg(10 * S, sample(port=1, pfc_pause_tx=800_000, ecn_marked=0, port_rcv_data=7),
            sample(port=2, pfc_pause_tx=5_000, ecn_marked=0)))
    run(msg(20 * S, sample(port=1, pfc_pause_tx=1_600_000, ecn_marked=0, port_rcv_data=7),
            sample(port=2, pfc_pause_tx=10_000, ecn_marked=0)))
    # (its received data is first compared at 20 s: the first interval says only that
    # the pauses are one link's, which holds the ECN verdict back)
    assert run.kinds() == [("pause_storm", 1, 20 * S)]
    ev = run.fired[0].evidence
    assert ev["rule"] == "pause_tx" and ev["pause_tx_per_s"] == 80_000.0
    assert ev["share_of_device_pauses"] == 0.994
    # the storm ends; the ports go on pausing 2,000/s between them with few marks: the
    # device's configuration now, a verdict of its own
    run(msg(30 * S, sample(port=1, pfc_pause_tx=1_610_000, ecn_marked=10, port_rcv_data=9),
            sample(port=2, pfc_pause_tx=20_000, ecn_marked=10)))
    assert run.kinds() == [("pause_storm", 1, 20 * S), ("ecn_pfc_misconfig", 1, 30 * S)]
    # a second storm is a new episode of the same port
    run(msg(40 * S, sample(port=1, pfc_pause_tx=2_410_000, ecn_marked=20, port_rcv_data=9),
            sample(port=2, pfc_pause_tx=20_000, ecn_marked=20)))
    assert run.kinds()[-1] == ("pause_storm", 1, 40 * S)


def test_one_port_pausing_at_the_storm_rate_while_data_comes_in_is_judged_by_ecn() -> None:
    """Data still comes in on the port (its peer drains): heavy congestion through one port,
    not a storm; with no marks that is the ECN rule's verdict, as ever."""
    run = Run()
    run(msg(0, sample(port=1, pfc_pause_tx=0, ecn_marked=0, port_rcv_data=7),
            sample(port=2, pfc_pause_tx=0, ecn_marked=0)))
    # (the receive counter's first interval, 10 s, judges nothing; the first at the storm
    # rate with data coming in, 20 s, waits: a storm's first interval has data too)
    for i in (1, 2, 3):
        run(msg(i * 10 * S, sample(port=1, pfc_pause_tx=i * 800_000, ecn_marked=0,
                                   port_rcv_data=7 + i * 5_000_000),
                sample(port=2, pfc_pause_tx=i * 5_000, ecn_marked=0)))
    assert run.kinds() == [("ecn_pfc_misconfig", 1, 30 * S)]


def test_a_storms_first_interval_with_data_still_in_is_no_ecn_verdict() -> None:
    """The queue sticks mid-interval: that interval still received data, the next nothing.
    A pause storm from the sending end, and no ECN verdict for its first interval."""
    run = Run()
    rcv = [7, 5_000_007, 9_000_007, 9_000_007, 9_000_007]
    tx = [0, 1_000, 801_000, 1_601_000, 2_401_000]
    for i in range(5):
        run(msg(i * 10 * S, sample(port=1, pfc_pause_tx=tx[i], ecn_marked=0,
                                   port_rcv_data=rcv[i]),
                sample(port=2, pfc_pause_tx=10 * i, ecn_marked=0)))
    assert run.kinds() == [("pause_storm", 1, 30 * S)]


def test_without_a_receive_counter_one_ports_storm_rate_pauses_are_its_storm() -> None:
    """No port_rcv_data (a single-port NIC, a collector without it): as the watchdog rule
    at the receiving end, unknown does not excuse; a storm of the port, no ECN verdict."""
    run = Run()
    run(msg(0, sample(port=1, pfc_pause_tx=0, ecn_marked=0)))
    run(msg(10 * S, sample(port=1, pfc_pause_tx=800_000, ecn_marked=0)))
    assert run.kinds() == [("pause_storm", 1, 10 * S)]
    assert run.fired[0].evidence["receiving"] is None


def test_a_device_back_to_sums_ends_its_priority_storm() -> None:
    """A device that reported per priority and now reports sums only: its per-priority
    episodes end, so a later storm on that priority is a new episode."""
    def prio(t: int, tx: int) -> PortSample:
        return sample(port=1, pfc_pause_tx=tx, ecn_marked=0, port_rcv_data=7,
                      pfc3_tx=tx, ecn_marked_q3=0)

    run = Run()
    for i in range(3):
        run(msg(i * 10 * S, prio(i, i * 800_000)))
    assert run.kinds() == [("pause_storm", 1, 20 * S)]  # (received data compared from 20 s)
    assert run.state is not None and "3" in run.state["txs"]
    run(msg(30 * S, sample(port=1, pfc_pause_tx=1_600_000, ecn_marked=0, port_rcv_data=7)))
    assert "txs" not in run.state and not run.state["ports"]["1"][2].get("o")


def test_storm_rate_pauses_spread_over_ports_are_the_devices_configuration() -> None:
    # two ports at 60,000 pauses/s each: no one port's storm, every ingress pauses
    run = Run()
    run(msg(0, sample(port=1, pfc_pause_tx=0, ecn_marked=0),
            sample(port=2, pfc_pause_tx=0, ecn_marked=0)))
    run(msg(10 * S, sample(port=1, pfc_pause_tx=600_000, ecn_marked=100),
            sample(port=2, pfc_pause_tx=600_000, ecn_marked=100)))
    assert [k[0] for k in run.kinds()] == ["ecn_pfc_misconfig"]


def test_received_pauses_are_not_the_devices_ecn_verdict() -> None:
    # a port paused by its upstream with no marks of its own: the upstream's business
    run = Run()
    run(msg(0, sample(port=1, pfc_pause_rx=0, pfc_pause_tx=0, ecn_marked=0)))
    run(msg(10 * S, sample(port=1, pfc_pause_rx=40_000, pfc_pause_tx=0, ecn_marked=0)))
    assert run.kinds() == []


def test_degraded_link_once_per_episode_rearms() -> None:
    run = Run()
    run(msg(0, sample(width="4X", speed="NDR")))
    run(msg(10 * S, sample(width="2X", speed="NDR")))
    run(msg(20 * S, sample(width="2X", speed="NDR")))
    run(msg(30 * S, sample(width="4X", speed="NDR")))
    run(msg(40 * S, sample(width="4X", speed="HDR")))
    assert run.kinds() == [("degraded_link", 1, 10 * S), ("degraded_link", 1, 40 * S)]
    assert run.fired[1].evidence["below"] == ["speed"]


def test_degraded_link_plan_expectation_wins() -> None:
    def plan(device: str, port: int) -> tuple[str | None, str | None] | None:
        return ("2X", "HDR") if port == 5 else None

    run = Run(expectation=plan)
    run(msg(0, sample(port=5, width="2X", speed="HDR"), sample(port=6, width="2X", speed="HDR")))
    assert run.kinds() == [("degraded_link", 6, 0)]
    assert run.fired[0].detection == DetectionKind.DEGRADED_LINK


def test_detection_ids_are_deterministic() -> None:
    def go() -> list[str]:
        run = Run()
        run(msg(0, sample(raw_ber=1e-3)))
        return [d.id for d in run.fired]

    assert go() == go() == [f"det:ber/{DEV}:1/ber:raw/{BASE}"]


@pytest.mark.parametrize("columnar", [False, True])
def test_a_read_again_from_far_behind_still_repeats_the_outputs_of_the_messages_ahead(
        columnar: bool) -> None:
    # A worker killed with its local state 47 messages of a device ahead of the committed
    # offset (more than the 32 recent ids) reads them again from the start. The old ones
    # (every sample older than its port's last) are applied but not remembered, so the
    # recent ids still name the messages ahead: c41, whose detections the kill may have
    # kept from going out, repeats them. (Each old one remembered used to push the next
    # ones' ids out: no message after them was recognised, its outputs lost for good.)
    engine = Engine(Policy())
    base = 1_700_000_000_000
    msgs = [Counters(id=f"t-c{i}", ts=base + i * 10_000, fabric="f", source="perfquery",
                     device="leaf-t-ctr", ports=[PortSample(port=q, link_downed=0,
                                                            symbol_errors=i * i * 50)
                                                 for q in range(1, 5)]) for i in range(60)]

    def apply(box: Any, m: Counters) -> tuple[Any, list[Any], bool]:
        if columnar:
            box, dets, _, again, _ = engine.apply_counter_columns(box, CounterColumns.of(m), None)
        else:
            box, dets, _, again = engine.apply_counters(box, m)
        return box, dets, again

    box = None
    first: dict[str, list[Any]] = {}
    for m in msgs[:47]:
        box, dets, _ = apply(box, m)
        first[m.id] = [d.to_wire() for d in dets]
    fired = [i for i, d in first.items() if d]
    assert fired, "some message of the first run detects (the outputs at stake)"
    stale_before = box["s"]["stale"]
    for m in msgs[:47]:
        box, dets, again = apply(box, m)
        if m.id in {r[0] for r in box["r"]} or again:
            assert again and [d.to_wire() for d in dets] == first[m.id], m.id
        else:
            assert dets == [], m.id  # older than the state: nothing, and not remembered
    assert {r[0] for r in box["r"]} == {m.id for m in msgs[15:47]}
    assert box["s"]["stale"] == stale_before + 15 * 4  # c0..c14 read again, older
    assert "old" not in box["s"]


def test_an_episode_of_the_other_basis_ends_when_its_port_reported_or_is_gone() -> None:
    """A device-basis episode held by a port that stays sums-only ends once the device is
    judged per queue and that port has reported; a per-priority episode whose port is gone
    for good ends after GONE_INTERVALS of the device's messages without it."""
    run = Run()
    for t in (0, 10, 20):
        run(msg(t * S, sample(port=1, pfc_pause_tx=100 * t, ecn_marked=0),
                sample(port=2, pfc_pause_tx=3000 * t, ecn_marked=0)))
    assert [k[:2] for k in run.kinds()] == [("ecn_pfc_misconfig", 2)]
    for t in range(30, 80, 10):  # port 1 per priority from now, marks keeping up
        run(msg(t * S, sample(port=1, pfc_pause_tx=2000, ecn_marked=5000 * t, pfc3_tx=0,
                              ecn_marked_q3=5000 * t),
                sample(port=2, pfc_pause_tx=60_000, ecn_marked=1000 * t)))
    assert run.state is not None and "ecn" not in run.state
    assert not run.state["ports"]["2"][2].get("o")
    gone = Run()
    for t in (0, 10, 20):
        gone(msg(t * S, sample(port=1, pfc_pause_tx=3000 * t, ecn_marked=0, pfc3_tx=3000 * t,
                               ecn_marked_q3=0),
                 sample(port=2, pfc_pause_tx=0, ecn_marked=0)))
    assert [k[:2] for k in gone.kinds()] == [("ecn_pfc_misconfig", 1)]
    for t in range(30, 80, 10):  # port 1 no longer reported; port 2 sums, marks keeping up
        gone(msg(t * S, sample(port=2, pfc_pause_tx=10 * t, ecn_marked=1000 * t)))
    assert gone.state is not None and "ecnq" not in gone.state
    assert not gone.state["ports"]["1"][2].get("o")


def test_lasting_congestion_through_one_port_is_judged_every_interval() -> None:
    """Data keeps coming in on port 1 at the storm rate; its marks stop at 40 s. The wait
    is for the first such interval only: the verdict comes at 40 s, not every other one."""
    run = Run()
    tx = rcv = marks = 0
    for i in range(8):
        if i:
            tx, rcv = tx + 800_000, rcv + 5_000_000
            marks += 1_000_000 if i < 4 else 0
        run(msg(i * 10 * S, sample(port=1, pfc_pause_tx=tx, ecn_marked=marks, port_rcv_data=rcv),
                sample(port=2, pfc_pause_tx=i * 5000, ecn_marked=0)))
    assert run.kinds() == [("ecn_pfc_misconfig", 1, 40 * S)]


def test_a_device_whose_ports_come_in_two_messages_is_judged_as_in_one() -> None:
    """Port 1 (heavy congestion, data in, no marks) in one message, ports 2-3 a second later:
    a message without the waiting or holding port is no word on it. The same verdict, once,
    as when the poll is one message."""
    def poll(split: bool) -> list[tuple[str, int, int]]:
        run = Run()
        tx = rcv = 0
        for i in range(12):
            if i:
                tx, rcv = tx + 800_000, rcv + 5_000_000
            one = sample(port=1, pfc_pause_tx=tx, ecn_marked=0, port_rcv_data=rcv)
            rest = [sample(port=p, pfc_pause_tx=i * 500, ecn_marked=0) for p in (2, 3)]
            if split:
                run(msg(i * 10 * S, one))
                run(msg(i * 10 * S + S, *rest))
            else:
                run(msg(i * 10 * S, one, *rest))
        return run.kinds()

    assert poll(True) == poll(False) == [("ecn_pfc_misconfig", 1, 30 * S)]


def test_a_wait_left_from_the_device_basis_does_not_outlive_a_basis_change() -> None:
    """Port 1 waits at the storm rate (15 s), the device then reports per priority for a
    while, then sums only again and its queue sticks (70 s still carries data, 80 s none):
    a storm from the sending end, no ECN verdict from the old wait."""
    run = Run()
    tx = rcv = 0

    def other(i: int) -> PortSample:
        return sample(port=2, pfc_pause_tx=i * 50, ecn_marked=0)

    run(msg(0, sample(port=1, pfc_pause_tx=0, ecn_marked=0, port_rcv_data=0), other(0)))
    for t, d_tx in ((10, 10), (15, 800_000)):
        tx, rcv = tx + d_tx, rcv + 5_000_000
        run(msg(t * S, sample(port=1, pfc_pause_tx=tx, ecn_marked=0, port_rcv_data=rcv),
                other(1)))
    for i in (2, 3, 4, 5, 6):  # per priority, marks keeping up
        tx, rcv = tx + 100, rcv + 5_000_000
        run(msg(i * 10 * S, sample(port=1, pfc_pause_tx=tx, ecn_marked=10**6 * i,
                                   port_rcv_data=rcv, pfc3_tx=tx, ecn_marked_q3=10**6 * i),
                other(i)))
    for i, d_rcv in ((7, 3_000_000), (8, 0), (9, 0)):
        tx, rcv = tx + 800_000, rcv + d_rcv
        run(msg(i * 10 * S, sample(port=1, pfc_pause_tx=tx, ecn_marked=0, port_rcv_data=rcv),
                other(i)))
    assert run.kinds() == [("pause_storm", 1, 80 * S)]
