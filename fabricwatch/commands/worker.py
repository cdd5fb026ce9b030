"""``fabricwatch worker``: run the stream processors (the Faust app) against the broker.

``--workers N`` starts N worker processes in one consumer group; Kafka spreads the input
partitions over them (``fabric.port-events`` and ``fabric.counters`` have 12 partitions by
default, ``settings.kafka.partitions`` overrides), so N above the partition count adds
nothing. Each process keeps its RocksDB state in ``state_dir/streams/worker-<i>``; after a
rebalance a worker rebuilds a moved partition's state from its changelog topic. The
embedded ledger (chdb) allows one writer process: with it, only worker 0 runs the ledger
sink (set ``FABRICWATCH_CLICKHOUSE_URL`` for a ledger server every worker writes to;
``fabric.detections`` is always complete). Without ``--ledger`` the sink is on only with a
ledger server: the embedded ledger has one owner process, the ledger's ingest, which takes
detections and dead letters from their topics. ``--agents traps`` and ``--agents rest``
(one of each, the same ``--app-id``) run the trap path (flap, correlator, breaker) apart
from the counters and the other detectors, so a counters backlog does not delay a trap's
detection (``streams.app``). Exit code 2 on a bad policy or option.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import sys
from pathlib import Path
from types import FrameType

import click

from runtime.settings import load_settings
from schemas.errors import ContractError
from schemas.policy import Policy


@click.command("worker")
@click.option("--policy", "policy_path", type=click.Path(path_type=Path, dir_okay=False),
              default=None, help="Policy YAML (default: settings.policy_path, else built-in).")
@click.option("--workers", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Worker processes in the consumer group (at most the partition count "
                   "is useful).")
@click.option("--ledger/--no-ledger", default=None,
              help="Also write detections and dead letters to the ledger through the "
                   "batching sink. Default: on with a ClickHouse server "
                   "(FABRICWATCH_CLICKHOUSE_URL), off with the embedded ledger, whose one "
                   "owner process (the ledger's ingest) takes them from the topics.")
@click.option("--loglevel", type=click.Choice(["debug", "info", "warning", "error"]),
              default="info", show_default=True)
@click.option("--app-id", default="fabricwatch-streams", show_default=True,
              help="Faust app id: the consumer group and the prefix of internal topics.")
@click.option("--agents", type=click.Choice(["all", "traps", "rest"]), default="all",
              show_default=True,
              help="The agents this worker runs: all of them, or the trap path (flap, "
                   "correlator, breaker) or the rest, each in its own process and consumer "
                   "group beside the other, so that traps never wait behind counters.")
@click.option("--index", "worker_index", type=click.IntRange(0, 63), default=0, hidden=True)
def worker_command(policy_path: Path | None, workers: int, ledger: bool | None, loglevel: str,
                   app_id: str, agents: str, worker_index: int) -> None:
    """Run the stream processors until stopped (SIGINT/SIGTERM)."""
    settings = load_settings()
    if ledger is None:
        ledger = settings.clickhouse_url is not None
    if agents == "rest" and settings.clickhouse_url is None:
        # chdb allows one process per data folder: the trap path's worker, which emits the
        # detections, is the one that may write the embedded ledger
        ledger = False
    path = policy_path or settings.policy_path
    try:
        policy = Policy.load(path)
    except ContractError as exc:
        where = f" at {exc.path}" if exc.path else ""
        click.echo(f"error: {path}{where}: {exc.reason}", err=True)
        raise SystemExit(2) from None
    if not app_id.replace("-", "").replace("_", "").replace(".", "").isalnum():
        click.echo(f"error: --app-id {app_id!r}: use letters, digits, '-', '_', '.'", err=True)
        raise SystemExit(2)
    if workers > 1:
        raise SystemExit(_supervise(workers, path, ledger, loglevel, app_id, agents,
                                    embedded=settings.clickhouse_url is None))
    import faust

    from streams.app import StreamsApp

    logging.basicConfig(level=loglevel.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from streams.topology.plan import PlanError

    try:
        sa = StreamsApp(settings, policy, ledger=ledger, worker_index=worker_index,
                        app_id=app_id, agents=agents)
    except PlanError as exc:
        click.echo(f"error: {exc}", err=True)
        raise SystemExit(2) from None
    if settings.metrics_port is not None:  # one port per supervised worker process
        from runtime.metrics import start_metrics_server

        # the trap path's processes beside the rest's on one host: ports 64 further on
        start_metrics_server(settings.metrics_port + worker_index
                             + (64 if agents == "traps" else 0))
    from runtime.metrics import STREAM_AGENTS

    STREAM_AGENTS.labels(agents).set(1)
    asyncio.run(sa.ensure_topics())
    sa.load_pins()  # the pinned probe baselines, before consuming
    from runtime import collector

    collector.tune(settings.gc_young_threshold)
    worker = faust.Worker(sa.app, loglevel=loglevel.upper(), quiet=True,
                          redirect_stdouts=False, override_logging=False)
    worker.execute_from_commandline()


def _supervise(workers: int, policy: Path | None, ledger: bool, loglevel: str, app_id: str,
               agents: str, *, embedded: bool) -> int:
    """Start ``workers`` single-worker processes and wait; SIGTERM/SIGINT stop them all."""
    procs: list[subprocess.Popen[bytes]] = []
    for i in range(workers):
        args = [sys.executable, "-c", "from fabricwatch.cli import main; main()", "worker",
                "--workers", "1", "--index", str(i), "--loglevel", loglevel,
                "--app-id", app_id, "--agents", agents]
        if policy is not None:
            args += ["--policy", str(policy)]
        # chdb allows one process per data folder: only worker 0 writes the embedded ledger
        args.append("--no-ledger" if not ledger or (embedded and i > 0) else "--ledger")
        procs.append(subprocess.Popen(args))  # noqa: S603 - fixed argv, validated options

    def stop(signum: int, frame: FrameType | None) -> None:
        for p in procs:
            if p.poll() is None:
                p.terminate()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    codes = [p.wait() for p in procs]
    return max(codes, default=0)


COMMANDS: list[click.Command] = [worker_command]
