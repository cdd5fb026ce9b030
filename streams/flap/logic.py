"""Flap dampening: a true trailing window of event time over one port's link downs.

Pinned semantics (ARCHITECTURE.md, "Detection semantics"):

* A ``flap`` detection fires at the down at time ``t`` when the number of downs of the port in
  the half-open interval ``(t - window, t]`` exceeds ``maxLinkDowns``. A down at exactly
  ``t - window`` is outside. ``up`` events never reset anything.
* Event time: an event up to ``stream.allowedLateness`` (default 60 s) older than the
  highest ``ts`` this port has seen (its watermark) is placed where it belongs and may
  complete a window; the detection then carries the ``ts`` of the down that completes it
  (which may be the late down or a later one). Older events are dropped and counted
  (``late_dropped``).
* Duplicates (the same event ``id``) count once. Redelivering the event that fired a
  detection returns the identical detection again (same ``id`` and ``episode``), even when
  later events have moved the watermark past it (the last ``KEEP_FIRED`` episodes are kept
  for that), so an at-least-once worker that crashed between deciding and publishing loses
  nothing; consumers deduplicate by ``id``/``episode``.
* Downs revealed only by a ``link_downed`` counter increase (``CounterDowns``, derived by the
  counters detector from two successive samples ``(start, ts]``) count for
  ``increase - (trap downs of the port in (start, ts])`` when that is positive, placed at the
  sample time ``ts`` (the moment the down became known). A trap that arrives later inside
  that interval takes the place of one such counter-revealed down, so no down is counted
  twice whichever arrives first. Such an interval moves the port's watermark only to its
  ``start``: the traps of ``(start, ts]`` travel another topic and may come after it, and
  are not late for that. Two sources reading one port's PMA counter (perfquery and
  UFM, say) keep apart counter states and both reveal the same downs: within a window
  only the source that revealed the port's latest counted downs counts (another's
  increases are the same downs, ``other_source``), until it has revealed none for a window.

Episodes: the trailing count ``c(τ)`` is a step function of time. A port is *in episode*
while ``c(τ) > maxLinkDowns``; an episode starts at the down that lifts the count over the
limit and ends at the first instant the window holds ``<= maxLinkDowns`` downs again (a
down expiring at ``d + window``). One episode yields one detection, at its first down;
downs while it lasts are recorded on it (``downs``) and not fired. The episode id is
``flap/{device}:{port}/{ts of the down that opened it}``. Detections are never withdrawn:
a late down can only merge periods, and a merged period keeps the episode(s) it already
fired instead of firing again.

Downs that are not the link's fault never count (``Excuse``, from the incident correlator,
``streams.incidents``): the downs of an incident's member while it was open (a switch or
node reboot), and those fabricwatch or a technician caused (from an isolation until its
return, a ladder rung the runbook waited for). A down reported ``Disabled`` (the port was
administratively disabled, which is how every controller isolates) never counts either.
An excuse that arrives after a down takes it out of the count from then on; a detection
already fired stays (detections are never withdrawn).

State is a plain dataclass (``FlapState``) with ``to_json``/``from_json`` so it lives in a
changelogged table. It holds only the downs that can still matter: those after
``watermark - lateness - window`` inclusive (plus the traps inside a counter interval still held).
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import asdict, dataclass, field
from typing import Any

from schemas import Detection, DetectionKind, PortEvent
from schemas.policy import Policy
from streams.common import episode_id, make_detection


@dataclass(frozen=True, slots=True)
class CounterDowns:
    """Downs a ``link_downed`` counter revealed between two samples of one port.

    ``id`` is ``{counters message id}/{port}`` so a redelivered counters message yields the
    same id and is counted once. ``start`` is the previous sample's ``ts`` (exclusive),
    ``ts`` this sample's (inclusive). ``source``: the counters' source ("" when unknown).
    """

    id: str
    fabric: str
    device: str
    port: int
    start: int
    ts: int
    increase: int
    source: str = ""

    def to_wire(self) -> dict[str, Any]:
        return {"kind": "counter_downs", **asdict(self)}

    @classmethod
    def from_wire(cls, obj: dict[str, Any]) -> CounterDowns:
        return cls(id=str(obj["id"]), fabric=str(obj["fabric"]), device=str(obj["device"]),
                   port=int(obj["port"]), start=int(obj["start"]), ts=int(obj["ts"]),
                   increase=int(obj["increase"]), source=str(obj.get("source") or ""))


@dataclass(frozen=True, slots=True)
class Excuse:
    """Downs of one port in ``[start, end]`` (``end`` None: still open) that do not count.

    ``id`` names the cause (an incident id, ``self/{workflow}/...``); a later excuse with the
    same id replaces it (an open one gets its end). ``ts`` is when it was decided.
    """

    id: str
    fabric: str
    device: str
    port: int
    start: int
    end: int | None
    ts: int

    def to_wire(self) -> dict[str, Any]:
        return {"kind": "excuse", **asdict(self)}

    @classmethod
    def from_wire(cls, obj: dict[str, Any]) -> Excuse:
        end = obj.get("end")
        return cls(id=str(obj["id"]), fabric=str(obj["fabric"]), device=str(obj["device"]),
                   port=int(obj["port"]), start=int(obj["start"]),
                   end=None if end is None else int(end), ts=int(obj["ts"]))


def from_wire(obj: dict[str, Any]) -> CounterDowns | Excuse:
    """A message of the flap agent's internal topic (counter downs or an excuse)."""
    if obj.get("kind") == "excuse":
        return Excuse.from_wire(obj)
    return CounterDowns.from_wire(obj)


