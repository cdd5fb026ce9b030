"""Whole-column checks of a columnar counters message: which ports need the per-sample rules.

``CountersDetector._sample`` does nothing to a port but stamp its time when its tracked
counters equal its last ones, it has no open episode, none of its windows (BER, credit wait,
optics baseline) is due, its optics readings are inside its stored triggers, its width and
speed are the ones last judged, its BER gauges are below the link type's floor and no
legacy counter sits at its register maximum. ``select`` finds the ports for which one of
those may not hold by comparing whole columns (list equality, ``min``/``max``, ``in``, all
in C) with a ``View`` of the device's state, so a healthy 64-port message costs a few dozen
column operations instead of 64 samples' worth of Python. The credit-wait windows, which
close for every port of a device in the same message, are closed by ``close_waits`` from
the columns too, for the ports below the congestion share. It may send a port the
per-sample way that did not need it (always correct, only slower), never the other way:
``tests/unit/streams/test_counter_columns.py`` replays random message sequences both ways
and requires the same states and outputs.

The view is derived from the state and never stored: a worker that lost it (a restart, a
rebalance, a state read back from its table) builds it again from the state.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from schemas import LEGACY_COUNTER_BITS
from streams.counters import congestion

if TYPE_CHECKING:
    from streams.counters.congestion import Judged
    from streams.counters.logic import CountersDetector, DeviceState, PortState

INF = float("inf")
# A judged width/speed that no sample's value equals (the port must be judged).
_NEVER = object()
_WINDOW_FIELDS = ("fec_corrected", "fec_uncorrectable", "port_rcv_pkts", "port_xmit_pkts")


class View:
    """The device's per-port state laid out in the message's port order, as columns."""

    __slots__ = ("always", "any_always", "det", "names", "due_q", "due_t", "due_x", "floor_min",
                 "floors", "judged_s", "judged_w", "last", "link", "next_q", "next_t",
                 "next_x", "ports", "state", "states", "trig_p", "trig_t", "ts", "widest_p",
                 "widest_t")

    def __init__(self, det: CountersDetector, state: DeviceState, ports: list[int],
                 states: list[PortState]) -> None:
        from streams.counters.logic import TRACKED  # the detector's own order of them

        n = len(states)
        self.names = TRACKED
        self.det = det
        self.state = state
        self.ports = ports
        self.states = states
        self.ts = max((ps[0] for ps in states), default=-1)
        width = len(states[0][1]) if states else 0
        self.last: list[list[Any]] = [[ps[1][k] for ps in states] for k in range(width)]
        self.always = [False] * n  # an open episode: every sample is judged
        self.due_x = [-INF] * n  # the BER window's end
        self.due_q = [-INF] * n  # the credit-wait window's end
        self.due_t = [-INF] * n  # the optics baseline's next update
        self.trig_t = [-INF] * n  # the temperature above which optics are judged
        self.trig_p = [INF] * n  # the Rx power below which optics are judged
        self.judged_w: list[Any] = [_NEVER] * n
        self.judged_s: list[Any] = [_NEVER] * n
        self.link: tuple[Any, ...] | None = None  # the speed/FEC/media columns of ``floors``
        self.floors: list[tuple[float, float]] = []
        self.floor_min = (INF, INF)
        for i, ps in enumerate(states):
            _port(self, i, ps)
        self.summarise()

    def summarise(self) -> None:
        """The columns' extremes the checks compare a message with first."""
        self.any_always = True in self.always
        self.next_x = min(self.due_x, default=INF)
        self.next_q = min(self.due_q, default=INF)
        self.next_t = min(self.due_t, default=INF)
        self.widest_t = min(self.trig_t, default=INF)  # the lowest temperature trigger
        self.widest_p = max(self.trig_p, default=-INF)  # the highest power trigger


def _port(view: View, i: int, ps: PortState) -> None:
    """Lay out port ``i``'s state (after it changed) in the view."""
    det = view.det
    for k, value in enumerate(ps[1]):
        view.last[k][i] = value
    ext = ps[2]
    if ext is None:
        view.always[i] = False
        view.due_x[i] = view.due_q[i] = view.due_t[i] = view.trig_t[i] = -INF
        view.trig_p[i] = INF
        if det.expectation is None:  # the policy's expectation, judged without any state
            view.judged_w[i] = det.degraded.expect_width
            view.judged_s[i] = det.degraded.expect_speed
        else:
            view.judged_w[i] = view.judged_s[i] = _NEVER
        return
    view.always[i] = "o" in ext
    x, q, t = ext.get("x"), ext.get("q"), ext.get("t")
    view.due_x[i] = -INF if x is None else x[0] + det.ber.window_ms
    view.due_q[i] = -INF if q is None else q[0] + det.cong_ms
    if t is None:
        view.due_t[i], view.trig_t[i], view.trig_p[i] = -INF, -INF, INF
    else:
        view.due_t[i], view.trig_t[i], view.trig_p[i] = t[0], t[3], t[4]
    view.judged_w[i] = ext.get("w")
    view.judged_s[i] = ext.get("s")


