"""Recovery of the stream worker: kill -9, restart, and the time until detection resumes.

For each round: a worker runs and has detected a flap (warm); it is killed with SIGKILL; a
new worker process is started at once under the same app id (as Kubernetes restarts a pod);
a fresh flap (three downs within the window) is published right after the kill; the figure
is the time from the kill to that flap's detection on ``fabric.detections``. Rounds alternate
between the shipped settings (static membership, 10 s session timeout) and Faust's defaults
(dynamic membership, 60 s session) in one run, so the ratio compares like with like on a
noisy box.

    python benchmarks/recovery.py --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._machine import save_and_print  # noqa: E402
from benchmarks.streams_bench import WorkerProc, broker  # noqa: E402
from schemas import PortEvent, encode  # noqa: E402

MODES = {
    "shipped": {},  # static membership, session 10 s, heartbeat 3 s (runtime.settings)
    "faust_defaults": {"FABRICWATCH_STREAMS__INSTANCE_ID": "",
                       "FABRICWATCH_STREAMS__SESSION_TIMEOUT_S": "60",
                       "FABRICWATCH_STREAMS__HEARTBEAT_INTERVAL_S": "3"},
}


async def flap(producer: AIOKafkaProducer, device: str, tag: str) -> None:
    now = int(time.time() * 1000)
    for i in range(3):
        ev = PortEvent(id=f"{tag}/{i}", ts=now - 3000 + i * 1000, fabric="bench",
                       source="opensm", device=device, port=1, state="down")
        await producer.send("fabric.port-events", encode(ev), key=f"{device}:1".encode())
    await producer.flush()


async def wait_detection(consumer: AIOKafkaConsumer, device: str, deadline_s: float) -> float:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        batch = await consumer.getmany(timeout_ms=100)
        for records in batch.values():
            for r in records:
                if r.value and orjson.loads(r.value).get("device") == device:
                    return time.monotonic()
    raise TimeoutError(f"no detection for {device} within {deadline_s:.0f} s")


async def one_round(bootstrap: str, state: Path, mode: str, n: int) -> float:
    app_id = f"fw-recovery-{mode}-{n}-{uuid.uuid4().hex[:6]}"
    consumer = AIOKafkaConsumer("fabric.detections", bootstrap_servers=bootstrap,
                                auto_offset_reset="latest", group_id=None)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
    await consumer.start()
    await producer.start()
    try:
        worker = WorkerProc(bootstrap, state, app_id, ledger=False, extra_env=MODES[mode])
        warm = f"warm-{app_id}"
        await flap(producer, warm, warm)
        await wait_detection(consumer, warm, 180)  # the worker is up and has its partitions
        killed = time.monotonic()
        worker.proc.send_signal(signal.SIGKILL)
        worker.proc.wait(30)
        worker = WorkerProc(bootstrap, state, app_id, ledger=False, extra_env=MODES[mode])
        after = f"after-{app_id}"
        await flap(producer, after, after)
        seen = await wait_detection(consumer, after, 240)
        worker.stop()
        return seen - killed
    finally:
        await producer.stop()
        await consumer.stop()


async def run(args: argparse.Namespace, state: Path, bootstrap: str) -> dict[str, Any]:
    figures: dict[str, list[float]] = {mode: [] for mode in MODES}
    for n in range(args.rounds):
        for mode in MODES:  # interleaved: both see the same box
            figures[mode].append(round(await one_round(bootstrap, state, mode, n), 2))
    shipped, default = figures["shipped"], figures["faust_defaults"]
    return {
        "rounds": args.rounds,
        "kill_to_detection_s": figures,
        "shipped_median_s": statistics.median(shipped),
        "shipped_max_s": max(shipped),
        "faust_defaults_median_s": statistics.median(default),
        "speedup_median": round(statistics.median(default) / statistics.median(shipped), 2),
        "settings": {"shipped": "static membership (instance id per app/host/index), "
                                "session 10 s, heartbeat 3 s",
                     "faust_defaults": "dynamic membership, session 60 s, heartbeat 3 s"},
        "load_average_1m_at_end": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bootstrap", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fw-recovery-") as tmp:
        state = Path(tmp)
        with broker(args.bootstrap, state) as bootstrap:
            figures = asyncio.run(run(args, state, bootstrap))
    save_and_print("recovery", figures)


if __name__ == "__main__":
    main()
