"""Benchmark: the stream worker's counters path and trap-to-detection latency, against a bare consumer.

Run: .venv/bin/python benchmarks/streams_bench.py [--ports 100000] [--intervals 10]
     [--latency-traps 300] [--trap-rate 2.5] [--no-ledger] [--bootstrap HOST:PORT]

Without ``--bootstrap`` it starts its own Kafka broker (the local stack, free ports, a
temporary folder). In one run:

1. Throughput. ``--intervals`` rounds of counters for ``--ports`` ports (64-port device
   batches, healthy fabric with 1 % of ports erroring) are produced to ``fabric.counters``.
   A bare aiokafka consumer that only decodes them (``schemas.decode``) sets the floor; then
   ``fabricwatch worker`` (Faust, RocksDB tables with changelogs, ledger sink unless
   ``--no-ledger``) consumes the same messages from the start: its rate is measured from
   "Worker ready" until its committed offsets reach the end of the topic.
2. Latency. With the worker caught up and counters still arriving at the target rate
   (``--ports`` per 10 s), ports get two downs, then a third one (a flap) at a steady pace
   (``--trap-rate``, below the pace at which the correlator takes the SM's downs for one
   SM event and excuses them: 2.8/s with the default policy); each third down's publish
   time is compared with the arrival of its ``flap`` detection on ``fabric.detections``
   (p50/p99), and with the arrival of the trap itself at a bare decoding consumer of
   ``fabric.port-events`` in the same process (the floor).

Writes benchmarks/results/streams.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._machine import save_and_print  # noqa: E402
from schemas import ContractError, PortEvent, decode  # noqa: E402
from schemas.policy import Policy  # noqa: E402

PORTS_PER_DEVICE = 64
COLUMNAR = False  # --columnar: counters as counter_columns messages
BARE_CPU = [0.0, 0.0]  # the bare consumer's process CPU seconds at its first and last batch
FABRICWATCH = str(Path(sys.executable).parent / "fabricwatch")


@contextlib.contextmanager
def broker(bootstrap: str | None, state: Path) -> Iterator[str]:
    if bootstrap:
        yield bootstrap
        return
    from fabricwatch.stack import LocalStack
    from fabricwatch.stack_config import free_ports
    from runtime.settings import KafkaSettings, Settings

    a, b = free_ports(2)
    settings = Settings(state_dir=state / "stack", kafka=KafkaSettings(port=a, controller_port=b))
    stack = LocalStack(settings, services=["kafka"], timeout=180)
    stack.up()
    try:
        yield settings.kafka.bootstrap_servers
    finally:
        stack.down()


def counters_batch(device: str, seq: int, ts: int, errs: bool) -> bytes:
    ports = []
    for p in range(1, PORTS_PER_DEVICE + 1):
        bad = errs and p == 1
        ports.append({
            "port": p, "symbol_errors": seq * 50 if bad else 0, "link_error_recovery": 0,
            "link_downed": 0, "rcv_errors": seq if bad else 0, "rcv_remote_phys_errors": 0,
            "xmit_discards": 0, "xmit_wait": 1_000_000 + seq * 17 * p,
            "local_link_integrity_errors": 0, "excessive_buffer_overrun": 0,
            "fec_corrected": seq * 1000 + p, "fec_uncorrectable": 0, "raw_ber": 1.5e-9,
            "effective_ber": 1e-15, "width": "4X", "speed": "NDR"})
    head = {"v": 1, "id": f"{device}/{seq}", "ts": ts, "fabric": "bench", "source": "gnmi",
            "device": device}
    if COLUMNAR:  # the same samples as a counter_columns message
        return orjson.dumps({**head, "kind": "counter_columns",
                             "columns": {k: [p[k] for p in ports] for k in ports[0]}})
    return orjson.dumps({**head, "kind": "counters", "ports": ports})


def devices_for(ports: int) -> list[str]:
    n = max(1, ports // PORTS_PER_DEVICE)
    return [f"leaf-su{d // 32:02d}-r{d % 32}" for d in range(n)]


async def produce_counters(bootstrap: str, devices: list[str], intervals: int,
                           base: int) -> int:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20,
                                max_batch_size=1 << 20, compression_type="lz4", acks=1)
    await producer.start()
    n = 0
    try:
        for i in range(intervals):
            for d, dev in enumerate(devices):
                value = counters_batch(dev, i, base + i * 10_000, errs=d % 100 == 0)
                await producer.send("fabric.counters", value, key=dev.encode())
                n += 1
        await producer.flush()
    finally:
        await producer.stop()
    return n


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and its children that have exited
    (/proc/<pid>/stat): on a shared box the rate per CPU-second holds where wall time
    does not."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


async def bare_throughput(bootstrap: str, total: int) -> tuple[float, int]:
    consumer = AIOKafkaConsumer("fabric.counters", bootstrap_servers=bootstrap,
                                auto_offset_reset="earliest", group_id=None,
                                max_partition_fetch_bytes=8 << 20)
    await consumer.start()
    samples = 0
    seen = 0
    t0: float | None = None
    try:
        while seen < total:
            batch = await consumer.getmany(timeout_ms=500, max_records=2000)
            if t0 is None and batch:
                t0 = time.perf_counter()
                BARE_CPU[0] = time.process_time()
            for records in batch.values():
                for r in records:
                    seen += 1
                    try:
                        ev = decode(r.value or b"")
                    except ContractError:
                        continue  # the worker dead-letters these; counted as messages
                    samples += getattr(ev, "port_count", None) or len(getattr(ev, "ports", ()))
        assert t0 is not None
        BARE_CPU[1] = time.process_time()
        return time.perf_counter() - t0, samples
    finally:
        await consumer.stop()


class WorkerProc:
    def __init__(self, bootstrap: str, state: Path, app_id: str, ledger: bool,
                 workers: int = 1, extra_env: dict[str, str] | None = None,
                 agents: str = "all") -> None:
        self.log = state / f"{app_id}-{agents}.log"
        env = {**os.environ, "FABRICWATCH_STATE_DIR": str(state),
               "FABRICWATCH_KAFKA__BOOTSTRAP": bootstrap, **(extra_env or {})}
        args = [FABRICWATCH, "worker", "--app-id", app_id, "--loglevel", "info",
                "--workers", str(workers)]
        args.append("--ledger" if ledger else "--no-ledger")
        if agents != "all":  # (a tree without the option runs them all)
            args += ["--agents", agents]
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)

    def wait_ready(self, timeout: float = 180) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if b"Worker ready" in self.log.read_bytes():
                return time.perf_counter()
            if self.proc.poll() is not None:
                raise RuntimeError(self.log.read_bytes()[-3000:].decode(errors="replace"))
            time.sleep(0.05)
        raise RuntimeError("worker not ready")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


async def committed_total(bootstrap: str, group: str, tps: list[TopicPartition]) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                enable_auto_commit=False)
    await consumer.start()
    try:
        total = 0
        for tp in tps:
            off = await consumer.committed(tp)
            total += off or 0
        return total
    finally:
        await consumer.stop()


async def end_offsets(bootstrap: str, topic: str) -> tuple[list[TopicPartition], int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        parts = consumer.partitions_for_topic(topic)
        if not parts:
            await consumer._client.force_metadata_update()  # noqa: SLF001 - first lookup
            parts = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        ends = await consumer.end_offsets(tps)
        return tps, sum(ends.values())
    finally:
        await consumer.stop()


def max_trap_rate(policy: Policy | None = None) -> float:
    """The fastest pace of independent flaps that the correlator does not take for one SM
    event: downs the SM reported on ``smMinLinks`` links of ``smMinDevices`` devices within
    ``spread`` are one incident (a heavy sweep, a failover; ``streams.incidents``), whose
    downs are excused, so those ports do not flap. Two links fewer than that per spread."""
    cfg = (policy or Policy()).fabric_health.incidents
    return (cfg.sm_min_links - 2) / cfg.spread


def port_event(dev: str, n: int, ts: int) -> bytes:
    """The subnet manager's trap for a down of ``dev`` port 1 (the ``n``-th of the port)."""
    return orjson.dumps({"v": 1, "kind": "port_event", "id": f"{dev}:1/{n}", "ts": ts,
                         "fabric": "bench", "source": "opensm", "device": dev, "port": 1,
                         "state": "down"})