def build(det: CountersDetector, state: DeviceState, cols: dict[str, list[Any]]
          ) -> View | None:
    """The view of ``state`` for a message with these columns; None while a port is new or
    named twice (such a message goes the per-sample way)."""
    ports: list[int] = cols["port"]
    known = state["ports"]
    states = []
    for p in ports:
        ps = known.get(str(p))
        if ps is None:
            return None
        states.append(ps)
    if len(set(ports)) != len(ports):
        return None
    return View(det, state, list(ports), states)


def refresh(view: View, ts: int, slow: list[int]) -> None:
    """After the message: every port stamped ``ts``, the judged ones laid out again."""
    for i in slow:
        _port(view, i, view.states[i])
    if slow:
        view.summarise()
    view.ts = ts


def select(det: CountersDetector, state: DeviceState, cols: dict[str, list[Any]], ts: int,
           view: View | None, legacy: bool, unknown: Iterable[str] = ()
           ) -> tuple[View, list[int], list[int]] | None:
    """(the view, the indices of the ports the per-sample rules must see, in message
    order, and those of the other ports whose credit-wait window is due, for
    ``close_waits``); None for every port (no view can be built, or a port would be stale).
    ``unknown``: the names of the message's columns that are not sample fields."""
    ports = cols["port"]
    if not ports:
        return None
    if view is None or view.state is not state or view.det is not det or view.ports != ports:
        view = build(det, state, cols)
        if view is None:
            return None
    return judge(det, view, cols, ts, legacy, unknown)


def judge(det: CountersDetector, view: View, cols: dict[str, list[Any]], ts: int,
          legacy: bool, unknown: Iterable[str] = ()
          ) -> tuple[View, list[int], list[int]] | None:
    """``select`` with a view known to be current for these columns (``streams.counters.
    hosts`` lays one over a host's HCAs, a port of each device state)."""
    if ts <= view.ts:
        return None  # some port's last sample is not older: its stale count
    n = len(view.ports)
    slow: set[int] = set()
    if view.any_always:
        slow.update(i for i, a in enumerate(view.always) if a)
    _tracked(view, cols, n, slow)
    if ts >= view.next_x and any(cols.get(f) is not None for f in _WINDOW_FIELDS):
        slow.update(i for i, d in enumerate(view.due_x) if ts >= d)
    wait = cols.get("xmit_wait")
    waits: list[int] = []
    if wait is not None and ts >= view.next_q:
        waits = [i for i, d in enumerate(view.due_q) if ts >= d and wait[i] is not None]
    _gauges(det, view, cols, slow)
    _saturation(cols, legacy, slow)
    _link(view, cols, n, slow)
    _optics(view, cols, ts, n, slow)
    watchdog = [cols[name] for name in unknown if name.startswith("pfcwd_q")]
    if watchdog:
        slow.update(i for i in range(n) if any(c[i] is not None for c in watchdog))
    if slow and waits:
        waits = [i for i in waits if i not in slow]
    return view, sorted(slow), waits


def close_waits(det: CountersDetector, view: View, cols: dict[str, list[Any]], ts: int,
                waits: list[int], judged: list[Judged]) -> list[int]:
    """Close the due credit-wait windows of ports ``select`` found quiet otherwise, from the
    columns: a port at or below the congestion share gets its new anchor and its judged
    entry (``judged``, in message order), exactly what ``congestion.judge_wait`` does for it;
    the indices of those above it are returned untouched, for the per-sample rules."""
    wait = cols["xmit_wait"]
    data = cols.get("port_xmit_data")
    width, speed = cols.get("width"), cols.get("speed")
    limit = det.cong.congestion_fraction
    back: list[int] = []
    laid: list[int] = []
    states, ports, due_q, cong_ms = view.states, view.ports, view.due_q, det.cong_ms
    for i in waits:
        ps = states[i]
        ext = ps[2]
        q = ext.get("q") if ext is not None else None
        w, d = wait[i], data[i] if data is not None else None
        if q is not None and ts > q[0]:
            bps = congestion.port_bps(det, ps, width[i] if width is not None else None,
                                      speed[i] if speed is not None else None)
            share, util, dt_s, _ = congestion.wait_share(det, q, ts, w, d, bps)
            if share > limit:
                back.append(i)
                continue
            judged.append((ports[i], share, util, dt_s))
        if ext is None:
            laid.append(i)  # its rarer state is new: every column of it changes
        det._ext(ps)["q"] = [ts, w, d]  # noqa: SLF001 - marks the state changed
        due_q[i] = ts + cong_ms
    for i in laid:
        _port(view, i, states[i])
    view.summarise()
    return back


