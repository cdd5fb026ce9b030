"""The ledger's counters write in its two parts, before and after, each tree in its own process.

    git archive 53ce606 | tar -x -C /tmp/before
    .venv/bin/python benchmarks/ledger_write_parts.py --before /tmp/before --rounds 3

What ``benchmarks/ledger_ingest.py`` measures as one "write", apart:

- ``tables``: ``ledger.columnar.counter_tables`` and the Arrow stream bytes for a batch of
  ``--per-batch`` polls of ``--ports`` ports in 64-port ``counter_columns`` messages (the
  batch's split into inserts included), CPU seconds, the least of 5;
- ``engine``: the engine's insert alone (``insert_arrow`` of prebuilt one-poll tables into
  ``counter_ingest`` of a fresh embedded ledger migrated by that tree: the delta view and
  every view behind it), CPU seconds of the process (engine threads included) per insert,
  the median of ``--inserts`` after a first that finds no previous samples.

The trees run in turns, ``--rounds`` times; per tree the median over rounds.
"""

from __future__ import annotations

import argparse
import gc
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


def _child(ports: int, per_batch: int, inserts: int) -> dict[str, Any]:
    import orjson

    from ledger.base import COUNTER_INSERT_SETTINGS
    from ledger.columnar import arrow_stream, counter_tables
    from ledger.embedded import EmbeddedLedger
    from ledger.ingest import decode_record
    from schemas import columns_wire

    gc.set_threshold(50_000, 10, 100)  # the ingest's collector settings (runtime.collector)
    devices = (ports + PORTS_PER_DEVICE - 1) // PORTS_PER_DEVICE
    start_ms = (int(time.time()) - 3600) * 1000

    def poll(k: int) -> list[Any]:
        ts = start_ms + k * 60_000
        out = []
        for d in range(devices):
            samples = [{"port": p, "symbol_errors": k * (p % 3), "rcv_errors": k,
                        "xmit_wait": k * 1000 + p, "fec_corrected": k * 37 + p,
                        "raw_ber": 1e-12, "width": "4X", "speed": "NDR",
                        "module_temp_c": 45.5, "rx_power_dbm": -2.3}
                       for p in range(1, PORTS_PER_DEVICE + 1)]
            message = {"v": 1, "kind": "counters", "id": f"p-{d}-{ts}", "ts": ts,
                       "fabric": "bench", "source": "sim",
                       "device": f"leaf-su{d // RAILS + 1:02d}-r{d % RAILS}",
                       "ports": samples}
            out.append(decode_record("fabric.counters", orjson.dumps(columns_wire(message)),
                                     ts + 1000))
        return out

    batch = [e for k in range(per_batch) for e in poll(k)]
    tables_cpu = []
    for _ in range(5):
        c0 = time.process_time()
        parts = counter_tables(batch)
        for table in parts:
            arrow_stream(table)
        tables_cpu.append(time.process_time() - c0)
    polls = [counter_tables(poll(k)) for k in range(inserts + 1)]
    ledger = EmbeddedLedger(Path(tempfile.mkdtemp(prefix="ledger-parts-")) / "ledger")
    try:
        versions = ledger.migrate()
        engine_cpu = []
        for k, tables in enumerate(polls):
            c0 = time.process_time()
            for table in tables:
                ledger.insert_arrow("counter_ingest", table, COUNTER_INSERT_SETTINGS)
            if k:
                engine_cpu.append(time.process_time() - c0)
        stored = ledger.query("SELECT count() AS n FROM counter_samples FINAL")[0]["n"]
    finally:
        ledger.close()
    return {"samples_per_batch": sum(t.num_rows for t in parts), "tables": len(parts),
            "tables_cpu_s": round(min(tables_cpu), 3),
            "engine_cpu_s_per_insert": round(statistics.median(engine_cpu), 3),
            "samples_per_insert": polls[1][0].num_rows, "migrations": max(versions or [0]),
            "stored": stored}


def _run(tree: Path, args: argparse.Namespace) -> dict[str, Any]:
    out = subprocess.run(  # noqa: S603 - this script, our own arguments
        [sys.executable, __file__, "--child", "--ports", str(args.ports),
         "--per-batch", str(args.per_batch), "--inserts", str(args.inserts)],
        env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tree, check=True,
        capture_output=True, text=True)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="a tree of the code before the change")
    parser.add_argument("--ports", type=int, default=100_000)
    parser.add_argument("--per-batch", type=int, default=3)
    parser.add_argument("--inserts", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scenario", default="ledger_write_parts")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.ports, args.per_batch, args.inserts)))  # noqa: T201
        return
    if args.before is None or not (args.before / "ledger" / "columnar.py").is_file():
        parser.error("--before must be a tree of the code before the change")
    sys.path.insert(0, str(ROOT))
    from benchmarks._machine import save_and_print

    trees = {"before": args.before.resolve(), "after": ROOT}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    load_before = os.getloadavg()
    for _ in range(args.rounds):
        for name, tree in trees.items():
            result = _run(tree, args)
            print(f"{name}: {result}", flush=True)  # noqa: T201
            runs[name].append(result)
    figures: dict[str, Any] = {"ports": args.ports, "per_batch": args.per_batch,
                               "inserts": args.inserts, "rounds": args.rounds, "runs": runs}
    for part in ("tables_cpu_s", "engine_cpu_s_per_insert"):
        medians = {name: statistics.median(r[part] for r in rs) for name, rs in runs.items()}
        figures[part] = {**medians, "after_over_before": round(medians["after"]
                                                               / medians["before"], 2)}
    figures["loadavg_before"] = [round(x, 2) for x in load_before]
    figures["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    save_and_print(args.scenario, figures)


if __name__ == "__main__":
    main()
