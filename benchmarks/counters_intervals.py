"""Where the counters path's per-message cost goes, interval by interval, without Kafka.

The stream worker's figures (``faust_floor.py --batched``, ``streams_bench.py``) are a mean
over a run of a few polling intervals. This script replays the same 64-port messages
(``streams_bench.counters_batch``) through the worker's own ``CountersPath`` and
``StaleObserver`` in one process, over in-memory stores, and reports the CPU time per
message of each interval apart, beside the decode (``schemas.decode``) of the same bytes:
the first interval builds every device's state and column view, the interval where the
detector's windows (BER, credit wait) close judges every port, the others are the steady
state. Kafka's own costs (fetch, changelog and output produce, commit) are not in it; the
worker's run minus this one is where they are.

    .venv/bin/python benchmarks/counters_intervals.py --ports 20000 --intervals 13 --columnar
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import streams_bench as sb  # noqa: E402
from benchmarks._machine import save_and_print  # noqa: E402
from schemas import CounterColumns, Counters, decode  # noqa: E402
from schemas.policy import Policy  # noqa: E402
from streams.counters.agent import CountersPath  # noqa: E402
from streams.engine import Engine  # noqa: E402
from streams.stale.agent import StaleObserver  # noqa: E402


class SentSink:
    """Stands for the worker's producer: keeps the values the path would send."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    async def send(self, *, value: bytes, **_: Any) -> None:
        self.sent.append(value)


class CountersHarness:
    """The parts of ``StreamsApp`` the counters path and the stale observer use (also the
    unit tests' stand-in: ``tests/unit/streams/test_counters_path_host.py``)."""

    def __init__(self) -> None:
        from runtime.settings import Settings

        self.engine = Engine(Policy())
        self.settings = Settings()
        self.stats: defaultdict[str, float] = defaultdict(float)
        self.counters_observers: list[Any] = []
        self.counter_downs = SentSink()
        self.published: list[Any] = []

    async def publish(self, detections: list[Any], pending: Any = None) -> None:
        self.published += detections


async def run(args: argparse.Namespace) -> dict[str, Any]:
    sb.COLUMNAR = args.columnar
    devices = sb.devices_for(args.ports)
    base = int(time.time() * 1000) - 3 * 3600_000
    raws = [[sb.counters_batch(dev, i, base + i * 10_000, errs=d % 100 == 0)
             for d, dev in enumerate(devices)] for i in range(args.intervals)]
    worker = CountersHarness()
    path = CountersPath(worker, {})  # type: ignore[arg-type]  # the parts it uses
    if not args.no_stale:
        observer = StaleObserver(worker, {})  # type: ignore[arg-type]
        worker.counters_observers.append(observer.observe)
    partitions = 12
    decode_us: list[float] = []
    path_us: list[float] = []
    for batch in raws:
        t0 = time.process_time()
        msgs = [decode(raw) for raw in batch]
        t1 = time.process_time()
        for n, msg in enumerate(msgs):
            assert isinstance(msg, Counters | CounterColumns)
            await path.process(msg, n % partitions, [])
        t2 = time.process_time()
        decode_us.append((t1 - t0) / len(batch) * 1e6)
        path_us.append((t2 - t1) / len(batch) * 1e6)
    steady = sorted(path_us[1:])[: max(1, len(path_us) // 2)]  # the quiet half, first left out
    return {
        "ports": len(devices) * sb.PORTS_PER_DEVICE, "devices": len(devices),
        "intervals": args.intervals, "interval_s": 10, "ports_per_message": sb.PORTS_PER_DEVICE,
        "message_form": "counter_columns" if args.columnar else "counters",
        "stale_observer": not args.no_stale,
        "decode_cpu_us_per_message": round(statistics.mean(decode_us), 1),
        "path_cpu_us_per_message": {
            "by_interval": [round(x, 1) for x in path_us],
            "mean": round(statistics.mean(path_us), 1),
            "first_interval": round(path_us[0], 1),
            "steady_median": round(statistics.median(steady), 1),
            "max_after_first": round(max(path_us[1:], default=0.0), 1),
        },
        "ratio_path_mean_to_decode": round(statistics.mean(path_us) / statistics.mean(decode_us),
                                           2),
        "ratio_path_steady_to_decode": round(statistics.median(steady)
                                             / statistics.mean(decode_us), 2),
        "states_persisted": int(worker.stats["persisted"]),
        "counter_downs": len(worker.counter_downs.sent), "detections": len(worker.published),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ports", type=int, default=20_000)
    parser.add_argument("--intervals", type=int, default=13)
    parser.add_argument("--columnar", action="store_true",
                        help="counter_columns messages (else row-form counters)")
    parser.add_argument("--no-stale", action="store_true", help="the counters path alone")
    parser.add_argument("--scenario", default=None)
    args = parser.parse_args()
    scenario = args.scenario or ("counters_intervals_columnar" if args.columnar
                                 else "counters_intervals")
    save_and_print(scenario, asyncio.run(run(args)))


if __name__ == "__main__":
    main()
