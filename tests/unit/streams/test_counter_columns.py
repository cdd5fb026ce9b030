"""The columnar counters path: the same states and outputs as the per-sample path.

``CountersDetector.step_columns`` skips the per-sample rules for the ports its column checks
find quiet (``streams.counters.columns``). Skipping may only ever happen where the
per-sample rules would have done nothing but stamp the port's time: random sequences of
messages (counters that move or stand still, resets, ports that come and go, stale
messages, BER, optics, credit waits, pauses, watchdog stats, legacy registers at their
maximum, a plan's expectation) go through both paths, and the device state (as stored), the
detections and the counter downs must be identical after every message, whether the view
is kept, dropped (a restart) or the state read back from its stored bytes.
"""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas import CounterColumns, Counters, decode
from schemas.policy import Policy
from streams.counters.columns import View
from streams.counters.logic import CountersDetector
from streams.degraded_link.logic import Expectation

T0 = 1_700_000_000_000

# small, so values often stand still and sometimes fall (resets); and a legacy register's
# maximum (16-bit symbol errors, 8-bit link downs) now and then
counter = st.integers(0, 3) | st.sampled_from([255, 65535])
maybe = st.none() | counter


@st.composite
def port_sample(draw: st.DrawFn, port: int) -> dict[str, Any]:
    row: dict[str, Any] = {"port": port}
    for name in ("symbol_errors", "link_error_recovery", "link_downed", "rcv_errors",
                 "xmit_discards"):
        row[name] = draw(maybe)
    if draw(st.booleans()):
        row.update(fec_corrected=draw(st.integers(0, 10**9)), fec_uncorrectable=draw(maybe))
    if draw(st.booleans()):
        row.update(port_rcv_pkts=draw(st.integers(0, 10**6)),
                   port_xmit_pkts=draw(st.integers(0, 10**6)))
    if draw(st.booleans()):
        row.update(raw_ber=draw(st.sampled_from([1e-12, 1e-9, 3e-5, 1e-3])),
                   effective_ber=draw(st.sampled_from([1e-16, 1e-13, 1e-9])))
    if draw(st.booleans()):
        row.update(width=draw(st.sampled_from(["4X", "2X", None])),
                   speed=draw(st.sampled_from(["NDR", "HDR", None])))
    if draw(st.booleans()):
        row.update(module_temp_c=draw(st.sampled_from([40.0, 55.5, 69.0, 75.0])),
                   rx_power_dbm=draw(st.sampled_from([-2.0, -6.5, -12.0])))
    if draw(st.booleans()):
        row["xmit_wait"] = draw(st.integers(0, 10**9))
        row["port_xmit_data"] = draw(st.integers(0, 10**9))
    if draw(st.integers(0, 4)) == 0:
        row.update(pfc_pause_rx=draw(st.integers(0, 10**6)),
                   pfc_pause_tx=draw(st.integers(0, 10**6)),
                   ecn_marked=draw(st.integers(0, 10**6)))
        if draw(st.booleans()):
            row["pfc_pause_duration_us"] = draw(st.integers(0, 10**8))
        if draw(st.booleans()):
            row["pfc3_tx"] = draw(st.integers(0, 10**6))
            row["ecn_marked_q3"] = draw(st.integers(0, 10**6))
    if draw(st.integers(0, 9)) == 0:
        row["pfcwd_q3_storm_detected"] = draw(st.integers(0, 2))
    if draw(st.integers(0, 9)) == 0:
        row["counter_bits"] = {"symbol_errors": 2}
    if draw(st.integers(0, 9)) == 0:
        row["error"] = "read failed"
    return {k: v for k, v in row.items() if v is not None or draw(st.booleans())}


