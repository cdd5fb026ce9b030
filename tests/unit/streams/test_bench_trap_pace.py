"""The streams benchmark's latency traps are independent flaps to the detectors: paced at
``max_trap_rate`` every port flaps; faster, the subnet manager's downs on many devices are one
SM event to the correlator, which excuses them (the benchmark once saw no flap for that)."""

from __future__ import annotations

import time

from benchmarks.streams_bench import max_trap_rate, port_event
from schemas import Incident, decode
from schemas.policy import Policy
from streams.engine import Engine

NOW = int(time.time() * 1000)  # decode refuses a ts more than a day ahead


def flaps_and_incidents(rate: float, n: int) -> tuple[int, int]:
    """The benchmark's sequence (two downs per port in event time, then the third downs at
    ``rate``) through the engine, as the worker orders it; flap detections and incidents."""
    gap = round(1000 / rate)
    first = NOW - 60_000 - 2 * n * gap
    names = [f"bench-t-{i}/mlx5_0" for i in range(n)]
    lines = [port_event(d, k, first + (2 * i + k) * gap) for i, d in enumerate(names)
             for k in range(2)]
    lines += [port_event(d, 2, NOW + 3000 + i * gap) for i, d in enumerate(names)]
    engine = Engine(Policy())
    flaps = incidents = 0
    for line in lines:
        for out in engine.feed_all(decode(line)):
            if isinstance(out, Incident):
                incidents += 1
            elif out.detection.value == "flap":
                flaps += 1
    return flaps, incidents


def test_at_the_benchmarks_pace_every_port_flaps() -> None:
    assert max_trap_rate() == (Policy().fabric_health.incidents.sm_min_links - 2) / 5.0
    assert flaps_and_incidents(max_trap_rate(), 120) == (120, 0)


def test_faster_it_is_one_sm_event_and_the_ports_do_not_flap() -> None:
    flaps, incidents = flaps_and_incidents(20.0, 120)  # the pace the benchmark used
    assert incidents >= 1
    assert flaps < 120 // 4
