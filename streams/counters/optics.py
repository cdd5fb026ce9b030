"""Optical modules from their DDM readings: ``optic_temp`` and ``optic_power``.

The counters detector calls ``judge`` for a sample with ``module_temp_c`` or
``rx_power_dbm`` only when the cheap guard in ``step`` says it must look: no baseline yet, a
baseline update due, a reading past the port's stored trigger levels, or an open episode.

Per-port state, in the port's rarer state under ``"t"``:
``[next baseline update ts, baseline temp, baseline power, temp trigger, power trigger]``.
The triggers are the lowest temperature / highest power that fires (``min(limit, baseline
+ rise)``, ``max(low threshold, baseline - drop)``), so a healthy reading costs two
comparisons. Thresholds and their sources: ``schemas.policy.Optics``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from schemas import Counters, Detection, DetectionKind, PortSample

if TYPE_CHECKING:
    from streams.counters.logic import CountersDetector, PortState

# Index of each part of the optic state.
NEXT, BASE_T, BASE_P, TRIG_T, TRIG_P = range(5)
TEMP, POWER = "optic:temp", "optic:power"


def _low_dbm(sample: PortSample, default: float) -> tuple[float, str]:
    """The module's own low Rx power threshold where the collector reported it."""
    extra = sample.__pydantic_extra__
    low = extra.get("rx_power_low_dbm") if extra else None
    if isinstance(low, int | float) and not isinstance(low, bool) and math.isfinite(low):
        return float(low), "module"
    return default, "policy"


def judge(det: CountersDetector, ps: PortState, event: Counters, sample: PortSample,
          temp: float | None, power: float | None, detections: list[Detection]) -> None:
    o = det.optics
    ext = det._ext(ps)  # noqa: SLF001 - the detector's own helpers, one home for state
    ts = event.ts
    every_ms = round(o.baseline_every * 1000)
    ob: list[Any] | None = ext.get("t")
    if ob is None:
        ob = ext["t"] = [ts + every_ms, temp, power, 0.0, 0.0]  # triggers set below
    temp_open = det._is_open(ps, TEMP)  # noqa: SLF001
    power_open = det._is_open(ps, POWER)  # noqa: SLF001
    if ts >= ob[NEXT]:
        # The baseline learns only while the module is healthy.
        if not temp_open and not power_open:
            gap = ts - (ob[NEXT] - every_ms)
            alpha = 1.0 - math.exp(-gap / (o.baseline_window * 1000))
            if temp is not None:
                ob[BASE_T] = temp if ob[BASE_T] is None else ob[BASE_T] + alpha * (
                    temp - ob[BASE_T])
            if power is not None:
                ob[BASE_P] = power if ob[BASE_P] is None else ob[BASE_P] + alpha * (
                    power - ob[BASE_P])
        ob[NEXT] = ts + every_ms
    if ob[BASE_T] is None and temp is not None:
        ob[BASE_T] = temp
    if ob[BASE_P] is None and power is not None:
        ob[BASE_P] = power
    # hundredths are finer than any module reports (and keep the stored state short)
    if ob[BASE_T] is not None:
        ob[BASE_T] = round(ob[BASE_T], 2)
    if ob[BASE_P] is not None:
        ob[BASE_P] = round(ob[BASE_P], 2)
    low, low_from = _low_dbm(sample, o.rx_power_low_dbm)
    base_t, base_p = ob[BASE_T], ob[BASE_P]
    ob[TRIG_T] = o.temp_limit_c if base_t is None else round(
        min(o.temp_limit_c, base_t + o.temp_rise_c), 2)
    ob[TRIG_P] = low if base_p is None else round(max(low, base_p - o.rx_power_drop_db), 2)
    if temp is not None:
        rise = temp - base_t if base_t is not None else 0.0
        if temp > o.temp_limit_c or rise > o.temp_rise_c:
            det._open(ps, TEMP, event, sample, DetectionKind.OPTIC_TEMP, o.temp_action, {  # noqa: SLF001
                "module_temp_c": temp, "limit_c": o.temp_limit_c,
                "baseline_c": None if base_t is None else round(base_t, 2),
                "rise_c": round(rise, 2), "rise_limit_c": o.temp_rise_c,
                "rule": "limit" if temp > o.temp_limit_c else "rise"}, detections)
        elif (temp_open and temp <= o.temp_limit_c - o.hysteresis_c
              and rise <= o.temp_rise_c - o.hysteresis_c):
            det._close(ps, TEMP)  # noqa: SLF001
    if power is not None:
        drop = base_p - power if base_p is not None else 0.0
        if power < low or drop > o.rx_power_drop_db:
            det._open(ps, POWER, event, sample, DetectionKind.OPTIC_POWER, o.power_action, {  # noqa: SLF001
                "rx_power_dbm": power, "low_dbm": low,
                "low_from": low_from,
                "baseline_dbm": None if base_p is None else round(base_p, 2),
                "drop_db": round(drop, 2), "drop_limit_db": o.rx_power_drop_db,
                "rule": "low" if power < low else "drop"}, detections)
        elif (power_open and power >= low + o.hysteresis_db
              and drop <= o.rx_power_drop_db - o.hysteresis_db):
            det._close(ps, POWER)  # noqa: SLF001
