"""``fabricwatch tail opensm PATH``: follow opensm's log and publish port events.

The position is kept in ``<state_dir>/tail/opensm-<hash of PATH>.json`` (rotation, truncation
and restarts are handled by ``collectors.live.tail_opensm.LogFollower``). LIDs and GUIDs are
resolved through the latest ``topology`` of ``settings.fabric`` read from Kafka. A trap 128 is
resolved to ports by an ``iblinkinfo`` scan (``--lab`` against the lab; ``--ca``/``--ca-port``
pick the local HCA; ``--no-scan`` publishes only what the log itself names). ``--tz``: the
zone opensm's host writes its local time in. Exit 2 on bad input.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import signal
from pathlib import Path
from typing import Any

import click

from collectors.errors import ParseError
from collectors.live.tail_opensm import LatestLids, LogFollower, OpensmTail, PortScan, follow_topology
from collectors.live.tools import ToolRunner, check_arg
from collectors.publish import Publisher
from collectors.smlog import zone
from fabricwatch.lab import LabError, LabStack
from runtime.settings import load_settings


@click.group("tail")
def tail() -> None:
    """Followers of fabric logs."""


@tail.command("opensm")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--tz", default="UTC", show_default=True, help="IANA zone of the log's times")
@click.option("--lab", is_flag=True, help="scan ports in the lab in the state folder")
@click.option("--ca", default=None, help="local HCA (-C) for the port scan")
@click.option("--ca-port", type=click.IntRange(1, 254), default=None)
@click.option("--no-scan", is_flag=True, help="do not resolve traps with iblinkinfo")
@click.option("--poll", "poll_s", type=click.FloatRange(0.05, 60), default=0.2,
              show_default=True)
def opensm(path: Path, tz: str, lab: bool, ca: str | None, ca_port: int | None, no_scan: bool,
           poll_s: float) -> None:
    """Follow opensm's log at PATH; publish port_event to fabric.port-events."""
    settings = load_settings()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        zone(tz)
        runner = LabStack(settings.state_dir).tool_runner() if lab else ToolRunner(
            ca=check_arg(ca) if ca else None, ca_port=ca_port)
    except (LabError, ValueError, ParseError) as exc:
        raise click.UsageError(str(exc)) from None
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    state = settings.state_dir / "tail" / f"opensm-{digest}.json"

    if settings.metrics_port is not None:
        from runtime.metrics import start_metrics_server

        start_metrics_server(settings.metrics_port)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        lids = LatestLids()
        ready = asyncio.Event()
        topo = asyncio.create_task(follow_topology(settings.kafka.bootstrap_servers,
                                                   settings.fabric, lids.update, stop,
                                                   ready=ready))
        try:
            await asyncio.wait_for(ready.wait(), 30)
        except TimeoutError:
            logging.warning("no topology read within 30 s; LIDs resolve once one arrives")
        async with Publisher(settings.kafka.bootstrap_servers,
                             client_id="fabricwatch-tail-opensm") as pub:
            follower = LogFollower(path, state)
            tailer = OpensmTail(follower, pub, fabric=settings.fabric, tz=tz, lids=lids,
                                peers=lids.peers,
                                scan=None if no_scan else PortScan(runner, settings.fabric))
            metrics = asyncio.create_task(_export_stats(tailer.stats, stop))
            try:
                await tailer.run(stop, poll_s=poll_s)
            finally:
                metrics.cancel()
                follower.close()
                stop.set()
                await asyncio.gather(topo, return_exceptions=True)

    asyncio.run(main())


async def _export_stats(stats: Any, stop: asyncio.Event, every_s: float = 5.0) -> None:
    """The follower's running totals as collector metrics, every few seconds."""
    from runtime.metrics import collector_round

    seen = (0, 0)
    while not stop.is_set():
        await asyncio.sleep(every_s)
        now = (stats.events, stats.unresolved + stats.scan_failures)
        collector_round("opensm", published=now[0] - seen[0], failed=now[1] - seen[1])
        seen = now


COMMANDS: list[click.Command] = [tail]
