"""Derive the deployment's sizes for 10k, 100k and 1M ports from the benchmark results.

``python deploy/k8s/sizing.py`` prints the table docs/deployment.md carries, with the file
each figure comes from. The rules (explained in docs/deployment.md, "Sizing"):

- load: port samples/s = ports / sampling interval (10 s, the simulator's and the poller's);
- stream workers: enough that with one worker lost the rest run at <= 50 % of the measured
  per-worker rate, at least 2 (a hot standby), rounded up to a divisor of the partitions;
- partitions of the input topics: the registry's 12 while that leaves >= 3x room to add
  workers, else the smallest multiple of 24 with that room;
- ClickHouse shards: the ledger's measured insert rate at <= 50 %; 2 replicas each;
- Kafka disk: the measured compressed counter bytes per step, scaled by ports, one day,
  replication factor 3;
- Temporal history shards: open runbooks are bounded by the breaker (1 % of ports).

A second table sizes the stream workers for host agents (``fabricwatch agent``) sending
every GPU node's counters each second, one 8-port ``counter_columns`` message per node,
taken by the batched counters consumer: the same worker rule over the worker CPU per host
message measured at a sustained host load (one core per worker).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
TOPIC_BYTES = ROOT / "deploy" / "strimzi" / "topic-bytes.json"
INTERVAL_S = 10.0
SCALES = {"10k": 10_000, "100k": 100_000, "1m": 1_000_000}
REGISTRY_PARTITIONS = 12
T = TypeVar("T")
TARGET_UTILISATION = 0.5
BREAKER_FRACTION = 0.01


def _load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


@dataclass(frozen=True)
class Figures:
    """The measured inputs, each with the file it was read from."""

    # Stream workers are sized from a run on the shared box at load ~7.6
    # (streams_busy_box.json): a worker pod rarely has its core to itself, and the idle-box
    # figure (streams.json) would size 3x too few.
    worker_samples_per_s: float  # benchmarks/results/streams_busy_box.json port_samples_per_s
    latency_p99_ms: float  # benchmarks/results/streams_busy_box.json latency.p99_ms
    ledger_samples_per_s: float  # benchmarks/results/ledger.json ingest median
    ledger_bytes_per_row: float  # benchmarks/results/ledger.json on disk / counter rows
    poller_samples_per_s: float  # benchmarks/results/collectors_parse.json perfquery parse
    counters_zstd_bytes_per_port_step: float  # deploy/strimzi/topic-bytes.json
    devices_per_port: float  # benchmarks/results/sim.json devices / ports
    dispatch_per_s: float  # benchmarks/results/runbooks.json burst_dispatch_per_s
    # host_load_5k_after.json host_load.worker_cpu_us_per_message: a batched worker kept up
    # with 5,000 host messages/s offered (its backlog flat); measured on a quiet box
    host_cpu_us_per_message: float

    @classmethod
    def read(cls) -> Figures:
        streams = _load(RESULTS / "streams_busy_box.json")
        ledger = _load(RESULTS / "ledger.json")
        parse = _load(RESULTS / "collectors_parse.json")
        sim = _load(RESULTS / "sim.json")
        runbooks = _load(RESULTS / "runbooks.json")
        topic = _load(TOPIC_BYTES)
        hosts = _load(RESULTS / "host_load_5k_after.json")
        on_disk = _bytes(ledger["counter_samples_on_disk"])
        rows = ledger["history"]["rows"]["counter_samples"]
        counters = topic["per_step"]["fabric.counters"]
        return cls(
            worker_samples_per_s=float(streams["port_samples_per_s"]),
            latency_p99_ms=float(streams["latency"]["p99_ms"]),
            ledger_samples_per_s=float(ledger["ingest"]["port_samples_per_s_median"]),
            ledger_bytes_per_row=on_disk / rows,
            poller_samples_per_s=float(parse["perfquery_port_samples_per_s"]),
            counters_zstd_bytes_per_port_step=counters["zstd_bytes"] / topic["ports"],
            devices_per_port=sim["devices"] / sim["ports"],
            dispatch_per_s=float(runbooks["burst_dispatch_per_s"]),
            host_cpu_us_per_message=float(hosts["host_load"]["worker_cpu_us_per_message"]),
        )


def _bytes(text: str) -> float:
    number, unit = text.split()
    return float(number) * {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}[unit]


@dataclass(frozen=True)
class Size:
    ports: int
    samples_per_s: float
    counter_messages_per_s: float
    partitions: int
    workers: int
    worker_utilisation: float
    clickhouse_shards: int
    ledger_gb_per_day: float
    kafka_counters_gb_per_day: float
    kafka_broker_disk_gb: float
    brokers: int
    open_runbooks_max: int
    history_shards: int
    poller_cores: float


def _divisor_at_least(n: int, partitions: int) -> int:
    return next(d for d in range(max(n, 1), partitions + 1) if partitions % d == 0)


def workers_for(load: float, per_worker: float) -> tuple[int, int]:
    """(workers, partitions) for ``load`` at ``per_worker`` each: with one worker lost the
    rest at <= 50 %, at least 2, and a divisor of the partitions (the registry's 12 while
    that leaves 3x room to add workers, else the smallest multiple of 24 that does)."""
    needed = math.ceil(load / (per_worker * TARGET_UTILISATION))
    workers_min = max(2, needed + 1)  # one lost worker leaves the rest at <= 50 %
    partitions = REGISTRY_PARTITIONS
    if partitions < 3 * needed:
        partitions = 24 * math.ceil(3 * needed / 24)
    return _divisor_at_least(workers_min, partitions), partitions


def shards_for(samples_per_s: float, f: Figures) -> int:
    """ClickHouse shards for the ledger at ``samples_per_s``: each at <= 50 % of its rate."""
    return max(1, math.ceil(samples_per_s / (f.ledger_samples_per_s * TARGET_UTILISATION)))


def size(ports: int, f: Figures) -> Size:
    load = ports / INTERVAL_S
    workers, partitions = workers_for(load, f.worker_samples_per_s)
    shards = shards_for(load, f)
    kafka_day = f.counters_zstd_bytes_per_port_step * ports * (86400 / INTERVAL_S) / 1e9
    brokers = 3 if ports <= 100_000 else 6
    open_runbooks = math.ceil(BREAKER_FRACTION * ports)
    return Size(
        ports=ports, samples_per_s=load,
        counter_messages_per_s=ports * f.devices_per_port / INTERVAL_S,
        partitions=partitions, workers=workers,
        worker_utilisation=load / (workers * f.worker_samples_per_s),
        clickhouse_shards=shards,
        ledger_gb_per_day=load * 86400 * f.ledger_bytes_per_row / 1e9,
        kafka_counters_gb_per_day=kafka_day,
        kafka_broker_disk_gb=kafka_day * 3 / brokers,
        brokers=brokers,
        open_runbooks_max=open_runbooks,
        # a few hundred long-lived workflows per shard at most; twice the chart's 512 at 1M
        history_shards=512 if open_runbooks <= 5_000 else 1024,
        poller_cores=load / f.poller_samples_per_s,
    )


# GPU nodes (8 GPUs and 8 one-port HCAs each): 10k, 100k and 1M GPUs
HOST_SCALES = {"10k": 1_250, "100k": 12_500, "1m": 125_000}
HOST_INTERVAL_S = 1.0


@dataclass(frozen=True)
class HostSize:
    nodes: int
    messages_per_s: float
    port_samples_per_s: float
    workers: int
    partitions: int
    worker_utilisation: float
    clickhouse_shards: int


def host_size(nodes: int, f: Figures) -> HostSize:
    load = nodes / HOST_INTERVAL_S
    per_worker = 1e6 / f.host_cpu_us_per_message  # one core each
    workers, partitions = workers_for(load, per_worker)
    return HostSize(nodes=nodes, messages_per_s=load, port_samples_per_s=8 * load,
                    workers=workers, partitions=partitions,
                    worker_utilisation=load / (workers * per_worker),
                    clickhouse_shards=shards_for(8 * load, f))


def host_table(f: Figures | None = None) -> str:
    f = f or Figures.read()
    sizes = [host_size(nodes, f) for nodes in HOST_SCALES.values()]
    rows: list[tuple[str, Callable[[HostSize], str]]] = [
        ("host messages/s (1 s, 8 ports each)", lambda s: f"{s.messages_per_s:,.0f}"),
        ("port samples/s", lambda s: f"{s.port_samples_per_s:,.0f}"),
        ("stream workers (batched counters, a core each)", lambda s: f"{s.workers}"),
        ("partitions (port-events, counters)", lambda s: f"{s.partitions}"),
        ("worker utilisation, all up", lambda s: f"{s.worker_utilisation:.0%}"),
        ("ClickHouse shards x replicas (every sample kept)",
         lambda s: f"{s.clickhouse_shards} x 2"),
    ]
    return markdown([f"{s.nodes:,} nodes" for s in sizes], sizes, rows)


def table(f: Figures | None = None) -> str:
    f = f or Figures.read()
    sizes = {name: size(ports, f) for name, ports in SCALES.items()}
    rows: list[tuple[str, Callable[[Size], str]]] = [
        ("port samples/s (10 s sampling)", lambda s: f"{s.samples_per_s:,.0f}"),
        ("counter messages/s", lambda s: f"{s.counter_messages_per_s:,.0f}"),
        ("partitions (port-events, counters)", lambda s: f"{s.partitions}"),
        ("stream workers (StatefulSet replicas)", lambda s: f"{s.workers}"),
        ("worker utilisation, all up", lambda s: f"{s.worker_utilisation:.0%}"),
        ("ClickHouse shards x replicas", lambda s: f"{s.clickhouse_shards} x 2"),
        ("ledger counter rows GB/day (as measured)", lambda s: f"{s.ledger_gb_per_day:.2f}"),
        ("Kafka brokers", lambda s: f"{s.brokers}"),
        ("Kafka counters GB/day per replica", lambda s: f"{s.kafka_counters_gb_per_day:.1f}"),
        ("Kafka counters GB per broker (1 day, RF 3)", lambda s: f"{s.kafka_broker_disk_gb:.1f}"),
        ("open runbooks at most (1 % breaker)", lambda s: f"{s.open_runbooks_max:,}"),
        ("Temporal numHistoryShards", lambda s: f"{s.history_shards}"),
        ("poller cores for perfquery parsing", lambda s: f"{s.poller_cores:.2f}"),
    ]
    return markdown([f"{p:,} ports" for p in SCALES.values()], list(sizes.values()), rows)


def markdown(heads: list[str], sizes: list[T], rows: list[tuple[str, Callable[[T], str]]]
                ) -> str:
    """A table with a column per size (headed ``heads``) and a row per (label, format)."""
    out = ["| | " + " | ".join(heads) + " |", "|---|" + "---:|" * len(heads)]
    for label, fmt in rows:
        out.append(f"| {label} | " + " | ".join(fmt(s) for s in sizes) + " |")
    return "\n".join(out)


if __name__ == "__main__":
    print(table())  # noqa: T201 - the tables are the output
    print()  # noqa: T201
    print(host_table())  # noqa: T201