# phys_state of a port taken down on purpose (ibportstate disable, UFM/SONiC admin down).
DISABLED = "disabled"


@dataclass(slots=True)
class Episode:
    """One flap episode: when it opened, which event fired it, and what it has seen since."""

    start: int
    fired_by: str
    downs: int
    last: int
    action: str
    evidence: dict[str, Any]


@dataclass(slots=True)
class FlapState:
    """Everything the flap detector keeps for one port."""

    fabric: str = ""
    device: str = ""
    port: int = 0
    watermark: int | None = None
    traps: list[tuple[int, str]] = field(default_factory=list)  # (ts, event id), sorted
    # counter intervals: [id, start, ts, increase]
    intervals: list[tuple[str, int, int, int]] = field(default_factory=list)
    marks: dict[str, str] = field(default_factory=dict)  # down id -> episode id
    episodes: dict[str, Episode] = field(default_factory=dict)
    late_dropped: int = 0
    duplicates: int = 0
    excused: dict[str, tuple[int, int | None]] = field(default_factory=dict)  # id -> span
    disabled: int = 0  # downs reported Disabled, not counted
    # the source whose counter downs count, and when it last revealed one
    counter_source: tuple[str, int] | None = None
    other_source: int = 0  # counter downs of a second source, not counted again

    def to_json(self) -> dict[str, Any]:
        return {
            "fabric": self.fabric, "device": self.device, "port": self.port,
            "watermark": self.watermark,
            "traps": [list(t) for t in self.traps],
            "intervals": [list(i) for i in self.intervals],
            "marks": self.marks,
            "episodes": {k: asdict(v) for k, v in self.episodes.items()},
            "late_dropped": self.late_dropped, "duplicates": self.duplicates,
            "excused": {k: list(v) for k, v in self.excused.items()},
            "disabled": self.disabled,
            "counter_source": (None if self.counter_source is None
                               else list(self.counter_source)),
            "other_source": self.other_source,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> FlapState:
        return cls(
            fabric=obj["fabric"], device=obj["device"], port=obj["port"],
            watermark=obj["watermark"],
            traps=[(int(t[0]), str(t[1])) for t in obj["traps"]],
            intervals=[(str(i[0]), int(i[1]), int(i[2]), int(i[3])) for i in obj["intervals"]],
            marks=dict(obj["marks"]),
            episodes={k: Episode(**v) for k, v in obj["episodes"].items()},
            late_dropped=int(obj["late_dropped"]), duplicates=int(obj["duplicates"]),
            # states written before excuses existed have none
            excused={k: (int(v[0]), None if v[1] is None else int(v[1]))
                     for k, v in obj.get("excused", {}).items()},
            disabled=int(obj.get("disabled", 0)),
            counter_source=(None if obj.get("counter_source") is None
                            else (str(obj["counter_source"][0]), int(obj["counter_source"][1]))),
            other_source=int(obj.get("other_source", 0)),
        )


FlapInput = PortEvent | CounterDowns | Excuse
# Episodes kept past the window for redeliveries (a redelivery comes within a commit
# interval of the original, so a handful is plenty).
KEEP_FIRED = 8


def _params(policy: Policy) -> tuple[int, int, int]:
    fh = policy.fabric_health
    return (round(fh.flap_dampening.window * 1000), fh.flap_dampening.max_link_downs,
            round(fh.stream.allowed_lateness * 1000))


def effective_downs(state: FlapState) -> list[tuple[int, str]]:
    """Trap downs plus the counter-revealed downs no trap accounts for, sorted by (ts, id)."""
    downs = list(state.traps)
    if state.intervals:
        trap_ts = [t for t, _ in state.traps]
        for iv_id, start, end, increase in state.intervals:
            reported = sum(1 for t in trap_ts if start < t <= end)
            downs.extend((end, f"{iv_id}#{n}") for n in range(max(0, increase - reported)))
    if state.excused:
        spans = list(state.excused.values())
        downs = [d for d in downs if not any(
            lo <= d[0] and (hi is None or d[0] <= hi) for lo, hi in spans)]
    downs.sort()
    return downs


def step(state: FlapState, event: FlapInput, policy: Policy) -> tuple[FlapState,
                                                                        list[Detection]]:
    """Apply one event of this port; return the (mutated) state and any detections."""
    window, max_downs, lateness = _params(policy)
    if not state.device:
        state.fabric, state.device, state.port = event.fabric, event.device, event.port
    if isinstance(event, Excuse):
        # Only takes downs out of the count: nothing can fire, and time does not move.
        state.excused[event.id] = (event.start, event.end)
        return state, []
    # A redelivered event that fired repeats its detection even if later events have since
    # moved the watermark past it (a worker killed between deciding and publishing).
    if any(ep.fired_by == event.id for ep in state.episodes.values()):
        return state, _redeliver(state, event.id)
    if state.watermark is not None and event.ts < state.watermark - lateness:
        state.late_dropped += 1
        return state, []
    if isinstance(event, PortEvent):
        if any(i == event.id for _, i in state.traps):
            return state, _redeliver(state, event.id)
        state.watermark = event.ts if state.watermark is None else max(state.watermark, event.ts)
        if event.state != "down":
            return state, []  # up never resets: it only advances the watermark
        if (event.phys_state or "").lower() == DISABLED:
            state.disabled += 1  # taken down on purpose: not the link's fault
            return state, []
        state.fabric = event.fabric
        before = {d for _, d in effective_downs(state)} if state.intervals else set()
        state.traps.append((event.ts, event.id))
        state.traps.sort()
        if before:
            _inherit_mark(state, event.id, before)
    else:
        if any(iv[0] == event.id for iv in state.intervals):
            return state, _redeliver(state, event.id)
        # A counter interval says where the port's event time stands only up to its start:
        # its downs lie somewhere in (start, ts], and the traps of that span may still be on
        # their way (another topic, another hop), so they must not arrive "late".
        state.watermark = (event.start if state.watermark is None
                           else max(state.watermark, event.start))
        if event.increase <= 0:
            return state, []
        held = state.counter_source
        if (event.source and held is not None and held[0] != event.source
                and event.ts - held[1] <= window):
            state.other_source += 1  # the same downs, seen through another source
            return state, []
        if event.source:
            state.counter_source = (event.source, max(event.ts, held[1]) if held is not None
                                    and held[0] == event.source else event.ts)
        state.intervals.append((event.id, event.start, event.ts, event.increase))
        state.intervals.sort(key=lambda iv: (iv[2], iv[0]))
    detections = _evaluate(state, event.id, event.ts, window, max_downs, lateness,
                           policy.fabric_health.flap_dampening.action)
    _prune(state, window, lateness)
    return state, detections


def _inherit_mark(state: FlapState, trap_id: str, before: set[str]) -> None:
    """A trap that accounts for a down a counter revealed first takes that down's place,
    and so its episode: counters read before the traps arrived may already have fired it,
    and the same downs must not open it again (one id, two contents) or another one."""
    after = {d for _, d in effective_downs(state)}
    for gone in sorted(before - after):
        if gone in state.marks and trap_id not in state.marks:
            state.marks[trap_id] = state.marks[gone]
            return


def _redeliver(state: FlapState, event_id: str) -> list[Detection]:
    state.duplicates += 1
    return [_detection(state, eid, ep) for eid, ep in sorted(state.episodes.items())
            if ep.fired_by == event_id]


def _detection(state: FlapState, eid: str, ep: Episode) -> Detection:
    return make_detection(kind=DetectionKind.FLAP, fabric=state.fabric, device=state.device,
                          port=state.port, ts=ep.start, action=ep.action,
                          episode=eid, evidence=ep.evidence)


def _evaluate(state: FlapState, event_id: str, event_ts: int, window: int, max_downs: int,
              lateness: int, action: str) -> list[Detection]:
    assert state.watermark is not None  # noqa: S101 - set by step() before any evaluation
    downs = effective_downs(state)
    # Groups of downs sharing one ts, with the trailing count at that ts.
    times: list[int] = []
    members: list[list[str]] = []
    for ts, did in downs:
        if times and times[-1] == ts:
            members[-1].append(did)
        else:
            times.append(ts)
            members.append([did])
    # counts[g]: downs in (t - window, t], the pinned window at the group's time t.
    # before[g]: downs in [t - window, t), the window just before t (a down at exactly
    # t - window is still inside it and leaves at t), which says whether the count stayed
    # over the limit up to t.
    counts: list[int] = []
    before: list[int] = []
    sizes = [len(m) for m in members]
    lo = lo_closed = 0
    total = total_closed = 0
    for hi, ts in enumerate(times):
        while times[lo_closed] < ts - window:
            total_closed -= sizes[lo_closed]
            lo_closed += 1
        before.append(total_closed)
        total_closed += sizes[hi]
        total += sizes[hi]
        while times[lo] <= ts - window:
            total -= sizes[lo]
            lo += 1
        counts.append(total)
    # Counts before the lateness horizon may miss pruned downs: there, over-ness is what
    # was decided when they were exact (a mark), and no new event can change it.
    exact_from = state.watermark - lateness
    over = [
        (counts[g] > max_downs) if times[g] >= exact_from
        else any(d in state.marks for d in members[g])
        for g in range(len(times))
    ]
    # Runs of over-limit groups joined without the count dipping to the limit in between.
    runs: list[list[int]] = []
    for g in range(len(times)):
        if not over[g]:
            continue
        if times[g] >= exact_from:
            joined = bool(runs) and runs[-1][-1] == g - 1 and before[g] > max_downs
        else:
            prev = runs[-1][-1] if runs else -1
            joined = prev >= 0 and prev == g - 1 and _same_episode(
                state, members[prev], members[g])
        if joined:
            runs[-1].append(g)
        else:
            runs.append([g])
    held = _episodes_by_run(state, times, runs, [t for t, _ in downs], window, max_downs,
                            exact_from)
    detections: list[Detection] = []
    for r, run in enumerate(runs):
        existing = next((state.marks[d] for g in run for d in members[g] if d in state.marks),
                        held.get(r))
        if existing is None:
            start = times[run[0]]
            eid = episode_id(DetectionKind.FLAP, state.device, state.port, start)
            first = run[0]
            in_window = [t for t, _ in downs if start - window < t <= start]
            evidence = {
                "downs_in_window": counts[first],
                "window_s": window / 1000,
                "max_link_downs": max_downs,
                "down_ts": in_window,
                "counter_revealed": sum(
                    1 for t, d in downs if start - window < t <= start and "#" in d),
                "late": event_ts < state.watermark,
            }
            ep = Episode(start=start, fired_by=event_id, downs=0, last=start, action=action,
                         evidence=evidence)
            state.episodes[eid] = ep
            current = eid
            fire = True
        else:
            current = existing
            fire = False
        for g in run:
            for d in members[g]:
                if d in state.marks:
                    current = state.marks[d]
                    continue
                state.marks[d] = current
                ep = state.episodes[current]
                ep.downs += 1
                ep.last = max(ep.last, times[g])
        if fire:
            detections.append(_detection(state, eid, state.episodes[eid]))
    return detections


def _episodes_by_run(state: FlapState, times: list[int], runs: list[list[int]],
                     down_ts: list[int], window: int, max_downs: int,
                     exact_from: int) -> dict[int, str]:
    """The run (by index) whose over-limit period holds each fired episode's start.

    Over-limit periods never overlap, so a run that holds an episode's start is that
    episode, whichever of its downs carry its mark. A trap that takes the place of a
    counter-revealed down moves that down earlier, into its true time: the count can now
    cross the limit at a group before the episode's start whose downs the episode never
    marked, and without this the same downs would open a second episode. Only starts
    inside the exact horizon are placed (before it, pruned downs make counts inexact and
    the marks decide)."""
    run_of = {g: r for r, run in enumerate(runs) for g in run}
    held: dict[int, str] = {}
    for eid, ep in sorted(state.episodes.items(), key=lambda kv: (kv[1].start, kv[0])):
        if ep.start < exact_from:
            continue
        g = bisect_right(times, ep.start) - 1
        # the count at the start itself: it only falls between groups, so it is over the
        # limit there only if the run of the last group before it has not yet ended
        count = bisect_right(down_ts, ep.start) - bisect_right(down_ts, ep.start - window)
        if g >= 0 and g in run_of and count > max_downs:
            held.setdefault(run_of[g], eid)
    return held


def _same_episode(state: FlapState, a: list[str], b: list[str]) -> bool:
    ea = {state.marks[d] for d in a if d in state.marks}
    eb = {state.marks[d] for d in b if d in state.marks}
    return bool(ea & eb)


def _prune(state: FlapState, window: int, lateness: int) -> None:
    assert state.watermark is not None  # noqa: S101 - set by step()
    horizon = state.watermark - lateness - window
    state.intervals = [iv for iv in state.intervals if iv[2] >= horizon]
    state.excused = {k: v for k, v in state.excused.items() if v[1] is None or v[1] >= horizon}
    trap_cut = min([horizon, *(iv[1] for iv in state.intervals)])
    state.traps = [t for t in state.traps if t[0] >= trap_cut]
    live = {d for _, d in effective_downs(state)}
    state.marks = {d: e for d, e in state.marks.items() if d in live}
    referenced = set(state.marks.values())
    # The last few episodes stay whatever their age, so that a redelivery of the event
    # that fired one still finds it.
    recent = set(sorted(state.episodes, key=lambda k: state.episodes[k].start)[-KEEP_FIRED:])
    state.episodes = {k: v for k, v in state.episodes.items()
                      if k in referenced or k in recent or v.last >= horizon}
