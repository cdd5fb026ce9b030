"""Counter health of one device's ports: resets, saturation, error rates, BER, congestion.

One ``fabric.counters`` message carries a device's samples; ``CountersDetector.step`` takes
the device's state and the message and returns the new state, the detections, and the
``CounterDowns`` (link_downed increases) the flap detector needs. Speed matters (100,000
port-samples/s on two cores), so the per-sample work for a healthy port is a handful of
integer comparisons and the state of a healthy port is one short list.

Semantics:

* Counters are cumulative. A decrease is a reset: the new value counts from zero (the
  delta is the new value). A sample whose ``ts`` is not after the port's last one is stale
  or a duplicate and is skipped. Because counters are cumulative, a missed sample only
  coarsens the next delta, it loses nothing.
* Saturation: a legacy counter whose register is narrow (``counter_bits`` on the sample, or
  ``LEGACY_COUNTER_BITS`` when the source is plain ``perfquery``, which reads the legacy
  PortCounters registers) stuck at its maximum ``2**bits - 1`` is ``counter_saturated``,
  once per episode per counter; the episode ends when the counter leaves its maximum (a
  reset).
* Error rates are per hour of event time over trailing windows (1 h, and for symbol errors
  UFM's 12 min and 125 min). Deltas are attributed to the sample's ``ts`` in one-minute
  buckets, stored only when non-zero. A rate fires ``error_rate`` when it exceeds the
  policy threshold *and* ``baselineFactor`` times the port's own baseline (an exponentially
  decayed rate with time constant ``baselineWindow``, before this sample), so a port with a
  known steady noise floor does not page every hour. The episode lasts while that holds and
  ends when the worst window's rate is back at or below the threshold or within
  ``baselineFactor`` of the baseline (the port's new normal).
* BER (``streams.counters.ber``): each link judged against NVIDIA's field BER table for
  its speed, FEC mode and media. Pre-FEC BER (``fec_corrected``) and post-FEC BER
  (``fec_uncorrectable``) over tumbling windows of ``ber.window`` from the counters'
  deltas, over the bits the link carried (its width and speed); the tool's since-clear
  ``raw_ber`` / ``effective_ber`` gauges only while a port has no such window (marked
  ``basis: since_clear``). Symbol BER over the 12 / 125 min symbol windows, each at the
  table's level times its factor. Above *error* opens a ``ber`` episode, closed only below
  *normal*; above *warning* outside one, a ``ber_warning`` episode; once per episode.
* Packet drop rate: receive errors over packets received and transmit discards over
  packets sent, per BER window, where ``port_rcv_pkts`` / ``port_xmit_pkts`` are reported:
  above ``dropRate.maxDropRate`` fires ``drop_rate``; one window at or below it ends it.
* Congestion (RoCE): ``pause_storm`` by SONiC's PFC-watchdog rule, when the port spent more
  than ``pauseStormFraction`` (99 %) of the interval paused (from the optional cumulative
  ``pfc_pause_duration_us`` field that mlx5 exposes as ``rx_prio*_pause_duration``) or,
  without it, received pause frames at ``pauseFramesPerSStorm`` or more, *and* it did not
  drain (``port_xmit_data`` did not move; unknown without that counter, which does not
  excuse it); SONiC's own watchdog verdicts (``pfcwd`` stats) fire it too
  (``streams.counters.congestion``); ``ecn_pfc_misconfig`` per device: when the pauses it
  transmits (summed over its ports) run at ``minPauseFramesPerS`` or more while its egress
  queues' ECN marks are fewer than ``minEcnToPauseRatio`` times them: ECN at the congested
  egress should have throttled the senders before the switch had to pause them upstream
  (received pauses are the upstream's verdict, not this device's); per priority where the
  samples carry ``pfc<N>_tx`` and ``ecn_marked_q<N>`` (pauses on N against queue N's marks,
  one episode per (device, priority)).
* Credit waits (``streams.counters.congestion``): ``congestion`` when PortXmitWait says
  the port had data and no credits more than ``congestionFraction`` of a
  ``congestionWindow``; ``hot_uplink`` when one uplink of a leaf (the plan's) carries a
  multiple of its ECMP peers' load or wait over the same window.
* Optics (``streams.counters.optics``): ``optic_temp`` above PDR's 70 °C or 10 °C over the
  port's own baseline; ``optic_power`` when Rx power is below the module's low threshold
  (or the policy's) or has fallen ``rxPowerDropDb`` below the port's baseline.
* Degraded link (``streams.degraded_link.logic``): the sample's ``width``/``speed``
  against the plan's expectation for the port, else the policy's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from schemas import (
    LEGACY_COUNTER_BITS,
    CounterColumns,
    Counters,
    Detection,
    DetectionKind,
    PortSample,
)
from schemas.policy import SPEED_RANK, WIDTH_RANK, Policy
from streams.common import episode_id, make_detection, state_key
from streams.counters import columns, congestion, optics
from streams.counters.ber import (
    METRIC_NAMES,
    BerRules,
    drop_rate,
    link_evidence,
    link_gbps,
    next_level,
)
from streams.degraded_link.logic import Expectation, check_link
from streams.flap.logic import CounterDowns

# Counters whose deltas the detector follows, in the order of the state's ``last`` list.
TRACKED: tuple[str, ...] = (
    "symbol_errors", "link_error_recovery", "rcv_errors", "xmit_discards", "link_downed",
    "pfc_pause_rx", "pfc_pause_tx", "ecn_marked", "pfc_pause_duration_us",
)
_I_SYM, _I_LER, _I_RCV, _I_DISC, _I_DOWN, _I_PRX, _I_PTX, _I_ECN, _I_PDUR = range(len(TRACKED))
_MODEL_TRACKED = TRACKED[:-1]  # the last one is an optional extra field, not a model field
_RATE_FIELDS = (_I_SYM, _I_LER, _I_RCV, _I_DISC)
_CONGESTION = (_I_PRX, _I_PTX, _I_ECN, _I_PDUR)
_ZEROS = [0] * len(TRACKED)
# Sources that read the legacy (narrow) PortCounters registers unless told otherwise.
LEGACY_SOURCES = frozenset({"perfquery"})
HOUR_MS = 3_600_000
MINUTE_MS = 60_000

# Per-port state, a list so a healthy port costs ~80 bytes of JSON:
#   [ts, last, ext]  where last is a list aligned with TRACKED (None = never reported)
#   and ext is None or a dict of the rarer things:
#     "b": {field index: [[minute, count], ...]}   non-zero error deltas
#     "z": {field index: [decayed count, at ts]}   baseline
#     "o": {condition: episode id}                 open episodes
#     "r": resets seen, "w"/"s": last width/speed, "f"/"m": last FEC mode / media
#     "x": the BER window's start [ts, fec_corrected, fec_uncorrectable, port_rcv_pkts,
#          port_xmit_pkts, rcv_errors, xmit_discards, windows judged]
PortState = list[Any]
DeviceState = dict[str, Any]
# Set on a state for the length of one ``once``: the message was older than the state.
OLD = "old"


def new_state() -> DeviceState:
    return {"ports": {}, "stale": 0}


def _mark_old(state: DeviceState, stale_before: int, samples: int) -> None:
    """Every sample of the message was older than its port's last: the message is older
    than the state (``streams.engine.once`` does not remember its id, ``OLD``)."""
    if samples and state["stale"] - stale_before == samples:
        state[OLD] = True


def counters_key(fabric: str, device: str, source: str) -> str:
    """The counters state key: one state per (device, source).

    Two sources read one port's counters at their own times and from their own registers
    (perfquery's narrow PortCounters, UFM's extended ones, mlxlink's PHY): interleaved in one
    state, the lower reading reads as a reset and a counter one source does not report
    stays at the other's value, so resets, phantom downs and wrong deltas follow.
    """
    return state_key(fabric, f"{device}|{source}")


class _Outputs:
    """What one message's samples produce, and what the device-wide rules read after."""

    __slots__ = ("detections", "downs", "judged", "legacy")

    def __init__(self, legacy: bool) -> None:
        self.legacy = legacy
        self.detections: list[Detection] = []
        self.downs: list[CounterDowns] = []
        self.judged: list[congestion.Judged] = []


class CountersDetector:
    """Counter-health detection with the policy's thresholds resolved once."""

    def __init__(self, policy: Policy,
                 expectation: Callable[[str, int], Expectation | None] | None = None,
                 uplinks: congestion.UplinksFn | None = None,
                 media: Callable[[str, int], str | None] | None = None,
                 planned: Callable[[str], bool] | None = None) -> None:
        self._dirty = False
        # whether the plan's facts (expectation, media, uplinks) apply to a fabric's events
        self.planned: Callable[[str], bool] = planned or (lambda fabric: True)
        self._ecn: congestion.EcnTally | None = None
        # ports whose episodes the device-wide rules open or close (step_columns' view)
        self._touched: list[PortState] | None = None
        self.media_of = media  # the plan's cable media, for a sample that does not say
        fh = policy.fabric_health
        er = fh.error_rates
        self.policy = policy
        self.expectation = expectation
        self.thresholds = {_I_SYM: er.symbol_errors_per_hour,
                           _I_LER: er.link_error_recovery_per_hour,
                           _I_RCV: er.rcv_errors_per_hour,
                           _I_DISC: er.xmit_discards_per_hour}
        sym_windows = [round(w * 1000) for w in er.symbol_error_windows] or [HOUR_MS]
        self.windows = {_I_SYM: sym_windows, _I_LER: [HOUR_MS], _I_RCV: [HOUR_MS],
                        _I_DISC: [HOUR_MS]}
        self.keep_ms = max([HOUR_MS, *sym_windows])
        self.sym_windows = sym_windows
        self.baseline_factor = er.baseline_factor
        self.baseline_tau_ms = er.baseline_window * 1000
        self.rate_action = er.action
        self.ber = BerRules(policy)
        self.cong = fh.congestion
        self.cong_ms = round(fh.congestion.congestion_window * 1000)
        self.optics = fh.optics
        # (device) -> the ports of a leaf that go up (ECMP peers), from the plan; None: the
        # hot-uplink rule does not run (nothing says which ports are peers)
        self.uplinks = uplinks
        self.sat_action = fh.counters.saturation_action
        self.degraded = fh.degraded_link

    # -- the hot path ----------------------------------------------------------------------

    def step(self, state: DeviceState | None, event: Counters
             ) -> tuple[DeviceState, list[Detection], list[CounterDowns]]:
        """Apply one counters message of one device."""
        if state is None:
            state = new_state()
        self._dirty = False
        self._ecn = None
        out = _Outputs(event.source in LEGACY_SOURCES)
        stale = state["stale"]
        for sample in event.ports:
            self._sample(state, event, sample, out)
        _mark_old(state, stale, len(event.ports))
        return self._finish(state, event, lambda: {s.port: s for s in event.ports}, out)

    def step_columns(self, state: DeviceState | None, event: CounterColumns,
                     view: columns.View | None = None
                     ) -> tuple[DeviceState, list[Detection], list[CounterDowns],
                                columns.View | None]:
        """Apply one columnar counters message: the same state and outputs as ``step`` of
        ``event.rows()``, with the ports the column checks find quiet (nothing moved,
        nothing due, nothing open) only stamped with the message's time.

        ``view`` is what the last call returned for this state (``streams.counters.columns``,
        derived, never stored); None or a stale one is rebuilt.
        """
        if state is None:
            state = new_state()
        self._dirty = False
        self._ecn = None
        cols = event.column_map()
        head = event.rows([])  # the envelope the rules read (id, ts, device, ...)
        out = _Outputs(event.source in LEGACY_SOURCES)
        picked = columns.select(self, state, cols, event.ts, view, out.legacy,
                                event.unknown_columns())
        ts = event.ts
        if picked is None:  # every port goes the per-sample way
            rows = event.rows()
            stale = state["stale"]
            for sample in rows.ports:
                self._sample(state, head, sample, out)
            _mark_old(state, stale, len(rows.ports))
            return (*self._finish(state, head, lambda: {s.port: s for s in rows.ports}, out),
                    columns.build(self, state, cols))
        view, slow, waits = picked
        quiet: list[congestion.Judged] = []
        if waits:
            back = columns.close_waits(self, view, cols, ts, waits, quiet)
            if back:
                slow = sorted({*slow, *back})
        if slow:
            for sample in event.samples(slow):
                self._sample(state, head, sample, out)
        if quiet and not out.judged:
            out.judged = quiet
        elif quiet:  # the judged ports in message order, as the per-sample way lists them
            at = {p: i for i, p in enumerate(view.ports)}
            out.judged = sorted([*out.judged, *quiet], key=lambda j: at[j[0]])
        for ps in view.states:  # the quiet ones; the judged ones are already
            ps[0] = ts
        # the device-wide rules (ECN, storms, hot uplinks) may open or close a port's
        # episode: the view is laid out again after them, those ports with it
        touched: list[PortState] = []
        self._touched = touched
        try:
            done = self._finish(state, head, lambda: {s.port: s for s in event.rows().ports},
                                out)
        finally:
            self._touched = None
        if touched:
            ids = {id(ps) for ps in touched}
            slow = sorted({*slow, *(i for i, ps in enumerate(view.states) if id(ps) in ids)})
        columns.refresh(view, ts, slow)
        return (*done, view)

    def _sample(self, state: DeviceState, event: Counters, sample: PortSample,
                out: _Outputs) -> None:
        """One sample: its deltas, and the rules its values or due windows call for."""
        ports: dict[str, PortState] = state["ports"]
        ts = event.ts
        detections = out.detections
        key = str(sample.port)
        ps = ports.get(key)
        # __dict__ and __pydantic_extra__ directly: pydantic's __getattr__ for a missing
        # extra costs more than the rest of a healthy sample's work.
        fields = sample.__dict__
        extra = sample.__pydantic_extra__
        values = [fields[f] for f in _MODEL_TRACKED]
        values.append(extra.get("pfc_pause_duration_us") if extra else None)
        if ps is None:
            ports[key] = ps = [ts, values, None]
            self._dirty = True
            if values[_I_PRX] is not None and fields["port_xmit_data"] is not None:
                # the pause-storm rule's draining check needs the interval's start
                ps[2] = {"d": [ts, fields["port_xmit_data"]]}
            if values[_I_ECN] is not None and extra:
                # per-priority ECN vs PFC needs the first per-queue reading too
                pq = congestion.priority_readings(extra)
                if pq is not None:
                    self._ext(ps)["pq"] = pq
            prev_ts = None
            deltas: list[int] | None = None
        else:
            prev_ts = ps[0]
            if ts <= prev_ts:
                state["stale"] += 1
                return
            last = ps[1]
            ps[0] = ts
            if values == last:
                # The fast path of a healthy port: no tracked counter moved. Deltas are
                # only needed to end an open episode.
                ext = ps[2]
                deltas = None if ext is None or "o" not in ext else _ZEROS
            else:
                self._dirty = True
                deltas = []
                reset = False
                for i, v in enumerate(values):
                    if v is None:
                        deltas.append(0)
                        values[i] = last[i]  # keep the last reading of one not reported
                        continue
                    p = last[i]
                    if p is None:
                        deltas.append(0)
                    elif v >= p:
                        deltas.append(v - p)
                    else:  # a decrease is a reset: the new value counts from zero
                        deltas.append(v)
                        reset = True
                ps[1] = values
                if reset:
                    self._ext(ps)["r"] = self._ext(ps).get("r", 0) + 1
        ext = ps[2]
        # Most samples stop here: no errors, no saturation, nothing open, link at plan.
        if deltas is not None and prev_ts is not None:
            if deltas[_I_DOWN] > 0:
                out.downs.append(CounterDowns(
                    id=f"{event.id}/{sample.port}", fabric=event.fabric,
                    device=event.device, port=sample.port, start=prev_ts, ts=ts,
                    increase=deltas[_I_DOWN], source=event.source))
            if (deltas[_I_SYM] or deltas[_I_LER] or deltas[_I_RCV] or deltas[_I_DISC]
                    or (ext is not None and "o" in ext)):
                self._rates(ps, deltas, event, sample, detections)
            if values[_I_PRX] is not None or values[_I_PTX] is not None:
                self._congestion(ps, deltas, ts - prev_ts, event, sample, detections)
        if (fields["fec_corrected"] is not None or fields["fec_uncorrectable"] is not None
                or fields["port_rcv_pkts"] is not None
                or fields["port_xmit_pkts"] is not None):
            self._ber_window(ps, event, sample, detections)
            ext = ps[2]
        raw, eff = fields["raw_ber"], fields["effective_ber"]
        if raw is not None or eff is not None:
            raw_floor, eff_floor = self.ber.gauge_floors(fields["speed"], fields["fec_mode"],
                                                         fields["media"])
            if ((raw is not None and raw > raw_floor)
                    or (eff is not None and eff > eff_floor)
                    or (ext is not None and "o" in ext)):
                self._ber_gauges(ps, event, sample, detections)
        if out.legacy or sample.counter_bits:
            self._saturation(ps, event, sample, detections)
        if fields["width"] is not None or fields["speed"] is not None:
            self._degraded(ps, event, sample, detections)
        # Optics and credit waits: a healthy reading is a comparison with the port's
        # stored trigger levels / window end (streams.counters.optics, .congestion).
        temp, power = fields["module_temp_c"], fields["rx_power_dbm"]
        if temp is not None or power is not None:
            ext = ps[2]
            ob = ext.get("t") if ext is not None else None
            if (ob is None or ts >= ob[0] or (temp is not None and temp > ob[3])
                    or (power is not None and power < ob[4]) or "o" in ext):
                optics.judge(self, ps, event, sample, temp, power, detections)
        wait = fields["xmit_wait"]
        if wait is not None:
            ext = ps[2]
            q = ext.get("q") if ext is not None else None
            if q is None or ts - q[0] >= self.cong_ms:
                congestion.judge_wait(self, ps, event, sample, wait,
                                      fields["port_xmit_data"], detections, out.judged)
        if extra and congestion.has_pfcwd(extra):
            congestion.judge_pfcwd(self, ps, event, sample, extra, detections)

    def _finish(self, state: DeviceState, event: Counters,
                samples: Callable[[], dict[int, PortSample]], out: _Outputs
                ) -> tuple[DeviceState, list[Detection], list[CounterDowns]]:
        """The device-wide rules over what the samples tallied (ECN vs PFC, hot uplinks)."""
        detections = out.detections
        if self._ecn is not None:
            congestion.judge_ecn(self, state, event, samples(), self._ecn, detections)
        if out.judged and self.uplinks is not None and self.planned(event.fabric):
            congestion.judge_hot(self, state["ports"], event, samples(), out.judged,
                                 detections)
        # Whether anything but sample times changed: the worker persists a state whose only
        # change is newer times less often (cumulative counters make that lossless).
        state["dirty"] = self._dirty or bool(detections) or bool(out.downs)
        return state, detections, out.downs

    # -- the rarer paths ---------------------------------------------------------------------

    def _ext(self, ps: PortState) -> dict[str, Any]:
        """The port's rarer state, for writing (which makes the device state dirty)."""
        self._dirty = True
        if ps[2] is None:
            ps[2] = {}
        ext: dict[str, Any] = ps[2]
        return ext

    def _open(self, ps: PortState, cond: str, event: Counters, sample: PortSample,
              kind: DetectionKind, action: str, evidence: dict[str, Any],
              detections: list[Detection]) -> None:
        """Open the episode ``cond`` unless it is open; fire its one detection."""
        if self._is_open(ps, cond):
            return
        if self._touched is not None:
            self._touched.append(ps)
        opened = self._ext(ps).setdefault("o", {})
        eid = episode_id(kind, event.device, sample.port, event.ts, cond)
        opened[cond] = eid
        detections.append(make_detection(
            kind=kind, fabric=event.fabric, device=event.device, port=sample.port,
            ts=event.ts, action=action, episode=eid, evidence=evidence))

    def _close(self, ps: PortState, cond: str) -> None:
        ext = ps[2]
        if ext is None or cond not in ext.get("o", ()):
            return
        self._dirty = True
        if self._touched is not None:
            self._touched.append(ps)
        ext["o"].pop(cond, None)
        if not ext["o"]:
            del ext["o"]

    def _is_open(self, ps: PortState, cond: str) -> bool:
        ext = ps[2]
        return ext is not None and cond in ext.get("o", ())

    def _rates(self, ps: PortState, deltas: list[int], event: Counters, sample: PortSample,
               detections: list[Detection]) -> None:
        ext = self._ext(ps)
        ts = event.ts
        buckets: dict[str, list[list[int]]] = ext.setdefault("b", {})
        bases: dict[str, list[float]] = ext.setdefault("z", {})
        minute = ts // MINUTE_MS
        for i in _RATE_FIELDS:
            name = TRACKED[i]
            fi = str(i)
            d = deltas[i]
            rows = buckets.get(fi)
            if not d and not self._is_open(ps, f"rate:{name}") and not (
                    i == _I_SYM and (self._is_open(ps, "ber:symbol")
                                     or self._is_open(ps, "berw:symbol"))):
                continue
            # the baseline before this sample: its decayed count / tau, per hour
            z = bases.get(fi)
            decayed = 0.0
            if z is not None:
                decayed = z[0] * math.exp(-(ts - z[1]) / self.baseline_tau_ms)
            base_rate = decayed / (self.baseline_tau_ms / HOUR_MS)
            if d:
                bases[fi] = [decayed + d, ts]
                if rows is None:
                    buckets[fi] = rows = []
                if rows and rows[-1][0] == minute:
                    rows[-1][1] += d
                else:
                    rows.append([minute, d])
            if rows:
                cut = (ts - self.keep_ms) // MINUTE_MS
                while rows and rows[0][0] <= cut:
                    rows.pop(0)
            rates = []
            for w in self.windows[i]:
                first = (ts - w) // MINUTE_MS
                count = sum(c for m, c in rows or () if m > first)
                rates.append((w, count, count * HOUR_MS / w))
            threshold = self.thresholds[i]
            cond = f"rate:{name}"
            worst = max(rates, key=lambda r: r[2])
            # The episode lasts while the port is over the threshold *and* over its own
            # baseline: a port whose noise floor the baseline has learned re-arms, so a
            # later burst far above that floor fires again.
            if worst[2] > threshold and worst[2] > self.baseline_factor * base_rate:
                if d:
                    self._open(ps, cond, event, sample, DetectionKind.ERROR_RATE,
                               self.rate_action, {
                                   "counter": name, "per_hour": round(worst[2], 3),
                                   "window_s": worst[0] / 1000, "count": worst[1],
                                   "threshold_per_hour": threshold,
                                   "baseline_per_hour": round(base_rate, 3)}, detections)
            else:
                self._close(ps, cond)
            if i == _I_SYM:
                self._symbol_ber(ps, rates, event, sample, detections)
            if rows is not None and not rows:
                del buckets[fi]
        if not buckets:
            ext.pop("b", None)

    def _link(self, ps: PortState, event: Counters, sample: PortSample
              ) -> tuple[Any, tuple[str, ...]]:
        """The port's link type: the sample's, else the last one it reported, else (media)
        the plan's, else the policy's (``streams.counters.ber``)."""
        ext = self._ext(ps)
        fields = sample.__dict__
        for short, name in (("f", "fec_mode"), ("m", "media")):
            if fields[name] is not None and ext.get(short) != fields[name]:
                ext[short] = fields[name]
        # "s" is the degraded-link rule's (the speed it last judged): read, never written here
        media = ext.get("m")
        if media is None and self.media_of is not None and self.planned(event.fabric):
            media = self.media_of(event.device, sample.port)
        return self.ber.link(fields["speed"] or ext.get("s"), ext.get("f"), media)

    def _judge_ber(self, ps: PortState, metric: str, value: float, event: Counters,
                   sample: PortSample, evidence: dict[str, Any],
                   detections: list[Detection]) -> None:
        """One BER metric through the hysteresis: ``ber`` above error, closed below normal;
        ``ber_warning`` above warning outside an episode."""
        link, assumed = self._link(ps, event, sample)
        levels = getattr(link, metric)
        name = METRIC_NAMES[metric]
        cond, warn = f"ber:{name}", f"berw:{name}"
        level = next_level(value, levels, self._is_open(ps, cond), self._is_open(ps, warn))
        if level == "clear":
            self._close(ps, cond)
            self._close(ps, warn)
            return
        evidence = {"metric": f"{name}_ber", "value": value, "level": level,
                    "threshold": levels.error if level == "error" else levels.warning,
                    "error": levels.error, "warning": levels.warning,
                    "normal": levels.normal, **evidence, "link": link_evidence(link, assumed)}
        if level == "error":
            self._close(ps, warn)
            self._open(ps, cond, event, sample, DetectionKind.BER, self.ber.action, evidence,
                       detections)
        else:
            self._open(ps, warn, event, sample, DetectionKind.BER_WARNING,
                       self.ber.warning_action, evidence, detections)

    def _symbol_ber(self, ps: PortState, rates: list[tuple[int, int, float]], event: Counters,
                    sample: PortSample, detections: list[Detection]) -> None:
        ext = self._ext(ps)
        width = sample.width or ext.get("w") or self.degraded.expect_width
        speed = sample.speed or ext.get("s") or self.degraded.expect_speed
        gbps = link_gbps(width, speed)
        factors = self.ber.symbol_factors
        bers = [count / (gbps * 1e9 * w / 1000) for w, count, _ in rates]
        # each window at the table's level times its factor: judged as BER / factor
        worst = max(b / (factors[i] if i < len(factors) else 1.0) for i, b in enumerate(bers))
        self._judge_ber(ps, "symbol", worst, event, sample, {
            "basis": "window", "windows_s": [w / 1000 for w, _, _ in rates],
            "symbol_errors": [c for _, c, _ in rates], "window_ber": bers,
            "window_factors": factors[:len(rates)], "link_gbps": gbps}, detections)

    def _ber_window(self, ps: PortState, event: Counters, sample: PortSample,
                    detections: list[Detection]) -> None:
        """Pre-/post-FEC BER and the drop rate over a tumbling window of ``ber.window``."""
        fields = sample.__dict__
        ext = ps[2]
        x = ext.get("x") if ext is not None else None
        ts = event.ts
        if x is not None and ts - x[0] < self.ber.window_ms:
            return  # the common case: the window is not over yet
        last = ps[1]
        now = [fields["fec_corrected"], fields["fec_uncorrectable"], fields["port_rcv_pkts"],
               fields["port_xmit_pkts"], last[_I_RCV], last[_I_DISC]]
        ext = self._ext(ps)
        ext["x"] = [ts, *now, 0 if x is None else 1]
        if x is None:
            return
        deltas = [None if v is None or p is None or v < p else v - p  # a reset: not judged
                  for v, p in zip(now, x[1:7], strict=True)]
        dt_ms = ts - x[0]
        width = fields["width"] or ext.get("w") or self.degraded.expect_width
        speed = fields["speed"] or ext.get("s") or self.degraded.expect_speed
        gbps = link_gbps(width, speed)
        bits = gbps * 1e9 * dt_ms / 1000
        for metric, d in (("pre_fec", deltas[0]), ("post_fec", deltas[1])):
            if d is not None:
                self._judge_ber(ps, metric, d / bits, event, sample, {
                    "basis": "window", "window_s": dt_ms / 1000, "errors": d,
                    "link_gbps": gbps}, detections)
        rx = drop_rate(deltas[4], deltas[2])
        tx = drop_rate(deltas[5], deltas[3])
        if rx is None and tx is None:
            return
        worst = max(r for r in (rx, tx) if r is not None)
        if worst > self.ber.drop_limit:
            self._open(ps, "drop", event, sample, DetectionKind.DROP_RATE, self.ber.drop_action, {
                "drop_rate": worst, "rcv_drop_rate": rx, "xmit_drop_rate": tx,
                "rcv_errors": deltas[4], "port_rcv_pkts": deltas[2], "xmit_discards": deltas[5],
                "port_xmit_pkts": deltas[3], "threshold": self.ber.drop_limit,
                "window_s": dt_ms / 1000}, detections)
        else:
            self._close(ps, "drop")

    def _ber_gauges(self, ps: PortState, event: Counters, sample: PortSample,
                    detections: list[Detection]) -> None:
        """The tool's since-clear BER (mlxlink's): a fallback for a port with no windowed
        BER of that metric, marked so."""
        ext = ps[2]
        x = ext.get("x") if ext is not None else None
        windowed = x is not None and x[7] > 0
        fields = sample.__dict__
        for metric, value, counter in (("pre_fec", fields["raw_ber"], "fec_corrected"),
                                       ("post_fec", fields["effective_ber"],
                                        "fec_uncorrectable")):
            if value is None or (windowed and fields[counter] is not None):
                continue
            self._judge_ber(ps, metric, value, event, sample, {"basis": "since_clear"},
                            detections)

    def _saturation(self, ps: PortState, event: Counters, sample: PortSample,
                    detections: list[Detection]) -> None:
        bits: Mapping[str, int] = sample.counter_bits or LEGACY_COUNTER_BITS
        for name, width in bits.items():
            value = getattr(sample, name, None)
            if not isinstance(value, int) or not 0 < width < 64:
                continue
            top = (1 << width) - 1
            cond = f"sat:{name}"
            if value == top:
                self._open(ps, cond, event, sample, DetectionKind.COUNTER_SATURATED,
                           self.sat_action, {"counter": name, "bits": width, "value": value},
                           detections)
            elif self._is_open(ps, cond):
                self._close(ps, cond)

    def _congestion(self, ps: PortState, deltas: list[int], dt_ms: int, event: Counters,
                    sample: PortSample, detections: list[Detection]) -> None:
        if dt_ms <= 0:
            return
        dt_s = dt_ms / 1000
        last = ps[1]
        rx_rate = deltas[_I_PRX] / dt_s
        c = self.cong
        # Draining: did the port transmit data over this interval (SONiC's watchdog: a
        # paused queue that still drains is congested, not stormed)? Unknown without the
        # data counter at both ends of the interval; unknown does not excuse a storm.
        data = sample.__dict__["port_xmit_data"]
        ts = event.ts
        ext = ps[2]
        before = ext.get("d") if ext is not None else None
        draining = None
        if data is not None and before is not None and before[0] == ts - dt_ms:
            draining = (data - before[1] if data >= before[1] else data) > 0
        if data is not None:
            self._ext(ps)["d"] = [ts, data]
        if last[_I_PDUR] is not None:
            paused = deltas[_I_PDUR] / (dt_ms * 1000)
            storm = paused > c.pause_storm_fraction and not draining
        else:
            paused = None
            storm = rx_rate >= c.pause_frames_per_s_storm and not draining
        if storm:
            self._open(ps, "pause_storm", event, sample, DetectionKind.PAUSE_STORM, c.action, {
                "paused_fraction": paused, "pause_rx_per_s": round(rx_rate, 1),
                "draining": draining, "threshold_fraction": c.pause_storm_fraction,
                "threshold_per_s": c.pause_frames_per_s_storm, "interval_s": dt_s},
                detections)
        elif self._is_open(ps, "pause_storm"):
            self._close(ps, "pause_storm")
        if last[_I_ECN] is not None and last[_I_PTX] is not None:
            # ECN vs PFC is the device's: its transmitted pauses against its egress queues'
            # marks, summed over the message's ports (streams.counters.congestion.judge_ecn)
            acc = self._ecn
            if acc is None:
                acc = self._ecn = congestion.EcnTally()
            # Whether data came in over the interval: a port pausing its peer at the storm
            # rate with nothing coming in is that link's storm (congestion.tx_storm)
            rcv = sample.__dict__["port_rcv_data"]
            receiving: bool | str | None = None  # no port_rcv_data: unknown
            if rcv is not None:
                ext = self._ext(ps)
                rb = ext.get("rd")
                if rb is not None and rb[0] == ts - dt_ms:
                    receiving = (rcv - rb[1] if rcv >= rb[1] else rcv) > 0
                else:  # the counter is there, its interval not yet: not judged this time
                    receiving = congestion.UNSETTLED
                ext["rd"] = [ts, rcv]
            acc.add(sample.port, deltas[_I_PTX], deltas[_I_ECN], dt_s, receiving)
            congestion.tally_priorities(self, ps, sample.port, sample.__pydantic_extra__, acc)

    def _degraded(self, ps: PortState, event: Counters, sample: PortSample,
                  detections: list[Detection]) -> None:
        ext = ps[2]
        width, speed = sample.width, sample.speed
        if ext is not None and ext.get("w") == width and ext.get("s") == speed:
            return  # unchanged since it was last judged
        if (ext is None and width == self.degraded.expect_width
                and speed == self.degraded.expect_speed and self.expectation is None):
            return  # exactly the policy's expectation, nothing to keep
        ext = self._ext(ps)
        ext["w"], ext["s"] = width, speed
        # (a fabric the plan does not describe keeps w/s too, so the column view's fast path,
        # which knows only whether there is a plan, finds it judged)
        expect = (self.expectation(event.device, sample.port)
                  if self.expectation and self.planned(event.fabric) else None)
        verdict = check_link(width, speed, expect, self.degraded)
        if verdict is not None:
            self._open(ps, "degraded", event, sample, DetectionKind.DEGRADED_LINK,
                       self.degraded.action, verdict, detections)
        else:
            self._close(ps, "degraded")


def known_rank(width: str | None, speed: str | None) -> bool:
    """Whether both are values the rank tables know (unknown text is not judged)."""
    return (width is None or width in WIDTH_RANK) and (speed is None or speed in SPEED_RANK)
