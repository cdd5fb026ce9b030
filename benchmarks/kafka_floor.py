"""Benchmark: the broker's own consume rate (kafka-consumer-perf-test) against Python and the worker.

Run: .venv/bin/python benchmarks/kafka_floor.py [--ports 100000] [--intervals 10]
     [--no-worker] [--bootstrap HOST:PORT]

Scenario 1's floors, in one run on one broker: the same 100k-port counters messages the
streams benchmark produces (``benchmarks/streams_bench.py``: 64-port device batches, lz4,
``--intervals`` rounds) are consumed from the start by

1. the broker's own Java consumer, ``org.apache.kafka.tools.ConsumerPerformance`` (the class
   behind ``kafka-consumer-perf-test.sh``, from ``kafka-tools`` in deploy/kafka/libs): fetch
   and decompress only, no parsing - the ceiling any consumer on this box can reach;
2. a bare aiokafka consumer that runs ``schemas.decode`` on every message (the Python floor);
3. ``fabricwatch worker`` (Faust, detectors, RocksDB tables, ledger sink), timed from
   "Worker ready" to its committed offsets reaching the end (skip with ``--no-worker``).

Writes benchmarks/results/kafka_floor.json with msgs/s, MB/s (uncompressed value bytes, as
ConsumerPerformance counts them) and port-samples/s of each, and the ratios between them.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import streams_bench as sb  # noqa: E402
from benchmarks._machine import write_result  # noqa: E402

LIBS = Path(__file__).resolve().parent.parent / "deploy" / "kafka" / "libs"
PERF_CLASS = "org.apache.kafka.tools.ConsumerPerformance"


def java_consumer(bootstrap: str, topic: str, messages: int, timeout_s: int = 300
                  ) -> dict[str, Any]:
    """Run ConsumerPerformance once; parse its CSV line (MB are 2**20 bytes of values)."""
    java = shutil.which("java")
    if java is None or not any(LIBS.glob("kafka-tools-*.jar")):
        raise SystemExit(f"need java and kafka-tools in {LIBS} (mvn -f deploy/kafka/pom.xml "
                         "package)")
    args = [java, "-Xms256m", "-Xmx512m", "-cp", f"{LIBS}/*", PERF_CLASS,
            "--bootstrap-server", bootstrap, "--topic", topic, "--messages", str(messages),
            "--group", f"perf-{uuid.uuid4().hex[:8]}", "--timeout", str(timeout_s * 1000),
            "--fetch-size", str(8 << 20)]
    t = time.perf_counter()
    out = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s + 60,  # noqa: S603 - fixed argv
                         check=False)
    wall = time.perf_counter() - t
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-3000:])
    lines = [ln for ln in out.stdout.splitlines() if ln.strip()]
    header_at = next(i for i, ln in enumerate(lines) if ln.startswith("start.time"))
    rows = list(csv.reader(io.StringIO("\n".join(lines[header_at:header_at + 2]))))
    row = {k.strip(): v.strip() for k, v in zip(rows[0], rows[1], strict=False)}
    return {
        "messages": int(row["data.consumed.in.nMsg"]),
        "mb": float(row["data.consumed.in.MB"]),
        "msgs_per_s": float(row["fetch.nMsg.sec"]),
        "mb_per_s": float(row["fetch.MB.sec"]),
        "msgs_per_s_incl_join": float(row["nMsg.sec"]),
        "fetch_time_ms": int(row["fetch.time.ms"]),
        "rebalance_time_ms": int(row["rebalance.time.ms"]),
        "jvm_wall_s": round(wall, 2),
        "raw": row,
    }


async def run(args: argparse.Namespace, state: Path, bootstrap: str) -> dict[str, Any]:
    devices = sb.devices_for(args.ports)
    base = int(time.time() * 1000) - 3 * 3600_000
    messages = await sb.produce_counters(bootstrap, devices, args.intervals, base)
    tps, end_total = await sb.end_offsets(bootstrap, "fabric.counters")
    samples_per_msg = sb.PORTS_PER_DEVICE
    value_bytes = len(sb.counters_batch(devices[0], 1, base, False))
    java = await asyncio.to_thread(java_consumer, bootstrap, "fabric.counters", end_total)
    bare_s, samples = await sb.bare_throughput(bootstrap, end_total)
    out: dict[str, Any] = {
        "ports": len(devices) * samples_per_msg, "intervals": args.intervals,
        "messages": messages, "port_samples": samples, "value_bytes_per_message": value_bytes,
        "broker_consumer": {k: v for k, v in java.items() if k != "raw"},
        "broker_port_samples_per_s": round(java["msgs_per_s"] * samples_per_msg),
        "bare_msgs_per_s": round(end_total / bare_s),
        "bare_mb_per_s": round(end_total * value_bytes / 2**20 / bare_s, 1),
        "bare_port_samples_per_s": round(samples / bare_s),
        "ratio_bare_to_broker": round((end_total / bare_s) / java["msgs_per_s"], 3),
    }
    if not args.no_worker:
        app_id = f"floor-{uuid.uuid4().hex[:8]}"
        worker = sb.WorkerProc(bootstrap, state, app_id, ledger=True)
        try:
            ready = await asyncio.to_thread(worker.wait_ready)
            while await sb.committed_total(bootstrap, app_id, tps) < end_total:
                if worker.proc.poll() is not None:
                    raise RuntimeError(worker.log.read_bytes()[-3000:].decode(errors="replace"))
                await asyncio.sleep(0.2)
            worker_s = time.perf_counter() - ready
        finally:
            worker.stop()
        out.update({
            "worker_msgs_per_s": round(end_total / worker_s),
            "worker_mb_per_s": round(end_total * value_bytes / 2**20 / worker_s, 1),
            "port_samples_per_s": round(samples / worker_s),
            "ratio_to_floor": round((samples / worker_s) / (samples / bare_s), 3),
            "ratio_to_broker": round((end_total / worker_s) / java["msgs_per_s"], 4),
        })
    out["load_average_1m_at_end"] = round(os.getloadavg()[0], 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ports", type=int, default=100_000)
    parser.add_argument("--intervals", type=int, default=10)
    parser.add_argument("--no-worker", action="store_true")
    parser.add_argument("--bootstrap", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fw-kafka-floor-") as tmp:
        state = Path(tmp)
        with sb.broker(args.bootstrap, state) as bootstrap:
            figures = asyncio.run(run(args, state, bootstrap))
    command = "python benchmarks/kafka_floor.py " + " ".join(sys.argv[1:])
    path = write_result("kafka_floor", figures, command.strip())
    print(orjson.dumps(figures, option=orjson.OPT_INDENT_2).decode())
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
