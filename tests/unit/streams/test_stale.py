"""Silence is a state: the stale detector's episodes, on event time, through replay too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import CounterColumns, Counters, DetectionKind, PortSample, decode, encode
from schemas.policy import Policy
from streams.replay import replay
from streams.stale.logic import StaleDetector, open_episodes

BASE = 1_700_002_800_000
S = 1000
DEVICES = [f"node{i:03d}/mlx5_0" for i in range(5)]


def msg(device: str, t_ms: int, *, ports: tuple[int, ...] = (1, 2), errors: dict[int, str]
        | None = None, source: str = "host_agent", fabric: str = "lab") -> Counters:
    errors = errors or {}
    return Counters(id=f"{source}/{device}/{t_ms}", ts=BASE + t_ms, fabric=fabric,
                    source=source, device=device,
                    ports=[PortSample(port=p, symbol_errors=None if p in errors else 0,
                                      error=errors.get(p)) for p in ports])


def history(silent: str, stop_s: int, resume_s: int | None, end_s: int = 30) -> list[Counters]:
    """Every device at 1 s, except ``silent`` between ``stop_s`` and ``resume_s``."""
    out = []
    for t in range(end_s):
        for d in DEVICES:
            if d == silent and t >= stop_s and (resume_s is None or t < resume_s):
                continue
            out.append(msg(d, t * S + DEVICES.index(d) * 7))  # a few ms of skew per host
    return out


def run(events: list[Counters], policy: Policy | None = None) -> list:  # type: ignore[type-arg]
    return list(replay([encode(e) for e in events], policy or Policy()))


def test_replay_device_silent_then_back() -> None:
    dets = run(history(DEVICES[2], stop_s=10, resume_s=20))
    stale = [d for d in dets if d.detection == DetectionKind.STALE]
    ends = [d for d in dets if d.detection == DetectionKind.STALE_END]
    assert len(stale) == 1 and len(ends) == 1
    (det,), (end,) = stale, ends
    assert (det.device, det.port) == (DEVICES[2], 0)
    assert det.evidence["scope"] == "device" and det.evidence["ports"] == [1, 2]
    assert det.evidence["last_report_ts"] == BASE + 9 * S + 14
    # more than three 1 s intervals of the others' time after its last message, not before
    assert 3 * S < det.ts - (BASE + 9 * S + 14) <= 3 * S + 2 * S
    assert det.action.value == "ticket"
    assert end.episode == det.episode and end.id == f"{det.id}/end"
    assert end.ts == BASE + 20 * S + 14 and end.action.value == "none"
    assert end.evidence["ended"] is True


def test_short_silence_is_not_stale() -> None:
    # three missed intervals is not more than three
    dets = run(history(DEVICES[1], stop_s=10, resume_s=12))
    assert [d for d in dets if d.detection in (DetectionKind.STALE,
                                                DetectionKind.STALE_END)] == []


def test_whole_fabric_silent_declares_nothing() -> None:
    events = [msg(d, t * S) for t in range(10) for d in DEVICES]
    events += [msg(d, t * S) for t in range(60, 70) for d in DEVICES]  # all back at once
    assert [d for d in run(events) if d.detection == DetectionKind.STALE] == []


def test_interval_is_the_devices_own() -> None:
    # a device at 10 s among devices at 1 s is stale only after more than 30 s of silence
    events = []
    for t in range(120):
        events += [msg(d, t * S) for d in DEVICES[:3]]
        if t % 10 == 0 and t < 50:
            events.append(msg("slow", t * S))
    dets = [d for d in run(events) if d.detection == DetectionKind.STALE]
    assert [d.device for d in dets] == ["slow"]
    assert dets[0].evidence["expected_interval_s"] == 10.0
    # last report at 40 s, limit 30 s; seen once most of the others are past 70 s
    assert BASE + 70 * S < dets[0].ts <= BASE + 72 * S


def test_one_report_needs_the_policy_default() -> None:
    events = [msg("once", 0)] + [msg(d, t * S) for t in range(20) for d in DEVICES]
    assert not [d for d in run(events) if d.detection == DetectionKind.STALE]
    policy = Policy.from_mapping({"fabricHealth": {"staleness": {"defaultInterval": "2s"}}})
    dets = [d for d in run(events, policy) if d.detection == DetectionKind.STALE]
    assert [d.device for d in dets] == ["once"] and BASE + 6 * S < dets[0].ts <= BASE + 8 * S


def test_port_with_errors_while_device_reports() -> None:
    events = []
    for t in range(20):
        for d in DEVICES:
            bad = d == DEVICES[0] and 5 <= t < 15
            events.append(msg(d, t * S, errors={2: "mlx5_0 port 2: gone"} if bad else None))
    dets = run(events)
    stale = [d for d in dets if d.detection == DetectionKind.STALE]
    ends = [d for d in dets if d.detection == DetectionKind.STALE_END]
    assert [(d.device, d.port) for d in stale] == [(DEVICES[0], 2)]
    assert stale[0].evidence["scope"] == "port" and stale[0].evidence["error"].endswith("gone")
    assert stale[0].ts == BASE + 8 * S  # last good at 4 s; 4 s > 3 intervals
    assert [(d.device, d.port, d.ts) for d in ends] == [(DEVICES[0], 2, BASE + 15 * S)]


def test_ibqueryerrors_silence_means_nothing() -> None:
    events = [msg("hca", t * S, source="ibqueryerrors") for t in range(3)]
    events += [msg(d, t * S) for t in range(20) for d in DEVICES]
    assert not [d for d in run(events) if d.detection == DetectionKind.STALE]


def test_open_episodes_and_redelivery() -> None:
    det = StaleDetector(Policy())
    state = None
    fired = []
    for e in history(DEVICES[4], stop_s=5, resume_s=None, end_s=15):
        state, out = det.step(state, e)
        fired += out
    assert state is not None
    assert open_episodes(state) == [(DEVICES[4], 0, fired[0].episode)]
    # the engine's once() repeats a redelivered message's detections identically
    from streams.engine import Engine

    eng = Engine(Policy())
    events = history(DEVICES[4], stop_s=5, resume_s=None, end_s=15)
    first = [d for e in events for d in eng.feed(e) if d.detection == DetectionKind.STALE]
    trigger = next(e for e in events if e.ts == first[0].ts)
    again = [d for d in eng.feed(trigger) if d.detection == DetectionKind.STALE]
    assert again == first


@settings(max_examples=60, deadline=None)
@given(gap=st.integers(min_value=0, max_value=12), stop=st.integers(min_value=3, max_value=10))
def test_one_episode_whatever_the_gap(gap: int, stop: int) -> None:
    dets = run(history(DEVICES[3], stop_s=stop, resume_s=stop + gap, end_s=stop + gap + 5))
    stale = [d for d in dets if d.detection == DetectionKind.STALE]
    ends = [d for d in dets if d.detection == DetectionKind.STALE_END]
    # more than three missed reports is stale; three or fewer never (exactly three may be
    # seen or not, depending on where the check falls in the others' interval)
    if gap > 3:
        assert len(stale) == 1
    elif gap < 3:
        assert stale == []
    assert len(stale) <= 1
    assert len(ends) == len(stale)
    assert all(d.device == DEVICES[3] for d in stale)


def test_fabricwatch_replay_shows_it(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    path.write_bytes(b"".join(encode(e) + b"\n" for e in history(DEVICES[2], 10, 20)))
    proc = subprocess.run([sys.executable, "-m", "fabricwatch", "replay", str(path)],
                          capture_output=True, check=True, timeout=120)
    kinds = [decode(line).detection.value for line in proc.stdout.splitlines()]  # type: ignore[union-attr]
    assert kinds == ["stale", "stale_end"]


def lanes_of(events: list[Counters]) -> dict[str, int]:
    return {d: i % 3 for i, d in enumerate(DEVICES)}  # five devices on three partitions


def test_a_partition_behind_holds_the_clock_back() -> None:
    # a worker catching up: lane 0's whole backlog first, then lane 1's, then lane 2's
    det = StaleDetector(Policy())
    lane = lanes_of([])
    events = history("nobody", stop_s=0, resume_s=0, end_s=30)
    state = None
    fired = []
    for which in range(3):
        for e in events:
            if lane[e.device] == which:
                state, out = det.step(state, e, which)
                fired += out
    assert fired == []


def test_an_idle_partition_does_not_hold_the_clock_back() -> None:
    # the silent device is alone on its partition: once the others have carried a few
    # rounds, that lane is idle and the clock is the others' progress
    det = StaleDetector(Policy())
    lane = {d: (2 if d == DEVICES[4] else i % 2) for i, d in enumerate(DEVICES)}
    state = None
    fired = []
    for e in history(DEVICES[4], stop_s=10, resume_s=25, end_s=30):
        state, out = det.step(state, e, lane[e.device])
        fired += out
    assert [(d.detection.value, d.device) for d in fired] == [
        ("stale", DEVICES[4]), ("stale_end", DEVICES[4])]
    assert fired[0].ts - fired[0].evidence["last_report_ts"] <= 3 * S + 2 * S + 4 * S


def test_a_held_partition_holds_the_clock_back_whatever_the_others_carried() -> None:
    # both lanes deliver 10 s together, then a fetch brings lane 1's next 20 s before any
    # of lane 0's: a consumer that knows lane 0 is not idle (records not yet read) holds it
    lane = {d: int(i >= 2) for i, d in enumerate(DEVICES)}  # lane 1 is most of the fabric
    events = history("nobody", stop_s=0, resume_s=0, end_s=30)
    together = [e for e in events if e.ts < BASE + 10 * S]
    one = [e for e in events if e.ts >= BASE + 10 * S and lane[e.device] == 1]
    zero = [e for e in events if e.ts >= BASE + 10 * S and lane[e.device] == 0]

    def fired(held: frozenset[str]) -> list[tuple[str, str]]:
        det, state, out = StaleDetector(Policy()), None, []
        for e in together:
            state, dets = det.step(state, e, lane[e.device])
            out += dets
        for e in one:
            state, dets = det.step(state, e, 1, held=held | {"1"})
            out += dets
        for e in zero:
            state, dets = det.step(state, e, 0, held=held | {"0"})
            out += dets
        return [(d.detection.value, d.device) for d in out]

    assert fired(frozenset({"0"})) == []
    # without what the consumer knows, lane 0 is idle after two rounds of lane 1: its
    # devices go stale, and end with their next reports
    unheld = fired(frozenset())
    assert {d for k, d in unheld if k == "stale"} == {d for d in DEVICES if lane[d] == 0}
    assert sorted(unheld) == sorted(
        [("stale", d) for d in DEVICES if lane[d] == 0]
        + [("stale_end", d) for d in DEVICES if lane[d] == 0])


def test_a_rebooting_switch_in_the_simulator_is_stale_then_back() -> None:
    from sim.faults import parse_spec
    from sim.telemetry import Simulator
    from sim.topology import generate

    sim = Simulator(generate("lab"), faults=[parse_spec(
        "spine_reboot:spine-su01-s1,at=40s,for=60s,bounces=0")], start_ms=BASE,
        probe_every=0, topology_every=0)
    lines = [m.value for _ in range(18) for m in sim.step().messages]
    dets = [d for d in replay(lines, Policy(), on_error=None)
            if d.detection in (DetectionKind.STALE, DetectionKind.STALE_END)]
    assert [(d.detection.value, d.device, d.port) for d in dets] == [
        ("stale", "spine-su01-s1", 0), ("stale_end", "spine-su01-s1", 0)]
    assert dets[0].evidence["expected_interval_s"] == 10.0


def round_robin(events: list[Counters], lane: dict[str, int], batch_s: int
                ) -> list[tuple[Counters, int]]:
    """How a worker gets ``events``: fetches of ``batch_s`` seconds of the fabric, each
    handed out one message per partition in turn (Faust's round robin), not in event time."""
    out: list[tuple[Counters, int]] = []
    start = events[0].ts
    for b in range(0, (events[-1].ts - start) // S + 1, batch_s):
        per: dict[int, list[Counters]] = {}
        for e in events:
            if b * S <= e.ts - start < (b + batch_s) * S:
                per.setdefault(lane[e.device], []).append(e)
        queues = list(per.values())
        for turn in range(max(map(len, queues), default=0)):
            out += [(q[turn], lane[q[turn].device]) for q in queues if turn < len(q)]
    return out


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_a_worker_fed_round_robin_fires_the_episodes_replay_fires(data: st.DataObject) -> None:
    # A catch-up hands a device alone on its partition its report after the silence while
    # the other lanes are still before it: the gap is judged when the clock gets there.
    hosts = data.draw(st.integers(4, 8))
    devices = [f"h{i}/mlx5_0" for i in range(hosts)]
    lane = {d: data.draw(st.integers(0, 3)) for d in devices}
    silent = data.draw(st.sampled_from(devices))
    stop = data.draw(st.integers(5, 15))
    # a silence of 2 s, or of 6 s and more: clear of the 3 s limit by more than the check's
    # step (CHECK_EVERY_MS of the clock) and the hosts' skew, which decide the margin
    resume = stop + data.draw(st.sampled_from([1, *range(5, 21)]))
    events = [msg(d, t * S + i * 7) for t in range(40) for i, d in enumerate(devices)
              if not (d == silent and stop <= t < resume)]
    want = {d.id for d in run(events)}
    det = StaleDetector(Policy())
    state = None
    got = set()
    for e, which in round_robin(events, lane, data.draw(st.sampled_from([1, 3, 10, 40]))):
        state, out = det.step(state, e, which)
        got |= {d.id for d in out}
    assert got == want
    if resume - stop > 3:  # longer than three 1 s intervals: an episode in both
        assert {i.rsplit("/", 1)[-1] for i in want} >= {"end"}


def test_a_gap_the_fabric_shared_is_no_episode_and_teaches_the_interval() -> None:
    # every device silent together, delivered lane by lane: the lone device's gap is
    # pending until the clock reaches its end, then taught like any gap, never fired
    lane = {d: (2 if d == DEVICES[4] else 0) for d in DEVICES}
    events = [msg(d, t * S + DEVICES.index(d) * 7) for t in range(30) for d in DEVICES
              if not 10 <= t < 20]
    det = StaleDetector(Policy())
    state = None
    fired = []
    for e, which in round_robin(events, lane, 30):
        state, out = det.step(state, e, which)
        fired += out
    assert fired == [] and "g" not in state
    assert run(events) == []


@st.composite
def reports(draw: st.DrawFn) -> list[tuple[Counters, int]]:
    """Hosts at 1 s with rounds missed, port sets changing and ports failing to read."""
    hosts = draw(st.integers(2, 5))
    out = []
    for t in range(draw(st.integers(5, 50))):
        for h in range(hosts):
            if draw(st.integers(0, 9)) == 0:
                continue
            ports = draw(st.sampled_from([(1, 2, 3), (1, 2, 3), (1, 2, 3), (1, 2), (2, 3, 4)]))
            failed = {p: "read failed" for p in ports if draw(st.integers(0, 6)) == 0}
            out.append((msg(f"h{h}/mlx5_0", t * S + h * 7, ports=ports, errors=failed), h % 2))
    return out


@settings(max_examples=200, deadline=None)
@given(reports(), st.booleans())
def test_ports_all_good_again_take_the_short_way_with_the_same_results(
        events: list[tuple[Counters, int]], columnar: bool) -> None:
    # The same reports with every other message of a host in reverse port order never
    # match that host's last port list, so every message walks its ports one by one.
    short, walked = StaleDetector(Policy()), StaleDetector(Policy())
    s_state = w_state = None
    seen: dict[str, int] = {}
    for e, lane in events:
        seen[e.device] = seen.get(e.device, 0) + 1
        other = e.model_copy(update={"ports": e.ports[::-1]}) if seen[e.device] % 2 else e
        a, b = (CounterColumns.of(e), CounterColumns.of(other)) if columnar else (e, other)
        s_state, s_out = short.step(s_state, a, lane)
        w_state, w_out = walked.step(w_state, b, lane)
        assert sorted(d.id for d in s_out) == sorted(d.id for d in w_out)
        assert ({d.id: d.to_wire() for d in s_out} == {d.id: d.to_wire() for d in w_out})
    if events:
        assert open_episodes(s_state) == open_episodes(w_state)  # type: ignore[arg-type]


def paused(resume_step_ms: int, never: set[str] = frozenset(), late_s: int = 0
           ) -> list[Counters]:
    """Every device at 1 s, all silent from 10 s to 20 s; they come back one after another,
    ``resume_step_ms`` apart (``late_s`` more for the last), and ``never`` do not."""
    events = []
    for t in range(40):
        for i, d in enumerate(DEVICES):
            back = 20 * S + i * resume_step_ms + (late_s * S if i == len(DEVICES) - 1 else 0)
            ts = t * S + i * 7 if t < 10 else back + (t - 20) * S
            if (t < 10 or t >= 20) and not (t >= 20 and d in never):
                events.append(msg(d, ts))
    return sorted(events, key=lambda e: e.ts)


@pytest.mark.parametrize("batch_s", [0, 1, 40])
def test_a_fabric_that_comes_back_from_a_pause_one_by_one_fires_nothing(batch_s: int) -> None:
    # Back 400 ms apart: the last ones are silent after most others report again, but the
    # others had been silent too; they count once they have reported for longer than the
    # last ones' limit since their own silence (replay, and a worker fed round robin).
    events = paused(400)
    assert [d for d in run(events) if d.detection == DetectionKind.STALE] == []
    if batch_s:
        lane = {d: i % 3 for i, d in enumerate(DEVICES)}
        det = StaleDetector(Policy())
        state = None
        fired = []
        for e, which in round_robin(events, lane, batch_s):
            state, out = det.step(state, e, which)
            fired += out
        assert fired == []


def test_after_a_pause_a_device_that_stays_silent_is_stale() -> None:
    # ...and one that does not come back is stale once the others have reported for more
    # than its limit since the pause, with its episode from its last report before it
    dets = [d for d in run(paused(100, never={DEVICES[3]}))
            if d.detection == DetectionKind.STALE]
    assert [(d.device, d.evidence["last_report_ts"]) for d in dets] == [
        (DEVICES[3], BASE + 9 * S + 21)]
    assert 3 * S < dets[0].ts - (BASE + 20 * S) <= 3 * S + 2 * S


def test_after_a_pause_a_device_back_later_than_its_limit_is_stale_and_ends() -> None:
    dets = [(d.detection.value, d.device) for d in run(paused(100, late_s=5))
            if d.detection in (DetectionKind.STALE, DetectionKind.STALE_END)]
    assert dets == [("stale", DEVICES[4]), ("stale_end", DEVICES[4])]


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_a_pause_the_fabric_shared_fires_nothing_in_replay_or_a_worker(data: st.DataObject
                                                                       ) -> None:
    # every host silent together for 5-20 s, back in any order within 2 s of each other
    hosts = data.draw(st.integers(3, 8))
    devices = [f"h{i}/mlx5_0" for i in range(hosts)]
    lane = {d: data.draw(st.integers(0, 3)) for d in devices}
    stop = data.draw(st.integers(5, 15))
    resume = stop + data.draw(st.integers(5, 20))
    back = {d: data.draw(st.integers(0, 2000)) for d in devices}
    events = sorted((msg(d, t * S + (back[d] if t >= resume else i * 7))
                     for t in range(40) for i, d in enumerate(devices)
                     if not stop <= t < resume), key=lambda e: e.ts)
    assert [d for d in run(events) if d.detection == DetectionKind.STALE] == []
    det = StaleDetector(Policy())
    state = None
    for e, which in round_robin(events, lane, data.draw(st.sampled_from([1, 3, 10, 40]))):
        state, out = det.step(state, e, which)
        assert out == [], (e.device, e.ts)


def test_a_slice_of_an_older_layout_is_not_restored_and_a_current_one_is() -> None:
    import orjson

    from streams.common import state_key
    from streams.stale.agent import StaleObserver

    old = {"s": {"clock": 5, "checked": 5, "fabric": "lab", "n": 1, "w": {}, "s": {}},
           "r": [], "p": 5}  # a whole scope's box, as an earlier version stored it
    current = {"w": 9, "s": {"gnmi\x1fleaf1": [9, 10000.0, None, {}]}}
    table = {state_key("lab", "p0").encode(): orjson.dumps(old),
             state_key("lab", "p1").encode(): orjson.dumps(current)}
    observer = StaleObserver(None, table)  # type: ignore[arg-type]  # load reads the table only
    observer.load("lab", 0)
    assert observer.scopes == {}  # skipped, not read as streams named clock, checked, ...
    observer.load("lab", 1)
    assert observer.scopes["lab"]["s"]["s"] == current["s"]
    assert observer.partition_of["lab"] == {"gnmi\x1fleaf1": 1}


@pytest.mark.parametrize("table", ["faust", "batched_flushed", "batched_pending"])
@pytest.mark.parametrize("order", ["others_first", "silent_first_held"])
def test_a_rebalance_during_a_silence_still_ends_the_episode(order: str, table: str) -> None:
    # the silent device is alone on partition 0: its episode opens with a message of
    # partition 1, whose slice must carry it; after the observer's memory is dropped (a
    # rebalance), its return ends that very episode rather than opening another. Under
    # the batched consumer the slices are encoded when its store sends them: flushed
    # before the rebalance (as it does), or still pending (read back from the encoders,
    # which the reset must leave their objects)
    import asyncio
    from types import SimpleNamespace

    from streams.counters.batched import ChangelogStore
    from streams.engine import Engine
    from streams.stale.agent import StaleObserver

    published: list = []  # type: ignore[type-arg]

    async def publish(dets: list, pending: object = None) -> None:  # type: ignore[type-arg]
        published.extend(dets)

    sa = SimpleNamespace(engine=Engine(Policy()), publish=publish)
    store = ChangelogStore("stale")
    now = [0]  # the wall clock: these messages come in real time
    observer = StaleObserver(sa, {} if table == "faust" else store,  # type: ignore[arg-type]
                             wall_ms=lambda: now[0])
    silent, rest = DEVICES[0], DEVICES[1:]

    def feed(device: str, t: int) -> None:
        now[0] = max(now[0], t)
        asyncio.run(observer.observe(msg(device, t), 0 if device == silent else 1))

    for t in range(30):
        for d in ([silent] if t < 10 else []) + rest:
            feed(d, t * S)
    opened = [d for d in published if d.detection == DetectionKind.STALE]
    assert [d.device for d in opened] == [silent]
    if table == "batched_flushed":
        assert {k for k, _, _ in store.take_changed()} == {b"lab/p0", b"lab/p1"}
    observer.reset()  # the rebalance: memory dropped, slices loaded again
    if order == "silent_first_held":
        observer.held = frozenset({"0", "1"})  # the batched consumer's eager load
        feed(silent, 31 * S)
        for d in rest:
            feed(d, 31 * S)
    else:
        for d in rest:
            feed(d, 30 * S)
        feed(silent, 31 * S)
    for t in range(32, 40):
        for d in DEVICES:
            feed(d, t * S)
    ends = [d for d in published if d.detection == DetectionKind.STALE_END]
    again = [d for d in published if d.detection == DetectionKind.STALE]
    assert [(e.device, e.episode) for e in ends] == [(silent, opened[0].episode)]
    assert {d.id for d in again} == {opened[0].id}  # no second episode for that silence


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_a_check_that_skips_the_walk_before_the_earliest_deadline_fires_the_same(
        data: st.DataObject) -> None:
    # The earliest deadline ("due") spares a check its walk over every stream; a detector
    # that forgets it before every message walks them all at every check. Silences of
    # several devices, some shared, some ahead of the clock (lanes in round robin), ports
    # failing to read, and intervals of 1 s and 3 s: the same detections, the same states.
    hosts = data.draw(st.integers(3, 8))
    devices = [f"h{i}/mlx5_0" for i in range(hosts)]
    lane = {d: data.draw(st.integers(0, 3)) for d in devices}
    every = {d: data.draw(st.sampled_from([1, 1, 3])) for d in devices}
    silences = {d: (a, a + data.draw(st.integers(1, 15)))
                for d in devices if data.draw(st.booleans())
                for a in [data.draw(st.integers(2, 30))]}
    events = [msg(d, t * S + i * 7, errors={1: "gone"} if (t + i) % 17 == 0 else None)
              for t in range(45) for i, d in enumerate(devices)
              if t % every[d] == 0 and not (d in silences and
                                            silences[d][0] <= t < silences[d][1])]
    skips, walks = StaleDetector(Policy()), StaleDetector(Policy())
    s_state = w_state = None
    for e, which in round_robin(events, lane, data.draw(st.sampled_from([1, 3, 10]))):
        s_state, s_out = skips.step(s_state, e, which)
        if w_state is not None:
            w_state.pop("due", None)
        w_state, w_out = walks.step(w_state, e, which)
        assert [d.to_wire() for d in s_out] == [d.to_wire() for d in w_out]
    assert s_state is not None and w_state is not None
    s_state.pop("due", None)
    w_state.pop("due", None)
    assert s_state == w_state


def _outage_then_flush(flush_gap_ms: int | None, *, live: bool
                       ) -> list[tuple[str, str]]:
    """Four devices on lane 0 and one on lane 1 report every second for 30 s; the broker is
    then away for 60 s, and the collectors flush what they kept: lane 0's minute in half a
    second of wall time, lane 1's ``flush_gap_ms`` later (None: never; its device is
    down), after which everything reports in real time again for 20 s. The detections,
    as (kind, device)."""
    detector = StaleDetector(Policy())
    state = None
    out: list[tuple[str, str]] = []
    wall = 0
    silent, rest = DEVICES[0], DEVICES[1:]

    def feed(device: str, t: int) -> None:
        nonlocal state
        state, dets = detector.step(state, msg(device, t), 1 if device == silent else 0,
                                    wall_ms=wall if live else None)
        out.extend((str(d.detection), d.device) for d in dets)

    for t in range(30):
        wall = t * S
        for d in DEVICES:
            feed(d, t * S)
    flushed = 90 * S  # wall: the broker is back
    for k, t in enumerate(range(30, 90)):
        wall = flushed + k * 8
        for d in rest:
            feed(d, t * S)
    for t in range(90, 110):
        wall = flushed + (t - 90) * S
        if flush_gap_ms is not None and t == 90:
            wall = flushed + flush_gap_ms
            for k in range(30, 90):
                feed(silent, k * S)
        for d in DEVICES if flush_gap_ms is not None else rest:
            feed(d, t * S)
    return out


def test_a_lane_flushed_seconds_after_another_is_not_a_silence() -> None:
    # counts alone (replay's semantics, a single lane there): the lane flushed second looked
    # idle while the first flushed, its device stale for two seconds, then back
    assert _outage_then_flush(2 * S, live=False) == [("stale", DEVICES[0]),
                                                     ("stale_end", DEVICES[0])]
    # a live worker holds the lane for IDLE_WALL_MS of wall time first
    assert _outage_then_flush(2 * S, live=True) == []
    # a lane that stays quiet is a silence once that wall time has passed
    assert _outage_then_flush(None, live=True) == [("stale", DEVICES[0])]
