"""BER by link type (NVIDIA's field table), hysteresis and the packet drop rate, replayed.

Every history goes through ``streams.replay`` (the worker's own detector code, in order),
as contract JSON lines. The link is 4X NDR (400 Gb/s) unless a test says otherwise:
12 min carry 2.88e14 bits, 125 min 3e15, a 5-min BER window 1.2e14.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas import Counters, Detection, PortSample, encode
from schemas.policy import Policy
from streams.replay import replay

S = 1000
M = 60 * S
BASE = 1_700_002_800_000
DEV = "leaf-su02-r1"
BPS = 400e9  # 4X NDR


def line(t: int, **values: Any) -> bytes:
    values.setdefault("width", "4X")
    values.setdefault("speed", "NDR")
    return encode(Counters(id=f"c-{t}", ts=BASE + t, fabric="lab", source="mlxlink",
                           device=DEV, ports=[PortSample(port=1, **values)]))


def run(lines: list[bytes], policy: Policy | None = None) -> list[Detection]:
    return list(replay(lines, policy or Policy(), on_error=None))


def kinds(dets: list[Detection]) -> list[tuple[str, int]]:
    return [(d.detection.value, (d.ts - BASE) // M) for d in dets]


def symbol_history(bursts: dict[int, int], minutes: int) -> list[bytes]:
    """A sample a minute; ``bursts`` adds symbol errors at those minutes."""
    total, out = 0, []
    for minute in range(minutes + 1):
        total += bursts.get(minute, 0)
        out.append(line(minute * M, symbol_errors=total))
    return out


def test_symbol_errors_over_the_125_minute_limit_fire_though_12_minutes_never_do() -> None:
    # 2 errors at 10 min, 2 more at 30 min: no 12-min window holds more than 2
    # (6.9e-15 < 1e-14), but 4 in 125 min is 1.3e-15 > PDR's 1e-15.
    dets = run(symbol_history({10: 2, 30: 2}, 60))
    # 2 in 125 min (6.7e-16) is above the warning level (5e-16): a ticket first
    assert kinds(dets) == [("ber_warning", 10), ("ber", 30)]
    ber = dets[1].evidence
    assert ber["metric"] == "symbol_ber" and ber["level"] == "error"
    assert ber["symbol_errors"] == [2, 4] and ber["windows_s"] == [720.0, 7500.0]
    assert ber["window_ber"][0] < 1e-14 < ber["window_ber"][1] * 10
    assert ber["link"]["speed"] == "NDR" and ber["link"]["assumed"] == ["fec", "media"]
    assert dets[1].action.value == "isolate_port" and dets[0].action.value == "ticket"


def test_symbol_errors_below_both_limits_do_not_fire() -> None:
    # one error, then one more after the first has left the 125-min window
    assert run(symbol_history({10: 1, 140: 1}, 150)) == []


def raw_history(phases: list[tuple[float, int]], **values: Any) -> list[bytes]:
    """A sample a minute; each phase is (pre-FEC BER, minutes) of corrected errors."""
    total, t, out = 0, 0, [line(0, fec_corrected=0, **values)]
    for ber, minutes in phases:
        for _ in range(minutes):
            t += M
            total += round(ber * BPS * 60)
            out.append(line(t, fec_corrected=total, **values))
    return out


def test_an_episode_opens_at_error_and_closes_only_below_normal() -> None:
    # NDR PLR optic pre-FEC levels: error 1e-5, warning 5e-6, normal 1e-6
    history = raw_history([(2e-5, 10), (9e-6, 20), (2e-6, 20), (5e-7, 10), (2e-5, 10)])
    dets = run(history)
    # open at the first window (5 min); just under error and then between normal and
    # warning it stays the same episode (no re-fire, no warning); below normal it ends, so
    # the next rise is a new episode
    assert kinds(dets) == [("ber", 5), ("ber", 65)]
    first = dets[0].evidence
    assert first["metric"] == "raw_ber" and first["basis"] == "window"
    assert first["value"] == pytest.approx(2e-5, rel=1e-6)
    assert (first["error"], first["warning"], first["normal"]) == (1e-5, 5e-6, 1e-6)
    assert dets[0].episode != dets[1].episode


def test_a_link_at_the_warning_level_gets_the_warning_detection_only() -> None:
    dets = run(raw_history([(7e-6, 30)]))
    assert kinds(dets) == [("ber_warning", 5)]
    assert dets[0].evidence["level"] == "warning" and dets[0].severity.value == "warning"


def test_the_links_own_fec_and_media_choose_the_row() -> None:
    # 2e-6 pre-FEC: above copper's error level (1e-6), below optic's warning level (5e-6)
    copper = run(raw_history([(2e-6, 10)], media="copper"))
    optic = run(raw_history([(2e-6, 10)], media="optic"))
    assert kinds(copper) == [("ber", 5)] and optic == []
    assert copper[0].evidence["link"]["media"] == "copper"
    # post-FEC 1e-12: fine under PLR (error 1e-11), an error under KP4 without PLR (1e-13),
    # with the FEC as mlxlink prints it
    def post(fec: str) -> list[Detection]:
        out, total = [line(0, fec_uncorrectable=0, fec_mode=fec)], 0
        for minute in range(1, 11):
            total += round(1e-12 * BPS * 60)
            out.append(line(minute * M, fec_uncorrectable=total, fec_mode=fec))
        return run(out)

    assert kinds(post("Standard_RS-FEC - (544,514)")) == [("ber", 5)]
    assert post("Ethernet_Consortium_LL_50G_RS_FEC_PLR") == []


def test_since_clear_ber_is_a_fallback_marked_so() -> None:
    # mlxlink's since-clear raw BER with no FEC counters: judged, and said so
    dets = run([line(0, raw_ber=2e-5), line(M, raw_ber=2e-5)])
    assert kinds(dets) == [("ber", 0)] and dets[0].evidence["basis"] == "since_clear"
    # with the counters the windows decide: a since-clear average still high from an old
    # bad spell fires only until the first window shows the link clean, then never again
    history = [line(0, fec_corrected=0, raw_ber=2e-5)]
    for minute in range(1, 30):
        history.append(line(minute * M, fec_corrected=round(1e-8 * BPS * 60) * minute,
                            raw_ber=2e-5))
    dets = run(history)
    assert kinds(dets) == [("ber", 0)] and dets[0].evidence["basis"] == "since_clear"


def test_packet_drop_rate_where_packets_are_reported() -> None:
    out, pkts, errs = [], 0, 0
    for minute in range(31):
        pkts += 200_000_000
        if 11 <= minute <= 15:
            errs += 1
        out.append(line(minute * M, port_rcv_pkts=pkts, rcv_errors=errs, port_xmit_pkts=pkts,
                        xmit_discards=0))
    dets = run(out)
    assert kinds(dets) == [("drop_rate", 15)]
    ev = dets[0].evidence
    assert ev["rcv_errors"] == 5 and ev["port_rcv_pkts"] == 1_000_000_000
    assert ev["xmit_drop_rate"] == 0 and ev["threshold"] == 1e-12
    # packets without errors: nothing
    assert run([line(m * M, port_rcv_pkts=m * 10**9, rcv_errors=0) for m in range(20)]) == []


def test_the_soak_judges_at_normal() -> None:
    soak = Policy.from_yaml("fabricHealth: {ber: {fireAt: normal}}")
    history = raw_history([(2e-6, 10)])  # between normal and warning
    assert run(history) == []
    assert kinds(run(history, soak)) == [("ber", 5)]


def test_mlxlinks_own_output_names_its_link_type() -> None:
    from pathlib import Path

    from collectors.telemetry import parse_mlxlink
    from streams.counters.ber import BerRules

    fixture = Path(__file__).resolve().parents[2] / "fixtures" / "mlxlink"
    text = (fixture / "cx7-400g-dr4-module-counters.json").read_text()
    [event] = parse_mlxlink(text, fabric="lab", ts=BASE, device="gpu-node-1/mlx5_0")
    sample = event.ports[0]
    assert (sample.fec_mode, sample.media) == ("Standard_RS-FEC - (544,514)", "optic")
    link, assumed = BerRules(Policy()).link(sample.speed, sample.fec_mode, sample.media)
    # KP4 RS-FEC without PLR on an active optic: post-FEC error at 1e-13, not PLR's 1e-11
    assert {r.fec_opcode for r in link.rows} == {7} and assumed == ("speed",)
    assert link.post_fec.error == 1e-13 and link.pre_fec.error == 1e-5
    # its since-clear BER (raw 5e-10) is healthy: nothing fires
    assert run([encode(event)]) == []


def test_the_plans_media_where_the_sample_says_none() -> None:
    from streams.engine import Context
    from streams.topology.plan import load_plan, media_from_plan

    plan = load_plan(f"a_device,a_port,b_device,b_port,media\n{DEV},1,node/mlx5_0,1,dac\n")
    history = raw_history([(2e-6, 10)])  # above copper's error level, under optics' warning
    assert run(history) == []
    dets = list(replay(history, Policy(), context=Context(media=media_from_plan(plan)),
                       on_error=None))
    assert kinds(dets) == [("ber", 5)] and dets[0].evidence["link"]["media"] == "dac"
    # the gauge's floor covers copper too when the sample does not say its media
    gauge = [line(0, raw_ber=8e-7), line(M, raw_ber=8e-7)]
    dets = list(replay(gauge, Policy(), context=Context(media=media_from_plan(plan)),
                       on_error=None))
    assert kinds(dets) == [("ber_warning", 0)]


def test_the_soak_judges_gauges_at_normal_too() -> None:
    soak = Policy.from_yaml("fabricHealth: {ber: {fireAt: normal}}")
    gauge = [line(0, raw_ber=2e-6), line(M, raw_ber=2e-6)]  # optic: above normal (1e-6)
    assert run(gauge) == [] and kinds(run(gauge, soak)) == [("ber", 0)]


@given(st.lists(st.floats(min_value=0, max_value=1e-3, allow_nan=False), max_size=60))
def test_hysteresis_never_reopens_without_passing_below_normal(values: list[float]) -> None:
    from schemas.ber_table import Levels
    from streams.counters.ber import next_level

    levels = Levels(1e-5, 5e-6, 1e-6)
    error = warning = False
    below_normal_since_open = True
    for value in values:
        level = next_level(value, levels, error, warning)
        if level == "error" and not error:
            assert value > levels.error and below_normal_since_open
            below_normal_since_open = False
        if error and level != "error":
            assert value < levels.normal  # an episode ends only below normal
        if value < levels.normal:
            below_normal_since_open = True
        if level == "warning" and not warning:
            assert levels.warning < value <= levels.error and not error
        error, warning = level == "error", level == "warning"


def test_a_policy_whose_speed_the_table_lacks_is_judged_by_the_strictest_row() -> None:
    # an SDR lab (ibsim) or an XDR fabric: the policy loads, and a link that says nothing of
    # itself is judged by the table's strictest row for the media, never more loosely
    from streams.counters.ber import BerRules

    sdr = Policy.model_validate({"fabricHealth": {"degradedLink": {"expectSpeed": "SDR"}}})
    rules = BerRules(sdr)
    link, assumed = rules.link(None, None, None)
    every = [BerRules(Policy()).link(speed, None, "optic")[0] for speed in ("EDR", "HDR", "NDR")]
    assert link.pre_fec.error <= min(x.pre_fec.error for x in every)
    assert assumed == ("speed", "fec", "media")
    with pytest.raises(ValueError, match="unknown FEC mode"):
        Policy.model_validate({"fabricHealth": {"degradedLink": {"expectSpeed": "SDR"},
                                                "ber": {"fec": "no-such-fec"}}})


def test_a_fec_the_table_lacks_at_that_speed_is_judged_by_its_strictest_row() -> None:
    from streams.counters.ber import BerRules

    rules = BerRules(Policy())
    # EDR has no PLR row: not NDR's loose pre-FEC levels, but EDR's strictest (NO_FEC, 1e-13)
    link, assumed = rules.link("EDR", None, "optic")
    assert link.fec == "strictest" and assumed == ("fec",)
    assert link.pre_fec.error == 1e-13 and link.speed == "EDR"
    # a speed the table has no row for: the policy's own link type, all of it assumed
    link, assumed = rules.link("XDR", "PLR", "optic")
    assert (link.speed, link.fec, assumed) == ("NDR", "PLR", ("speed", "fec", "media"))
    # an EDR link at a pre-FEC BER that is healthy at NDR but not at EDR
    dets = [d for d in run(raw_history([(1e-9, 10)], speed="EDR"))
            if d.detection.value != "degraded_link"]  # EDR is below the policy's NDR too
    assert kinds(dets) == [("ber", 5)] and dets[0].evidence["link"]["fec"] == "strictest"
