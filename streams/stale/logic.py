"""Silence is a state: a device or port that stops reporting while the fabric goes on is ``stale``.

A missing port must never look like a healthy one. Pinned semantics:

* **Scope and clock.** One ``StaleState`` watches the devices of one scope (a fabric: in
  ``replay`` all of it, in a worker the devices of the counters partitions it holds). Its
  clock is the rest of the fabric's progress in event time, never wall time: per *lane*
  (a counters partition; replay has one) the highest ``ts`` seen, and the clock is the
  lowest of those among the lanes still delivering — a lane that has carried nothing while
  the others carried ``IDLE_ROUNDS`` reports per watched stream is idle (its devices are
  the silent ones) and does not hold the clock back, while a lane that is merely behind
  (a worker catching up on one partition's backlog) does, so no device is judged against
  a clock its own partition has not reached. The clock never goes back. A scope that
  hears nothing at all moves no clock and declares nothing stale (a collector that stops
  altogether is an alert on its own metrics).
* **Who is watched.** Each (device, source) pair is a reporting stream with its own expected
  interval: the smoothed gap between its messages (``EWMA_WEIGHT``), never below the
  policy's ``minInterval``; before it has one, the policy's ``defaultInterval`` when set.
  Sources that report only what is wrong (``ibqueryerrors``) are not watched.
* **Device stale.** When the clock is more than ``intervalFactor`` intervals past the
  stream's last message (its deadline) *and* most of the scope's other streams (more than
  half) have reported after that deadline, one ``stale`` detection fires at port 0 (the
  whole device; the evidence lists its ports), once per episode. The quorum is what "while
  the others continue" means: a fabric that comes back from a pause all at once moves the
  clock with its first message, and the devices not yet back are not stale for that. The episode id is
  ``stale/{device}:0/{source}/{last message ts}``; the detection's ``ts`` is the clock when
  the silence was seen.
* **Port stale.** A port whose samples carry ``error`` (the collector named it but could not
  read it) for more than ``intervalFactor`` intervals of its device's own messages since its
  last good sample is ``stale`` at that port, once per episode.
* **End.** The episode ends when the device (or the port) reports again: a ``stale_end``
  detection with the same episode, id ``det:{episode}/end``, action none. The silent gap
  does not teach the interval.

Checks of the whole scope run when the clock has moved ``CHECK_EVERY_MS`` since the last,
so the per-message cost stays a few dictionary updates.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any

from schemas import CounterColumns, Counters, CountersMessage, Detection, DetectionKind, Severity
from schemas.policy import Policy
from streams.common import episode_id, make_detection

# Sources that list only ports past thresholds: their silence means "nothing wrong".
UNWATCHED_SOURCES = frozenset({"ibqueryerrors"})
EWMA_WEIGHT = 0.2  # of a new gap in the learned interval
CHECK_EVERY_MS = 250
IDLE_ROUNDS = 2  # reports per watched stream after which a quiet lane is idle
DEVICE_PORT = 0  # a device-wide detection's port

# State (plain JSON, for a changelogged table):
#   {"clock": ms, "checked": ms, "fabric": str, "n": messages seen,
#    "w": {"lane": [highest ts, n at its last message]},
#    "s": {"source\x1fdevice": [last_ts, interval_ms|None, open_episode|None, ports]}}
#   ports: {"n": [last_good_ts, open_episode|None]}
StaleState = dict[str, Any]
_SEP = "\x1f"


def stream_key(source: str, device: str) -> str:
    """The state's key of one reporting stream (a device as one source reports it)."""
    return f"{source}{_SEP}{device}"


def new_state() -> StaleState:
    return {"clock": None, "checked": None, "fabric": "", "n": 0, "w": {}, "s": {}}


