"""A host agent's message through the worker's counters path, rows against columns, no Kafka.

    .venv/bin/python benchmarks/host_path.py [--hosts 1000] [--intervals 6] [--repeat 5]

The messages are ``host_messages_bench.py``'s (one ``HostAgent.round()`` of an 8-HCA tree
from the real sysfs fixture, re-stamped per host and second), as rows (``counters``) and as
``counter_columns`` (``FABRICWATCH_KAFKA__COLUMNAR_COUNTERS``). Each form goes through
``schemas.decode`` and the worker's own ``CountersPath`` and ``StaleObserver`` over in-memory
stores (``counters_intervals.py``'s harness), the two forms in turns ``--repeat`` times; CPU
microseconds per message, median and range, and their ratio. Beside them, per message:
decode, a split into the HCAs' parts, and (columns) ``rows()``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import timeit
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import host_messages_bench as hb  # noqa: E402
from benchmarks._machine import save_and_print  # noqa: E402
from benchmarks.counters_intervals import CountersHarness  # noqa: E402
from schemas import CounterColumns, Counters, decode  # noqa: E402
from streams.counters.agent import CountersPath  # noqa: E402
from streams.stale.agent import StaleObserver  # noqa: E402


def messages(tpl: dict[str, Any], hosts: int, intervals: int, columnar: bool) -> list[bytes]:
    hb.COLUMNAR = columnar
    base = int(time.time() * 1000) - 3600_000
    return [hb.host_message(tpl, f"node{h:05d}", i, base + i * 1000 + h % 997)
            for i in range(intervals) for h in range(hosts)]


def path_us(raws: list[bytes]) -> float:
    worker = CountersHarness()
    path = CountersPath(worker, {})  # type: ignore[arg-type]  # the parts it uses
    observer = StaleObserver(worker, {})  # type: ignore[arg-type]
    worker.counters_observers.append(observer.observe)

    async def go() -> None:
        for n, raw in enumerate(raws):
            msg = decode(raw)
            assert isinstance(msg, Counters | CounterColumns)  # noqa: S101
            await path.process(msg, n % 12, [])

    t0 = time.process_time()
    asyncio.run(go())
    return (time.process_time() - t0) / len(raws) * 1e6


def per_call_us(fn: Any, n: int = 2000) -> float:
    return round(min(timeit.repeat(fn, number=n, repeat=3)) / n * 1e6, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--intervals", type=int, default=6)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fw-host-path-") as tmp:
        tpl = asyncio.run(hb.template(Path(tmp) / "sys"))
    forms = {"rows": messages(tpl, args.hosts, args.intervals, False),
             "columns": messages(tpl, args.hosts, args.intervals, True)}
    runs: dict[str, list[float]] = {form: [] for form in forms}
    for _ in range(args.repeat):
        for form, raws in forms.items():
            runs[form].append(path_us(raws))
    out: dict[str, Any] = {"hosts": args.hosts, "intervals": args.intervals,
                           "ports_per_message": len(tpl["ports"]), "repeat": args.repeat}
    for form, raws in forms.items():
        msg = decode(raws[5])
        parts = msg.rows().split() if isinstance(msg, CounterColumns) else msg.split()
        out[form] = {
            "message_bytes": len(raws[5]),
            "decode_and_path_cpu_us": {"median": round(statistics.median(runs[form]), 1),
                                       "min": round(min(runs[form]), 1),
                                       "max": round(max(runs[form]), 1)},
            "decode_us": per_call_us(lambda raw=raws[5]: decode(raw)),
            "split_us": per_call_us(msg.split),
            "parts": len(parts),
        }
        if isinstance(msg, CounterColumns):
            out[form]["rows_us"] = per_call_us(msg.rows)
    out["ratio_columns_to_rows"] = round(out["columns"]["decode_and_path_cpu_us"]["median"]
                                         / out["rows"]["decode_and_path_cpu_us"]["median"], 3)
    out["load_average_1m_at_end"] = round(os.getloadavg()[0], 2)
    save_and_print("host_path", out)


if __name__ == "__main__":
    main()
