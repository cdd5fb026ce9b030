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
  a clock its own partition has not reached. A consumer that knows more than the counts
  (``held``: a partition with records not yet read) keeps such lanes holding the clock
  whatever the others carried: a fetch can bring one partition's whole backlog before
  another's. A live worker also knows the wall time: a lane idle by count holds the clock
  for ``IDLE_WALL_MS`` more of it, for records not yet *written* (collectors flushing
  their buffers after a broker outage fill one partition seconds before another), which no
  count can tell from a silence. The clock never goes back. A scope that
  hears nothing at all moves no clock and declares nothing stale (a collector that stops
  altogether is an alert on its own metrics).
* **Who is watched.** Each (device, source) pair is a reporting stream with its own expected
  interval: the smoothed gap between its messages (``EWMA_WEIGHT``), never below the
  policy's ``minInterval``; before it has one, the policy's ``defaultInterval`` when set.
  Sources that report only what is wrong (``ibqueryerrors``) are not watched.
* **Device stale.** When the clock is more than ``intervalFactor`` intervals past the
  stream's last message (its deadline) *and* most of the scope's other streams (more than
  half) have gone on reporting past that deadline, one ``stale`` detection fires at port 0
  (the whole device; the evidence lists its ports), once per episode. The quorum is what
  "while the others continue" means. Another stream counts when its last report is past
  the deadline and, if it was itself silent longer than its own limit before, it has been
  reporting again for longer than this stream's limit since: a fabric that comes back from
  a pause moves the clock with its first messages, and the devices not yet back are not
  stale for a silence the others shared, however the returns are spread; one that stays
  silent is stale once the others have reported for its limit. The episode id is
  ``stale/{device}:0/{source}/{last message ts}``; the detection's ``ts`` is the clock when
  the silence was seen.
* **Port stale.** A port whose samples carry ``error`` (the collector named it but could not
  read it) for more than ``intervalFactor`` intervals of its device's own messages since its
  last good sample is ``stale`` at that port, once per episode.
* **End.** The episode ends when the device (or the port) reports again: a ``stale_end``
  detection with the same episode, id ``det:{episode}/end``, action none. The silent gap
  does not teach the interval.
