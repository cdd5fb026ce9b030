"""Ledger ingest benchmark: counters from wire bytes into the ledger, before and after, one run.

What the ledger owner does with each polled batch of ``fabric.counters`` records, minus the
Kafka fetch: ``ledger.ingest.decode_record`` on every record's bytes (the contract's
acceptance, as the ingest runs it), then ``Ledger.write`` of the batch (rows or columns, the
engine's insert, the delta view and every rollup view). Two backends:

- ``embedded``: ``EmbeddedLedger`` (chdb in the process), what ``fabricwatch ledger serve
  --ingest`` and the worker's ledger sink run;
- ``server``: ``ServerLedger`` (clickhouse-connect over HTTP), what ``fabricwatch ledger
  ingest`` runs, here against the embedded ledger's ClickHouse HTTP endpoint in the same
  process (the only ClickHouse server on this box), so its CPU includes the endpoint's.

Each (tree, backend) runs in its own process (the engine serves one data folder per
process) on a fresh ledger: one warm-up poll that finds no previous samples, then
``--polls`` timed polls of ``--ports`` port-samples in 64-port messages. ``--before`` is a
tree of the code before the change (``git archive main | tar -x -C DIR``); the pairs run
back to back, ``--repeat`` times, alternating, so both see the same box. Figures: wall
port-samples/s and port-samples per CPU-second of the whole process (engine threads
included), the median over polls, the best child per tree; and the share of decode.

    .venv/bin/python benchmarks/ledger_ingest.py --before /tmp/ledger-base
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PORTS_PER_DEVICE = 64
RAILS = 8


def _child(tree: Path, backend: str, ports: int, polls: int, columnar: bool = False,
           per_batch: int = 1) -> dict[str, Any]:
    """One tree and backend on a fresh ledger: per-poll decode and write times."""
    sys.path.insert(0, str(tree))
    import orjson

    from ledger.embedded import EmbeddedLedger
    from ledger.ingest import decode_record
    from runtime import collector
    from runtime.settings import load_settings

    collector.tune(load_settings().gc_young_threshold)  # as `ledger serve --ingest` runs

    base = Path(tempfile.mkdtemp(prefix="ledger-ingest-"))
    ledger = EmbeddedLedger(base / "ledger")
    ledger.migrate()
    server = endpoint = None
    writer: Any = ledger
    if backend == "server":
        from ledger.http import LedgerHTTPServer
        from ledger.server import ServerLedger

        server = LedgerHTTPServer(ledger, port=0, allow_writes=True)
        writer = ServerLedger(server.start())
        endpoint = server
    start_ms = (int(time.time()) - 3600) * 1000
    devices = (ports + PORTS_PER_DEVICE - 1) // PORTS_PER_DEVICE

    def poll(k: int) -> tuple[list[bytes], int]:
        ts = start_ms + k * 60_000
        out = []
        for d in range(devices):
            samples = [{"port": p, "symbol_errors": k * (p % 3), "link_error_recovery": 0,
                        "link_downed": 0, "rcv_errors": k, "rcv_remote_phys_errors": 0,
                        "xmit_discards": 0, "xmit_wait": k * 1000 + p,
                        "local_link_integrity_errors": 0, "excessive_buffer_overrun": 0,
                        "fec_corrected": k * 37 + p, "fec_uncorrectable": 0,
                        "raw_ber": 1e-12, "effective_ber": 1e-15, "width": "4X",
                        "speed": "NDR", "module_temp_c": 45.5, "rx_power_dbm": -2.3}
                       for p in range(1, PORTS_PER_DEVICE + 1)]
            message = {
                "v": 1, "kind": "counters", "id": f"bench-{d}-{ts}", "ts": ts,
                "fabric": "bench", "source": "sim",
                "device": f"leaf-su{d // RAILS + 1:02d}-r{d % RAILS}", "ports": samples}
            if columnar:  # the same samples as a counter_columns message
                from schemas import columns_wire

                message = columns_wire(message)
            out.append(orjson.dumps(message))
        return out, ts + 1000  # received a second after the poll

    walls, cpus, decode_cpu, write_cpu = [], [], [], []
    n = 0
    try:
        for k in range(polls + 1):
            # a write of ``per_batch`` polls, as the ingest catching up takes them
            raw, received = [], 0
            for j in range(per_batch):
                more, received = poll(k * per_batch + j)
                raw += more
            t0, c0 = time.perf_counter(), time.process_time()
            events = [decode_record("fabric.counters", r, received) for r in raw]
            c1 = time.process_time()
            n = 0
            for e in events:
                n += getattr(e, "port_count", None) or len(e.ports)  # type: ignore[union-attr]
            writer.write(events)
            wall, c2 = time.perf_counter() - t0, time.process_time()
            if k == 0:
                continue  # the warm-up: every port's first sample
            walls.append(n / wall)
            cpus.append(n / (c2 - c0))
            decode_cpu.append(c1 - c0)
            write_cpu.append(c2 - c1)
        stored = ledger.query("SELECT count() AS n FROM counter_samples FINAL")[0]["n"]
        if stored != n * (polls + 1):
            raise SystemExit(f"stored {stored} samples, wrote {n * (polls + 1)}")
    finally:
        if endpoint is not None:
            writer.close()
            endpoint.stop()
        ledger.close()
    return {"port_samples_per_write": n,
            "port_samples_per_s_median": round(statistics.median(walls)),
            "port_samples_per_cpu_s_median": round(statistics.median(cpus)),
            "decode_cpu_s_median": round(statistics.median(decode_cpu), 3),
            "write_cpu_s_median": round(statistics.median(write_cpu), 3)}


def _run_child(tree: Path, backend: str, ports: int, polls: int, columnar: bool = False,
               per_batch: int = 1) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run(  # noqa: S603 - this script, our own arguments
        [sys.executable, __file__, "--child", "--tree", str(tree), "--backend", backend,
         "--ports", str(ports), "--polls", str(polls), "--per-batch", str(per_batch),
         *(["--columnar"] if columnar else [])],
        env=env, check=True, capture_output=True, text=True, cwd=tree)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=False,
                        help="a tree of the code before the change (git archive main)")
    parser.add_argument("--ports", type=int, default=100_000)
    parser.add_argument("--polls", type=int, default=4)
    parser.add_argument("--per-batch", type=int, default=1,
                        help="polls per write (the ingest catching up writes a few at once)")
    parser.add_argument("--rows", action=argparse.BooleanOptionalAction, default=True,
                        help="also run both trees on row messages")
    parser.add_argument("--scenario", default="ledger_ingest",
                        help="the result's name in benchmarks/results/")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--backends", default="embedded,server")
    parser.add_argument("--columnar", action="store_true",
                        help="also run both trees on counter_columns messages")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tree", type=Path, default=ROOT, help=argparse.SUPPRESS)
    parser.add_argument("--backend", default="embedded", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.tree, args.backend, args.ports, args.polls,  # noqa: T201
                                args.columnar, args.per_batch)))
        return
    if args.before is None or not (args.before / "ledger" / "base.py").is_file():
        parser.error("--before must be a tree of the code before the change")
    sys.path.insert(0, str(ROOT))
    from benchmarks._machine import save_and_print

    trees = {"before": args.before.resolve(), "after": ROOT} if args.rows else {}
    if args.columnar:
        trees["before_columns"] = args.before.resolve()
        trees["after_columns"] = ROOT
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    load_before = os.getloadavg()
    for backend in args.backends.split(","):
        runs[backend] = {name: [] for name in trees}
        for _ in range(args.repeat):
            for name, tree in trees.items():
                result = _run_child(tree, backend, args.ports, args.polls,
                                    name.endswith("_columns"), args.per_batch)
                print(f"{backend} {name}: {result}", flush=True)  # noqa: T201
                runs[backend][name].append(result)
    figures: dict[str, Any] = {"ports": args.ports, "polls": args.polls,
                               "per_batch": args.per_batch, "repeat": args.repeat,
                               "target_port_samples_per_s": 250_000}
    for backend, by_tree in runs.items():
        best = {name: max(r, key=lambda x: x["port_samples_per_cpu_s_median"])
                for name, r in by_tree.items()}
        figures[backend] = {**{name: best[name] for name in trees}, "runs": by_tree}
        for form, suffix in (("", ""), ("columns_", "_columns")):
            after, before = best.get(f"after{suffix}"), best.get(f"before{suffix}")
            if after is None or before is None:
                continue
            figures[backend][f"{form}ratio_per_s"] = round(
                after["port_samples_per_s_median"] / before["port_samples_per_s_median"], 2)
            figures[backend][f"{form}ratio_per_cpu_s"] = round(
                after["port_samples_per_cpu_s_median"]
                / before["port_samples_per_cpu_s_median"], 2)
    figures["loadavg_before"] = [round(x, 2) for x in load_before]
    figures["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    save_and_print(args.scenario, figures)


if __name__ == "__main__":
    main()
