"""Benchmark: flap detection delay, a real Prometheus scrape-and-rule pipeline against fabricwatch.

Run (real time, about 30 min): .venv/bin/python benchmarks/scrape_vs_stream.py --minutes 30
Short version:                 .venv/bin/python benchmarks/scrape_vs_stream.py --minutes 4
Rule engine over 20,000 episodes: .venv/bin/python benchmarks/scrape_vs_stream.py --backfill

Scenario 3. Seeded flap episodes: one host cable each (the ``su`` preset's leaf-to-HCA
links, a different cable per episode), ``3..5`` bounces with gaps log-uniform between
``--min-gap`` and ``--max-gap`` seconds; the flap is real from the third down, at ``t3``. Both
pipelines see the same simulator, in real time (``sim.run.run``, 1 s steps):

* **Prometheus**: the simulator's counters on ``/metrics`` the way the InfiniBand exporters
  show them (``sim.exporter``: ``infiniband_{switch,hca}_port_link_downed_total`` and the
  error counters per port, refreshed every step), a real Prometheus v0.316.0 scraping it
  every 15 s and evaluating the flap rules a Prometheus user writes every 15 s
  (``changes(...[30m]) > 2`` and ``increase(...[30m]) > 2.5``; ``increase`` extrapolates,
  so ``> 2`` fires on two downs), with ``for: 0s``, routed to a real Alertmanager v0.35.0
  whose ``/api/v2/alerts`` is polled every 0.5 s. Delay: the alert first listed there minus
  ``t3`` (either cable end's alert counts).
* **fabricwatch**: the simulator's traps and counters on a real Kafka broker, one real
  ``fabricwatch worker`` (no ledger), its ``flap`` detections read from
  ``fabric.detections``. Delay: the detection read minus ``t3`` (either end).

An episode is missed by a pipeline when nothing arrived by the end of the run (at least
``TAIL_S`` after its ``t3``). The simulator stamps a trap at its bounce time and publishes
it with its step, so up to one step (1 s) of each fabricwatch delay is the simulator's own.

``--backfill``: the 20,000-episode variant with Prometheus's own engine instead of real
time. Each episode becomes one series (its 15 s scrapes, at a random scrape phase, from 31
minutes before its first down to 3 minutes after its last), written as OpenMetrics,
turned into TSDB blocks by ``promtool tsdb create-blocks-from openmetrics`` and loaded by a
real Prometheus server; the rules' expressions are then evaluated by that server
(``/api/v1/query_range``, 15 s steps, i.e. the rule group's evaluation grid) and each
episode's first firing evaluation at or after ``t3`` is its delay. Writes
``results/scrape_vs_stream_backfill.json`` (the real-time run writes
``results/scrape_vs_stream.json``, a run shorter than 30 min
``results/scrape_vs_stream_<N>min.json``).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import math
import os
import random
import statistics
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._machine import save_and_print  # noqa: E402

SCRAPE_S = 15.0
EVAL_S = 15.0
RANGE_S = 1800.0  # the rules' [30m], the shipped policy's flap window
LEAD_S = 60.0  # Prometheus scrapes the quiet fabric for a minute before the first episode
TAIL_S = 150.0  # after the last t3: ten scrapes and evaluations
POLL_S = 0.5
STEP_S = 1.0
DOWN_MS = 500  # each bounce's down time
ONCE_MS = 10**9  # 11.6 days: a flap fault's next bounce never comes within a run
RULES = {"changes": "FabricFlapChanges", "increase": "FabricFlapIncrease"}
LINK_DOWNED = ("infiniband_switch_port_link_downed_total", "infiniband_hca_port_link_downed_total")


def rules_yaml() -> str:
    """The flap rules as a Prometheus user writes them over an InfiniBand exporter."""
    sw, hca = LINK_DOWNED
    return f"""\
groups:
  - name: infiniband-flap
    interval: {EVAL_S:.0f}s
    rules:
      - alert: {RULES["changes"]}
        expr: changes({sw}[30m]) > 2 or changes({hca}[30m]) > 2
        labels: {{severity: warning}}
        annotations: {{summary: "link flapping: more than 2 downs in 30 minutes"}}
      - alert: {RULES["increase"]}
        expr: increase({sw}[30m]) > 2.5 or increase({hca}[30m]) > 2.5
        labels: {{severity: warning}}
        annotations: {{summary: "link flapping: more than 2 downs in 30 minutes"}}
"""


def prometheus_yaml(exporter_port: int, alertmanager_port: int) -> str:
    return f"""\
global:
  scrape_interval: {SCRAPE_S:.0f}s
  scrape_timeout: 10s
  evaluation_interval: {EVAL_S:.0f}s