# What a message may change about a port's last sample (most of a message stands still, so
# the column checks have quiet ports to find, and one changed value to notice).
CHANGES: dict[str, st.SearchStrategy[Any]] = {
    "symbol_errors": maybe, "link_downed": maybe, "rcv_errors": maybe,
    "fec_corrected": st.integers(0, 10**9), "fec_uncorrectable": maybe,
    "port_rcv_pkts": st.integers(0, 10**6),
    "raw_ber": st.sampled_from([None, 1e-12, 1e-9, 3e-5, 1e-3]),
    "effective_ber": st.sampled_from([None, 1e-16, 1e-13, 1e-9]),
    "width": st.sampled_from(["4X", "2X", None]), "speed": st.sampled_from(["NDR", "HDR", None]),
    "fec_mode": st.sampled_from([None, "RS-FEC (544,514)", "PLR"]),
    "media": st.sampled_from([None, "dac", "active"]),
    "module_temp_c": st.sampled_from([None, 40.0, 55.5, 69.0, 75.0]),
    "rx_power_dbm": st.sampled_from([None, -2.0, -6.5, -12.0]),
    "xmit_wait": st.integers(0, 10**9), "pfc_pause_rx": st.integers(0, 10**6),
    "pfc_pause_duration_us": st.integers(0, 10**8),
    "pfcwd_q3_storm_detected": st.sampled_from([None, 0, 1]),
    "counter_bits": st.sampled_from([None, {"symbol_errors": 2}]),
    "rx_power_low_dbm": st.sampled_from([None, -9.0]),
}


@st.composite
def message_plan(draw: st.DrawFn) -> list[tuple[int, str, list[dict[str, Any]], str]]:
    """(ts, source, samples, what happens to the view before it)."""
    ports = draw(st.lists(st.integers(1, 8), min_size=1, max_size=5, unique=True))
    source = draw(st.sampled_from(["gnmi", "perfquery", "ufm"]))
    last = {p: draw(port_sample(p)) for p in ports}
    out = []
    ts = T0
    for _ in range(draw(st.integers(1, 16))):
        ts += draw(st.sampled_from([0, -5_000, 10_000, 10_000, 10_000, 60_000, 300_000,
                                    900_000, 7_200_000]))
        ts = max(ts, T0)
        chosen = ports if draw(st.integers(0, 5)) else draw(
            st.lists(st.sampled_from(ports), min_size=1, max_size=len(ports), unique=True))
        for p in chosen:
            if draw(st.integers(0, 2)) == 0:
                name = draw(st.sampled_from(sorted(CHANGES)))
                value = draw(CHANGES[name])
                if value is None and draw(st.booleans()):
                    last[p].pop(name, None)
                else:
                    last[p][name] = value
        samples = [dict(last[p]) for p in chosen]
        out.append((ts, source, samples, draw(st.sampled_from(["keep"] * 6 + ["drop",
                                                                               "reload"]))))
    return out


def _expectation(device: str, port: int) -> Expectation | None:
    return ("4X", "NDR") if port % 2 else None


def _uplinks(device: str) -> frozenset[int]:
    return frozenset({1, 2, 3, 4})


def _columns(i: int, ts: int, source: str, samples: list[dict[str, Any]]) -> CounterColumns:
    names: dict[str, None] = {}
    for s in samples:
        names.update(dict.fromkeys(s))
    cols = {n: [s.get(n) for s in samples] for n in names}
    raw = orjson.dumps({"v": 1, "id": f"leaf-1/{i}", "ts": ts, "fabric": "f",
                        "source": source, "kind": "counter_columns", "device": "leaf-1",
                        "columns": cols})
    msg = decode(raw)
    assert isinstance(msg, CounterColumns)
    return msg


def _wire(out: tuple[Any, ...]) -> tuple[bytes, list[Any], list[Any]]:
    state, dets, downs = out[:3]
    return (orjson.dumps(state), [d.to_wire() for d in dets], [d.to_wire() for d in downs])


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=message_plan(), with_plan=st.booleans())
def test_columnar_path_equals_the_per_sample_path(
        plan: list[tuple[int, str, list[dict[str, Any]], str]], with_plan: bool) -> None:
    kw: dict[str, Any] = {"expectation": _expectation, "uplinks": _uplinks} if with_plan else {}
    rows_det = CountersDetector(Policy(), **kw)
    cols_det = CountersDetector(Policy(), **kw)
    rows_state: dict[str, Any] | None = None
    cols_state: dict[str, Any] | None = None
    view: View | None = None
    for i, (ts, source, samples, fate) in enumerate(plan):
        msg = _columns(i, ts, source, samples)
        if fate == "drop":
            view = None
        elif fate == "reload" and cols_state is not None:
            cols_state = orjson.loads(orjson.dumps(cols_state))  # the view now points at
        a = rows_det.step(rows_state, msg.rows())                # a state that is gone
        b = cols_det.step_columns(cols_state, msg, view)
        assert _wire(a) == _wire(b), f"message {i} ({fate})"
        rows_state, cols_state, view = a[0], b[0], b[3]