Background = Callable[[asyncio.Event], Coroutine[Any, Any, None]]


def counters_background(bootstrap: str, devices: list[str]) -> Background:
    """The target load of the 100k-port scenario: every port every 10 s, spread evenly."""
    async def run(stop: asyncio.Event) -> None:
        prod = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5,
                                compression_type="lz4", acks=1)
        await prod.start()
        try:
            seq = 1000
            while not stop.is_set():
                t0 = time.perf_counter()
                ts = int(time.time() * 1000)
                for i, dev in enumerate(devices):
                    if stop.is_set():
                        break
                    await prod.send("fabric.counters", counters_batch(dev, seq, ts, False),
                                    key=dev.encode())
                    due = t0 + 10.0 * (i + 1) / len(devices)
                    if (delay := due - time.perf_counter()) > 0:
                        await asyncio.sleep(delay)
                seq += 1
        finally:
            await prod.stop()
    return run


async def latency_phase(bootstrap: str, n_traps: int, rate_per_s: float,
                        background: Background | None, lead_s: float = 0.0
                        ) -> dict[str, Any]:
    """Trap-to-detection: ``n_traps`` ports get two downs, then a third (a flap) at
    ``rate_per_s`` while ``background`` produces its load.

    The ports flap independently, so their traps are paced below ``max_trap_rate`` (the
    third downs in real time, the first two in event time, a minute and more in the past):
    faster, and the correlator rightly takes them for one SM event and no port flaps.
    The first trap is sent ``lead_s`` after the background starts."""
    if rate_per_s > max_trap_rate():
        raise ValueError(f"trap rate {rate_per_s}/s is an SM event, not independent flaps "
                         f"(at most {max_trap_rate():.1f}/s)")
    tag = uuid.uuid4().hex[:6]
    window_s = 0.0
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, acks=1)
    await producer.start()
    det_consumer = AIOKafkaConsumer("fabric.detections", bootstrap_servers=bootstrap,
                                    auto_offset_reset="latest", group_id=None)
    bare_consumer = AIOKafkaConsumer("fabric.port-events", bootstrap_servers=bootstrap,
                                     auto_offset_reset="latest", group_id=None)
    await det_consumer.start()
    await bare_consumer.start()
    for c in (det_consumer, bare_consumer):  # position at the end before sending anything
        await c.getmany(timeout_ms=1000)
    sent: dict[str, float] = {}
    det_at: dict[str, float] = {}
    bare_at: dict[str, float] = {}
    stop = asyncio.Event()

    async def read_detections() -> None:
        while not stop.is_set():
            batch = await det_consumer.getmany(timeout_ms=100)
            now = time.time()
            for records in batch.values():
                for r in records:
                    obj = orjson.loads(r.value or b"{}")
                    if obj.get("detection") == "flap" and tag in obj.get("device", ""):
                        det_at.setdefault(obj["device"], now)

    async def read_bare() -> None:
        while not stop.is_set():
            batch = await bare_consumer.getmany(timeout_ms=100)
            now = time.time()
            for records in batch.values():
                for r in records:
                    try:
                        ev = decode(r.value or b"")
                    except ContractError:
                        continue
                    if isinstance(ev, PortEvent) and tag in ev.device and ev.id.endswith("/2"):
                        bare_at.setdefault(ev.device, now)

    tasks = [asyncio.create_task(read_detections()), asyncio.create_task(read_bare())]
    if background is not None:
        tasks.append(asyncio.create_task(background(stop)))
    try:
        await asyncio.sleep(lead_s)
        now_ms = int(time.time() * 1000)
        gap_ms = round(1000 / rate_per_s)
        names = [f"bench-{tag}-{i}/mlx5_0" for i in range(n_traps)]
        first = now_ms - 60_000 - 2 * n_traps * gap_ms
        for i, dev in enumerate(names):  # two downs each, inside the window, paced in ts
            for n in range(2):
                await producer.send("fabric.port-events",
                                    port_event(dev, n, first + (2 * i + n) * gap_ms),
                                    key=f"{dev}:1".encode())
        await producer.flush()
        await asyncio.sleep(3)
        for dev in names:
            sent[dev] = time.time()
            await producer.send("fabric.port-events", port_event(dev, 2, int(sent[dev] * 1000)),
                                key=f"{dev}:1".encode())
            await asyncio.sleep(1 / rate_per_s)
        await asyncio.sleep(5)  # the stragglers: p99 is measured, not waited for
        window_s = time.time() - min(sent.values(), default=time.time())
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await producer.stop()
        await det_consumer.stop()
        await bare_consumer.stop()
    worker_ms = sorted((det_at[d] - sent[d]) * 1000 for d in det_at if d in sent)
    bare_ms = sorted((bare_at[d] - sent[d]) * 1000 for d in bare_at if d in sent)

    def pct(xs: list[float], q: float) -> float | None:
        return round(xs[min(len(xs) - 1, int(q * len(xs)))], 1) if xs else None

    return {
        "traps": n_traps, "detections_seen": len(worker_ms), "bare_seen": len(bare_ms),
        "trap_rate_per_s": rate_per_s,
        # a trap not detected by then took longer than what is left of it
        "watched_s_from_first_trap": round(window_s, 1),
        "p50_ms": pct(worker_ms, 0.5), "p99_ms": pct(worker_ms, 0.99),
        "max_ms": round(max(worker_ms), 1) if worker_ms else None,
        "bare_p50_ms": pct(bare_ms, 0.5), "bare_p99_ms": pct(bare_ms, 0.99),
        "mean_ms": round(statistics.fmean(worker_ms), 1) if worker_ms else None,
    }


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a is not None and b else None