rule_files: [rules.yaml]
alerting:
  alertmanagers:
    - static_configs: [{{targets: ["127.0.0.1:{alertmanager_port}"]}}]
scrape_configs:
  - job_name: infiniband
    static_configs: [{{targets: ["127.0.0.1:{exporter_port}"]}}]
"""


def pct(xs: Sequence[float], q: float) -> float | None:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else None


def summary(xs: Sequence[float], missed: int, total: int) -> dict[str, Any]:
    def r(v: float | None) -> float | None:
        return None if v is None else round(v, 3)

    return {"episodes": total, "detected": len(xs), "missed": missed,
            "p50_s": r(pct(xs, 0.5)), "p90_s": r(pct(xs, 0.9)), "p99_s": r(pct(xs, 0.99)),
            "min_s": r(min(xs) if xs else None), "max_s": r(max(xs) if xs else None),
            "mean_s": r(statistics.fmean(xs) if xs else None)}


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 1) if a is not None and b else None


# ----------------------------------------------------------------- episodes (pure)


@dataclass(frozen=True)
class Episode:
    n: int
    downs_s: tuple[float, ...]  # after the run's start

    @property
    def t3(self) -> float:
        return self.downs_s[2]


def plan(count: int, seed: int, run_s: float, min_gap: float, max_gap: float) -> list[Episode]:
    """``count`` seeded episodes, every down inside ``[LEAD_S, run_s - TAIL_S]``."""
    rng = random.Random(seed)  # noqa: S311 - a benchmark's seeded schedule
    lo, hi = math.log(min_gap), math.log(max_gap)
    out = []
    for n in range(count):
        gaps = [math.exp(rng.uniform(lo, hi)) for _ in range(rng.randint(3, 5) - 1)]
        span = sum(gaps)
        latest = run_s - TAIL_S - span
        if latest < LEAD_S:
            raise ValueError(f"a {span:.0f} s episode does not fit a {run_s:.0f} s run: "
                             "lower --max-gap or raise --minutes")
        downs = [rng.uniform(LEAD_S, latest)]
        for g in gaps:
            downs.append(downs[-1] + g)
        out.append(Episode(n, tuple(round(d, 3) for d in downs)))
    return out


# ----------------------------------------------------------------- real time


def get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - our loopback URL
        return orjson.loads(resp.read())


async def realtime(args: argparse.Namespace) -> dict[str, Any]:
    from aiokafka import AIOKafkaConsumer

    from benchmarks.streams_bench import WorkerProc, broker
    from collectors.publish import Publisher
    from fabricwatch.alertmanager import LocalAlertmanager
    from fabricwatch.alertmanager import build as build_alertmanager
    from fabricwatch.prometheus import LocalPrometheus
    from fabricwatch.prometheus import build as build_prometheus
    from fabricwatch.stack_config import free_ports
    from schemas.topics import DETECTIONS
    from sim.exporter import Exporter
    from sim.faults import Fault
    from sim.run import KafkaSink, run, start_ms_for
    from sim.telemetry import Simulator, StepOutput
    from sim.topology import generate

    load_start = os.getloadavg()[0]
    run_s = args.minutes * 60.0
    max_gap = min(args.max_gap, (run_s - LEAD_S - TAIL_S) / 6)
    fabric = generate("su")
    cables = [x for x in fabric.links if x.tier == "host"]
    random.Random(args.seed).shuffle(cables)  # noqa: S311 - seeded choice of cables
    count = args.episodes or min(len(cables), max(8, round(240 * args.minutes / 30)))
    if count > len(cables):
        raise SystemExit(f"at most {len(cables)} episodes (one per host cable of the su preset)")
    episodes = plan(count, args.seed, run_s, min(args.min_gap, max_gap), max_gap)
    cable_of: dict[tuple[str, int], int] = {}
    faults = []
    for ep, cable in zip(episodes, cables, strict=False):
        for end in cable.ends():
            cable_of[end] = ep.n
        for d in ep.downs_s:  # one flap fault per down, at the seeded times; a flap's
            # later bounces (count defaults to 4) go ONCE_MS apart, long after the run
            faults.append(Fault(kind="flap", device=cable.b_device, port=cable.b_port,
                                at_ms=round(d * 1000), every_ms=ONCE_MS, down_ms=DOWN_MS))

    prom_bin, _tool = build_prometheus()
    am_bin = build_alertmanager()
    fw_at: dict[int, float] = {}
    fw_event_delay: dict[int, float] = {}
    am_at: dict[str, dict[int, float]] = {rule: {} for rule in RULES}
    am_active_at: dict[str, dict[int, float]] = {rule: {} for rule in RULES}
    alert_rule = {name: rule for rule, name in RULES.items()}
    with tempfile.TemporaryDirectory(prefix="scrape-vs-stream-") as tmp:
        state = Path(tmp)
        with broker(None, state) as bootstrap:
            app_id = f"svs-{uuid.uuid4().hex[:6]}"
            worker = WorkerProc(bootstrap, state, app_id, ledger=False)
            am_port, prom_port = free_ports(2)
            am = LocalAlertmanager(am_bin, am_port, state / "alertmanager")
            exporter = Exporter().start()
            prom = LocalPrometheus(prom_bin, prom_port, state / "prometheus",
                                   prometheus_yaml(exporter.port, am_port),
                                   rules={"rules.yaml": rules_yaml()})
            try:
                await asyncio.to_thread(worker.wait_ready)
                am.start()
                prom.start()  # scrapes an empty exposition until the simulator starts
                consumer = AIOKafkaConsumer(DETECTIONS.name, bootstrap_servers=bootstrap,
                                            auto_offset_reset="latest", group_id=None)
                await consumer.start()
                await consumer.getmany(timeout_ms=1000)  # positioned at the end
                stop = asyncio.Event()

                async def read_detections() -> None:
                    while not stop.is_set():
                        batch = await consumer.getmany(timeout_ms=100)
                        now = time.time()
                        for records in batch.values():
                            for rec in records:
                                det = orjson.loads(rec.value or b"{}")
                                if det.get("detection") != "flap":
                                    continue
                                n = cable_of.get((det.get("device"), det.get("port")))
                                if n is not None and n not in fw_at:
                                    fw_at[n] = now
                                    fw_event_delay[n] = det.get("ts", 0) / 1000
                            if worker.proc.poll() is not None:
                                raise RuntimeError("the worker exited: " + worker.log.read_bytes()
                                                   [-2000:].decode(errors="replace"))

                def poll_alertmanager() -> None:
                    alerts = get_json(f"{am.url}/api/v2/alerts")
                    now = time.time()
                    for alert in alerts:
                        labels = alert.get("labels", {})
                        rule = alert_rule.get(labels.get("alertname", ""))
                        device = labels.get("switch") or labels.get("hca")
                        if rule is None or device is None:
                            continue
                        n = cable_of.get((device, int(labels.get("port", 0))))
                        if n is not None and n not in am_at[rule]:
                            am_at[rule][n] = now
                            am_active_at[rule][n] = _parse_time(alert.get("startsAt", ""))

                async def poll() -> None:
                    while not stop.is_set():
                        try:
                            await asyncio.to_thread(poll_alertmanager)
                        except OSError as exc:  # one slow answer on a busy box: poll again
                            misses.append(str(exc))
                        try:
                            await asyncio.wait_for(stop.wait(), POLL_S)
                        except TimeoutError:
                            pass

                misses: list[str] = []
                tasks = [asyncio.create_task(read_detections()), asyncio.create_task(poll())]
                lag: list[float] = []

                def on_step(out: StepOutput) -> None:
                    exporter.update(sim)
                    lag.append(time.time() - out.ts / 1000)  # how far behind its stamps

                t_run = time.perf_counter()
                async with Publisher(bootstrap, client_id="fabricwatch-sim") as publisher:
                    # the simulated clock is the wall clock from here (sim.run.start_ms_for)
                    start_ms = start_ms_for(int(time.time() * 1000), int(STEP_S * 1000))
                    sim = Simulator(fabric, faults=faults, seed=args.seed, start_ms=start_ms,
                                    interval_s=STEP_S, probe_every=0, topology_every=60)
                    exporter.update(sim)
                    stats = await run(sim, KafkaSink(publisher), duration_s=run_s,
                                      speedup=1.0, on_step=on_step)
                    await publisher.flush()
                await asyncio.sleep(2 * POLL_S)
                stop.set()
                await asyncio.gather(*tasks)
                await consumer.stop()
                wall_s = time.perf_counter() - t_run
                scrapes = exporter.scrapes
            finally:
                prom.stop()
                am.stop()
                exporter.stop()
                worker.stop()

    def wall(t_rel: float) -> float:
        return (start_ms + t_rel * 1000) / 1000

    if args.raw:  # every arrival, before any figure is derived from them (run over: may block)
        Path(args.raw).write_bytes(orjson.dumps({  # noqa: ASYNC240
            "start_ms": start_ms, "episodes": [
                {"n": e.n, "downs_s": e.downs_s, "t3_wall": wall(e.t3),
                 "fabricwatch": fw_at.get(e.n), "fabricwatch_ts": fw_event_delay.get(e.n),
                 **{f"alertmanager_{r}": am_at[r].get(e.n) for r in RULES},
                 **{f"starts_at_{r}": am_active_at[r].get(e.n) for r in RULES}}
                for e in episodes]}, option=orjson.OPT_INDENT_2))

    fw = [fw_at[e.n] - wall(e.t3) for e in episodes if e.n in fw_at]
    out: dict[str, Any] = {
        "mode": "realtime", "minutes": args.minutes, "seed": args.seed,
        "episodes": len(episodes), "gap_range_s": [round(min(args.min_gap, max_gap), 3),
                                                   round(max_gap, 3)],
        "bounces": "3..5", "scrape_interval_s": SCRAPE_S, "eval_interval_s": EVAL_S,
        "sim_step_s": STEP_S, "alertmanager_poll_s": POLL_S, "run_wall_s": round(wall_s, 1),
        "sim_behind_steps": stats.behind_steps, "sim_max_step_s": round(stats.max_step_s, 3),
        # a step goes out once its interval has passed: its last trap is up to 1 s old
        "sim_publish_lag_s_p50_max": [_round(pct(lag, 0.5)), _round(max(lag, default=0.0))],
        "exporter_scrapes": scrapes, "alertmanager_polls_failed": len(misses),
        "load_1m_start_end": [round(load_start, 1), round(os.getloadavg()[0], 1)],
        "fabricwatch": {**summary(fw, len(episodes) - len(fw), len(episodes)),
                        "event_time_delay_s_max": round(max(
                            (fw_event_delay[e.n] - wall(e.t3) for e in episodes
                             if e.n in fw_event_delay), default=0.0), 3)},
    }
    for rule, name in RULES.items():
        got = [am_at[rule][e.n] - wall(e.t3) for e in episodes if e.n in am_at[rule]]
        early = sum(1 for x in got if x < 0)
        active = [am_active_at[rule][e.n] - wall(e.t3) for e in episodes
                  if am_active_at[rule].get(e.n)]
        out[f"prometheus_{rule}"] = {
            **summary(got, len(episodes) - len(got), len(episodes)), "alert": name,
            "fired_before_t3": early,
            "rule_eval_delay_p50_s": _round(pct(active, 0.5)),
            "rule_eval_delay_p99_s": _round(pct(active, 0.99))}
        out[f"ratio_{rule}_p50"] = ratio(out[f"prometheus_{rule}"]["p50_s"],
                                         out["fabricwatch"]["p50_s"])
        out[f"ratio_{rule}_p99"] = ratio(out[f"prometheus_{rule}"]["p99_s"],
                                         out["fabricwatch"]["p99_s"])
    out["rules"] = rules_yaml()
    return out


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def _parse_time(text: str) -> float:
    """Alertmanager's RFC 3339 ``startsAt`` as epoch seconds (0 when absent)."""
    from datetime import datetime

    if not text:
        return 0.0
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