def test_a_quiet_message_judges_no_port() -> None:
    """The point of it: an unchanged healthy message leaves every port to the columns."""
    det = CountersDetector(Policy())
    row = {"symbol_errors": 0, "link_downed": 0, "rcv_errors": 0, "fec_corrected": 5,
           "raw_ber": 1e-12, "width": "4X", "speed": "NDR", "xmit_wait": 7,
           "module_temp_c": 40.0, "rx_power_dbm": -2.0}
    state, view = None, None
    picked: list[int] | None = None
    for i in range(4):
        samples = [{"port": p, **row, "fec_corrected": 5 + i, "xmit_wait": 7 + i}
                   for p in range(1, 65)]
        msg = _columns(i, T0 + i * 10_000, "gnmi", samples)
        if view is not None:
            from streams.counters import columns
            got = columns.select(det, state, msg.column_map(), msg.ts, view, False)
            assert got is not None
            picked = got[1]
            assert got[2] == []  # no credit-wait window due within these 30 s
        state, dets, downs, view = det.step_columns(state, msg, view)
        assert not dets and not downs
    assert picked == []


def test_rows_and_columns_round_trip() -> None:
    samples = [{"port": 1, "symbol_errors": 3, "width": "4X", "rx_power_low_dbm": -9.0},
               {"port": 2, "symbol_errors": None, "speed": "NDR"}]
    rows = Counters.model_validate({"id": "x", "ts": T0, "fabric": "f", "source": "gnmi",
                                    "device": "leaf-1", "ports": samples})
    cols = CounterColumns.of(rows)
    assert cols.column_map()["rx_power_low_dbm"] == [-9.0, None]
    assert cols.rows() == rows
    assert decode(orjson.dumps(cols.to_wire())).rows() == rows  # type: ignore[union-attr]


def test_a_register_width_reported_at_its_maximum_is_judged() -> None:
    """A port whose counter stands still, then is said to sit at its register's maximum:
    nothing moved, yet the per-sample rules must see it (saturation)."""
    det = CountersDetector(Policy())
    state, view = None, None
    out: list[str] = []
    for i, extra in enumerate([{}, {}, {"counter_bits": {"symbol_errors": 2}}]):
        msg = _columns(i, T0 + i * 10_000, "gnmi", [{"port": 1, "symbol_errors": 3, **extra},
                                                    {"port": 2, "symbol_errors": 0}])
        state, dets, _, view = det.step_columns(state, msg, view)
        out += [d.detection.value for d in dets]
    assert out == ["counter_saturated"]


