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
   "Worker ready" to its committed offsets reaching the end (skip with ``--no-worker``),
   profiled with py-spy for ``--profile-seconds`` while it catches up;
4. the ledger owner, ``fabricwatch ledger serve --ingest`` (its own consumer group, the
   embedded chdb ledger), timed from its first committed batch to the end, profiled the
   same way (skip with ``--no-ledger``). It runs after the worker, not beside it.

Writes benchmarks/results/kafka_floor.json with msgs/s, MB/s (uncompressed value bytes, as
ConsumerPerformance counts them) and port-samples/s of each, and the ratios between them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import resources as res  # noqa: E402
from benchmarks import streams_bench as sb  # noqa: E402
from benchmarks._machine import save_and_print  # noqa: E402
from fabricwatch.procs import ChildProcess  # noqa: E402
from runtime.settings import load_settings  # noqa: E402

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
    profiles: dict[str, Any] = {}
    if not args.no_worker:
        app_id = f"floor-{uuid.uuid4().hex[:8]}"
        worker = sb.WorkerProc(bootstrap, state, app_id, ledger=True)
        try:
            ready = await asyncio.to_thread(worker.wait_ready)
            spy = (res.start_profiles({"worker": worker.proc.pid}, args.profile_seconds, state)
                   if args.profile_seconds > 0 else {})
            # the worker inherits this environment: with the batched counters consumer its
            # own group commits fabric.counters (streams/counters/batched.py)
            batched = load_settings().streams.counters_batched
            group = f"{app_id}-counters" if batched else app_id
            while await sb.committed_total(bootstrap, group, tps) < end_total:
                if worker.proc.poll() is not None:
                    raise RuntimeError(worker.log.read_bytes()[-3000:].decode(errors="replace"))
                await asyncio.sleep(0.2)
            worker_s = time.perf_counter() - ready
            profiles.update(await asyncio.to_thread(res.finish_profiles, spy,
                                                    args.profile_seconds))
        finally:
            worker.stop()
        out.update({
            "worker_msgs_per_s": round(end_total / worker_s),
            "worker_mb_per_s": round(end_total * value_bytes / 2**20 / worker_s, 1),
            "port_samples_per_s": round(samples / worker_s),
            "ratio_to_floor": round((samples / worker_s) / (samples / bare_s), 3),
            "ratio_to_broker": round((end_total / worker_s) / java["msgs_per_s"], 4),
        })
    if args.ledger:
        out["ledger_owner"], prof = await ledger_owner(bootstrap, state, tps, end_total,
                                                       samples, args.profile_seconds,
                                                       args.ledger_backend)
        out["ledger_owner"]["backend"] = args.ledger_backend
        profiles.update(prof)
    out["load_average_1m_at_end"] = round(os.getloadavg()[0], 2)
    out["profile_seconds"] = args.profile_seconds
    out["profiles"] = profiles
    return out


async def ledger_owner(bootstrap: str, state: Path, tps: list[Any], end_total: int,
                       samples: int, profile_s: int, backend: str = "embedded"
                       ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ledger's ingest catching up on the same messages (own group): ``embedded`` is
    ``fabricwatch ledger serve --ingest``; ``server`` is ``fabricwatch ledger ingest``
    writing over HTTP to ``fabricwatch ledger serve`` (read-write) in another process,
    the shape of an ingest beside a ClickHouse server (the only one on this box)."""
    from fabricwatch.stack_config import free_ports
    from ledger.ingest import GROUP_ID

    (port,) = free_ports(1)
    env = {**os.environ, "FABRICWATCH_STATE_DIR": str(state / "ledger-owner"),
           "FABRICWATCH_KAFKA__BOOTSTRAP": bootstrap, "FABRICWATCH_LEDGER__HTTP_PORT": str(port)}
    server: ChildProcess | None = None
    if backend == "server":
        server = ChildProcess("ledger-server", [sys.executable, "-m", "fabricwatch", "ledger",
                                                "serve"], state / "ledger-server.log",
                              env={**env, "FABRICWATCH_LEDGER__ALLOW_WRITES_OVER_HTTP": "true"}
                              ).start()
        await _wait_listening(port, server)
        command = ["ledger", "ingest"]
        env = {**env, "FABRICWATCH_STATE_DIR": str(state / "ledger-ingest"),
               "FABRICWATCH_CLICKHOUSE_URL": f"http://127.0.0.1:{port}"}
    else:
        command = ["ledger", "serve", "--ingest"]
    child = ChildProcess("ledger", [sys.executable, "-m", "fabricwatch", *command],
                         state / "ledger-owner.log", env=env).start()
    assert child.proc is not None  # noqa: S101 - started above
    try:
        t0 = time.perf_counter()
        first: float | None = None
        spy: dict[str, Any] = {}
        while (done := await sb.committed_total(bootstrap, GROUP_ID, tps)) < end_total:
            if not child.running:
                raise RuntimeError(child.tail(40))
            if first is None and done > 0:
                first = time.perf_counter()
                if profile_s > 0:
                    spy = res.start_profiles({"ledger": child.proc.pid}, profile_s, state)
            await asyncio.sleep(0.2)
        end = time.perf_counter()
        prof = await asyncio.to_thread(res.finish_profiles, spy, profile_s) if spy else {}
    finally:
        child.stop()
        if server is not None:
            server.stop()
    # from its first committed batch: the start-up (migrations, group join) is left out
    steady = end - (first or t0)
    return ({"wall_from_start_s": round(end - t0, 2), "wall_from_first_commit_s":
             round(steady, 2), "port_samples_per_s": round(samples / steady),
             "port_samples_per_s_incl_startup": round(samples / (end - t0))}, prof)


async def _wait_listening(port: int, child: ChildProcess, timeout_s: float = 60.0) -> None:
    """The stack's own readiness check (a connect to the port), while ``child`` lives."""
    from fabricwatch.stack import _wait_port

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not child.running:
            raise RuntimeError(child.tail(40))
        with contextlib.suppress(OSError, asyncio.TimeoutError):
            await asyncio.wait_for(_wait_port("127.0.0.1", port), 2)
            return
        await asyncio.sleep(0.2)
    raise RuntimeError(f"127.0.0.1:{port} did not answer in {timeout_s:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ports", type=int, default=100_000)
    parser.add_argument("--intervals", type=int, default=10)
    parser.add_argument("--no-worker", action="store_true")
    parser.add_argument("--ledger", action=argparse.BooleanOptionalAction, default=True,
                        help="also time `ledger serve --ingest` catching up on the messages")
    parser.add_argument("--ledger-backend", choices=("embedded", "server"),
                        default="embedded",
                        help="server: `ledger ingest` over HTTP to `ledger serve` in another "
                             "process")
    parser.add_argument("--profile-seconds", type=int, default=30,
                        help="py-spy the worker and the ledger owner while they catch up")
    parser.add_argument("--bootstrap", default=None)
    parser.add_argument("--columnar", action="store_true",
                        help="produce the counters as counter_columns messages")
    parser.add_argument("--scenario", default="kafka_floor")
    args = parser.parse_args()
    sb.COLUMNAR = args.columnar
    with tempfile.TemporaryDirectory(prefix="fw-kafka-floor-") as tmp:
        state = Path(tmp)
        with sb.broker(args.bootstrap, state) as bootstrap:
            figures = asyncio.run(run(args, state, bootstrap))
    figures["message_form"] = "counter_columns" if args.columnar else "counters"
    save_and_print(args.scenario, figures)


if __name__ == "__main__":
    main()
