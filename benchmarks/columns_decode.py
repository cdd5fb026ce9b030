"""Where a ``counter_columns`` message's decode time goes, 8 and 64 ports, without Kafka.

    .venv/bin/python benchmarks/columns_decode.py [--repeat 3]

Per message, best of ``--repeat`` runs of CPU time: ``orjson.loads``, the whole
``CounterColumns.model_validate`` (pydantic-core in Rust plus the model's Python validators),
those Python validators alone on an already validated message (``_shape``, with its
``column_map``, and ``check_device``), and ``schemas.decode`` + the worker's counters path and
stale observer in one process (``benchmarks/counters_intervals.py``'s harness) over 13
intervals of 2,000 devices. The question it answers: how much a validator written by hand
could save at most (the Rust part stays in any case), against the rest of the path.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import streams_bench as sb  # noqa: E402
from benchmarks._machine import save_and_print  # noqa: E402
from benchmarks.counters_intervals import CountersHarness  # noqa: E402
from schemas import decode  # noqa: E402
from schemas.events import CounterColumns, check_device  # noqa: E402
from streams.counters.agent import CountersPath  # noqa: E402
from streams.stale.agent import StaleObserver  # noqa: E402


def per_call_us(fn: Callable[[], Any], n: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        for _ in range(n):
            fn()
        best = min(best, time.process_time() - t0)
    return round(best / n * 1e6, 2)


async def path_us(ports: int, devices: int, intervals: int) -> float:
    sb.PORTS_PER_DEVICE = ports
    names = [f"gpu{d:05d}" for d in range(devices)]
    base = int(time.time() * 1000) - 3 * 3600_000
    raws = [[sb.counters_batch(dev, i, base + i * 10_000, errs=d % 100 == 0)
             for d, dev in enumerate(names)] for i in range(intervals)]
    worker = CountersHarness()
    path = CountersPath(worker, {})  # type: ignore[arg-type]  # the parts it uses
    observer = StaleObserver(worker, {})  # type: ignore[arg-type]
    worker.counters_observers.append(observer.observe)
    t0 = time.process_time()
    for batch in raws:
        for n, raw in enumerate(batch):
            msg = decode(raw)
            assert isinstance(msg, CounterColumns)  # noqa: S101
            await path.process(msg, n % 12, [])
    return round((time.process_time() - t0) / (devices * intervals) * 1e6, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    sb.COLUMNAR = True
    out: dict[str, Any] = {"per_message_cpu_us": {}}
    for ports in (8, 64):
        sb.PORTS_PER_DEVICE = ports
        raw = sb.counters_batch("leaf-su00-r1", 3, int(time.time() * 1000) - 1000, True)
        obj = orjson.loads(raw)
        msg = CounterColumns.model_validate(obj)
        n = 20_000 if ports == 8 else 5_000
        figures = {
            "orjson_loads": per_call_us(partial(orjson.loads, raw), n, args.repeat),
            "model_validate": per_call_us(partial(CounterColumns.model_validate, obj), n,
                                          args.repeat),
            "python_validators": round(
                per_call_us(msg._shape, n, args.repeat)
                + per_call_us(lambda: check_device("leaf-su00-r1"), n, args.repeat), 2),
            "decode_and_path": asyncio.run(path_us(ports, 2000 if ports == 8 else 300, 13)),
        }
        figures["python_validators_share_of_validate"] = round(
            figures["python_validators"] / figures["model_validate"], 2)
        figures["validate_share_of_decode_and_path"] = round(
            figures["model_validate"] / figures["decode_and_path"], 2)
        out["per_message_cpu_us"][f"{ports}_ports"] = figures
    save_and_print("columns_decode", out)


if __name__ == "__main__":
    main()