async def run(args: argparse.Namespace, state: Path, bootstrap: str) -> dict[str, Any]:
    devices = devices_for(args.ports)
    base = int(time.time() * 1000) - 3 * 3600_000
    t = time.perf_counter()
    messages = await produce_counters(bootstrap, devices, args.intervals, base)
    produce_s = time.perf_counter() - t
    tps, end_total = await end_offsets(bootstrap, "fabric.counters")
    bare_s, samples = await bare_throughput(bootstrap, end_total)
    app_id = f"bench-{uuid.uuid4().hex[:8]}"
    worker = WorkerProc(bootstrap, state, app_id, ledger=not args.no_ledger,
                        workers=args.workers)
    try:
        ready = await asyncio.to_thread(worker.wait_ready)
        cpu0 = cpu_seconds(worker.proc.pid)
        while True:
            done = await committed_total(bootstrap, app_id, tps)
            if done >= end_total:
                break
            if worker.proc.poll() is not None:
                raise RuntimeError(worker.log.read_bytes()[-3000:].decode(errors="replace"))
            await asyncio.sleep(0.2)
        worker_s = time.perf_counter() - ready
        worker_cpu = cpu_seconds(worker.proc.pid) - cpu0
        latency = await latency_phase(bootstrap, args.latency_traps, args.trap_rate,
                                      counters_background(bootstrap, devices))
    finally:
        worker.stop()
    log_tail = worker.log.read_bytes()[-2000:].decode(errors="replace")
    errors = log_tail.count("ERROR")
    worker_rate = samples / worker_s
    bare_rate = samples / bare_s
    return {
        "ports": len(devices) * PORTS_PER_DEVICE, "intervals": args.intervals,
        "messages": messages, "port_samples": samples, "ledger_sink": not args.no_ledger,
        "message_form": "counter_columns" if COLUMNAR else "counters",
        "worker_processes": args.workers,
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
        "produce_s": round(produce_s, 2),
        "port_samples_per_s": round(worker_rate),
        "bare_port_samples_per_s": round(bare_rate),
        "ratio_to_bare": round(worker_rate / bare_rate, 3),
        # per CPU-second of each: what the rates would be with a core to themselves
        "port_samples_per_cpu_s": round(samples / max(worker_cpu, 1e-9)),
        "bare_port_samples_per_cpu_s": round(samples / max(BARE_CPU[1] - BARE_CPU[0], 1e-9)),
        "ratio_to_bare_per_cpu_s": round((BARE_CPU[1] - BARE_CPU[0]) / max(worker_cpu, 1e-9),
                                         3),
        "worker_catch_up_s": round(worker_s, 2),
        "target_port_samples_per_s": len(devices) * PORTS_PER_DEVICE / 10,
        "headroom_vs_target": round(worker_rate / (len(devices) * PORTS_PER_DEVICE / 10), 2),
        "latency": latency,
        "latency_ratio_p50_to_bare": ratio(latency["p50_ms"], latency["bare_p50_ms"]),
        "latency_ratio_p99_to_bare": ratio(latency["p99_ms"], latency["bare_p99_ms"]),
        "worker_log_errors_in_tail": errors,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ports", type=int, default=100_000)
    parser.add_argument("--intervals", type=int, default=10)
    parser.add_argument("--latency-traps", type=int, default=300)
    parser.add_argument("--trap-rate", type=float, default=2.5,
                        help="third downs per second; independent flaps stay below "
                             f"{max_trap_rate():.1f}/s (faster is one SM event)")
    parser.add_argument("--no-ledger", action="store_true")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--scenario", default="streams",
                        help="results file name: benchmarks/results/<scenario>.json")
    parser.add_argument("--bootstrap", default=None)
    parser.add_argument("--columnar", action="store_true",
                        help="send the counters as counter_columns messages")
    args = parser.parse_args()
    global COLUMNAR
    COLUMNAR = args.columnar
    if not 0 < args.trap_rate <= max_trap_rate():
        parser.error(f"--trap-rate: more than 0 and at most {max_trap_rate():.1f}/s")
    with tempfile.TemporaryDirectory(prefix="fw-streams-bench-") as tmp:
        state = Path(tmp)
        with broker(args.bootstrap, state) as bootstrap:
            figures = asyncio.run(run(args, state, bootstrap))
    save_and_print(args.scenario, figures)


if __name__ == "__main__":
    main()