def test_credit_wait_windows_close_from_the_columns_and_a_congested_port_is_judged_alone(
        monkeypatch: Any) -> None:
    """Every port's credit-wait window ends in the same message: the quiet ones close from
    the columns, the one above the congestion share (and a port with no rarer state yet)
    as the per-sample rules would; same states, detections and hot-uplink judgement."""
    from streams.counters import columns

    closed: list[tuple[int, int]] = []  # (judged from the columns, sent back)
    close = columns.close_waits

    def counting(*args: Any) -> list[int]:
        judged: list[Any] = args[-1]
        before = len(judged)
        back = close(*args)
        closed.append((len(judged) - before, len(back)))
        return back

    monkeypatch.setattr(columns, "close_waits", counting)
    kw: dict[str, Any] = {"uplinks": _uplinks}
    rows_det, cols_det = CountersDetector(Policy(), **kw), CountersDetector(Policy(), **kw)
    rows_state: dict[str, Any] | None = None
    cols_state: dict[str, Any] | None = None
    view: View | None = None
    kinds: list[str] = []
    for i in range(25):
        samples = []
        for p in range(1, 9):
            row: dict[str, Any] = {"port": p, "symbol_errors": 0, "width": "4X",
                                   "speed": "NDR", "port_xmit_data": 10**6 * i}
            if p != 6 or i >= 3:  # port 6 reports credit waits only from the fourth poll
                row["xmit_wait"] = (10**12 if p == 3 else 17) * i + p
            samples.append(row)
        msg = _columns(i, T0 + i * 10_000, "gnmi", samples)
        a = rows_det.step(rows_state, msg.rows())
        b = cols_det.step_columns(cols_state, msg, view)
        assert _wire(a) == _wire(b), f"message {i}"
        rows_state, cols_state, view = a[0], b[0], b[3]
        kinds += [d.detection.value for d in b[1]]
    assert "congestion" in kinds
    assert sum(j for j, _ in closed) >= 2 * 6 and sum(b for _, b in closed) >= 1, closed


@st.composite
def pause_plan(draw: st.DrawFn) -> list[tuple[int, list[dict[str, Any]], str]]:
    """Counters that only grow, of RoCE ports pausing: at the storm rate, a little, or not,
    with or without marks and received data, per priority or summed."""
    ports = draw(st.lists(st.integers(1, 6), min_size=1, max_size=4, unique=True))
    prio = draw(st.booleans())
    cur = {p: {"port": p, "pfc_pause_tx": 0, "ecn_marked": 0, "pfc_pause_rx": 0,
               "port_rcv_data": 0} for p in ports}
    if prio:
        for p in ports:
            cur[p].update(pfc3_tx=0, ecn_marked_q3=0)
    ts, out = 1_700_000_000_000, []
    for _ in range(draw(st.integers(2, 12))):
        ts += draw(st.sampled_from([10_000, 10_000, 20_000, 0]))
        for p in ports:
            mode = draw(st.sampled_from(["storm", "some", "same"]))
            d = {"storm": 900_000, "some": 20_000, "same": 0}[mode]
            cur[p]["pfc_pause_tx"] += d
            if prio:
                cur[p]["pfc3_tx"] += d
            cur[p]["ecn_marked"] += draw(st.sampled_from([0, 0, 60_000]))
            rcv = draw(st.sampled_from(["same", "more", "gone"]))
            if rcv == "gone":
                cur[p]["port_rcv_data"] = None
            elif cur[p]["port_rcv_data"] is None:
                cur[p]["port_rcv_data"] = 5
            elif rcv == "more":
                cur[p]["port_rcv_data"] += 10**6
        chosen = draw(st.lists(st.sampled_from(ports), min_size=1, unique=True))
        out.append((ts, [dict(cur[p]) for p in sorted(chosen)],
                    draw(st.sampled_from(["keep"] * 6 + ["drop", "reload"]))))
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=pause_plan())
def test_columnar_path_equals_the_per_sample_path_for_pauses(
        plan: list[tuple[int, list[dict[str, Any]], str]]) -> None:
    """The device-wide rules (ECN vs PFC, the sending end's storm) open and close episodes
    after the ports are judged: a kept view must see them (the rows and columns agree)."""
    rows_det, cols_det = CountersDetector(Policy()), CountersDetector(Policy())
    rows_state: dict[str, Any] | None = None
    cols_state: dict[str, Any] | None = None
    view: View | None = None
    for i, (ts, samples, fate) in enumerate(plan):
        msg = _columns(i, ts, "gnmi", samples)
        if fate == "drop":
            view = None
        elif fate == "reload" and cols_state is not None:
            cols_state = orjson.loads(orjson.dumps(cols_state))
        a = rows_det.step(rows_state, msg.rows())
        b = cols_det.step_columns(cols_state, msg, view)
        assert _wire(a) == _wire(b), i
        rows_state, cols_state, view = a[0], b[0], b[3]