# ----------------------------------------------------------------- backfill (20,000 episodes)


def openmetrics(episodes: Sequence[Episode], base_s: float, scrape_offsets: Sequence[float],
                batch: int) -> tuple[str, dict[int, float]]:
    """The episodes as one ``link_downed`` series each (OpenMetrics text); t3 by episode."""
    name = LINK_DOWNED[0].removesuffix("_total")
    lines = [f"# TYPE {name} counter"]
    t3: dict[int, float] = {}
    for ep, off in zip(episodes, scrape_offsets, strict=True):
        downs = [base_s + d for d in ep.downs_s]
        t3[ep.n] = downs[2]
        first = downs[0] - RANGE_S - 60
        k = math.ceil((first - off) / SCRAPE_S)
        labels = f'{{switch="ep{ep.n}",port="1",batch="{ep.n // batch}"}}'
        while (ts := off + k * SCRAPE_S) <= downs[-1] + 180:
            k += 1
            lines.append(f"{name}_total{labels} {7 + bisect.bisect_right(downs, ts)} {ts:.3f}")
    lines.append("# EOF")
    return "\n".join(lines) + "\n", t3


def backfill(args: argparse.Namespace) -> dict[str, Any]:
    from fabricwatch.prometheus import LocalPrometheus, build, promtool
    from fabricwatch.stack_config import free_ports

    prom_bin, tool = build()
    span_s = args.span_hours * 3600.0
    episodes = plan(args.episodes, args.seed, span_s, args.min_gap, args.max_gap)
    rng = random.Random(f"{args.seed}:phase")  # noqa: S311 - seeded phases
    offsets = [rng.uniform(0, SCRAPE_S) for _ in episodes]
    # old enough that the blocks never overlap the head, young enough for the retention
    base_s = math.floor(time.time() / 7200) * 7200 - 2 * 86400.0
    batch = 1000
    t0 = time.perf_counter()
    text, t3 = openmetrics(episodes, base_s, offsets, batch)
    figures: dict[str, Any] = {"mode": "backfill", "episodes": len(episodes), "seed": args.seed,
                               "gap_range_s": [args.min_gap, args.max_gap], "bounces": "3..5",
                               "scrape_interval_s": SCRAPE_S, "eval_interval_s": EVAL_S,
                               "samples": text.count("\n") - 2}
    with tempfile.TemporaryDirectory(prefix="scrape-vs-stream-backfill-") as tmp:
        work = Path(tmp)
        source = work / "series.om"
        source.write_text(text)
        del text
        data = work / "prometheus" / "data"
        data.mkdir(parents=True)
        c0 = time.perf_counter()
        made = promtool(["tsdb", "create-blocks-from", "openmetrics", str(source), str(data)],
                        binary=tool, timeout_s=3600)
        if made.returncode != 0:
            raise SystemExit("promtool tsdb create-blocks-from openmetrics failed: "
                             + made.stderr[-2000:])
        figures["create_blocks_s"] = round(time.perf_counter() - c0, 1)
        (port,) = free_ports(1)
        prom = LocalPrometheus(prom_bin, port, work / "prometheus",
                               "global: {evaluation_interval: 15s}\n",
                               extra_args=["--storage.tsdb.retention.time=30d",
                                           "--query.max-samples=500000000",
                                           "--query.timeout=10m"]).start()
        first_fire: dict[str, dict[int, list[float]]] = {rule: {} for rule in RULES}
        try:
            name = LINK_DOWNED[0]
            grid0 = base_s + rng.uniform(0, EVAL_S)  # the rule group's evaluation phase
            q0 = time.perf_counter()
            for b in range((len(episodes) + batch - 1) // batch):
                for rule, expr in (("changes", f'changes({name}{{batch="{b}"}}[30m]) > 2'),
                                   ("increase", f'increase({name}{{batch="{b}"}}[30m]) > 2.5')):
                    query = urllib.parse.urlencode({
                        "query": expr, "start": f"{grid0:.3f}",
                        "end": f"{base_s + span_s + 600:.3f}", "step": f"{EVAL_S:.0f}s"})
                    doc = get_json(f"{prom.url}/api/v1/query_range?{query}", timeout=600)
                    for series in doc["data"]["result"]:
                        n = int(series["metric"]["switch"].removeprefix("ep"))
                        first_fire[rule][n] = [float(ts) for ts, _v in series["values"]]
            figures["query_s"] = round(time.perf_counter() - q0, 1)
        finally:
            prom.stop()
    for rule in RULES:
        delays: list[float] = []
        early = 0
        for ep in episodes:
            times = first_fire[rule].get(ep.n, [])
            if times and times[0] < t3[ep.n]:
                early += 1  # fired on two downs: counted as detected early, delay < 0
            if times:
                delays.append(times[0] - t3[ep.n])
        figures[f"prometheus_{rule}"] = {
            **summary(delays, len(episodes) - len(delays), len(episodes)),
            "fired_before_t3": early, "alert": RULES[rule]}
    figures["compute_s"] = round(time.perf_counter() - t0, 1)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0,
                        help="real-time run length (episodes scale with it: 240 in 30 min)")
    parser.add_argument("--episodes", type=int, default=0,
                        help="episodes (default: 240 per 30 min; 20,000 with --backfill)")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--min-gap", type=float, default=2.0)
    parser.add_argument("--max-gap", type=float, default=120.0)
    parser.add_argument("--raw", default="",
                        help="also write every episode's arrivals to this JSON file")
    parser.add_argument("--backfill", action="store_true",
                        help="the 20,000-episode variant on Prometheus's own engine")
    parser.add_argument("--span-hours", type=float, default=6.0,
                        help="with --backfill: the hours the episodes' first downs spread over")
    args = parser.parse_args()
    if args.minutes <= 0 or args.episodes < 0:
        parser.error("--minutes must be positive and --episodes not negative")
    if args.backfill:
        args.episodes = args.episodes or 20_000
        save_and_print("scrape_vs_stream_backfill", backfill(args))
        return
    figures = asyncio.run(realtime(args))
    name = "scrape_vs_stream" if args.minutes >= 30 else f"scrape_vs_stream_{args.minutes:g}min"
    save_and_print(name, figures)


if __name__ == "__main__":
    main()
