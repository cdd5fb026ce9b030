"""ECN vs PFC per switch and priority, replayed through ``streams.replay``.

Samples carry ``pfc<N>_tx`` (SONiC ``show pfc counters``) and ``ecn_marked_q<N>`` (``show
queue wredcounters``): priority N's pauses are judged against queue N's marks alone.
Policy defaults: ``minPauseFramesPerS`` 1000, ``minEcnToPauseRatio`` 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from schemas import Counters, Detection, PortSample, encode
from schemas.policy import Policy
from streams.replay import replay

S = 1000
BASE = 1_700_002_800_000
DEV = "leaf-su01-r1"
SAMPLES = Path(__file__).resolve().parents[1] / "collectors" / "samples"


def prio_sample(port: int, tx: dict[int, int], marks: dict[int, int]) -> PortSample:
    """A SONiC port: per-priority pauses and per-queue marks with their sums."""
    values: dict[str, Any] = {f"pfc{p}_tx": v for p, v in tx.items()}
    values.update({f"ecn_marked_q{q}": v for q, v in marks.items()})
    return PortSample(port=port, pfc_pause_tx=sum(tx.values()),
                      ecn_marked=sum(marks.values()), **values)


def line(t: int, *ports: PortSample) -> bytes:
    return encode(Counters(id=f"c-{t}", ts=BASE + t, fabric="lab", source="sonic",
                           device=DEV, ports=list(ports)))


def run(lines: list[bytes]) -> list[Detection]:
    return list(replay(lines, Policy(), on_error=None))


def history(steps: int, *, p3_marks_per_s: int, p4_marks_per_s: int = 5000) -> list[bytes]:
    """Two ports, 10 s apart: priority 3 pauses 2000/s and priority 4 1000/s, per port."""
    out = []
    for i in range(steps + 1):
        t = i * 10
        out.append(line(t * S, *(prio_sample(
            port, {3: 2000 * t, 4: 1000 * t},
            {3: p3_marks_per_s * t, 4: p4_marks_per_s * t}) for port in (1, 2))))
    return out


def test_a_priority_whose_queue_does_not_mark_fires_naming_it() -> None:
    dets = run(history(3, p3_marks_per_s=0))
    assert [(d.detection.value, d.port, d.ts - BASE) for d in dets] == [
        ("ecn_pfc_misconfig", 1, 10 * S)]
    ev = dets[0].evidence
    assert ev["basis"] == "priority" and ev["priority"] == 3 and ev["queue"] == 3
    assert ev["pause_tx_per_s"] == 4000.0 and ev["ecn_marked_per_s"] == 0.0
    # the device's sums (6000 pauses/s against 10000 marks/s) would have passed it
    assert ev["ports"] == 2


def test_a_priority_with_marks_does_not_fire() -> None:
    # queue 3 marks as many as priority 3 pauses, queue 4 more: nothing
    assert run(history(3, p3_marks_per_s=2000)) == []
    # one mark a second fewer on queue 3 and priority 3 alone fires
    assert [d.evidence["priority"] for d in run(history(3, p3_marks_per_s=1999))] == [3]


def test_two_misconfigured_priorities_are_two_episodes() -> None:
    dets = run(history(3, p3_marks_per_s=0, p4_marks_per_s=0))
    assert sorted(d.evidence["priority"] for d in dets) == [3, 4]
    assert len({d.episode for d in dets}) == 2


def test_the_priority_episode_ends_when_its_marks_keep_up_and_rearms() -> None:
    lines, marks = [], 0
    for i in range(6):
        t = i * 10
        if 2 <= i <= 3:
            marks += 2000 * 10  # queue 3 marks as much as it pauses for a while
        lines.append(line(t * S, prio_sample(1, {3: 2000 * t, 4: 1000 * t},
                                             {3: marks, 4: 5000 * t})))
    dets = run(lines)
    assert [(d.evidence["priority"], d.ts - BASE) for d in dets] == [(3, 10 * S), (3, 40 * S)]
    assert dets[0].episode != dets[1].episode


def test_without_per_queue_marks_the_device_rule_judges() -> None:
    lines = [line(t * S, PortSample(port=1, pfc_pause_tx=3000 * t, ecn_marked=10 * t,
                                    pfc3_tx=3000 * t)) for t in (0, 10, 20)]
    dets = run(lines)
    assert len(dets) == 1
    assert dets[0].evidence["basis"] == "device" and "priority" not in dets[0].evidence


def test_replay_is_exact() -> None:
    lines = history(5, p3_marks_per_s=0)
    first, second = run(lines), run(lines)
    assert [d.model_dump() for d in first] == [d.model_dump() for d in second]


def test_parsed_sonic_output_fires_on_the_priority_that_does_not_mark() -> None:
    from collectors.telemetry import parse_sonic_show

    text = (SAMPLES / "sonic-roce-leaf-pfc-tx-and-wredcounters.txt").read_text()
    # the same counters 10 s later with priority 3 pausing on and queue 4 marking on
    later = (text.replace("48,210", "98,210").replace("51,004", "101,004")
             .replace("9,120", "19,120").replace("8,315", "18,315")
             .replace("9,877", "19,877"))
    lines = [encode(e) for t, body in ((0, text), (10 * S, later))
             for e in parse_sonic_show(body, fabric="lab", ts=BASE + t, device=DEV)]
    dets = run(lines)
    assert [(d.evidence["priority"], d.port) for d in dets] == [(3, 0)]
    assert dets[0].evidence["pause_tx_per_s"] == 10_000.0


def test_the_state_survives_its_stored_form() -> None:
    # the worker stores the device state as JSON between messages: the priority holders
    # and per-queue readings must come back as they went
    import orjson

    from streams.counters.logic import CountersDetector, DeviceState

    det = CountersDetector(Policy())
    state: DeviceState | None = None
    fired = []
    for raw in history(4, p3_marks_per_s=0):
        if state is not None:
            state = orjson.loads(orjson.dumps(state))
        event = Counters.model_validate_json(raw)
        state, dets, _ = det.step(state, event)
        fired += dets
    assert [d.model_dump() for d in fired] == [d.model_dump() for d in
                                              run(history(4, p3_marks_per_s=0))]
    assert state is not None and state["ecnq"] == {"3": "1"}


def test_one_ports_storm_on_a_priority_is_its_storm_not_the_queues_ecn() -> None:
    """Priority 3's pauses are port 1's storm (80,000/s, nearly all of them): a pause storm
    of port 1 on priority 3, no ECN verdict on queue 3; priority 4 is judged as ever."""
    out = []
    for i in range(3):
        t = i * 10
        stuck = prio_sample(1, {3: 80_000 * t, 4: 1000 * t}, {3: 0, 4: 0}).model_copy(
            update={"port_rcv_data": 7})  # nothing comes in: the peer's queue is stuck
        out.append(line(t * S, stuck,
                        prio_sample(2, {3: 100 * t, 4: 1000 * t}, {3: 0, 4: 5000 * t})))
    dets = run(out)
    assert [(d.detection.value, d.port, d.ts - BASE) for d in dets] == [
        ("pause_storm", 1, 20 * S)]  # (received data first compared at 20 s)
    assert dets[0].evidence["priority"] == 3 and dets[0].evidence["rule"] == "pause_tx"


def test_a_poll_that_misses_the_holding_port_does_not_end_its_priority_episode() -> None:
    """Port 1 reports per priority (queue 3 marks nothing), port 2 sums only; port 1's
    read is missing from every other poll. A message without it is no change of basis:
    one episode, not one per return."""
    out = []
    for i in range(8):
        t = i * 10
        ports = [prio_sample(1, {3: 3000 * t}, {3: 0})] if i % 2 == 0 or i < 2 else []
        ports.append(PortSample(port=2, pfc_pause_tx=10 * t, ecn_marked=100 * t))
        out.append(line(t * S, *ports))
    dets = run(out)
    assert [(d.detection.value, d.port, d.evidence["basis"]) for d in dets] == [
        ("ecn_pfc_misconfig", 1, "priority")]