def _tracked(view: View, cols: dict[str, list[Any]], n: int, slow: set[int]) -> None:
    """Ports whose tracked counters differ from their last (a counter not reported where
    one was is a difference too: the per-sample way keeps the last reading)."""
    for k, name in enumerate(view.names):
        col = cols.get(name)
        last = view.last[k]
        if col is None:
            if last.count(None) != n:
                slow.update(i for i, p in enumerate(last) if p is not None)
        elif col != last:
            slow.update(i for i, (a, b) in enumerate(zip(col, last, strict=True)) if a != b)


def _most(col: list[Any], pick: Any) -> Any:
    """``max``/``min`` of a column's reported values, None when none is."""
    try:
        return pick(col)
    except TypeError:  # nulls among the numbers
        values = [v for v in col if v is not None]
        return pick(values) if values else None


def _gauges(det: CountersDetector, view: View, cols: dict[str, list[Any]],
            slow: set[int]) -> None:
    """Ports whose since-clear BER gauges are above their link type's floor."""
    raw, eff = cols.get("raw_ber"), cols.get("effective_ber")
    if raw is None and eff is None:
        return
    link = (cols.get("speed"), cols.get("fec_mode"), cols.get("media"))
    if view.link != link:
        n = len(cols["port"])
        speed, fec, media = (c if c is not None else [None] * n for c in link)
        view.floors = [det.ber.gauge_floors(s, f, m)
                       for s, f, m in zip(speed, fec, media, strict=True)]
        view.link = link
        view.floor_min = (min(f[0] for f in view.floors), min(f[1] for f in view.floors))
    floors = view.floors
    for col, j in ((raw, 0), (eff, 1)):
        if col is None:
            continue
        top = _most(col, max)
        if top is not None and top > view.floor_min[j]:
            slow.update(i for i, v in enumerate(col) if v is not None and v > floors[i][j])


def _saturation(cols: dict[str, list[Any]], legacy: bool, slow: set[int]) -> None:
    """Ports with a counter at its register's maximum: by the port's own widths
    (``counter_bits``; a host agent's every port has them), and the legacy widths."""
    bits = cols.get("counter_bits")
    if bits is not None:
        _own_widths(cols, bits, slow)
    if not legacy:
        return
    for name, width in LEGACY_COUNTER_BITS.items():
        col = cols.get(name)
        if col is not None and 0 < width < 64:
            top = (1 << width) - 1
            if top in col:
                slow.update(i for i, v in enumerate(col) if v == top)


def _own_widths(cols: dict[str, list[Any]], bits: list[Any], slow: set[int]) -> None:
    """Ports whose own register widths have a counter at its maximum (``_saturation`` of
    the per-sample way reads each named counter, a field or an unknown column alike). The
    ports of a message mostly name the same widths: each distinct map is checked once."""
    maps: list[tuple[Any, list[int]]] = []
    for i, b in enumerate(bits):
        if not b:
            continue
        for seen, at in maps:
            if seen == b:
                at.append(i)
                break
        else:
            maps.append((b, [i]))
    for widths, at in maps:
        for name, width in widths.items():
            col = cols.get(name)
            if col is None or not (isinstance(width, int) and 0 < width < 64):
                continue
            top = (1 << width) - 1
            if top in col:  # (a float equal to it too: only slower, never wrong)
                slow.update(i for i in at if col[i] == top)


def _link(view: View, cols: dict[str, list[Any]], n: int, slow: set[int]) -> None:
    """Ports whose width or speed is not the one last judged."""
    width, speed = cols.get("width"), cols.get("speed")
    if width is None and speed is None:
        return
    width = width if width is not None else [None] * n
    speed = speed if speed is not None else [None] * n
    if width == view.judged_w and speed == view.judged_s:
        return
    jw, js = view.judged_w, view.judged_s
    slow.update(i for i in range(n) if (width[i] is not None or speed[i] is not None)
                and (width[i] != jw[i] or speed[i] != js[i]))


def _optics(view: View, cols: dict[str, list[Any]], ts: int, n: int, slow: set[int]) -> None:
    """Ports with optics readings past their triggers, or a baseline update due."""
    temp, power = cols.get("module_temp_c"), cols.get("rx_power_dbm")
    if temp is None and power is None:
        return
    hot = temp is not None and (t := _most(temp, max)) is not None and t > view.widest_t
    dim = power is not None and (p := _most(power, min)) is not None and p < view.widest_p
    if not hot and not dim and ts < view.next_t:
        return
    temp = temp if temp is not None else [None] * n
    power = power if power is not None else [None] * n
    due, trig_t, trig_p = view.due_t, view.trig_t, view.trig_p
    slow.update(i for i in range(n) if (temp[i] is not None or power[i] is not None) and (
        ts >= due[i] or (temp[i] is not None and temp[i] > trig_t[i])
        or (power[i] is not None and power[i] < trig_p[i])))