class StaleDetector:
    """The stale detector with the policy's staleness section resolved once."""

    def __init__(self, policy: Policy) -> None:
        st = policy.fabric_health.staleness
        self.factor = st.interval_factor
        self.default_ms = None if st.default_interval is None else st.default_interval * 1000
        self.min_ms = st.min_interval * 1000
        self.action = st.action

    def step(self, state: StaleState | None, event: CountersMessage, lane: int = 0,
             parts: list[Counters] | list[CounterColumns] | None = None
             ) -> tuple[StaleState, list[Detection]]:
        """Apply one counters message of ``lane``; the (mutated) state and any detections.

        A host agent's message is one stream per HCA (``Counters.split``; ``parts`` when
        the caller has split it already).
        """
        state = state if state is not None else new_state()
        state["fabric"] = event.fabric
        out: list[Detection] = []
        streams = parts if parts is not None else event.split()
        if event.source not in UNWATCHED_SOURCES:
            for part in streams:
                out += self._observe(state, part)
        n = state["n"] = state.get("n", 0) + len(streams)  # in stream reports
        lanes: dict[str, list[int]] = state.setdefault("w", {})
        mark = lanes.get(str(lane))
        if mark is None:
            lanes[str(lane)] = [event.ts, n]
        else:
            mark[0] = max(mark[0], event.ts)
            mark[1] = n
        idle_after = IDLE_ROUNDS * max(1, len(state["s"]))
        low = min(m[0] for m in lanes.values() if n - m[1] <= idle_after)
        clock = state["clock"]
        if clock is None or low > clock:
            state["clock"] = clock = low
        checked = state["checked"]
        if checked is None or clock - checked >= CHECK_EVERY_MS:
            state["checked"] = clock
            out += self.check(state)
        return state, out

    def expected_ms(self, interval: float | None) -> float | None:
        if interval is None:
            return self.default_ms
        return max(interval, self.min_ms)

    def _observe(self, state: StaleState, event: CountersMessage) -> list[Detection]:
        key = stream_key(event.source, event.device)
        streams: dict[str, list[Any]] = state["s"]
        rec = streams.get(key)
        out: list[Detection] = []
        if rec is None:
            rec = streams[key] = [event.ts, None, None, {}]
        else:
            last, interval, open_ep, _ = rec
            if event.ts <= last:
                return []  # a late or repeated message: neither news nor a gap
            gap = event.ts - last
            if open_ep is not None:
                out.append(self._end(state["fabric"], event.device, DEVICE_PORT, open_ep,
                                     event.ts, {"scope": "device", "silent_s": gap / 1000,
                                                "source": event.source}))
                rec[2] = None
            elif gap > 0:
                rec[1] = gap if interval is None else (
                    interval * (1 - EWMA_WEIGHT) + gap * EWMA_WEIGHT)
            rec[0] = event.ts
        ports: dict[str, list[Any]] = rec[3]
        expected = self.expected_ms(rec[1])
        for port, error in event.port_errors():
            pkey = str(port)
            prec = ports.get(pkey)
            if error is None:
                if prec is None:
                    ports[pkey] = [event.ts, None]
                else:
                    if prec[1] is not None:
                        out.append(self._end(state["fabric"], event.device, port,
                                             prec[1], event.ts,
                                             {"scope": "port",
                                              "silent_s": (event.ts - prec[0]) / 1000,
                                              "source": event.source}))
                        prec[1] = None
                    prec[0] = event.ts
                continue
            if prec is None:
                prec = ports[pkey] = [event.ts, None]
            if (prec[1] is None and expected is not None
                    and event.ts - prec[0] > self.factor * expected):
                ep = episode_id(DetectionKind.STALE, event.device, port, prec[0],
                                event.source)
                prec[1] = ep
                out.append(self._detection(
                    state["fabric"], event.device, port, event.ts, ep,
                    {"scope": "port", "source": event.source, "last_good_ts": prec[0],
                     "expected_interval_s": round(expected / 1000, 3),
                     "silent_s": (event.ts - prec[0]) / 1000, "error": error,
                     "interval_factor": self.factor}))
        return out

    def check(self, state: StaleState) -> list[Detection]:
        """Every watched device whose silence passed its limit on the scope's clock."""
        clock = state["clock"]
        out: list[Detection] = []
        if clock is None:
            return out
        lasts: list[int] | None = None
        others = len(state["s"]) - 1
        for key in sorted(state["s"]):
            rec = state["s"][key]
            last, interval, open_ep, ports = rec
            expected = self.expected_ms(interval)
            if open_ep is not None or expected is None or clock - last <= self.factor * expected:
                continue
            if lasts is None:
                lasts = sorted(r[0] for r in state["s"].values())
            deadline = last + self.factor * expected
            if 2 * (len(lasts) - bisect_right(lasts, deadline)) <= others:
                continue  # most of the fabric has not gone past it yet
            source, _, device = key.partition(_SEP)
            ep = episode_id(DetectionKind.STALE, device, DEVICE_PORT, last, source)
            rec[2] = ep
            out.append(self._detection(
                state["fabric"], device, DEVICE_PORT, clock, ep,
                {"scope": "device", "source": source, "last_report_ts": last,
                 "expected_interval_s": round(expected / 1000, 3),
                 "silent_s": (clock - last) / 1000, "interval_factor": self.factor,
                 "ports": sorted(int(p) for p in ports)}))
        return out

    def _detection(self, fabric: str, device: str, port: int, ts: int, episode: str,
                   evidence: dict[str, Any]) -> Detection:
        return make_detection(kind=DetectionKind.STALE, fabric=fabric, device=device, port=port,
                              ts=ts, action=self.action, episode=episode, evidence=evidence)

    def _end(self, fabric: str, device: str, port: int, episode: str, ts: int,
             evidence: dict[str, Any]) -> Detection:
        det = make_detection(kind=DetectionKind.STALE_END, fabric=fabric, device=device,
                             port=port, ts=ts, action="none", episode=episode,
                             evidence={"ended": True, **evidence}, severity=Severity.INFO)
        return det.model_copy(update={"id": f"det:{episode}/end"})


def open_episodes(state: StaleState) -> list[tuple[str, int, str]]:
    """(device, port, episode) of every open stale episode (port 0: the whole device)."""
    out: list[tuple[str, int, str]] = []
    for key, (_, _, open_ep, ports) in sorted(state["s"].items()):
        device = key.partition(_SEP)[2]
        if open_ep is not None:
            out.append((device, DEVICE_PORT, open_ep))
        for p, (_, pep) in sorted(ports.items(), key=lambda kv: int(kv[0])):
            if pep is not None:
                out.append((device, int(p), pep))
    return out
