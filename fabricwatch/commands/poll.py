"""``fabricwatch poll ibdiags``: the infiniband-diags poller (topology and counters to Kafka).

Runs ``ibnetdiscover`` every ``--discover-every`` and ``perfquery``/``perfquery -x`` per switch
every ``--every`` (``collectors.live.poll_ibdiags``), publishing to the contract topics on
``settings.kafka.bootstrap_servers``. ``--lab`` runs the tools against the lab in the state
folder (``fabricwatch lab up``); ``--ca``/``--ca-port`` pick the local HCA on a real host.
``--once`` does one discovery and one sampling round, prints the report and exits (1 when a
switch failed). Exit 2 on bad input.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal

import click

from collectors.live.poll_ibdiags import IbdiagsPoller, PollConfig, PollReport
from collectors.live.tools import ToolRunner, check_arg
from collectors.publish import Publisher
from fabricwatch.lab import LabError, LabStack
from runtime.settings import load_settings


def _report(rep: PollReport) -> None:
    from runtime.metrics import collector_round

    collector_round("ibdiags", published=len(rep.published), failed=len(rep.failed),
                    elapsed_s=rep.elapsed_s)
    click.echo(json.dumps({"ts": rep.ts, "published": sorted(rep.published),
                           "failed": rep.failed, "partial": rep.partial,
                           "sm_failed": rep.sm_failed,
                           "elapsed_s": round(rep.elapsed_s, 3)}))


@click.group("poll")
def poll() -> None:
    """Pollers of fabric tools."""


@poll.command("ibdiags")
@click.option("--every", type=click.FloatRange(0.5, 86400), default=30.0, show_default=True,
              help="sampling interval, seconds")
@click.option("--discover-every", type=click.FloatRange(1, 86400), default=300.0,
              show_default=True)
@click.option("--timeout", type=click.FloatRange(0.5, 3600), default=20.0, show_default=True,
              help="per tool run")
@click.option("--concurrency", type=click.IntRange(1, 256), default=8, show_default=True)
@click.option("--ca", default=None, help="local HCA (-C)")
@click.option("--ca-port", type=click.IntRange(1, 254), default=None, help="local HCA port (-P)")
@click.option("--lab", is_flag=True, help="against the lab in the state folder")
@click.option("--once", is_flag=True, help="one round, then exit")
def ibdiags(every: float, discover_every: float, timeout: float, concurrency: int,
            ca: str | None, ca_port: int | None, lab: bool, once: bool) -> None:
    """Poll ibnetdiscover and perfquery; publish topology and counters."""
    settings = load_settings()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        runner = LabStack(settings.state_dir).tool_runner() if lab else ToolRunner(
            ca=check_arg(ca) if ca else None, ca_port=ca_port)
    except (LabError, ValueError) as exc:
        raise click.UsageError(str(exc)) from None
    if settings.metrics_port is not None and not once:
        from runtime.metrics import start_metrics_server

        start_metrics_server(settings.metrics_port)
    config = PollConfig(fabric=settings.fabric, sample_interval_s=every,
                        discover_interval_s=discover_every, timeout_s=timeout,
                        concurrency=concurrency)

    async def main() -> int:
        async with Publisher(settings.kafka.bootstrap_servers,
                             client_id="fabricwatch-poll-ibdiags",
                             columnar=settings.kafka.columnar_counters) as pub:
            poller = IbdiagsPoller(config, pub, runner)
            if once:
                await poller.discover()
                rep = await poller.sample()
                _report(rep)
                return 1 if rep.failed else 0
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            await poller.run(stop, on_report=_report)
            return 0

    raise SystemExit(asyncio.run(main()))


COMMANDS: list[click.Command] = [poll]
