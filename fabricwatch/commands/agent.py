"""``fabricwatch agent``: the host agent, one per GPU node (``collectors.live.host_agent``).

Reads ``<sysfs-root>/class/infiniband`` (and ``ethtool -S`` for RoCE ports) every
``--interval`` and publishes one ``counters`` message per round for the host, and a
``port_event`` for a port whose state changed. ``--once --print`` reads once and prints the
contract JSON lines instead of publishing (exit 1 when a port could not be read: the line is
printed all the same). ``--host`` defaults to the short host name. Metrics (collector
``host_agent``) on ``FABRICWATCH_METRICS_PORT``. Exit 2 on bad input (no sysfs tree there).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import click

from collectors.live.host_agent import AgentConfig, AgentError, HostAgent, run_agent
from runtime.settings import load_settings
from schemas import encode


@click.command("agent")
@click.option("--sysfs-root", type=click.Path(file_okay=False, path_type=Path),
              default=Path("/sys"), show_default=True,
              help="the sysfs mount (a container's view of the host's /sys, or a test tree)")
@click.option("--host", default=None, help="host name (default: this host's short name)")
@click.option("--interval", type=click.FloatRange(0.1, 3600), default=1.0, show_default=True,
              help="seconds between readings")
@click.option("--ethtool", "ethtool", default="ethtool", show_default=True,
              help="the ethtool executable (for RoCE ports)")
@click.option("--once", is_flag=True, help="one reading, then exit")
@click.option("--print", "print_", is_flag=True,
              help="print contract JSON lines instead of publishing")
def agent(sysfs_root: Path, host: str | None, interval: float, ethtool: str, once: bool,
          print_: bool) -> None:
    """Read this host's HCA ports every interval; publish counters and port events."""
    settings = load_settings()
    name = host or socket.gethostname().split(".", 1)[0]
    try:
        config = AgentConfig(fabric=settings.fabric, host=name, sysfs_root=sysfs_root,
                             interval_s=interval, ethtool=ethtool)
        host_agent = HostAgent(config)
        host_agent.check()
    except AgentError as exc:
        click.echo(f"fabricwatch agent: {exc}", err=True)
        raise SystemExit(2) from None
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s",
                        stream=sys.stderr)

    def printed(events: list[Any]) -> None:
        out = sys.stdout.buffer
        for event in events:
            out.write(encode(event) + b"\n")
        out.flush()

    if once:
        events = asyncio.run(host_agent.round())
        if print_:
            printed(events)
        else:
            asyncio.run(_publish_once(settings.kafka.bootstrap_servers, events))
        raise SystemExit(1 if host_agent.last_errors else 0)

    from runtime.metrics import collector_round

    def on_round(ok: int, failed: int, elapsed_s: float) -> None:
        collector_round("host_agent", published=ok, failed=failed, elapsed_s=elapsed_s)

    if settings.metrics_port is not None:
        from runtime.metrics import start_metrics_server

        start_metrics_server(settings.metrics_port)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        if print_:
            await run_agent(host_agent, printed, stop, on_round)
            return
        from collectors.publish import Publisher

        async with Publisher(settings.kafka.bootstrap_servers,
                             client_id=f"fabricwatch-agent-{name}",
                             columnar=settings.kafka.columnar_counters) as pub:
            async def emit(events: list[Any]) -> None:
                await pub.send_many(events)
                await pub.flush()

            await run_agent(host_agent, emit, stop, on_round)

    asyncio.run(main())


async def _publish_once(bootstrap: str, events: list[Any]) -> None:
    from collectors.publish import Publisher

    async with Publisher(bootstrap, client_id="fabricwatch-agent") as pub:
        await pub.send_many(events)


COMMANDS: list[click.Command] = [agent]
