"""Counter state per (device, source): two sources of one port never read as resets or downs."""

from __future__ import annotations

from pathlib import Path

from collectors.telemetry import parse_mlxlink
from schemas import Counters, PortSample
from schemas.policy import Policy
from streams.counters.logic import counters_key
from streams.engine import Engine

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
BASE = 1_700_002_800_000
DEV = "node0007/mlx5_1"


def perfquery(t: int, ler: int, downed: int, sym: int) -> Counters:
    return Counters(id=f"pq-{t}", ts=BASE + t, fabric="lab", source="perfquery", device=DEV,
                    ports=[PortSample(port=1, link_error_recovery=ler, link_downed=downed,
                                      symbol_errors=sym)])


def mlxlink(t: int, ler: int, phy_downs: int) -> Counters:
    # mlxlink's own counters: the PHY's link-down and recovery counts since its last clear
    return Counters(id=f"mx-{t}", ts=BASE + t, fabric="lab", source="mlxlink", device=DEV,
                    ports=[PortSample(port=1, link_error_recovery=ler,
                                      phy_link_down=phy_downs, raw_ber=1e-9)])


def test_interleaved_sources_are_two_states_without_resets_or_downs() -> None:
    engine = Engine(Policy())
    fired = []
    for i in range(40):  # perfquery every 10 s, mlxlink 5 s after each
        t = i * 10_000
        fired += engine.feed(perfquery(t, ler=3, downed=2, sym=10))
        fired += engine.feed(mlxlink(t + 5_000, ler=250, phy_downs=9))
    assert fired == []
    keys = sorted(engine.devices)
    assert keys == sorted([counters_key("lab", DEV, "perfquery"),
                           counters_key("lab", DEV, "mlxlink")])
    for key in keys:
        ext = engine.devices[key]["s"]["ports"]["1"][2]
        assert ext is None or "r" not in ext, (key, ext)  # no reset was ever seen


def test_one_source_still_sees_its_own_link_downs() -> None:
    engine = Engine(Policy())
    engine.feed(perfquery(0, ler=3, downed=2, sym=10))
    engine.feed(mlxlink(5_000, ler=250, phy_downs=9))
    engine.feed(mlxlink(15_000, ler=251, phy_downs=10))  # a PHY down: not a PMA LinkDowned
    flap = engine.flap.get(f"lab/{DEV}:1")
    assert flap is None or not flap.intervals
    engine.feed(perfquery(20_000, ler=4, downed=3, sym=10))  # the PMA counted one
    flap = engine.flap[f"lab/{DEV}:1"]
    assert [(start - BASE, ts - BASE, n) for _id, start, ts, n in flap.intervals] == [
        (0, 20_000, 1)]


def test_mlxlink_link_down_counter_is_the_phy_counter() -> None:
    text = (FIXTURES / "mlxlink" / "cx7-400g-dr4-module-counters.json").read_text()
    (msg,) = parse_mlxlink(text, fabric="lab", ts=BASE, device=DEV)
    (sample,) = msg.ports
    assert sample.phy_link_down == 0  # "Link Down Counter": "0"
    assert sample.link_downed is None  # the PMA's LinkDowned is not what mlxlink printed


def test_two_sources_of_one_pma_counter_count_each_down_once() -> None:
    """perfquery and UFM both read the PMA's LinkDowned: apart states, each down once."""
    engine = Engine(Policy())

    def pma(source: str, t: int, downed: int) -> Counters:
        return Counters(id=f"{source}-{t}", ts=BASE + t, fabric="lab", source=source,
                        device=DEV, ports=[PortSample(port=1, link_downed=downed)])

    fired = []
    for i in range(12):  # a down every minute, seen by both sources
        t = i * 60_000
        fired += engine.feed(pma("perfquery", t, downed=i))
        fired += engine.feed(pma("ufm", t + 20_000, downed=i))
    flap = engine.flap[f"lab/{DEV}:1"]
    assert sum(n for *_, n in flap.intervals) == 11 and flap.other_source == 11
    # five downs in the window is what the policy allows (maxLinkDowns): one flap episode,
    # as one source alone would give
    single = Engine(Policy())
    alone = [d for i in range(12) for d in single.feed(pma("perfquery", i * 60_000, i))]
    assert [(d.detection.value, d.ts) for d in fired] == [
        (d.detection.value, d.ts) for d in alone] != []
