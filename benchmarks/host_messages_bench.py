"""Benchmark: the stream worker's capacity in host-agent messages per second (8 ports each).

Run: .venv/bin/python benchmarks/host_messages_bench.py [--hosts 12500] [--intervals 3]
     [--bootstrap HOST:PORT]

Target context: 100,000 host ports read at 1 s by 12,500 host agents is 12,500 messages/s.
The messages are the agent's own: one ``HostAgent.round()`` of an 8-HCA tree built from
the real sysfs fixture, re-stamped per host and interval (host name, id, ts, advancing
``xmit_wait``/data counters), so each carries 8 samples of ~50 counters with their HCA
names (``excessive_buffer_overrun`` set to 0: the fixture's 15 is its 4-bit register's
maximum, which would make every port ``counter_saturated``). ``--intervals`` rounds of
``--hosts`` hosts are produced to ``fabric.counters``;
a bare aiokafka consumer that only decodes them (``schemas.decode``) sets the floor; then
``fabricwatch worker --no-ledger`` (counters and stale agents, RocksDB tables with
changelogs) consumes the same messages from the start, timed from "Worker ready" until
its committed offsets reach the end (the streams benchmark's method, whose helpers this
reuses). Without ``--bootstrap`` it starts its own broker.

Writes benchmarks/results/host_messages.json.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._machine import save_and_print  # noqa: E402
from benchmarks.streams_bench import (  # noqa: E402
    WorkerProc,
    bare_throughput,
    broker,
    committed_total,
    end_offsets,
)
from collectors.live.host_agent import AgentConfig, HostAgent  # noqa: E402
from schemas import encode  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("sysfs_tree", ROOT / "tests" / "sysfs_tree.py")
assert _spec is not None and _spec.loader is not None
tree = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tree)


async def template(tmp: Path) -> dict[str, Any]:
    tree.build(tmp, hcas=8)
    agent = HostAgent(AgentConfig(fabric="bench", host="HOST", sysfs_root=tmp))
    counters = (await agent.round())[0]
    return dict(orjson.loads(encode(counters)))


def host_message(tpl: dict[str, Any], host: str, seq: int, ts: int) -> bytes:
    ports = []
    for i, sample in enumerate(tpl["ports"]):
        s = dict(sample)
        s["device"] = f"{host}/mlx5_{i}"
        # The fixture's 15 is the 4-bit register's maximum, a saturated counter
        # (counter_saturated on every port): the benchmark's fabric is a healthy one.
        s["excessive_buffer_overrun"] = 0
        s["xmit_wait"] = s["xmit_wait"] + seq * 1000 + i
        s["port_xmit_data"] = s.get("port_xmit_data", 0) + seq * 5_000_000
        ports.append(s)
    return orjson.dumps({**tpl, "id": f"{host}/{seq}", "ts": ts, "device": host,
                         "ports": ports})


async def produce(bootstrap: str, tpl: dict[str, Any], hosts: int, intervals: int,
                  base: int) -> tuple[int, int]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20,
                                max_batch_size=1 << 20, compression_type="lz4", acks=1)
    await producer.start()
    n = size = 0
    try:
        for i in range(intervals):
            for h in range(hosts):
                host = f"node{h:05d}"
                value = host_message(tpl, host, i, base + i * 1000 + h % 997)
                size = len(value)
                await producer.send("fabric.counters", value, key=host.encode())
                n += 1
        await producer.flush()
    finally:
        await producer.stop()
    return n, size


async def run(args: argparse.Namespace, state: Path, bootstrap: str) -> dict[str, Any]:
    tpl = await template(state / "sys")
    base = int(time.time() * 1000) - 3600_000
    t = time.perf_counter()
    messages, size = await produce(bootstrap, tpl, args.hosts, args.intervals, base)
    produce_s = time.perf_counter() - t
    tps, end_total = await end_offsets(bootstrap, "fabric.counters")
    bare_s, samples = await bare_throughput(bootstrap, end_total)
    app_id = f"bench-host-{uuid.uuid4().hex[:8]}"
    worker = WorkerProc(bootstrap, state, app_id, ledger=False)
    try:
        ready = await asyncio.to_thread(worker.wait_ready)
        while True:
            done = await committed_total(bootstrap, app_id, tps)
            if done >= end_total:
                break
            if worker.proc.poll() is not None:
                raise RuntimeError(worker.log.read_bytes()[-3000:].decode(errors="replace"))
            await asyncio.sleep(0.2)
        worker_s = time.perf_counter() - ready
    finally:
        worker.stop()
    log = worker.log.read_bytes().decode(errors="replace")
    rate = messages / worker_s
    bare = messages / bare_s
    return {
        "hosts": args.hosts, "ports_per_message": len(tpl["ports"]),
        "intervals": args.intervals, "messages": messages, "message_bytes": size,
        "port_samples": samples, "produce_s": round(produce_s, 2),
        "host_messages_per_s": round(rate),
        "port_samples_per_s": round(rate * len(tpl["ports"])),
        "bare_host_messages_per_s": round(bare),
        "ratio_to_bare": round(rate / bare, 3),
        "worker_catch_up_s": round(worker_s, 2),
        "target_host_messages_per_s": 12_500,
        "fraction_of_target": round(rate / 12_500, 3),
        "stale_detections_in_log": log.count("stale"),
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=12_500)
    parser.add_argument("--intervals", type=int, default=3)
    parser.add_argument("--bootstrap", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fw-host-bench-") as tmp:
        state = Path(tmp)
        with broker(args.bootstrap, state) as bootstrap:
            figures = asyncio.run(run(args, state, bootstrap))
    save_and_print("host_messages", figures)


if __name__ == "__main__":
    main()
