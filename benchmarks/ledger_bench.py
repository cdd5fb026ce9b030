"""Ledger benchmark: counters ingest rate, and the cookbook's latency over a day of history.

1. Ingest: ``Ledger.write`` of contract ``Counters`` events (64-port batches per device,
   ``--ports`` port-samples per poll) into the embedded ledger, everything included: the
   event -> row mapping, encoding, the engine's insert, the delta view and the rollup views.
   The first poll (which finds no previous samples) is a warm-up and not timed.
2. History: a day (``--hours``) of ``--ports`` ports at ``--interval`` seconds generated
   inside the engine (``INSERT ... SELECT FROM numbers()``, straight into counter_samples
   with the deltas it would have computed, so every rollup view runs), plus port events,
   detections, runbook actions, probes and two topology snapshots at realistic rates.
3. Latency: each cookbook query over that history, ``--repeat`` runs, min and median.

    .venv/bin/python benchmarks/ledger_bench.py            # the full day: 144M samples
    .venv/bin/python benchmarks/ledger_bench.py --hours 1  # a quick, scaled-down run
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._machine import command_line, write_result  # noqa: E402
from ledger.embedded import EmbeddedLedger  # noqa: E402
from ledger.queries import cookbook, params_for  # noqa: E402
from schemas import COUNTER_FIELDS, Counters, PortSample  # noqa: E402

PORTS_PER_DEVICE = 64
RAILS = 8


def device_name(d: int) -> str:
    return f"leaf-su{d // RAILS + 1:02d}-r{d % RAILS}"


def device_sql(port_index: str) -> str:
    """SQL for the device name of the port numbered ``port_index`` (as device_name)."""
    return leaf_sql(f"intDiv({port_index}, {PORTS_PER_DEVICE})")


def leaf_sql(d: str) -> str:
    """SQL for the name of leaf number ``d``: ``leaf-su01-r0`` (f"{su:02d}", never cut)."""
    su = f"intDiv({d}, {RAILS}) + 1"
    return (f"concat('leaf-su', if({su} < 10, '0', ''), toString({su}), '-r', "
            f"toString({d} % {RAILS}))")


def counters_poll(ports: int, ts: int, k: int) -> list[Counters]:
    events = []
    for d in range((ports + PORTS_PER_DEVICE - 1) // PORTS_PER_DEVICE):
        samples = [PortSample(port=p, symbol_errors=k * (p % 3), link_error_recovery=0,
                              link_downed=0, rcv_errors=k, rcv_remote_phys_errors=0,
                              xmit_discards=0, xmit_wait=k * 1000 + p,
                              local_link_integrity_errors=0, excessive_buffer_overrun=0,
                              fec_corrected=k * 37 + p, fec_uncorrectable=0,
                              raw_ber=1e-12, effective_ber=1e-15, width="4X", speed="NDR",
                              module_temp_c=45.5, rx_power_dbm=-2.3)
                   for p in range(1, PORTS_PER_DEVICE + 1)]
        events.append(Counters(id=f"bench-{d}-{ts}", ts=ts, fabric="bench", source="sim",
                               device=device_name(d), ports=samples))
    return events


def bench_ingest(ledger: EmbeddedLedger, ports: int, polls: int, start_ms: int
                 ) -> dict[str, Any]:
    warm = counters_poll(ports, start_ms, 0)  # warm-up: every port's first sample
    ledger.write(warm)
    rates = []
    cpu_rates = []
    samples = sum(len(e.ports) for e in warm)
    for k in range(1, polls + 1):
        events = counters_poll(ports, start_ms + k * 60_000, k)
        n = sum(len(e.ports) for e in events)
        t0, c0 = time.perf_counter(), time.process_time()
        ledger.write(events)
        rates.append(n / (time.perf_counter() - t0))
        # CPU seconds of the whole process (engine threads included): what the rate would
        # be with a core to itself, on a machine shared with other work.
        cpu_rates.append(n / (time.process_time() - c0))
        samples += n
    stored = ledger.query("SELECT count() AS n FROM counter_samples WHERE fabric = 'bench'")
    assert stored[0]["n"] == samples, (stored, samples)
    return {"batch_port_samples": len(warm) * PORTS_PER_DEVICE, "polls": polls,
            "port_samples_per_s_median": round(statistics.median(rates)),
            "port_samples_per_s_best": round(max(rates)),
            "port_samples_per_s_worst": round(min(rates)),
            "port_samples_per_cpu_s_median": round(statistics.median(cpu_rates))}


def generate_history(ledger: EmbeddedLedger, ports: int, hours: int, interval_s: int,
                     start_ms: int) -> dict[str, Any]:
    """A fabric's day, generated in the engine; returns row counts and the time it took."""
    steps = hours * 3600 // interval_s
    devices = (ports + PORTS_PER_DEVICE - 1) // PORTS_PER_DEVICE
    start_s = start_ms / 1000
    raw = ", ".join(COUNTER_FIELDS)
    # Port p = n % ports, poll k = n / ports. 1 % of ports have errors (3 per interval),
    # everyone corrects FEC; the deltas are the ones the delta view would compute.
    counter_sql = f"""
        INSERT INTO counter_samples (id, ts, fabric, source, device, port, {raw}, raw_ber,
            effective_ber, module_temp_c, rx_power_dbm, width, speed, interval_ms, reset_mask,
            d_symbol_errors, d_rcv_errors, d_fec_corrected, d_xmit_wait)
        SELECT concat('h-', toString(k)) AS id,
               toDateTime64({start_s} + k * {interval_s}, 3, 'UTC') AS ts,
               'bench', 'sim',
               {leaf_sql("d")} AS device,
               toUInt16(p % {PORTS_PER_DEVICE} + 1) AS port,
               if(p % 100 = 7, k * 3, 0), 0, 0, 0, 0, 0, k * 1000, 0, 0, k * 40, 0, 0, 0,
               0, 0, 0, 0, 0, 0,
               1e-12, 1e-15, 45.5, -2.3, '4X', 'NDR',
               if(k = 0, 0, {interval_s * 1000}), 0,
               if(k = 0, 0, if(p % 100 = 7, 3, 0)), 0, if(k = 0, 0, 40), if(k = 0, 0, 1000)
        FROM (SELECT number % {ports} AS p, intDiv(number, {ports}) AS k,
                     intDiv(p, {PORTS_PER_DEVICE}) AS d
              FROM numbers({{first:UInt64}}, {{count:UInt64}}))
    """  # noqa: S608 - generated numbers, no input
    t0 = time.perf_counter()
    chunk_steps = max(1, 2_000_000 // ports)
    for first_step in range(0, steps, chunk_steps):
        count_steps = min(chunk_steps, steps - first_step)
        ledger.raw(counter_sql, "CSV", {"first": first_step * ports,
                                        "count": count_steps * ports})
    counters_s = time.perf_counter() - t0
    day_ms = hours * 3_600_000
    t1 = time.perf_counter()
    # Port events: 0.5 % of ports flap, 2 to 9 bounces each, spread over the day.
    ledger.execute(f"""
        INSERT INTO port_events (id, ts, fabric, source, device, port, state, trap)
        SELECT concat('pe-', toString(number), if(s = 0, '-d', '-u')),
               toDateTime64({start_s} + (cityHash64(p, b) % {day_ms // 1000}) + s * 20, 3,
                            'UTC'),
               'bench', 'opensm',
               {device_sql("p")},
               toUInt16(p % {PORTS_PER_DEVICE} + 1), if(s = 0, 'down', 'up'), 128
        FROM (SELECT number, (number * 7919) % {ports} AS p,
                     arrayJoin(range(2 + number % 8)) AS b,
                     arrayJoin([0, 1]) AS s
              FROM numbers({ports // 200}))
    """)  # noqa: S608 - generated numbers, no input
    # Detections (flap for each flapper, error_rate for the erroring ports), runbooks for
    # 50 ports (isolate, a ladder rung, return for 40 of them), probes per rail every 10 min.
    ledger.execute(f"""
        INSERT INTO detections (id, ts, fabric, source, device, port, detection, severity,
                                action, episode, evidence)
        SELECT concat('det-', toString(number)),
               toDateTime64({start_s} + number * 37 % {day_ms // 1000}, 3, 'UTC'), 'bench',
               'streams', {device_sql("(number * 100 + 7)")},
               toUInt16((number * 100 + 7) % {PORTS_PER_DEVICE} + 1),
               if(number % 50 = 0, 'miswire', 'error_rate'), 'warning', 'ticket',
               concat('ep-', toString(number)), '{{"rate": 180}}'
        FROM numbers({max(1, ports // 100)})
    """)  # noqa: S608 - generated numbers, no input
    ledger.execute(f"""
        INSERT INTO actions (id, ts, fabric, source, device, port, workflow_id, step, actor,
                             outcome, before, after, dry_run)
        SELECT concat('act-', toString(w), '-', step), ts, 'bench', 'fabricwatch', device,
               port, concat('remediate/bench/', device, ':', toString(port)), step,
               'fabricwatch', 'done', '{{}}', '{{}}', 0
        FROM (SELECT number AS w,
                     {device_sql("(number * 997)")} AS device,
                     toUInt16(number * 997 % {PORTS_PER_DEVICE} + 1) AS port,
                     arrayJoin(if(number < 40,
                                  ['isolate', concat('ladder:', ['clean-and-reseat', 'swap-optic',
                                   'swap-cable'][number % 3 + 1]), 'return'],
                                  ['isolate'])) AS step,
                     toDateTime64({start_s} + number * 600
                                  + indexOf(['isolate', 'ladder:clean-and-reseat',
                                             'ladder:swap-optic', 'ladder:swap-cable', 'return'],
                                            step) * 3600, 3, 'UTC') AS ts
              FROM numbers(50))
    """)  # noqa: S608 - generated numbers, no input
    ledger.execute(f"""
        INSERT INTO probes (id, ts, fabric, source, probe, src, dst, rail, size_bytes, bw_gbps)
        SELECT concat('pr-', toString(number)),
               toDateTime64({start_s} + intDiv(number, {RAILS}) * 600, 3, 'UTC'), 'bench',
               'probe', 'ib_write_bw', 'node0001', 'node0002', toUInt16(number % {RAILS}),
               1048576, if(number % {RAILS} = 3, 260.0, 370.0 - (number % 7))
        FROM numbers({hours * 6 * RAILS})
    """)  # noqa: S608 - generated numbers, no input
    for snap, offset_s in (("snap-1", 0), ("snap-2", hours * 3600 // 2)):
        ledger.execute(f"""
            INSERT INTO topology_snapshots (snapshot_id, ts, fabric, source, links)
            VALUES ('{snap}', toDateTime64({start_s + offset_s}, 3, 'UTC'), 'bench',
                    'ibnetdiscover', {ports})
        """)  # noqa: S608 - generated numbers, no input
        ledger.execute(f"""
            INSERT INTO topology_links (snapshot_id, ts, fabric, device, port, peer_device,
                                        peer_port, width, speed, end)
            SELECT '{snap}', toDateTime64({start_s + offset_s}, 3, 'UTC'), 'bench',
                   {device_sql("number")},
                   toUInt16(number % {PORTS_PER_DEVICE} + 1),
                   concat('node', leftPad(toString(number), 6, '0'), '/mlx5_0'), 1, '4X', 'NDR', 'a'
            FROM numbers({ports})
        """)  # noqa: S608 - generated numbers, no input
    ledger.execute(f"""
        INSERT INTO device_location (fabric, device, su, rail, ts)
        SELECT 'bench', {leaf_sql("number")},
               toUInt16(intDiv(number, {RAILS}) + 1), toUInt16(number % {RAILS}),
               toDateTime64({start_s}, 3, 'UTC')
        FROM numbers({devices})
    """)  # noqa: S608 - generated numbers, no input
    others_s = time.perf_counter() - t1
    counts = {r["t"]: r["n"] for r in ledger.query("""
        SELECT 'counter_samples' AS t, count() AS n FROM counter_samples WHERE fabric = 'bench'
        UNION ALL SELECT 'counter_hourly', count() FROM counter_hourly WHERE fabric = 'bench'
        UNION ALL SELECT 'port_events', count() FROM port_events WHERE fabric = 'bench'
        UNION ALL SELECT 'detections', count() FROM detections WHERE fabric = 'bench'
        UNION ALL SELECT 'actions', count() FROM actions WHERE fabric = 'bench'
        UNION ALL SELECT 'topology_links', count() FROM topology_links WHERE fabric = 'bench'
    """)}
    return {"rows": counts, "generate_counters_s": round(counters_s, 1),
            "generate_counter_rows_per_s": round(steps * ports / counters_s),
            "generate_other_s": round(others_s, 1)}


def bench_queries(ledger: EmbeddedLedger, start_ms: int, hours: int, repeat: int
                  ) -> dict[str, Any]:
    since = dt.datetime.fromtimestamp(start_ms / 1000, dt.UTC)
    until = since + dt.timedelta(hours=hours)
    # the day has no job placements: job_impact runs, over none (its rows say so)
    given: dict[str, object] = {"since": since, "until": until, "device": "leaf-su01-r0",
                                "port": 8, "job": "bench-job-0001"}
    out: dict[str, Any] = {}
    for name, query in cookbook().items():
        params = params_for(query, given, "bench")
        times = []
        rows: list[dict[str, Any]] = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            rows = ledger.query(query.sql, params)
            times.append(time.perf_counter() - t0)
        out[name] = {"min_ms": round(min(times) * 1000, 1),
                     "median_ms": round(statistics.median(times) * 1000, 1),
                     "rows": len(rows)}
        print(f"  {name}: min {out[name]['min_ms']} ms, median {out[name]['median_ms']} ms, "
              f"{len(rows)} rows", flush=True)
    t0 = time.perf_counter()
    ledger.query("SELECT * FROM port_ledger WHERE fabric = 'bench' AND device = 'leaf-su01-r0'")
    out["port_ledger_one_device"] = {"min_ms": round((time.perf_counter() - t0) * 1000, 1)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ports", type=int, default=100_000)
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--interval", type=int, default=60)
    parser.add_argument("--polls", type=int, default=5, help="timed ingest batches")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="ledger folder (default: tmp)")
    parser.add_argument("--keep", action="store_true", help="keep the ledger folder")
    args = parser.parse_args()
    base = args.dir or Path(tempfile.mkdtemp(prefix="ledger-bench-"))
    ledger = EmbeddedLedger(base / "ledger")
    load_before = os.getloadavg()
    try:
        ledger.migrate()
        now_h = int(time.time()) // 3600 * 3600 * 1000
        start_ms = now_h - args.hours * 3_600_000
        print(f"ingest: {args.polls} polls of {args.ports} port-samples", flush=True)
        ingest = bench_ingest(ledger, args.ports, args.polls, start_ms - 3_600_000)
        print(f"  {ingest}", flush=True)
        # The ingest fabric is separate ('bench' too, earlier hour): drop it so the history
        # below is exactly the generated day.
        ledger.execute("TRUNCATE TABLE counter_samples")
        ledger.execute("TRUNCATE TABLE counter_hourly")
        ledger.execute("TRUNCATE TABLE counter_last")
        ledger.execute("TRUNCATE TABLE port_state")
        print(f"history: {args.hours} h x {args.ports} ports every {args.interval} s", flush=True)
        history = generate_history(ledger, args.ports, args.hours, args.interval, start_ms)
        print(f"  {history}", flush=True)
        # counter_hourly folded into a row per port-hour, as a running ledger's merges leave
        # all but its last hours (migration 013: the day's bulk inserts store a row per
        # sample); then measure on what is there, no merge running
        ledger.execute("OPTIMIZE TABLE counter_hourly FINAL")
        ledger.execute("SYSTEM STOP MERGES")
        print("cookbook latency:", flush=True)
        queries = bench_queries(ledger, start_ms, args.hours, args.repeat)
        ledger.execute("SYSTEM START MERGES")
        size = ledger.query("SELECT formatReadableSize(sum(bytes_on_disk)) AS s, "
                            "sum(rows) AS r, count() AS parts FROM system.parts WHERE active "
                            "AND table = 'counter_samples'")
    finally:
        ledger.close()
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    target_ok = all(q["min_ms"] < 1000 for q in queries.values())
    figures = {
        "ports": args.ports, "hours": args.hours, "interval_s": args.interval,
        "full_day_at_100k": args.ports >= 100_000 and args.hours >= 24,
        "ingest": ingest, "ingest_target_port_samples_per_s": 200_000,
        "history": history, "counter_samples_on_disk": size[0]["s"],
        "counter_samples_parts_at_query_time": size[0]["parts"],
        "queries": queries, "query_target_ms": 1000, "all_queries_under_target": target_ok,
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    }
    print(f"wrote {write_result('ledger', figures, command_line())}")


if __name__ == "__main__":
    main()