* **A silence seen ahead of the clock.** A worker catching up gets each partition's backlog
  in turns of one message per partition (Faust's round robin), not in event time: a
  device alone on its partition delivers its report after a silence while the others'
  lanes, and so the clock, are still before that silence. Such a gap (longer than the
  limit, its end ahead of the clock) is kept as *pending*; when the clock passes its
  deadline with the quorum, the episode fires and ends at once (the same ids as replay,
  the end at the report that ended it); when the clock reaches its end first, it was not
  a silence of this device alone and it teaches the interval as any gap does.

Checks of the whole scope run when the clock has moved ``CHECK_EVERY_MS`` since the last,
so the per-message cost stays a few dictionary updates.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Collection, Iterable, Sequence
from typing import Any, Protocol

from schemas import CountersMessage, Detection, DetectionKind, Severity
from schemas.events import column_good_ports, column_port_errors
from schemas.policy import Policy
from streams.common import episode_id, make_detection

# Sources that list only ports past thresholds: their silence means "nothing wrong".
UNWATCHED_SOURCES = frozenset({"ibqueryerrors"})
EWMA_WEIGHT = 0.2  # of a new gap in the learned interval
CHECK_EVERY_MS = 250
NEVER_DUE = 1 << 62  # no watched stream has a deadline
IDLE_ROUNDS = 2  # reports per watched stream after which a quiet lane is idle
IDLE_WALL_MS = 5_000  # ...and, in a live worker, the wall time it is so before it is idle
DEVICE_PORT = 0  # a device-wide detection's port

# State (plain JSON, for a changelogged table):
#   {"clock": ms, "checked": ms, "fabric": str, "n": messages seen,
#    "w": {"lane": [highest ts, n at its last message]},
#    "s": {"source\x1fdevice": [last_ts, interval_ms|None, open_episode|None, ports,
#                                all_good|None]},
#    "g": {"source\x1fdevice": [[gap start ts, gap end ts, expected_ms], ...]}}
#   ports: {"n": [last_good_ts, open_episode|None]}
#   all_good: [ts, [port, ...]]: those ports were all good at ts, not yet written into
#   ports (a message with the same ports all good again moves only ts; absent in states
#   written before it existed)
#   "g": the pending gaps (silences seen ahead of the clock), absent when none
#   "iw": {"lane": wall ms it first looked idle by count}: a live worker's only, not
#   persisted with the slices (after a restart a quiet lane holds the clock once more)
#   "due": the earliest deadline of a watched stream less a ms, from the last check that
#   walked them and lowered by reports since (absent: unknown; never stored in a slice)
#   "r": {"source\x1fdevice": ts}: the report that ended the stream's last silence longer
#   than its limit, while that run of reports is shorter than the longest limit of the
#   scope (the quorum counts such a stream only once its run is longer than the judged
#   stream's limit); absent when none
StaleState = dict[str, Any]
_SEP = "\x1f"


class StreamReport(Protocol):
    """What the detector reads of one stream's report: a counters message or part of one
    (``Counters``, ``CounterColumns``), or a ``Report``."""

    @property
    def source(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def ts(self) -> int: ...
    def good_ports(self) -> list[int] | None: ...
    def port_errors(self) -> Iterable[tuple[int, str | None]]: ...


class Report:
    """One HCA's report within a host's message, without building its row part (the
    counters path makes these for a host's columnar message, ``streams.counters.hosts``):
    what its part's ``good_ports`` and ``port_errors`` would give."""

    __slots__ = ("device", "errors", "key", "ports", "source", "ts")

    def __init__(self, source: str, device: str, ts: int, ports: list[int],
                 errors: list[str | None] | None, key: str | None = None) -> None:
        self.source = source
        self.device = device
        self.key = key if key is not None else stream_key(source, device)
        self.ts = ts
        self.ports = ports
        self.errors = errors

    def good_ports(self) -> list[int] | None:
        return column_good_ports(self.ports, self.errors)

    def port_errors(self) -> Iterable[tuple[int, str | None]]:
        return column_port_errors(self.ports, self.errors)


def stream_key(source: str, device: str) -> str:
    """The state's key of one reporting stream (a device as one source reports it)."""
    return f"{source}{_SEP}{device}"


def report_key(report: StreamReport) -> str:
    """``stream_key`` of a report (a ``Report`` carries its own)."""
    if type(report) is Report:
        return report.key
    return stream_key(report.source, report.device)


def new_state() -> StaleState:
    return {"clock": None, "checked": None, "fabric": "", "n": 0, "w": {}, "s": {}}


def _clock_low(state: StaleState, lanes: dict[str, list[int]], n: int, idle_after: int,
               held: Collection[str], wall_ms: int | None) -> int:
    """The clock's candidate: the lowest mark of the lanes still delivering. A lane that
    carried nothing while the others carried ``idle_after`` stream reports is idle (unless
    the consumer ``held`` it); with a wall clock (a live worker) it still delivers until it
    has been so for ``IDLE_WALL_MS`` of wall time.

    Counts cannot tell a partition whose devices went silent from one whose records are not
    written yet: collectors flushing their buffers after a broker outage, or one producer's
    burst, fill one partition before another, and the other's devices would be stale for
    the few seconds until theirs land, then end (a false pair). When each lane first looked
    idle is wall time, not event time: kept beside the state (``iw``), never persisted."""
    quiet: dict[str, int] | None = None if wall_ms is None else state.setdefault("iw", {})
    low: int | None = None
    for name, mark in lanes.items():
        if n - mark[1] <= idle_after or name in held:
            if quiet is not None:
                quiet.pop(name, None)
        elif quiet is None or wall_ms is None:
            continue
        else:
            since = quiet.setdefault(name, wall_ms)
            if since > wall_ms:  # the wall clock went back: count from now
                quiet[name] = since = wall_ms
            if wall_ms - since >= IDLE_WALL_MS:
                continue
        low = mark[0] if low is None else min(low, mark[0])
    # (never None: the lane of this message has just delivered)
    return low if low is not None else min(m[0] for m in lanes.values())


class StaleDetector:
    """The stale detector with the policy's staleness section resolved once."""

    def __init__(self, policy: Policy) -> None:
        st = policy.fabric_health.staleness
        self.factor = st.interval_factor
        self.default_ms = None if st.default_interval is None else st.default_interval * 1000
        self.min_ms = st.min_interval * 1000
        self.action = st.action

    def step(self, state: StaleState | None, event: CountersMessage, lane: int = 0,
             parts: Sequence[StreamReport] | None = None,
             held: Collection[str] = (), wall_ms: int | None = None
             ) -> tuple[StaleState, list[Detection]]:
        """Apply one counters message of ``lane``; the (mutated) state and any detections.

        ``held``: lanes the consumer knows are not idle, whatever they carried (records
        not yet read): they hold the clock back.

        ``wall_ms``: the consumer's wall clock (a live worker; replay, one lane, has none).
        A lane idle by count holds the clock back for ``IDLE_WALL_MS`` of wall time first.

        A host agent's message is one stream per HCA (``Counters.split``; ``parts`` when
        the caller has split it already).
        """
        state = state if state is not None else new_state()
        state["fabric"] = event.fabric
        out: list[Detection] = []
        streams = parts if parts is not None else event.split()
        gaps: list[tuple[str, int, int, float, float | None]] = []
        if event.source not in UNWATCHED_SOURCES:
            for part in streams:
                out += self._observe(state, part, gaps)
        n = state["n"] = state.get("n", 0) + len(streams)  # in stream reports
        lanes: dict[str, list[int]] = state.setdefault("w", {})
        mark = lanes.get(str(lane))
        if mark is None:
            lanes[str(lane)] = [event.ts, n]
        else:
            mark[0] = max(mark[0], event.ts)
            mark[1] = n
        idle_after = IDLE_ROUNDS * max(1, len(state["s"]))
        low = _clock_low(state, lanes, n, idle_after, held, wall_ms)
        clock = state["clock"]
        if clock is None or low > clock:
            state["clock"] = clock = low
        for key, start, end, expected, interval in gaps:
            if end > clock:  # its silence is judged when the clock gets there
                state["s"][key][1] = interval  # ...and teaches only if it was none
                state.pop("due", None)  # (its deadline moved: the next check walks all)
                state.setdefault("g", {}).setdefault(key, []).append([start, end, expected])
        checked = state["checked"]
        if checked is None or clock - checked >= CHECK_EVERY_MS:
            state["checked"] = clock
            out += self.check(state)
        return state, out

    def expected_ms(self, interval: float | None) -> float | None:
        if interval is None:
            return self.default_ms
        return max(interval, self.min_ms)

    def _observe(self, state: StaleState, event: StreamReport,
                 gaps: list[tuple[str, int, int, float, float | None]]) -> list[Detection]:
        """One stream's report; a gap longer than its limit is added to ``gaps`` (key,
        start, end, expected ms, the interval before it) for ``step`` to judge."""
        key = report_key(event)
        streams: dict[str, list[Any]] = state["s"]
        rec = streams.get(key)
        out: list[Detection] = []
        if rec is None:
            rec = streams[key] = [event.ts, None, None, {}]
        else:
            last, interval, open_ep = rec[:3]
            if event.ts <= last:
                return []  # a late or repeated message: neither news nor a gap
            gap = event.ts - last
            if open_ep is not None:
                out.append(self._end(state["fabric"], event.device, DEVICE_PORT, open_ep,
                                     event.ts, {"scope": "device", "silent_s": gap / 1000,
                                                "source": event.source}))
                rec[2] = None
                state.setdefault("r", {})[key] = event.ts
            else:
                expected_before = self.expected_ms(interval)
                if expected_before is not None and gap > self.factor * expected_before:
                    gaps.append((key, last, event.ts, expected_before, interval))
                    state.setdefault("r", {})[key] = event.ts
                rec[1] = self._taught(interval, gap)
            rec[0] = event.ts
        due = state.get("due")
        if due is not None and rec[2] is None:  # its deadline may now be the earliest
            expected_now = self.expected_ms(rec[1])
            if expected_now is not None:
                state["due"] = min(due, self._due(rec[0], expected_now))
        ports: dict[str, list[Any]] = rec[3]
        good = event.good_ports()
        lazy = rec[4] if len(rec) > 4 else None
        if lazy is not None:
            # The common message: the same ports as the last, all good again. Their
            # last-good times move together, without a write per port.
            if good is not None and good == lazy[1]:
                lazy[0] = event.ts
                return out
            for port in lazy[1]:
                ports[str(port)][0] = lazy[0]
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
        # every port written above was good (an open episode of theirs ended): from here on
        # the same ports all good again only move the time
        rec[4:] = [None if good is None else [event.ts, list(good)]]
        return out

    def _due(self, last: int, expected: float) -> int:
        """A stream's deadline for the scope's ``due``, a millisecond early: a clock before
        it is surely not past ``last + factor * expected`` whatever the float rounding."""
        return int(last + self.factor * expected) - 1

    def _taught(self, interval: float | None, gap: float) -> float:
        return gap if interval is None else interval * (1 - EWMA_WEIGHT) + gap * EWMA_WEIGHT

    def check(self, state: StaleState) -> list[Detection]:
        """Every watched device whose silence passed its limit on the scope's clock."""
        clock = state["clock"]
        out: list[Detection] = []
        if clock is None:
            return out
        quorum: _Quorum | None = None
        others = len(state["s"]) - 1
        if state.get("r"):
            self._forget_long_runs(state, clock)
        if state.get("g"):
            quorum = _Quorum(state, clock)
            out += self._judge_pending(state, clock, quorum, others)
        due = state.get("due")
        if due is not None and clock < due:
            return out  # no watched stream's deadline has come yet
        # The streams past their deadline, judged in key order; the others' earliest
        # deadline (less a millisecond, against rounding) spares the next checks this walk
        # until the clock reaches it (``_observe`` lowers it as reports move deadlines).
        earliest = NEVER_DUE
        late: list[str] = []
        factor = self.factor
        for key, rec in state["s"].items():
            if rec[2] is not None:
                continue
            expected = self.expected_ms(rec[1])
            if expected is None:
                continue
            if clock - rec[0] <= factor * expected:
                earliest = min(earliest, self._due(rec[0], expected))
            else:
                late.append(key)
        for key in sorted(late):
            rec = state["s"][key]
            last, interval, open_ep, ports = rec[:4]
            expected = self.expected_ms(interval)
            assert expected is not None  # noqa: S101 - only streams with one are late
            if quorum is None:
                quorum = _Quorum(state, clock)
            limit = self.factor * expected
            if 2 * quorum.past(last + limit, limit) <= others:
                earliest = min(earliest, self._due(last, expected))  # judged again next check
                continue  # most of the fabric has not gone on past it yet
            source, _, device = key.partition(_SEP)
            ep = episode_id(DetectionKind.STALE, device, DEVICE_PORT, last, source)
            rec[2] = ep
            out.append(self._detection(
                state["fabric"], device, DEVICE_PORT, clock, ep,
                {"scope": "device", "source": source, "last_report_ts": last,
                 "expected_interval_s": round(expected / 1000, 3),
                 "silent_s": (clock - last) / 1000, "interval_factor": self.factor,
                 "ports": sorted(int(p) for p in ports)}))
        state["due"] = earliest
        return out

    def _forget_long_runs(self, state: StaleState, clock: int) -> None:
        """Drop the run starts of streams that have reported again for longer than any
        stream's limit by the clock: they count for every quorum, as a stream never silent
        does."""
        limits = [self.expected_ms(rec[1]) for rec in state["s"].values()]
        longest = self.factor * max((x for x in limits if x is not None), default=0.0)
        runs: dict[str, int] = state["r"]
        for key in [k for k, start in runs.items()
                    if min(state["s"][k][0], clock) - start > longest]:
            del runs[key]
        if not runs:
            del state["r"]

    def _judge_pending(self, state: StaleState, clock: int, quorum: _Quorum,
                       others: int) -> list[Detection]:
        """The pending gaps the clock has reached: fired and ended, or taught."""
        out: list[Detection] = []
        pending: dict[str, list[list[Any]]] = state["g"]
        for key in sorted(pending):
            rec = state["s"][key]
            keep = []
            for start, end, expected in pending[key]:
                limit = self.factor * expected
                deadline = start + limit
                if clock >= end:  # back before the fabric was past it: not this one's silence
                    rec[1] = self._taught(rec[1], end - start)
                    state.pop("due", None)  # its deadline moved: walked at the next check
                    continue
                # the stream's own reports since are past the deadline: not one of the others
                after = quorum.past(deadline, limit) - quorum.counts(key, deadline, limit)
                if clock - start <= limit or 2 * after <= others:
                    keep.append([start, end, expected])
                    continue
                source, _, device = key.partition(_SEP)
                ep = episode_id(DetectionKind.STALE, device, DEVICE_PORT, start, source)
                out.append(self._detection(
                    state["fabric"], device, DEVICE_PORT, clock, ep,
                    {"scope": "device", "source": source, "last_report_ts": start,
                     "expected_interval_s": round(expected / 1000, 3),
                     "silent_s": (clock - start) / 1000, "interval_factor": self.factor,
                     "ports": sorted(int(p) for p in rec[3])}))
                out.append(self._end(state["fabric"], device, DEVICE_PORT, ep, end,
                                     {"scope": "device", "silent_s": (end - start) / 1000,
                                      "source": source}))
            if keep:
                pending[key] = keep
            else:
                del pending[key]
        if not pending:
            del state["g"]
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


class _Quorum:
    """How many of a scope's streams went on reporting past a deadline, for one check.

    A stream whose last silence longer than its limit ended recently (``state["r"]``)
    counts only when its run of reports since is longer than the judged stream's limit, on
    the clock: in a catch-up its lane can be far ahead of the judged stream's, whose own
    report may be next in line."""

    def __init__(self, state: StaleState, clock: int) -> None:
        self.state = state
        self.clock = clock
        runs: dict[str, int] = state.get("r", {})
        streams = state["s"]
        self.plain = sorted(rec[0] for key, rec in streams.items() if key not in runs)
        self.runs = [(min(streams[key][0], clock) - start, streams[key][0])
                     for key, start in runs.items()]
        self.by_limit: dict[float, list[int]] = {}

    def past(self, deadline: float, limit: float) -> int:
        n = len(self.plain) - bisect_right(self.plain, deadline)
        if self.runs:
            lasts = self.by_limit.get(limit)
            if lasts is None:  # few distinct limits in a scope: sorted once per check each
                lasts = self.by_limit[limit] = sorted(t for run, t in self.runs if run > limit)
            n += len(lasts) - bisect_right(lasts, deadline)
        return n

    def counts(self, key: str, deadline: float, limit: float) -> int:
        """1 when the stream ``key`` itself is among those ``past`` counts."""
        last = self.state["s"][key][0]
        start = self.state.get("r", {}).get(key)
        return int(last > deadline and (start is None or min(last, self.clock) - start > limit))


def open_episodes(state: StaleState) -> list[tuple[str, int, str]]:
    """(device, port, episode) of every open stale episode (port 0: the whole device)."""
    out: list[tuple[str, int, str]] = []
    for key, rec in sorted(state["s"].items()):
        open_ep, ports = rec[2], rec[3]
        device = key.partition(_SEP)[2]
        if open_ep is not None:
            out.append((device, DEVICE_PORT, open_ep))
        for p, (_, pep) in sorted(ports.items(), key=lambda kv: int(kv[0])):
            if pep is not None:
                out.append((device, int(p), pep))
    return out
